"""The maintenance DAG ``cdc_maintenance``: keep each table's files, manifests and snapshots few
and small (:mod:`cdclake.spark.maintenance`; docs/operations.md, "Table maintenance").

Daily, and manual with Params: the tables, the actions, a dry run. One mapped task instance per
table, in the Airflow pool ``cdc_apply`` (it uses the same engine as the applies):

* ``connect`` engine: a session of the shared Spark Connect server (connection
  ``spark_connect_default``);
* ``submit`` engine: ``spark_jobs/maintain_table.py`` through ``SparkSubmitOperator``.

The actions, in order: remove run branches left by killed applies, expire delete tombstones,
``rewrite_position_delete_files``, ``rewrite_data_files`` (folding merge-on-read deletes in),
``rewrite_manifests``, ``expire_snapshots`` (never the snapshot holding the committed offsets),
``remove_orphan_files``. Maintenance may run while the table's apply runs: an apply whose
fast-forward loses to a maintenance commit plans and applies again; a maintenance commit that
loses is retried.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from cdclake.settings import APPLY_POOL, PROJECT_ROOT, ConnectionIds, Settings, jars_dir

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from cdclake.model.config import TableConfig

log = logging.getLogger(__name__)

DAG_ID = "cdc_maintenance"
MAINTAIN_JOB = PROJECT_ROOT / "spark_jobs" / "maintain_table.py"


def maintain(name: str, **context: Any) -> dict[str, Any]:
    """Maintain table ``name`` (``connect`` engine) with the run's Params.

    Returns:
        The :class:`~cdclake.model.maintenance.MaintenanceResult` as a dict.

    Raises:
        EngineUnavailableError: the Spark Connect server does not accept connections.
        ConfigError: an unknown table or action.
    """
    from cdclake.model.config import load_tables
    from cdclake.model.maintenance import check_actions
    from cdclake.spark.maintenance import maintain_table
    from cdclake_airflow.hooks import CdcLakeHook

    params = context["params"]
    hook = CdcLakeHook()
    settings = hook.settings
    cfg = load_tables(settings.tables_config, settings.discovery_registry).get(name)
    actions = check_actions(params.get("actions") or None)
    with hook.spark_session() as spark:
        result = maintain_table(spark, settings, cfg, actions=actions, dry_run=bool(params.get("dry_run")))
    out: dict[str, Any] = json.loads(result.to_json())
    return out


def submit_args(name: str, **context: Any) -> list[str]:
    """The ``spark_jobs/maintain_table.py`` arguments of table ``name`` (``submit`` engine)."""
    from cdclake.model.config import load_tables
    from cdclake.model.maintenance import check_actions

    params = context["params"]
    settings = Settings.from_env()
    cfg = load_tables(settings.tables_config, settings.discovery_registry).get(name)
    args = ["--table", cfg.model_dump_json(), "--actions", ",".join(check_actions(params.get("actions") or None))]
    return [*args, "--dry-run"] if params.get("dry_run") else args


def _submit_task(settings: Settings) -> Any:
    from cdclake.spark.session import spark_conf
    from cdclake_airflow.spark_submit import CdcSparkSubmitOperator

    venv_bin = os.path.dirname(sys.executable)
    return CdcSparkSubmitOperator.partial(
        task_id="maintain",
        pool=APPLY_POOL,
        conn_id=ConnectionIds.SPARK,
        application=str(MAINTAIN_JOB),
        name="cdc-maintenance",
        jars=",".join(str(p) for p in sorted(jars_dir("spark").glob("*.jar"))),
        conf=spark_conf(settings),
        driver_memory="2g",
        env_vars={
            "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        },
    )


def build_maintenance_dag(settings: Settings, tables: list[TableConfig], schedule: str | None = "@daily") -> DAG:
    """The DAG ``cdc_maintenance`` over the configured ``tables`` (its maintain task as
    ``settings.engine`` says)."""
    from airflow.sdk import Param, task

    from cdclake.model.maintenance import ACTIONS
    from cdclake_airflow.params import select_tables_task, tables_dag, tables_param

    with tables_dag(
        DAG_ID,
        "Iceberg table maintenance: compaction, snapshot expiry, orphan files, tombstone expiry",
        __doc__,
        schedule=schedule,
        tags=["cdc", "maintenance"],
        task_defaults={"retries": 2, "retry_delay": timedelta(minutes=5), "execution_timeout": timedelta(hours=6)},
        params={
            "tables": tables_param([t.name for t in tables], "maintain"),
            "actions": Param(
                [],
                type="array",
                items={"type": "string", "enum": list(ACTIONS)},
                title="Actions",
                description=f"Actions to take, run in this order: {', '.join(ACTIONS)}; empty: all.",
                examples=list(ACTIONS),
            ),
            "dry_run": Param(
                False,
                type="boolean",
                title="Dry run",
                description="Report what each action would do; commit nothing and delete no file.",
            ),
        },
    ) as dag:
        chosen = select_tables_task(tables)
        if settings.engine == "connect":
            task(task_id="maintain", pool=APPLY_POOL)(maintain).expand(name=chosen)
        else:
            args = task(task_id="submit_args")(submit_args).expand(name=chosen)
            _submit_task(settings).expand(application_args=args)
    return dag
