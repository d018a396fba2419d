"""A table's Iceberg schema through pyiceberg: Iceberg type names to pyiceberg types and back,
the source schema read back from a table, and the columns added and evolved
(:mod:`cdclake.model.schema_diff` plans the changes)."""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cdclake.errors import SchemaError
from cdclake.model.layout import METADATA_COLUMN_NAMES, column_encodings, column_encodings_property
from cdclake.model.schema_diff import ChangePlan, SourceSchema
from cdclake.model.types import ColumnSpec, column_doc, parse_decimal_type

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.types import IcebergType

log = logging.getLogger(__name__)


def source_schema(table: Table) -> SourceSchema:
    """The source part of ``table``'s current schema (metadata columns left out), with the
    encodings recorded in its properties (``""`` for a column without one)."""
    encodings = column_encodings(table.properties)
    schema = table.schema()
    columns = tuple(
        ColumnSpec(f.name, iceberg_type_name(f.field_type), f.required, encodings.get(f.name, ""))
        for f in schema.fields
        if f.name not in METADATA_COLUMN_NAMES
    )
    return SourceSchema(columns, tuple(sorted(schema.identifier_field_names())))


def source_columns(table: Table) -> tuple[ColumnSpec, ...]:
    """The table's source columns with their recorded encodings (:func:`source_schema`), in order.

    Raises:
        SchemaError: a column has no recorded encoding (the table was not created by cdclake).
    """
    columns = source_schema(table).columns
    missing = [c.name for c in columns if not c.encoding]
    if missing:
        raise SchemaError(f"table {table.name()}: column(s) {missing} have no recorded encoding")
    return columns


def identifier_fields(table: Table | None) -> tuple[str, ...] | None:
    """The table's identifier field names (``None`` when the table does not exist)."""
    return None if table is None else tuple(table.schema().identifier_field_names())


def ensure_columns(table: Table, columns: Iterable[tuple[str, str, str]]) -> Table:
    """Add the ``(name, Iceberg type, doc)`` columns ``table`` lacks, optional (metadata columns
    added by a later version, such as ``_cdc_gtid_seq``); their value in existing rows is null.
    Returns the table, refreshed when it changed."""
    names = {f.name for f in table.schema().fields}
    missing = [(n, t, d) for n, t, d in columns if n not in names]
    if not missing:
        return table
    with table.update_schema() as update:
        for name, typ, doc in missing:
            update.add_column(name, iceberg_type(typ), doc=doc or None)
    log.info("table %s: added column(s) %s", ".".join(table.name()), [n for n, _, _ in missing])
    return table.refresh()


def evolve_schema(table: Table, plans: Sequence[ChangePlan], properties: Mapping[str, str]) -> Table:
    """Apply the schema ``plans`` in order (:class:`~cdclake.model.schema_diff.ChangePlan`: each
    plan's renames in one schema update, then the rest in another) and set ``properties`` with the
    last plan's column encodings, in ONE Iceberg transaction; returns the table refreshed."""
    # nested field ids (struct<wkb,srid>) are placeholders: add_column assigns fresh ones
    placeholder_ids = itertools.count(1_000_000)
    with table.transaction() as txn:
        for plan in plans:
            if plan.renames:
                with txn.update_schema() as update:
                    for old, new in plan.renames:
                        update.rename_column(old, new)
            if plan.is_empty:
                continue
            with txn.update_schema() as update:
                for spec, after in plan.adds:
                    update.add_column(
                        spec.name,
                        iceberg_type(spec.iceberg_type, placeholder_ids),
                        required=False,
                        doc=column_doc(spec.encoding),
                    )
                    if after is None:
                        update.move_first(spec.name)
                    else:
                        update.move_after(spec.name, after)
                for name, new_type in plan.promotions:
                    update.update_column(name, field_type=iceberg_type(new_type))
                for name in plan.optional:
                    update.make_column_optional(name)
                if plan.identifier is not None:
                    update.set_identifier_fields(*plan.identifier)
                for name in plan.deletes:
                    update.delete_column(name)
        txn.set_properties({**properties, **(column_encodings_property(plans[-1].encodings) if plans else {})})
    return table.refresh()


_STRUCT_TYPE = re.compile(r"^struct<(.*)>$")


_SIMPLE_TYPES = ("boolean", "int", "long", "float", "double", "date", "timestamp", "timestamptz", "string", "binary")


def iceberg_type(name: str, nested_ids: Iterator[int] | None = None) -> IcebergType:
    """The pyiceberg type of an Iceberg type name: a primitive, ``decimal(P,S)``, or
    ``struct<name:primitive,...>`` (optional fields, ids from ``nested_ids``).

    Raises:
        ValueError: an unknown type name, or a struct without ``nested_ids``.
    """
    from pyiceberg import types as t

    struct = _STRUCT_TYPE.match(name)
    if struct is not None:
        if nested_ids is None:
            raise ValueError(f"Iceberg type {name!r} needs ids for its fields")
        members = [m.split(":", 1) for m in struct.group(1).split(",")]
        return t.StructType(
            *[t.NestedField(next(nested_ids), fname, iceberg_type(ftype), required=False) for fname, ftype in members]
        )
    if name in _SIMPLE_TYPES:
        primitive: IcebergType = t.PrimitiveType.model_validate(name)
        return primitive
    dec = parse_decimal_type(name)
    if dec is not None:
        return t.DecimalType(*dec)
    raise ValueError(f"unknown Iceberg type {name!r}")


def iceberg_type_name(field_type: Any) -> str:
    """Inverse of :func:`iceberg_type`: a pyiceberg type as this project names it
    (``decimal(P,S)`` without a space, ``struct<wkb:binary,srid:int>``)."""
    from pyiceberg.types import DecimalType, StructType

    if isinstance(field_type, DecimalType):
        return f"decimal({field_type.precision},{field_type.scale})"
    if isinstance(field_type, StructType):
        return "struct<" + ",".join(f"{f.name}:{iceberg_type_name(f.field_type)}" for f in field_type.fields) + ">"
    return str(field_type)
