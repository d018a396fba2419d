"""Decoding Debezium JSON values into Iceberg values, column-wise in Spark SQL.

Each column is read by ``from_json`` as the Spark type of its encoding (:func:`json_read_type`)
and turned into its Iceberg value by :func:`decode`, exactly: decimals of any precision from
base64 big-endian two's-complement bytes or JSON numbers, BIT bytes reversed into MySQL order,
temporal types by their Debezium unit, with no Spark session time zone involved (a DATETIME is
an Iceberg ``timestamp`` computed from the epoch without a zone; a ``ZonedTimestamp`` is read by
its own offset). The rules per encoding are in :mod:`cdclake.model.types`. A value that does not
fit decodes to null, never an error that would fail the batch under ANSI mode, and
:mod:`cdclake.spark.parse` reports its record with :func:`misfit_reason`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdclake.errors import SchemaError
from cdclake.model.defaults import spark_type
from cdclake.model.types import (
    CONNECT_PRIMITIVES,
    SPATIAL_ENCODINGS,
    UNSIGNED_INT64,
    VARIABLE_SCALE_DECIMAL,
    ColumnSpec,
    iceberg_type_of_encoding,
    parse_decimal_encoding,
)

if TYPE_CHECKING:
    from pyspark.sql import Column


_JSON_READ_TYPE = {
    # a Connect primitive reads as the Spark type of its Iceberg type; bytes as their base64 text
    **{encoding: spark_type(iceberg_type).lower() for encoding, iceberg_type in CONNECT_PRIMITIVES.items()},
    "bytes": "string",
    UNSIGNED_INT64: "bigint",
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
    "io.debezium.data.Xml": "string",
    "io.debezium.data.Bits": "string",
    VARIABLE_SCALE_DECIMAL: "struct<scale:int,value:string>",
    "io.debezium.data.geometry.Geometry": "struct<wkb:string,srid:int>",
    "io.debezium.data.geometry.Geography": "struct<wkb:string,srid:int>",
    "io.debezium.data.geometry.Point": "struct<x:double,y:double,wkb:string,srid:int>",
}
"""Spark type that ``from_json`` reads each encoding as, before :func:`decode`. Decimals are read
as ``variant`` (see :func:`json_read_type`)."""


def json_read_type(encoding: str) -> str:
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
        f"hex(try_to_binary({base64_sql}, 'base64'))",
        "h",
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
        unscaled_sql,
        "v",
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


def is_json_null(raw: Column, encoding: str, read_type: str | None = None) -> Column:
    """The value read is null (a ``variant`` holds JSON null as a value of its own); ``read_type``:
    the type it was read as, by default :func:`json_read_type`."""
    from pyspark.sql import functions as F

    if (read_type or json_read_type(encoding)) == "variant":
        return raw.isNull() | F.is_variant_null(raw)
    return raw.isNull()


MAX_BYTES_DECIMAL_LENGTH = 16
"""The unscaled values :func:`decimal_of_bytes_sql` reads: 128 bits hold every value of 38
digits, Spark's widest decimal (Connect writes the shortest two's complement; longer bytes are
read when what precedes their last 16 only extends the sign)."""


def decimal_of_bytes_sql(bytes_sql: str, iceberg_type: str, scale: int) -> str:
    """SQL of the Iceberg decimal (``iceberg_type``, of at most 38 digits) of a Connect
    ``Decimal``'s raw unscaled bytes (big-endian two's complement; Kafka Connect's ``Decimal``
    logical type) at ``scale``: null when the value does not fit the type.

    The same values as :func:`decode` gives from their base64 text, without its digit arithmetic
    in lambda functions (which Spark evaluates row by row, outside generated code): the last
    :data:`MAX_BYTES_DECIMAL_LENGTH` bytes (any before them must only extend the sign), their
    magnitude (of a negative value: its one's complement plus one) read as two unsigned 64-bit
    halves (``conv`` of 16 hex digits), ``high * 2^64 + low`` in ``decimal(38,0)`` (``try_``:
    null past 38 digits), and the text ``<sign><digits>E-<scale>`` cast exactly to the type."""
    width = 2 * MAX_BYTES_DECIMAL_LENGTH
    full = f"hex({bytes_sql})"
    low = f"right({full}, {width})"
    lead = f"left({full}, length({full}) - {width})"
    h = (
        f"(CASE WHEN length({bytes_sql}) <= {MAX_BYTES_DECIMAL_LENGTH} THEN {full} "
        f"WHEN {lead} RLIKE '^(00)+$' AND left({low}, 1) < '8' THEN {low} "
        f"WHEN {lead} RLIKE '^(FF)+$' AND left({low}, 1) >= '8' THEN {low} END)"
    )
    neg = f"(left({h}, 1) >= '8')"
    magnitude_hex = f"if({neg}, translate(lpad({h}, {width}, 'F'), '0123456789ABCDEF', 'FEDCBA9876543210'), lpad({h}, {width}, '0'))"
    half = [f"CAST(conv(substr({magnitude_hex}, {start}, 16), 16, 10) AS DECIMAL(20,0))" for start in (1, 17)]
    magnitude = f"try_add(try_add(try_multiply({half[0]}, {2**64}BD), {half[1]}), if({neg}, 1BD, 0BD))"
    text = f"concat(if({neg}, '-', ''), CAST({magnitude} AS STRING), 'E-{scale}')"
    return f"try_cast({text} AS {spark_type(iceberg_type)})"


_EPOCH_NTZ = "TIMESTAMP_NTZ'1970-01-01 00:00:00'"
"""The epoch as a ``timestamp_ntz``: a DATETIME is this plus its Debezium amount, so no session
time zone enters (``timestamp_millis(..)`` is an instant, and casting it to ``timestamp_ntz``
would shift it by the session time zone)."""

_ZONE_SUFFIX = "(Z|[+-][0-9]{2}(:?[0-9]{2}(:?[0-9]{2})?)?)$"
"""The offset a ``ZonedTimestamp`` ends with (ISO-8601, Debezium writes ``Z``); text without one
would be read in the session time zone, so it is a bad record."""

_WRAP = 2**64
"""What Debezium's ``bigint.unsigned.handling.mode=long`` took off a BIGINT UNSIGNED above 2^63-1."""


def decode(raw_sql: str, encoding: str, read_type: str | None = None) -> Column:
    """Turn the JSON-level value of a column (SQL ``raw_sql``) into its Iceberg value (see
    :mod:`cdclake.model.types`). The result is null for a non-null value that does not fit (bad
    base64, digits beyond the column's scale or precision, sub-microsecond nanoseconds, a WKB-less
    spatial value, a ``ZonedTimestamp`` that is not ISO-8601 with an offset, a negative
    ``int64(unsigned)``): :func:`parse_records` reports it (:func:`misfit_reason`).

    ``read_type``: the type the value was read as, by default :func:`json_read_type`; else only
    ``binary`` for a decimal of an Iceberg decimal type, its raw unscaled bytes (an Avro
    reader's, :func:`decimal_of_bytes_sql`).

    Raises:
        SchemaError: a ``read_type`` this encoding cannot be decoded from.
    """
    from pyspark.sql import functions as F

    if read_type is not None and read_type != json_read_type(encoding):
        dec = parse_decimal_encoding(encoding)
        iceberg = iceberg_type_of_encoding(encoding)
        if read_type != "binary" or dec is None or iceberg == "string":
            raise SchemaError(f"column encoding {encoding!r} cannot be decoded from {read_type}")
        return F.expr(decimal_of_bytes_sql(raw_sql, iceberg, dec[1]))
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
        return F.expr(f"timestampadd(MILLISECOND, {raw_sql}, {_EPOCH_NTZ})")
    if encoding == "io.debezium.time.MicroTimestamp":
        return F.expr(f"timestampadd(MICROSECOND, {raw_sql}, {_EPOCH_NTZ})")
    if encoding == "io.debezium.time.NanoTimestamp":
        return F.when(raw % 1000 == 0, F.expr(f"timestampadd(MICROSECOND, {raw_sql} div 1000, {_EPOCH_NTZ})"))
    if encoding == "io.debezium.time.ZonedTimestamp":
        # try_cast: a malformed text is a bad record of its own, not an error failing the batch (ANSI)
        return F.when(raw.rlike(_ZONE_SUFFIX), F.expr(f"try_cast({raw_sql} AS timestamp)"))
    if encoding == UNSIGNED_INT64:
        return F.when(raw >= 0, raw)
    if encoding in ("io.debezium.time.Time", "org.apache.kafka.connect.data.Time"):
        return raw.cast("bigint") * 1000
    if encoding == "io.debezium.time.NanoTime":
        return F.when(raw % 1000 == 0, F.expr(f"{raw_sql} div 1000"))
    if encoding in SPATIAL_ENCODINGS:
        return F.when(
            raw["wkb"].isNotNull(), F.struct(F.expr(base64(f"{raw_sql}.wkb")).alias("wkb"), raw["srid"].alias("srid"))
        )
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


_FALLIBLE_ENCODINGS = frozenset(
    {
        "bytes",
        "io.debezium.data.Bits",
        "io.debezium.time.NanoTimestamp",
        "io.debezium.time.NanoTime",
        "io.debezium.time.ZonedTimestamp",
        UNSIGNED_INT64,
        VARIABLE_SCALE_DECIMAL,
        *SPATIAL_ENCODINGS,
    }
)
"""Encodings whose :func:`decode` can turn a non-null value into null (it does not fit), besides
decimals."""


def is_fallible(encoding: str) -> bool:
    return encoding in _FALLIBLE_ENCODINGS or parse_decimal_encoding(encoding) is not None


MAX_REPORTED_VALUE_CHARS = 100
"""How much of a value an error quotes."""


def value_text(raw: Column, read_type: str) -> Column:
    """A JSON-level value (read as ``read_type``, :func:`json_read_type`) as an error quotes it:
    text in quotes, numbers as they are, structs and variants as JSON; at most
    :data:`MAX_REPORTED_VALUE_CHARS` characters."""
    from pyspark.sql import functions as F

    if read_type == "string":
        text = F.concat(F.lit("'"), raw, F.lit("'"))
    elif read_type == "binary":  # as JSON quotes the same bytes: their base64 text in double quotes
        text = F.concat(F.lit('"'), F.replace(F.base64(raw), F.lit("\r\n"), F.lit("")), F.lit('"'))
    elif read_type == "variant" or read_type.startswith("struct"):
        text = F.to_json(raw)
    else:
        text = raw.cast("string")
    return F.substring(text, 1, MAX_REPORTED_VALUE_CHARS)


def misfit_reason(column: ColumnSpec, raw_sql: str, read_type: str | None = None) -> Column:
    """The error of a record whose ``column`` value (SQL ``raw_sql``, read as ``read_type``, by
    default :func:`json_read_type`) :func:`decode` turned into null: the column, the value, the
    table's type and the encoding; for a wrapped BIGINT UNSIGNED, the source value and the
    connector setting to change."""
    from pyspark.sql import functions as F

    raw = F.expr(raw_sql)
    if column.encoding == UNSIGNED_INT64:
        return F.format_string(
            f"column {column.name!r}: value %s is BIGINT UNSIGNED %s wrapped past 2^63-1 by the connector's "
            "bigint.unsigned.handling.mode=long; a long column cannot hold it. Set "
            "bigint.unsigned.handling.mode=precise on the connector and `connector: "
            "{bigint_unsigned_handling_mode: precise}` in the table config, then re-create the table "
            '(docs/operations.md, "BIGINT UNSIGNED above 2^63-1")',
            raw.cast("string"),
            (raw.cast("decimal(20,0)") + F.expr(str(_WRAP))).cast("string"),
        )
    return F.format_string(
        f"column {column.name!r}: value %s does not fit {column.iceberg_type} (encoding {column.encoding})",
        value_text(raw, read_type or json_read_type(column.encoding)),
    )
