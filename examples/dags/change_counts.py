"""Example downstream DAG: per-key change counts from a table's change feed, exactly once.

One DAG ``example_change_counts_<name>`` per table of the table config that has a change feed
(``change_feed`` in the table config), scheduled on the table's Airflow asset
(``iceberg://<catalog>/<namespace>/<table>``, which the table DAG ``cdc_<name>`` emits after each
commit). Its one task, **count_changes** (pyiceberg; no Spark, no Kafka), reads the change rows of
the runs it has not processed yet and appends, per key and Debezium op, how many changes those
runs applied to the Iceberg table ``downstream.<namespace>_<table>_change_counts``:

| column | value |
|---|---|
| the table's primary-key columns | the key (NULL for a truncate, op ``t``) |
| ``_cdc_op`` | ``c``, ``u``, ``r``, ``d`` or ``t`` |
| ``changes`` | how many change rows of that key and op the commit read |
| ``source_snapshot_id`` | the last table snapshot the commit read up to |

A key's count is the sum of its rows: ``SELECT id, sum(changes) FROM
downstream.inventory_products_change_counts GROUP BY id``.

**Exactly once.** The progress lives in the same Iceberg commit as the output: each append carries
the last table snapshot it read in its snapshot summary (``downstream.source-snapshot-id``). A run
reads that progress from its output table's history, takes the table's runs committed after it
(:func:`cdclake.io.changes.runs_after`) and appends their counts with the new progress in one
commit. The asset event only triggers the run; what it reads comes from the tables, so:

* a run that failed before its commit left nothing: its retry reads the same runs again;
* a retry after the commit, an extra trigger or a backfill run finds nothing new and commits
  nothing;
* a run after a pause reads every run committed meanwhile, whatever events were missed;
* two runs at once (a zombie try and its retry): the output table refuses the second commit
  (``commit.retry.num-retries=0``: pyiceberg would otherwise re-apply the append on top of the
  first, whose progress it did not read), and its retry finds the work done.

A gap is an error, never a silent skip (:class:`~cdclake.errors.ChangeFeedGapError`): the last
snapshot read was expired from the table's history (keep ``snapshot_retention_hours`` above the
longest pause of this DAG), or change rows were expired by the feed's ``retention_days`` before
they were read. Copy this file into your DAGs folder (``examples/README.md``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow.sdk import DAG, Asset, task

from cdclake.model.config import load_tables
from cdclake.settings import Settings
from cdclake_airflow.table_dag import table_asset_uri

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from cdclake.model.config import TableConfig

log = logging.getLogger(__name__)

DAG_PREFIX = "example_change_counts_"
OUTPUT_NAMESPACE = "downstream"
"""The namespace of the output tables (created when missing)."""
PROGRESS_KEY = "downstream.source-snapshot-id"
"""Snapshot summary key of each output commit: the last table snapshot it read up to."""
OP_COLUMN = "_cdc_op"
OUTPUT_PROPERTIES = {"format-version": "2", "commit.retry.num-retries": "0"}
"""Properties of an output table: a lost commit race fails the task, whose retry reads the
progress again, instead of pyiceberg re-applying the append over the winner's commit."""


def output_identifier(cfg: TableConfig) -> str:
    """The output table of ``cfg``'s counts: ``downstream.<namespace>_<table>_change_counts``."""
    return f"{OUTPUT_NAMESPACE}.{cfg.namespace}_{cfg.table}_change_counts"


def progress(output: Table) -> int | None:
    """The last table snapshot the output's commits read up to: :data:`PROGRESS_KEY` of the
    newest snapshot in the output's ``main`` ancestry that carries it (a maintenance commit, such
    as a compaction, carries none); ``None`` before the first commit."""
    from cdclake.io.refs import ancestry

    for _, _, summary in ancestry(output):
        if summary and PROGRESS_KEY in summary:
            return int(summary[PROGRESS_KEY])
    return None


def ensure_output(catalog: Catalog, cfg: TableConfig, table: Table) -> Table:
    """The output table of ``cfg`` (:func:`output_identifier`), created when missing with the
    primary-key columns of ``table`` (as it has them now), ``_cdc_op``, ``changes`` and
    ``source_snapshot_id``, all optional."""
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    identifier = output_identifier(cfg)
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        pass
    keys = [table.schema().find_field(name) for name in cfg.primary_key]
    fields = [NestedField(i, f.name, f.field_type, required=False) for i, f in enumerate(keys, start=1)]
    fields += [
        NestedField(len(keys) + 1, OP_COLUMN, StringType(), required=False, doc="Debezium op: c, u, r, d or t"),
        NestedField(len(keys) + 2, "changes", LongType(), required=False, doc="change rows of the key and op"),
        NestedField(
            len(keys) + 3, "source_snapshot_id", LongType(), required=False, doc="the table snapshot read up to"
        ),
    ]
    catalog.create_namespace_if_not_exists(OUTPUT_NAMESPACE)
    try:
        return catalog.create_table(identifier, schema=Schema(*fields), properties=OUTPUT_PROPERTIES)
    except TableAlreadyExistsError:  # created by a concurrent try
        return catalog.load_table(identifier)


def count_changes(catalog: Catalog, cfg: TableConfig) -> dict[str, Any]:
    """Append the change counts of the runs committed to ``cfg``'s table since the output's
    progress (:func:`progress`), with the new progress, in one commit of the output table.

    Returns:
        ``{"table", "output", "runs"`` (the run ids read, oldest first), ``"changes"`` (change
        rows read), ``"source_snapshot_id"`` (the progress after the run; ``None`` before the
        table's first commit), ``"output_snapshot_id"}`` (the output's commit; ``None``: nothing
        new, no commit).

    Raises:
        ChangeFeedGapError: the progress is no longer in the table's history, or a run's change
            rows are fewer than its commit recorded (expired before they were read).
        CommitFailedException: another try committed to the output table since this one read its
            progress (the task's retry reads it again).
    """
    import pyarrow as pa

    from cdclake.errors import ChangeFeedGapError
    from cdclake.io.catalog import load_table_or_none
    from cdclake.io.changes import changes_of, runs_after

    result: dict[str, Any] = {"table": cfg.identifier, "output": output_identifier(cfg), "runs": [], "changes": 0}
    table = load_table_or_none(catalog, cfg.identifier)
    if table is None:  # triggered before the table's first commit
        return {**result, "source_snapshot_id": None, "output_snapshot_id": None}
    output = ensure_output(catalog, cfg, table)
    done = progress(output)
    runs = runs_after(table, cfg.topic, after=done)
    keys = [*cfg.primary_key, OP_COLUMN]
    read: list[pa.Table] = []
    for run in runs:
        if run.changes_rows is None:
            log.warning(
                "table %s: run %s committed before the table had a change feed: no changes", cfg.identifier, run.run_id
            )
            continue
        rows = changes_of(catalog, cfg.identifier, run).select(keys)
        if rows.num_rows != run.changes_rows:
            raise ChangeFeedGapError(
                f"table {cfg.identifier}: run {run.run_id!r} (snapshot {run.snapshot_id}) recorded "
                f"{run.changes_rows} change row(s), the feed holds {rows.num_rows}: change_feed.retention_days "
                f"expired them before {output_identifier(cfg)} read them (raise it above this DAG's longest "
                'pause), or a concurrent run replaced them (docs/architecture.md, "The change feed")'
            )
        read.append(rows)
    if not runs:
        log.info(
            "table %s: nothing committed after snapshot %s: %s stays as it is", cfg.identifier, done, result["output"]
        )
        return {**result, "source_snapshot_id": done, "output_snapshot_id": None}
    new = runs[-1].snapshot_id
    schema = output.schema().as_arrow()
    if read:
        # permissive: pyarrow gives string for some scans of the feed and large_string for others
        changes = pa.concat_tables(read, promote_options="permissive")
        counts = changes.group_by(keys, use_threads=False).aggregate([([], "count_all")])
        counts = counts.select([*keys, "count_all"])
        counts = counts.append_column("source_snapshot_id", pa.array([new] * counts.num_rows, pa.int64()))
        counts = counts.rename_columns(schema.names).cast(schema)
    else:  # runs without change rows: the commit moves the progress only
        counts = schema.empty_table()
    # the counts and the progress in one commit, refused if another commit came after `done` was read
    output.append(counts, snapshot_properties={PROGRESS_KEY: str(new)})
    committed = output.current_snapshot()
    result.update(
        runs=[r.run_id for r in runs],
        changes=sum(t.num_rows for t in read),
        source_snapshot_id=new,
        output_snapshot_id=None if committed is None else committed.snapshot_id,
    )
    log.info(
        "table %s: read %d run(s) after snapshot %s, %d change row(s); %s at snapshot %s reads up to %s",
        cfg.identifier,
        len(runs),
        done,
        result["changes"],
        result["output"],
        result["output_snapshot_id"],
        new,
    )
    return result


def count_changes_task(name: str) -> dict[str, Any]:
    """The ``count_changes`` task of table ``name``: :func:`count_changes` with the catalog of the
    Airflow connection ``iceberg_catalog`` (:class:`cdclake_airflow.hooks.CdcLakeHook`)."""
    from cdclake_airflow.hooks import CdcLakeHook

    hook = CdcLakeHook()
    cfg = load_tables(hook.settings.tables_config, hook.settings.discovery_registry).get(name)
    return count_changes(hook.catalog, cfg)


def build_dags(settings: Settings, tables: list[TableConfig]) -> list[DAG]:
    """The DAG ``example_change_counts_<name>`` of each of ``tables`` with a change feed,
    scheduled on the table's asset, one run at a time."""
    dags = []
    for cfg in tables:
        if cfg.change_feed is None:
            continue
        asset = Asset(name=f"{settings.catalog_name}.{cfg.identifier}", uri=table_asset_uri(settings, cfg))
        with DAG(
            dag_id=f"{DAG_PREFIX}{cfg.name}",
            description=f"Per-key change counts of {cfg.identifier} from its change feed, exactly once",
            schedule=[asset],
            start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
            catchup=False,
            max_active_runs=1,
            default_args={
                "owner": cfg.owner,
                "retries": 3,
                "retry_delay": timedelta(seconds=30),
                "execution_timeout": timedelta(minutes=30),
            },
            tags=["cdc", "example"],
            doc_md=__doc__,
        ) as dag:
            task(task_id="count_changes")(count_changes_task)(cfg.name)
        dags.append(dag)
    return dags


_settings = Settings.from_env()
for _dag in build_dags(_settings, list(load_tables(_settings.tables_config, _settings.discovery_registry).tables)):
    globals()[_dag.dag_id] = _dag
