"""The soak's fault injector (``make soak``, :mod:`soak`): faults of the kinds of :data:`FAULTS` at
seeded random moments, each in a thread of its own (they may overlap, except two on the same
target), each recorded with its kind, target, start and end (epoch seconds) and what it did.

Every fault stops and starts the parts with their own functions (:mod:`cdclake_dev.engine`,
:mod:`cdclake_dev.chain`, :mod:`cdclake_dev.stack`, the parts' classes, Airflow's daemons), so a
fault restarts a part the way an operator's ``cdclake`` command does.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from cdclake_dev import chain, engine, stack
from cdclake_dev.parts.airflow import AirflowProcesses
from cdclake_dev.production import Topology

log = logging.getLogger(__name__)


@dataclass
class FaultRecord:
    """One injected fault: ``kind`` (a key of :data:`FAULTS`), ``target`` (the part), ``start`` and
    ``end`` (epoch s), ``detail`` (what it did), ``error`` (the fault's own failure, if any)."""

    kind: str
    target: str
    start: float
    end: float | None = None
    detail: str = ""
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class FaultContext:
    """What a fault acts on: the topology and its Airflow, the seeded random source, the soak's
    DAG ids, the tables' task timeout (s), the tables ``cdc_reconcile`` compares (its upsert tables),
    and the soak's end (a fault's outage is cut short by it)."""

    topology: Topology
    airflow: AirflowProcesses
    rng: random.Random
    table_dags: list[str]
    task_timeout_s: float
    reconciled: list[str] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def restart(self, start: Callable[[], str]) -> str:
        """``start()`` again until it succeeds, 10 s apart, up to 2 minutes, as a supervisor
        (systemd, Kubernetes) restarts a part whose dependency is down too (the broker while a
        fault holds it). Returns its report.

        Raises:
            Exception: what the last try raised.
        """
        from tenacity import Retrying, before_sleep_log, stop_after_delay, wait_fixed

        for attempt in Retrying(
            stop=stop_after_delay(120),
            wait=wait_fixed(10),
            reraise=True,
            before_sleep=before_sleep_log(log, logging.WARNING),
        ):
            with attempt:
                return start()
        raise AssertionError("unreachable: Retrying either returns or raises")

    def outage(self, low: float, high: float) -> float:
        """Wait a seeded random outage of ``low``..``high`` s (less when the soak stops); seconds."""
        seconds = self.rng.uniform(low, high)
        self.stopping.wait(seconds)
        return seconds


def start_engine(topology: Topology) -> str:
    """Start the topology's Spark Connect server as :meth:`Topology.start_parts` does (no catalog,
    the cluster's settings) unless it runs."""
    return engine.start_engine(topology.settings, register_catalog=False, extra_conf=topology.cluster_conf())


def _kill_engine(ctx: FaultContext) -> str:
    killed = engine.stop_engine(ctx.topology.settings, hard=True)
    down = ctx.outage(2, 20)
    return f"{killed}; down {down:.0f} s; {ctx.restart(lambda: start_engine(ctx.topology))}"


def _pause_engine(ctx: FaultContext) -> str:
    pid = engine.engine_status(ctx.topology.settings).pid
    if pid is None:
        return "Spark Connect server not running: nothing paused"
    os.killpg(pid, signal.SIGSTOP)
    try:
        # past the tables' task timeout: the applies waiting on it are failed by Airflow, retried
        paused = ctx.task_timeout_s + 30
        time.sleep(paused)
    finally:
        os.killpg(pid, signal.SIGCONT)
    return f"Spark Connect server (group {pid}) SIGSTOP for {paused:.0f} s, then SIGCONT"


def _kill_worker(ctx: FaultContext) -> str:
    spark = ctx.topology._spark()
    spark.stop_worker(hard=True)
    down = ctx.outage(2, 20)
    ctx.restart(lambda: f"{spark.start():.0f} s")
    return f"Spark worker and its executors killed (SIGKILL); down {down:.0f} s; restarted"


def _kill_connect(ctx: FaultContext) -> str:
    killed = chain.stop_connect(ctx.topology.settings, hard=True)
    down = ctx.outage(2, 20)
    return f"{killed}; down {down:.0f} s; {ctx.restart(ctx.topology.start_connector)}"


def _kill_broker(ctx: FaultContext) -> str:
    t = ctx.topology
    killed = stack.stop_broker(t.settings, hard=True)
    down = ctx.outage(2, 20)
    return f"{killed}; down {down:.0f} s; " + ctx.restart(lambda: stack.start_broker(t.settings, sasl=t._sasl()))


def _kill_scheduler(ctx: FaultContext) -> str:
    pid = ctx.airflow.procs["scheduler"].stop(hard=True)
    down = ctx.outage(2, 20)
    ctx.restart(lambda: f"{ctx.airflow.start():.0f} s")
    return f"Airflow scheduler (pid {pid}) killed (SIGKILL); down {down:.0f} s; restarted"


def _kill_apply_task(ctx: FaultContext) -> str:
    """SIGKILL the process of a running ``apply`` task: the task runner, the child of the
    LocalExecutor worker titled ``airflow worker -- LocalExecutor: <ti id>``, which supervises it
    and reports the try failed (the worker itself is left alone). Waits up to 120 s for one to run."""
    import psutil

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not ctx.stopping.is_set():
        running = [
            ti
            for ti in ctx.airflow.get_all("dags/~/dagRuns/~/taskInstances", "task_instances", state=["running"])
            if ti["task_id"] == "apply" and ti["dag_id"] in ctx.table_dags
        ]
        workers = {ti["id"]: ti for ti in running}
        for proc in psutil.process_iter(["cmdline"]):
            title = " ".join(proc.info["cmdline"] or ()).strip()
            ti = workers.get(title.rpartition("LocalExecutor: ")[2]) if "LocalExecutor: " in title else None
            if ti is None:
                continue
            try:
                runners = proc.children()
                for runner in runners:
                    runner.kill()
            except psutil.NoSuchProcess:
                continue
            if runners:
                pids = ", ".join(str(r.pid) for r in runners)
                return f"apply task of {ti['dag_id']} run {ti['dag_run_id']} try {ti['try_number']}: pid {pids} killed (SIGKILL)"
        time.sleep(1.0)
    return "no apply task ran within 120 s: nothing killed"


def _restart_postgres(ctx: FaultContext) -> str:
    pg = ctx.topology._postgres()
    pg.stop()
    down = ctx.outage(2, 15)
    ctx.restart(lambda: f"{pg.start():.0f} s")
    return f"PostgreSQL (Airflow's metadata DB, the catalog's database) stopped; down {down:.0f} s; started"


def _s3_outage(ctx: FaultContext) -> str:
    s3 = ctx.topology._s3()
    s3.stop()
    down = ctx.outage(5, 40)
    ctx.restart(lambda: f"{s3.start():.0f} s")
    return f"s3proxy stopped; S3 unavailable {down:.0f} s; started"


def _trigger(ctx: FaultContext, dag_id: str, conf: dict[str, Any]) -> str:
    run_id = f"soak_{dag_id}_{time.strftime('%H%M%S')}_{ctx.rng.randrange(1000):03d}"
    ctx.airflow.trigger(dag_id, run_id, conf)
    return f"{dag_id} run {run_id} triggered"


def _maintenance(ctx: FaultContext) -> str:
    return _trigger(ctx, "cdc_maintenance", {})


RECONCILED_PER_FAULT = 3
"""Tables a reconcile fault's run compares, as an operator checks a few by hand: a run over every
table waits for each one's catch-up in turn, two at a time, and holds ``cdc_reconcile`` (one run at
a time) for as long; soak 7's lasted nearly two hours, and the final reconcile waited behind it."""


def _reconcile(ctx: FaultContext) -> str:
    tables = sorted(ctx.rng.sample(ctx.reconciled, min(RECONCILED_PER_FAULT, len(ctx.reconciled))))
    return _trigger(ctx, "cdc_reconcile", {"mode": "report", "catch_up_timeout_minutes": 10, "tables": tables}) + (
        f" ({', '.join(tables)})"
    )


def _resnapshot(ctx: FaultContext) -> str:
    """Kafka Connect stopped, the connector's offsets deleted, Connect started: the connector has
    no offsets and takes a new initial snapshot (:func:`cdclake_dev.chain.connect_offsets_file`)."""
    settings = ctx.topology.settings
    stopped = chain.stop_connect(settings)
    chain.connect_offsets_file(settings).unlink(missing_ok=True)
    return f"{stopped}; offsets deleted; {ctx.restart(ctx.topology.start_connector)} (a new initial snapshot)"


def _binlog_storm(ctx: FaultContext) -> str:
    flushes = ctx.rng.randint(10, 30)
    conn = chain.mariadb_connect(ctx.topology.settings)
    try:
        with conn.cursor() as cur:
            for _ in range(flushes):
                cur.execute("FLUSH BINARY LOGS")
                time.sleep(ctx.rng.uniform(0.1, 1.0))
    finally:
        conn.close()
    return f"FLUSH BINARY LOGS x{flushes}"


FAULTS: dict[str, tuple[str, Callable[[FaultContext], str]]] = {
    "kill_engine": ("spark-connect", _kill_engine),
    "pause_engine": ("spark-connect", _pause_engine),
    "kill_worker": ("spark-worker", _kill_worker),
    "kill_connect": ("kafka-connect", _kill_connect),
    "resnapshot": ("kafka-connect", _resnapshot),
    "kill_broker": ("kafka", _kill_broker),
    "kill_scheduler": ("airflow-scheduler", _kill_scheduler),
    "kill_apply_task": ("apply-task", _kill_apply_task),
    "restart_postgres": ("postgres", _restart_postgres),
    "s3_outage": ("s3", _s3_outage),
    "maintenance": ("cdc_maintenance", _maintenance),
    "reconcile": ("cdc_reconcile", _reconcile),
    "binlog_storm": ("mariadb", _binlog_storm),
}
"""Fault kind -> (its target, the fault). A fault returns once the part runs again."""

EARLY_KINDS = {"kill_engine": 0.4}
"""Fault kinds held to the first part of the time (kind -> that part's end, a fraction of it): an
engine killed in the last half leaves a JVM of a few minutes to be measured over it, whose first
minutes of load (the status store filling to its limits, the parser's caches, JIT) the memory
target would count as growth. The fourth and fifth 60-minute runs measured engines started 4-5
minutes before half-time; held to the first 40 %, the last engine has run at least 6 minutes by
then. Only the kills: held to the first quarter together with the scheduler's kills and the
engine's pauses, a sixth run's faults overwhelmed the runs' retries (bench/HISTORY.md)."""


REST_S = 180.0
"""Seconds a part rests after a fault ends before its next fault starts: one task timeout of the
soak's tables (3 minutes), so that the runs the fault failed get a try against the part restored.
Without it a fault waiting for its part's previous one started the moment that one ended: the
ninth 60-minute run paused the engine twice back to back (210 s, 2 s apart, then 420 s more), one
10.5-minute outage that no retry policy of the tables was sized for, and 3 runs exhausted their
tries (bench/HISTORY.md)."""


class FaultInjector:
    """Injects ``count`` faults of ``kinds`` over ``duration_s`` seconds from :meth:`start`: each
    kind once in a seeded order first, then seeded random kinds, at seeded moments (uniform over
    the first 90 % of the time, :data:`EARLY_KINDS` over their own part; two may overlap). A fault
    whose target is busy with another, or resting after one (``rest_s``, :data:`REST_S`), waits
    until it is free; one that would then start after ``duration_s`` is not injected.
    :meth:`stop` ends the outages under way and waits for every fault to have restarted its part.

    Raises:
        ValueError: a kind not in :data:`FAULTS`.
    """

    def __init__(
        self, ctx: FaultContext, kinds: list[str], count: int, duration_s: float, rest_s: float = REST_S
    ) -> None:
        unknown = sorted(set(kinds) - set(FAULTS))
        if unknown:
            raise ValueError(f"unknown fault kind(s) {unknown}; known: {sorted(FAULTS)}")
        self.ctx = ctx
        self.kinds = kinds
        self.count = count
        self.duration_s = duration_s
        self.records: list[FaultRecord] = []
        self.rest_s = rest_s
        self._busy: set[str] = set()
        self._rest_until: dict[str, float] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._main = threading.Thread(target=self._run, name="soak-faults", daemon=True)

    def busy(self, target: str) -> bool:
        """Whether a fault is under way on ``target``, or ended less than ``rest_s`` ago."""
        with self._lock:
            return target in self._busy or time.monotonic() < self._rest_until.get(target, 0.0)

    def start(self) -> None:
        self._main.start()

    def stop(self) -> None:
        self.ctx.stopping.set()
        self._main.join()
        for thread in self._threads:
            thread.join()

    def _plan(self) -> list[str]:
        """The kinds in order: each once (shuffled), then seeded random kinds, none more than
        ``ceil(count / kinds) + 1`` times in all (the sixth and seventh 60-minute runs drew
        ``kill_engine`` 7 times of 36: held to a part of the time, a burst no retry policy is
        sized for)."""
        first = list(self.kinds)
        self.ctx.rng.shuffle(first)
        cap = -(-self.count // len(self.kinds)) + 1
        drawn = Counter(first)
        rest = []
        for _ in range(max(0, self.count - len(first))):
            kind = self.ctx.rng.choice([k for k in self.kinds if drawn[k] < cap])
            drawn[kind] += 1
            rest.append(kind)
        return (first + rest)[: self.count]

    def _schedule(self) -> list[tuple[str, float]]:
        """The seeded ``(kind, seconds from the start)`` of every fault, in time order: moments
        uniform over the first 90 % of the time (the last fault still hits the load); the ``n``
        faults of a kind of :data:`EARLY_KINDS` one in each of ``n`` equal slots of its own part
        instead (held to a part, several at random would come in bursts)."""
        plan = self._plan()
        moments = sorted(self.ctx.rng.uniform(0.02, 0.9) * self.duration_s for _ in range(self.count))
        schedule = [(kind, moment) for kind, moment in zip(plan, moments, strict=True) if kind not in EARLY_KINDS]
        for kind, until in EARLY_KINDS.items():
            n = plan.count(kind)
            slot = (until - 0.02) / max(n, 1)
            schedule += [(kind, (0.02 + (i + self.ctx.rng.random()) * slot) * self.duration_s) for i in range(n)]
        return sorted(schedule, key=lambda km: km[1])

    def _run(self) -> None:
        t0 = time.monotonic()
        end = t0 + self.duration_s
        for kind, moment in self._schedule():
            if self.ctx.stopping.wait(max(0.0, t0 + moment - time.monotonic())):
                return
            if time.monotonic() >= end:
                return
            # the fault waits for its part in a thread of its own: a part resting holds back no other part's fault
            thread = threading.Thread(target=self._when_free, args=(kind, end), name=f"fault-{kind}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _when_free(self, kind: str, end: float) -> None:
        """Inject ``kind`` once its part is free (not busy, rested), unless that is after ``end``."""
        target = FAULTS[kind][0]
        poll = min(2.0, max(self.rest_s / 4, 0.05))
        while True:
            with self._lock:
                free = target not in self._busy and time.monotonic() >= self._rest_until.get(target, 0.0)
                if free and time.monotonic() < end and not self.ctx.stopping.is_set():
                    self._busy.add(target)
                    record = FaultRecord(kind, target, time.time())
                    self.records.append(record)
                    break
            if self.ctx.stopping.wait(poll) or time.monotonic() >= end:
                log.info("fault %s not injected: its part %s was not free before the end of the faults", kind, target)
                return
        self._inject(record)

    def _inject(self, record: FaultRecord) -> None:
        log.info("fault %s on %s", record.kind, record.target)
        try:
            record.detail = FAULTS[record.kind][1](self.ctx)
        except Exception as e:  # the fault's own failure is part of the report
            record.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:500]
            log.warning("fault %s failed: %s", record.kind, record.error)
        finally:
            record.end = time.time()
            with self._lock:
                self._busy.discard(record.target)
                self._rest_until[record.target] = time.monotonic() + self.rest_s
        log.info("fault %s done: %s", record.kind, record.detail or record.error)
