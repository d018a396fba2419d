"""Avro events (Confluent wire format) parse to exactly the rows of the same events in JSON: every
column encoding of :mod:`cdclake.model.types` with extreme values and NULLs, several schema ids in
one batch brought to the table's columns by name, and each way an Avro value can be bad; and the
apply of Avro events through a real schema registry (Apicurio) lands the rows the same events land
through JSON."""

from __future__ import annotations

import base64
import datetime
import json
import logging
import uuid
from decimal import Decimal
from typing import Any

import pytest

from cdclake.errors import SchemaChangeError, SchemaRegistryUnavailableError
from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import KafkaClients, ensure_topic, produce
from cdclake.io.refs import committed_offsets
from cdclake.io.registry import SchemaRegistry
from cdclake.model.avro import connect_schema
from cdclake.model.config_blocks import SchemaChangePolicy
from cdclake.model.layout import QUARANTINE_SUFFIX
from cdclake.model.offsets import OffsetRange
from cdclake.model.plan import RunPlan
from cdclake.model.types import columns_from_connect
from cdclake.pipeline.planner import plan_next
from cdclake.spark.apply import apply_range
from cdclake.spark.parse import parse_records
from cdclake.spark.parse_avro import parse_avro_records
from cdclake.spark.writer_schemas import WriterSchemas, batch_writer_schemas, batch_writers_of, id_aggregates
from tests.avro_events import avro_datum, avro_event, avro_name, avro_schema, confluent_value
from tests.conftest import make_table
from tests.full_types import wkb_linestring, wkb_point
from tests.integration.test_schema_sync import evolved_event, orders_template, source_fields

pytestmark = pytest.mark.integration

DECIMAL = "org.apache.kafka.connect.data.Decimal"
SOURCE_TYPE = "__debezium.source.column.type"


def _f(name: str, ctype: str, semantic: str | None = None, *, optional: bool = True, **extra: Any) -> dict:
    field: dict[str, Any] = {"type": ctype, "optional": optional, "field": name}
    if semantic:
        field["name"] = semantic
        field["version"] = 1
    field.update(extra)
    return field


def _dec(name: str, precision: int | None, scale: int, **params: str) -> dict:
    parameters = {"scale": str(scale), **params}
    if precision is not None:
        parameters["connect.decimal.precision"] = str(precision)
    return _f(name, "bytes", DECIMAL, parameters=parameters)


def _spatial(name: str, semantic: str, *xy: str) -> dict:
    fields = [_f(c, "double", optional=False) for c in xy]
    fields += [_f("wkb", "bytes", optional=bool(xy)), _f("srid", "int32")]  # a Point's WKB is optional
    return _f(name, "struct", f"io.debezium.data.geometry.{semantic}", fields=fields)


ROW_FIELDS = [
    _f("id", "int32", optional=False),
    _f("i8", "int8"),
    _f("i16", "int16"),
    _f("i32", "int32"),
    _f("i64", "int64"),
    _f("u64", "int64", parameters={SOURCE_TYPE: "BIGINT UNSIGNED"}),
    _f("f32", "float"),
    _f("f64", "double"),
    _f("flag", "boolean"),
    _f("txt", "string"),
    _f("blob", "bytes"),
    _dec("dec", 10, 2),
    _dec("dec38", 38, 10),
    _dec("dec65", 65, 30),
    _dec("dec_np", None, 0, **{SOURCE_TYPE: "BIGINT UNSIGNED"}),
    _f(
        "vsd",
        "struct",
        "io.debezium.data.VariableScaleDecimal",
        fields=[_f("scale", "int32", optional=False), _f("value", "bytes", optional=False)],
    ),
    _f("d_dbz", "int32", "io.debezium.time.Date"),
    _f("d_conn", "int32", "org.apache.kafka.connect.data.Date"),
    _f("t_dbz", "int32", "io.debezium.time.Time"),
    _f("t_micro", "int64", "io.debezium.time.MicroTime"),
    _f("t_nano", "int64", "io.debezium.time.NanoTime"),
    _f("t_conn", "int32", "org.apache.kafka.connect.data.Time"),
    _f("t_zoned", "string", "io.debezium.time.ZonedTime"),
    _f("ts3", "int64", "io.debezium.time.Timestamp"),
    _f("ts6", "int64", "io.debezium.time.MicroTimestamp"),
    _f("ts9", "int64", "io.debezium.time.NanoTimestamp"),
    _f("ts_conn", "int64", "org.apache.kafka.connect.data.Timestamp"),
    _f("tsz", "string", "io.debezium.time.ZonedTimestamp"),
    _f("yr", "int32", "io.debezium.time.Year"),
    _f("en", "string", "io.debezium.data.Enum", parameters={"allowed": "red,white"}),
    _f("es", "string", "io.debezium.data.EnumSet", parameters={"allowed": "a,b"}),
    _f("js", "string", "io.debezium.data.Json"),
    _f("bits", "bytes", "io.debezium.data.Bits", parameters={"length": "64"}),
    _spatial("geom", "Geometry"),
    _spatial("pt", "Point", "x", "y"),
    _spatial("geog", "Geography"),
    _f("odd-name", "string"),  # Avro field odd_name (field.name.adjustment.mode=avro)
    _f("added", "int64"),  # not in the first schema
]
"""The table's row: every column encoding once (``i64`` and ``f64`` are ``int32`` and ``float``
in the first writer schema, which lacks ``added``)."""

_OLD_TYPES = {"i64": "int32", "f64": "float"}


def _row(fields: list[dict], name: str) -> dict:
    return {"type": "struct", "optional": True, "name": f"srv.db.tbl.{name}", "fields": fields}


_SOURCE = {
    "type": "struct",
    "optional": False,
    "field": "source",
    "name": "io.debezium.connector.mysql.Source",
    "fields": [
        _f("version", "string", optional=False),
        _f("connector", "string", optional=False),
        _f("name", "string", optional=False),
        _f("ts_ms", "int64", optional=False),
        _f("snapshot", "string", "io.debezium.data.Enum", parameters={"allowed": "true,last,false"}, default="false"),
        _f("db", "string", optional=False),
        _f("table", "string"),
        _f("server_id", "int64", optional=False),
        _f("gtid", "string"),
        _f("file", "string", optional=False),
        _f("pos", "int64", optional=False),
        _f("row", "int32", optional=False),
        _f("thread", "int64"),
    ],
}
"""Debezium MySQL's ``source`` block, as in the Flink capture's writer schema
(``tests/fixtures/debezium/flink/debezium-test-schema.json``)."""


def _envelope(row: dict, name: str) -> dict:
    return {
        "type": "struct",
        "optional": False,
        "name": f"srv.db.tbl.{name}",
        "fields": [
            dict(row, field="before"),
            dict(row, field="after"),
            _SOURCE,
            _f("op", "string", optional=False),
            _f("ts_ms", "int64"),
        ],
    }


TABLE_ROW = _row(ROW_FIELDS, "Value")
OLD_ROW = _row(
    [dict(f, type=_OLD_TYPES.get(f["field"], f["type"])) for f in ROW_FIELDS if f["field"] != "added"], "Value"
)
NEW_ROW = _row([*ROW_FIELDS, _f("surprise", "string")], "Value")  # a column the table lacks
CLASH_ROW = _row(
    [dict(f, type={"txt": "bytes", "i32": "int64"}.get(f["field"], f["type"])) for f in ROW_FIELDS], "Value"
)  # txt as bytes (binary.handling.mode), i32 narrowed from int64: not what the table takes


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unscaled(value: int) -> str:
    return _b64(value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True))


BIG_WKB = wkb_linestring(*[(float(i), -float(i)) for i in range(6)])  # 109 bytes: base64 beyond one 76-char line

MAX = {
    "i8": 127,
    "i16": 32767,
    "i32": 2147483647,
    "i64": 9223372036854775807,
    "u64": 9223372036854775807,
    "f32": 3.4028235e38,
    "f64": 1.7976931348623157e308,
    "flag": True,
    "txt": 'ünïcødé "quoted"\n\ttab',
    "blob": _b64(bytes(range(256))),
    "dec": _unscaled(9999999999),
    "dec38": _unscaled(10**38 - 1),
    "dec65": _unscaled(10**65 - 1),
    "dec_np": _unscaled(18446744073709551615),
    "vsd": {"scale": 40, "value": _unscaled(10**50 + 7)},
    "d_dbz": 2932896,  # 9999-12-31
    "d_conn": 2932896,
    "t_dbz": 2147483647,
    "t_micro": 3020399000000,  # 838:59:59
    "t_nano": 3020399000000000,
    "t_conn": 86399999,
    "t_zoned": "23:59:59.999999Z",
    "ts3": 253402300799999,  # 9999-12-31 23:59:59.999
    "ts6": 253402300799999999,
    "ts9": 9223372036854775000,
    "ts_conn": 253402300799999,
    "tsz": "9999-12-31T23:59:59.999999Z",
    "yr": 2155,
    "en": "white",
    "es": "a,b",
    "js": '{"k": [1, 2.5, null]}',
    "bits": _b64(bytes([1, 2, 3, 4, 5, 6, 7, 0x80])),
    "geom": {"wkb": _b64(BIG_WKB), "srid": 4326},
    "pt": {"x": 1.5, "y": -2.5, "wkb": _b64(wkb_point(1.5, -2.5)), "srid": None},
    "geog": {"wkb": _b64(wkb_point(0, 0)), "srid": 0},
    "odd-name": "",
    "added": -1,
}
MIN = {
    "i8": -128,
    "i16": -32768,
    "i32": -2147483648,
    "i64": -9223372036854775808,
    "u64": 0,
    "f32": -1.401298464324817e-45,
    "f64": 5e-324,
    "flag": False,
    "txt": "",
    "blob": "",
    "dec": _unscaled(-9999999999),
    "dec38": _unscaled(-(10**38 - 1)),
    "dec65": _unscaled(-(10**65 - 1)),
    "dec_np": _unscaled(0),
    "vsd": {"scale": -5, "value": _unscaled(-123)},
    "d_dbz": -719162,  # 0001-01-01
    "d_conn": -719162,
    "t_dbz": -2147483648,
    "t_micro": -3020399000000,
    "t_nano": -3020399000000000,
    "t_conn": 0,
    "t_zoned": "00:00:00+14:00",
    # 0001-01-02: a day above the least, which Python's datetime cannot hold in every time zone
    "ts3": -62135510400000,
    "ts6": -62135510400000000,
    "ts9": -9223372036854775000,
    "ts_conn": -62135510400000,
    "tsz": "0001-01-02T00:00:00-12:00",
    "yr": 1901,
    "en": "red",
    "es": "",
    "js": "[]",
    "bits": _b64(b"\x00"),
    "geom": {"wkb": _b64(wkb_point(0, 0)), "srid": None},
    "pt": {"x": 0.0, "y": 0.0, "wkb": _b64(wkb_point(0, 0)), "srid": 0},
    "geog": {"wkb": _b64(wkb_point(-180, -90)), "srid": 4326},
    "odd-name": "x" * 300,
    "added": None,
}
MISFITS = [
    {"u64": -1},
    {"t_nano": 1001},
    {"tsz": "2020-07-17 18:00:22"},
    {"dec38": _unscaled(10**38)},
    {"dec": _unscaled(10**150)},  # 63 bytes: the error quotes its base64, which must be on one line
    {"pt": {"x": 1.0, "y": 2.0, "wkb": None, "srid": None}},  # a spatial value without WKB
]
"""Values ``decode`` cannot take, one a record: each a bad record naming its column and value."""

OLD = {**MAX, "i64": 2147483647, "f64": 123.102}  # the first schema's int32 and float values


def _source(pos: int, snapshot: str | None = "false") -> dict:
    return {
        "version": "3.5.0.Final",
        "connector": "mysql",
        "name": "srv",
        "ts_ms": 1700000000000 + pos,
        "snapshot": snapshot,
        "db": "db",
        "table": "tbl",
        "server_id": 1,
        "gtid": None,
        "file": "mysql-bin.000003",
        "pos": pos,
        "row": 0,
        "thread": None,
    }


def _event(row: dict, name: str, op: str, before: dict | None, after: dict | None, pos: int) -> dict:
    snapshot = "true" if op == "r" else "false"
    payload = {"before": before, "after": after, "source": _source(pos, snapshot), "op": op, "ts_ms": 1700000000001}
    return {"schema": _envelope(row, name), "payload": payload}


def _image(row: dict, values: dict, key: int) -> dict:
    names = [f["field"] for f in row["fields"]]
    return {"id": key, **{n: values.get(n) for n in names if n != "id"}}


def _events() -> list[tuple[str, dict]]:
    """``(schema version, json_with_schema event)``: every op, every encoding's extremes and NULLs,
    the bad values; then the older, the newer and the clashing schemas."""
    t = TABLE_ROW
    out = [
        ("table", _event(t, "Envelope", "r", None, _image(t, MAX, 1), 100)),
        ("table", _event(t, "Envelope", "c", None, _image(t, MIN, 2), 200)),
        ("table", _event(t, "Envelope", "c", None, _image(t, {}, 3), 300)),  # NULLs
        ("table", _event(t, "Envelope", "u", _image(t, MIN, 2), _image(t, MAX, 2), 400)),
        ("table", _event(t, "Envelope", "d", _image(t, MAX, 1), None, 500)),
        ("table", _event(t, "Envelope", "c", None, None, 510)),  # no after image
        *[("table", _event(t, "Envelope", "c", None, _image(t, m, 10 + i), 600 + i)) for i, m in enumerate(MISFITS)],
        ("old", _event(OLD_ROW, "Envelope", "c", None, _image(OLD_ROW, OLD, 20), 700)),
        ("new", _event(NEW_ROW, "Envelope", "c", None, _image(NEW_ROW, {**MAX, "surprise": "!"}, 21), 800)),
        ("new", _event(NEW_ROW, "Envelope", "d", _image(NEW_ROW, MIN, 21), None, 810)),
    ]
    return out


SCHEMA_IDS = {"table": 7, "old": 3, "new": 11, "clash": 12}


def _raw(spark, values: list[bytes | None]):
    return spark.createDataFrame(
        [("t", 0, i, datetime.datetime(2026, 1, 1), b"k", v) for i, v in enumerate(values)],
        "topic string, partition int, offset long, timestamp timestamp, key binary, value binary",
    )


@pytest.fixture(scope="module")
def parsed(spark):
    """Each event parsed as ``json_with_schema`` and as Avro (plus the bad Avro values), collected."""
    events = _events()
    columns = columns_from_connect(TABLE_ROW)
    schemas: dict[int, Any] = {}
    avro_values = []
    for version, event in events:
        schema, value = avro_event(SCHEMA_IDS[version], event)
        schemas[SCHEMA_IDS[version]] = schema
        avro_values.append(value)
    clash_schema, clash = avro_event(
        SCHEMA_IDS["clash"],
        _event(CLASH_ROW, "Envelope", "c", None, _image(CLASH_ROW, {**MAX, "txt": "AQI="}, 30), 900),
    )
    _, clash_nulls = avro_event(
        SCHEMA_IDS["clash"], _event(CLASH_ROW, "Envelope", "c", None, _image(CLASH_ROW, {}, 31), 910)
    )
    schemas[SCHEMA_IDS["clash"]] = clash_schema
    good = avro_values[0]
    bad = [
        b"\x00\x00\x07",  # shorter than the header
        json.dumps(events[0][1]).encode(),  # JSON, not Avro
        b"\x00" + (999).to_bytes(4, "big") + good[5:],  # an id the registry does not have
        good[: len(good) // 2],  # cut short: does not decode
        clash,
        clash_nulls,
        None,  # a Kafka tombstone
    ]
    json_rows = (
        parse_records(_raw(spark, [json.dumps(e).encode() for _, e in events]), "json_with_schema", columns, ("id",))
        .drop("value")
        .orderBy("offset")
        .collect()
    )
    avro_rows = (
        parse_avro_records(_raw(spark, avro_values + bad), schemas, columns, ("id",))
        .drop("value")
        .orderBy("offset")
        .collect()
    )
    return json_rows, avro_rows, len(events)


def test_avro_parses_to_the_rows_of_json(parsed):
    json_rows, avro_rows, n = parsed
    as_json = [{k: v for k, v in r.asDict(recursive=True).items() if k != "schema_id"} for r in avro_rows[:n]]
    assert as_json == [r.asDict(recursive=True) for r in json_rows]
    assert [r["schema_id"] for r in avro_rows[:n]] == [SCHEMA_IDS[version] for version, _ in _events()]
    images = [r["image"] for r in avro_rows[:n]]
    assert images[0]["blob"] == bytes(range(256)) and images[0]["geom"]["wkb"] == BIG_WKB
    assert (images[0]["dec38"], images[0]["dec65"]) == (Decimal("9" * 28 + "." + "9" * 10), "9" * 35 + "." + "9" * 30)
    assert images[0]["odd-name"] == "" and images[1]["odd-name"] == "x" * 300
    assert images[2]["i8"] is None and images[2]["vsd"] is None and images[2]["geom"] is None
    assert images[n - 3]["i64"] == 2147483647 and images[n - 3]["f64"] == 123.102  # widened: int32, float
    assert images[n - 3]["added"] is None
    assert [r["unknown_column"] for r in avro_rows[n - 2 : n]] == ["surprise", "surprise"]
    errors = [r["error"] for r in avro_rows[5:12]]
    assert errors[0] == "op 'c' without an 'after' image"
    assert "'u64'" in errors[1] and "'t_nano'" in errors[2] and "'tsz'" in errors[3] and "'dec38'" in errors[4]
    assert errors[5].startswith(f"column 'dec': value \"{_unscaled(10**150)[:80]}")
    assert errors[6].startswith("column 'pt': value {")
    assert [r["error"] for r in avro_rows[:5]] == [None] * 5


def test_bad_avro_values_are_bad_records_naming_why(parsed):
    _, avro_rows, n = parsed
    short, not_framed, unknown_id, cut, clash, clash_nulls, tombstone = avro_rows[n:]
    assert short["error"] == (
        "value is not in the Confluent wire format (magic byte 0, a 4-byte schema id, the Avro datum): "
        "3 bytes long, first byte 0x00"
    )
    assert not_framed["error"].endswith("first byte 0x7B")
    assert unknown_id["error"] == "schema id 999 is not in the schema registry"
    assert cut["error"] == "value does not decode with the writer schema of schema id 7 (corrupt Avro bytes)"
    assert clash["error"] == (
        "schema id 12: column 'i32' is int64 in the writer schema, which the table's column (int, encoding int32) "
        "cannot take"
    )
    assert (clash_nulls["error"], clash_nulls["image"]["id"]) == (None, 31)
    assert (tombstone["is_tombstone"], tombstone["error"]) == (True, None)


def test_flink_capture_avro_values(spark, fixtures_dir):
    """The three real Debezium 1.2 Avro values of the Flink capture (schema id 81, one trailing
    byte each) parse as their writer schema says."""
    schema = json.loads((fixtures_dir / "flink/debezium-test-schema.json").read_text())
    columns = columns_from_connect(next(f for f in connect_schema(schema)["fields"] if f["field"] == "after"))
    values = [(fixtures_dir / f"flink/debezium-avro-{op}.avro").read_bytes() for op in ("insert", "update", "delete")]
    rows = parse_avro_records(_raw(spark, values), {81: schema}, columns, ("id",)).orderBy("offset").collect()
    assert [(r["op"], r["error"], r["_cdc_binlog_pos"]) for r in rows] == [
        ("c", None, 213795),
        ("u", None, 214095),
        ("d", None, 214438),
    ]
    assert [r["image"]["name"] for r in rows] == ["lisi", "zhangsan", "zhangsan"]


def _table_rows(settings, cfg) -> list[dict]:
    rows = load_catalog(settings).load_table(cfg.identifier).scan().to_arrow().to_pylist()
    return sorted(rows, key=lambda r: r["id"])


def test_avro_apply_through_a_real_registry_lands_the_json_rows(spark, kafka, schema_registry, stack_settings):
    """Two writer schemas registered in Apicurio (the table's, and an older one with narrower
    types and a column less), their events in Avro on one topic and in JSON on another: the two
    tables hold the same rows. A corrupt Avro record, one of an id the registry does not have and
    one of a writer schema with a column the table cannot take are quarantined; the last one's
    connector mode is said (checked on every writer schema of the batch)."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    # its bad records are quarantined and counted, the run succeeds (the alert: test_contract.py)
    avro_cfg, json_cfg = make_table(value_format="avro", bad_records_tolerance="all"), make_table()
    events = [e for v, e in _events() if v in ("table", "old") and e["payload"]["after"] is not None][:3]
    events.append(next(e for v, e in _events() if v == "old"))
    registry = SchemaRegistryClient({"url": schema_registry})
    ids = {}
    values = []
    for event in events:
        schema = avro_schema(event["schema"])
        key = json.dumps(schema, sort_keys=True)
        if key not in ids:
            ids[key] = registry.register_schema(f"{avro_cfg.topic}-value", Schema(json.dumps(schema), "AVRO"))
        values.append(confluent_value(ids[key], schema, avro_datum(event["schema"], event["payload"])))
    # txt written as bytes (binary.handling.mode=bytes against the table's string): a bad record,
    # and the run says the connector mode the events contradict
    as_bytes = _event(
        _row([dict(f, type="bytes") if f["field"] == "txt" else f for f in ROW_FIELDS], "Value"),
        "Envelope",
        "c",
        None,
        {"id": 40, "txt": "AQI="},
        1000,
    )
    bytes_schema = avro_schema(as_bytes["schema"])
    bytes_id = registry.register_schema(f"{avro_cfg.topic}-value", Schema(json.dumps(bytes_schema), "AVRO"))
    bad = [
        values[0][: len(values[0]) // 2],
        b"\x00" + (10**6).to_bytes(4, "big") + values[0][5:],
        confluent_value(bytes_id, bytes_schema, avro_datum(as_bytes["schema"], as_bytes["payload"])),
    ]
    for cfg, topic_values in ((avro_cfg, values + bad), (json_cfg, [json.dumps(e).encode() for e in events])):
        ensure_topic(kafka, cfg.topic, 1)
        produce(kafka, cfg.topic, ((f"k{i}".encode(), v, None) for i, v in enumerate(topic_values)))

    clients = KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap, SchemaRegistry({"url": schema_registry}))
    results = {}
    for cfg in (avro_cfg, json_cfg):
        plan = plan_next(load_catalog(stack_settings), clients, cfg, "avro-run")
        results[cfg.value_format] = apply_range(spark, stack_settings, plan, kafka=clients)
    assert (results["avro"].ops, results["avro"].quarantined) == ({"r": 1, "c": 3}, 3)
    (contradiction,) = results["avro"].connector_contradictions
    assert f"partition 0 offset {len(values) + 2}: column 'txt': the events are bytes" in contradiction
    assert (results["json_with_schema"].ops, results["json_with_schema"].quarantined) == ({"r": 1, "c": 3}, 0)
    # a table created from Avro events has the Avro field names: odd_name (Debezium's adjustment)
    from_json = [{avro_name(k): v for k, v in row.items()} for row in _table_rows(stack_settings, json_cfg)]
    assert _table_rows(stack_settings, avro_cfg) == from_json
    quarantine = load_catalog(stack_settings).load_table(avro_cfg.identifier + QUARANTINE_SUFFIX).scan().to_arrow()
    assert sorted(quarantine.column("error").to_pylist()) == [
        f"schema id {10**6} is not in the schema registry",
        f"schema id {bytes_id}: column 'txt' is bytes in the writer schema, which the table's column (string, "
        "encoding string) cannot take",
        f"value does not decode with the writer schema of schema id {ids[next(iter(ids))]} (corrupt Avro bytes)",
    ]

    # a batch of which no schema id is known is a registry fault (the wrong one, or one that lost
    # its schemas), not bad records: the run fails for its retry, nothing quarantined or committed
    done = committed_offsets(load_catalog(stack_settings).load_table(avro_cfg.identifier), avro_cfg.topic)
    produce(kafka, avro_cfg.topic, [(b"k", b"\x00" + (10**6 + 1).to_bytes(4, "big") + values[0][5:], None)])
    plan = plan_next(load_catalog(stack_settings), clients, avro_cfg, "avro-lost-run")
    with pytest.raises(
        SchemaRegistryUnavailableError, match=r"none of the batch's 1 schema id\(s\) is in the registry"
    ):
        apply_range(spark, stack_settings, plan, kafka=clients)
    assert committed_offsets(load_catalog(stack_settings).load_table(avro_cfg.identifier), avro_cfg.topic) == done


@pytest.mark.parametrize("subject", ["topic", "record"])
def test_an_avro_batch_is_parsed_with_its_own_writer_schemas_whatever_the_subject(
    spark, kafka, schema_registry, stack_settings, subject, caplog
):
    """The apply decodes a batch with the newest versions of ``<topic>-value`` before it reads the
    batch (``CANDIDATE_VERSIONS``), then checks them against the batch's ids. ``topic``: the
    batch's two writer schemas are older than the subject's three newest versions (later ones add
    a column no record has): the batch is parsed again with its own, and the table takes none of
    the later versions' columns. ``record``: the schemas are under another subject (a record name
    strategy): the ids are read from the records first. Both land the rows of the same events in
    JSON."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    avro_cfg, json_cfg = make_table(value_format="avro"), make_table()
    events = [e for v, e in _events() if v in ("table", "old") and e["payload"]["after"] is not None][:3]
    events.append(next(e for v, e in _events() if v == "old"))
    name = f"{avro_cfg.topic}-value" if subject == "topic" else f"srv.db.tbl{uuid.uuid4().hex[:6]}.Envelope"
    registry = SchemaRegistryClient({"url": schema_registry})
    ids: dict[str, int] = {}
    values = []
    for event in events:
        schema = avro_schema(event["schema"])
        key = json.dumps(schema, sort_keys=True)
        if key not in ids:
            ids[key] = registry.register_schema(name, Schema(json.dumps(schema), "AVRO"))
        values.append(confluent_value(ids[key], schema, avro_datum(event["schema"], event["payload"])))
    later = [f"later{k}" for k in range(3)]
    for k in range(len(later) if subject == "topic" else 0):  # versions no record of the batch has
        row = _row([*ROW_FIELDS, *(_f(c, "string") for c in later[: k + 1])], "Value")
        schema = avro_schema(_event(row, "Envelope", "c", None, {"id": 1}, 1)["schema"])
        registry.register_schema(f"{avro_cfg.topic}-value", Schema(json.dumps(schema), "AVRO"))
    for cfg, topic_values in ((avro_cfg, values), (json_cfg, [json.dumps(e).encode() for e in events])):
        ensure_topic(kafka, cfg.topic, 1)
        produce(kafka, cfg.topic, ((f"k{i}".encode(), v, None) for i, v in enumerate(topic_values)))

    clients = KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap, SchemaRegistry({"url": schema_registry}))
    for cfg in (avro_cfg, json_cfg):
        plan = plan_next(load_catalog(stack_settings), clients, cfg, "r")
        with caplog.at_level(logging.INFO, logger="cdclake.spark.batch"):
            result = apply_range(spark, stack_settings, plan, kafka=clients)
        assert (result.ops, result.quarantined) == ({"r": 1, "c": 3}, 0)
    again = [r.getMessage() for r in caplog.records if "parsed again" in r.getMessage()]
    said = f"table {avro_cfg.identifier}: the batch holds schema ids {sorted(ids.values())}: parsed again with them"
    assert again == ([said] if subject == "topic" else [])
    from_json = [{avro_name(k): v for k, v in row.items()} for row in _table_rows(stack_settings, json_cfg)]
    assert _table_rows(stack_settings, avro_cfg) == from_json
    assert not set(later) & set(load_catalog(stack_settings).load_table(avro_cfg.identifier).schema().column_names)


def test_the_statistics_pass_finds_a_batchs_ids_as_a_job_of_their_own_does(spark):
    """The writer schemas of a batch of several ids over three partitions, from the aggregates the
    statistics pass adds (``id_aggregates``), equal those a job of their own reads
    (``batch_writer_schemas``): ids, first record of each, first offset in each partition. An id
    the subject's versions lack gives none: the apply reads it by that job."""

    def no_lookup(schema_id: int) -> Any:
        raise AssertionError(f"schema id {schema_id} was looked up")

    rows = [(1, 0, 5), (1, 0, 3), (2, 0, 7), (2, 1, 2), (None, 1, 0), (1, 2, 9), (None, 2, 1)]
    batch = spark.createDataFrame(rows, "schema_id int, partition int, offset bigint")
    candidates = WriterSchemas({1: {"name": "one"}, 2: {"name": "two"}, 3: {"name": "three"}}, complete=False)
    partitions = [0, 1, 2]

    def from_aggregates(df: Any) -> WriterSchemas | None:
        aggregates = id_aggregates(candidates, partitions)
        assert aggregates is not None
        row = df.agg(*[column.alias(name) for name, column in aggregates.items()]).collect()[0]
        return batch_writers_of({name: row[name] for name in aggregates}, candidates, partitions, no_lookup)

    found = from_aggregates(batch)
    assert found == batch_writer_schemas(batch, candidates, no_lookup)
    assert found is not None
    assert (dict(found.first), {i: dict(by) for i, by in found.first_in_partition.items()}) == (
        {1: (0, 3), 2: (0, 7)},
        {1: {0: 3, 2: 9}, 2: {0: 7, 1: 2}},
    )
    assert set(found.schemas) == {1, 2} and found.complete
    assert from_aggregates(batch.union(spark.createDataFrame([(4, 1, 1)], batch.schema))) is None
    assert id_aggregates(candidates, list(range(100))) is None  # 300 aggregates: a job of their own


def test_avro_without_schema_change_topic_evolves_from_each_writer_schema(
    spark, kafka, schema_registry, stack_settings
):
    """No schema-change topic, Avro on two partitions, partition 1 behind on an older writer schema
    (the batch's last record in Kafka order): every writer schema of a batch evolves the table. A
    second one adds a column and widens int32 -> int64 (a value above 2^31); a third, in a later
    run, widens the added column. Their records land with their values, none quarantined. An
    incompatible one (int64 -> string) under ``incompatible: fail`` names its schema id and first
    record; nothing committed."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    cfg = make_table(value_format="avro", topic=f"ea{uuid.uuid4().hex[:8]}.inventory.orders")
    template, big = orders_template(), 3_000_000_000
    discount = ("qty", {"type": "int32", "optional": True, "field": "discount"})
    discount64 = ("qty", {"type": "int64", "optional": True, "field": "discount"})
    registry = SchemaRegistryClient({"url": schema_registry})
    ids: dict[str, int] = {}

    def produce_avro(records: list[tuple[int, tuple[str, str]]]) -> None:
        producer = kafka.producer()
        for partition, (key, value) in records:
            event = json.loads(value)
            schema = avro_schema(event["schema"])
            text = json.dumps(schema, sort_keys=True)
            if text not in ids:
                ids[text] = registry.register_schema(f"{cfg.topic}-value", Schema(text, "AVRO"))
            datum = avro_datum(event["schema"], event["payload"])
            producer.produce(cfg.topic, key=key, value=confluent_value(ids[text], schema, datum), partition=partition)
        producer.flush(30)

    clients = KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap, SchemaRegistry({"url": schema_registry}))

    def apply(start: dict[int, int], end: dict[int, int], run_id: str):
        plan = RunPlan(table=cfg, run_id=run_id, range=OffsetRange(topic=cfg.topic, start=start, end=end))
        return apply_range(spark, stack_settings, plan, kafka=clients)

    ensure_topic(kafka, cfg.topic, 2)
    produce_avro(
        [
            (0, evolved_event(template, 40000, {"id": 1, "qty": 1})),
            (1, evolved_event(template, 40050, {"id": 3, "qty": 3})),
            (
                0,
                evolved_event(
                    template, 40100, {"id": 2, "qty": big, "discount": 5}, add=(discount,), retype={"qty": "int64"}
                ),
            ),
        ]
    )
    first = apply({0: 0, 1: 0}, {0: 2, 1: 1}, "run-1")
    assert (first.status, first.quarantined) == ("committed", 0)
    produce_avro(
        [
            (
                1,
                evolved_event(
                    template, 40250, {"id": 3, "qty": 4, "discount": 6}, add=(discount,), retype={"qty": "int64"}
                ),
            ),
            (
                0,
                evolved_event(
                    template,
                    40300,
                    {"id": 4, "qty": big + 1, "discount": big},
                    add=(discount64,),
                    retype={"qty": "int64"},
                ),
            ),
        ]
    )
    second = apply({0: 2, 1: 1}, {0: 3, 1: 2}, "run-2")
    assert (second.status, second.quarantined) == ("committed", 0)
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert (source_fields(table)["qty"][1], source_fields(table)["discount"][1]) == ("long", "long")
    rows = {r["id"]: (r["qty"], r["discount"]) for r in table.scan().to_arrow().to_pylist()}
    assert rows == {1: (1, None), 2: (big, 5), 3: (4, 6), 4: (big + 1, big)}

    produce_avro(
        [
            (
                1,
                evolved_event(
                    template, 40450, {"id": 3, "qty": 5, "discount": 7}, add=(discount64,), retype={"qty": "int64"}
                ),
            ),
            (0, evolved_event(template, 40500, {"id": 5, "qty": "many"}, add=(discount64,), retype={"qty": "string"})),
        ]
    )
    text_id = list(ids.values())[-1]
    before = table.metadata
    with pytest.raises(
        SchemaChangeError,
        match=rf"partition 0 offset 3 \(writer schema id {text_id}\) changes column 'qty' from long to string",
    ):
        apply({0: 3, 1: 2}, {0: 4, 1: 3}, "run-3")
    after = load_catalog(stack_settings).load_table(cfg.identifier).metadata
    assert (after.current_snapshot_id, after.current_schema_id) == (
        before.current_snapshot_id,
        before.current_schema_id,
    )

    # under new_column the batch is applied up to the change first: partition 0 starts at it, so
    # only partition 1's record of the older writer schema; the next run sets the column aside
    aside = cfg.model_copy(update={"schema_changes": SchemaChangePolicy(incompatible="new_column")})

    def apply_aside(start: dict[int, int], end: dict[int, int], run_id: str):
        plan = RunPlan(table=aside, run_id=run_id, range=OffsetRange(topic=cfg.topic, start=start, end=end))
        return apply_range(spark, stack_settings, plan, kafka=clients)

    before_change = apply_aside({0: 3, 1: 2}, {0: 4, 1: 3}, "run-4")
    assert (before_change.status, before_change.applied_end, before_change.events) == ("committed", {0: 3, 1: 3}, 1)
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert source_fields(table)["qty"][1] == "long" and not any(n.startswith("qty__") for n in source_fields(table))
    at_change = apply_aside({0: 3, 1: 3}, {0: 4, 1: 3}, "run-5")
    assert (at_change.status, at_change.events, at_change.quarantined) == ("committed", 1, 0)
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert source_fields(table)["qty"][1] == "string" and source_fields(table)["qty__0_3"][1] == "long"
    rows = {r["id"]: (r["qty"], r["qty__0_3"]) for r in table.scan().to_arrow().to_pylist()}
    assert rows == {1: (None, 1), 2: (None, big), 3: (None, 5), 4: (None, big + 1), 5: ("many", None)}
