"""The change feed table through pyiceberg (:mod:`cdclake.model.changes` has its layout): created
beside its table and kept in step with the table's columns, and its retention."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from cdclake.io.catalog import ancestry, iceberg_type, iceberg_type_name, load_table_or_none
from cdclake.io.positions import expressions
from cdclake.model.changes import (
    BASE_SNAPSHOT_COLUMN,
    CHANGES_SUFFIX,
    CHANGES_TABLE_PROPERTIES,
    FEED_COLUMNS,
    OP_DOC,
    PARTITION_SOURCE,
    RUN_ID_COLUMN,
    RunCommit,
    committed_runs,
    retention_cutoff_ms,
)
from cdclake.model.layout import side_table

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


def _feed_schema(table: Table) -> Schema:
    """The change feed's schema for ``table``: its columns (source and metadata columns, in order),
    all optional (a delete has no after image, a truncate no key), then :data:`FEED_COLUMNS`."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    own = table.schema()
    fields = [
        NestedField(f.field_id, f.name, f.field_type, required=False, doc=OP_DOC if f.name == "_cdc_op" else f.doc)
        for f in own.fields
    ]
    fields += [
        NestedField(i, name, iceberg_type(typ), required=False, doc=doc)
        for i, (name, typ, doc) in enumerate(FEED_COLUMNS, start=own.highest_field_id + 1)
    ]
    return Schema(*fields)


def ensure_changes_table(catalog: Catalog, identifier: str, table: Table) -> Table:
    """The change feed of ``table`` (``identifier``), ``<identifier>__changes``: created when missing
    (partitioned by day of ``_cdc_source_ts``), else given the columns ``table`` gained and the
    types it widened since (Iceberg's union by name: a column the table dropped stays).

    Raises:
        pyiceberg's ValidationError: a column of ``table`` has a type the feed's column of that
            name cannot be promoted to (a source column renamed aside and added again with an
            incompatible type).
    """
    from pyiceberg.exceptions import TableAlreadyExistsError
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform

    feed = side_table(identifier, CHANGES_SUFFIX)
    wanted = _feed_schema(table)
    existing = load_table_or_none(catalog, feed)
    if existing is None:
        source = wanted.find_field(PARTITION_SOURCE)
        spec = PartitionSpec(
            PartitionField(source.field_id, 1000, DayTransform(), f"{PARTITION_SOURCE}_day"), spec_id=0
        )
        try:
            created = catalog.create_table(
                feed, schema=wanted, partition_spec=spec, properties=CHANGES_TABLE_PROPERTIES
            )
        except TableAlreadyExistsError:
            return catalog.load_table(feed)
        log.info("table %s: created its change feed %s", identifier, feed)
        return created
    # by type name: the fields of a struct column have ids of each table's own
    have = {f.name: iceberg_type_name(f.field_type) for f in existing.schema().fields}
    if all(have.get(f.name) == iceberg_type_name(f.field_type) for f in wanted.fields):
        return existing
    with existing.update_schema() as update:
        update.union_by_name(wanted)
    log.info("table %s: its change feed %s took the table's columns", identifier, feed)
    return existing.refresh()


def expire_changes(catalog: Catalog, identifier: str, retention_days: int, *, now_ms: int | None = None) -> int:
    """Delete the change rows of ``identifier``'s change feed whose source time is older than
    ``retention_days`` whole days (:func:`~cdclake.model.changes.retention_cutoff_ms`): whole day
    partitions, so no data file is rewritten. Rows without a source time are kept.

    Returns:
        The number of change rows deleted (0 when the table has no change feed).
    """
    e = expressions()
    changes = load_table_or_none(catalog, side_table(identifier, CHANGES_SUFFIX))
    if changes is None:
        return 0
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    expired = e.LessThan(PARTITION_SOURCE, retention_cutoff_ms(now_ms, retention_days) * 1000)
    n = changes.scan(row_filter=expired, selected_fields=(PARTITION_SOURCE,)).to_arrow().num_rows
    if n:
        changes.delete(delete_filter=expired, snapshot_properties={"cdc.maintenance": "expire-changes"})
    return n


def runs_after(table: Table, topic: str, after: int | None = None) -> list[RunCommit]:
    """The runs committed to ``table`` after its snapshot ``after`` (``None``: all the history
    kept), oldest first: :func:`~cdclake.model.changes.committed_runs` over its ancestry."""
    return committed_runs(((i, s) for i, _, s in ancestry(table)), topic, after=after)


def changes_of(catalog: Catalog, identifier: str, run: RunCommit) -> pa.Table:
    """The change rows of ``run``'s commit on ``identifier`` (the rows of its run id on its
    previous snapshot, :mod:`cdclake.model.changes`), from the change feed's current snapshot.
    A reader compares their number with ``run.changes_rows``.

    Raises:
        LookupError: ``identifier`` has no change feed, or ``run`` wrote none (``changes_rows``
            is ``None``: the table had no change feed then).
    """
    e = expressions()
    changes = load_table_or_none(catalog, side_table(identifier, CHANGES_SUFFIX))
    if changes is None or run.changes_rows is None:
        raise LookupError(f"table {identifier}: run {run.run_id!r} wrote no change feed")
    base = run.previous_snapshot_id
    ours = e.And(
        e.EqualTo(RUN_ID_COLUMN, run.run_id),
        e.IsNull(BASE_SNAPSHOT_COLUMN) if base is None else e.EqualTo(BASE_SNAPSHOT_COLUMN, base),
    )
    return changes.scan(row_filter=ours).to_arrow()
