"""One DAG per configured table: ``plan -> schema_sync -> apply -> publish``.

* **plan** reads the table's committed offsets from its Iceberg snapshot summary and the topic's
  watermarks from Kafka, and caps the range at ``max_events_per_run``. With nothing new it
  short-circuits: schema sync, apply and publish are skipped, no Spark job starts and nothing is
  committed.
* **schema_sync** (pyiceberg, confluent-kafka; no Spark) applies the source table's schema
  changes up to the planned batch (``cdclake.schema_sync``). A change that is not additive
  (rename, deleted column, primary key, ...) is a barrier: if the batch holds events before it,
  the batch is capped before it and the change waits for the next run, so that every row is
  written under the schema it was produced with. Its output is the plan ``apply`` runs.
* **apply** runs ``spark_jobs/apply_cdc.py`` with ``SparkSubmitOperator`` (connection
  ``spark_default``): one Iceberg commit holding the rows, the end offsets and the run id.
* **publish** emits the Iceberg table as an Airflow asset event (snapshot id, events by op), so
  that downstream DAGs can be scheduled on the table.

A retry of any task is safe: a run that already committed finds its offsets in the table.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from cdclake.settings import PROJECT_ROOT, jars_dir

from cdclake_airflow.connections import KAFKA_CONN_ID, SPARK_CONN_ID

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from cdclake.config import TableConfig
    from cdclake.settings import Settings

APPLY_JOB = PROJECT_ROOT / "spark_jobs" / "apply_cdc.py"


def table_asset_uri(settings: Settings, cfg: TableConfig) -> str:
    """The asset URI of a table: ``iceberg://<catalog>/<namespace>/<table>``."""
    return f"iceberg://{settings.catalog_name}/{cfg.namespace}/{cfg.table}"


def _replay_params(params: dict[str, Any]) -> tuple[dict[int, int] | None, int | None]:
    """The replay start from the trigger form: offsets per partition, or a timestamp."""
    offsets = params.get("replay_from_offsets") or None
    stamp = params.get("replay_from_timestamp") or None
    if offsets is not None and stamp is not None:
        raise ValueError("give replay_from_offsets or replay_from_timestamp, not both")
    if offsets is not None:
        if isinstance(offsets, str):
            offsets = json.loads(offsets)
        try:
            offsets = {int(p): int(o) for p, o in offsets.items()}
        except (AttributeError, TypeError, ValueError) as e:
            raise ValueError(
                f"replay_from_offsets must map partition to offset, e.g. {{\"0\": 120}}; got {offsets!r}"
            ) from e
    if stamp is not None:
        parsed = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        stamp = int(parsed.timestamp() * 1000)
    return offsets, stamp


def plan(table_name: str, **context: Any) -> str | None:
    """The ``plan`` task: the next offset range as JSON, or ``None`` when there is nothing new.

    The trigger form's ``replay_from_offsets`` / ``replay_from_timestamp`` make the run a manual
    replay from there (see :func:`cdclake.planner.plan_next`).

    Raises:
        OffsetsOutOfRangeError: committed offsets fell below the low watermark (see the message).
        ConfigError: the table has no primary key and is not configured as a change log.
    """
    from cdclake.config import load_tables
    from cdclake.planner import plan_next
    from cdclake.settings import Settings

    from cdclake_airflow.connections import kafka_bootstrap

    settings = Settings.from_env()
    cfg = load_tables(settings.tables_config).get(table_name)
    offsets, stamp = _replay_params(context.get("params") or {})
    planned = plan_next(
        settings, cfg, bootstrap=kafka_bootstrap(KAFKA_CONN_ID),
        replay_from_offsets=offsets, replay_from_timestamp_ms=stamp,
    )
    offset_range = planned.offset_range
    replay = offsets is not None or stamp is not None
    print(f"table {cfg.identifier}: {'REPLAY ' if replay else ''}{planned.describe()}")
    if offset_range.is_empty:
        print("nothing new: skipping apply and publish (no Spark job, no commit)")
        return None
    return json.dumps({"range": json.loads(offset_range.to_json()), "replay": replay})


def schema_sync(table_name: str, **context: Any) -> str:
    """The ``schema_sync`` task: apply the table's schema changes up to the planned batch and
    return the plan to apply (the planned one, or capped before a barrier change).

    Raises:
        SchemaChangeError: a change that stops the table (incompatible type under
            ``incompatible: fail``, table renamed or dropped); nothing was applied.
        SchemaError: the table config's primary key is not the source table's.
    """
    from cdclake.config import load_tables
    from cdclake.lake import load_catalog
    from cdclake.offsets import OffsetRange
    from cdclake.schema_sync import sync_for_range
    from cdclake.settings import Settings

    from cdclake_airflow.connections import kafka_bootstrap

    settings = Settings.from_env()
    cfg = load_tables(settings.tables_config).get(table_name)
    planned = json.loads(context["ti"].xcom_pull(task_ids="plan"))
    result = sync_for_range(
        load_catalog(settings), cfg, kafka_bootstrap(KAFKA_CONN_ID), OffsetRange.model_validate(planned["range"])
    )
    for line in result.applied:
        print(f"schema change applied: {line}")
    if result.capped_before is not None:
        print(f"batch capped before the barrier change {result.capped_before}; planned "
              f"{planned['range']['end']}, applying up to {result.offset_range.end}")
    planned["range"] = json.loads(result.offset_range.to_json())
    return json.dumps(planned)


def maintenance(table_name: str) -> dict[str, Any]:
    """The ``maintenance`` task (pyiceberg; no Spark): drop delete tombstones older than the
    table's ``tombstone_retention_hours``, and run branches left by killed apply jobs."""
    from cdclake.config import load_tables
    from cdclake.lake import expire_tombstones, load_catalog, remove_stale_run_branches
    from cdclake.settings import Settings

    settings = Settings.from_env()
    cfg = load_tables(settings.tables_config).get(table_name)
    catalog = load_catalog(settings)
    removed = expire_tombstones(catalog, cfg.identifier, cfg.tombstone_retention_hours)
    branches = remove_stale_run_branches(catalog, cfg.identifier, older_than_ms=6 * 3600 * 1000)
    print(f"removed {removed} tombstone(s) older than {cfg.tombstone_retention_hours} h; "
          f"removed stale run branches {branches}")
    return {"tombstones_removed": removed, "branches_removed": branches}


def publish(table_name: str, asset: Any, **context: Any) -> dict[str, Any]:
    """The ``publish`` task: attach the committed snapshot's facts to the asset event."""
    from cdclake.config import load_tables
    from cdclake.lake import SummaryKeys, load_catalog
    from cdclake.settings import Settings

    settings = Settings.from_env()
    cfg = load_tables(settings.tables_config).get(table_name)
    table = load_catalog(settings).load_table(cfg.identifier)
    snap = table.current_snapshot()
    summary = snap.summary if snap is not None else None
    keys = (SummaryKeys.RUN_ID, SummaryKeys.END_OFFSETS, SummaryKeys.EVENTS, SummaryKeys.UPSERTS,
            SummaryKeys.DELETES, SummaryKeys.TOMBSTONES, SummaryKeys.LAST_POSITION)
    extra: dict[str, Any] = {"table": cfg.identifier, "snapshot_id": snap.snapshot_id if snap else None}
    if summary is not None:
        extra.update({k: summary.get(k) for k in keys if summary.get(k) is not None})
        extra["total_records"] = summary.get("total-records")
    context["outlet_events"][asset].extra = extra
    print(f"published {asset.uri}: {extra}")
    return extra


def build_table_dag(settings: Settings, cfg: TableConfig) -> DAG:
    """The DAG ``cdc_<name>`` of one configured table."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk import DAG, Asset, Param, task

    from cdclake.spark_apply import spark_conf

    asset = Asset(name=f"{settings.catalog_name}.{cfg.identifier}", uri=table_asset_uri(settings, cfg))
    default_args = {
        "owner": cfg.owner,
        "retries": cfg.retries,
        "retry_delay": timedelta(seconds=cfg.retry_delay_s),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(hours=1),
    }
    with DAG(
        dag_id=cfg.dag_id,
        description=f"Apply Debezium events of {cfg.topic} to Iceberg table {cfg.identifier}",
        schedule=cfg.schedule,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        default_args=default_args,
        tags=["cdc", *cfg.tags],
        doc_md=__doc__,
        params={
            "replay_from_offsets": Param(
                None,
                type=["null", "object"],
                title="Replay from offsets",
                description=(
                    'Manual replay/backfill: start offset per Kafka partition, e.g. {"0": 120, '
                    '"1": 98}; partitions not named start at their earliest offset. Leave empty '
                    "for an ordinary run."
                ),
            ),
            "replay_from_timestamp": Param(
                None,
                type=["null", "string"],
                title="Replay from timestamp",
                description=(
                    "Manual replay/backfill: start at the first records at or after this time "
                    "(ISO 8601, UTC if no offset given), resolved with Kafka's offsets-for-times."
                ),
            ),
        },
    ) as dag:
        plan_task = task.short_circuit(task_id="plan")(plan)(cfg.name)
        jars = ",".join(str(p) for p in sorted(jars_dir("spark").glob("*.jar")))
        venv_bin = os.path.dirname(sys.executable)
        apply_task = SparkSubmitOperator(
            task_id="apply",
            conn_id=SPARK_CONN_ID,
            application=str(APPLY_JOB),
            name=f"cdc-apply-{cfg.name}",
            jars=jars,
            conf=spark_conf(settings),
            driver_memory="2g",
            application_args=[
                "--table", cfg.name,
                "--plan", "{{ ti.xcom_pull(task_ids='schema_sync') }}",
                "--run-id", "{{ run_id }}",
                "--bootstrap-servers",
                "{{ conn.%s.extra_dejson['bootstrap.servers'] }}" % KAFKA_CONN_ID,
            ],
            # spark-submit of the pip package finds its Spark home through the python3 on PATH
            env_vars={
                "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
                "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable,
            },
        )
        sync_task = task(task_id="schema_sync")(schema_sync)(cfg.name)
        publish_task = task(task_id="publish", outlets=[asset])(publish)(cfg.name, asset)
        plan_task >> sync_task >> apply_task >> publish_task
        task(task_id="maintenance")(maintenance)(cfg.name)
    return dag
