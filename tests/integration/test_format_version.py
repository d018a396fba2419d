"""Iceberg format v3 tables (:mod:`cdclake.model.format_version`): created at the config's
``format_version``, their runs' deletes written as deletion vectors, their side tables v2; v3
refused in a SQL catalog; an existing v2 table upgraded in place (``cdclake upgrade``), never
downgraded, its next runs' deletes deletion vectors, then maintained. Real Kafka, the shared
SparkSession with the Iceberg runtime, the REST catalog of ``rest_lake`` (and the suite's SQLite
catalog where v3 is refused)."""

from __future__ import annotations

import pytest
import yaml

from cdclake.errors import FormatVersionError
from cdclake.io.catalog import load_catalog, load_table_or_none
from cdclake.io.kafka import ensure_topic
from cdclake.io.refs import committed_offsets, committed_state
from cdclake.io.run_inputs import RunInputs
from cdclake.io.schema_evolution import source_columns
from cdclake.model.layout import QUARANTINE_SUFFIX, TOMBSTONES_SUFFIX, SummaryKeys, side_table
from cdclake.model.offsets import OffsetRange
from cdclake.model.plan import RunPlan
from cdclake.spark.commit import commit
from cdclake.spark.context import ApplyContext
from cdclake.spark.maintenance import maintain_table
from cdclake_dev.cli import main
from tests.conftest import make_table
from tests.integration.conftest import RestLake
from tests.integration.test_apply import run_once
from tests.integration.test_readers import COLUMNS, FINAL_ROWS, pyiceberg_rows, send, spark_rows, write_history

pytestmark = pytest.mark.integration


def delete_files(spark, name: str) -> dict[str, str]:
    """``{path: file format}`` of the delete files of the table's current snapshot."""
    return {
        r.file_path: r.file_format
        for r in spark.sql(f"SELECT file_path, file_format FROM {name}.delete_files").collect()
    }


def test_format_version_3_is_refused_in_a_sql_catalog_and_nothing_is_created(spark, kafka, stack_settings):
    cfg = make_table(value_format="json", columns=COLUMNS, format_version=3)
    ensure_topic(kafka, cfg.topic, 1)
    send(kafka, cfg, [("c", {"id": 1, "v": "a"}, 100)])
    with pytest.raises(FormatVersionError, match="format_version 3 needs the REST catalog.*apache/iceberg-python#1551"):
        run_once(spark, stack_settings, cfg)
    assert load_table_or_none(load_catalog(stack_settings), cfg.identifier) is None


def test_a_v3_table_writes_deletion_vectors_keeps_v2_side_tables_and_commits_empty_writes_through_spark(
    spark, kafka, rest_lake: RestLake
):
    cfg = write_history(
        spark, kafka, rest_lake.settings, make_table(value_format="json", columns=COLUMNS, format_version=3)
    )
    catalog = load_catalog(rest_lake.settings)
    table = catalog.load_table(cfg.identifier)
    assert table.format_version == 3
    assert table.properties["write.delete.mode"] == table.properties["write.merge.mode"] == "merge-on-read"
    name = f"{rest_lake.catalog_name}.{cfg.identifier}"
    assert set(delete_files(spark, name).values()) == {"PUFFIN"}
    # the tombstones: written by Spark in the runs, expired by pyiceberg, which writes no v3 manifests
    assert catalog.load_table(side_table(cfg.identifier, TOMBSTONES_SUFFIX)).format_version == 2

    # a replayed older create of a deleted key changes no row: the run commits its offsets all the same
    send(kafka, cfg, [("c", {"id": 2, "v": "b"}, 102)])
    offset_range, result = run_once(spark, rest_lake.settings, cfg, "run-no-change")
    assert result.status == "committed"
    table = table.refresh()
    head = table.current_snapshot()
    assert head is not None and head.summary[SummaryKeys.RUN_ID] == "run-no-change"
    assert committed_offsets(table, cfg.topic) == offset_range.end
    assert spark_rows(spark, name) == pyiceberg_rows(rest_lake, cfg.identifier) == FINAL_ROWS

    # a write that commits nothing (the MERGE above commits a snapshot of its own) is followed by an
    # empty append carrying the summary: Spark's on v3, as pyiceberg 0.12 writes no v3 manifest
    import pyarrow as pa

    with pytest.raises(ValueError, match="Cannot write manifest (list )?for table version: 3"):
        table.append(pa.Table.from_pylist([], schema=table.schema().as_arrow()))
    ctx = ApplyContext(
        spark,
        rest_lake.settings,
        kafka,
        RunInputs(
            RunPlan(table=cfg, run_id="probe", range=OffsetRange(topic=cfg.topic, start={}, end={})),
            catalog,
            table,
            committed_state(table, cfg.topic),
            source_columns(table),
        ),
    )
    snapshot_id = commit(ctx, {"cdc.probe": "empty"}, lambda target: None)
    table = table.refresh()
    head = table.current_snapshot()
    assert head is not None and head.snapshot_id == snapshot_id and head.parent_snapshot_id == ctx.state.snapshot_id
    assert head.summary["cdc.probe"] == "empty" and head.summary.get("added-data-files") in (None, "0")
    assert spark_rows(spark, name) == FINAL_ROWS


def test_a_v2_table_upgraded_in_place_writes_deletion_vectors_and_is_maintained(
    spark, kafka, rest_lake: RestLake, tmp_path, monkeypatch, capsys
):
    cfg = write_history(spark, kafka, rest_lake.settings, make_table(value_format="json", columns=COLUMNS))
    catalog = load_catalog(rest_lake.settings)
    name = f"{rest_lake.catalog_name}.{cfg.identifier}"
    before = delete_files(spark, name)
    assert before and set(before.values()) == {"PARQUET"}
    offsets = committed_offsets(catalog.load_table(cfg.identifier), cfg.topic)

    # `cdclake upgrade`, as an operator runs it: the table config and the REST catalog from the
    # environment (no S3 keys: the REST server answers with the metadata, the upgrade reads no file)
    tables = tmp_path / "tables.yaml"
    keys = {"name", "topic", "namespace", "table", "primary_key", "value_format", "columns"}
    tables.write_text(yaml.safe_dump({"tables": [cfg.model_dump(mode="json", include=keys)]}))
    for key, value in {
        "CDCLAKE_STATE_DIR": str(tmp_path / "state"),
        "CDCLAKE_TABLES_CONFIG": str(tables),
        "CDCLAKE_CATALOG_NAME": rest_lake.catalog_name,
        "CDCLAKE_CATALOG_TYPE": "rest",
        "CDCLAKE_CATALOG_URI": rest_lake.rest_uri,
        "CDCLAKE_WAREHOUSE": rest_lake.settings.warehouse,
    }.items():
        monkeypatch.setenv(key, value)
    assert main(["upgrade", cfg.name]) == 0  # the config says 2: nothing to do
    assert capsys.readouterr().out.startswith(f"table {cfg.identifier}: format v2 already; nothing changed")
    assert main(["upgrade", cfg.name, "--format-version", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"table {cfg.identifier}: format v2 -> v3\n")
    assert f"side table {side_table(cfg.identifier, TOMBSTONES_SUFFIX)}: format v2, unchanged" in out
    assert main(["upgrade", cfg.name, "--format-version", "2"]) == 2
    assert "cannot be downgraded to v2" in capsys.readouterr().err
    table = catalog.load_table(cfg.identifier)
    assert table.format_version == 3
    assert committed_offsets(table, cfg.topic) == offsets  # no snapshot, the committed state as it was
    assert catalog.load_table(side_table(cfg.identifier, TOMBSTONES_SUFFIX)).format_version == 2

    # the next run: updates, a delete and a key change on the rows written at v2
    upgraded = cfg.model_copy(update={"format_version": 3})
    send(
        kafka,
        upgraded,
        [
            ("u", {"id": 1, "v": "a4", "w": 11}, 400),
            ("d", {"id": 5, "v": "e", "w": 50}, 410),
            ("d", {"id": 30, "v": "c"}, 420),
            ("c", {"id": 31, "v": "c", "w": 31}, 421),
        ],
    )
    assert run_once(spark, rest_lake.settings, upgraded, "run-after-upgrade")[1].status == "committed"
    expected = {(1, "a4", 11), (31, "c", 31)}
    assert spark_rows(spark, name) == pyiceberg_rows(rest_lake, cfg.identifier) == expected
    added = {path: fmt for path, fmt in delete_files(spark, name).items() if path not in before}
    assert added and set(added.values()) == {"PUFFIN"}  # every delete since the upgrade: deletion vectors

    # maintenance: compaction folds both kinds of deletes; the rows and the offsets stay
    offsets = committed_offsets(catalog.load_table(cfg.identifier), cfg.topic)
    result = maintain_table(spark, rest_lake.settings, upgraded)
    failed = [r for r in result.reports if r.status not in ("done", "skipped")]
    assert not failed, failed
    assert {r.table for r in result.reports} >= {cfg.identifier, side_table(cfg.identifier, TOMBSTONES_SUFFIX)}
    assert delete_files(spark, name) == {}
    assert spark_rows(spark, name) == pyiceberg_rows(rest_lake, cfg.identifier) == expected
    table = catalog.load_table(cfg.identifier)
    assert table.format_version == 3 and committed_offsets(table, cfg.topic) == offsets
    assert load_table_or_none(catalog, side_table(cfg.identifier, QUARANTINE_SUFFIX)) is None or (
        catalog.load_table(side_table(cfg.identifier, QUARANTINE_SUFFIX)).format_version == 2
    )
