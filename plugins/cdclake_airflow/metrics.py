"""The pipeline's figures as Airflow metrics (StatsD or OpenTelemetry, as Airflow's ``[metrics]``
section configures; nothing is sent when metrics are off). docs/monitoring.md, "Metrics", lists
the names.

Every name ends in the table's name (plain StatsD has no tags), and the same metric carries the
tag ``table`` for backends that keep tags (OpenTelemetry, DogStatsD). Names are prefixed by
Airflow's ``statsd_prefix`` / ``otel_prefix`` (default ``airflow``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdclake.model.source_health import SourceStatus
    from cdclake.model.status import TableStatus

log = logging.getLogger(__name__)

PREFIX = "cdclake"

RUN_COUNTERS = ("events", "quarantined", "keys_changed")
"""``cdclake.run.<name>.<table>``: counters added by every committed run (records consumed,
records quarantined, rows changed)."""

STATUS_GAUGES = {
    "lag_events": "lag.events",
    "lag_seconds": "lag.seconds",
    "last_commit_age_seconds": "last_commit.age_seconds",
    "open_quarantine": "quarantine.open",
    "events_24h": "events_24h",
    "end_to_end_lag_seconds": "lag.end_to_end_seconds",
}
"""``cdclake.<name>.<table>``: gauges set by the ``cdc_freshness`` DAG for every table."""

SOURCE_GAUGES = {
    "connector_running": "connector.running",
    "connector_failed_tasks": "connector.failed_tasks",
    "source_lag_seconds": "source.lag.seconds",
    "source_lag_bytes": "source.lag.bytes",
    "source_lag_transactions": "source.lag.transactions",
}
"""``cdclake.<name>.<source>``: gauges set by the ``cdc_freshness`` DAG for every source (its
connector's name, characters other than ``[A-Za-z0-9_-]`` as ``_``; tag ``source``)."""


def _stats() -> Any:
    """Airflow's metrics facade, initialised from Airflow's config when this process has not done
    it (``airflow dags test`` runs tasks in its own process)."""
    from airflow.sdk.observability import stats

    if getattr(stats, "_factory", None) is None:  # the task runner initialises it; dags test does not
        from airflow.sdk.configuration import conf
        from airflow.sdk.observability.metrics import stats_utils

        stats.initialize(
            factory=stats_utils.get_stats_factory(),
            export_legacy_names=conf.getboolean("metrics", "legacy_names_on", fallback=False),
        )
    return stats


def emit_run(table: str, result: Mapping[str, Any]) -> None:
    """A committed run's figures: counters ``cdclake.run.events|quarantined|keys_changed.<table>``,
    ``cdclake.run.ops.<op>.<table>`` per Debezium op, and timers
    ``cdclake.run.seconds.<phase>.<table>`` (plan, schema_sync, session, apply, publish; ms as
    StatsD timers)."""
    from datetime import timedelta

    stats = _stats()
    tags = {"table": table}
    for name in RUN_COUNTERS:
        stats.incr(f"{PREFIX}.run.{name}.{table}", int(result.get(name) or 0), tags=tags)
    for op, n in (result.get("ops") or {}).items():
        stats.incr(f"{PREFIX}.run.ops.{op}.{table}", int(n), tags={**tags, "op": op})
    for phase, seconds in (result.get("seconds") or {}).items():
        stats.timing(f"{PREFIX}.run.seconds.{phase}.{table}", timedelta(seconds=float(seconds)), tags=tags)


def status_figures(status: TableStatus) -> dict[str, float]:
    """The gauges of :data:`STATUS_GAUGES` of one table's status (unknown figures left out)."""
    figures: dict[str, float | None] = {
        "lag_events": status.lag_events,
        "lag_seconds": None if status.lag_ms is None else status.lag_ms / 1000,
        "last_commit_age_seconds": None if status.last_commit is None else status.last_commit.age_ms / 1000,
        "open_quarantine": status.open_quarantine,
        "events_24h": status.activity_24h.events,
        "end_to_end_lag_seconds": None if status.end_to_end_lag_ms is None else status.end_to_end_lag_ms / 1000,
    }
    return {k: float(v) for k, v in figures.items() if v is not None}


def emit_status(status: TableStatus) -> dict[str, float]:
    """Set the gauges ``cdclake.<figure>.<table>`` of :data:`STATUS_GAUGES`; returns them."""
    stats = _stats()
    figures = status_figures(status)
    for key, value in figures.items():
        stats.gauge(f"{PREFIX}.{STATUS_GAUGES[key]}.{status.name}", value, tags={"table": status.name})
    return figures


def source_figures(source: SourceStatus) -> dict[str, float]:
    """The gauges of :data:`SOURCE_GAUGES` of one source (unknown figures left out):
    ``connector_running`` 1 while its connector and every task run, else 0."""
    lag = source.lag
    figures: dict[str, float | None] = {
        "connector_running": 1 if source.connector.running else 0,
        "connector_failed_tasks": sum(1 for t in source.connector.tasks if t.state == "FAILED"),
        "source_lag_seconds": None if lag is None or lag.lag_ms is None else lag.lag_ms / 1000,
        "source_lag_bytes": None if lag is None else lag.bytes,
        "source_lag_transactions": None if lag is None else lag.transactions,
    }
    return {k: float(v) for k, v in figures.items() if v is not None}


def metric_name(name: str) -> str:
    """A source's name as the last part of a metric name (``[A-Za-z0-9_-]``, others as ``_``)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)


def emit_source(source: SourceStatus) -> dict[str, float]:
    """Set the gauges ``cdclake.<figure>.<source>`` of :data:`SOURCE_GAUGES`; returns them."""
    stats = _stats()
    figures = source_figures(source)
    for key, value in figures.items():
        stats.gauge(f"{PREFIX}.{SOURCE_GAUGES[key]}.{metric_name(source.name)}", value, tags={"source": source.name})
    return figures
