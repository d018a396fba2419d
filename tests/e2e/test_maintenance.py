"""Table maintenance end to end: the ``cdc_maintenance`` DAG (``airflow dags test``, Connect
engine) on a table the table DAG applied, and maintenance committing while a table DAG run is
between its write and its fast-forward, for real: the run is paused there by the apply's debugging
pause (``CDCLAKE_APPLY_PAUSE_AT``; the pause only waits), a compaction commits to ``main`` through
the shared engine, and the run, resumed, loses its fast-forward, plans again and commits."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
import yaml

from cdclake.errors import ConfigError
from cdclake.io.catalog import load_catalog
from cdclake.io.events import load_events, read_event_file
from cdclake.io.kafka import topic_watermarks
from cdclake.io.refs import committed_offsets
from cdclake.model.config import load_tables
from cdclake_dev.cli import ensure_airflow_db, run_maintenance, run_table_dag
from tests.integration.test_apply import PRODUCT_COLUMNS, PRODUCTS_FINAL, table_rows
from tests.integration.test_crash import job_env

pytestmark = pytest.mark.e2e

_MAINTAIN = """
import json, logging, sys
logging.basicConfig(level=logging.INFO)
from cdclake.model.config import TableConfig
from cdclake.settings import Settings
from cdclake.spark.maintenance import maintain_table
from cdclake.spark.session import connect_session
spark = connect_session(sys.argv[1])
result = maintain_table(spark, Settings.from_env(), TableConfig.model_validate_json(sys.argv[2]), actions=sys.argv[3].split(","))
spark.stop()
print("MAINTAIN_DONE", result.to_json(), flush=True)
"""


@pytest.fixture(scope="module")
def maint_tables(stack_settings, kafka):
    stack_settings.tables_config.write_text(
        yaml.safe_dump(
            {
                "defaults": {"schedule": None, "retries": 0, "tags": ["test"]},
                "tables": [
                    {
                        "name": f"maint_{name}",
                        "topic": f"maint.inventory.{name}",
                        "namespace": "maint",
                        "table": name,
                        "primary_key": ["id"],
                    }
                    for name in ("race", "dag")
                ],
            }
        )
    )
    ensure_airflow_db(stack_settings)
    return load_tables(stack_settings.tables_config)


def _maintain(url: str, settings, cfg, actions: list[str]) -> dict:
    """Run :func:`~cdclake.spark.maintenance.maintain_table` in a Connect client process of its own
    (a Connect session switches its whole process to Connect mode)."""
    proc = subprocess.run(
        [sys.executable, "-c", _MAINTAIN, url, cfg.model_dump_json(), ",".join(actions)],
        env=job_env(settings),
        capture_output=True,
        text=True,
        timeout=600,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("MAINTAIN_DONE "):
            return json.loads(line[len("MAINTAIN_DONE ") :])
    raise RuntimeError(f"maintenance failed (exit code {proc.returncode}):\n{proc.stderr[-4000:]}")


def _split_products(fixtures_dir, tmp_path, parts: int) -> list:
    values = read_event_file(fixtures_dir / "flink/debezium-data-schema-include.txt")
    size = -(-len(values) // parts)
    files = []
    for i in range(parts):
        path = tmp_path / f"part{i}.jsonl"
        path.write_bytes(b"\n".join(values[i * size : (i + 1) * size]))
        files.append(path)
    return files


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.2)


def test_a_run_that_loses_its_fast_forward_to_maintenance_plans_again_and_commits(
    maint_tables, stack_settings, kafka, engine, fixtures_dir, tmp_path, monkeypatch, capfd
):
    cfg = maint_tables.get("maint_race")
    *applied, racing = _split_products(fixtures_dir, tmp_path, 3)
    for part in applied:  # the second part updates rows of the first: a data file with deletes
        load_events(part, cfg, kafka, partitions=3)
        assert run_table_dag(cfg.name, stack_settings) == 0
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    before = table.current_snapshot().snapshot_id
    assert int(table.current_snapshot().summary["total-delete-files"]) > 0
    load_events(racing, cfg, kafka, partitions=3)

    marker = tmp_path / "paused"
    monkeypatch.setenv("CDCLAKE_APPLY_PAUSE_AT", f"before_fast_forward@{marker}")
    outcome: dict = {}
    run = threading.Thread(target=lambda: outcome.update(rc=run_table_dag(cfg.name, stack_settings)))
    run.start()
    try:
        _wait_for(marker.exists, 600, "the run's pause before its fast-forward")
        # the run's rows are on its branch; maintenance commits to main meanwhile
        _maintain(engine, stack_settings, cfg, ["rewrite_data_files"])
        moved = table.refresh().current_snapshot()
        assert moved.snapshot_id != before and moved.summary.operation.value == "replace"
        marker.unlink()  # resume: the fast-forward loses, the task plans and applies again
        _wait_for(marker.exists, 600, "the second attempt's pause")
        marker.unlink()
    finally:
        run.join(timeout=900)
        marker.unlink(missing_ok=True)
    out = "".join(capfd.readouterr())
    assert outcome == {"rc": 0}, out[-5000:]
    assert "planning again from the table's offsets" in out
    assert table_rows(stack_settings, cfg, PRODUCT_COLUMNS) == PRODUCTS_FINAL
    table = table.refresh()
    assert committed_offsets(table, cfg.topic) == topic_watermarks(kafka, cfg.topic).high
    # the maintenance commit is in the table's history, under the run's commit
    history = [e.snapshot_id for e in table.history()]
    assert moved.snapshot_id in history and history[-1] == table.current_snapshot().snapshot_id


def test_the_maintenance_dag_compacts_and_keeps_the_offsets(
    maint_tables, stack_settings, kafka, fixtures_dir, tmp_path
):
    cfg = maint_tables.get("maint_dag")
    for part in _split_products(fixtures_dir, tmp_path, 4):
        load_events(part, cfg, kafka, partitions=3)
        assert run_table_dag(cfg.name, stack_settings) == 0
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    offsets = committed_offsets(table, cfg.topic)
    files_before = int(table.current_snapshot().summary["total-data-files"])
    deletes_before = int(table.current_snapshot().summary["total-delete-files"])
    assert files_before > 1 and deletes_before > 0

    # a dry run commits nothing
    snapshot = table.current_snapshot().snapshot_id
    assert run_maintenance([cfg.name], dry_run=True, settings=stack_settings) == 0
    assert table.refresh().current_snapshot().snapshot_id == snapshot
    with pytest.raises(ConfigError, match="unknown maintenance action"):
        run_maintenance([cfg.name], ["compact_everything"], settings=stack_settings)

    assert run_maintenance([cfg.name], settings=stack_settings) == 0
    summary = table.refresh().current_snapshot().summary
    assert int(summary["total-delete-files"]) == 0
    assert int(summary["total-data-files"]) < files_before
    assert table_rows(stack_settings, cfg, PRODUCT_COLUMNS) == PRODUCTS_FINAL
    assert committed_offsets(table, cfg.topic) == offsets
    # and the next run still plans from the same offsets: nothing new, nothing committed
    snapshot = table.current_snapshot().snapshot_id
    assert run_table_dag(cfg.name, stack_settings) == 0
    assert table.refresh().current_snapshot().snapshot_id == snapshot
