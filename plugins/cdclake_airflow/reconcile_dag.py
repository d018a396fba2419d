"""The reconcile DAG ``cdc_reconcile``: prove that each Iceberg table equals its source table, and
mend it when it does not (docs/operations.md, "Reconcile and repair"; the pipeline is
:mod:`cdclake.pipeline.reconcile`).

Daily, and manual with Params: the tables, a primary-key range, the mode (``report`` or
``repair``) and the chunk size. One mapped task instance per table:

1. **reconcile** reads each chunk's digest from the source (connection ``cdc_source_db``) and the
   lake, compares the differing chunks row by row once the lake has applied past the source reads
   (it waits for the table's own DAG runs to commit), and appends the outcome to the Iceberg table
   ``cdc_ops.reconcile``. In ``repair`` mode it then deletes the lake rows the source lacks, has
   Debezium re-read exactly the missing and differing keys (incremental snapshot with
   ``additional-conditions``), and compares those chunks again.
2. For a table with a history (``history`` in its table config) it then checks the history's current
   rows against the table (:mod:`cdclake.pipeline.reconcile_history`).
3. The task fails when differences remain, or the history differs from its table
   (``reconcile.on_difference: fail``, the default), so Airflow's alerting fires; with ``warn`` it
   logs them and succeeds.

Other failures (a broker or catalog that does not answer for a moment) are retried twice, two
minutes apart; differences that remain, configuration errors and a table that did not catch up
within ``catch_up_timeout_minutes`` (:data:`NOT_RETRIED`) fail at once, since a retry would compare
again only to find them again, or wait as long again.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from cdclake.errors import CatchUpTimeoutError, ConfigError, DriftError
from cdclake.settings import Settings

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from cdclake.model.config import TableConfig

log = logging.getLogger(__name__)

DAG_ID = "cdc_reconcile"

RECONCILED = (
    "among the upsert tables of the table config (changelog tables do not mirror their source, so reconcile "
    "does not compare them)"
)
"""The tables a run may reconcile, as the message of an unknown name says it."""


def reconcile(name: str, **context: Any) -> dict[str, Any]:
    """Reconcile (or repair) table ``name`` with the run's Params.

    Raises:
        DriftError: differences remain, or the table's history differs from the table (the message
            says what differs: counts, a few keys), and the table's ``reconcile.on_difference`` is
            ``fail``.
    """
    from cdclake.model.config import load_tables
    from cdclake.pipeline.catch_up import poll_catch_up
    from cdclake.pipeline.reconcile import ReconcileParams, reconcile_table
    from cdclake_airflow.hooks import CdcLakeHook

    params = context["params"]
    hook = CdcLakeHook()
    settings = hook.settings
    cfg = load_tables(settings.tables_config, settings.discovery_registry).get(name)
    key_range = params.get("key_range")
    run = ReconcileParams(
        mode=params["mode"],
        chunk_rows=int(params["chunk_rows"]),
        key_range=(tuple(key_range["from"]), tuple(key_range["to"])) if key_range else None,
        ignored_columns=cfg.reconcile.ignored_columns,
        run_id=str(context["run_id"]),
    )
    catch_up = poll_catch_up(hook.catalog, cfg, timeout_s=60.0 * float(params["catch_up_timeout_minutes"]))
    result = reconcile_table(settings, hook.kafka, cfg, hook.source_database(), run, catch_up)
    outcome = {
        "table": cfg.identifier,
        "differences": result.differences,
        "unsettled": result.unsettled,
        "repaired": result.repaired,
        "summary": result.summary(),
        "history_differences": result.history_differences,
    }
    message = result.drift(run.run_id)
    if message is not None:
        if cfg.reconcile.on_difference == "fail":
            raise DriftError(message)
        log.warning("%s", message)
    return outcome


NOT_RETRIED = (DriftError, ConfigError, CatchUpTimeoutError)
"""The errors a reconcile task does not retry: differences that remain, a table the run cannot
compare, a table that did not catch up within the run's timeout (a retry would wait as long again,
holding its slot and the run, while the table's own runs are behind)."""


def build_reconcile_dag(settings: Settings, tables: list[TableConfig], schedule: str | None = "@daily") -> DAG:
    """The DAG ``cdc_reconcile`` over the upsert tables of the configured ``tables``."""
    from airflow.sdk import ExceptionRetryPolicy, Param, RetryAction, RetryRule, task

    from cdclake_airflow.params import select_tables_task, tables_dag, tables_param

    upserts = [t for t in tables if t.write_mode == "upsert"]
    with tables_dag(
        DAG_ID,
        "Compare each Iceberg table with its source table; repair the differences (report or repair)",
        __doc__,
        schedule=schedule,
        tags=["cdc", "reconcile"],
        task_defaults={
            "retries": 2,
            "retry_delay": timedelta(minutes=2),
            "retry_policy": ExceptionRetryPolicy(
                rules=[
                    RetryRule(exception=list(NOT_RETRIED), action=RetryAction.FAIL, reason="not retried: see the error")
                ]
            ),
            "execution_timeout": timedelta(hours=6),
        },
        params={
            "tables": tables_param([t.name for t in upserts], "reconcile"),
            "mode": Param(
                "report",
                type="string",
                enum=["report", "repair"],
                title="Mode",
                description="report: find the differences; repair: then mend exactly the differing keys.",
            ),
            "key_range": Param(
                None,
                type=["null", "object"],
                title="Primary-key range",
                description='Only keys in this inclusive range, e.g. {"from": [1000], "to": [2000]}; empty: all.',
            ),
            "chunk_rows": Param(
                10_000,
                type="integer",
                minimum=100,
                title="Rows per chunk",
                description="Rows per chunk of primary keys (at least 100): each chunk's digest is compared, and a "
                "chunk that differs row by row.",
            ),
            "catch_up_timeout_minutes": Param(
                60,
                type="integer",
                minimum=1,
                title="Catch-up timeout (minutes)",
                description="How long to wait for the table's DAG runs to apply past the source reads.",
            ),
        },
    ) as dag:
        chosen = select_tables_task(upserts, RECONCILED)
        # a task waits for its table's applies while it holds an executor slot: a few at a time
        # (Settings.reconcile_tasks), so that the applies they wait for find a slot
        task(task_id="reconcile", max_active_tis_per_dag=settings.reconcile_tasks)(reconcile).expand(name=chosen)
    return dag
