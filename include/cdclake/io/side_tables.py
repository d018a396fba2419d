"""The tables beside a CDC table through pyiceberg: side tables of plain columns (tombstones,
quarantine), and tables of a CDC table's row images (its change feed, its history), created and
kept in step with the table's columns."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from cdclake.io.catalog import load_table_or_none
from cdclake.io.schema_evolution import ensure_columns, iceberg_type, iceberg_type_name
from cdclake.model.layout import SIDE_TABLE_PROPERTIES

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


def ensure_side_table(
    catalog: Catalog,
    identifier: str,
    columns: list[tuple[str, str, bool]],
    docs: dict[str, str] | None = None,
) -> Table:
    """Create ``identifier`` with ``(name, Iceberg type, required)`` columns unless it exists.

    An existing table follows ``columns``: a column it lacks is added (optional: its rows have
    none), and a required column no longer among ``columns`` becomes optional. So a tombstone table
    follows a primary key changed at the source (``DROP PRIMARY KEY, ADD PRIMARY KEY (id, tenant)``):
    the new key's columns are added, the old key's stop being required, and the tombstones of the
    old key, null in the new columns, match no row of the new one."""
    from pyiceberg.exceptions import TableAlreadyExistsError
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    docs = docs or {}
    existing = load_table_or_none(catalog, identifier)
    if existing is not None:
        table = ensure_columns(existing, [(n, t, docs.get(n, "")) for n, t, _ in columns])
        wanted = {n for n, _, _ in columns}
        stale = [f.name for f in table.schema().fields if f.required and f.name not in wanted]
        if not stale:
            return table
        with table.update_schema() as update:
            for name in stale:
                update.make_column_optional(name)
        log.info("table %s: column(s) %s no longer required", identifier, stale)
        return table.refresh()
    fields = [
        NestedField(i, name, iceberg_type(typ), required=req, doc=docs.get(name))
        for i, (name, typ, req) in enumerate(columns, start=1)
    ]
    catalog.create_namespace_if_not_exists(identifier.rsplit(".", 1)[0])
    try:
        return catalog.create_table(identifier, schema=Schema(*fields), properties=dict(SIDE_TABLE_PROPERTIES))
    except TableAlreadyExistsError:
        return catalog.load_table(identifier)


def image_schema(own: Schema, own_columns: Iterable[tuple[str, str, str]], docs: Mapping[str, str]) -> Schema:
    """The schema of a table of a CDC table's row images (its change feed, its history): the
    columns of the table's schema ``own`` (source and metadata columns, in order, all optional: a
    delete has no after image, a truncate no key; ``docs`` replace a column's doc), then
    ``own_columns`` (``(name, Iceberg type, doc)``, ids after ``own``'s)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    fields = [
        NestedField(f.field_id, f.name, f.field_type, required=False, doc=docs.get(f.name, f.doc)) for f in own.fields
    ]
    ids = itertools.count(own.highest_field_id + 1)
    for name, typ, doc in own_columns:
        field_id = next(ids)
        fields.append(NestedField(field_id, name, iceberg_type(typ, ids), required=False, doc=doc))
    return Schema(*fields)


def ensure_image_table(
    catalog: Catalog,
    identifier: str,
    wanted: Schema,
    properties: Mapping[str, str],
    *,
    day_partition: str | None = None,
) -> tuple[Table, bool]:
    """``identifier`` with the schema ``wanted`` (:func:`image_schema`): created when missing
    (partitioned by day of ``day_partition``, when given), else given the columns ``wanted`` has
    and it lacks and the types ``wanted`` widened (Iceberg's union by name: a column the table
    dropped stays). Returns the table and whether it changed (created or evolved).

    Raises:
        pyiceberg's ValidationError: a column of ``wanted`` has a type the existing column of that
            name cannot be promoted to (a source column renamed aside and added again with an
            incompatible type).
    """
    from pyiceberg.exceptions import TableAlreadyExistsError
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform

    existing = load_table_or_none(catalog, identifier)
    if existing is None:
        spec = UNPARTITIONED_PARTITION_SPEC
        if day_partition is not None:
            source = wanted.find_field(day_partition)
            spec = PartitionSpec(
                PartitionField(source.field_id, 1000, DayTransform(), f"{day_partition}_day"), spec_id=0
            )
        try:
            return catalog.create_table(
                identifier, schema=wanted, partition_spec=spec, properties=dict(properties)
            ), True
        except TableAlreadyExistsError:
            return catalog.load_table(identifier), False
    # by type name: the fields of a struct column have ids of each table's own
    have = {f.name: iceberg_type_name(f.field_type) for f in existing.schema().fields}
    if all(have.get(f.name) == iceberg_type_name(f.field_type) for f in wanted.fields):
        return existing, False
    with existing.update_schema() as update:
        update.union_by_name(wanted)
    return existing.refresh(), True
