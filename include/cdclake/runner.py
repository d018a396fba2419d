"""One run of one table, whoever runs it: plan, schema sync, apply in a Spark session, with the
concurrent-commit retries, each phase timed.

* :func:`run_once` is the whole run, as the table DAG's ``apply`` task (``connect`` engine) runs it.
* :func:`sync_schema` and :func:`apply_plan` are its phases for callers that run them apart: the
  ``submit`` engine's ``schema_sync`` task and its ``spark-submit`` job (``spark_jobs/apply_cdc.py``).
  The plan phase is :func:`cdclake.pipeline.planner.plan_next`.

The caller owns the connections (catalog, Kafka, how a Spark session is opened): the Airflow
hook ``cdclake_airflow.hooks.CdcLakeHook`` resolves them from Airflow connections; a caller outside
Airflow builds them from ``CDCLAKE_*``. Orchestrator reactions (skipping a task, asset events, metrics, lineage) are the
caller's too; this module imports no Airflow.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdclake.errors import ConcurrentRunError
from cdclake.pipeline.planner import plan_next
from cdclake.pipeline.schema_sync import sync_for_range

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

    from cdclake.io.kafka import KafkaClients
    from cdclake.model.config import TableConfig
    from cdclake.model.offsets import Offsets
    from cdclake.model.outcome import ApplyResult
    from cdclake.model.plan import RunPlan
    from cdclake.settings import Settings

log = logging.getLogger(__name__)

SessionFactory = Callable[[], AbstractContextManager["SparkSession"]]
"""The Spark session of one apply, with the run's catalog registered, as a context manager: one
that opens a session and stops it on exit (a session of the Spark Connect server,
:func:`cdclake.spark.session.connect_session` with ``settings``; a ``spark-submit`` driver's session,
:func:`cdclake.spark.session.submit_session`), or one that lends a session its caller keeps
(``contextlib.nullcontext(spark)``)."""


class SharedSession:
    """One Spark session lent to the runs of several tables (a task of a shared DAG,
    :mod:`cdclake.model.shared`), as a :data:`SessionFactory`: the first run that applies opens it
    with ``open_session``; the later ones borrow it (``contextlib.nullcontext``); :meth:`close`
    stops it. After a run that failed, :meth:`close` it: the next run opens a new one, so that a
    session the server lost (the engine restarted) fails one table, not every table after it.

    Args:
        open_session: opens a session and stops it on exit (see :data:`SessionFactory`).
    """

    def __init__(self, open_session: SessionFactory) -> None:
        self._open_session = open_session
        self._stack: ExitStack | None = None
        self._spark: SparkSession | None = None
        self.opened = 0
        """How many sessions were opened."""

    def __call__(self) -> AbstractContextManager[SparkSession]:
        if self._spark is None:
            stack = ExitStack()
            self._spark = stack.enter_context(self._open_session())
            self._stack = stack
            self.opened += 1
        return nullcontext(self._spark)

    def close(self) -> None:
        """Stop the session, if one is open (an error stopping it is logged: the server may be gone)."""
        stack, self._stack, self._spark = self._stack, None, None
        if stack is not None:
            try:
                stack.close()
            except Exception as exc:  # noqa: BLE001 - a lost session cannot be stopped; nothing is lost
                log.warning("stopping the shared Spark session failed (%s); the next run opens a new one", exc)

    def __enter__(self) -> SharedSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


CONCURRENT_COMMIT_ATTEMPTS = 3
"""How many times :func:`run_once` plans and applies, when another commit (table maintenance, a
manual run) moved the table under it."""


class PhaseClock:
    """Wall-clock seconds per phase of a run, summed over the phase's repeats (a run planning
    again after a concurrent commit), rounded to ms; phases in the order first timed.

    Args:
        seconds: phases timed already (a caller timing its own phases after :func:`run_once`'s).
    """

    def __init__(self, seconds: Mapping[str, float] | None = None) -> None:
        self.seconds: dict[str, float] = dict(seconds or {})

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the ``with`` block as phase ``name`` (also when it raises)."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.monotonic() - started, 3)


@dataclass(frozen=True)
class RunOutcome:
    """What :func:`run_once` did.

    Attributes:
        plan: the plan applied (capped by schema sync before a barrier change, if it was), or
            the empty plan when there was nothing new.
        result: the apply's result; ``None`` when there was nothing new, or nothing before a barrier
            schema change that has not settled (no session, no commit).
        seconds: wall-clock seconds per phase: ``plan``, and unless nothing was new
            ``schema_sync``, ``session`` (opening it) and ``apply`` (stopping the session
            included); each summed over the attempts.
    """

    plan: RunPlan
    result: ApplyResult | None
    seconds: dict[str, float]


def summary_line(plan: RunPlan, result: ApplyResult, seconds: Mapping[str, float]) -> str:
    """The one line that tells a run, the last its task logs: the table, the status, whether it
    was a replay, the offset range applied (``partition: [start, end)``; a partition whose range the
    apply cut before a source transaction that is not whole, or extended to apply one whole, adds
    ``of [start, planned end)``), the events by op, the records quarantined, the keys changed, the
    snapshot id, the records left waiting for a source transaction (when any) and ``seconds`` per phase.

    Example: ``run of table inventory.products: committed; replay no; offsets {0: [0, 5), 1: [0, 4) of
    [0, 6)}; 14 event(s) {'c': 11, 'u': 2, 'd': 1}, 0 quarantined, 10 key(s) changed, snapshot
    5408683576420572515; 2 record(s) wait for a source transaction; seconds {'plan': 1.3, 'apply': 6.1}``.
    """
    end = result.applied_end or plan.range.end
    offsets = ", ".join(
        f"{p}: [{plan.range.start[p]}, {end.get(p, o)})"
        + ("" if end.get(p, o) == o else f" of [{plan.range.start[p]}, {o})")
        for p, o in sorted(plan.range.end.items())
    )
    waiting = f"; {result.waiting_events} record(s) wait for a source transaction" if result.waiting_events else ""
    return (
        f"run of table {plan.table.identifier}: {result.status}; replay {'yes' if plan.replay else 'no'}; "
        f"offsets {{{offsets}}}; {result.events} event(s) {result.ops or {}}, {result.quarantined} quarantined, "
        f"{result.keys_changed} key(s) changed, snapshot {result.snapshot_id}{waiting}; seconds {dict(seconds)}"
    )


def sync_schema(catalog: Catalog, kafka: KafkaClients, plan: RunPlan) -> RunPlan:
    """The schema sync phase: apply the table's schema changes up to ``plan``'s batch
    (:func:`cdclake.pipeline.schema_sync.sync_for_range`), logging each change and a cap.

    Returns:
        The plan to apply: ``plan`` with schema sync's range (capped before a barrier change, or
        the same), the changes applied and the change it was capped before.

    Raises:
        SchemaChangeError: a change that stops the table (incompatible type under
            ``incompatible: fail``, table renamed or dropped); nothing was applied.
        SchemaError: the table config's primary key is not the source table's.
    """
    result = sync_for_range(catalog, kafka, plan.table, plan.range)
    for line in result.applied:
        log.info("schema change applied: %s", line)
    if result.capped_before is not None:
        log.info(
            "batch capped before the barrier change %s; planned %s, applying up to %s",
            result.capped_before,
            plan.range.end,
            result.offset_range.end,
        )
    return plan.model_copy(
        update={
            "range": result.offset_range,
            "schema_changes_applied": result.applied,
            "capped_before": result.capped_before,
            "barrier_position": None if result.barrier_position is None else result.barrier_position.to_text(),
            "barrier_cut": tuple(
                sorted(
                    p for p, o in result.offset_range.end.items() if result.barrier_position and o != plan.range.end[p]
                )
            ),
        }
    )


def apply_plan(
    open_session: SessionFactory,
    settings: Settings,
    plan: RunPlan,
    *,
    kafka: KafkaClients | None = None,
    clock: PhaseClock | None = None,
) -> ApplyResult:
    """The apply phase: enter a session, apply ``plan`` in it
    (:func:`cdclake.spark.apply.apply_range`), exit the session, whatever happened.

    Args:
        open_session: the session (see :data:`SessionFactory`).
        kafka: the Kafka clients; default: plaintext to ``settings.kafka_bootstrap``.
        clock: times phases ``session`` (entering it) and ``apply`` (exiting it included).

    Raises:
        EngineUnavailableError: the Spark Connect server does not accept connections (nothing
            was applied).
        ConcurrentRunError, ConfigError, BadBatchError, PositionOrderError: see
            :func:`cdclake.spark.apply.apply_range`.
    """
    # the Spark apply loads only where a run applies (the submit engine's plan and schema_sync
    # tasks never do)
    from cdclake.spark.apply import apply_range

    clock = clock or PhaseClock()
    session = ExitStack()
    with clock.phase("session"):
        spark = session.enter_context(open_session())
    with clock.phase("apply"), session:
        return apply_range(spark, settings, plan, kafka=kafka)


def committed_run(catalog: Catalog, cfg: TableConfig, run_id: str) -> tuple[RunPlan, ApplyResult] | None:
    """The plan and result of run ``run_id``'s commit to table ``cfg``, read back from the commit's
    snapshot summary (:func:`cdclake.io.refs.run_commit`), or ``None`` when it did not commit."""
    from cdclake.io.catalog import load_table_or_none
    from cdclake.io.refs import run_commit
    from cdclake.model.layout import SummaryKeys
    from cdclake.model.offsets import OffsetRange, decode_offsets
    from cdclake.model.outcome import ApplyResult
    from cdclake.model.plan import RunPlan

    table = load_table_or_none(catalog, cfg.identifier)
    found = run_commit(table, cfg.topic, run_id) if table is not None else None
    if found is None:
        return None
    snapshot_id, summary = found
    log.info(
        "table %s: run %s committed already (snapshot %s): nothing to plan or apply (a retry after its commit)",
        cfg.identifier,
        run_id,
        snapshot_id,
    )
    offsets = OffsetRange(
        topic=cfg.topic,
        start=decode_offsets(summary[SummaryKeys.START_OFFSETS]),
        end=decode_offsets(summary[SummaryKeys.END_OFFSETS]),
    )
    plan = RunPlan(table=cfg, run_id=run_id, range=offsets, replay=summary.get(SummaryKeys.REPLAY) == "true")
    return plan, ApplyResult.of_commit("already_applied", snapshot_id, summary)


def run_once(
    cfg: TableConfig,
    run_id: str,
    *,
    settings: Settings,
    catalog: Catalog,
    kafka: KafkaClients,
    open_session: SessionFactory,
    replay_from_offsets: Offsets | None = None,
    replay_from_timestamp_ms: int | None = None,
    accept_source_change: bool = False,
    attempts: int = CONCURRENT_COMMIT_ATTEMPTS,
) -> RunOutcome:
    """Run table ``cfg`` once: plan (:func:`cdclake.pipeline.planner.plan_next`), and unless
    nothing is new, :func:`sync_schema` and :func:`apply_plan` in a new session.

    With nothing new it stops after the plan: no schema sync, no session, no commit. When another
    commit lands between the plan and the fast-forward (``ConcurrentRunError``: table
    maintenance, a manual run), it plans again from the table's offsets and applies again, up to
    ``attempts`` times in all; nothing is lost or applied twice, since the losing commit was
    discarded whole.

    A run commits once: when the table's history holds a commit of ``run_id`` already (an Airflow
    retry of a task whose earlier try committed, then failed or was killed), it plans and applies
    nothing and returns that commit, its plan and figures read back from the commit's snapshot
    summary (status ``already_applied``), for the caller to publish.

    Args:
        cfg: the table.
        run_id: recorded in the commit's snapshot summary (the Airflow run id).
        settings: the run's settings, its catalog included.
        catalog: the Iceberg catalog of ``settings``.
        kafka: the clients of the cluster holding the table's topics.
        open_session: the Spark session of each attempt (see :data:`SessionFactory`).
        replay_from_offsets, replay_from_timestamp_ms, accept_source_change: a manual replay
            (see :func:`~cdclake.pipeline.planner.plan_next`).
        attempts: how many times to plan and apply in all (>= 1).

    Returns:
        The applied plan, the apply's result (``None``: nothing new) and seconds per phase.
        ``run_id``'s earlier commit, when there is one: its plan and result, and ``plan``'s seconds.

    Raises:
        ValueError: ``attempts`` below 1.
        ConcurrentRunError: still losing after ``attempts`` attempts.
        EngineUnavailableError: the Spark Connect server does not accept connections (nothing
            was applied).
        OffsetsOutOfRangeError, TopicNotFoundError, ConfigError, SchemaChangeError, SchemaError,
            BadBatchError, PositionOrderError: see :func:`~cdclake.pipeline.planner.plan_next`,
            :func:`sync_schema` and :func:`cdclake.spark.apply.apply_range`.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    clock = PhaseClock()
    with clock.phase("plan"):
        earlier = committed_run(catalog, cfg, run_id)
    if earlier is not None:
        return RunOutcome(*earlier, clock.seconds)
    attempt = 1
    while True:
        plan = _plan_and_sync(
            catalog,
            kafka,
            cfg,
            run_id,
            clock,
            replay_from_offsets=replay_from_offsets,
            replay_from_timestamp_ms=replay_from_timestamp_ms,
            accept_source_change=accept_source_change,
        )
        if plan.range.is_empty:  # nothing new, or capped at a barrier change that has not settled: nothing to apply yet
            return RunOutcome(plan, None, clock.seconds)
        result = _apply_or_plan_again(open_session, settings, plan, kafka, clock, attempt=attempt, attempts=attempts)
        if result is not None:
            return RunOutcome(plan, result, clock.seconds)
        attempt += 1


def _plan_and_sync(
    catalog: Catalog,
    kafka: KafkaClients,
    cfg: TableConfig,
    run_id: str,
    clock: PhaseClock,
    *,
    replay_from_offsets: Offsets | None,
    replay_from_timestamp_ms: int | None,
    accept_source_change: bool,
) -> RunPlan:
    """One attempt's plan of :func:`run_once` (its arguments): the next plan
    (:func:`cdclake.pipeline.planner.plan_next`, timed as phase ``plan``) and, unless its range is
    empty (nothing new: no schema sync), :func:`sync_schema` on it (phase ``schema_sync``).

    Returns:
        The plan to apply; an empty range when there is nothing new, or nothing before a barrier
        schema change that has not settled.

    Raises:
        See :func:`~cdclake.pipeline.planner.plan_next` and :func:`sync_schema`.
    """
    with clock.phase("plan"):
        plan = plan_next(
            catalog,
            kafka,
            cfg,
            run_id,
            replay_from_offsets=replay_from_offsets,
            replay_from_timestamp_ms=replay_from_timestamp_ms,
            accept_source_change=accept_source_change,
        )
    if plan.range.is_empty:
        return plan
    with clock.phase("schema_sync"):
        return sync_schema(catalog, kafka, plan)


def _apply_or_plan_again(
    open_session: SessionFactory,
    settings: Settings,
    plan: RunPlan,
    kafka: KafkaClients,
    clock: PhaseClock,
    *,
    attempt: int,
    attempts: int,
) -> ApplyResult | None:
    """Attempt ``attempt`` (of ``attempts``) of :func:`run_once` to apply ``plan``
    (:func:`apply_plan`, timed on ``clock``).

    Returns:
        The apply's result; ``None`` when another commit moved the table during it and attempts
        remain: the run plans again from the table's offsets (logged at warning).

    Raises:
        ConcurrentRunError: another commit moved the table during the last attempt.
        EngineUnavailableError, ConfigError, BadBatchError, PositionOrderError: see :func:`apply_plan`.
    """
    try:
        return apply_plan(open_session, settings, plan, kafka=kafka, clock=clock)
    except ConcurrentRunError:
        if attempt == attempts:
            raise
        log.warning(
            "another commit moved table %s during this run (attempt %d of %d); planning again from the table's offsets",
            plan.table.identifier,
            attempt,
            attempts,
        )
        return None
