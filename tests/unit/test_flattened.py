"""Flattened change events read record by record (:mod:`cdclake.model.flattened`, issue 55): every
Debezium event of a captured file, flattened as ``ExtractNewRecordState`` does
(:mod:`tests.flattening`), parses to the event, position, row image and row schema its envelope
parses to; what the transform drops or lacks; the config's refusals."""

from __future__ import annotations

import json

import pytest

from cdclake.errors import BadRecordError, ConfigError
from cdclake.model.config import load_tables
from cdclake.model.envelope import KafkaCoordinates, parse_value
from cdclake.model.flattened import TRANSFORM_FIELDS, FlattenedRecords, envelope_doc
from tests.flattening import TOMBSTONE, flatten

WHERE = KafkaCoordinates("t", 0, 5)


def _events(fixtures_dir) -> list[dict]:
    path = fixtures_dir / "flink" / "debezium-data-schema-include.txt"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("prefix", ["__", "cdc_"])
def test_every_captured_event_flattened_parses_as_its_envelope(fixtures_dir, prefix):
    flat_cfg = FlattenedRecords(fields_prefix=prefix)
    events = _events(fixtures_dir)
    assert {e["payload"]["op"] for e in events} >= {"c", "u", "d"}
    for event in events:
        expected = parse_value(json.dumps(event), "json_with_schema", WHERE)
        flat = flatten(event, TRANSFORM_FIELDS, prefix=prefix)
        assert isinstance(flat, dict)
        for value_format, value in (("json_with_schema", flat), ("json", flat["payload"])):
            got = parse_value(json.dumps(value), value_format, WHERE, flattened=flat_cfg)
            assert got is not None and expected is not None
            assert (got.op, got.position, got.row_image) == (expected.op, expected.position, expected.row_image)
            if value_format == "json_with_schema":
                assert got.row_schema()["fields"] == expected.row_schema()["fields"]  # type: ignore[index]


def test_what_the_transform_drops_or_turns_into_a_tombstone(fixtures_dir):
    delete = next(e for e in _events(fixtures_dir) if e["payload"]["op"] == "d")
    assert flatten(delete, TRANSFORM_FIELDS, deletes="drop") is None
    assert flatten(delete, TRANSFORM_FIELDS, deletes="tombstone") == TOMBSTONE
    truncate = dict(delete, payload=dict(delete["payload"], op="t", before=None))
    assert flatten(truncate, TRANSFORM_FIELDS) is None
    # a Kafka tombstone carries no change, flattened or not
    assert parse_value(None, "json", WHERE, flattened=FlattenedRecords()) is None


def test_a_rewritten_delete_without_op_is_a_delete_and_a_record_without_op_or_position_is_bad():
    flat_cfg = FlattenedRecords()
    doc = {"id": 1, "v": "x", "__deleted": "true", "__source_file": "mysql-bin.000002", "__source_pos": 40}
    assert envelope_doc(doc, flat_cfg)["op"] == "d"
    assert envelope_doc(doc, flat_cfg)["before"] == {"id": 1, "v": "x"}
    with pytest.raises(BadRecordError, match=r"no '__op', which every flattened record needs: add op to"):
        parse_value(json.dumps({"id": 1, "__source_file": "f.1", "__source_pos": 4}), "json", WHERE, flattened=flat_cfg)
    with pytest.raises(BadRecordError, match=r"no '__source_pos', which ordering: binlog needs: add source.pos"):
        parse_value(json.dumps({"id": 1, "__op": "c", "__source_file": "f.1"}), "json", WHERE, flattened=flat_cfg)
    # under kafka order no position is needed; the bare names (add.fields=file,pos) are read too
    event = parse_value(json.dumps({"id": 1, "__op": "c"}), "json", WHERE, "kafka", flattened=flat_cfg)
    assert event is not None and event.after == {"id": 1}
    event = parse_value(
        json.dumps({"id": 1, "__op": "u", "__file": "mysql-bin.000009", "__pos": 77, "__row": 2}),
        "json",
        WHERE,
        flattened=flat_cfg,
    )
    assert event is not None and (event.position.file_seq, event.position.pos, event.position.row) == (9, 77, 2)


def test_the_config_takes_the_transforms_settings_and_refuses_what_loses_deletes(tmp_path):
    base = "tables:\n  - {name: t, topic: p.d.t, namespace: n, table: t, primary_key: [id], flattened: %s%s}\n"
    path = tmp_path / "tables.yaml"
    path.write_text(base % ("{fields_prefix: cdc_, deletes: tombstone}", ""))
    flat = load_tables(path).tables[0].flattened
    assert flat == FlattenedRecords(fields_prefix="cdc_", deletes="tombstone")
    path.write_text(base % ("{deletes: drop}", ""))
    with pytest.raises(ConfigError, match="deletes"):
        load_tables(path)
    path.write_text(base % ("{prefix: x}", ""))
    with pytest.raises(ConfigError, match="prefix"):
        load_tables(path)
    path.write_text(base % ("{deletes: tombstone}", ", history: {}"))
    with pytest.raises(ConfigError, match="history needs deletes with positions"):
        load_tables(path)
