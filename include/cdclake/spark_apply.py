"""The apply job: one Kafka offset range of Debezium events -> one Iceberg commit.

The contract (``ARCHITECTURE.md`` section 4), step by step:

1. **Start check.** The table's committed offsets must be the range's start; if they are its end,
   the range is already applied (an Airflow retry after the commit) and nothing happens; anything
   else is another run's commit (:class:`~cdclake.errors.ConcurrentRunError`). A manual replay
   (``replay=True``) starts wherever the operator said.
2. **Read** exactly ``[start, end)`` of each partition with Spark's Kafka source.
3. **Parse** the envelope with ``from_json`` (with or without the Connect ``schema`` part). Kafka
   tombstones (null values) are skipped and counted. A record that cannot be applied (not JSON,
   no or unknown ``op``, no binlog position, no row image, a null key column, a value that does
   not fit its column) is *bad*; every later record of the same Kafka key is *held back* (its
   key's order would break otherwise), as is every record of a key with an ``open`` entry in the
   quarantine table. Bad and held-back records go to the quarantine table
   ``<table>__cdc_quarantine`` (``bad_records: quarantine``, the default) or fail the run naming
   them (``bad_records: fail``). Either way no offset passes a record that was neither applied nor
   quarantined.
4. **Order** by binlog position ``(file sequence number, pos, row, change rank)``
   (:mod:`cdclake.position`); a change of binlog basename stops the table.
5. **Truncate** (``op: t``) at position T: rows and events below T are gone; T becomes the
   table's *truncate floor* (snapshot summary), below which later events are discarded.
6. **Reduce**: the latest event per primary key. Upserts at or below the key's delete tombstone
   (``<table>__cdc_tombstones``) are discarded; the batch's deletes update the tombstones.
7. **Commit**: ``MERGE INTO`` a branch created at the snapshot read in step 1 (``c``/``u``/``r``
   upsert, ``d`` deletes, a row is replaced only by an event at a strictly greater position; a
   truncate deletes every row below it), with the end offsets, run id and counts in the snapshot
   summary; then ``main`` is fast-forwarded to the branch. The fast-forward is Iceberg's optimistic
   check: it fails if ``main`` moved since step 1, so two runs never both commit from the same
   start.

Tables configured ``write_mode: changelog`` (no primary key) skip steps 5-6 and append every
event as a row.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from cdclake.config import TableConfig
from cdclake.envelope import KafkaCoordinates, parse_value
from cdclake.errors import (
    BadBatchError,
    BadRecordError,
    ConcurrentRunError,
    PositionOrderError,
    SchemaError,
)
from cdclake.lake import (
    METADATA_COLUMNS,
    SCHEMA_CHANGE_POSITION_PROPERTY,
    QUARANTINE_COLUMNS,
    QUARANTINE_SUFFIX,
    RUN_BRANCH_PREFIX,
    TOMBSTONE_COLUMNS,
    TOMBSTONES_SUFFIX,
    SummaryKeys,
    column_encodings,
    committed_state,
    create_cdc_table,
    ensure_side_table,
    load_catalog,
    load_table_or_none,
    side_table,
)
from cdclake.offsets import OffsetRange, encode_offsets
from cdclake.position import BINLOG_FILE_PATTERN, SNAPSHOT_MARKERS
from cdclake.settings import Settings, spark_jars
from cdclake.types import (
    SPATIAL_ENCODINGS,
    VARIABLE_SCALE_DECIMAL,
    ColumnSpec,
    columns_from_config,
    columns_from_connect,
    iceberg_type_of_encoding,
    parse_decimal_encoding,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

_SNAPSHOT_PROPERTY = "spark.sql.iceberg.snapshot-property."
_MAX_REPORTED_BAD = 10

FAULT_PAUSE_ENV = "CDCLAKE_TEST_PAUSE"
"""Fault-injection hook for the crash tests only: ``<point>=<marker file>`` makes the job write the
marker file and sleep at ``point`` (``before_commit``: the branch holds the data, ``main`` does not
yet; ``after_commit``: ``main`` holds it), so that a test can kill the job at exactly that point."""


def _pause_point(point: str, detail: object) -> None:
    spec = os.environ.get(FAULT_PAUSE_ENV, "")
    name, _, marker = spec.partition("=")
    if name == point and marker:
        with open(marker, "w") as out:
            out.write(str(detail))
        time.sleep(3600)


@dataclass(frozen=True)
class ApplyResult:
    """What one apply did.

    Attributes:
        status: ``committed``, ``already_applied`` (the table is at the range's end already) or
            ``empty`` (the range has no records).
        snapshot_id: the Iceberg snapshot committed (``committed`` only).
        events: Kafka records read, tombstones included.
        tombstones: Kafka tombstones (null values) skipped.
        ops: applicable events per Debezium op.
        quarantined: records written to the quarantine table (bad and held back).
        keys_changed: rows in the merge source after reduction (upsert mode).
    """

    status: str
    snapshot_id: int | None = None
    events: int = 0
    tombstones: int = 0
    ops: dict[str, int] | None = None
    quarantined: int = 0
    keys_changed: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def spark_conf(settings: Settings) -> dict[str, str]:
    """Spark settings every apply job runs with (catalog, UTC session time zone, small shuffles)."""
    conf = dict(settings.spark_catalog_conf())
    conf.update(
        {
            # Debezium's Timestamp/MicroTimestamp are UTC wall-clock values; read them in UTC
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": "8",
            "spark.sql.adaptive.enabled": "true",
            "spark.ui.showConsoleProgress": "false",
        }
    )
    return conf


def build_session(settings: Settings, app_name: str = "cdclake") -> SparkSession:
    """A SparkSession with the project's jars and :func:`spark_conf` (tests, CLI, benchmarks).

    ``spark-submit`` runs (the DAG's apply task) get the same settings from the command line.
    """
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(settings.spark_master)
        .appName(app_name)
        .config("spark.jars", ",".join(str(j) for j in spark_jars()))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
    )
    for key, value in spark_conf(settings).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


RECORDS_PER_SPARK_PARTITION = 50_000
"""Above this many records, the Kafka read is split into Spark partitions of about this size
(the Kafka source's ``minPartitions``): one task per Kafka partition would cache gigabytes of
values in one block (measured: a 1,000,000-event batch of 4.4 kB values ran out of a 2 GiB heap).
Order does not depend on it: events are ordered by binlog position, not by Spark partition."""


def read_range(spark: SparkSession, bootstrap: str, offset_range: OffsetRange) -> DataFrame:
    """Exactly the records ``[start, end)`` of each partition, with Spark's Kafka source.

    Columns: ``key`` (binary), ``value`` (binary), ``topic``, ``partition``, ``offset``,
    ``timestamp``, ``headers``. Partitions whose range is empty are not read. A range of more
    than :data:`RECORDS_PER_SPARK_PARTITION` records is read in Spark partitions of about that
    many records.
    """
    parts = sorted(p for p in offset_range.end if offset_range.end[p] > offset_range.start[p])
    topic = offset_range.topic
    reader = spark.read.format("kafka")
    if offset_range.event_count > RECORDS_PER_SPARK_PARTITION:
        reader = reader.option("minPartitions", str(-(-offset_range.event_count // RECORDS_PER_SPARK_PARTITION)))
    return (
        reader
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", json.dumps({topic: parts}))
        .option("startingOffsets", json.dumps({topic: {str(p): offset_range.start[p] for p in parts}}))
        .option("endingOffsets", json.dumps({topic: {str(p): offset_range.end[p] for p in parts}}))
        .option("failOnDataLoss", "true")
        .option("includeHeaders", "true")
        .load()
    )


_JSON_READ_TYPE = {
    "int8": "int", "int16": "int", "int32": "int", "int64": "bigint", "float": "float",
    "float32": "float", "double": "double", "float64": "double", "boolean": "boolean",
    "string": "string", "bytes": "string",
    "io.debezium.time.Date": "int",
    "org.apache.kafka.connect.data.Date": "int",
    "io.debezium.time.Time": "int",
    "io.debezium.time.MicroTime": "bigint",
    "io.debezium.time.NanoTime": "bigint",
    "org.apache.kafka.connect.data.Time": "int",
    "io.debezium.time.ZonedTime": "string",
    "io.debezium.time.Timestamp": "bigint",
    "io.debezium.time.MicroTimestamp": "bigint",
    "io.debezium.time.NanoTimestamp": "bigint",
    "org.apache.kafka.connect.data.Timestamp": "bigint",
    "io.debezium.time.ZonedTimestamp": "string",
    "io.debezium.time.Year": "int",
    "io.debezium.data.Enum": "string",
    "io.debezium.data.EnumSet": "string",
    "io.debezium.data.Json": "string",
    "io.debezium.data.Bits": "string",
    VARIABLE_SCALE_DECIMAL: "struct<scale:int,value:string>",
    "io.debezium.data.geometry.Geometry": "struct<wkb:string,srid:int>",
    "io.debezium.data.geometry.Geography": "struct<wkb:string,srid:int>",
    "io.debezium.data.geometry.Point": "struct<x:double,y:double,wkb:string,srid:int>",
}
"""Spark type that ``from_json`` reads each encoding as, before :func:`_decode`. Decimals are read
as ``variant`` (see :func:`_json_read_type`)."""


def _json_read_type(encoding: str) -> str:
    """The ``from_json`` type of a column: decimals as ``variant``, whose value type tells a
    base64 string (``decimal.format=BASE64``) from a JSON number (``NUMERIC``).

    Raises:
        SchemaError: an encoding this version cannot decode.
    """
    if parse_decimal_encoding(encoding) is not None:
        return "variant"
    read_type = _JSON_READ_TYPE.get(encoding)
    if read_type is None:
        raise SchemaError(f"column encoding {encoding!r} cannot be decoded by this version")
    return read_type


_LIMB = 10**9
"""Base of the limbs (least significant first) in which :func:`_unscaled_sql` builds the decimal
digits of an unscaled value of any length: Spark has no integer type wider than 38 digits."""


def _let(value_sql: str, var: str, body_sql: str) -> str:
    """SQL evaluating ``value_sql`` once and ``body_sql`` with it bound to lambda variable ``var``."""
    return f"element_at(transform(array({value_sql}), {var} -> {body_sql}), 1)"


def _limbs_times_plus_sql(limbs: str, times: int, plus: str) -> str:
    """SQL of ``limbs * times + plus`` (base-:data:`_LIMB` limbs, ``times`` <= 2^32, ``plus`` < 2^33)."""
    return (
        f"aggregate({limbs}, named_struct('d', cast(array() AS array<bigint>), 'k', cast({plus} AS bigint)), "
        f"(s, l) -> named_struct('d', concat(s.d, array((l * {times} + s.k) % {_LIMB})), "
        f"'k', (l * {times} + s.k) div {_LIMB}), "
        f"s -> CASE WHEN s.k = 0 THEN s.d WHEN s.k < {_LIMB} THEN concat(s.d, array(s.k)) "
        f"ELSE concat(s.d, array(s.k % {_LIMB}, s.k div {_LIMB})) END)"
    )


def _unscaled_sql(base64_sql: str) -> str:
    """SQL of ``struct<neg: boolean, digits: string>``: the sign and decimal digits of a base64
    big-endian two's-complement integer of any length (Connect ``Decimal`` bytes); null fields
    when the text is not base64.

    The bytes are read 4 at a time (``conv`` of 8 hex digits of the sign-extended hex ``u.p``)
    into base-10^9 limbs; a negative value is read as its one's complement plus one.
    """
    chunks = (
        "if(length(u.p) = 0, cast(array() AS array<bigint>), transform(sequence(0, length(u.p) div 8 - 1), "
        "i -> cast(conv(substr(u.p, i * 8 + 1, 8), 16, 10) AS bigint)))"
    )
    limbs = (
        f"aggregate({chunks}, array(cast(0 AS bigint)), "
        f"(acc, c) -> {_limbs_times_plus_sql('acc', 2**32, 'if(u.neg, 4294967295 - c, c)')}, "
        f"acc -> if(u.neg, {_limbs_times_plus_sql('acc', 1, '1')}, acc))"
    )
    digits = (
        f"array_join(transform(reverse({limbs}), "
        "(l, i) -> if(i = 0, cast(l AS string), lpad(cast(l AS string), 9, '0'))), '')"
    )
    sign_extended = (
        "named_struct('neg', substr(h, 1, 1) >= '8', "
        "'p', lpad(h, ((length(h) + 7) div 8) * 8, if(substr(h, 1, 1) >= '8', 'F', '0')))"
    )
    return _let(
        f"hex(try_to_binary({base64_sql}, 'base64'))", "h",
        _let(sign_extended, "u", f"named_struct('neg', u.neg, 'digits', {digits})"),
    )


def _scaled_text_sql(unscaled_sql: str, scale_sql: str) -> str:
    """SQL of the exact decimal text (``-1234.50``) of a ``struct<neg, digits>`` at a scale."""
    padded = "lpad(x.digits, greatest(length(x.digits), x.scale + 1), '0')"
    int_digits = "greatest(length(x.digits), x.scale + 1) - x.scale"
    text = (
        "concat(if(x.neg, '-', ''), CASE "
        "WHEN x.scale <= 0 THEN concat(x.digits, if(x.digits = '0', '', repeat('0', -x.scale))) "
        f"ELSE concat(substr({padded}, 1, {int_digits}), '.', substr({padded}, {int_digits} + 1)) END)"
    )
    return _let(
        unscaled_sql, "v",
        _let(f"named_struct('neg', v.neg, 'digits', v.digits, 'scale', {scale_sql})", "x", text),
    )


def _number_unscaled_sql(variant_sql: str, scale: int) -> str:
    """SQL of ``struct<neg, digits>``: a JSON number (``decimal.format=NUMERIC``) as an unscaled
    value at ``scale``; null fields when the number has non-zero digits beyond the scale or was
    read only as a double (more than 38 digits, or exponent notation; zero excepted)."""
    text = f"variant_get({variant_sql}, '$', 'string')"
    exact = _let(
        f"named_struct('neg', startswith({text}, '-'), "
        f"'int', split_part(regexp_replace({text}, '^-', ''), '.', 1), "
        f"'frac', split_part(regexp_replace({text}, '^-', ''), '.', 2))",
        "n",
        f"CASE WHEN {scale} < 0 THEN NULL "
        f"WHEN length(n.frac) <= {scale} THEN named_struct('neg', n.neg, "
        f"'digits', regexp_replace(concat(n.int, n.frac, repeat('0', {scale} - length(n.frac))), '^0+(?=.)', '')) "
        f"WHEN substr(n.frac, {scale} + 1) RLIKE '^0*$' THEN named_struct('neg', n.neg, "
        f"'digits', regexp_replace(concat(n.int, substr(n.frac, 1, {scale})), '^0+(?=.)', '')) END",
    )
    exact = _let(exact, "e", "named_struct('neg', e.neg AND e.digits <> '0', 'digits', e.digits)")
    return _let(
        f"schema_of_variant({variant_sql})",
        "t",
        f"CASE WHEN t IN ('TINYINT', 'SMALLINT', 'INT', 'BIGINT') OR startswith(t, 'DECIMAL(') THEN {exact} "
        f"WHEN t IN ('DOUBLE', 'FLOAT') AND variant_get({variant_sql}, '$', 'double') = 0 "
        "THEN named_struct('neg', false, 'digits', '0') END",
    )


def _is_json_null(raw: Column, encoding: str) -> Column:
    """The JSON value is null (a ``variant`` holds JSON null as a value of its own)."""
    from pyspark.sql import functions as F

    if _json_read_type(encoding) == "variant":
        return raw.isNull() | F.is_variant_null(raw)
    return raw.isNull()


def _decode(raw_sql: str, encoding: str) -> Column:
    """Turn the JSON-level value of a column (SQL ``raw_sql``) into its Iceberg value (see
    :mod:`cdclake.types`). The result is null for a non-null value that does not fit (bad base64,
    digits beyond the column's scale or precision, sub-microsecond nanoseconds, a WKB-less
    spatial value): :func:`parse_records` reports it."""
    from pyspark.sql import functions as F

    raw = F.expr(raw_sql)
    base64 = lambda sql: f"try_to_binary({sql}, 'base64')"  # noqa: E731
    if encoding == "bytes":
        return F.expr(base64(raw_sql))
    if encoding == "io.debezium.data.Bits":
        # Debezium sends the bits little-endian (JdbcValueConverters.convertBits); MySQL's order
        # is big-endian
        return F.expr(f"unhex(array_join(reverse(regexp_extract_all(hex({base64(raw_sql)}), '(..)', 1)), ''))")
    if encoding in ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"):
        return F.date_from_unix_date(raw)
    if encoding in ("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp"):
        return F.timestamp_millis(raw).cast("timestamp_ntz")
    if encoding == "io.debezium.time.MicroTimestamp":
        return F.timestamp_micros(raw).cast("timestamp_ntz")
    if encoding == "io.debezium.time.NanoTimestamp":
        return F.when(raw % 1000 == 0, F.timestamp_micros(F.expr(f"{raw_sql} div 1000")).cast("timestamp_ntz"))
    if encoding == "io.debezium.time.ZonedTimestamp":
        return F.to_timestamp(raw)
    if encoding in ("io.debezium.time.Time", "org.apache.kafka.connect.data.Time"):
        return raw.cast("bigint") * 1000
    if encoding == "io.debezium.time.NanoTime":
        return F.when(raw % 1000 == 0, F.expr(f"{raw_sql} div 1000"))
    if encoding in SPATIAL_ENCODINGS:
        return F.when(raw["wkb"].isNotNull(), F.struct(
            F.expr(base64(f"{raw_sql}.wkb")).alias("wkb"), raw["srid"].alias("srid")
        ))
    if encoding == VARIABLE_SCALE_DECIMAL:
        return F.expr(_scaled_text_sql(_unscaled_sql(f"{raw_sql}.value"), f"{raw_sql}.scale"))
    dec = parse_decimal_encoding(encoding)
    if dec is not None:
        _, scale = dec
        text_of_string = _unscaled_sql(f"variant_get({raw_sql}, '$', 'string')")
        unscaled = (
            f"CASE WHEN schema_of_variant({raw_sql}) = 'STRING' THEN {text_of_string} "
            f"ELSE {_number_unscaled_sql(raw_sql, scale)} END"
        )
        text = _scaled_text_sql(unscaled, str(scale))
        iceberg = iceberg_type_of_encoding(encoding)
        return F.expr(text if iceberg == "string" else f"try_cast({text} AS {iceberg})")
    return raw


_FALLIBLE_ENCODINGS = frozenset({
    "bytes", "io.debezium.data.Bits", "io.debezium.time.NanoTimestamp", "io.debezium.time.NanoTime",
    VARIABLE_SCALE_DECIMAL, *SPATIAL_ENCODINGS,
})
"""Encodings whose :func:`_decode` can turn a non-null value into null (it does not fit), besides
decimals."""


def _is_fallible(encoding: str) -> bool:
    return encoding in _FALLIBLE_ENCODINGS or parse_decimal_encoding(encoding) is not None


def _envelope_ddl(columns: list[tuple[str, str]], value_format: str) -> str:
    row = ",".join(f"`{name}`:{typ}" for name, typ in columns)
    envelope = (
        f"struct<before:struct<{row}>,after:struct<{row}>,"
        "source:struct<connector:string,name:string,server_id:bigint,file:string,pos:bigint,"
        "row:int,snapshot:string,ts_ms:bigint,db:string,table:string,gtid:string>,"
        "op:string,ts_ms:bigint>"
    )
    if value_format == "json_with_schema":
        return f"struct<payload:{envelope},_corrupt_record:string>"
    return envelope[:-1] + ",_corrupt_record:string>"


def position_struct(prefix: str = "", *, change: bool = False) -> str:
    """SQL of an event's comparable position ``named_struct(f, p, r, k)`` from its columns.

    ``prefix`` qualifies the metadata columns (``t.``); ``k`` is the change rank (0 for a snapshot
    read, 1 for a change), so that struct comparison is the order of :mod:`cdclake.position`.
    ``change=True`` fixes ``k`` at 1 (tombstones: a delete is always a change).
    """
    rank = "1" if change else f"CASE WHEN {prefix}_cdc_snapshot THEN 0 ELSE 1 END"
    return (
        f"named_struct('f', coalesce({prefix}_cdc_binlog_file_seq, -1), "
        f"'p', coalesce({prefix}_cdc_binlog_pos, -1), 'r', coalesce({prefix}_cdc_binlog_row, -1), "
        f"'k', {rank})"
    )


def _position_literal(text: str) -> str:
    f, p, r, k = (int(x) for x in text.split(":"))
    return f"named_struct('f', CAST({f} AS BIGINT), 'p', CAST({p} AS BIGINT), 'r', {r}, 'k', {k})"


def parse_records(
    raw: DataFrame, value_format: str, columns: list[ColumnSpec], primary_key: tuple[str, ...]
) -> DataFrame:
    """Parse Kafka records into one row per record with its op, position, image and error.

    Output columns: ``topic``, ``partition``, ``offset``, ``timestamp``, ``key``, ``value``,
    ``is_tombstone``, ``op``, ``file_base``, ``server_id`` and the metadata columns of
    :data:`cdclake.lake.METADATA_COLUMNS` (``_cdc_op``, ``_cdc_snapshot``, ``_cdc_binlog_*``,
    ``_cdc_source_ts``, ``_cdc_kafka_*``), ``position`` (struct, see :func:`position_struct`),
    ``image`` (struct of the source columns, decoded), ``error`` (null when the record can be
    applied, else the reason), ``unknown_column`` (the first name in the applied image, ``after``
    or for a delete ``before``, that is not one of ``columns``; else null).
    """
    from pyspark.sql import functions as F

    ddl = _envelope_ddl([(c.name, _json_read_type(c.encoding)) for c in columns], value_format)
    text = F.col("value").cast("string")
    # The whole value is parsed, Connect schema and all: cutting the payload out first (with
    # get_json_object) would re-serialize it through Jackson, which writes a JSON number with a
    # fraction as a double and so loses NUMERIC-encoded decimals' digits.
    parsed = F.from_json(text, ddl, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"})
    env = "j.payload" if value_format == "json_with_schema" else "j"
    df = raw.select("topic", "partition", "offset", "timestamp", "key", "value", parsed.alias("j")).withColumn(
        "_image_raw",
        F.when(F.col(f"{env}.op") == "d", F.col(f"{env}.before")).otherwise(F.col(f"{env}.after")),
    )
    # The names in the applied image's JSON that are not source columns, which from_json drops
    # silently (see _check_no_unknown_columns). Only the names are read, so re-serializing is
    # harmless here.
    path = "$.payload" if value_format == "json_with_schema" else "$"
    image_json = F.when(F.col(f"{env}.op") == "d", F.get_json_object(text, f"{path}.before")).otherwise(
        F.get_json_object(text, f"{path}.after"))
    unknown = F.array_except(
        F.coalesce(F.json_object_keys(image_json), F.array().cast("array<string>")),
        F.array(*[F.lit(c.name) for c in columns]).cast("array<string>"),
    )
    raw_sql = {c.name: "_image_raw.`{}`".format(c.name.replace("`", "``")) for c in columns}
    # decoded once, in a column of its own: the fit check below reads it rather than decode again
    df = df.withColumn("_image", F.struct(*[_decode(raw_sql[c.name], c.encoding).alias(c.name) for c in columns]))
    op = F.col(f"{env}.op")
    src = f"{env}.source"
    image_raw = F.col("_image_raw")
    image = F.col("_image")
    file = F.col(f"{src}.file")
    snapshot = (op == "r") | F.col(f"{src}.snapshot").isin(*SNAPSHOT_MARKERS)
    encodings = {c.name: c.encoding for c in columns}
    row_error = F.lit(None).cast("string")
    for c in reversed(columns):
        if _is_fallible(c.encoding):
            row_error = F.when(
                ~_is_json_null(image_raw[c.name], c.encoding) & image[c.name].isNull(),
                F.lit(f"column {c.name!r}: value does not fit {c.iceberg_type} (encoding {c.encoding})"),
            ).otherwise(row_error)
    for col in reversed(primary_key):
        row_error = F.when(
            _is_json_null(image_raw[col], encodings[col]),
            F.lit(f"primary key column {col!r} is null"),
        ).otherwise(row_error)
    row_error = F.when(op.isin("c", "u", "r", "d"), row_error)
    error = (
        F.when(F.col("value").isNull(), F.lit(None))
        .when(
            F.col("j._corrupt_record").isNotNull()
            & (F.col(env).isNull() | F.expr("try_parse_json(cast(value AS STRING)) IS NULL")),
            F.lit("value is not JSON"),
        )
        .when(
            F.col("j._corrupt_record").isNotNull(),
            F.lit("a value does not fit the table's column types, or the value is malformed"),
        )
        .when(F.col(env).isNull(), F.lit(
            "value has no 'payload' (expected value_format json_with_schema)"
            if value_format == "json_with_schema" else "value is not a JSON object"))
        .when(op.isNull(), F.lit("envelope has no 'op'"))
        .when(~op.isin("c", "u", "d", "r", "t"), F.concat(F.lit("unknown op '"), op, F.lit("'")))
        .when(file.isNull() | F.col(f"{src}.pos").isNull(), F.lit("source has no binlog position (file, pos)"))
        .when(F.regexp_extract(file, BINLOG_FILE_PATTERN, 2) == "", F.lit("source.file has no numeric suffix"))
        .when(op.isin("c", "u", "r") & F.col(f"{env}.after").isNull(),
              F.concat(F.lit("op '"), op, F.lit("' without an 'after' image")))
        .when((op == "d") & F.col(f"{env}.before").isNull(), F.lit("op 'd' without a 'before' image"))
        .otherwise(row_error)
    )
    ts_ms = F.col(f"{src}.ts_ms")
    out = df.select(
        "topic",
        "partition",
        "offset",
        "timestamp",
        "key",
        "value",
        F.col("value").isNull().alias("is_tombstone"),
        op.alias("op"),
        F.regexp_extract(file, BINLOG_FILE_PATTERN, 1).alias("file_base"),
        F.col(f"{src}.server_id").alias("server_id"),
        op.alias("_cdc_op"),
        F.coalesce(snapshot, F.lit(False)).alias("_cdc_snapshot"),
        F.regexp_extract(file, BINLOG_FILE_PATTERN, 2).try_cast("bigint").alias("_cdc_binlog_file_seq"),
        F.col(f"{src}.pos").alias("_cdc_binlog_pos"),
        F.coalesce(F.col(f"{src}.row"), F.lit(0)).alias("_cdc_binlog_row"),
        # Debezium 1.x snapshot reads carry ts_ms 0: unknown, not 1970
        F.when(ts_ms > 0, F.timestamp_millis(ts_ms)).alias("_cdc_source_ts"),
        F.col("partition").alias("_cdc_kafka_partition"),
        F.col("offset").alias("_cdc_kafka_offset"),
        image.alias("image"),
        error.alias("error"),
        F.when(F.col(env).isNotNull(), F.try_element_at(unknown, F.lit(1))).alias("unknown_column"),
    )
    return out.withColumn("position", F.expr(position_struct()))


def reduce_latest(events: DataFrame, primary_key: tuple[str, ...]) -> DataFrame:
    """Keep, per primary key, the event at the greatest position.

    Order: ``(file_seq, pos, row, change rank)``, where a snapshot read ranks below a change at an
    equal position; identical positions (the same event twice) keep either copy.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(*[F.col("image")[c] for c in primary_key]).orderBy(
        F.col("position").desc(), F.col("partition").desc(), F.col("offset").desc()
    )
    return events.withColumn("_rn", F.row_number().over(w)).filter("_rn = 1").drop("_rn")


def _resolve_table(settings: Settings, cfg: TableConfig, raw: DataFrame):  # noqa: ANN202 - pyiceberg Table
    """Load the Iceberg table, creating it on first use from the events' schema or the config."""
    catalog = load_catalog(settings)
    table = load_table_or_none(catalog, cfg.identifier)
    if table is not None:
        return table
    if cfg.columns is not None:
        columns = columns_from_config(cfg.columns, cfg.primary_key)
    elif cfg.value_format == "json_with_schema":
        columns = _columns_from_first_schema(raw, cfg)
    else:
        raise SchemaError(
            f"table {cfg.identifier} does not exist and its events carry no schema "
            "(value_format json): declare its 'columns' in the table config"
        )
    if cfg.write_mode == "changelog":
        # a change log row may be a delete's before image or a truncate: no column is required
        columns = [ColumnSpec(c.name, c.iceberg_type, False, c.encoding) for c in columns]
    from pyiceberg.exceptions import TableAlreadyExistsError

    try:
        return create_cdc_table(catalog, cfg.identifier, columns, cfg.primary_key)
    except TableAlreadyExistsError:
        return catalog.load_table(cfg.identifier)


def _columns_from_first_schema(raw: DataFrame, cfg: TableConfig) -> list[ColumnSpec]:
    rows = raw.filter("value is not null").select("partition", "offset", "value").limit(100).collect()
    for rec in rows:
        where = KafkaCoordinates(cfg.topic, rec["partition"], rec["offset"])
        try:
            event = parse_value(bytes(rec["value"]), cfg.value_format, where)
        except BadRecordError:
            continue
        row_schema = event.row_schema() if event else None
        if row_schema:
            return columns_from_connect(row_schema)
    raise SchemaError(
        f"table {cfg.identifier} does not exist and no event of topic {cfg.topic!r} in this range "
        "carries a row schema to create it from"
    )


def _source_columns(table) -> list[ColumnSpec]:  # noqa: ANN001 - pyiceberg Table
    meta = {name for name, _, _ in METADATA_COLUMNS}
    encodings = column_encodings(table)
    specs = []
    for field in table.schema().fields:
        if field.name in meta:
            continue
        encoding = encodings.get(field.name)
        if encoding is None:
            raise SchemaError(f"table {table.name()}: column {field.name!r} has no recorded encoding")
        specs.append(ColumnSpec(field.name, str(field.field_type), field.required, encoding))
    return specs


def _check_no_unknown_columns(parsed: DataFrame, cfg: TableConfig, table: Any) -> None:
    """Stop when an event's row image has a column the Iceberg table lacks (its schema change
    was not synced): ``from_json`` would drop the column silently.

    ``parsed`` is the output of :func:`parse_records` (its ``unknown_column``). Events below the
    table's last applied schema change (``cdc.schema-change-position``) are not checked: they were
    produced under an older schema (re-emitted after a connector restart), and their columns may
    have been renamed or deleted since.

    Raises:
        SchemaError: names the topic, partition, offset and column of the first such event.
    """
    from pyspark.sql import functions as F

    found = parsed.filter("unknown_column is not null")
    floor = table.properties.get(SCHEMA_CHANGE_POSITION_PROPERTY)
    if floor is not None:
        f, p, r, _ = (int(x) for x in floor.split(":"))
        here = F.struct(F.col("_cdc_binlog_file_seq").alias("f"), F.col("_cdc_binlog_pos").alias("p"),
                        F.col("_cdc_binlog_row").alias("r"))
        at_floor = F.struct(F.lit(f).cast("bigint").alias("f"), F.lit(p).cast("bigint").alias("p"),
                            F.lit(r).alias("r"))
        found = found.filter(F.coalesce(here >= at_floor, F.lit(True)))
    first = found.orderBy("partition", "offset").select("partition", "offset", "unknown_column").limit(1).collect()
    if first:
        row = first[0]
        raise SchemaError(
            f"topic {cfg.topic!r} partition {row['partition']} offset {row['offset']}: the event has "
            f"column {row['unknown_column']!r}, which Iceberg table {cfg.identifier} lacks (its schema change "
            f"was not applied; schema-change topic {cfg.schema_change_topic!r}). Nothing was committed "
            "and the offsets did not move; the column is never dropped silently."
        )


def _describe_bad_record(
    value: bytes | None, cfg: TableConfig, columns: list[ColumnSpec], where: KafkaCoordinates, spark_reason: str
) -> str:
    """A precise reason for a record Spark flagged, found by re-parsing it in Python."""
    if value is None:
        return spark_reason
    try:
        parse_value(value, cfg.value_format, where)
    except BadRecordError as e:
        return e.reason
    doc = json.loads(value)  # parse_value accepted it, so this is JSON
    envelope = doc.get("payload", doc) if cfg.value_format == "json_with_schema" else doc
    image = envelope.get("before") if envelope.get("op") == "d" else envelope.get("after")
    for col in columns:
        v = (image or {}).get(col.name)
        if v is None:
            continue
        expected = _json_read_type(col.encoding)
        ok = {
            "int": isinstance(v, int) and not isinstance(v, bool) and -(2**31) <= v < 2**31,
            "bigint": isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63,
            "float": isinstance(v, (int, float)) and not isinstance(v, bool),
            "double": isinstance(v, (int, float)) and not isinstance(v, bool),
            "boolean": isinstance(v, bool),
            "string": True,
            "variant": True,
        }.get(expected, isinstance(v, dict))  # the struct<...> types
        if not ok:
            return f"column {col.name!r}: value {v!r} does not fit {col.iceberg_type} (encoding {col.encoding})"
    return spark_reason


def _quarantine_table_df(spark: SparkSession, settings: Settings, cfg: TableConfig) -> DataFrame | None:
    """The table's quarantine table, or ``None`` while it has none."""
    catalog = load_catalog(settings)
    if load_table_or_none(catalog, side_table(cfg.identifier, QUARANTINE_SUFFIX)) is None:
        return None
    return spark.table(f"{settings.catalog_name}.{side_table(cfg.identifier, QUARANTINE_SUFFIX)}")


def _split_bad_and_held(
    spark: SparkSession, settings: Settings, cfg: TableConfig, parsed: DataFrame
) -> DataFrame:
    """Add ``held_back_behind``: for a good record of a key that has a bad record earlier in its
    partition (this batch) or an ``open`` quarantine entry (earlier runs), that bad record's
    offset; else null. Records of a key must apply in order, so they wait behind it."""
    from pyspark.sql import functions as F

    bad = parsed.filter("error is not null and key is not null")
    entries = _quarantine_table_df(spark, settings, cfg)
    if entries is not None:
        # a bad record the operator released no longer holds its key back (on a replay)
        released = entries.filter("status = 'released'").select("partition", "offset")
        bad = bad.join(released, ["partition", "offset"], "left_anti")
    blockers = bad.groupBy("partition", "key").agg(F.min("offset").alias("blocker_offset"))
    if entries is not None:
        previous = (
            entries.filter("status = 'open' and key is not null and held_back_behind is null")
            .groupBy("partition", "key").agg(F.min("offset").alias("blocker_offset"))
        )
        blockers = blockers.unionByName(previous).groupBy("partition", "key").agg(
            F.min("blocker_offset").alias("blocker_offset")
        )
    joined = parsed.join(F.broadcast(blockers), ["partition", "key"], "left")
    held = F.when(
        F.col("error").isNull() & ~F.col("is_tombstone") & (F.col("offset") > F.col("blocker_offset")),
        F.col("blocker_offset"),
    )
    return joined.withColumn("held_back_behind", held).drop("blocker_offset")


def _write_quarantine(
    spark: SparkSession, settings: Settings, cfg: TableConfig, raw: DataFrame, records: DataFrame, run_id: str
) -> None:
    """Append bad and held-back records to the quarantine table, once per Kafka coordinate.

    ``records`` (parsed, without the raw value) are joined back to ``raw``, the Kafka records, for
    their key, value and timestamp as read."""
    from pyspark.sql import functions as F

    records = records.select("partition", "offset", "error", "held_back_behind").join(
        raw.select("topic", "partition", "offset", "timestamp", "key", "value"), ["partition", "offset"]
    )

    catalog = load_catalog(settings)
    ident = side_table(cfg.identifier, QUARANTINE_SUFFIX)
    ensure_side_table(
        catalog, ident, [(n, t, False) for n, t, _ in QUARANTINE_COLUMNS],
        {n: d for n, _, d in QUARANTINE_COLUMNS},
    )
    rows = records.select(
        "topic", "partition", "offset", "timestamp", "key", "value",
        F.coalesce(
            "error",
            F.concat(F.lit("held back behind the quarantined record at offset "),
                     F.col("held_back_behind").cast("string"), F.lit(" of the same key")),
        ).alias("error"),
        "held_back_behind",
        F.lit(run_id).alias("run_id"),
        F.current_timestamp().alias("quarantined_at"),
        F.lit("open").alias("status"),
    )
    view = f"cdc_quarantine_{uuid.uuid4().hex}"
    rows.createOrReplaceTempView(view)
    try:
        spark.sql(
            f"MERGE INTO {settings.catalog_name}.{ident} t USING {view} s "
            "ON t.topic = s.topic AND t.partition = s.partition AND t.offset = s.offset "
            "WHEN NOT MATCHED THEN INSERT *"
        )
    finally:
        spark.catalog.dropTempView(view)


def _apply_tombstones(
    spark: SparkSession, settings: Settings, cfg: TableConfig, reduced: DataFrame
) -> DataFrame:
    """Discard upserts at or below their key's tombstone; record the batch's deletes as
    tombstones (newest position per key). Returns the surviving merge source."""
    from pyspark.sql import functions as F

    catalog = load_catalog(settings)
    ident = side_table(cfg.identifier, TOMBSTONES_SUFFIX)
    table = load_catalog(settings).load_table(cfg.identifier)
    pk_fields = [(f.name, str(f.field_type), True) for f in table.schema().fields if f.name in cfg.primary_key]
    pk_fields.sort(key=lambda f: cfg.primary_key.index(f[0]))
    ensure_side_table(
        catalog, ident, pk_fields + [(n, t, False) for n, t, _ in TOMBSTONE_COLUMNS],
        {n: d for n, _, d in TOMBSTONE_COLUMNS},
    )
    name = f"{settings.catalog_name}.{ident}"
    tomb = spark.table(name).select(
        *[F.col(c).alias(f"_tomb_{c}") for c in cfg.primary_key],
        F.expr(position_struct(change=True)).alias("_tomb_position"),
    )
    cond = None
    for c in cfg.primary_key:
        part = F.col("image")[c] == F.col(f"_tomb_{c}")
        cond = part if cond is None else cond & part
    joined = reduced.join(tomb, cond, "left")
    survivors = joined.filter(
        F.col("_tomb_position").isNull() | (F.col("_cdc_op") == "d") | (F.col("position") > F.col("_tomb_position"))
    ).drop(*[f"_tomb_{c}" for c in cfg.primary_key], "_tomb_position")

    deletes = reduced.filter("_cdc_op = 'd'").select(
        *[F.col("image")[c].alias(c) for c in cfg.primary_key],
        "_cdc_binlog_file_seq", "_cdc_binlog_pos", "_cdc_binlog_row", "_cdc_source_ts",
        F.current_timestamp().alias("_cdc_recorded_at"),
    )
    view = f"cdc_tombstones_{uuid.uuid4().hex}"
    deletes.createOrReplaceTempView(view)
    on = " AND ".join(f"t.`{c}` = s.`{c}`" for c in cfg.primary_key)
    try:
        spark.sql(
            f"MERGE INTO {name} t USING {view} s ON {on} "
            f"WHEN MATCHED AND {position_struct('s.', change=True)} > {position_struct('t.', change=True)} "
            "THEN UPDATE SET * "
            "WHEN NOT MATCHED THEN INSERT *"
        )
    finally:
        spark.catalog.dropTempView(view)
    return survivors


def apply_range(
    spark: SparkSession,
    settings: Settings,
    cfg: TableConfig,
    offset_range: OffsetRange,
    run_id: str,
    *,
    replay: bool = False,
) -> ApplyResult:
    """Apply one offset range to the table in one Iceberg commit (see the module docstring).

    Args:
        replay: a manual replay: the range may start anywhere (below the committed offsets).

    Raises:
        ConfigError: a table without primary key in ``upsert`` mode.
        ConcurrentRunError: the table's committed offsets are neither the range's start nor its
            end, or another run committed while this one ran.
        BadBatchError: ``bad_records: fail`` and records that cannot be applied (nothing committed).
        PositionOrderError: the events change binlog basename or source server.
        SchemaError: the table cannot be created from, or does not fit, the events.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    cfg.check_runnable()
    if offset_range.is_empty:
        return ApplyResult("empty")
    catalog = load_catalog(settings)
    existing = load_table_or_none(catalog, cfg.identifier)
    state = committed_state(existing, cfg.topic) if existing is not None else None
    if state is not None and state.offsets is not None and not replay and state.offsets != offset_range.start:
        if state.offsets == offset_range.end:
            return ApplyResult("already_applied", events=offset_range.event_count)
        raise ConcurrentRunError(
            f"table {cfg.identifier}: committed offsets {encode_offsets(state.offsets)} are not "
            f"this run's start {encode_offsets(offset_range.start)}; another run committed "
            "in between. Nothing was committed; the next run plans from the table's offsets."
        )

    # Not cached: a 1,000,000-event batch is 4.4 GiB of values. The records are parsed once into a
    # cache without the raw value; the rare bad and held-back records are read again from Kafka.
    raw = read_range(spark, settings.kafka_bootstrap, offset_range)
    base = None
    try:
        table = _resolve_table(settings, cfg, raw)
        if state is None:
            state = committed_state(table, cfg.topic)
        columns = _source_columns(table)
        base = (
            parse_records(raw, cfg.value_format, columns, cfg.primary_key)
            .drop("value")
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        _check_no_unknown_columns(base, cfg, table)
        parsed = _split_bad_and_held(spark, settings, cfg, base)
        good_filter = "not is_tombstone and error is null and held_back_behind is null"
        stats = parsed.agg(
            F.count(F.lit(1)).alias("events"),
            F.sum(F.col("is_tombstone").cast("int")).alias("tombstones"),
            F.sum(F.col("error").isNotNull().cast("int")).alias("bad"),
            F.sum(F.col("held_back_behind").isNotNull().cast("int")).alias("held"),
            F.min(F.when(F.expr(good_filter), F.col("position"))).alias("first"),
            F.max(F.when(F.expr(good_filter), F.col("position"))).alias("last"),
            F.max(F.when(F.expr(good_filter) & (F.col("op") == "t"), F.col("position"))).alias("truncate"),
            F.collect_set(F.when(F.expr(good_filter), F.col("file_base"))).alias("basenames"),
            # snapshot reads carry server_id 0: only changes name the server that wrote them
            F.collect_set(F.when(F.expr(good_filter) & (F.col("server_id") != 0), F.col("server_id"))).alias("servers"),
        ).collect()[0]
        quarantined = (stats["bad"] or 0) + (stats["held"] or 0)
        if stats["bad"] and cfg.bad_records == "fail":
            raise _bad_batch(settings.kafka_bootstrap, parsed, cfg, columns, stats["bad"])
        if quarantined:
            _write_quarantine(spark, settings, cfg, raw,
                              parsed.filter("error is not null or held_back_behind is not null"), run_id)

        basenames = sorted(stats["basenames"])
        known = [state.binlog_basename] if state.binlog_basename else []
        if len(set(basenames + known)) > 1 or len(stats["servers"]) > 1:
            raise PositionOrderError(
                f"topic {cfg.topic!r}: events from binlog basename(s) {basenames} and server id(s) "
                f"{sorted(stats['servers'])} (the table so far: {known or 'none'}); positions of "
                "different binlogs are not comparable (a failover?). Nothing was committed: "
                "re-snapshot the table (snapshot-bootstrap DAG) after a failover."
            )
        basename = (basenames or known or [None])[0]

        good = parsed.filter(good_filter)
        ops = {r["op"]: r["count"] for r in good.groupBy("op").count().collect()}
        truncate = stats["truncate"]
        floor = state.truncate_floor
        if truncate is not None:
            new_floor = "{}:{}:{}:{}".format(*truncate)
            if floor is None or tuple(truncate) > tuple(int(x) for x in floor.split(":")):
                floor = new_floor
        properties = {
            SummaryKeys.TOPIC: cfg.topic,
            SummaryKeys.START_OFFSETS: encode_offsets(offset_range.start),
            SummaryKeys.END_OFFSETS: encode_offsets(offset_range.end),
            SummaryKeys.RUN_ID: run_id,
            SummaryKeys.EVENTS: str(stats["events"]),
            SummaryKeys.TOMBSTONES: str(stats["tombstones"] or 0),
            SummaryKeys.UPSERTS: str(sum(v for k, v in ops.items() if k in ("c", "u", "r"))),
            SummaryKeys.DELETES: str(ops.get("d", 0)),
            SummaryKeys.QUARANTINED: str(quarantined),
        }
        if replay:
            properties[SummaryKeys.REPLAY] = "true"
        if floor is not None:
            properties[SummaryKeys.TRUNCATE_FLOOR] = floor
        if basename is not None:
            properties[SummaryKeys.BINLOG_BASENAME] = basename
        if stats["first"] is not None:
            properties[SummaryKeys.FIRST_POSITION] = "{}:{}:{}".format(*stats["first"][:3])
            properties[SummaryKeys.LAST_POSITION] = "{}:{}:{}".format(*stats["last"][:3])

        meta_cols = [name for name, _, _ in METADATA_COLUMNS]
        if cfg.write_mode == "changelog":
            source = good.select(*[F.col("image")[c.name].alias(c.name) for c in columns], *meta_cols)
            keys_changed = 0
            snapshot_id = _commit(spark, settings, cfg, table, state.snapshot_id, properties,
                                  lambda target: source.writeTo(target).append())
        else:
            rows = good.filter("op <> 't'")
            if floor is not None:
                rows = rows.filter(F.col("position") > F.expr(_position_literal(floor)))
            survivors = _apply_tombstones(spark, settings, cfg, reduce_latest(rows, cfg.primary_key))
            source = survivors.select(*[F.col("image")[c.name].alias(c.name) for c in columns], *meta_cols)
            source = source.persist(StorageLevel.MEMORY_AND_DISK)
            keys_changed = source.count()
            all_cols = [c.name for c in columns] + meta_cols
            new_truncate = "{}:{}:{}:{}".format(*truncate) if truncate is not None else None
            snapshot_id = _commit(
                spark, settings, cfg, table, state.snapshot_id, properties,
                lambda target: _merge(spark, cfg, target, source, all_cols, new_truncate),
            )
            source.unpersist()
        return ApplyResult(
            "committed",
            snapshot_id=snapshot_id,
            events=stats["events"],
            tombstones=stats["tombstones"] or 0,
            ops=ops,
            quarantined=quarantined,
            keys_changed=keys_changed,
        )
    finally:
        if base is not None:
            base.unpersist()


def _bad_batch(bootstrap: str, parsed: DataFrame, cfg: TableConfig, columns: list[ColumnSpec], total: int) -> BadBatchError:
    """The error of a ``bad_records: fail`` run: the first :data:`_MAX_REPORTED_BAD` bad records,
    each described from its raw value (fetched from Kafka by its coordinates: the parse cache has
    no raw values)."""
    from confluent_kafka import Consumer

    from cdclake.kafka_io import read_partition

    bad_rows = (
        parsed.filter("error is not null").orderBy("partition", "offset")
        .select("partition", "offset", "error").limit(_MAX_REPORTED_BAD).collect()
    )
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdclake-bad-records",
                         "enable.auto.commit": False, "log_level": 3})
    reported = []
    try:
        for b in bad_rows:
            where = KafkaCoordinates(cfg.topic, b["partition"], b["offset"])
            records = read_partition(consumer, cfg.topic, b["partition"], b["offset"], b["offset"] + 1)
            value = next((m.value() for m in records), None)
            reported.append((cfg.topic, b["partition"], b["offset"], _describe_bad_record(value, cfg, columns, where, b["error"])))
    finally:
        consumer.close()
    return BadBatchError(reported, total)


def _merge(spark: SparkSession, cfg: TableConfig, target: str, source: DataFrame, all_cols: list[str], truncate: str | None) -> None:
    """The ``MERGE INTO`` of a reduced batch (one row per key) into ``target``."""
    view = f"cdc_batch_{uuid.uuid4().hex}"
    source.createOrReplaceTempView(view)
    q = lambda name: f"`{name}`"  # noqa: E731
    on = " AND ".join(f"t.{q(c)} = s.{q(c)}" for c in cfg.primary_key)
    newer = f"{position_struct('s.')} > {position_struct('t.')}"
    truncate_clause = (
        f"WHEN NOT MATCHED BY SOURCE AND {position_struct('t.')} < {_position_literal(truncate)} THEN DELETE"
        if truncate else ""
    )
    try:
        spark.sql(f"""
            MERGE INTO {target} t
            USING {view} s
            ON {on}
            WHEN MATCHED AND s._cdc_op = 'd' AND {newer} THEN DELETE
            WHEN MATCHED AND s._cdc_op <> 'd' AND {newer} THEN
              UPDATE SET {", ".join(f"t.{q(c)} = s.{q(c)}" for c in all_cols)}
            WHEN NOT MATCHED AND s._cdc_op <> 'd' THEN
              INSERT ({", ".join(q(c) for c in all_cols)}) VALUES ({", ".join(f"s.{q(c)}" for c in all_cols)})
            {truncate_clause}
        """)
    finally:
        spark.catalog.dropTempView(view)


def _commit(
    spark: SparkSession,
    settings: Settings,
    cfg: TableConfig,
    table: Any,
    base_snapshot_id: int | None,
    properties: dict[str, str],
    write: Any,
) -> int:
    """Run ``write(target)`` as one commit on top of ``base_snapshot_id`` and return its id.

    The write goes to a branch created at the base snapshot; ``main`` is then fast-forwarded to it,
    which Iceberg refuses when ``main`` moved since the base (another run committed). A write that
    changes no row still commits (an empty append), so that its offsets are recorded.

    Raises:
        ConcurrentRunError: ``main`` is no longer at ``base_snapshot_id``.
    """
    target = f"{settings.catalog_name}.{cfg.identifier}"
    branch = None
    if base_snapshot_id is None:
        _pause_point("before_commit", "main")  # a table without snapshots is written directly
    else:
        branch = f"{RUN_BRANCH_PREFIX}{uuid.uuid4().hex[:12]}"
        spark.sql(f"ALTER TABLE {target} CREATE BRANCH `{branch}` AS OF VERSION {base_snapshot_id}")
    try:
        for key, value in properties.items():
            spark.conf.set(_SNAPSHOT_PROPERTY + key, value)
        try:
            write(f"{target}.`branch_{branch}`" if branch else target)
        finally:
            for key in properties:
                spark.conf.unset(_SNAPSHOT_PROPERTY + key)
        table = table.refresh()
        ref = branch or "main"
        head = table.snapshot_by_name(ref)
        if head is None or head.snapshot_id == base_snapshot_id:
            import pyarrow as pa

            empty = pa.Table.from_pylist([], schema=table.schema().as_arrow())
            table.append(empty, snapshot_properties=properties, branch=ref)
        if branch:
            _pause_point("before_commit", branch)
            try:
                spark.sql(f"CALL {settings.catalog_name}.system.fast_forward('{cfg.identifier}', 'main', '{branch}')")
            except Exception as e:  # noqa: BLE001 - Spark wraps Iceberg's error in several types
                if "not an ancestor" not in str(e):
                    raise
                raise ConcurrentRunError(
                    f"table {cfg.identifier}: another run committed since this run read snapshot "
                    f"{base_snapshot_id}; this run's commit was discarded (nothing changed). The "
                    "next run plans from the table's offsets."
                ) from e
        snapshot_id = table.refresh().current_snapshot().snapshot_id
    finally:
        if branch:
            spark.sql(f"ALTER TABLE {target} DROP BRANCH IF EXISTS `{branch}`")
    _pause_point("after_commit", snapshot_id)
    return snapshot_id
