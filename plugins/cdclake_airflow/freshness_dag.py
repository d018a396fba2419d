"""The freshness DAG ``cdc_freshness``: every table's status figures as Airflow metrics, and one
check per table with a freshness target (docs/operations.md, "Freshness and metrics").

Every 15 minutes (pyiceberg and confluent-kafka; no Spark, no engine slot):

1. **status** reads :func:`cdclake.pipeline.status.status_report` for every configured table
   (connection ``kafka_default``, resolved now) and, when Kafka Connect is configured (connection
   ``kafka_connect``, or ``CDCLAKE_CONNECT_URL``), their sources (each table's Debezium connector
   and its binlog lag against the source database of ``cdc_source_db``); sets the gauges of
   :data:`cdclake_airflow.metrics.STATUS_GAUGES` and :data:`~cdclake_airflow.metrics.SOURCE_GAUGES`
   and returns the statuses (the XCom).
2. **check_freshness**, one mapped task instance per table with ``freshness_minutes``: fails with
   :class:`~cdclake.errors.FreshnessError` when the table is behind its target, or its source's
   connector does not run, or that connector is behind the source by more than the target, so
   that Airflow's alerting fires (``on_failure_callback``, email, chat providers) for that table.
   It lives apart from the table's own DAG so that a paused, stuck or failing table DAG is caught
   as well.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from cdclake.settings import Settings

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from cdclake.model.config import TableConfig

log = logging.getLogger(__name__)

DAG_ID = "cdc_freshness"


def status(**context: Any) -> dict[str, dict[str, Any]]:
    """The ``status`` task: every table's :class:`~cdclake.model.status.TableStatus` (JSON, by
    table name) and ``dag_id``, the DAG that applies it on schedule (its own, or its shared DAG);
    its gauges emitted."""
    from cdclake.model.config import load_tables
    from cdclake.pipeline.status import status_report
    from cdclake_airflow.hooks import CdcLakeHook
    from cdclake_airflow.metrics import emit_source, emit_status

    hook = CdcLakeHook()
    tables = list(load_tables(hook.settings.tables_config, hook.settings.discovery_registry).tables)
    report = status_report(hook.catalog, hook.kafka, tables, sources=hook.source_probe())
    for source in report.sources:
        emit_source(source)
        (log.info if source.connector.running else log.warning)("%s", "\n".join(source.lines()))
    out: dict[str, dict[str, Any]] = {}
    for cfg, st in zip(tables, report.tables, strict=True):
        figures = emit_status(st)
        log.info(
            "table %s: %s%s",
            st.name,
            ", ".join(f"{k} {v:g}" for k, v in figures.items()),
            "; " + "; ".join(st.problems) if st.problems else "",
        )
        out[st.name] = {**st.model_dump(mode="json"), "dag_id": cfg.scheduled_dag_id}
    return out


def check_freshness(name: str, statuses: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The ``check_freshness`` task of table ``name``.

    Returns:
        ``{"table", "fresh", "lag_events", "lag_seconds", "end_to_end_lag_seconds",
        "connector_state", "freshness_minutes"}``.

    Raises:
        FreshnessError: the table has events waiting and its newest applied event is older than
            its ``freshness_minutes``; or the runs of its DAG are failing; or its source's
            connector does not run, or is more than ``freshness_minutes`` behind the source.
    """
    from cdclake.errors import FreshnessError
    from cdclake.model.status import RunFailure

    st = statuses[name]
    dag_id = st.get("dag_id") or f"cdc_{name}"
    lag_s = None if st.get("lag_ms") is None else st["lag_ms"] / 1000
    out = {
        "table": name,
        "fresh": st.get("fresh"),
        "lag_events": st.get("lag_events"),
        "lag_seconds": lag_s,
        "end_to_end_lag_seconds": None if st.get("end_to_end_lag_ms") is None else st["end_to_end_lag_ms"] / 1000,
        "connector_state": (st.get("source") or {}).get("state"),
        "freshness_minutes": st.get("freshness_minutes"),
    }
    if st.get("run_failure"):
        failure = RunFailure.model_validate(st["run_failure"])
        raise FreshnessError(
            f"table {name} ({st['identifier']}) is not fresh: {failure.describe(st['checked_at_ms'])}. See "
            f'the log of that try of DAG {dag_id} and docs/operations.md, "A table whose runs fail".'
        )
    source = st.get("source") or {}
    if st.get("fresh") is False and source and not source.get("running"):
        raise FreshnessError(
            f"table {name} ({st['identifier']}) is not fresh: its source {source['name']} is {source['state']}: "
            f"{source.get('reason')}; remedy: {source.get('remedy')}. While its connector does not run, no change "
            f"reaches topic {st['topic']!r}, whatever the table's own lag says; see docs/operations.md, "
            '"Sources: the connector and the binlog".'
        )
    limit_ms = (st.get("freshness_minutes") or 0) * 60_000
    if st.get("fresh") is False and source.get("lag_ms") is not None and source["lag_ms"] > limit_ms:
        raise FreshnessError(
            f"table {name} ({st['identifier']}) is behind its freshness target of {st['freshness_minutes']} "
            f"minute(s) at its source: connector {source['name']} has not emitted {source.get('lag_transactions')} "
            f"source transaction(s) ({source.get('lag_bytes')} bytes of binlog), and the newest event it emitted is "
            f"{source['lag_ms'] / 60_000:.1f} minute(s) old. Check the connector's throughput and its task's log; "
            'docs/operations.md, "Sources: the connector and the binlog".'
        )
    if st.get("fresh") is False:
        last = st.get("last_commit") or {}
        raise FreshnessError(
            f"table {name} ({st['identifier']}) is behind its freshness target of {st['freshness_minutes']} "
            f"minute(s): {st.get('lag_events')} event(s) of topic {st['topic']!r} wait, and the newest event "
            f"applied is {lag_s / 60:.1f} minute(s) old; last commit: snapshot {last.get('snapshot_id')}, "
            f"run {last.get('run_id')!r}. Check the DAG {dag_id} (paused? failing? capped by "
            'max_events_per_run?) and docs/operations.md, "Freshness and metrics".'
        )
    if st.get("fresh") is None:
        log.warning("table %s: freshness unknown (%s)", name, "; ".join(st.get("problems") or ["no figures yet"]))
    else:
        log.info("table %s is fresh: %s", name, out)
    return out


def build_freshness_dag(settings: Settings, tables: list[TableConfig], schedule: str | None = "*/15 * * * *") -> DAG:
    """The DAG ``cdc_freshness`` over the configured ``tables``."""
    from airflow.sdk import task

    from cdclake_airflow.params import tables_dag

    judged = [t.name for t in tables if t.freshness_minutes is not None]
    with tables_dag(
        DAG_ID,
        "Every table's lag as metrics; a failed check per table behind its freshness target",
        __doc__,
        schedule=schedule,
        tags=["cdc", "monitoring"],
        task_defaults={"retries": 0, "execution_timeout": timedelta(minutes=10)},
    ) as dag:
        statuses = task(task_id="status")(status)()
        if judged:
            task(task_id="check_freshness")(check_freshness).partial(statuses=statuses).expand(name=judged)
    return dag
