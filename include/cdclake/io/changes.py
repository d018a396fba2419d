"""The change feed table through pyiceberg (:mod:`cdclake.model.changes` has its layout): created
beside its table and kept in step with the table's columns, and its retention."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from cdclake.io.catalog import load_table_or_none
from cdclake.io.positions import expressions
from cdclake.io.refs import ancestry
from cdclake.io.side_tables import ensure_image_table, image_schema
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
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


def ensure_changes_table(catalog: Catalog, identifier: str, table: Table) -> Table:
    """The change feed of ``table`` (``identifier``), ``<identifier>__changes``: created when missing
    (partitioned by day of ``_cdc_source_ts``), else given the columns ``table`` gained and the
    types it widened since (:func:`~cdclake.io.side_tables.ensure_image_table`).

    Raises:
        pyiceberg's ValidationError: a column of ``table`` has a type the feed's column of that
            name cannot be promoted to.
    """
    feed = side_table(identifier, CHANGES_SUFFIX)
    wanted = image_schema(table.schema(), FEED_COLUMNS, {"_cdc_op": OP_DOC})
    changes, changed = ensure_image_table(
        catalog, feed, wanted, CHANGES_TABLE_PROPERTIES, day_partition=PARTITION_SOURCE
    )
    if changed:
        log.info("table %s: its change feed %s took the table's columns", identifier, feed)
    return changes


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
    kept), oldest first: :func:`~cdclake.model.changes.committed_runs` over its ancestry.

    Raises:
        ChangeFeedGapError: ``after`` is no longer in the table's history.
    """
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
