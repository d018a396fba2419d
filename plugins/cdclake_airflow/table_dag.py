"""One DAG per configured table. Its shape follows the engine (``CDCLAKE_ENGINE``):

* ``connect`` (the default): one task, **apply**, in the Airflow pool ``cdc_apply``. It plans,
  syncs the schema, applies in a new session of the shared Spark Connect server (connection
  ``spark_connect_default``) and publishes, one phase after the other in one process
  (:func:`cdclake.runner.run_once`): a run costs its events, not four task start-ups. With
  nothing new it is *skipped*. Its log ends with one line telling the run
  (:func:`cdclake.runner.summary_line`: replay or not, offset range, events by op, quarantined,
  keys changed, snapshot, seconds per phase; with nothing new, :func:`nothing_new_line`, logged
  before the skip); only Airflow's own closing lines follow.
* ``submit``: ``plan -> schema_sync -> apply -> publish``, where ``apply`` is
  ``spark_jobs/apply_cdc.py`` through ``SparkSubmitOperator`` (connection ``spark_default``), for
  clusters reached through ``spark-submit`` (YARN, Kubernetes, standalone). The same line ends
  the ``publish`` task's log.

The tasks take their connections from :class:`cdclake_airflow.hooks.CdcLakeHook` when they run.

The phases, whichever the shape:

* **plan** reads the table's committed offsets from its Iceberg snapshot summary and the topic's
  watermarks from Kafka, and caps the range at ``max_events_per_run``. With nothing new the run
  stops there: no Spark, no commit.
* **schema sync** (pyiceberg, confluent-kafka; no Spark) applies the source table's schema
  changes up to the planned batch (``cdclake.pipeline.schema_sync``). A change that is not additive
  (rename, deleted column, primary key, ...) is a barrier: if the batch holds events before it,
  the batch is capped before it and the change waits for the next run, so that every row is
  written under the schema it was produced with.
* **apply** makes one Iceberg commit holding the rows, the end offsets and the run id.
* **publish** emits the Iceberg table as an Airflow asset event (snapshot id, events by op), so
  that downstream DAGs can be scheduled on the table, with the run's lineage and metrics. It
  publishes the run's own commit (found by run id in the table's history), also when a retry
  found its range applied by an earlier try.

Table upkeep (compaction, snapshot expiry, tombstone expiry) is the ``cdc_maintenance`` DAG's.
A retry of any task is safe: a run that already committed finds its offsets in the table.
Errors a retry cannot change (:data:`~cdclake_airflow.table_failures.NOT_RETRIED`: a run whose every record was quarantined, a
run that quarantined more bad records than ``bad_records_tolerance``, a source transaction larger
than ``max_transaction_events``, a trigger-form Param that does not fit the table) are not retried. Each failed try is counted in the
table's record of failed tries (:func:`~cdclake_airflow.table_failures.record_failure`), which ``cdclake status``, the CDC monitor
and ``cdc_freshness`` show; the next run that succeeds removes it.

The trigger form starts a **replay** (``replay_from_offsets`` or ``replay_from_timestamp``; the
recovery switch ``accept_source_change`` in its collapsed recovery section): the form and Airflow's
REST API refuse a value the Params' JSON schema does not allow, and the run checks the rest first
and fails at once, without retry, its log ending with the one line naming the Param
(:mod:`cdclake.model.replay`, :func:`~cdclake_airflow.table_failures.refused_params`). Airflow's Backfill is refused
(:data:`cdclake_airflow.params.RUN_TYPES`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from cdclake.errors import QuarantinedBatchError, QuarantineToleranceError
from cdclake.settings import APPLY_POOL, APPLY_PRIORITY_WEIGHT, PROJECT_ROOT, ConnectionIds, Settings, jars_dir
from cdclake_airflow.table_failures import record_failure, refused_params, retry_args, runs_succeed

if TYPE_CHECKING:
    from airflow.sdk import DAG
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from cdclake.errors import QuarantinedBatchError
    from cdclake.model.config import TableConfig
    from cdclake.model.outcome import ApplyResult
    from cdclake.model.plan import RunPlan
    from cdclake.runner import SessionFactory
    from cdclake_airflow.hooks import CdcLakeHook

log = logging.getLogger(__name__)

APPLY_JOB = PROJECT_ROOT / "spark_jobs" / "apply_cdc.py"


def table_asset_uri(settings: Settings, cfg: TableConfig) -> str:
    """The asset URI of a table: ``iceberg://<catalog>/<namespace>/<table>``."""
    return f"iceberg://{settings.catalog_name}/{cfg.namespace}/{cfg.table}"


def table_asset_name(settings: Settings, cfg: TableConfig) -> str:
    """The asset name of a table: ``<catalog>.<namespace>.<table>``."""
    return f"{settings.catalog_name}.{cfg.identifier}"


def table_asset(settings: Settings, cfg: TableConfig) -> Any:
    """The Airflow asset of a table (:func:`table_asset_name`, :func:`table_asset_uri`), as every DAG
    of the project declares it (its own DAG's outlet, its shared DAG's events, its group DAG's
    schedule): its ``extra``, which the UI's asset page shows ("Additional Data"), says in words
    what the asset is and how a DAG is scheduled on it. Airflow stores the ``extra`` of the last
    declaration it parsed, so a DAG that declares the asset again with another ``extra`` replaces
    it: a downstream DAG refers to it (``Asset.ref``) instead."""
    from airflow.sdk import Asset

    uri = table_asset_uri(settings, cfg)
    return Asset(
        name=table_asset_name(settings, cfg),
        uri=uri,
        extra={
            "description": f"Iceberg table {cfg.identifier} (catalog {settings.catalog_name}), the Debezium "
            f"change events of Kafka topic {cfg.topic} applied by DAG {cfg.scheduled_dag_id}: one asset event "
            "per run that commits, its extra naming the table's new snapshot (snapshot_id).",
            "uri": uri,
            "schedule a DAG on it": f"schedule=[Asset.ref(uri='{uri}')]",
        },
    )


def table_doc(settings: Settings, cfg: TableConfig) -> str:
    """The ``doc_md`` of table ``cfg``'s DAG, plain Markdown: what it applies where, its asset URI
    and a downstream DAG scheduled on it in three lines, then how every table DAG runs (this
    module's docstring, :func:`cdclake_airflow.params.plain_markdown`)."""
    from cdclake_airflow.params import plain_markdown

    uri = table_asset_uri(settings, cfg)
    runs = (
        f"on schedule `{cfg.schedule}`"
        if cfg.shared_dag is None and cfg.schedule
        else f"on the schedule of `{cfg.scheduled_dag_id}` (this DAG: manual runs and replays)"
        if cfg.shared_dag is not None
        else "when triggered"
    )
    return (
        f"# Table `{cfg.identifier}`\n\n"
        f"Applies the Debezium change events of Kafka topic `{cfg.topic}` to the Iceberg table "
        f"`{cfg.identifier}` (catalog `{settings.catalog_name}`), {runs}.\n\n"
        f"**Asset:** `{uri}` (named `{table_asset_name(settings, cfg)}`): one asset event per run that "
        "commits; its extra's `snapshot_id` is the table's new snapshot. A DAG scheduled on it runs after "
        "each commit:\n\n"
        "```python\n"
        "from airflow.sdk import DAG, Asset\n"
        f'with DAG("{cfg.name}_downstream", schedule=[Asset.ref(uri="{uri}")]):\n'
        "    ...  # your tasks: read the table at the event's extra['snapshot_id']\n"
        "```\n\n"
        "**Trigger** with the form's *Replay from offsets* or *Replay from timestamp* to apply a past range "
        "again; empty, the run is an ordinary one. Each run's task log ends with one line telling what it "
        "applied, or why it applied nothing.\n\n"
        "---\n\n" + (plain_markdown(__doc__) or "")
    )


def _plan_params(context: dict[str, Any]) -> dict[str, Any]:
    """The trigger form's replay as :func:`cdclake.pipeline.planner.plan_next`'s keywords, checked
    first in the task (:func:`cdclake.model.replay.replay_start`).

    Raises:
        TriggerParamError: a Param that does not fit (names it and the values it allows).
    """
    from cdclake.model.replay import replay_start

    start = replay_start(context.get("params") or {}, now_ms=int(datetime.now(timezone.utc).timestamp() * 1000))
    return {
        "replay_from_offsets": start.offsets,
        "replay_from_timestamp_ms": start.timestamp_ms,
        "accept_source_change": start.accept_source_change,
    }


def nothing_new_line(plan: RunPlan, seconds: Mapping[str, float]) -> str:
    """The one line that tells a run that applied nothing, the last its task logs (before the task is
    skipped), as :func:`cdclake.runner.summary_line` tells a run that applied: the table, the offsets
    the table stays at, whether it was a replay and ``seconds`` per phase.

    Example: ``run of table inventory.products: nothing new since offsets {0: 6, 1: 6, 2: 6}; replay no;
    seconds {'plan': 0.21}``; a batch held before a schema change that waits for every partition to
    settle: ``run of table inventory.products: nothing applied: the batch waits at schema change
    <change> until every partition has settled past it; offsets {0: 6}; replay no; seconds {...}``.
    """
    offsets = dict(sorted(plan.range.end.items()))
    what = (
        f"nothing applied: the batch waits at schema change {plan.capped_before} until every partition has "
        f"settled past it; offsets {offsets}"
        if plan.capped_before
        else f"nothing new since offsets {offsets}"
    )
    return f"run of table {plan.table.identifier}: {what}; replay {'yes' if plan.replay else 'no'}; seconds {dict(seconds)}"


def _publish(
    catalog: Catalog, cfg: TableConfig, context: Mapping[str, Any]
) -> tuple[Table, dict[str, Any], ApplyResult | None]:
    """This run's commit and its CDC summary figures, for the run's asset event: the commit
    whose snapshot summary carries the run id (:func:`cdclake.io.refs.run_commit`), made by
    this try or by an earlier try that failed after it; the table's current snapshot when the run
    has none.

    Returns:
        The table; the event's extra: ``table``, ``snapshot_id``, ``previous_snapshot_id`` (the
        snapshot the run's commit started from, :func:`cdclake.io.changes.runs_after`; ``None``
        for the table's first commit; absent when the run has no commit), the summary keys of the
        run (run id, end offsets, events, upserts, deletes, ops, tombstones, quarantined, keys
        changed, first and last position, and with a change feed the feed's snapshot and rows)
        and ``total_records``; and the run's commit as an
        :class:`~cdclake.model.outcome.ApplyResult` (``None``: the run has none).
    """
    from cdclake.io.changes import runs_after
    from cdclake.io.refs import head_snapshot, run_commit
    from cdclake.model.layout import SummaryKeys
    from cdclake.model.outcome import ApplyResult

    table = catalog.load_table(cfg.identifier)
    own = run_commit(table, cfg.topic, context["run_id"])
    snap = head_snapshot(table)  # a group table's runs commit to its stage branch
    if own is not None:
        snapshot_id, summary = own
    else:
        snapshot_id = snap.snapshot_id if snap is not None else None
        summary = snap.summary.additional_properties if snap is not None and snap.summary is not None else {}
    keys = (
        SummaryKeys.RUN_ID,
        SummaryKeys.END_OFFSETS,
        SummaryKeys.EVENTS,
        SummaryKeys.UPSERTS,
        SummaryKeys.DELETES,
        SummaryKeys.OPS,
        SummaryKeys.TOMBSTONES,
        SummaryKeys.QUARANTINED,
        SummaryKeys.KEYS_CHANGED,
        SummaryKeys.FIRST_POSITION,
        SummaryKeys.LAST_POSITION,
        SummaryKeys.CHANGES_SNAPSHOT,
        SummaryKeys.CHANGES_ROWS,
        SummaryKeys.HISTORY_SNAPSHOT,
    )
    extra: dict[str, Any] = {"table": cfg.identifier, "snapshot_id": snapshot_id}
    if own is not None:  # the snapshot the run's commit started from: its change rows' base
        ours = [r for r in runs_after(table, cfg.topic) if r.run_id == context["run_id"]]
        extra["previous_snapshot_id"] = ours[-1].previous_snapshot_id if ours else None
    extra.update({k: summary[k] for k in keys if summary.get(k) is not None})
    if summary:
        extra["total_records"] = summary.get("total-records")
    return table, extra, ApplyResult.of_commit("committed", *own) if own is not None else None


def plan(table_json: str, **context: Any) -> str | None:
    """The ``plan`` task (``submit`` engine): the run's :class:`~cdclake.model.plan.RunPlan` as
    JSON, or ``None`` (short-circuit) when there is nothing new (after the run's line,
    :func:`nothing_new_line`).

    The trigger form's ``replay_from_offsets`` / ``replay_from_timestamp`` make the run a manual
    replay from there (see :func:`cdclake.pipeline.planner.plan_next`).

    Raises:
        AirflowFailException: a trigger-form Param that does not fit the table (:func:`refused_params`;
            not retried).
        OffsetsOutOfRangeError: committed offsets fell below the low watermark (see the message).
        ConfigError: the table has no primary key and is not configured as a change log.
    """
    from cdclake.model.config import TableConfig
    from cdclake.pipeline.planner import plan_next
    from cdclake.runner import PhaseClock
    from cdclake_airflow.hooks import CdcLakeHook

    hook = CdcLakeHook()
    cfg = TableConfig.model_validate_json(table_json)
    clock = PhaseClock()
    with clock.phase("plan"), refused_params():
        planned = plan_next(hook.catalog, hook.kafka, cfg, context["run_id"], **_plan_params(context))
    if planned.range.is_empty:  # schema sync, apply and publish are skipped: no Spark job, no commit
        runs_succeed(hook.catalog, cfg)
        log.info("%s", nothing_new_line(planned, clock.seconds))  # the run's line
        return None
    return planned.to_json()


def schema_sync(**context: Any) -> str:
    """The ``schema_sync`` task (``submit`` engine): apply the table's schema changes up to the
    planned batch and return the plan to apply (:func:`cdclake.runner.sync_schema`); skipped, with
    the apply and publish tasks, when the plan is capped to nothing at a schema change that waits
    until every partition has settled (docs/operations.md).

    Raises:
        SchemaChangeError: a change that stops the table (incompatible type under
            ``incompatible: fail``, table renamed or dropped); nothing was applied.
        SchemaError: the table config's primary key is not the source table's.
    """
    from airflow.sdk.exceptions import AirflowSkipException

    from cdclake.model.plan import RunPlan
    from cdclake.runner import PhaseClock, sync_schema
    from cdclake_airflow.hooks import CdcLakeHook

    hook = CdcLakeHook()
    clock = PhaseClock()
    with clock.phase("schema_sync"):
        planned = sync_schema(hook.catalog, hook.kafka, RunPlan.from_json(context["ti"].xcom_pull(task_ids="plan")))
    if planned.range.is_empty:  # capped at a schema barrier that waits for a partition to settle
        log.info("%s", nothing_new_line(planned, clock.seconds))  # the run's line, before the skip
        raise AirflowSkipException("the batch waits at a schema change: no Spark job, no commit, no asset event")
    return planned.to_json()


def apply(table_json: str, asset: Any, **context: Any) -> dict[str, Any]:
    """The ``apply`` task of the ``connect`` engine, one task for the whole run
    (:func:`run_table` in a new session of the Spark Connect server).

    With nothing new the task is skipped (no session, no commit, no asset event). A retry of a
    try that committed and then failed applies nothing more: it publishes that commit (the asset
    event, lineage and metrics the failed try did not send), so each commit is published once.

    Returns:
        The :class:`~cdclake.model.outcome.ApplyResult` as a dict (the XCom), plus ``plan``
        (the applied range) and ``seconds`` per phase (``publish`` included).

    Raises:
        AirflowSkipException: nothing new, or no whole source transaction yet (the run's line,
            logged first, says which).
        AirflowFailException: a replay whose range holds no whole source transaction; a
            trigger-form Param that does not fit the table (:func:`refused_params`).
        EngineUnavailableError, ConcurrentRunError, OffsetsOutOfRangeError, ConfigError,
            SchemaChangeError, SchemaError, BadBatchError, PositionOrderError,
            QuarantinedBatchError, QuarantineToleranceError: see :func:`run_table`.
    """
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from cdclake.model.config import TableConfig
    from cdclake_airflow.hooks import CdcLakeHook

    hook = CdcLakeHook()
    cfg = TableConfig.model_validate_json(table_json)

    def emit(extra: dict[str, Any]) -> None:
        context["outlet_events"][asset].extra = extra

    with refused_params():
        ran = run_table(hook, cfg, context, hook.spark_session, emit, _plan_params(context))
    if ran.outcome == "nothing_new":
        log.info("%s", ran.line)  # the run's line: the last of the task's own log, before the skip
        raise AirflowSkipException("nothing new: no Spark session, no commit, no asset event")
    if ran.outcome == "waiting":
        if ran.replay:
            raise AirflowFailException(
                "the replay's range holds no whole source transaction (its first one is not whole: see the "
                "log above); nothing was committed. Replay from an offset where a transaction starts, or once "
                "its END is in the transaction topic"
            )
        raise AirflowSkipException("no whole source transaction yet: no commit, no asset event")
    assert ran.out is not None
    return ran.out


@dataclass(frozen=True)
class TableRun:
    """What :func:`run_table` did.

    Attributes:
        outcome: ``committed`` (this run's commit, made by this try or an earlier one),
            ``nothing_new`` (no session, no commit) or ``waiting`` (no whole source transaction
            yet: no commit).
        replay: whether the run was a manual replay.
        out: for ``committed``, the task's XCom: the :class:`~cdclake.model.outcome.ApplyResult`
            as a dict, ``plan`` (the applied range) and ``seconds`` per phase (``publish``
            included).
        line: for ``nothing_new``, the run's one line (:func:`nothing_new_line`), for the table
            DAG's task to log last before it is skipped (a shared DAG's task logs its own summary).
    """

    outcome: Literal["committed", "nothing_new", "waiting"]
    replay: bool = False
    out: dict[str, Any] | None = None
    line: str | None = None


def run_table(
    hook: CdcLakeHook,
    cfg: TableConfig,
    context: Mapping[str, Any],
    open_session: SessionFactory,
    emit: Callable[[dict[str, Any]], None],
    params: Mapping[str, Any] | None = None,
) -> TableRun:
    """One run of table ``cfg`` in an Airflow task: :func:`cdclake.runner.run_once` (plan, schema
    sync, apply in a session of ``open_session``, planning again after a concurrent commit), then
    publish: the commit's figures go to ``emit`` (the asset event's extra), its lineage and metrics
    are sent, the table's record of failed tries is removed, and the run's summary line is logged
    (:func:`cdclake.runner.summary_line`; with nothing new, the caller logs :attr:`TableRun.line`).

    Args:
        hook: the task's connections.
        cfg: the table.
        context: the task's Airflow context (``run_id``).
        open_session: the session of the apply (a new one, or one lent by a shared DAG's task,
            :class:`cdclake.runner.SharedSession`).
        emit: takes the asset event's extra of the run's commit (:func:`_publish`).
        params: a replay's keywords for :func:`cdclake.runner.run_once` (:func:`_plan_params`).

    Raises:
        EngineUnavailableError, ConcurrentRunError, OffsetsOutOfRangeError, ConfigError,
            SchemaChangeError, SchemaError, BadBatchError, PositionOrderError: see
            :func:`cdclake.runner.run_once` (the task's ordinary retry runs again).
        QuarantinedBatchError: every record of the range was quarantined, none applied; the
            quarantine and the offsets were committed (and published), and the task is not retried.
        QuarantineToleranceError: the run newly quarantined more bad records than the table's
            ``bad_records_tolerance``; its commit (good records, quarantine, offsets) was made, its
            lineage and metrics sent, and the task is not retried. Raised by the try that
            committed only: a later try of the run (a cleared task) finds the commit and succeeds.
    """
    from cdclake.runner import PhaseClock, run_once, summary_line
    from cdclake_airflow.metrics import emit_run

    try:
        run = run_once(
            cfg,
            context["run_id"],
            settings=hook.settings,
            catalog=hook.catalog,
            kafka=hook.kafka,
            open_session=open_session,
            **(params or {}),
        )
    except (QuarantinedBatchError, QuarantineToleranceError):
        # the run committed its quarantine and offsets: its lineage and metrics are sent, then it fails
        table, extra, own = _publish(hook.catalog, cfg, context)
        emit(extra)
        if own is not None:
            _record_lineage(hook, table, cfg)
            emit_run(cfg.name, json.loads(own.to_json()))
        raise
    if run.result is None:
        runs_succeed(hook.catalog, cfg)
        return TableRun("nothing_new", run.plan.replay, line=nothing_new_line(run.plan, run.seconds))
    if run.result.status == "waiting":  # the apply's log says which transaction it waits for
        if not run.plan.replay:
            runs_succeed(hook.catalog, cfg)
            log.info("%s", summary_line(run.plan, run.result, run.seconds))  # the records waiting, also in status
        return TableRun("waiting", run.plan.replay)
    clock = PhaseClock(run.seconds)
    with clock.phase("publish"):
        table, extra, own = _publish(hook.catalog, cfg, context)
        emit(extra)
        nothing_applied = _applied_nothing(cfg, table, own, context["run_id"])
        if nothing_applied is not None:  # an earlier try committed it, and sent its figures
            raise nothing_applied
        runs_succeed(hook.catalog, cfg)
    out: dict[str, Any] = {**json.loads(run.result.to_json()), "plan": json.loads(run.plan.range.to_json())}
    out["seconds"] = clock.seconds
    if run.result.snapshot_id is not None:  # this run's commit, made by this try or an earlier one
        _record_lineage(hook, table, cfg)
        emit_run(cfg.name, out)  # last: a try that fails before here has sent none
    log.info("%s", summary_line(run.plan, run.result, clock.seconds))  # the task's last line
    return TableRun("committed", run.plan.replay, out)


def _record_lineage(hook: CdcLakeHook, table: Table, cfg: TableConfig) -> None:
    """Report the run's lineage to Airflow's hook-lineage collector: the Kafka topic in
    (``kafka://<first bootstrap server>/<topic>``, the Kafka provider's asset URI), the Iceberg
    table out, as its location (``file://...`` or ``s3://...``: OpenLineage names an Iceberg
    dataset by its storage location) and as its asset (:func:`table_asset_uri`). The OpenLineage
    provider reads it when a transport is configured (docs/monitoring.md, "Lineage"); otherwise
    the collector is a no-op."""
    from airflow.sdk.lineage import NoOpCollector, get_hook_lineage_collector

    collector = get_hook_lineage_collector()
    if isinstance(collector, NoOpCollector):  # no lineage reader (OpenLineage) is installed
        return
    collector.add_input_asset(context=hook, uri=f"kafka://{hook.kafka.bootstrap.split(',')[0].strip()}/{cfg.topic}")
    location = table.location()
    collector.add_output_asset(context=hook, uri=location if "://" in location else f"file://{location}")
    collector.add_output_asset(context=hook, uri=table_asset_uri(Settings.from_env(), cfg))


def publish(asset: Any, **context: Any) -> dict[str, Any]:
    """The ``publish`` task (``submit`` engine): attach the run's commit's facts to the asset
    event; for the run's commit, also its lineage and metrics (:func:`_publish`). Its last line
    tells the run (:func:`cdclake.runner.summary_line`)."""
    from cdclake.model.plan import RunPlan
    from cdclake.runner import PhaseClock, summary_line
    from cdclake_airflow.hooks import CdcLakeHook
    from cdclake_airflow.metrics import emit_run

    hook = CdcLakeHook()
    clock = PhaseClock()
    with clock.phase("publish"):
        planned = RunPlan.from_json(context["ti"].xcom_pull(task_ids="schema_sync"))
        cfg = planned.table
        table, extra, own = _publish(hook.catalog, cfg, context)
        context["outlet_events"][asset].extra = extra
        nothing_applied = _applied_nothing(cfg, table, own, context["run_id"])
        if nothing_applied is None:
            runs_succeed(hook.catalog, cfg)
        log.info("published %s: %s", asset.uri, extra)
        if own is not None:  # this run's commit, whichever try of the apply task made it
            _record_lineage(hook, table, cfg)
            emit_run(cfg.name, json.loads(own.to_json()))  # a try that fails before here has sent none
    if nothing_applied is not None:  # counted and traced like every commit, then the run fails
        raise nothing_applied
    if own is not None:  # the run's last line (the other phases' seconds are their tasks' durations)
        log.info("%s", summary_line(planned, own, clock.seconds))
    return extra


def _applied_nothing(
    cfg: TableConfig, table: Table, own: ApplyResult | None, run_id: str
) -> QuarantinedBatchError | None:
    """A retry must not turn a run that applied nothing into a success: the error to fail with when
    the run's commit (made by an earlier try, which failed) quarantined every record, else ``None``."""
    from cdclake.io.refs import run_commit
    from cdclake.model.decision import applied_nothing_before
    from cdclake.model.run_state import applies_nothing

    if own is None or own.snapshot_id is None or not applies_nothing(own.quarantined, own.ops or {}):
        return None
    commit = run_commit(table, cfg.topic, run_id)  # its summary names the offset ranges
    return applied_nothing_before(cfg, run_id, *commit) if commit is not None else None


def _submit_task(settings: Settings, cfg: TableConfig) -> Any:
    """The ``apply`` task of the ``submit`` engine: ``spark-submit spark_jobs/apply_cdc.py``; the
    catalog's and Kafka's credentials reach the job in a private file, never on its command line
    (:mod:`cdclake_airflow.spark_submit`)."""
    from cdclake.spark.session import spark_conf
    from cdclake_airflow.spark_submit import CdcSparkSubmitOperator

    venv_bin = os.path.dirname(sys.executable)
    return CdcSparkSubmitOperator(
        task_id="apply",
        pool=APPLY_POOL,
        priority_weight=APPLY_PRIORITY_WEIGHT,
        conn_id=ConnectionIds.SPARK,
        application=str(APPLY_JOB),
        name=f"cdc-apply-{cfg.name}",
        jars=",".join(str(p) for p in sorted(jars_dir("spark").glob("*.jar"))),
        conf=spark_conf(settings),
        driver_memory="2g",
        application_args=["--plan", "{{ ti.xcom_pull(task_ids='schema_sync') }}"],
        alert_file=True,  # the try that committed too many bad records fails, not retried
        # spark-submit of the pip package finds its Spark home through the python3 on PATH
        env_vars={
            "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        },
    )


def build_table_dag(settings: Settings, cfg: TableConfig) -> DAG:
    """The DAG ``cdc_<name>`` of one configured table (its ``apply`` task as the table's
    ``engine`` says, else ``settings.engine``); unscheduled when the table has a ``shared_dag``,
    which applies it on its schedule (:mod:`cdclake_airflow.shared_dag`)."""
    from airflow.sdk import DAG, task

    from cdclake_airflow.params import RUN_TYPES, replay_params

    asset = table_asset(settings, cfg)
    default_args = {
        "owner": cfg.owner,
        "on_failure_callback": partial(record_failure, cfg.identifier, "failing"),
        "on_retry_callback": partial(record_failure, cfg.identifier, "retrying"),
        **retry_args(cfg),
    }
    description = f"Apply Debezium events of {cfg.topic} to Iceberg table {cfg.identifier}"
    if cfg.shared_dag is not None:  # its shared DAG applies it on schedule; this one is for manual runs
        description += f" (on schedule: {cfg.scheduled_dag_id}; this DAG: manual runs and replays)"
    with DAG(
        dag_id=cfg.dag_id,
        description=description,
        schedule=cfg.schedule if cfg.shared_dag is None else None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        default_args=default_args,
        tags=["cdc", *cfg.tags],
        doc_md=table_doc(settings, cfg),
        params=replay_params(cfg.schedule),
        allowed_run_types=RUN_TYPES,
    ) as dag:
        table_json = cfg.model_dump_json()
        if (cfg.engine or settings.engine) == "connect":
            # the XCom repeats the summary line, which stays the task's last line of its own
            task(
                task_id="apply",
                pool=APPLY_POOL,
                priority_weight=APPLY_PRIORITY_WEIGHT,
                outlets=[asset],
                show_return_value_in_logs=False,
            )(apply)(table_json, asset)
        else:
            plan_task = task.short_circuit(task_id="plan")(plan)(table_json)
            sync_task = task(task_id="schema_sync")(schema_sync)()
            publish_task = task(task_id="publish", outlets=[asset], show_return_value_in_logs=False)(publish)(asset)
            plan_task >> sync_task >> _submit_task(settings, cfg) >> publish_task
    return dag
