"""What every benchmark does the same way; each ``bench/*.py`` script holds its scenario only.

* The command line (:func:`bench_parser`, :func:`add_run_options`, :func:`add_size_options`):
  ``--out`` (folder of the result files, default ``bench/results/``), ``--state-dir`` (the work
  folder; default a temporary one, deleted afterwards), ``--keep-state``, and for a benchmark that
  can run on a running stack ``--external-broker`` (the broker and catalog of the ``CDCLAKE_*``
  environment); size presets (``--size``) of which an option of its own overrides each figure.
* One run (:class:`BenchRun`): its start time and id (``%Y%m%dT%H%M%SZ``, UTC), a random tag for
  namespaces and topics, the work folder and its ``logs/``, the machine it ran on
  (:func:`machine_info`), and the result files ``<out>/<name>-<run id>.json`` and ``.md``: the
  JSON result, and the summary table (Markdown) that is also printed.
* The stack a benchmark starts for itself (:func:`stack_settings`, :func:`start_parts`,
  :func:`stop_parts`): its servers (:data:`BROKER`, :data:`ENGINE`, :data:`MARIADB`,
  :data:`CONNECT`) on free loopback ports, state under the work folder.
* Child processes: :func:`child_env` (the bench's settings and this checkout's packages) and
  :func:`spark_submit` (the command the table DAG's ``submit`` engine runs), with
  :func:`spark_profile` reading the Spark event log it writes.

Measuring a process (time, memory) is :mod:`measure`'s; the workload in Kafka and Iceberg is
:mod:`lake`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TypeVar

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
# this checkout's packages first: cdclake, the Airflow plugins and the bench's modules (spawned
# children, in_child, inherit the path); the checkout itself for the tests' Avro encoder
# (tests/avro_events.py, the Avro workload's)
for _p in (ROOT, ROOT / "include", ROOT / "plugins", BENCH_DIR):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

# Measured processes import the benchmark scripts (``run.py _dag``, ``engine_bench.py _apply``,
# reconcile's methods): what they load counts in their time and memory, so this module and
# :mod:`measure` and :mod:`lake` import anything heavier than the settings where it is used.
from cdclake.settings import Settings, spark_jars  # noqa: E402

_T = TypeVar("_T")

RESULTS_DIR = BENCH_DIR / "results"
"""Default folder of the result files (``--out``)."""


# --- the command line -------------------------------------------------------------------------------


def bench_parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's parser: ``doc`` (the script's docstring) is its description (first line) and
    its epilog (whole, as written)."""
    return argparse.ArgumentParser(
        prog=prog,
        description=(doc or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=doc,
    )


def add_size_options(
    parser: argparse.ArgumentParser,
    sizes: dict[str, dict[str, int]],
    default: str,
    size_help: str,
    figures: dict[str, str],
) -> None:
    """``--size`` (one of ``sizes``, default ``default``) and one integer option per figure of
    the presets (``figures``: figure -> help; ``base_rows`` becomes ``--base-rows``) that
    overrides the preset's value (:func:`resolve_size`)."""
    parser.add_argument("--size", choices=sorted(sizes), default=default, help=size_help)
    for figure, text in figures.items():
        parser.add_argument(f"--{figure.replace('_', '-')}", type=int, help=text)


def resolve_size(args: argparse.Namespace, sizes: dict[str, dict[str, int]]) -> argparse.Namespace:
    """The figures of ``args.size``'s preset, each replaced by its option where given."""
    preset = dict(sizes[args.size])
    for figure in preset:
        if getattr(args, figure) is not None:
            preset[figure] = getattr(args, figure)
    return argparse.Namespace(**preset)


def add_run_options(
    parser: argparse.ArgumentParser, *, work_parent: str | None = None, external_broker: bool = False
) -> None:
    """``--out``, ``--state-dir`` and ``--keep-state``; ``--external-broker`` where the benchmark
    can run on the stack of the ``CDCLAKE_*`` environment. ``work_parent``: the folder (relative to
    the checkout) that holds the temporary work folder, when not the system's temporary folder."""
    parser.add_argument("--out", default=str(RESULTS_DIR), help="folder of the result files")
    where = f" under {work_parent}/" if work_parent else ""
    parser.add_argument("--state-dir", help=f"work folder (default: a temporary one{where}, deleted afterwards)")
    parser.add_argument("--keep-state", action="store_true", help="keep the temporary work folder")
    if external_broker:
        parser.add_argument(
            "--external-broker",
            action="store_true",
            help="use the broker and catalog of the CDCLAKE_* environment instead of starting a broker",
        )


# --- one run: folders, machine, result files ------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    """The machine: CPU model, cores, memory (GiB), OS, Python, Java (``java -version``'s first
    line) and the load averages at the start (the machine may be shared)."""
    import psutil

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": java[0] if java else None,
        "load_avg_at_start": _load_avg(),
    }


def _load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


@dataclass(frozen=True)
class BenchRun:
    """One run of a benchmark: its identity, its folders and the machine it runs on."""

    name: str
    """Stem of the result files: ``<name>-<run id>``."""
    started: datetime
    tag: str
    """Six hex digits, unique to the run: its namespaces and topics carry it."""
    out_dir: Path
    work: Path
    remove_work: bool
    """The work folder is a temporary one, not kept: :meth:`finish` removes it."""
    work_parent: Path | None
    """The checkout's folder of temporary work folders, removed with the last of them."""
    machine: dict[str, Any] = field(default_factory=machine_info)
    """:func:`machine_info`; :meth:`finish` adds ``load_avg_at_end``."""

    @classmethod
    def begin(cls, args: argparse.Namespace, name: str, temp_prefix: str, work_parent: str | None = None) -> BenchRun:
        """Make the folders: ``args.out``; the work folder ``args.state_dir`` or a temporary one
        (prefix ``temp_prefix``) in ``work_parent`` (relative to the checkout) or in the system's
        temporary folder; ``logs/`` in it."""
        out_dir = Path(args.out).resolve()
        out_dir.mkdir(parents=True, exist_ok=True)
        parent = ROOT / work_parent if work_parent else None
        if args.state_dir:
            work = Path(args.state_dir).resolve()
        else:
            if parent is not None:
                parent.mkdir(exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix=temp_prefix, dir=parent))
        work.mkdir(parents=True, exist_ok=True)
        (work / "logs").mkdir(exist_ok=True)
        remove = not args.keep_state and not args.state_dir
        return cls(name, datetime.now(timezone.utc), uuid.uuid4().hex[:6], out_dir, work, remove, parent)

    @property
    def run_id(self) -> str:
        return self.started.strftime("%Y%m%dT%H%M%SZ")

    @property
    def logs(self) -> Path:
        """The child processes' logs (in the work folder)."""
        return self.work / "logs"

    def info(self, **fields: Any) -> dict[str, Any]:
        """The head of the result: ``started`` (the run id), ``fields``, ``machine``, ``work_dir``."""
        return {"started": self.run_id, **fields, "machine": self.machine, "work_dir": str(self.work)}

    def portable(self, text: str) -> str:
        """``text`` without this machine's paths, as results are committed: the project root's
        files relative to it (Spark names a job by its source line), the work folder as
        ``<work_dir>``."""
        return text.replace(f"{ROOT}/", "").replace(str(self.work), "<work_dir>")

    def finish(self, result: dict[str, Any], markdown: Callable[[dict[str, Any]], str]) -> None:
        """Record the load averages at the end in :attr:`machine` (the dict ``result`` holds),
        write ``<out>/<name>-<run id>.json`` (``result``) and ``.md`` (``markdown(result)``),
        both :meth:`portable`,
        print the Markdown and the two paths, and remove a temporary work folder."""
        self.machine["load_avg_at_end"] = _load_avg()
        text = markdown(result)
        stem = self.out_dir / f"{self.name}-{self.run_id}"
        stem.with_suffix(".json").write_text(self.portable(json.dumps(result, indent=2, default=str)))
        stem.with_suffix(".md").write_text(self.portable(text))
        print(text)
        print(f"results: {stem}.json, {stem}.md")
        if self.remove_work:
            shutil.rmtree(self.work, ignore_errors=True)
            if self.work_parent is not None:
                try:
                    self.work_parent.rmdir()  # only when empty
                except OSError:
                    pass


def checks_ok(checks: dict[str, dict[str, Any]], label: str = "CHECK FAILED") -> bool:
    """Whether every check is ``ok``; else prints ``<label>: <the failed checks as JSON>``."""
    ok = all(c["ok"] for c in checks.values())
    if not ok:
        print(f"{label}: " + json.dumps({k: c for k, c in checks.items() if not c["ok"]}, default=str)[:5000])
    return ok


def summary_head(title: str, result: dict[str, Any], spark: str | None = None) -> list[str]:
    """The summary's first lines: the heading ``### <title>, <run id>`` and the sentence on the
    machine (``result["machine"]``: :func:`machine_info`) and ``spark`` (the Spark the benchmark
    ran, where it names one)."""
    m = result["machine"]
    spark_part = f"; {spark}" if spark else ""
    return [
        f"### {title}, {result['started']}",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; {m['os']}; Python {m['python']}; "
        f"{m['java']}{spark_part}. Load average (1 min) at start {m['load_avg_at_start'][0]}, at end "
        f"{m.get('load_avg_at_end', ['?'])[0]} (the machine is shared).",
        "",
    ]


def checks_line(checks: dict[str, dict[str, Any]]) -> str:
    """The summary's line of checks: ``Checks: <name> ok, <name> FAILED, ...``."""
    return "Checks: " + ", ".join(f"{k} {'ok' if c['ok'] else 'FAILED'}" for k, c in checks.items())


# --- the bench's own stack -----------------------------------------------------------------------------------


def free_port_pair() -> int:
    """A free loopback port whose next port is free too (the broker's controller listens there).

    Raises:
        RuntimeError: none found in 50 tries.
    """
    from cdclake_dev.process import LOOPBACK, free_port, port_open

    for _ in range(50):
        port = free_port()
        if port < 65000 and not port_open(LOOPBACK, port + 1):
            return port
    raise RuntimeError("no free pair of loopback ports")


@dataclass(frozen=True)
class Part:
    """A server of the local stack (:mod:`cdclake_dev`) that a benchmark starts for itself."""

    name: str
    port_env: str
    """The ``CDCLAKE_*`` variable of its loopback port (the broker's: its bootstrap address)."""

    def free_port_setting(self) -> str:
        """A value of :attr:`port_env` on a free loopback port."""
        from cdclake_dev.process import LOOPBACK, free_port

        if self == BROKER:
            return f"{LOOPBACK}:{free_port_pair()}"
        if self == REGISTRY:  # its Confluent-compatible API (SchemaRegistry.ccompat_url)
            return f"http://{LOOPBACK}:{free_port()}/apis/ccompat/v7"
        return str(free_port())

    def start(self, settings: Settings) -> str:
        """Start it; returns the report line."""
        return _start_stop(self)[0](settings)

    def stop(self, settings: Settings) -> str:
        """Stop it; returns the report line."""
        return _start_stop(self)[1](settings)


BROKER = Part("broker", "CDCLAKE_KAFKA_BOOTSTRAP")
ENGINE = Part("Spark Connect server", "CDCLAKE_SPARK_CONNECT_PORT")
MARIADB = Part("MariaDB", "CDCLAKE_MARIADB_PORT")
CONNECT = Part("Kafka Connect", "CDCLAKE_CONNECT_PORT")
REGISTRY = Part("schema registry", "CDCLAKE_SCHEMA_REGISTRY_URL")
"""Apicurio Registry in memory (:mod:`cdclake_dev.parts.registry`), its Confluent-compatible URL
the setting; state in ``<state dir>/registry``."""


def _start_stop(part: Part) -> tuple[Callable[[Settings], str], Callable[[Settings], str]]:
    from cdclake_dev import chain, engine, stack

    return {
        BROKER: (stack.start_broker, stack.stop_broker),
        ENGINE: (engine.start_engine, engine.stop_engine),
        MARIADB: (chain.start_mariadb, chain.stop_mariadb),
        CONNECT: (chain.start_connect, chain.stop_connect),
        REGISTRY: (_start_registry, _stop_registry),
    }[part]


def _registry(settings: Settings):  # noqa: ANN202 - cdclake_dev's SchemaRegistry, imported here
    from urllib.parse import urlsplit

    from cdclake_dev.parts.registry import SchemaRegistry

    port = urlsplit(settings.schema_registry_url).port
    if port is None:
        raise ValueError(f"CDCLAKE_SCHEMA_REGISTRY_URL {settings.schema_registry_url!r} names no port")
    return SchemaRegistry(settings.state_dir / "registry", port)


def _start_registry(settings: Settings) -> str:
    registry = _registry(settings)
    took = registry.start()
    return f"Apicurio Registry started on {registry.url} in {took:.1f} s"


def _stop_registry(settings: Settings) -> str:
    pid = _registry(settings).stop()
    return "Apicurio Registry stopped" if pid is not None else "Apicurio Registry was not running"


def stack_settings(work: Path, parts: Sequence[Part], **environ: str) -> Settings:
    """Settings of a stack of the bench's own: state in ``work/stack``, table config
    ``work/tables.yaml``, every part on free loopback ports; ``environ``: more ``CDCLAKE_*``."""
    env = {"CDCLAKE_STATE_DIR": str(work / "stack"), "CDCLAKE_TABLES_CONFIG": str(work / "tables.yaml")}
    env.update({part.port_env: part.free_port_setting() for part in parts})
    return Settings.from_env({**env, **environ})


def in_child(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in a fresh (spawned) process: no state of this one's, and servers it starts
    outlive it and, orphaned, are reaped by init when they stop (children of this long-lived
    process would linger as zombies, and the stop functions would wait out their timeouts for
    them)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def _start_in_order(settings: Settings, parts: Sequence[Part]) -> list[str]:
    return [part.start(settings) for part in parts]


def start_parts(settings: Settings, parts: Sequence[Part]) -> float:
    """Start ``parts`` in this order (in a child process: :func:`in_child`), printing their
    reports. Returns seconds (0.0 for no part)."""
    if not parts:
        return 0.0
    t0 = time.monotonic()
    for report in in_child(_start_in_order, settings, parts):
        print(f"  {report}", flush=True)
    return round(time.monotonic() - t0, 1)


def stop_parts(settings: Settings, parts: Sequence[Part]) -> None:
    """Stop ``parts`` in the reverse order, printing each report and its seconds; a failure is
    printed and the others are stopped all the same."""
    for part in reversed(parts):
        t0 = time.monotonic()
        try:
            print(f"  {part.stop(settings)} in {time.monotonic() - t0:.1f} s", flush=True)
        except Exception as exc:  # noqa: BLE001 - stop the others all the same
            print(f"  stopping the {part.name} failed: {exc}", flush=True)


# --- child processes ----------------------------------------------------------------------------------


def child_env(settings: Settings) -> dict[str, str]:
    """This process's environment with the bench's ``CDCLAKE_*`` settings and this checkout's
    packages first on ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDCLAKE_")}
    env.update(
        {
            **settings.to_env(),
            # bench/run.py's overhead stage measures spark-submit's JVM start (issue 6); the shared
            # Connect engine's overhead is bench/engine_bench.py's (make bench-engine)
            "CDCLAKE_ENGINE": "submit",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "include"), str(ROOT / "plugins"), str(BENCH_DIR)]),
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
    )
    return env


def spark_submit(settings: Settings, script: Path, args: list[str], name: str, event_log: Path) -> list[str]:
    """The ``spark-submit`` command the table DAG's apply task runs (same master, jars, confs,
    driver memory), for ``script``, plus Spark's event log in ``event_log`` (for
    :func:`spark_profile`)."""
    from cdclake.spark.session import spark_conf

    cmd = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master",
        settings.spark_master,
        "--name",
        name,
        "--driver-memory",
        "2g",
        "--jars",
        ",".join(str(j) for j in spark_jars()),
    ]
    conf = {
        **spark_conf(settings),
        # the benchmark's local SQLite catalog has no credential: on the command line is fine here
        **settings.spark_catalog_conf(),
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": event_log.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    return cmd + [str(script), *args]


def spark_profile(event_log: Path, plans: Path, top: int = 8) -> list[dict[str, Any]]:
    """Where the newest Spark application's time went: its slowest SQL executions (queries: the
    MERGE, counts, collects) from its event log, with duration and the plan's top node; their
    whole physical plans are written to ``plans``."""
    logs = sorted(
        (f for f in event_log.iterdir() if f.is_file() and not f.name.startswith(".")), key=lambda f: f.stat().st_mtime
    )
    if not logs:
        return []
    execs: dict[int, dict[str, Any]] = {}
    for line in logs[-1].read_text(errors="replace").splitlines():
        if '"Event":"org.apache.spark.sql.execution.ui.SparkListenerSQLExecution' not in line:
            continue
        ev = json.loads(line)
        if ev["Event"].endswith("SQLExecutionStart"):
            plan = ev.get("physicalPlanDescription", "")
            node = next((ln.strip() for ln in plan.splitlines() if ln.strip() and not ln.startswith("==")), "")
            execs[ev["executionId"]] = {
                "description": ev.get("description", "")[:160],
                "plan": node[:160],
                "start": ev["time"],
                "full_plan": plan,
            }
        elif ev["Event"].endswith("SQLExecutionEnd") and ev["executionId"] in execs:
            e = execs[ev["executionId"]]
            e["seconds"] = round((ev["time"] - e.pop("start")) / 1000, 2)
    slowest = sorted((e for e in execs.values() if "seconds" in e), key=lambda e: -e["seconds"])[:top]
    plans.write_text("\n\n".join(f"=== {e['seconds']} s: {e['description']}\n{e.pop('full_plan')}" for e in slowest))
    return slowest
