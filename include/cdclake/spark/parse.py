"""Parsing Kafka records of Debezium envelopes into one row per record (Spark): op, position,
the decoded row image and, for a record that cannot be applied, the reason.

Envelope: Debezium MySQL connector docs, "Data change events"; the same rules record by record
are in :mod:`cdclake.model.envelope` (both are tested against the same captured files).

JSON values (``json``, ``json_with_schema``) are read here (:func:`parse_records`), Avro ones in
:mod:`cdclake.spark.parse_avro`; both end in :func:`records_from_envelopes`, which decodes the
row image and finds the envelope's and the row's defects the same way for every format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from cdclake.model.flattened import FlattenedRecords, missing_field_error
from cdclake.model.layout import SCHEMA_CHANGE_POSITION_PROPERTY
from cdclake.model.position import (
    BINLOG_FILE_PATTERN,
    NO_POSITION_REMEDY,
    SNAPSHOT_MARKERS,
    SNAPSHOT_RANK,
    SOURCE_ORDERINGS,
    BinlogPosition,
)
from cdclake.model.types import ColumnSpec
from cdclake.spark.decode import (
    MAX_REPORTED_VALUE_CHARS,
    decode,
    is_fallible,
    is_json_null,
    json_read_type,
    misfit_reason,
)
from cdclake.spark.flat import first_of
from cdclake.spark.flattened import added_fields, envelope_of
from cdclake.spark.names import quote_identifier
from cdclake.spark.positions import gtid_sequence, position_column
from cdclake.spark.read import KAFKA_RECORD_COLUMNS

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import Column, DataFrame


SOURCE_FIELDS = (
    ("connector", "string"),
    ("name", "string"),
    ("server_id", "bigint"),
    ("file", "string"),
    ("pos", "bigint"),
    ("row", "int"),
    ("snapshot", "string"),
    ("ts_ms", "bigint"),
    ("db", "string"),
    ("table", "string"),
    ("gtid", "string"),
)
"""The fields of Debezium's ``source`` block the apply reads, with their Spark types."""

TRANSACTION_FIELDS = (("id", "string"), ("data_collection_order", "bigint"))
"""The fields of Debezium's ``transaction`` block the apply reads (``provide.transaction.metadata``;
:mod:`cdclake.model.transactions`), with their Spark types."""


def envelope_type(columns: list[ColumnSpec], read_types: Mapping[str, str] | None = None) -> str:
    """The Spark type of a Debezium envelope as the apply reads it: ``before`` and ``after``
    structs of the table's columns, each in its JSON read type (:func:`~cdclake.spark.decode.json_read_type`)
    or the one ``read_types`` gives it (column -> type; a format's reader's, see
    :func:`~cdclake.spark.decode.decode`), the :data:`SOURCE_FIELDS` of ``source``, ``op``,
    ``ts_ms`` and the :data:`TRANSACTION_FIELDS` of ``transaction``."""
    read_types = read_types or {}
    row = ",".join(
        f"{quote_identifier(c.name)}:{read_types.get(c.name) or json_read_type(c.encoding)}" for c in columns
    )
    source = ",".join(f"{name}:{typ}" for name, typ in SOURCE_FIELDS)
    transaction = ",".join(f"{name}:{typ}" for name, typ in TRANSACTION_FIELDS)
    return (
        f"struct<before:struct<{row}>,after:struct<{row}>,source:struct<{source}>,op:string,ts_ms:bigint,"
        f"transaction:struct<{transaction}>>"
    )


def parse_records(
    raw: DataFrame,
    value_format: str,
    columns: list[ColumnSpec],
    primary_key: tuple[str, ...],
    ordering: str = "binlog",
    flattened: FlattenedRecords | None = None,
) -> DataFrame:
    """Parse Kafka records of JSON values into one row per record with its op, position, image
    and error (the columns of :func:`records_from_envelopes`).

    A value that is not JSON, or lacks the ``payload`` of ``json_with_schema``, is a bad record;
    one whose JSON does not fit the types read is :data:`TYPE_MISMATCH` until
    :func:`describe_mismatches` names the column. ``unknown_column``: the first name in the
    applied image (``after``, or for a delete ``before``) that is not one of ``columns``.
    With ``flattened``, each value is a record flattened by ``ExtractNewRecordState``, read as
    its envelope (:func:`_flattened_envelopes`).
    """
    from pyspark.sql import functions as F

    if flattened is not None:
        envelopes = _flattened_envelopes(raw, value_format, columns, ordering, flattened)
        return records_from_envelopes(envelopes, columns, primary_key, ordering)
    envelope = envelope_type(columns)
    ddl = (
        f"struct<payload:{envelope},_corrupt_record:string>"
        if value_format == "json_with_schema"
        else envelope[:-1] + ",_corrupt_record:string>"
    )
    text = F.col("value").cast("string")
    # The whole value is parsed, Connect schema and all: cutting the payload out first (with
    # get_json_object) would re-serialize it through Jackson, which writes a JSON number with a
    # fraction as a double and so loses NUMERIC-encoded decimals' digits.
    parsed = F.from_json(text, ddl, _PERMISSIVE)
    env = "j.payload" if value_format == "json_with_schema" else "j"
    df = raw.select(*KAFKA_RECORD_COLUMNS, parsed.alias("j"))
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
    format_error = (
        F.when(
            F.col("j._corrupt_record").isNotNull()
            & (F.col(env).isNull() | F.expr("try_parse_json(cast(value AS STRING)) IS NULL")),
            F.lit("value is not JSON"),
        )
        .when(F.col("j._corrupt_record").isNotNull(), F.lit(TYPE_MISMATCH))
        .when(
            F.col(env).isNull(),
            F.lit(
                "value has no 'payload' (expected value_format json_with_schema)"
                if value_format == "json_with_schema"
                else "value is not a JSON object"
            ),
        )
    )
    envelopes = df.select(
        *KAFKA_RECORD_COLUMNS,
        F.col(env).alias("env"),
        format_error.alias("format_error"),
        F.when(F.col(env).isNotNull(), F.try_element_at(unknown, F.lit(1))).alias("unknown_column"),
    )
    return records_from_envelopes(envelopes, columns, primary_key, ordering)


def _flattened_envelopes(
    raw: DataFrame, value_format: str, columns: list[ColumnSpec], ordering: str, flat: FlattenedRecords
) -> DataFrame:
    """The envelopes of flattened JSON values (:mod:`cdclake.spark.flattened`), with the columns
    :func:`records_from_envelopes` reads. Besides JSON's defects, a record without its op field,
    or under an ordering by source position without the fields of its position, is a bad record
    naming the field and the transform setting that adds it
    (:func:`~cdclake.model.flattened.missing_field_error`)."""
    from pyspark.sql import functions as F

    added = added_fields(flat, SOURCE_FIELDS, TRANSACTION_FIELDS)
    names = {c.name for c in columns}
    fields = [f"{quote_identifier(c.name)}:{json_read_type(c.encoding)}" for c in columns] + [
        f"{quote_identifier(name)}:{typ}" for name, typ in added.items() if name not in names
    ]
    record = f"struct<{','.join(fields)}>"
    ddl = (
        f"struct<payload:{record},_corrupt_record:string>"
        if value_format == "json_with_schema"
        else record[:-1] + ",_corrupt_record:string>"
    )
    text = F.col("value").cast("string")
    base = "j.payload" if value_format == "json_with_schema" else "j"
    df = raw.select(*KAFKA_RECORD_COLUMNS, F.from_json(text, ddl, _PERMISSIVE).alias("j"))

    def get(name: str) -> Column:
        return F.col(f"{base}.{quote_identifier(name)}")

    row = F.struct(*[get(c.name).alias(c.name) for c in columns])
    env = envelope_of(get, row, flat, SOURCE_FIELDS, TRANSACTION_FIELDS)
    path = "$.payload" if value_format == "json_with_schema" else "$"
    keys = F.coalesce(F.json_object_keys(F.get_json_object(text, path)), F.array().cast("array<string>"))
    prefix = flat.fields_prefix
    unknown = F.filter(
        F.array_except(keys, F.array(*[F.lit(c.name) for c in columns]).cast("array<string>")),
        lambda k: ~(k.startswith(prefix) if prefix else F.lit(False)) & (k != F.lit("__deleted")),
    )
    missing = [(env["op"].isNull(), flat.op_field, "every flattened record")]
    for field in flat.position_fields(ordering):
        bare = field.replace("source_", "", 1)
        missing.append((get(field).isNull() & get(bare).isNull(), field, f"ordering: {ordering}"))
    format_error = (
        F.when(
            F.col("j._corrupt_record").isNotNull()
            & (F.col(base).isNull() | F.expr("try_parse_json(cast(value AS STRING)) IS NULL")),
            F.lit("value is not JSON"),
        )
        .when(F.col("j._corrupt_record").isNotNull(), F.lit(TYPE_MISMATCH))
        .when(
            F.col(base).isNull(),
            F.lit(
                "value has no 'payload' (expected value_format json_with_schema)"
                if value_format == "json_with_schema"
                else "value is not a JSON object"
            ),
        )
        .otherwise(first_of([(m, F.lit(missing_field_error(f, flat, why))) for m, f, why in missing]))
    )
    return df.select(
        *KAFKA_RECORD_COLUMNS,
        F.when(F.col(base).isNotNull(), env).alias("env"),
        format_error.alias("format_error"),
        F.when(F.col(base).isNotNull(), F.try_element_at(unknown, F.lit(1))).alias("unknown_column"),
    )


def records_from_envelopes(
    envelopes: DataFrame,
    columns: list[ColumnSpec],
    primary_key: tuple[str, ...],
    ordering: str,
    *,
    read_types: Mapping[str, str] | None = None,
    carry: tuple[str, ...] = (),
) -> DataFrame:
    """The parse's common part, whatever the value format: envelopes read -> one row per record
    with its op, position, decoded image and error.

    Args:
        envelopes: the Kafka record columns (:data:`~cdclake.spark.read.KAFKA_RECORD_COLUMNS`),
            ``env`` (the envelope, of :func:`envelope_type` with ``read_types``; null when the value
            could not be read), ``format_error`` (why the value could not be read as an envelope
            of the table's columns, else null; ignored for a tombstone) and ``unknown_column``.
        read_types: column -> the type its values were read as, when not its JSON read type
            (:func:`~cdclake.spark.decode.decode`).
        carry: more columns of ``envelopes`` kept in the result as they are.

    Returns:
        Columns ``topic``, ``partition``, ``offset``, ``timestamp``, ``key``, ``value``,
        ``is_tombstone``, ``op``, ``file_base``, ``server_id``, ``snapshot_marker``
        (``source.snapshot``), ``gtid`` (``source.gtid``) and the metadata columns of
        :data:`cdclake.model.layout.METADATA_COLUMNS` (``_cdc_op``, ``_cdc_snapshot``,
        ``_cdc_binlog_*``, ``_cdc_gtid_seq``, ``_cdc_source_ts``, ``_cdc_kafka_*``), ``position``
        (struct in ``ordering``, see :func:`cdclake.spark.positions.position_column`), ``image``
        (struct of the source columns, decoded), ``error`` (null when the record can be applied,
        else the reason: ``format_error`` first, then the envelope's and the row's defects),
        ``unknown_column``, ``transaction_id`` and ``transaction_order`` (``transaction.id`` and
        ``transaction.data_collection_order``; null without transaction metadata).
    """
    from pyspark.sql import functions as F

    read_type = {c.name: (read_types or {}).get(c.name) or json_read_type(c.encoding) for c in columns}
    df = _with_image(envelopes, columns, read_type)
    op = F.col("env.op")
    error = _record_error(op, ordering, _row_error(op, columns, primary_key, read_type))
    out = df.select(
        *KAFKA_RECORD_COLUMNS,
        F.col("value").isNull().alias("is_tombstone"),
        op.alias("op"),
        *_source_columns(),
        *_metadata_columns(op),
        F.col("_image").alias("image"),
        error.alias("error"),
        F.col("unknown_column"),
        F.col("env.transaction.id").alias("transaction_id"),
        F.col("env.transaction.data_collection_order").alias("transaction_order"),
        *carry,
    )
    return out.withColumn("position", position_column(ordering))


_SOURCE = "env.source"
"""The envelope's ``source`` block, in :func:`records_from_envelopes`' ``envelopes``."""


def _raw_field(column: str) -> str:
    """The SQL of ``column`` in the applied image as read (``_image_raw``, :func:`_with_image`)."""
    return f"_image_raw.{quote_identifier(column)}"


def _with_image(envelopes: DataFrame, columns: list[ColumnSpec], read_type: Mapping[str, str]) -> DataFrame:
    """``envelopes`` with the applied image (``after``, or for a delete ``before``) as read,
    ``_image_raw``, and decoded (:func:`~cdclake.spark.decode.decode` from ``read_type``, column ->
    the type its values were read as), ``_image``: a struct of ``columns``."""
    from pyspark.sql import functions as F

    df = envelopes.withColumn(
        "_image_raw",
        F.when(F.col("env.op") == "d", F.col("env.before")).otherwise(F.col("env.after")),
    )
    # decoded once, in a column of its own: the row's fit check (_row_error) reads it rather than decode again
    return df.withColumn(
        "_image",
        F.struct(*[decode(_raw_field(c.name), c.encoding, read_type[c.name]).alias(c.name) for c in columns]),
    )


def _row_error(
    op: Column, columns: list[ColumnSpec], primary_key: tuple[str, ...], read_type: Mapping[str, str]
) -> Column:
    """The row's first defect, for an op with an image (null when none, or for any other op): a
    null primary key column, then a value of ``_image_raw`` that does not fit (its ``_image``
    column null), in column order. One CASE, not one nested per column (:mod:`cdclake.spark.flat`)."""
    from pyspark.sql import functions as F

    image_raw = F.col("_image_raw")
    image = F.col("_image")
    encodings = {c.name: c.encoding for c in columns}
    row_defects = [
        (is_json_null(image_raw[col], encodings[col], read_type[col]), F.lit(f"primary key column {col!r} is null"))
        for col in primary_key
    ] + [
        (
            ~is_json_null(image_raw[c.name], c.encoding, read_type[c.name]) & image[c.name].isNull(),
            misfit_reason(c, _raw_field(c.name), read_type[c.name]),
        )
        for c in columns
        if is_fallible(c.encoding)
    ]
    return F.when(op.isin("c", "u", "r", "d"), first_of(row_defects, F.lit(None).cast("string")))


def _record_error(op: Column, ordering: str, row_error: Column) -> Column:
    """Why a record cannot be applied, null when it can (a tombstone's is null): ``format_error``
    first, then the envelope's defects (its op, its source position in ``ordering``, its images),
    then ``row_error`` (:func:`_row_error`)."""
    from pyspark.sql import functions as F

    file, src_pos = F.col(f"{_SOURCE}.file"), F.col(f"{_SOURCE}.pos")
    return (
        F.when(F.col("value").isNull(), F.lit(None))
        .when(F.col("format_error").isNotNull(), F.col("format_error"))
        .when(op.isNull(), F.lit("envelope has no 'op'"))
        .when(~op.isin("c", "u", "d", "r", "t"), F.concat(F.lit("unknown op '"), op, F.lit("'")))
        .when(
            _no_position(file, src_pos, ordering),
            F.format_string(f"source has no binlog position (file '%s', pos %s): {NO_POSITION_REMEDY}", file, src_pos),
        )
        .when(_no_file_number(file, ordering), F.lit("source.file has no numeric suffix"))
        .when(_unplaced_truncate(op, ordering), F.lit(UNPLACED_TRUNCATE))
        .when(
            op.isin("c", "u", "r") & F.col("env.after").isNull(),
            F.concat(F.lit("op '"), op, F.lit("' without an 'after' image")),
        )
        .when((op == "d") & F.col("env.before").isNull(), F.lit("op 'd' without a 'before' image"))
        .otherwise(row_error)
    )


def _source_columns() -> list[Column]:
    """The result's columns of the envelope's ``source``: ``file_base`` (``source.file`` without
    its numeric suffix), ``server_id``, ``snapshot_marker`` (``source.snapshot``) and ``gtid``."""
    from pyspark.sql import functions as F

    return [
        F.regexp_extract(F.col(f"{_SOURCE}.file"), BINLOG_FILE_PATTERN, 1).alias("file_base"),
        F.col(f"{_SOURCE}.server_id").alias("server_id"),
        F.col(f"{_SOURCE}.snapshot").alias("snapshot_marker"),
        F.col(f"{_SOURCE}.gtid").alias("gtid"),
    ]


def _metadata_columns(op: Column) -> list[Column]:
    """The result's metadata columns (:data:`cdclake.model.layout.METADATA_COLUMNS`), ``_cdc_op``
    to ``_cdc_kafka_offset``, in that order."""
    from pyspark.sql import functions as F

    file, ts_ms = F.col(f"{_SOURCE}.file"), F.col(f"{_SOURCE}.ts_ms")
    snapshot = (op == "r") | F.col(f"{_SOURCE}.snapshot").isin(*SNAPSHOT_MARKERS)
    return [
        op.alias("_cdc_op"),
        F.coalesce(snapshot, F.lit(False)).alias("_cdc_snapshot"),
        F.regexp_extract(file, BINLOG_FILE_PATTERN, 2).try_cast("bigint").alias("_cdc_binlog_file_seq"),
        F.col(f"{_SOURCE}.pos").alias("_cdc_binlog_pos"),
        F.coalesce(F.col(f"{_SOURCE}.row"), F.lit(0)).alias("_cdc_binlog_row"),
        gtid_sequence(F.col(f"{_SOURCE}.gtid")).alias("_cdc_gtid_seq"),
        # Debezium 1.x snapshot reads carry ts_ms 0: unknown, not 1970
        F.when(ts_ms > 0, F.timestamp_millis(ts_ms)).alias("_cdc_source_ts"),
        F.col("partition").alias("_cdc_kafka_partition"),
        F.col("offset").alias("_cdc_kafka_offset"),
    ]


UNPLACED_TRUNCATE = (
    "op 't' (truncate) under ordering: kafka: without binlog positions nothing places it among the "
    "events of the other partitions, so it is not applied"
)
"""The quarantine error of a truncate event of a table ordered by Kafka offset."""


def _no_position(file: Column, pos: Column, ordering: str) -> Column:
    """An event without a binlog position (``source.file`` null or empty, or ``pos`` null) in an
    ordering that needs one; its error names the remedy (:data:`~cdclake.model.position.NO_POSITION_REMEDY`)."""
    from pyspark.sql import functions as F

    if ordering not in SOURCE_ORDERINGS:
        return F.lit(False)
    return file.isNull() | (file == "") | pos.isNull()


def _no_file_number(file: Column, ordering: str) -> Column:
    """A ``source.file`` without a numeric suffix, in an ordering that reads it."""
    from pyspark.sql import functions as F

    if ordering not in SOURCE_ORDERINGS:
        return F.lit(False)
    return F.regexp_extract(file, BINLOG_FILE_PATTERN, 2) == ""


def _unplaced_truncate(op: Column, ordering: str) -> Column:
    """A truncate in an ordering without positions: it cannot be placed (:data:`UNPLACED_TRUNCATE`)."""
    from pyspark.sql import functions as F

    return op == "t" if ordering not in SOURCE_ORDERINGS else F.lit(False)


TYPE_MISMATCH = "a value does not fit the table's column types, or the value is malformed"
"""The error :func:`parse_records` gives a JSON value that does not fit the types it reads;
:func:`describe_mismatches` replaces it with the column, the value and the types. (Naming the
column in the parse itself made every batch about 15% slower to parse: the expression is large
even where it is not evaluated.)"""

_PERMISSIVE = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"}
"""``from_json`` options: a value that does not fit the schema gives nulls and its text in
``_corrupt_record``, never an error."""

_CONNECT_FIELDS_DDL = "struct<schema:struct<fields:array<struct<field:string,fields:array<struct<field:string,type:string,name:string>>>>>>"
"""The Connect schema of a ``json_with_schema`` value, as far as naming a field's type needs."""
_CONNECT_TOP_FIELDS_DDL = "struct<schema:struct<fields:array<struct<field:string,type:string,name:string>>>>"
"""The same, of a flattened value: its fields are the row's."""


def _does_not_fit(text: Column, value_format: str, image: str, column: str, read_type: str) -> Column:
    """Whether ``image``.``column`` of the JSON ``text`` does not fit ``read_type``: ``from_json``
    of the value with only that field gives a corrupt record. ``image`` :data:`FLAT_IMAGE`: the
    column of a flattened record (at the value's top)."""
    from pyspark.sql import functions as F

    field = f"{quote_identifier(column)}:{read_type}"
    row = f"struct<{field}" if image == FLAT_IMAGE else f"struct<{image}:struct<{field}>"
    ddl = (
        f"struct<payload:{row}>,_corrupt_record:string>"
        if value_format == "json_with_schema"
        else f"{row},_corrupt_record:string>"
    )
    return F.from_json(text, ddl, _PERMISSIVE)["_corrupt_record"].isNotNull()


FLAT_IMAGE = "row"
"""The image :func:`describe_mismatches` names for a flattened record's column."""


def describe_mismatches(
    records: DataFrame, columns: list[ColumnSpec], value_format: str, flattened: FlattenedRecords | None = None
) -> DataFrame:
    """``records`` (with ``value`` and ``error``) with each :data:`TYPE_MISMATCH` error replaced by
    the first column (``after`` image, then ``before``) whose value does not fit the table's
    column, naming the value, its type in the event (the Connect schema's field, or the JSON type)
    and the table's type; else by the envelope's fields (``source``, ``op``, ``ts_ms``).

    For the few records a run quarantines or reports: each such value is parsed once per column
    and image, with the same ``from_json`` rule as :func:`parse_records`, to find the column.
    Avro values are returned as they are: their parse names the column already
    (:mod:`cdclake.spark.parse_avro`). With ``flattened``, the columns are the value's own
    (image :data:`FLAT_IMAGE`)."""
    from pyspark.sql import functions as F

    if value_format == "avro":
        return records

    text = F.col("value").cast("string")
    mismatch = F.col("error") == TYPE_MISMATCH
    images = (FLAT_IMAGE,) if flattened is not None else ("after", "before")
    checks = [(c, image) for c in columns for image in images]
    culprit = first_of(
        [
            (_does_not_fit(text, value_format, image, c.name, json_read_type(c.encoding)), F.lit(i + 1))
            for i, (c, image) in enumerate(checks)
        ],
        F.lit(None).cast("int"),
    )

    def pick(items: list[str]) -> Column:
        return F.element_at(F.array(*[F.lit(x) for x in items]), F.col("_culprit"))

    column, image_of = pick([c.name for c, _ in checks]), pick([i for _, i in checks])
    if flattened is not None:
        flat = "map<string,variant>"
        row = (
            F.from_json(text, f"struct<payload:{flat}>")["payload"]
            if value_format == "json_with_schema"
            else F.from_json(text, flat)
        )
        value = F.try_element_at(row, column)
    else:
        both = "struct<before:map<string,variant>,after:map<string,variant>>"
        values = (
            F.from_json(text, f"struct<payload:{both}>")["payload"]
            if value_format == "json_with_schema"
            else F.from_json(text, both)
        )
        value = F.try_element_at(F.when(image_of == "after", values["after"]).otherwise(values["before"]), column)
    reason = F.format_string(
        "column '%s' (%s image): value %s (%s) does not fit the table's %s",
        column,
        image_of,
        F.substring(F.to_json(value), 1, MAX_REPORTED_VALUE_CHARS),
        _event_type(text, value_format, image_of, column, value),
        pick([f"{c.iceberg_type} (encoding {c.encoding})" for c, _ in checks]),
    )
    envelope = "a value of the envelope (source, op, ts_ms) does not fit Debezium's types, or the value is malformed"
    return (
        records.withColumn("_culprit", F.when(mismatch, culprit))
        .withColumn(
            "error",
            F.when(mismatch & F.col("_culprit").isNotNull(), reason)
            .when(mismatch, F.lit(envelope))
            .otherwise(F.col("error")),
        )
        .drop("_culprit")
    )


def _event_type(text: Column, value_format: str, image: Column, column: Column, value: Column) -> Column:
    """How the event types ``image``.``column``: its Connect schema field (``Connect
    org.apache.kafka.connect.data.Decimal on bytes in the event's schema``), or without a schema the
    JSON type of ``value`` (a ``variant``: ``JSON string in the event``)."""
    from pyspark.sql import functions as F

    if value_format != "json_with_schema":
        return F.concat(F.lit("JSON "), F.lower(F.schema_of_variant(value)), F.lit(" in the event"))
    fields = F.from_json(text, _CONNECT_FIELDS_DDL)["schema"]["fields"]
    top = F.from_json(text, _CONNECT_TOP_FIELDS_DDL)["schema"]["fields"]
    row_fields = F.when(image == FLAT_IMAGE, top).otherwise(
        F.try_element_at(F.filter(fields, lambda f: f["field"] == image), F.lit(1))["fields"]
    )
    field = F.try_element_at(F.filter(row_fields, lambda f: f["field"] == column), F.lit(1))
    return F.when(
        field.isNotNull(),
        F.concat(F.lit("Connect "), F.concat_ws(" on ", field["name"], field["type"]), F.lit(" in the event's schema")),
    ).otherwise(F.lit("the event's Connect schema has no such field"))


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
