"""Parsing Kafka records of Debezium envelopes into one row per record (Spark): op, position,
the decoded row image and, for a record that cannot be applied, the reason.

Envelope: Debezium MySQL connector docs, "Data change events"; the same rules record by record
are in :mod:`cdclake.model.envelope` (both are tested against the same captured files).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdclake.model.layout import SCHEMA_CHANGE_POSITION_PROPERTY
from cdclake.model.position import BINLOG_FILE_PATTERN, SNAPSHOT_MARKERS, SNAPSHOT_RANK, BinlogPosition
from cdclake.model.types import ColumnSpec
from cdclake.spark.decode import decode, is_fallible, is_json_null, json_read_type
from cdclake.spark.names import quote_identifier
from cdclake.spark.positions import gtid_sequence, position_column
from cdclake.spark.read import KAFKA_RECORD_COLUMNS

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame


def _envelope_ddl(columns: list[tuple[str, str]], value_format: str) -> str:
    row = ",".join(f"{quote_identifier(name)}:{typ}" for name, typ in columns)
    envelope = (
        f"struct<before:struct<{row}>,after:struct<{row}>,"
        "source:struct<connector:string,name:string,server_id:bigint,file:string,pos:bigint,"
        "row:int,snapshot:string,ts_ms:bigint,db:string,table:string,gtid:string>,"
        "op:string,ts_ms:bigint>"
    )
    if value_format == "json_with_schema":
        return f"struct<payload:{envelope},_corrupt_record:string>"
    return envelope[:-1] + ",_corrupt_record:string>"


def parse_records(
    raw: DataFrame,
    value_format: str,
    columns: list[ColumnSpec],
    primary_key: tuple[str, ...],
    ordering: str = "binlog",
) -> DataFrame:
    """Parse Kafka records into one row per record with its op, position, image and error.

    Output columns: ``topic``, ``partition``, ``offset``, ``timestamp``, ``key``, ``value``,
    ``is_tombstone``, ``op``, ``file_base``, ``server_id``, ``snapshot_marker`` (``source.snapshot``),
    ``gtid`` (``source.gtid``) and the metadata columns of
    :data:`cdclake.model.layout.METADATA_COLUMNS` (``_cdc_op``, ``_cdc_snapshot``, ``_cdc_binlog_*``,
    ``_cdc_gtid_seq``, ``_cdc_source_ts``, ``_cdc_kafka_*``), ``position`` (struct in
    ``ordering``, see :func:`cdclake.spark.positions.position_column`),
    ``image`` (struct of the source columns, decoded), ``error`` (null when the record can be
    applied, else the reason), ``unknown_column`` (the first name in the applied image, ``after``
    or for a delete ``before``, that is not one of ``columns``; else null).
    """
    from pyspark.sql import functions as F

    ddl = _envelope_ddl([(c.name, json_read_type(c.encoding)) for c in columns], value_format)
    text = F.col("value").cast("string")
    # The whole value is parsed, Connect schema and all: cutting the payload out first (with
    # get_json_object) would re-serialize it through Jackson, which writes a JSON number with a
    # fraction as a double and so loses NUMERIC-encoded decimals' digits.
    parsed = F.from_json(text, ddl, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"})
    env = "j.payload" if value_format == "json_with_schema" else "j"
    df = raw.select(*KAFKA_RECORD_COLUMNS, parsed.alias("j")).withColumn(
        "_image_raw",
        F.when(F.col(f"{env}.op") == "d", F.col(f"{env}.before")).otherwise(F.col(f"{env}.after")),
    )
    # The names in the applied image's JSON that are not source columns, which from_json drops
    # silently (see cdclake.model.decision.check_columns). Only the names are read, so re-serializing is
    # harmless here.
    path = "$.payload" if value_format == "json_with_schema" else "$"
    image_json = F.when(F.col(f"{env}.op") == "d", F.get_json_object(text, f"{path}.before")).otherwise(
        F.get_json_object(text, f"{path}.after")
    )
    unknown = F.array_except(
        F.coalesce(F.json_object_keys(image_json), F.array().cast("array<string>")),
        F.array(*[F.lit(c.name) for c in columns]).cast("array<string>"),
    )
    raw_sql = {c.name: f"_image_raw.{quote_identifier(c.name)}" for c in columns}
    # decoded once, in a column of its own: the fit check below reads it rather than decode again
    df = df.withColumn("_image", F.struct(*[decode(raw_sql[c.name], c.encoding).alias(c.name) for c in columns]))
    op = F.col(f"{env}.op")
    src = f"{env}.source"
    image_raw = F.col("_image_raw")
    image = F.col("_image")
    file = F.col(f"{src}.file")
    snapshot = (op == "r") | F.col(f"{src}.snapshot").isin(*SNAPSHOT_MARKERS)
    encodings = {c.name: c.encoding for c in columns}
    row_error = F.lit(None).cast("string")
    for c in reversed(columns):
        if is_fallible(c.encoding):
            row_error = F.when(
                ~is_json_null(image_raw[c.name], c.encoding) & image[c.name].isNull(),
                F.lit(f"column {c.name!r}: value does not fit {c.iceberg_type} (encoding {c.encoding})"),
            ).otherwise(row_error)
    for col in reversed(primary_key):
        row_error = F.when(
            is_json_null(image_raw[col], encodings[col]),
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
        .when(
            F.col(env).isNull(),
            F.lit(
                "value has no 'payload' (expected value_format json_with_schema)"
                if value_format == "json_with_schema"
                else "value is not a JSON object"
            ),
        )
        .when(op.isNull(), F.lit("envelope has no 'op'"))
        .when(~op.isin("c", "u", "d", "r", "t"), F.concat(F.lit("unknown op '"), op, F.lit("'")))
        .when(file.isNull() | F.col(f"{src}.pos").isNull(), F.lit("source has no binlog position (file, pos)"))
        .when(F.regexp_extract(file, BINLOG_FILE_PATTERN, 2) == "", F.lit("source.file has no numeric suffix"))
        .when(
            op.isin("c", "u", "r") & F.col(f"{env}.after").isNull(),
            F.concat(F.lit("op '"), op, F.lit("' without an 'after' image")),
        )
        .when((op == "d") & F.col(f"{env}.before").isNull(), F.lit("op 'd' without a 'before' image"))
        .otherwise(row_error)
    )
    ts_ms = F.col(f"{src}.ts_ms")
    out = df.select(
        *KAFKA_RECORD_COLUMNS,
        F.col("value").isNull().alias("is_tombstone"),
        op.alias("op"),
        F.regexp_extract(file, BINLOG_FILE_PATTERN, 1).alias("file_base"),
        F.col(f"{src}.server_id").alias("server_id"),
        F.col(f"{src}.snapshot").alias("snapshot_marker"),
        F.col(f"{src}.gtid").alias("gtid"),
        op.alias("_cdc_op"),
        F.coalesce(snapshot, F.lit(False)).alias("_cdc_snapshot"),
        F.regexp_extract(file, BINLOG_FILE_PATTERN, 2).try_cast("bigint").alias("_cdc_binlog_file_seq"),
        F.col(f"{src}.pos").alias("_cdc_binlog_pos"),
        F.coalesce(F.col(f"{src}.row"), F.lit(0)).alias("_cdc_binlog_row"),
        gtid_sequence(F.col(f"{src}.gtid")).alias("_cdc_gtid_seq"),
        # Debezium 1.x snapshot reads carry ts_ms 0: unknown, not 1970
        F.when(ts_ms > 0, F.timestamp_millis(ts_ms)).alias("_cdc_source_ts"),
        F.col("partition").alias("_cdc_kafka_partition"),
        F.col("offset").alias("_cdc_kafka_offset"),
        image.alias("image"),
        error.alias("error"),
        F.when(F.col(env).isNotNull(), F.try_element_at(unknown, F.lit(1))).alias("unknown_column"),
    )
    return out.withColumn("position", position_column(ordering))


def unknown_columns_floor(table: Table) -> BinlogPosition | None:
    """The position from which an event's unknown column stops the run: the table's last applied
    schema change (``cdc.schema-change-position``) at rank 0, whatever its row, or ``None`` (every
    event is checked).

    Events below it were produced under an older schema (re-emitted after a connector restart),
    and their columns may have been renamed or deleted since."""
    floor = table.properties.get(SCHEMA_CHANGE_POSITION_PROPERTY)
    if floor is None:
        return None
    done = BinlogPosition.from_text(floor)
    return BinlogPosition(done.file_seq, done.pos, done.row, SNAPSHOT_RANK)
