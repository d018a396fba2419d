"""Reconcile's check of a table's history (:mod:`cdclake.model.history`): the history's current rows
(``_cdc_is_current AND NOT _cdc_is_deleted``) must be the table's rows, key by key and value by value
(docs/operations.md, "Reconcile and repair", "The history's check").

The pair compared is consistent: the table's newest snapshot whose summary names a history
snapshot (:attr:`~cdclake.model.layout.SummaryKeys.HISTORY_SNAPSHOT`; a maintenance snapshot names
none and is walked past) and the history at that snapshot, which the run committed just before the
table's commit. Rows are compared by their canonical texts and row hashes
(:func:`~cdclake.model.reconcile.canonical_text`, :func:`~cdclake.model.reconcile.row_hash`): first
a digest of each side (row count, XOR of the row hashes) in one streamed scan each, then, only when
the digests differ, key by key.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cdclake.io.catalog import load_table_or_none
from cdclake.io.positions import expressions
from cdclake.io.refs import ancestry
from cdclake.model.config import TableConfig
from cdclake.model.history import HISTORY_SUFFIX, IS_CURRENT_COLUMN, IS_DELETED_COLUMN
from cdclake.model.layout import SummaryKeys, side_table
from cdclake.model.reconcile import CompareColumn, Digest, KeyTuple, canonical_text, row_hash, row_text

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

HISTORY_DOCS = 'docs/operations.md, "Reconcile and repair", "The history\'s check"'
"""Where the error of a history that differs from its table points to."""

SAMPLE = 5
"""Keys of each kind a :meth:`HistoryCheck.message` names."""

DUPLICATE = "<duplicate current versions>"
"""The "column" a key differs in when the history holds more than one current version of it."""


@dataclass
class HistoryCheck:
    """The history's current rows against the table's rows.

    Attributes:
        identifier: the table.
        table_snapshot_id: the table's snapshot compared (its summary names ``history_snapshot_id``).
        history_snapshot_id: the history's snapshot compared.
        table_rows: the table's rows (in the key range).
        history_rows: the history's current, not deleted versions (in the key range).
        only_in_table: keys the table holds and the history has no current version of.
        only_in_history: keys with a current version in the history that the table lacks.
        differing: keys whose values differ, with the columns they differ in.
    """

    identifier: str
    table_snapshot_id: int
    history_snapshot_id: int
    table_rows: int = 0
    history_rows: int = 0
    only_in_table: list[KeyTuple] = field(default_factory=list)
    only_in_history: list[KeyTuple] = field(default_factory=list)
    differing: dict[KeyTuple, list[str]] = field(default_factory=dict)

    @property
    def differences(self) -> int:
        """Keys that differ (each kind counted)."""
        return len(self.only_in_table) + len(self.only_in_history) + len(self.differing)

    def message(self) -> str:
        """What differs: the counts and a few keys of each kind, and where the docs say what to do."""
        if not self.differences:
            return (
                f"table {self.identifier}: its history's current rows equal the table's {self.table_rows} row(s) "
                f"(table snapshot {self.table_snapshot_id}, history snapshot {self.history_snapshot_id})"
            )

        def few(keys: Sequence[KeyTuple]) -> str:
            shown = sorted(keys, key=repr)[:SAMPLE]
            return ", ".join(map(repr, shown)) + (" ..." if len(keys) > SAMPLE else "")

        parts = [
            f"{len(keys)} {what} ({few(keys)})"
            for what, keys in (
                ("only in the table", self.only_in_table),
                ("only in the history", self.only_in_history),
                ("differing", list(self.differing)),
            )
            if keys
        ]
        return (
            f"table {self.identifier}: its history {side_table(self.identifier, HISTORY_SUFFIX)} differs from the "
            f"table: {self.table_rows} table row(s), {self.history_rows} current version(s): {'; '.join(parts)} "
            f"(table snapshot {self.table_snapshot_id}, history snapshot {self.history_snapshot_id}; "
            f"see {HISTORY_DOCS})"
        )


def history_pair(catalog: Catalog, cfg: TableConfig) -> tuple[Table, int, Table, int] | None:
    """``(table, its snapshot id, history, the history's snapshot id)`` to compare, or ``None``
    (logged) when there is nothing to compare yet: no history table, no table snapshot naming a
    history snapshot, or a history snapshot expired."""
    history = load_table_or_none(catalog, side_table(cfg.identifier, HISTORY_SUFFIX))
    table = load_table_or_none(catalog, cfg.identifier)
    if history is None or table is None:
        log.info("table %s: no history table yet: its history is not checked", cfg.identifier)
        return None
    for snapshot_id, _, summary in ancestry(table):
        named = None if summary is None else summary.get(SummaryKeys.HISTORY_SNAPSHOT)
        if named is not None:
            if history.snapshot_by_id(int(named)) is None:
                log.warning(
                    "table %s: snapshot %s names history snapshot %s, which is expired: its history is not checked",
                    cfg.identifier,
                    snapshot_id,
                    named,
                )
                return None
            return table, snapshot_id, history, int(named)
    log.info(
        "table %s: no snapshot names a history snapshot (%s) yet: its history is not checked",
        cfg.identifier,
        SummaryKeys.HISTORY_SNAPSHOT,
    )
    return None


def check_history(
    catalog: Catalog,
    cfg: TableConfig,
    columns: Sequence[CompareColumn],
    key_range: tuple[KeyTuple, KeyTuple] | None = None,
) -> HistoryCheck | None:
    """Compare the history's current rows with the table's rows (module docstring).

    Args:
        catalog: the pyiceberg catalog.
        cfg: the table (``history`` configured).
        columns: the columns compared, key included (reconcile's
            :attr:`~cdclake.pipeline.reconcile_scope.ReconcileScope.columns`).
        key_range: ``(from, to)`` inclusive lake key tuples; ``None``: every key.

    Returns:
        The comparison, or ``None`` when there is nothing to compare yet (:func:`history_pair`).
    """
    pair = history_pair(catalog, cfg)
    if pair is None:
        return None
    table, table_snapshot, history, history_snapshot = pair
    e = expressions()
    current = e.And(e.EqualTo(IS_CURRENT_COLUMN, True), e.EqualTo(IS_DELETED_COLUMN, False))
    keys = list(cfg.primary_key)
    names = [c.name for c in columns]

    def rows(side: Table, snapshot_id: int, row_filter: Any) -> Iterator[tuple[KeyTuple, tuple[str | None, ...]]]:
        scan = side.scan(snapshot_id=snapshot_id, selected_fields=tuple(names), row_filter=row_filter)
        for batch in scan.to_arrow_batch_reader():
            for row in batch.to_pylist():
                key = tuple(row[k] for k in keys)
                if key_range is None or key_range[0] <= key <= key_range[1]:
                    yield key, tuple(canonical_text(c.kind, row[c.name]) for c in columns)

    def digest(side: Table, snapshot_id: int, row_filter: Any) -> Digest:
        d = Digest()
        for _key, texts in rows(side, snapshot_id, row_filter):
            d.add(row_hash(row_text(texts)))
        return d

    check = HistoryCheck(cfg.identifier, table_snapshot, history_snapshot)
    table_digest, history_digest = (
        digest(table, table_snapshot, e.AlwaysTrue()),
        digest(history, history_snapshot, current),
    )
    check.table_rows, check.history_rows = table_digest.rows, history_digest.rows
    if (table_digest.rows, table_digest.xor) != (history_digest.rows, history_digest.xor):
        _compare_keys(
            check, names, dict(rows(table, table_snapshot, e.AlwaysTrue())), rows(history, history_snapshot, current)
        )
    log.info("%s", check.message())
    return check


def _compare_keys(
    check: HistoryCheck,
    names: Sequence[str],
    table_rows: dict[KeyTuple, tuple[str | None, ...]],
    history_rows: Iterator[tuple[KeyTuple, tuple[str | None, ...]]],
) -> None:
    """Fill ``check``'s keys from the table's rows by key and the history's current rows."""
    seen: set[KeyTuple] = set()
    for key, texts in history_rows:
        if key in seen:
            check.differing[key] = [DUPLICATE]
            continue
        seen.add(key)
        mine = table_rows.get(key)
        if mine is None:
            check.only_in_history.append(key)
        elif mine != texts:
            check.differing[key] = [n for n, a, b in zip(names, mine, texts, strict=True) if a != b]
    check.only_in_table = [k for k in table_rows if k not in seen]
