"""The table DAGs end to end: real Debezium captures in Kafka -> `airflow dags test` (plan ->
schema sync -> apply -> publish) -> Iceberg, on the tests' own local stack. The products table
applies through the shared Spark Connect engine (the default), the customers table through
``CDCLAKE_ENGINE=submit`` (``SparkSubmitOperator``)."""

from __future__ import annotations

import pytest
import yaml

from cdclake.io.catalog import load_catalog
from cdclake.io.events import load_events, read_event_file
from cdclake.io.refs import committed_offsets
from cdclake.model.config import load_tables
from cdclake.model.layout import SummaryKeys
from cdclake_dev.cli import ensure_airflow_db, run_table_dag
from tests.integration.test_apply import CUSTOMER_COLUMNS, CUSTOMERS_FINAL, PRODUCT_COLUMNS, PRODUCTS_FINAL, table_rows

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def dag_tables(stack_settings, kafka):
    stack_settings.tables_config.write_text(
        yaml.safe_dump(
            {
                "defaults": {"schedule": None, "retries": 0, "tags": ["test"]},
                "tables": [
                    {
                        "name": "e2e_products",
                        "topic": "e2e.inventory.products",
                        "namespace": "e2e",
                        "table": "products",
                        "primary_key": ["id"],
                    },
                    {
                        "name": "e2e_customers",
                        "topic": "e2e.inventory.customers",
                        "namespace": "e2e",
                        "table": "customers",
                        "primary_key": ["id"],
                        "value_format": "json",
                        "columns": CUSTOMER_COLUMNS,
                    },
                ],
            }
        )
    )
    ensure_airflow_db(stack_settings)
    return load_tables(stack_settings.tables_config)


def _summary_line(out: str, identifier: str) -> str:
    """The line telling the run of table ``identifier`` in ``airflow dags test``'s output, checked to
    be the last line its task logged: Airflow's own closing line follows it."""
    lines = out.splitlines()
    (at,) = [n for n, line in enumerate(lines) if f"run of table {identifier}: " in line]
    assert "Done. Returned value not shown" in lines[at + 1]
    return lines[at]


def test_fixture_files_through_the_dags_give_the_final_states(
    dag_tables, stack_settings, kafka, fixtures_dir, tmp_path, capsys
):
    products = dag_tables.get("e2e_products")
    customers = dag_tables.get("e2e_customers")
    values = read_event_file(fixtures_dir / "flink/debezium-data-schema-include.txt")
    (tmp_path / "first.jsonl").write_bytes(b"\n".join(values[:12]))
    (tmp_path / "rest.jsonl").write_bytes(b"\n".join(values[12:]))
    load_events(tmp_path / "first.jsonl", products, kafka, partitions=3)
    load_events(fixtures_dir / "risingwave/debezium_log_no_schema_field.1", customers, kafka, partitions=3)

    assert run_table_dag("e2e_customers", stack_settings.model_copy(update={"engine": "submit"})) == 0
    out = "".join(capsys.readouterr())
    assert "CDC_APPLY_RESULT" in out  # spark-submit's job printed its result
    assert "replay no; offsets {0: [0, " in _summary_line(out, customers.identifier)  # publish's last line
    # Spark's INFO chatter stays out of the task log (CDCLAKE_SPARK_LOG_LEVEL, default WARN)
    assert "INFO DAGScheduler" not in out and "INFO TaskSetManager" not in out
    assert table_rows(stack_settings, customers, CUSTOMER_COLUMNS) == CUSTOMERS_FINAL

    assert run_table_dag("e2e_products", stack_settings) == 0
    out = "".join(capsys.readouterr())
    # a session of the engine: the apply task returned its result; no spark-submit job ran
    assert "CDC_APPLY_RESULT" not in out
    summary = _summary_line(out, products.identifier)
    assert ": committed; replay no; offsets {0: [0, " in summary and ", snapshot " in summary
    table = load_catalog(stack_settings).load_table(products.identifier)
    first = table.current_snapshot()
    assert first.summary[SummaryKeys.EVENTS] == "12"
    assert first.summary[SummaryKeys.RUN_ID].startswith("manual__")

    # a run with nothing new: plan short-circuits, no Spark job, no snapshot
    assert run_table_dag("e2e_products", stack_settings) == 0
    assert table.refresh().current_snapshot().snapshot_id == first.snapshot_id

    # more events: the next run applies only those, resuming from the snapshot summary
    load_events(tmp_path / "rest.jsonl", products, kafka, partitions=3)
    assert run_table_dag("e2e_products", stack_settings) == 0
    second = table.refresh().current_snapshot()
    assert second.summary[SummaryKeys.EVENTS] == "4"
    assert second.summary[SummaryKeys.START_OFFSETS] == first.summary[SummaryKeys.END_OFFSETS]
    assert table_rows(stack_settings, products, PRODUCT_COLUMNS) == PRODUCTS_FINAL
    assert committed_offsets(table, products.topic) == {0: 5, 1: 6, 2: 5}


def test_a_shared_dag_applies_its_tables_in_one_session_per_task_and_one_failing_table_stops_no_other(
    stack_settings, kafka, fixtures_dir, tmp_path, capsys
):
    """Three tables of the shared DAG ``cdc_shared_e2e`` (two per task): the first run applies the two
    tables whose topics hold events, each with its own commit, although the third (its topic not
    created yet) fails, and the run fails naming it; once its events are there, the next run
    applies it alone (one Spark session per task that applied)."""
    from cdclake.errors import SharedTablesError  # noqa: F401 - the error the task names
    from cdclake_dev.cli import run_shared_dag

    config = tmp_path / "shared.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "defaults": {"schedule": None, "retries": 0, "shared_dag": "e2e", "tables_per_task": 2},
                "tables": [
                    {
                        "name": f"shr_{n}",
                        "topic": f"e2eshr.inventory.{n}",
                        "namespace": "e2e_shared",
                        "table": n,
                        "primary_key": ["id"],
                    }
                    for n in ("a", "b", "c")
                ],
            }
        )
    )
    settings = stack_settings.model_copy(update={"tables_config": config})
    tables = load_tables(config)
    events = fixtures_dir / "flink/debezium-data-schema-include.txt"
    for name in ("shr_a", "shr_c"):  # tasks: apply_0 = a, b; apply_1 = c
        load_events(events, tables.get(name), kafka, partitions=3)

    assert run_shared_dag("e2e", settings) != 0
    out = "".join(capsys.readouterr())
    assert (
        "SharedTablesError: 1 table(s) of the task failed (the others were applied): shr_b: TopicNotFoundError" in out
    )
    assert "1 Spark session(s) opened" in out  # apply_1: one table, one session
    catalog = load_catalog(stack_settings)
    for name in ("shr_a", "shr_c"):
        assert table_rows(stack_settings, tables.get(name), PRODUCT_COLUMNS) == PRODUCTS_FINAL
        summary = catalog.load_table(tables.get(name).identifier).current_snapshot().summary
        assert summary[SummaryKeys.EVENTS] == "16"
    assert not catalog.table_exists(tables.get("shr_b").identifier)

    load_events(events, tables.get("shr_b"), kafka, partitions=3)
    before = catalog.load_table(tables.get("shr_a").identifier).current_snapshot().snapshot_id
    assert run_shared_dag("e2e", settings) == 0
    out = "".join(capsys.readouterr())
    assert "run of table e2e_shared.b: committed" in out
    assert "run of table e2e_shared.a" not in out  # nothing new: planned only, no commit
    assert table_rows(stack_settings, tables.get("shr_b"), PRODUCT_COLUMNS) == PRODUCTS_FINAL
    assert catalog.load_table(tables.get("shr_a").identifier).current_snapshot().snapshot_id == before
    # a table's asset event is sent when its task succeeds, with its commit's figures: c's by the first
    # run's apply_1, b's by the second's apply_0; a's commit was in the first run's failed apply_0
    assert _asset_events(settings, "iceberg://lake/e2e_shared/") == {
        "iceberg://lake/e2e_shared/c": [("cdc_shared_e2e", "apply_1", "16")],
        "iceberg://lake/e2e_shared/b": [("cdc_shared_e2e", "apply_0", "16")],
    }


def _asset_events(settings, prefix: str) -> dict[str, list[tuple[str, str, str]]]:
    """The asset events of the assets whose URI starts with ``prefix``, from Airflow's metadata DB:
    ``{uri: [(source DAG, source task, the extra's events)]}``."""
    import json
    import subprocess
    import sys

    from cdclake_dev.airflow_env import airflow_env

    code = f"""
import json
from sqlalchemy import select
from airflow.models.asset import AssetEvent, AssetModel
from airflow.utils.session import create_session
with create_session() as session:
    rows = session.execute(select(AssetModel.uri, AssetEvent.source_dag_id, AssetEvent.source_task_id,
                                  AssetEvent.extra).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                           .where(AssetModel.uri.startswith({prefix!r})).order_by(AssetEvent.id)).all()
out = {{}}
for uri, dag, task, extra in rows:
    out.setdefault(uri, []).append((dag, task, str(extra.get("cdc.events"))))
print(json.dumps(out))
"""
    proc = subprocess.run([sys.executable, "-c", code], env=airflow_env(settings), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {k: [tuple(e) for e in v] for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}
