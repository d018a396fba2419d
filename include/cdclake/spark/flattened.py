"""Flattened change events read as envelopes (Spark): the column-wise form of
:func:`cdclake.model.flattened.envelope_doc`, for the JSON parse (:mod:`cdclake.spark.parse`)
and the Avro one (:mod:`cdclake.spark.parse_avro`).

A flattened record (Debezium's ``ExtractNewRecordState``: :mod:`cdclake.model.flattened`) holds
the row's columns and the transform's added fields side by side. :func:`envelope_of` builds the
envelope :func:`~cdclake.spark.parse.records_from_envelopes` reads: the row as ``before`` for a
delete and as ``after`` otherwise, ``source``, ``transaction``, ``op`` and ``ts_ms`` from the added
fields. Nothing after the parse knows a record was flattened.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from cdclake.model.flattened import DELETED_FIELD, SOURCE_NAMES, TOP_NAMES, TRANSACTION_NAMES, FlattenedRecords

if TYPE_CHECKING:
    from pyspark.sql import Column

Getter = Callable[[str], "Column | None"]
"""A field of the flattened record by its name; ``None`` when the record's schema has no such field."""

_TOP_TYPES = {"op": "string", "ts_ms": "bigint"}


def added_fields(
    flat: FlattenedRecords,
    source_fields: Iterable[tuple[str, str]],
    transaction_fields: Iterable[tuple[str, str]],
) -> dict[str, str]:
    """Every name the transform may give a metadata field the apply reads -> its Spark type (the
    ``source`` and ``transaction`` fields of ``source_fields`` and ``transaction_fields``, as
    :data:`~cdclake.spark.parse.SOURCE_FIELDS` lists them), and ``__deleted``."""
    out: dict[str, str] = {}
    for name, typ in _TOP_TYPES.items():
        out.update(dict.fromkeys(flat.added(TOP_NAMES[name]), typ))
    for fields, names in ((source_fields, SOURCE_NAMES), (transaction_fields, TRANSACTION_NAMES)):
        for name, typ in fields:
            out.update(dict.fromkeys(flat.added(names.get(name, ())), typ))
    out[DELETED_FIELD] = "string"
    return out


def _first(get: Getter, names: Iterable[str], typ: str) -> Column:
    from pyspark.sql import functions as F

    found = [c.try_cast(typ) for c in (get(n) for n in names) if c is not None]
    if not found:
        return F.lit(None).cast(typ)
    return found[0] if len(found) == 1 else F.coalesce(*found)


def envelope_of(
    get: Getter,
    row: Column,
    flat: FlattenedRecords,
    source_fields: Iterable[tuple[str, str]],
    transaction_fields: Iterable[tuple[str, str]],
) -> Column:
    """The envelope of a flattened record: ``struct<before, after, source, op, ts_ms,
    transaction>`` (:func:`cdclake.spark.parse.envelope_type`'s fields), from its fields
    (``get``) and its row image (``row``, a struct of the table's columns). The op is ``__op``,
    else ``d`` where ``__deleted`` is ``"true"``, else null (a bad record: the op is needed)."""
    from pyspark.sql import functions as F

    deleted = get(DELETED_FIELD)
    op = _first(get, flat.added(TOP_NAMES["op"]), "string")
    if deleted is not None:
        op = F.coalesce(op, F.when(F.lower(deleted.cast("string")) == "true", F.lit("d")))

    def block(fields: Iterable[tuple[str, str]], names: Mapping[str, tuple[str, ...]]) -> list[tuple[str, Column]]:
        return [(name, _first(get, flat.added(names.get(name, ())), typ)) for name, typ in fields]

    transaction = block(transaction_fields, TRANSACTION_NAMES)
    return F.struct(
        F.when(op == "d", row).alias("before"),
        F.when(op != "d", row).alias("after"),
        F.struct(*[c.alias(n) for n, c in block(source_fields, SOURCE_NAMES)]).alias("source"),
        op.alias("op"),
        _first(get, flat.added(TOP_NAMES["ts_ms"]), "bigint").alias("ts_ms"),
        F.when(transaction[0][1].isNotNull(), F.struct(*[c.alias(n) for n, c in transaction])).alias("transaction"),
    )
