"""The history table through pyiceberg (:mod:`cdclake.model.history` has its layout): created beside
its table and kept in step with the table's columns, and read as of a source time."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from cdclake.io.catalog import load_table_or_none
from cdclake.io.positions import expressions
from cdclake.io.side_tables import ensure_image_table, image_schema
from cdclake.model.format_version import FORMAT_VERSION_PROPERTY, SIDE_TABLE_FORMAT_VERSION
from cdclake.model.history import (
    HISTORY_COLUMNS,
    HISTORY_SUFFIX,
    IS_DELETED_COLUMN,
    VALID_FROM_TS_COLUMN,
    VALID_TO_TS_COLUMN,
)
from cdclake.model.layout import TABLE_PROPERTIES, side_table

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

OP_DOC = "Debezium op of the event that made the version: c, u, r or d (a deleted version)"
"""The doc of ``_cdc_op`` in the history."""


def ensure_history_table(catalog: Catalog, identifier: str, table: Table) -> Table:
    """The history of ``table`` (``identifier``), ``<identifier>__history``: created when missing
    (merge-on-read, as the table: runs update its open versions; format v2,
    :data:`~cdclake.model.format_version.SIDE_TABLE_FORMAT_VERSION`), else given the columns ``table``
    gained and the types it widened since (:func:`~cdclake.io.side_tables.ensure_image_table`).

    Raises:
        pyiceberg's ValidationError: a column of ``table`` has a type the history's column of that
            name cannot be promoted to.
    """
    name = side_table(identifier, HISTORY_SUFFIX)
    wanted = image_schema(table.schema(), HISTORY_COLUMNS, {"_cdc_op": OP_DOC})
    # a side table: v2 whatever the table's format version (reconcile's repairs write it with pyiceberg)
    properties = {**TABLE_PROPERTIES, FORMAT_VERSION_PROPERTY: str(SIDE_TABLE_FORMAT_VERSION)}
    history, changed = ensure_image_table(catalog, name, wanted, properties)
    if changed:
        log.info("table %s: its history %s has the table's columns", identifier, name)
    return history


def history_as_of(catalog: Catalog, identifier: str, at: datetime) -> pa.Table:
    """The rows of ``identifier`` as they were at source time ``at`` (timezone-aware), from its
    history: the versions valid then, deleted versions left out (:mod:`cdclake.model.history`,
    "As of a time").

    Raises:
        LookupError: ``identifier`` has no history.
        ValueError: ``at`` has no timezone.
    """
    if at.tzinfo is None:
        raise ValueError(f"history_as_of needs a timezone-aware time, not {at!r}")
    history = load_table_or_none(catalog, side_table(identifier, HISTORY_SUFFIX))
    if history is None:
        raise LookupError(f"table {identifier}: no history (history in its table config)")
    e = expressions()
    micros = round(at.timestamp() * 1_000_000)
    valid = e.And(
        e.LessThanOrEqual(VALID_FROM_TS_COLUMN, micros),
        e.Or(e.GreaterThan(VALID_TO_TS_COLUMN, micros), e.IsNull(VALID_TO_TS_COLUMN)),
        e.EqualTo(IS_DELETED_COLUMN, False),
    )
    return history.scan(row_filter=valid).to_arrow()
