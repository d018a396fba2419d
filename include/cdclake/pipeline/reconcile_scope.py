"""What one reconcile run compares (:mod:`cdclake.pipeline.reconcile`): the source table's columns
and key, the key range, the position of a source read, and the pyiceberg filters and tombstone
reads of the lake side."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdclake.errors import ReconcileError
from cdclake.io.catalog import load_table_or_none
from cdclake.io.positions import expressions
from cdclake.io.schema_evolution import source_schema
from cdclake.io.source_db import ComparedTable, SourceDatabase, SourceRead, source_columns
from cdclake.model.config import TableConfig
from cdclake.model.convergence import SourceIdentity
from cdclake.model.layout import TOMBSTONES_SUFFIX, side_table
from cdclake.model.position import SOURCE_ORDERINGS, BinlogPosition, parse_mariadb_gtid
from cdclake.model.reconcile import (
    Chunk,
    CompareColumn,
    KeyTuple,
    Kind,
    check_key_kinds,
    compare_columns,
    key_order_sql,
    key_to_lake,
    parse_key_value,
    read_position,
)

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

DUPLICATE = "<duplicate rows>"
"""The "column" a key differs in when the lake holds it more than once."""


@dataclass(frozen=True)
class ReconcileScope:
    """The comparison of one table with its source table.

    Attributes:
        cfg: the table config.
        database, table: the source table.
        key: the primary-key columns, in key order.
        columns: the columns compared (key included).
        skipped: the columns not compared, with the reason.
        where: ``(WHERE clause, parameters)`` of the source's rows in the key range (``1=1``: all).
        key_range: the inclusive key range in the lake's key values; ``None``: all keys.
    """

    cfg: TableConfig
    database: str
    table: str
    key: list[CompareColumn]
    columns: list[CompareColumn]
    skipped: dict[str, str]
    where: tuple[str, list[Any]]
    key_range: tuple[KeyTuple, KeyTuple] | None = None

    def in_key_range(self, key: KeyTuple) -> bool:
        """Whether the lake key ``key`` is in :attr:`key_range`."""
        if self.key_range is None:
            return True
        return bool(self.key_range[0] <= key <= self.key_range[1])

    @property
    def source(self) -> ComparedTable:
        """The source side of the comparison (:mod:`cdclake.io.source_db`)."""
        return ComparedTable(self.database, self.table, self.key, self.columns, self.where)


def reconcile_scope(
    db: SourceDatabase,
    cfg: TableConfig,
    lake: Table,
    *,
    key_range: tuple[KeyTuple, KeyTuple] | None = None,
    ignored_columns: Sequence[str] = (),
) -> ReconcileScope:
    """The scope of reconciling ``cfg``'s table ``lake`` with its source table.

    Args:
        key_range: ``(from, to)`` inclusive primary-key tuples limiting the run; ``None``: all.
        ignored_columns: columns never compared.

    Raises:
        ReconcileError: a changelog table, a table ordered by Kafka offset, a primary-key column that
            cannot be compared, or a ``key_range`` that does not fit the key.
        ConfigError: a primary-key column reconcile cannot chunk by.
    """
    if cfg.write_mode != "upsert":
        raise ReconcileError(
            f"table {cfg.identifier} is a {cfg.write_mode} table (every event a row): it does not mirror its "
            "source table, so reconcile does not compare it"
        )
    if cfg.ordering not in SOURCE_ORDERINGS:
        raise ReconcileError(
            f"table {cfg.identifier} is ordered by Kafka offset (ordering: {cfg.ordering}): its rows carry no "
            "binlog position to tell a change still in flight from a difference, so reconcile does not compare it"
        )
    _prefix, database, table = cfg.topic.rsplit(".", 2)
    src = source_columns(db, database, table)
    schema = source_schema(lake)
    columns, skipped = compare_columns(src, schema.columns, tuple(ignored_columns))
    by_name = {c.name: c for c in columns}
    missing = [k for k in cfg.primary_key if k not in by_name]
    if missing:
        raise ReconcileError(f"table {cfg.identifier}: primary-key column(s) {missing} cannot be compared ({skipped})")
    key = [by_name[k] for k in cfg.primary_key]
    check_key_kinds(cfg.identifier, key)
    where: tuple[str, list[Any]] = ("1=1", [])
    lake_range = None
    if key_range is not None:
        try:
            lo, hi = (tuple(parse_key_value(c.kind, v) for c, v in zip(key, b, strict=True)) for b in key_range)
        except ValueError as e:
            raise ReconcileError(
                f"table {cfg.identifier}: key_range {key_range} does not fit key {cfg.primary_key}: {e}"
            ) from e
        cols = "(" + ", ".join(key_order_sql(key)) + ")"
        marks = "(" + ", ".join("%s" for _ in key) + ")"
        where = (f"{cols} >= {marks} AND {cols} <= {marks}", [*lo, *hi])
        kinds = [c.kind for c in key]
        lake_range = (key_to_lake(kinds, lo), key_to_lake(kinds, hi))
    return ReconcileScope(cfg, database, table, key, columns, skipped, where, lake_range)


def read_position_of(cfg: TableConfig, identity: SourceIdentity | None, read: SourceRead) -> BinlogPosition:
    """The position of a consistent source read in the table's ordering
    (:func:`cdclake.model.reconcile.read_position`); under GTID ordering, of the table's GTID
    domain (domain 0 while the table has none)."""
    seq = None
    if cfg.ordering == "gtid":
        domain = identity.gtid_domain if identity is not None and identity.gtid_domain is not None else 0
        for part in read.gtid_pos.split(","):
            parsed = parse_mariadb_gtid(part) if part.strip() else None
            if parsed is not None and parsed[0] == domain:
                seq = parsed[2]
        seq = 0 if seq is None else seq
    return read_position(cfg.ordering, read.binlog_file_seq, read.binlog_pos, seq)


def lake_tombstones(catalog: Catalog, cfg: TableConfig, keys: set[KeyTuple]) -> dict[KeyTuple, dict[str, Any]]:
    """The delete tombstones of ``keys`` (row by key), from the table's tombstone table."""
    table = load_table_or_none(catalog, side_table(cfg.identifier, TOMBSTONES_SUFFIX))
    if table is None or not keys:
        return {}
    out = {}
    for batch in table.scan().to_arrow_batch_reader():
        for row in batch.to_pylist():
            key = tuple(row[c] for c in cfg.primary_key)
            if key in keys:
                out[key] = row
    return out


def chunks_filter(scope: ReconcileScope, chunks: Sequence[Chunk], wanted: set[int]) -> Any:
    """pyiceberg filter of the key ranges of the ``wanted`` chunks (single-column keys; ``None``
    for others)."""
    if len(scope.key) != 1 or scope.key[0].kind not in (Kind.INT, Kind.DECIMAL, Kind.DATE):
        return None
    e, name = expressions(), scope.key[0].name
    terms = []
    for c in chunks:
        if c.index in wanted:
            parts = []
            if c.lower is not None:
                parts.append(e.GreaterThan(name, c.lower[0]))
            if c.upper is not None:
                parts.append(e.LessThanOrEqual(name, c.upper[0]))
            terms.append(e.AlwaysTrue() if not parts else parts[0] if len(parts) == 1 else e.And(*parts))
    return balanced_or(terms) if terms else None


def keys_predicate(cfg: TableConfig, keys: list[KeyTuple]) -> Any:
    """pyiceberg filter selecting exactly ``keys`` (values bound by pyiceberg: binary keys too)."""
    e = expressions()
    if len(cfg.primary_key) == 1:
        return e.In(cfg.primary_key[0], {k[0] for k in keys})
    terms = [e.And(*[e.EqualTo(c, v) for c, v in zip(cfg.primary_key, k, strict=True)]) for k in keys]
    return balanced_or(terms)


def balanced_or(terms: list[Any]) -> Any:
    """``Or`` of ``terms`` as a balanced tree (a chain thousands deep would overflow the
    recursion of pyiceberg's expression visitors)."""
    if len(terms) == 1:
        return terms[0]
    middle = len(terms) // 2
    return expressions().Or(balanced_or(terms[:middle]), balanced_or(terms[middle:]))
