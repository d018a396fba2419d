"""Wide tables on the shared engine (Spark Connect): a source table of 300 columns of every column
encoding (:mod:`cdclake.model.types`) applied through the normal apply path lands value for
value, in JSON with schema and in Avro, and the protobuf plans of a run are as deep at 300 columns
as at 40.

The Python Spark Connect client refuses a plan nested more than 100 protobuf levels
(``google.protobuf.message.DecodeError: ... Exceeded upb_DecodeOptions_MaxDepth``): an expression
nested once per column (a ``when``/``otherwise`` chain, a left-deep ``|``) failed every run of a
table of some 80 columns (issue 51, item 6)."""

from __future__ import annotations

import base64
import datetime
import json
import subprocess
import sys
from decimal import Decimal
from typing import Any

import pytest

from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import KafkaClients, ensure_topic, produce
from cdclake.io.registry import SchemaRegistry
from cdclake.model.layout import TOMBSTONES_SUFFIX, side_table
from cdclake.model.types import DECIMAL, SOURCE_COLUMN_TYPE
from cdclake.pipeline.planner import plan_next
from tests.avro_events import avro_datum, avro_schema, confluent_value
from tests.conftest import make_table
from tests.flattening import flatten
from tests.full_types import wkb_linestring, wkb_point
from tests.integration.test_crash import job_env
from tests.integration.test_engine import _client_result

pytestmark = pytest.mark.integration

WIDTH = 300
"""Columns of the wide table, the primary key ``id`` included (production tables have 100-300)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unscaled(value: int) -> str:
    """Connect ``Decimal`` bytes of an unscaled value (big-endian two's complement, shortest), in base64."""
    return _b64(value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True))


def _semantic(ctype: str, name: str, **extra: Any) -> dict[str, Any]:
    return {"type": ctype, "name": name, "version": 1, **extra}


def _decimal(precision: int | None, scale: int, **params: str) -> dict[str, Any]:
    parameters = {"scale": str(scale), **params}
    if precision is not None:
        parameters["connect.decimal.precision"] = str(precision)
    return _semantic("bytes", DECIMAL, parameters=parameters)


def _spatial(semantic: str, *xy: str) -> dict[str, Any]:
    fields = [{"type": "double", "optional": False, "field": c} for c in xy]
    fields += [
        {"type": "bytes", "optional": bool(xy), "field": "wkb"},  # a Point's WKB is optional
        {"type": "int32", "optional": True, "field": "srid"},
    ]
    return _semantic("struct", f"io.debezium.data.geometry.{semantic}", fields=fields)


_UTC = datetime.timezone.utc
_BITS = bytes([1, 2, 3, 4, 5, 6, 7, 0x80])
_LINE = wkb_linestring(*[(float(i), -float(i)) for i in range(6)])

KINDS: list[tuple[str, dict[str, Any], tuple[Any, Any], tuple[Any, Any]]] = [
    # (name, Connect field schema, (JSON value, Iceberg value) of image A, of image B)
    ("i8", {"type": "int8"}, (-128, -128), (127, 127)),
    ("i16", {"type": "int16"}, (32767, 32767), (-32768, -32768)),
    ("i32", {"type": "int32"}, (-(2**31), -(2**31)), (2**31 - 1, 2**31 - 1)),
    ("i64", {"type": "int64"}, (2**63 - 1, 2**63 - 1), (-(2**63), -(2**63))),
    ("u64", {"type": "int64", "parameters": {SOURCE_COLUMN_TYPE: "BIGINT UNSIGNED"}}, (2**63 - 1, 2**63 - 1), (0, 0)),
    ("f32", {"type": "float"}, (1.5, 1.5), (-0.25, -0.25)),
    ("f32b", {"type": "float32"}, (3.25, 3.25), (0.0, 0.0)),
    ("f64", {"type": "double"}, (404.4443, 404.4443), (-1.7976931348623157e308, -1.7976931348623157e308)),
    ("f64b", {"type": "float64"}, (5e-324, 5e-324), (123.102, 123.102)),
    ("flag", {"type": "boolean"}, (True, True), (False, False)),
    ("txt", {"type": "string"}, ('ünïcødé "q"\n\t', 'ünïcødé "q"\n\t'), ("", "")),
    ("blob", {"type": "bytes"}, (_b64(bytes(range(256))), bytes(range(256))), ("", b"")),
    ("dec", _decimal(10, 2), (_unscaled(12345), Decimal("123.45")), (_unscaled(-9999999999), Decimal("-99999999.99"))),
    (
        "dec38",
        _decimal(38, 10),
        (_unscaled(10**38 - 1), Decimal("9" * 28 + "." + "9" * 10)),
        (_unscaled(-1), Decimal("-0.0000000001")),
    ),
    (
        "dec65",
        _decimal(65, 30),
        (_unscaled(10**65 - 1), "9" * 35 + "." + "9" * 30),
        (_unscaled(5), "0." + "0" * 29 + "5"),
    ),
    (
        "decu",
        _decimal(20, 0),
        (_unscaled(18446744073709551615), Decimal(18446744073709551615)),
        (_unscaled(0), Decimal(0)),
    ),
    ("decnp", _decimal(None, 0), (_unscaled(10**37), Decimal(10**37)), (_unscaled(-7), Decimal(-7))),
    (
        "vsd",
        _semantic(
            "struct",
            "io.debezium.data.VariableScaleDecimal",
            fields=[
                {"type": "int32", "optional": False, "field": "scale"},
                {"type": "bytes", "optional": False, "field": "value"},
            ],
        ),
        ({"scale": 3, "value": _unscaled(-123456)}, "-123.456"),
        ({"scale": 0, "value": _unscaled(42)}, "42"),
    ),
    (
        "d_dbz",
        _semantic("int32", "io.debezium.time.Date"),
        (18460, datetime.date(2020, 7, 17)),
        (-719162, datetime.date(1, 1, 1)),
    ),
    (
        "d_conn",
        _semantic("int32", "org.apache.kafka.connect.data.Date"),
        (0, datetime.date(1970, 1, 1)),
        (2932896, datetime.date(9999, 12, 31)),
    ),
    ("t_dbz", _semantic("int32", "io.debezium.time.Time"), (64822000, 64822000000), (-1000, -1000000)),
    (
        "t_micro",
        _semantic("int64", "io.debezium.time.MicroTime"),
        (3020399000000, 3020399000000),
        (-3020399000000, -3020399000000),
    ),
    ("t_nano", _semantic("int64", "io.debezium.time.NanoTime"), (64822000123000, 64822000123), (0, 0)),
    ("t_conn", _semantic("int32", "org.apache.kafka.connect.data.Time"), (86399999, 86399999000), (0, 0)),
    (
        "t_zoned",
        _semantic("string", "io.debezium.time.ZonedTime"),
        ("23:59:59.999999Z", "23:59:59.999999Z"),
        ("00:00:00+14:00", "00:00:00+14:00"),
    ),
    (
        "ts3",
        _semantic("int64", "io.debezium.time.Timestamp"),
        (1595008822123, datetime.datetime(2020, 7, 17, 18, 0, 22, 123000)),
        (-62135510400000, datetime.datetime(1, 1, 2)),
    ),
    (
        "ts6",
        _semantic("int64", "io.debezium.time.MicroTimestamp"),
        (1595008822123456, datetime.datetime(2020, 7, 17, 18, 0, 22, 123456)),
        (253402300799999999, datetime.datetime(9999, 12, 31, 23, 59, 59, 999999)),
    ),
    (
        "ts9",
        _semantic("int64", "io.debezium.time.NanoTimestamp"),
        (1595008822123456000, datetime.datetime(2020, 7, 17, 18, 0, 22, 123456)),
        (-1000, datetime.datetime(1969, 12, 31, 23, 59, 59, 999999)),
    ),
    (
        "ts_conn",
        _semantic("int64", "org.apache.kafka.connect.data.Timestamp"),
        (0, datetime.datetime(1970, 1, 1)),
        (253402300799999, datetime.datetime(9999, 12, 31, 23, 59, 59, 999000)),
    ),
    (
        "tsz",
        _semantic("string", "io.debezium.time.ZonedTimestamp"),
        ("2020-07-17T18:00:22.123456+02:00", datetime.datetime(2020, 7, 17, 16, 0, 22, 123456, tzinfo=_UTC)),
        ("9999-12-31T23:59:59.999999Z", datetime.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=_UTC)),
    ),
    ("yr", _semantic("int32", "io.debezium.time.Year"), (2155, 2155), (1901, 1901)),
    (
        "en",
        _semantic("string", "io.debezium.data.Enum", parameters={"allowed": "red,white"}),
        ("white",) * 2,
        ("red",) * 2,
    ),
    ("es", _semantic("string", "io.debezium.data.EnumSet", parameters={"allowed": "a,b"}), ("a,b",) * 2, ("",) * 2),
    ("js", _semantic("string", "io.debezium.data.Json"), ('{"k": [1, 2.5, null]}',) * 2, ("[]",) * 2),
    ("xml", _semantic("string", "io.debezium.data.Xml"), ("<a>b</a>",) * 2, ("<c/>",) * 2),
    (
        "bits",
        _semantic("bytes", "io.debezium.data.Bits", parameters={"length": "64"}),
        (_b64(_BITS), _BITS[::-1]),  # Debezium's little-endian order, stored in MySQL's
        (_b64(b"\x00"), b"\x00"),
    ),
    (
        "geom",
        _spatial("Geometry"),
        ({"wkb": _b64(_LINE), "srid": 4326}, {"wkb": _LINE, "srid": 4326}),
        ({"wkb": _b64(wkb_point(0, 0)), "srid": None}, {"wkb": wkb_point(0, 0), "srid": None}),
    ),
    (
        "pt",
        _spatial("Point", "x", "y"),
        (
            {"x": 1.5, "y": -2.5, "wkb": _b64(wkb_point(1.5, -2.5)), "srid": None},
            {"wkb": wkb_point(1.5, -2.5), "srid": None},
        ),
        ({"x": 0.0, "y": 0.0, "wkb": _b64(wkb_point(0, 0)), "srid": 0}, {"wkb": wkb_point(0, 0), "srid": 0}),
    ),
    (
        "geog",
        _spatial("Geography"),
        ({"wkb": _b64(wkb_point(-180, -90)), "srid": 4326}, {"wkb": wkb_point(-180, -90), "srid": 4326}),
        ({"wkb": _b64(wkb_point(0, 0)), "srid": 0}, {"wkb": wkb_point(0, 0), "srid": 0}),
    ),
]
"""Every column encoding of :mod:`cdclake.model.types` (Connect primitives, decimals of each kind,
every temporal, string, bit and spatial semantic type), with two values each, extremes among
them."""


def wide_columns(width: int = WIDTH) -> list[tuple[str, dict[str, Any], tuple[Any, Any], tuple[Any, Any]]]:
    """``width`` columns: ``id`` (int32, the primary key), then :data:`KINDS` over and over
    (``<kind>_<i>``)."""
    out: list[tuple[str, dict[str, Any], tuple[Any, Any], tuple[Any, Any]]] = [
        ("id", {"type": "int32", "optional": False}, (0, 0), (0, 0))
    ]
    for i in range(1, width):
        name, field, a, b = KINDS[(i - 1) % len(KINDS)]
        out.append((f"{name}_{i}", field, a, b))
    return out


def _row_schema(columns) -> dict[str, Any]:
    fields = [{"optional": True, **field, "field": name} for name, field, _, _ in columns]
    return {"type": "struct", "optional": True, "name": "srv.db.wide.Value", "fields": fields}


_SOURCE_SCHEMA = {
    "type": "struct",
    "optional": False,
    "field": "source",
    "name": "io.debezium.connector.mysql.Source",
    "fields": [
        {"type": "string", "optional": False, "field": "connector"},
        {"type": "string", "optional": False, "field": "name"},
        {"type": "int64", "optional": False, "field": "ts_ms"},
        {"type": "string", "optional": True, "field": "snapshot"},
        {"type": "string", "optional": False, "field": "db"},
        {"type": "string", "optional": True, "field": "table"},
        {"type": "int64", "optional": False, "field": "server_id"},
        {"type": "string", "optional": True, "field": "gtid"},
        {"type": "string", "optional": False, "field": "file"},
        {"type": "int64", "optional": False, "field": "pos"},
        {"type": "int32", "optional": False, "field": "row"},
    ],
}


def wide_event(columns, op: str, key: int, before: str | None, after: str | None, pos: int) -> dict[str, Any]:
    """A ``json_with_schema`` Debezium MySQL event of the wide table: its images ``A``, ``B`` (the
    values of :data:`KINDS`) or ``null`` (every column but ``id`` null), or ``None`` (no image)."""
    row = _row_schema(columns)

    def image(which: str | None) -> dict[str, Any] | None:
        if which is None:
            return None
        values = {name: (a if which == "A" else b if which == "B" else (None, None))[0] for name, _, a, b in columns}
        return dict(values, id=key)

    schema = {
        "type": "struct",
        "optional": False,
        "name": "srv.db.wide.Envelope",
        "fields": [
            dict(row, field="before"),
            dict(row, field="after"),
            _SOURCE_SCHEMA,
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }
    source = {
        "connector": "mysql",
        "name": "srv",
        "ts_ms": 1_700_000_000_000 + pos,
        "snapshot": "true" if op == "r" else "false",
        "db": "db",
        "table": "wide",
        "server_id": 1,
        "gtid": None,
        "file": "mysql-bin.000003",
        "pos": pos,
        "row": 0,
    }
    payload = {"before": image(before), "after": image(after), "source": source, "op": op, "ts_ms": 1_700_000_000_001}
    return {"schema": schema, "payload": payload}


def expected_row(columns, key: int, which: str) -> dict[str, Any]:
    """The row the table holds for image ``which`` (``A``, ``B``, ``null``) of ``key``."""
    values = {name: (a if which == "A" else b if which == "B" else (None, None))[1] for name, _, a, b in columns}
    return dict(values, id=key)


_RUNS = [
    # (op, key, before, after, pos) of each run
    [
        ("r", 1, None, "A", 100),
        ("c", 2, None, "A", 200),
        ("c", 3, None, "null", 300),
        ("u", 1, "A", "B", 400),
        ("c", 4, None, "B", 500),
        ("d", 4, "B", None, 600),  # a delete: its tombstone is recorded
    ],
    [
        ("c", 4, None, "A", 500),  # re-emitted below the delete: its tombstone keeps it out
        ("u", 3, "null", "B", 700),
        ("c", 5, None, "null", 800),
    ],
]
_FINAL = {1: "B", 2: "A", 3: "B", 5: "null"}


MAX_PLAN_DEPTH = 100
"""The protobuf nesting the Python Spark Connect client accepts (upb's default decoding depth)."""


def plan_depth(message: Any) -> int:
    """How deep protobuf ``message`` nests: 1 for a message without message fields."""
    deepest, stack = 0, [(message, 1)]
    while stack:
        m, depth = stack.pop()
        deepest = max(deepest, depth)
        for field, value in m.ListFields():
            if field.type == field.TYPE_MESSAGE:
                stack += [(v, depth + 1) for v in (value if field.is_repeated else [value])]
    return deepest


def record_plan_depths() -> list[int]:
    """From now on, the depth of every plan this process's Spark Connect clients send (executed,
    or analysed) is appended to the list returned."""
    from pyspark.sql.connect.client.core import SparkConnectClient

    depths: list[int] = []
    execute, fetch, analyze = (
        SparkConnectClient._execute,
        SparkConnectClient._execute_and_fetch_as_iterator,
        SparkConnectClient._analyze,
    )

    def _execute(self, req, *args, **kwargs):
        depths.append(plan_depth(req.plan))
        return execute(self, req, *args, **kwargs)

    def _fetch(self, req, *args, **kwargs):
        depths.append(plan_depth(req.plan))
        return fetch(self, req, *args, **kwargs)

    def _analyze(self, method, **kwargs):
        if kwargs.get("plan") is not None:
            depths.append(plan_depth(kwargs["plan"]))
        return analyze(self, method, **kwargs)

    SparkConnectClient._execute = _execute
    SparkConnectClient._execute_and_fetch_as_iterator = _fetch
    SparkConnectClient._analyze = _analyze
    return depths


_CLIENT = """
import json, logging, sys
logging.basicConfig(level=logging.INFO)
from cdclake.model.plan import RunPlan
from cdclake.settings import Settings
from cdclake.spark.apply import apply_range
from cdclake.spark.session import connect_session
from tests.integration.test_wide_tables import record_plan_depths
depths = record_plan_depths()
spark = connect_session(sys.argv[1])
result = apply_range(spark, Settings.from_env(), RunPlan.from_json(sys.argv[2]))
spark.stop()
print("CLIENT_DONE", json.dumps(dict(json.loads(result.to_json()), plan_depth=max(depths))), flush=True)
"""
"""The apply client of :func:`tests.integration.test_engine._apply` that also reports the depth of
the deepest plan the run sent."""


def _apply(url: str, settings, plan, env: dict[str, str]) -> dict[str, Any]:
    """Apply ``plan`` on the engine at ``url`` in a client process of its own, as the ``apply`` task
    does (:func:`tests.integration.test_engine._apply`; ``env``: more of its environment)."""
    proc = subprocess.run(
        [sys.executable, "-c", _CLIENT, url, plan.to_json()],
        env=job_env(settings, **env),
        capture_output=True,
        text=True,
        timeout=900,
    )
    done = [line for line in proc.stdout.splitlines() if line.startswith("CLIENT_DONE ")]
    assert done, f"the apply client failed (exit code {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(done[0][len("CLIENT_DONE ") :])


def _table_rows(settings, cfg, names: list[str]) -> dict[int, dict[str, Any]]:
    arrow = load_catalog(settings).load_table(cfg.identifier).scan(selected_fields=tuple(names)).to_arrow()
    return {r["id"]: r for r in arrow.to_pylist()}


def _assert_rows(got: dict[int, dict[str, Any]], want: dict[int, dict[str, Any]]) -> None:
    assert sorted(got) == sorted(want)
    differences = {
        (k, name): (got[k][name], value)
        for k, row in want.items()
        for name, value in row.items()
        if got[k][name] != value or type(got[k][name]) is not type(value)
    }
    assert differences == {}


@pytest.mark.parametrize("value_format", ["json_with_schema", "avro"])
def test_a_table_of_300_columns_of_every_type_applies_over_connect_value_for_value(
    kafka, stack_settings, engine, request, value_format
):
    """300 columns, every encoding about eight times, through the table's runs on the shared
    engine (a client process of its own, as the ``apply`` task): a snapshot read, inserts, an
    update, a delete and its tombstone, a re-emitted older insert, all-null images. The table
    equals the source, value for value, in both value formats."""
    columns = wide_columns()
    cfg = make_table(value_format=value_format, bad_records="fail")
    ensure_topic(kafka, cfg.topic, 1)
    env: dict[str, str] = {}
    clients = KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap)
    schema_id, schema = 0, None
    if value_format == "avro":
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        registry_url = request.getfixturevalue("schema_registry")
        env["CDCLAKE_SCHEMA_REGISTRY_URL"] = registry_url
        clients = KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap, SchemaRegistry({"url": registry_url}))
        schema = avro_schema(wide_event(columns, "c", 0, None, "A", 0)["schema"])
        schema_id = SchemaRegistryClient({"url": registry_url}).register_schema(
            f"{cfg.topic}-value", Schema(json.dumps(schema), "AVRO")
        )

    def value(event: dict[str, Any]) -> bytes:
        if schema is None:
            return json.dumps(event).encode()
        return confluent_value(schema_id, schema, avro_datum(event["schema"], event["payload"]))

    for n, run in enumerate(_RUNS):
        produce(
            kafka, cfg.topic, [(json.dumps({"id": e[1]}).encode(), value(wide_event(columns, *e)), None) for e in run]
        )
        plan = plan_next(load_catalog(stack_settings), clients, cfg, f"scheduled__wide-{n}")
        result = _apply(engine, stack_settings, plan, env)
        assert (result["status"], result["quarantined"], result["events"]) == ("committed", 0, len(run))
        assert result["plan_depth"] < MAX_PLAN_DEPTH
    names = [name for name, *_ in columns]
    want = {k: expected_row(columns, k, which) for k, which in _FINAL.items()}
    _assert_rows(_table_rows(stack_settings, cfg, names), want)
    tombstones = load_catalog(stack_settings).load_table(side_table(cfg.identifier, TOMBSTONES_SUFFIX))
    assert tombstones.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist() == [4]


def plan_depths(spark, width: int) -> dict[str, int]:
    """The depth of the plans of a run's steps over a batch of the table of ``width`` columns
    (:func:`wide_columns`), as a Spark Connect client builds them (no Spark job): the JSON and
    Avro parses (Avro: three writer schemas, one of them with a column of each kind the table
    cannot take, and ten ids the registry refused), the same flattened (``ExtractNewRecordState``,
    :mod:`cdclake.spark.flattened`), the reduction's plan from each (every column with a default to
    fill), and the description of type mismatches (the quarantine)."""
    from pyspark.sql import functions as F

    from cdclake.model.flattened import TRANSFORM_FIELDS, FlattenedRecords
    from cdclake.model.layout import METADATA_COLUMNS
    from cdclake.model.position import BinlogPosition
    from cdclake.model.run_state import ColumnDefault
    from cdclake.model.types import columns_from_connect
    from cdclake.spark.apply import _fill_defaults
    from cdclake.spark.parse import describe_mismatches, parse_records
    from cdclake.spark.parse_avro import parse_avro_records
    from cdclake.spark.reduce import TIED, reduce_latest
    from cdclake.spark.stats import GOOD

    columns = wide_columns(width)
    specs = columns_from_connect(_row_schema(columns))
    names = [c.name for c in specs]
    event = wide_event(columns, "c", 1, None, "A", 4)
    clash = [(n, {"type": "string"} if f.get("type") == "int32" else f, a, b) for n, f, a, b in columns]
    schemas = {
        7: avro_schema(event["schema"]),
        8: avro_schema(wide_event(columns[: width // 2], "c", 1, None, "A", 4)["schema"]),
        9: avro_schema(wide_event(clash, "c", 1, None, "A", 4)["schema"]),
    }
    raw = spark.createDataFrame(
        [("t", 0, 0, datetime.datetime(2026, 1, 1), b"k", json.dumps(event).encode())],
        "topic string, partition int, offset long, timestamp timestamp, key binary, value binary",
    )
    defaults = {n: ColumnDefault(BinlogPosition(3, 4, 0, 0), "NULL") for n in names}
    client = spark.client
    depths = {}
    flat = FlattenedRecords()

    def flattened(event: dict) -> dict:
        out = flatten(event, TRANSFORM_FIELDS)
        assert isinstance(out, dict)
        return out

    flat_schemas = {
        7: avro_schema(flattened(event)["schema"]),
        8: avro_schema(flattened(wide_event(columns[: width // 2], "c", 1, None, "A", 4))["schema"]),
        9: avro_schema(flattened(wide_event(clash, "c", 1, None, "A", 4))["schema"]),
    }
    refused = {i: "refused" for i in range(10, 20)}
    for value_format, records in (
        ("json", parse_records(raw, "json_with_schema", specs, ("id",))),
        ("avro", parse_avro_records(raw, schemas, specs, ("id",), unusable=refused)),
        ("json flattened", parse_records(raw, "json_with_schema", specs, ("id",), flattened=flat)),
        ("avro flattened", parse_avro_records(raw, flat_schemas, specs, ("id",), unusable=refused, flattened=flat)),
    ):
        depths[f"{value_format} parse"] = plan_depth(records._plan.plan(client))
        good = records.drop("value").withColumn("held_back_behind", F.lit(None).cast("bigint")).filter(GOOD)
        rows = _fill_defaults(good, defaults, names).filter("op <> 't'")
        meta = [n for n, _, _ in METADATA_COLUMNS]
        reduced = reduce_latest(rows, ("id",), "binlog").select(
            *[F.col("image")[n].alias(n) for n in names], *meta, TIED
        )
        depths[f"{value_format} reduce"] = plan_depth(reduced._plan.plan(client))
    described = describe_mismatches(parse_records(raw, "json_with_schema", specs, ("id",)), specs, "json_with_schema")
    depths["describe mismatches"] = plan_depth(described._plan.plan(client))
    described = describe_mismatches(
        parse_records(raw, "json_with_schema", specs, ("id",), flattened=flat), specs, "json_with_schema", flat
    )
    depths["describe mismatches flattened"] = plan_depth(described._plan.plan(client))
    return depths


_DEPTH_CLIENT = """
import json, sys
from cdclake.spark.session import connect_session
from tests.integration.test_wide_tables import KINDS, WIDTH, plan_depths
spark = connect_session(sys.argv[1])
print("CLIENT_DONE", json.dumps([plan_depths(spark, w) for w in (len(KINDS) + 1, WIDTH)]), flush=True)
"""


def test_the_plans_of_a_run_are_as_deep_at_300_columns_as_at_40(stack_settings, engine):
    """The expressions built once per column are flat (:mod:`cdclake.spark.flat`): the plans of
    the parse, the reduction and the quarantine's descriptions nest no deeper for 300 columns than
    for one column of each kind, and stay below what the Spark Connect client accepts (a
    ``when``/``otherwise`` chain over the columns made the parse alone 700 levels deep)."""
    narrow, wide = _client_result(_DEPTH_CLIENT, engine, stack_settings)
    assert wide == narrow
    assert max(wide.values()) < MAX_PLAN_DEPTH


def test_flink_cdc_full_types_events_land_exactly_over_connect(kafka, stack_settings, engine, fixtures_dir, tmp_path):
    """The real all-types events of flink-cdc (:mod:`tests.full_types`: 59 columns, one per MySQL
    type, 23 of them of values that can fail to decode) through the shared engine: as in a classic
    session (``tests/integration/test_types_decode.py``)."""
    from cdclake.io.events import load_events
    from tests.conftest import plan_offsets
    from tests.full_types import BINLOG_TIMESTAMP, EXPECTED_ROW, FULL_TYPES_ROW_SCHEMA, events_with_schema

    cfg = make_table(bad_records="fail")
    names = [f["field"] for f in FULL_TYPES_ROW_SCHEMA["fields"]]
    for n, (event, expected) in enumerate(
        zip(
            events_with_schema(fixtures_dir, "debezium-data-schema-include.json"),
            (EXPECTED_ROW, dict(EXPECTED_ROW, timestamp_c=BINLOG_TIMESTAMP)),
            strict=True,
        )
    ):
        (tmp_path / f"event-{n}.json").write_bytes(event)
        load_events(tmp_path / f"event-{n}.json", cfg, kafka)
        result = _apply(engine, stack_settings, plan_offsets(stack_settings, cfg, f"scheduled__full-{n}"), {})
        assert (result["status"], result["quarantined"]) == ("committed", 0)
        [row] = _table_rows(stack_settings, cfg, names).values()
        _assert_rows({1: dict(row, json_c=json.loads(row["json_c"]))}, {1: expected})
