"""Parsing Kafka records of Debezium envelopes in Avro (Confluent wire format, a schema registry)
into the rows :func:`cdclake.spark.parse.parse_records` gives for JSON (Spark).

Each record's value is the magic byte, its writer schema's id and the Avro datum
(:mod:`cdclake.model.avro`). The writer schemas come from the registry
(:mod:`cdclake.spark.writer_schemas`); the parse decodes
each record with ``from_avro`` (spark-avro) and the writer schema of its id, its logical types
removed (:func:`~cdclake.model.avro.without_logical_types`), and brings the row image to the
table's columns by name (Debezium's ``avro`` name adjustment undone,
:func:`~cdclake.model.avro.source_names`), each value turned into what ``from_json`` reads from
``JsonConverter``'s JSON of the same Connect value (bytes as base64 text, a decimal's as a variant
string; a decimal of an Iceberg decimal type keeps its raw bytes, :func:`avro_read_types`). The decoding that follows (:func:`~cdclake.spark.decode.decode`) is the JSON path's,
unchanged: both formats give the same Iceberg values.

All ids are decoded in one pass over the records (a ``CASE`` on the id): a union of one filtered
read per id would read the Kafka range once per id.

A writer column of another encoding than the table's column (:func:`~cdclake.model.types.column_from_connect`
of the writer's Connect schema, :func:`~cdclake.model.avro.connect_schema`) is taken when its
values mean the same in the table's encoding (:func:`~cdclake.model.interchange.conversion`: plain
text and ``Json``/``Enum``/``EnumSet``, int32 into int64, float into double, a decimal into one of
the same scale and no fewer digits, milliseconds into a microsecond column, times 1000);
otherwise each record of that id with a value in that column is a bad record naming the schema
id, the column and both encodings.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cdclake.errors import SchemaError
from cdclake.model.avro import HEADER_BYTES, connect_schema, source_names, without_logical_types
from cdclake.model.flattened import FlattenedRecords, missing_field_error
from cdclake.model.interchange import Conversion, conversion
from cdclake.model.types import (
    ColumnSpec,
    column_from_connect,
    iceberg_type_of_encoding,
    parse_decimal_encoding,
)
from cdclake.spark.decode import json_read_type
from cdclake.spark.flat import all_of, any_of, first_of
from cdclake.spark.flattened import envelope_of
from cdclake.spark.parse import SOURCE_FIELDS, TRANSACTION_FIELDS, envelope_type, records_from_envelopes
from cdclake.spark.read import KAFKA_RECORD_COLUMNS
from cdclake.spark.writer_schemas import (
    envelope_connect_schema,
    envelope_fields,
    framed,
    row_schema,
    schema_id_of_value,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


log = logging.getLogger(__name__)

_PERMISSIVE = {"mode": "PERMISSIVE"}
"""``from_avro`` options: bytes that do not decode give a struct of nulls, never an error."""

_STRUCT_FIELD = re.compile(r"(\w+):(\w+)")


def parse_avro_records(
    raw: DataFrame,
    schemas: Mapping[int, Any],
    columns: list[ColumnSpec],
    primary_key: tuple[str, ...],
    ordering: str = "binlog",
    *,
    unusable: Mapping[int, str] | None = None,
    flattened: FlattenedRecords | None = None,
) -> DataFrame:
    """Parse Kafka records of Confluent-framed Avro values into the rows of
    :func:`~cdclake.spark.parse.parse_records` (see :func:`~cdclake.spark.parse.records_from_envelopes`).

    Args:
        schemas: schema id -> the Avro writer schema (parsed JSON) of that id
            (:attr:`WriterSchemas.schemas`).
        unusable: schema id -> why the registry gave no writer schema for it
            (:attr:`WriterSchemas.unusable`), the error of its records; an id in neither is
            "not in the schema registry".
        flattened: the table's ``flattened`` setting: each datum is a record flattened by
            ``ExtractNewRecordState``, read as its envelope (:mod:`cdclake.spark.flattened`).

    Bad records (besides the envelope's and the row's defects): a value not in the Confluent
    wire format (shorter than the 5-byte header, or a first byte other than 0), a schema id not in
    ``schemas``, bytes that do not decode with their id's writer schema, a writer column whose
    encoding the table's column cannot take (:func:`~cdclake.model.interchange.conversion`; only records with a value in
    it), a writer schema that is no Connect schema. ``unknown_column``: the first field of the
    writer's row (source names) that is not one of ``columns``, for records with that image.
    One more column, ``schema_id``: the record's schema id (null for a value not framed, a
    tombstone).

    A decimal column of an Iceberg decimal type keeps its raw unscaled bytes
    (:func:`avro_read_types`), which :func:`~cdclake.spark.decode.decimal_of_bytes_sql` reads; a
    wider decimal goes the way of JSON's base64 text.
    """
    from pyspark.sql import functions as F

    read_types = avro_read_types(columns)
    readings = [
        _Reading(schema_id, schema, columns, read_types, flattened, ordering)
        for schema_id, schema in sorted(schemas.items())
    ]
    sid = F.col("_schema_id")
    decoded = _decoded(raw, readings, flattened is not None)
    parsed_type = f"struct<env:{envelope_type(columns, read_types)},format_error:string,unknown_column:string>"

    def datum_of(k: int) -> tuple[Column, Column | None]:
        return (F.col(f"_env{k}"), F.col(f"_avro{k}")) if flattened is not None else (F.col(f"_avro{k}"), None)

    parsed = first_of(
        [(sid == r.schema_id, r.parsed(*datum_of(k)).cast(parsed_type)) for k, r in enumerate(readings)],
        F.lit(None).cast(parsed_type),
    )
    format_error = _format_error(sid, readings, unusable or {}).otherwise(F.col("_parsed.format_error"))
    envelopes = decoded.select(*KAFKA_RECORD_COLUMNS, sid, parsed.alias("_parsed")).select(
        *KAFKA_RECORD_COLUMNS,
        F.col("_parsed.env").alias("env"),
        format_error.alias("format_error"),
        F.col("_parsed.unknown_column").alias("unknown_column"),
        sid.alias("schema_id"),
    )
    return records_from_envelopes(
        envelopes, columns, primary_key, ordering, read_types=read_types, carry=("schema_id",)
    )


def _decoded(raw: DataFrame, readings: list[_Reading], flattened: bool) -> DataFrame:
    """The Kafka record columns, ``_schema_id`` and each reading's datum ``_avro<k>`` (decoded
    with its writer schema, null for records of other ids); ``flattened``: also its envelope
    ``_env<k>`` (:meth:`_Reading.enveloped`), in a projection of its own: read through a column,
    the envelope's expression is not repeated inside every value read from it, which would nest
    the plan past Spark Connect's limit (:mod:`cdclake.spark.flat`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    sid = F.col("_schema_id")
    datum = F.expr(f"substring(value, {HEADER_BYTES + 1})")
    decodable = [(k, r, r.avro_json) for k, r in enumerate(readings) if r.avro_json is not None]
    decoded = raw.select(
        *KAFKA_RECORD_COLUMNS,
        schema_id_of_value(r.schema_id for r in readings).alias("_schema_id"),
        *[
            F.when(sid == r.schema_id, from_avro(datum, schema, _PERMISSIVE)).alias(f"_avro{k}")
            for k, r, schema in decodable
        ],
    )
    if not flattened:
        return decoded
    return decoded.select("*", *[r.enveloped(F.col(f"_avro{k}")).alias(f"_env{k}") for k, r, _ in decodable])


def _format_error(sid: Column, readings: list[_Reading], unusable: Mapping[int, str]) -> Column:
    """The error of a record that is not framed, or whose schema id no reading has (a ``when``
    chain the caller ends with ``otherwise``)."""
    from pyspark.sql import functions as F

    known = sid.isin(*[r.schema_id for r in readings]) if readings else F.lit(False)
    return F.when(
        ~framed(),
        F.format_string(
            "value is not in the Confluent wire format (magic byte 0, a 4-byte schema id, the Avro datum): "
            "%s bytes long, first byte 0x%s",
            F.length("value"),
            F.hex(F.substring("value", 1, 1)),
        ),
    ).when(~known, _unknown_id_error(sid, unusable))


def _unknown_id_error(sid: Column, unusable: Mapping[int, str]) -> Column:
    """The error of a record whose schema id has no writer schema."""
    from pyspark.sql import functions as F

    return first_of(
        [(sid == schema_id, F.lit(f"schema id {schema_id}: {reason}")) for schema_id, reason in unusable.items()],
        F.format_string("schema id %s is not in the schema registry", sid),
    )


def _base64(value: Column) -> Column:
    """Bytes as ``JsonConverter`` writes them: standard base64 with padding, on one line. Spark's
    ``base64`` breaks lines every 76 characters by default (``spark.sql.chunkBase64String.enabled``);
    the breaks are taken out, whatever that setting."""
    from pyspark.sql import functions as F

    return F.replace(F.base64(value), F.lit("\r\n"), F.lit(""))


def _json_leaf(value: Column, writer_type: str, read_type: str) -> Column:
    """A decoded Avro primitive as ``from_json`` reads the same Connect value from JSON as ``read_type``."""
    if writer_type == "bytes":
        return _base64(value)
    if writer_type in ("float", "float32") and read_type == "double":
        # JSON holds the float's shortest decimal text, which reads as that double, not as the
        # float's exact binary value
        return value.cast("string").cast("double")
    return value.cast(read_type)


def _json_value(value: Column, writer: dict[str, Any], read_type: str) -> Column:
    """A decoded Avro value of Connect field schema ``writer`` as ``from_json`` reads it as
    ``read_type`` (:func:`~cdclake.spark.decode.json_read_type`)."""
    from pyspark.sql import functions as F

    if read_type == "binary":  # a decimal's unscaled bytes, as the reader asked (avro_read_types)
        return value
    if read_type == "variant":  # a decimal: JSON's base64 string of the unscaled bytes
        return _base64(value).cast("variant")
    if not read_type.startswith("struct<"):
        return _json_leaf(value, str(writer.get("type")), read_type)
    parts = {f["field"]: f for f in writer.get("fields", ())}
    return F.when(
        value.isNotNull(),
        F.struct(
            *[
                (
                    _json_leaf(value[name], str(parts[name].get("type")), typ)
                    if name in parts
                    else F.lit(None).cast(typ)
                ).alias(name)
                for name, typ in _STRUCT_FIELD.findall(read_type[len("struct<") : -1])
            ]
        ),
    )


class _Reading:
    """How the records of one schema id are read into the table's envelope (:func:`parsed`)."""

    def __init__(
        self,
        schema_id: int,
        schema: Any,
        columns: list[ColumnSpec],
        read_types: Mapping[str, str],
        flattened: FlattenedRecords | None = None,
        ordering: str = "binlog",
    ) -> None:
        self.schema_id = schema_id
        self.columns = columns
        self.avro_json: str | None = None
        self.schema_error: str | None = None
        self.read_types = read_types
        self.flattened = flattened
        self.ordering = ordering
        self.flat_fields: dict[str, dict[str, Any]] = {}
        """A flattened record's own fields (``flattened``): name -> Connect field schema."""
        try:
            self.envelope = envelope_fields(envelope_connect_schema(schema, flattened))
            if flattened is not None:
                self.flat_fields = envelope_fields(connect_schema(schema))
            self.avro_json = json.dumps(without_logical_types(schema))
        except SchemaError as e:
            self.envelope = {}
            self.schema_error = f"schema id {schema_id}: the writer schema is not a Connect schema: {e}"
        row = row_schema(self.envelope)
        row_fields = {f["field"]: f for f in (row or {}).get("fields", ()) if "field" in f}
        names = source_names(row_fields, [c.name for c in columns])
        known = {c.name for c in columns}
        self.unknown = next((names[w] for w in row_fields if names[w] not in known), None)
        self.fields: dict[str, tuple[str, dict[str, Any]]] = {}
        """table column -> (writer field name, its Connect schema)"""
        for writer_name, source_name in names.items():
            if source_name in known and source_name not in self.fields:
                self.fields[source_name] = (writer_name, row_fields[writer_name])
        self.misfits: dict[str, str] = {}
        """table column -> why the table cannot take the writer's column"""
        self.conversions: dict[str, Conversion] = {}
        """table column -> how the writer's values become the table encoding's"""
        for c in columns:
            if c.name not in self.fields:
                continue
            writer_field = dict(self.fields[c.name][1], field=c.name)
            try:
                writer_encoding = column_from_connect(writer_field).encoding
            except SchemaError as e:
                self.misfits[c.name] = f"schema id {schema_id}: {e}"
                continue
            taken = conversion(writer_encoding, c.encoding)
            if taken is not None:
                self.conversions[c.name] = taken
            else:
                self.misfits[c.name] = (
                    f"schema id {schema_id}: column {c.name!r} is {writer_encoding} in the writer schema, which the "
                    f"table's column ({c.iceberg_type}, encoding {c.encoding}) cannot take"
                )

    def parsed(self, d: Column, flat: Column | None = None) -> Column:
        """``struct<env, format_error, unknown_column>`` of a record of this id, from its decoded
        datum ``d`` (``from_avro``; a struct of nulls when the bytes do not decode); a flattened
        record's: ``d`` its envelope (:meth:`enveloped`), ``flat`` the datum."""
        from pyspark.sql import functions as F

        if self.schema_error is not None:
            return F.struct(F.lit(None).alias("env"), F.lit(self.schema_error).alias("format_error"), F.lit(None))
        undecoded_check = self._undecoded(d if flat is None else flat)
        missing = []
        if self.flattened is not None:
            assert flat is not None, "a flattened record's datum"
            missing = self._missing_fields(flat, d["op"])
        images = [i for i in ("before", "after") if self.envelope.get(i, {}).get("type") == "struct"]
        # bytes that do not decode, then the first column whose writer encoding the table cannot
        # take that has a value (one CASE, not one nested per column: cdclake.spark.flat)
        undecoded = F.lit(
            f"value does not decode with the writer schema of schema id {self.schema_id} (corrupt Avro bytes)"
        )
        misfits = [
            (any_of([d[image][self.fields[c.name][0]].isNotNull() for image in images]), F.lit(self.misfits[c.name]))
            for c in self.columns
            if c.name in self.misfits
        ]
        error = first_of([(undecoded_check, undecoded), *missing, *misfits], F.lit(None).cast("string"))
        env = F.struct(
            self._image(d, "before").alias("before"),
            self._image(d, "after").alias("after"),
            self._block(d, "source", SOURCE_FIELDS).alias("source"),
            self._top(d, "op", "string").alias("op"),
            self._top(d, "ts_ms", "bigint").alias("ts_ms"),
            self._block(d, "transaction", TRANSACTION_FIELDS).alias("transaction"),
        )
        applied = F.when(env["op"] == "d", env["before"]).otherwise(env["after"])
        unknown = F.when(applied.isNotNull(), F.lit(self.unknown)) if self.unknown is not None else F.lit(None)
        return F.struct(env.alias("env"), error.alias("format_error"), unknown.cast("string").alias("unknown_column"))

    def enveloped(self, d: Column) -> Column:
        """The envelope of a flattened datum ``d`` (:func:`~cdclake.spark.flattened.envelope_of`):
        its row fields (the writer's names) as ``before``/``after``."""
        from pyspark.sql import functions as F

        assert self.flattened is not None
        row_names = [n for n in self.flat_fields if not self.flattened.is_added_field(n)]
        row = F.struct(*[d[n].alias(n) for n in row_names])
        fields = self.flat_fields
        return envelope_of(
            lambda name: d[name] if name in fields else None, row, self.flattened, SOURCE_FIELDS, TRANSACTION_FIELDS
        )

    def _missing_fields(self, d: Column, op: Column) -> list[tuple[Column, Column]]:
        """A flattened datum's missing op (``op``: its envelope's) or position fields, each with
        its error (:func:`~cdclake.model.flattened.missing_field_error`)."""
        from pyspark.sql import functions as F

        assert self.flattened is not None
        flat, fields = self.flattened, self.flat_fields

        def absent(*names: str) -> Column:
            out = F.lit(True)
            for name in names:
                if name in fields:
                    out = out & d[name].isNull()
            return out

        checks = [(op.isNull(), flat.op_field, "every flattened record")]
        checks += [
            (absent(f, f.replace("source_", "", 1)), f, f"ordering: {self.ordering}")
            for f in flat.position_fields(self.ordering)
        ]
        return [(m, F.lit(missing_field_error(f, flat, why))) for m, f, why in checks]

    def _undecoded(self, d: Column) -> Column:
        """``from_avro``'s permissive result for bytes that do not decode: every field null, the
        envelope's required ones (``op``, ``source``; a flattened record's own) included."""
        from pyspark.sql import functions as F

        shape = self.flat_fields if self.flattened is not None else self.envelope
        required = [name for name, f in shape.items() if not f.get("optional", False)] or list(shape)
        if not required:
            return F.lit(False)
        # a flattened record's required fields are the row's NOT NULL columns: as many as the
        # table has, so nested as a balanced tree (cdclake.spark.flat)
        return all_of([d[name].isNull() for name in required])

    def _top(self, d: Column, name: str, typ: str) -> Column:
        from pyspark.sql import functions as F

        return d[name].try_cast(typ) if name in self.envelope else F.lit(None).cast(typ)

    def _block(self, d: Column, block: str, fields: tuple[tuple[str, str], ...]) -> Column:
        """The envelope's struct ``block`` (``source``, ``transaction``) with ``fields`` (name,
        Spark type); a field the writer schema lacks is null."""
        from pyspark.sql import functions as F

        present = {f["field"] for f in (self.envelope.get(block) or {}).get("fields", ())}
        if not present:
            return F.lit(None)
        return F.when(
            d[block].isNotNull(),
            F.struct(
                *[
                    (d[block][name].try_cast(typ) if name in present else F.lit(None).cast(typ)).alias(name)
                    for name, typ in fields
                ]
            ),
        )

    def _image(self, d: Column, image: str) -> Column:
        from pyspark.sql import functions as F

        if self.envelope.get(image, {}).get("type") != "struct":
            return F.lit(None)
        values = []
        for c in self.columns:
            read_type = self.read_types.get(c.name) or json_read_type(c.encoding)
            if c.name in self.fields and c.name not in self.misfits:
                writer_name, writer_field = self.fields[c.name]
                value = _json_value(d[image][writer_name], writer_field, read_type)
                factor = self.conversions[c.name].factor
                if factor != 1:  # a coarser temporal unit (ms) into the table's finer one (us)
                    value = (value.cast("bigint") * factor).cast(read_type)
            else:
                value = F.lit(None).cast(read_type)
            values.append(value.alias(c.name))
        return F.when(d[image].isNotNull(), F.struct(*values))


def avro_read_types(columns: list[ColumnSpec]) -> dict[str, str]:
    """Column -> the type an Avro value is read as where it is not its JSON read type: ``binary``
    for a Connect decimal of an Iceberg decimal type (38 digits at most), its unscaled bytes as the
    writer wrote them (:func:`~cdclake.spark.decode.decimal_of_bytes_sql`), where JSON holds their
    base64 text. A column the table can take from a writer column holds the same encoding
    (:func:`~cdclake.model.interchange.conversion`: a decimal only from a decimal), so every writer
    schema gives bytes."""
    return {
        c.name: "binary"
        for c in columns
        if parse_decimal_encoding(c.encoding) is not None and iceberg_type_of_encoding(c.encoding) != "string"
    }
