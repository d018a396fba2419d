"""The discovery DAG ``cdc_discovery``: finds the Debezium data topics the table config's
``discover`` patterns take and registers the new ones (docs/operations.md, "Discovery").

Every 10 minutes (confluent-kafka only; no Spark, no catalog, no engine slot), one task,
**discover**: lists the cluster's topics (connection ``kafka_default``), reads the key of the
first record of each new topic a pattern takes (its primary key; none: a changelog table) and
adds them to the registry (``CDCLAKE_DISCOVERY_REGISTRY``) in one atomic rename
(:func:`cdclake.pipeline.discovery.discover`). The next parse of ``dags/cdc_tables.py`` builds a
table DAG for each; the DAG files never call Kafka themselves. ``cdclake discover`` shows what a
pass would register without writing.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from cdclake.settings import Settings

if TYPE_CHECKING:
    from airflow.sdk import DAG

log = logging.getLogger(__name__)

DAG_ID = "cdc_discovery"


def discover_tables(**context: Any) -> dict[str, int]:
    """The ``discover`` task: one pass with ``write`` (:func:`cdclake.pipeline.discovery.discover`).

    Returns:
        The number of topics in each state (``{"registered": 120, "new": 2, "excluded": 3}``).
    """
    from collections import Counter

    from cdclake.model.config import load_tables
    from cdclake.pipeline.discovery import discover
    from cdclake_airflow.hooks import CdcLakeHook

    hook = CdcLakeHook()
    settings = hook.settings
    tables = load_tables(settings.tables_config)  # the file alone: registered topics are read apart
    if not tables.discover:
        log.info("the table config %s has no discover patterns: nothing to find", settings.tables_config)
        return {}
    findings = discover(
        tables,
        hook.kafka,
        settings.discovery_registry,
        write=True,
        now_ms=int(time.time() * 1000),
        catalog=hook.catalog,
    )
    for f in findings:
        if f.state in ("new", "pending", "left_out", "excluded") or f.reason:
            log.info("%s: %s %s %s", f.topic, f.state, f.identifier, f.reason)
    return dict(Counter(f.state for f in findings))


def build_discovery_dag(settings: Settings, schedule: str | None = "*/10 * * * *") -> DAG:
    """The DAG ``cdc_discovery``."""
    from airflow.sdk import task

    from cdclake_airflow.params import tables_dag

    with tables_dag(
        DAG_ID,
        "Registers the Debezium topics the discover patterns take; each becomes a table DAG",
        __doc__,
        schedule=schedule,
        tags=["cdc", "discovery"],
        task_defaults={"retries": 1, "retry_delay": timedelta(minutes=1), "execution_timeout": timedelta(minutes=30)},
    ) as dag:
        task(task_id="discover")(discover_tables)()
    return dag
