"""What the soak (``make soak``, :mod:`soak`) watches while it runs and reads at the end: the RSS of
the long-running processes and every table's lag (a sampler thread), the parts a fault's restart
left down (restarted, and recorded), and Airflow's runs and failed tries (the REST API and the
task logs).
"""

from __future__ import annotations

import logging
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cdclake.settings import PROJECT_ROOT
from cdclake_dev import engine
from cdclake_dev.parts.airflow import AirflowProcesses
from cdclake_dev.process import LOOPBACK, port_open
from cdclake_dev.production import Topology
from cdclake_dev.task_logs import error_events
from soak_faults import start_engine
from soak_tables import Background

log = logging.getLogger(__name__)


def tree_rss(pid: int | None) -> int | None:
    """RSS of ``pid`` and its descendants, bytes (``None``: no such process)."""
    import psutil

    if pid is None:
        return None
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return None
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def own_rss(pid: int | None) -> int | None:
    """RSS of ``pid`` alone, bytes (``None``: no such process)."""
    import psutil

    if pid is None:
        return None
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.NoSuchProcess:
        return None


LIVE_HEAP_EVERY_S = 300.0
"""How often the watcher measures the Spark Connect server's live heap (:func:`jvm_live_heap`):
each measure forces a full collection, so not at every sample."""

_HEAP_USED = re.compile(r"^\s*\S.*?\s+total \d+K, used (?P<used>\d+)K", re.MULTILINE)


def jcmd_executable() -> str | None:
    """``jcmd`` of the JDK whose ``java`` the parts run (:func:`cdclake_dev.system.java_executable`),
    else ``jcmd`` on ``PATH``; ``None`` for a runtime without it (a JRE)."""
    import shutil

    from cdclake_dev.system import java_executable

    beside = Path(java_executable()).resolve().parent / "jcmd"
    return str(beside) if beside.exists() else shutil.which("jcmd")


def heap_used(heap_info: str) -> int | None:
    """The heap in use (bytes) from ``jcmd <pid> GC.heap_info``'s output: the sum of its
    ``total ..K, used ..K`` lines, one for a collector of one heap (G1: ``garbage-first heap
    total 57344K, used 5956K [...]``), one per generation for the others (the parallel collector,
    which the driver runs, ``cdclake.spark.session.DRIVER_GC_OPTIONS``: ``PSYoungGen total ..K,
    used ..K`` and ``ParOldGen total ..K, used ..K``). ``None``: no such line."""
    found = [int(m["used"]) for m in _HEAP_USED.finditer(heap_info)]
    return sum(found) * 1024 if found else None


def _java_pid(pid: int | None) -> int | None:
    """The first ``java`` process of the tree of ``pid`` (a wrapper script or the JVM itself), or
    ``None``: no such process."""
    import psutil

    if pid is None:
        return None
    try:
        root = psutil.Process(pid)
        java = next((p for p in (root, *root.children(recursive=True)) if p.name() == "java"), None)
    except psutil.NoSuchProcess:
        return None
    return None if java is None else java.pid


def jvm_live_heap(pid: int | None) -> tuple[int, int] | None:
    """``(java pid, bytes)``: the heap a JVM holds right after a full collection (``jcmd <pid>
    GC.run``, then ``GC.heap_info``), its live set. A JVM's RSS grows towards ``-Xmx`` as load needs
    and is not given back, so RSS alone does not tell a leak from a heap that grew; the live set
    does. ``pid`` may be a wrapper: the first ``java`` process of its tree is measured. ``None``:
    no JVM, no ``jcmd``, or it did not answer (a paused or dying process)."""
    import subprocess

    jcmd, java = jcmd_executable(), _java_pid(pid)
    if jcmd is None or java is None:
        return None
    try:
        subprocess.run([jcmd, str(java), "GC.run"], capture_output=True, timeout=60, check=True)
        info = subprocess.run([jcmd, str(java), "GC.heap_info"], capture_output=True, text=True, timeout=60)
    except (subprocess.SubprocessError, OSError):
        return None
    used = heap_used(info.stdout)
    return None if used is None else (java, used)


def jvm_heap_dump(pid: int | None, path: Path) -> Path | None:
    """Write the live objects of the JVM of process tree ``pid`` (the first ``java`` in it) to
    ``path``, an HPROF file (``jcmd <pid> GC.heap_dump``, which collects first): the paths from the
    garbage collector's roots to what a long-running server holds. ``None``: no JVM or ``jcmd``, or
    it did not answer."""
    import subprocess

    jcmd, java = jcmd_executable(), _java_pid(pid)
    if jcmd is None or java is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run([jcmd, str(java), "GC.heap_dump", str(path)], capture_output=True, timeout=600, check=True)
    except (subprocess.SubprocessError, OSError):
        return None
    return path if path.exists() else None


_HISTOGRAM_ROW = re.compile(r"^\s*\d+:\s+(?P<instances>\d+)\s+(?P<bytes>\d+)\s+(?P<name>\S+)", re.MULTILINE)


def parse_class_histogram(text: str) -> dict[str, tuple[int, int]]:
    """``jcmd <pid> GC.class_histogram``'s rows (`` 1:  12  3456  java.lang.String (java.base@17)``)
    as class name -> (instances, bytes)."""
    return {m["name"]: (int(m["instances"]), int(m["bytes"])) for m in _HISTOGRAM_ROW.finditer(text)}


def jvm_class_histogram(java_pid: int) -> dict[str, tuple[int, int]] | None:
    """The live objects of a JVM by class (``jcmd <pid> GC.class_histogram``, which collects first):
    class name -> (instances, bytes). ``None``: no ``jcmd``, or the JVM did not answer."""
    import subprocess

    jcmd = jcmd_executable()
    if jcmd is None:
        return None
    try:
        out = subprocess.run(
            [jcmd, str(java_pid), "GC.class_histogram"], capture_output=True, text=True, timeout=120, check=True
        )
    except (subprocess.SubprocessError, OSError):
        return None
    return parse_class_histogram(out.stdout) or None


def class_growth(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], top: int = 25
) -> list[dict[str, Any]]:
    """The ``top`` classes whose live bytes grew most from ``before`` to ``after`` (two
    :func:`jvm_class_histogram` of one process): ``{"class", "instances", "mib_before", "mib_after",
    "grew_mib"}`` each, greatest growth first; only classes that grew."""
    rows = []
    for name, (instances, size) in after.items():
        old_instances, old_size = before.get(name, (0, 0))
        if size > old_size:
            rows.append(
                {
                    "class": name,
                    "instances": [old_instances, instances],
                    "mib_before": round(old_size / 2**20, 2),
                    "mib_after": round(size / 2**20, 2),
                    "grew_mib": round((size - old_size) / 2**20, 2),
                }
            )
    rows.sort(key=lambda r: -r["grew_mib"])
    return rows[:top]


def growth_figures(samples: list[tuple[float, int, int]], start: float, end: float) -> dict[str, Any]:
    """Of ``(epoch s, pid, bytes)`` samples over ``[start, end]``: their count, the peak (MiB),
    the pids seen (a restart is a new pid), and the growth over the last half: the median of the
    last eighth over that of the eighth after the half-way point (``None`` when either has no
    sample), with how long before half-time the process of the last sample was first seen
    (negative: it started within the half, so the growth includes a young JVM's)."""
    half, eighth = (start + end) / 2, (end - start) / 8
    first = [b for at, _, b in samples if half <= at < half + eighth]
    last = [b for at, _, b in samples if at >= end - eighth]
    growth = round(100 * (statistics.median(last) / statistics.median(first) - 1), 1) if first and last else None
    last_pid = samples[-1][1] if samples else None
    seen = min((at for at, pid, _ in samples if pid == last_pid), default=None)
    return {
        "samples": len(samples),
        "peak_mib": round(max((b for _, _, b in samples), default=0) / 2**20),
        "pids": len({pid for _, pid, _ in samples}),
        "pids_last_half": len({pid for at, pid, _ in samples if at >= half}),
        "growth_last_half_pct": growth,
        "running_before_half_s": None if seen is None else round(half - seen),
    }


class Watcher(Background):
    """A thread sampling every ``interval_s`` seconds: the tree RSS of the Spark Connect server and
    of the Airflow scheduler; every table's ``lag_ms`` (:func:`cdclake.pipeline.status.status_of_tables`);
    and the parts that should run: one found down while no fault holds its target (``busy``) is
    started again and recorded in :attr:`restarts`. Once every table exists it unpauses
    ``cdc_reconcile`` and ``cdc_maintenance`` (their first scheduled runs come then)."""

    def __init__(
        self,
        topology: Topology,
        airflow: AirflowProcesses,
        freshness_minutes: int,
        busy: Callable[[str], bool],
        interval_s: float = 15.0,
    ) -> None:
        self.topology = topology
        self.airflow = airflow
        self.target_ms = freshness_minutes * 60_000
        self.busy = busy
        self.interval_s = interval_s
        self.memory: dict[str, list[tuple[float, int, int]]] = {"spark-connect": [], "airflow-scheduler": []}
        """Per process: (epoch s, pid, tree RSS bytes)."""
        self.live_heap: list[tuple[float, int, int]] = []
        """The Spark Connect server's (epoch s, java pid, heap bytes after a full collection)."""
        self._live_heap_at = 0.0
        self.histograms: dict[int, list[tuple[float, dict[str, tuple[int, int]]]]] = {}
        """The engine's class histograms per java pid: its first and its latest ``(epoch s, histogram)``
        (:func:`jvm_class_histogram`, taken with each live-heap measure)."""
        self.lag: dict[str, list[tuple[float, int | None]]] = {}
        self.restarts: list[dict[str, Any]] = []
        self.sample_errors: Counter[str] = Counter()
        self.daily_unpaused = False
        self._scheduler_stale_since: float | None = None
        super().__init__("soak-watch")

    def _run(self) -> None:
        from cdclake.io.catalog import load_catalog
        from cdclake.io.kafka import KafkaClients
        from cdclake.model.config import load_tables

        tables = list(load_tables(self.topology.tables_config).tables)
        catalog = load_catalog(self.topology.task_settings())
        kafka = KafkaClients(self.topology.kafka_config())
        while not self._stop.wait(self.interval_s):
            for step in (self._memory, self._restart_down):
                try:
                    step()
                except Exception as e:  # a part down mid-sample: counted, sampled again next time
                    self._sample_failed(step.__name__, e)
            try:
                self._lag(catalog, kafka, tables)
            except Exception as e:
                self._sample_failed("lag", e)

    def _sample_failed(self, step: str, error: Exception) -> None:
        key = f"{step}: {type(error).__name__}"
        if key not in self.sample_errors:
            log.warning("soak watcher, %s: %s", step, str(error)[:300])
        self.sample_errors[key] += 1

    def _memory(self) -> None:
        now = time.time()
        pids = {
            "spark-connect": engine.engine_status(self.topology.settings).pid,
            "airflow-scheduler": self.airflow.procs["scheduler"].pid,
        }
        for name, pid in pids.items():
            # the scheduler alone: its LocalExecutor workers' children are the running tasks, whose
            # memory comes and goes with the applies (the first 60-minute run measured the tree)
            rss = tree_rss(pid) if name == "spark-connect" else own_rss(pid)
            if pid is not None and rss is not None:
                self.memory[name].append((now, pid, rss))
        if now - self._live_heap_at >= LIVE_HEAP_EVERY_S:
            live = jvm_live_heap(pids["spark-connect"])
            if live is not None:
                self.live_heap.append((now, *live))
                self._live_heap_at = now
                histogram = jvm_class_histogram(live[0])
                if histogram is not None:
                    kept = self.histograms.setdefault(live[0], [])
                    if kept:
                        kept[1:] = [(now, histogram)]
                    else:
                        kept.append((now, histogram))

    def _lag(self, catalog: Any, kafka: Any, tables: list[Any]) -> None:
        from cdclake.pipeline.status import status_of_tables

        now = time.time()
        statuses = status_of_tables(catalog, kafka, tables)
        for s in statuses:
            self.lag.setdefault(s.name, []).append((now, s.lag_ms))
        if not self.daily_unpaused and all(s.table_exists for s in statuses):
            for dag_id in ("cdc_reconcile", "cdc_maintenance"):
                self.airflow.set_paused(dag_id, False)
            self.daily_unpaused = True

    def _restart_down(self) -> None:
        t, airflow = self.topology, self.airflow
        checks: list[tuple[str, Callable[[], bool], Callable[[], object]]] = [
            ("spark-connect", lambda: engine.engine_status(t.settings).running, lambda: start_engine(t)),
            ("kafka-connect", lambda: port_open(LOOPBACK, t.settings.connect_port), t.start_connector),
            ("airflow-scheduler", lambda: all(d.running() for d in airflow.procs.values()), airflow.start),
        ]
        for target, running, start in checks:
            if not self.busy(target) and not running():
                log.warning("%s found down while no fault holds it: starting it", target)
                at = time.time()
                start()
                self.restarts.append({"target": target, "at": at, "took_s": round(time.time() - at, 1)})
        self._probe_scheduler()

    def _probe_scheduler(self) -> None:
        """The liveness probe docs/deploying.md asks a deployment for: a scheduler whose heartbeat
        the api-server has reported stale for :data:`SCHEDULER_LIVENESS_S` is killed with its
        LocalExecutor workers and started again. A scheduler whose loop failed (its database
        restarted) stays alive while its executor waits for the running tries, scheduling nothing."""
        healthy = self.airflow.scheduler_healthy()
        if healthy is not False or self.busy("airflow-scheduler"):
            self._scheduler_stale_since = None
            return
        now = time.time()
        self._scheduler_stale_since = self._scheduler_stale_since or now
        if now - self._scheduler_stale_since < SCHEDULER_LIVENESS_S:
            return
        log.warning(
            "airflow-scheduler without a heartbeat for %.0f s: killing and starting it",
            now - self._scheduler_stale_since,
        )
        self.airflow.procs["scheduler"].stop(hard=True)
        self.airflow.start()
        self.restarts.append(
            {"target": "airflow-scheduler", "at": now, "took_s": round(time.time() - now, 1), "why": "no heartbeat"}
        )
        self._scheduler_stale_since = None

    def lag_figures(self) -> dict[str, Any]:
        """Per table the greatest ``lag_ms`` seen (s) and the longest stretch of samples above the
        freshness target (s); and the longest of all, with its table."""
        out: dict[str, Any] = {"tables": {}, "target_s": self.target_ms / 1000}
        longest, longest_table = 0.0, None
        for name, samples in self.lag.items():
            stretch, since = 0.0, None
            for at, lag in samples:
                if lag is not None and lag > self.target_ms:
                    since = at if since is None else since
                    stretch = max(stretch, at - since + self.interval_s)
                else:
                    since = None
            known = [lag for _, lag in samples if lag is not None]
            out["tables"][name] = {
                "max_lag_s": round(max(known) / 1000, 1) if known else None,
                "behind_target_s": stretch,
            }
            if stretch > longest:
                longest, longest_table = stretch, name
        out["longest_behind_target_s"] = longest
        out["longest_behind_table"] = longest_table
        return out

    def memory_figures(self, start: float, end: float) -> dict[str, Any]:
        """Per process, :func:`growth_figures` of its RSS; and ``spark-connect live heap``, those
        of the engine's live heap (:func:`jvm_live_heap`, every :data:`LIVE_HEAP_EVERY_S`) with
        its samples as ``series``: ``[minutes since start, pid, MiB]`` each, so that a report
        tells a heap that levels off from one that keeps growing; and ``classes``: what grew in the
        last engine process between its first and its latest class histogram (:func:`class_growth`,
        with ``from_min``/``to_min``: minutes since the start), to tell what a growing heap holds."""
        out = {name: growth_figures(samples, start, end) for name, samples in self.memory.items()}
        out["spark-connect live heap"] = growth_figures(self.live_heap, start, end) | {
            "series": [[round((at - start) / 60, 1), pid, round(b / 2**20)] for at, pid, b in self.live_heap]
        }
        last_pid = self.live_heap[-1][1] if self.live_heap else None
        kept = self.histograms.get(last_pid, []) if last_pid is not None else []
        if len(kept) == 2:
            (first_at, first), (last_at, last) = kept
            out["spark-connect live heap"]["classes"] = {
                "from_min": round((first_at - start) / 60, 1),
                "to_min": round((last_at - start) / 60, 1),
                "grew": class_growth(first, last),
            }
        return out


# --- Airflow's runs and failed tries ----------------------------------------------------------------


def error_line(log_file: Path) -> str:
    """The first error of an Airflow 3 task log (JSON lines): ``<exception type>: <first line of
    its message>`` from the first ``error`` event, else that event's text. A first line that ends
    with a colon announces what follows (gRPC's ``<_InactiveRpcError of RPC that terminated with:``
    then ``status = ...`` and ``details = ...``): the next two lines are joined to it."""
    try:
        events = error_events(log_file.read_text(errors="replace"))
    except FileNotFoundError:
        return "(no task log)"
    if not events:
        return "(no error in the task log: the process was killed)"
    event = events[0]
    for detail in event.get("error_detail") or []:
        message = [line.strip() for line in str(detail.get("exc_value") or "").strip().splitlines()]
        first = " ".join(message[:3]) if message and message[0].endswith(":") else (message[0] if message else "")
        return f"{detail.get('exc_type')}: {first}"[:300]
    return str(event.get("event") or "").strip().splitlines()[0][:300] if event.get("event") else "(empty error)"


SCHEDULER_LIVENESS_S = 60.0
"""How long the scheduler may report no heartbeat before the watcher restarts it (a Kubernetes
liveness probe's ``periodSeconds`` x ``failureThreshold``)."""

ERRORS_DOCS = (PROJECT_ROOT / "docs" / "errors.md", PROJECT_ROOT / "docs" / "operations.md")
"""The docs one of which must explain every failed try's error: the reference of errors ("Errors
and what to do", an entry per error) and the runbook."""

_PLACEHOLDER = re.compile(r"<[^<>`]*>|\.\.\.|…")


def documented_errors(*docs: str) -> list[tuple[str, re.Pattern[str]]]:
    """What the docs ``docs`` (their texts, :data:`ERRORS_DOCS`'s) explain, as ``(section,
    pattern)``: each ``##``-``####`` heading's exception names (``ReconcileError, DriftError``:
    both), and the first quoted message of each bullet under a heading ``Other failures``, its
    ``<placeholders>`` and ``...`` matching anything and its white space any white space.

    Raises:
        ValueError: ``docs`` explain no error (they are not the docs of the errors).
    """
    out: list[tuple[str, re.Pattern[str]]] = []
    for doc in docs:
        for heading, body in re.findall(r"\n#{2,4} ([^\n]+)\n(.*?)(?=\n#{1,4} |\Z)", "\n" + doc, flags=re.S):
            names = re.findall(r"\b(\w+Error)\b", heading)
            out += [(heading, re.compile(rf"\b{name}\b")) for name in names]
            if heading.strip() != "Other failures":
                continue
            for bullet in re.split(r"\n\* ", "\n" + body)[1:]:
                quoted = re.search(r"`([^`]+)`", bullet)
                if quoted is None:
                    continue
                out.append((f"{heading}: {_one_line(quoted.group(1))[:60]}", _message_pattern(quoted.group(1))))
            for message in re.findall(r"`(\([^`]+\))`", body):  # the soak's own words, e.g. a killed try
                out.append((f"{heading}: {_one_line(message)}", _message_pattern(message)))
    if not out:
        raise ValueError("the docs explain no error: no heading names one (docs/errors.md has an entry per error)")
    return out


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _message_pattern(quoted: str) -> re.Pattern[str]:
    """A documented message as a pattern: its ``<placeholders>`` and ``...`` match anything, its
    white space (a Markdown line break too) any white space."""
    pieces = [re.escape(_one_line(p)) for p in _PLACEHOLDER.split(quoted)]
    return re.compile(".*?".join(p.replace("\\ ", r"\s+") for p in pieces if p.strip()), flags=re.S)


def explained_by(line: str, documented: list[tuple[str, re.Pattern[str]]]) -> str | None:
    """The section of the docs of errors that explains the error ``line``
    (:func:`documented_errors`), or ``None``."""
    return next((section for section, pattern in documented if pattern.search(line)), None)


def runs_and_tries(airflow: AirflowProcesses, dag_ids: set[str], logs: Path) -> dict[str, Any]:
    """The runs of ``dag_ids`` by DAG and state; their task instances' failed tries (every try
    before the last, and the last when it failed) with the first error line of each try's log
    (``logs``: the base log folder), counted by line; the runs that failed (not recovered by
    Airflow's retries)."""
    runs = [r for d in sorted(dag_ids) for r in airflow.get_all(f"dags/{d}/dagRuns", "dag_runs")]
    tis = [ti for ti in airflow.get_all("dags/~/dagRuns/~/taskInstances", "task_instances") if ti["dag_id"] in dag_ids]
    errors: Counter[str] = Counter()
    failed_tries = []
    for ti in tis:
        last = int(ti.get("try_number") or 0)
        failed = range(1, last + 1) if ti["state"] == "failed" else range(1, last)
        for attempt in failed:
            found = sorted(
                (logs / f"dag_id={ti['dag_id']}" / f"run_id={ti['dag_run_id']}" / f"task_id={ti['task_id']}").rglob(
                    f"attempt={attempt}.log"
                )
            )
            line = error_line(found[0]) if found else "(no task log)"
            errors[line] += 1
            failed_tries.append(
                {
                    "dag_id": ti["dag_id"],
                    "run_id": ti["dag_run_id"],
                    "task_id": ti["task_id"],
                    "try": attempt,
                    "error": line,
                }
            )
    by_state: Counter[str] = Counter(f"{r['dag_id']}: {r['state']}" for r in runs)
    documented = documented_errors(*(doc.read_text() for doc in ERRORS_DOCS))
    return {
        "runs": len(runs),
        "runs_by_dag_and_state": dict(sorted(by_state.items())),
        "failed_tries": len(failed_tries),
        "failed_try_errors": dict(errors.most_common()),
        "explained_by": {line: explained_by(line, documented) for line in errors},
        "unexplained_errors": [line for line in errors if explained_by(line, documented) is None],
        "failed_try_list": failed_tries,
        "failed_runs": [{"dag_id": r["dag_id"], "run_id": r["dag_run_id"]} for r in runs if r["state"] == "failed"],
    }
