"""Reconcile and repair one table: compare the Iceberg table with its source table chunk by chunk,
report the keys that differ, and mend exactly those (docs/operations.md, "Reconcile and repair";
the rules are in :mod:`cdclake.model.reconcile`).

One run of :func:`reconcile_table`:

1. cut the source's primary-key order into chunks and read each chunk's digest, each in a
   consistent read (its binlog position noted);
2. make sure the lake has applied everything before the newest of those reads
   (:mod:`cdclake.pipeline.catch_up`);
3. compute the lake's chunk digests in one scan (pyiceberg, streamed in batches);
4. for the chunks that differ, read their rows from the source again (one consistent read), catch
   the lake up past it, and compare key by key; a key whose lake version is newer than the read is
   read again in the next round (``rounds``), then reported as unsettled;
5. in ``repair`` mode (:mod:`cdclake.pipeline.reconcile_repair`): delete the lake rows the source
   does not have (a tombstone at the read's position keeps a re-emitted older event from bringing
   them back), ask Debezium for an incremental snapshot of exactly the keys that are missing or
   differ (``additional-conditions``), wait for it, catch up, and compare those chunks again;
6. with a history (``history`` in the table config): compare the history's current rows with the
   table's rows (:mod:`cdclake.pipeline.reconcile_history`);
7. append one row per differing chunk and one summary row to the reconcile table (and the
   history's row).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from cdclake.errors import ReconcileError
from cdclake.io.catalog import load_catalog, load_table_or_none
from cdclake.io.kafka import KafkaClients
from cdclake.io.refs import head_snapshot
from cdclake.io.side_tables import ensure_side_table
from cdclake.io.source_db import SourceDatabase, chunk_bounds, chunk_digests, chunk_rows
from cdclake.model.config import TableConfig
from cdclake.model.convergence import SourceIdentity
from cdclake.model.position import BinlogPosition, position_parts
from cdclake.model.reconcile import (
    Chunk,
    ChunkOutcome,
    Digest,
    KeyTuple,
    Kind,
    Verdict,
    canonical_text,
    chunk_of,
    key_to_lake,
    row_hash,
    row_text,
    uppers,
    values_equal,
    verdict,
)
from cdclake.pipeline.catch_up import CatchUp, wait_for_lake
from cdclake.pipeline.reconcile_history import HistoryCheck, check_history
from cdclake.pipeline.reconcile_repair import repair
from cdclake.pipeline.reconcile_scope import (
    DUPLICATE,
    ReconcileScope,
    chunks_filter,
    lake_tombstones,
    read_position_of,
    reconcile_scope,
)
from cdclake.settings import Settings

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

RECONCILE_TABLE = "cdc_ops.reconcile"
"""The Iceberg table reconcile results are appended to (one per deployment)."""

RECONCILE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("run_id", "string", "the reconcile run"),
    ("table_name", "string", "table config name"),
    ("identifier", "string", "Iceberg table"),
    ("mode", "string", "report or repair"),
    (
        "chunk",
        "int",
        "chunk index in primary-key order; -1 for the table's summary row, -2 for the history check's row",
    ),
    ("lower_key", "string", "the chunk's lower bound (exclusive), JSON"),
    ("upper_key", "string", "the chunk's upper bound (inclusive), JSON"),
    ("source_rows", "long", "rows in the source (the chunk, or the table)"),
    ("lake_rows", "long", "rows in the lake"),
    ("only_in_source", "long", "keys the lake lacks"),
    ("only_in_lake", "long", "keys the source lacks"),
    ("differing", "long", "keys whose values differ"),
    ("unsettled", "long", "keys still changing: newer in the lake than every source read"),
    ("sample_keys", "string", "JSON: up to 20 keys of each kind"),
    ("differing_columns", "string", "JSON: {column: keys that differ in it}"),
    ("repaired", "boolean", "whether a repair ran for this chunk"),
    ("read_position", "string", "the source read's binlog file:pos (GTID position)"),
    ("reconciled_at", "timestamptz", "when"),
    (
        "compared_with",
        "string",
        "source: the table against its source table; history: the history's current rows (source_rows, "
        "only_in_source: the table's) against the table (lake_rows, only_in_lake: the history's)",
    ),
)

SAMPLE_KEYS = 20


@dataclass(frozen=True)
class ReconcileParams:
    """One reconcile run's choices.

    Attributes:
        mode: ``report`` or ``repair``.
        chunk_rows: rows per chunk.
        rounds: row-level rounds before a still-changing key is reported as unsettled (a
            difference is confirmed by two rounds in a row).
        key_range: ``(from, to)`` inclusive primary-key tuples limiting the run; ``None``: all.
        ignored_columns: columns never compared.
        snapshot_timeout_s: how long a repair waits for Debezium's incremental snapshot.
    """

    mode: str = "report"
    chunk_rows: int = 10_000
    rounds: int = 4
    key_range: tuple[KeyTuple, KeyTuple] | None = None
    ignored_columns: tuple[str, ...] = ()
    snapshot_timeout_s: float = 600.0
    run_id: str = field(default_factory=lambda: f"reconcile-{uuid.uuid4().hex[:12]}")


@dataclass
class ReconcileResult:
    """The outcome for one table."""

    table: str
    chunks: int
    source_rows: int
    lake_rows: int
    outcomes: list[ChunkOutcome]
    skipped_columns: dict[str, str]
    repaired: bool = False
    history: HistoryCheck | None = None
    """The history's check (:mod:`cdclake.pipeline.reconcile_history`); ``None``: no history, or
    nothing to compare yet."""

    @property
    def differences(self) -> int:
        return sum(len(o.only_in_source) + len(o.only_in_lake) + len(o.differing) for o in self.outcomes)

    @property
    def history_differences(self) -> int:
        """Keys where the history's current rows differ from the table's (0 without a check)."""
        return 0 if self.history is None else self.history.differences

    @property
    def unsettled(self) -> int:
        return sum(len(o.unsettled) for o in self.outcomes)

    def keys(self, which: str) -> set[KeyTuple]:
        """Every key of ``only_in_source``, ``only_in_lake`` or ``differing``."""
        out: set[KeyTuple] = set()
        for o in self.outcomes:
            out |= set(getattr(o, which))
        return out

    def drift(self, run_id: str) -> str | None:
        """The message of the differences that remain (the source's, the history's), or ``None``:
        there are none. What :class:`~cdclake.errors.DriftError` says."""
        found = [self.summary()] if self.differences else []
        if self.history is not None and self.history.differences:
            found.append(self.history.message())
        return f"{'; '.join(found)} (details: table {RECONCILE_TABLE}, run_id {run_id})" if found else None

    def summary(self) -> str:
        return (
            f"table {self.table}: {self.chunks} chunk(s), {self.source_rows} source row(s), {self.lake_rows} lake "
            f"row(s): {len(self.keys('only_in_source'))} only in the source, {len(self.keys('only_in_lake'))} only "
            f"in the lake, {len(self.keys('differing'))} differing, {self.unsettled} unsettled"
            + (f"; not compared: {self.skipped_columns}" if self.skipped_columns else "")
        )


def _scan(lake: Table, fields: Sequence[str], row_filter: Any = None) -> Any:
    """The table's rows as pyarrow record batches (the head of the branch its runs commit to,
    :func:`~cdclake.io.refs.head_snapshot`: the state the pipeline keeps, which a group table's
    ``main`` shows once the group is published); ``row_filter`` (a pyiceberg expression) lets
    pyiceberg skip data files by their column statistics."""
    from pyiceberg.expressions import AlwaysTrue

    lake = lake.refresh()
    head = head_snapshot(lake)
    scan = lake.scan(
        selected_fields=tuple(fields),
        row_filter=row_filter or AlwaysTrue(),
        snapshot_id=head.snapshot_id if head is not None else None,
    )
    return scan.to_arrow_batch_reader()


def lake_digests(lake: Table, scope: ReconcileScope, chunks: Sequence[Chunk]) -> list[Digest]:
    """Each chunk's digest of the lake's rows, in one streamed scan."""
    kinds = [c.kind for c in scope.key]
    bounds = uppers(chunks, kinds)
    digests = [Digest() for _ in chunks]
    names = [c.name for c in scope.columns]
    for batch in _scan(lake, names):
        for row in batch.to_pylist():
            key = tuple(row[c.name] for c in scope.key)
            if not scope.in_key_range(key):
                continue
            text = row_text(canonical_text(c.kind, row[c.name]) for c in scope.columns)
            digests[chunk_of(bounds, key)].add(row_hash(text))
    return digests


def _lake_rows(
    lake: Table, scope: ReconcileScope, chunks: Sequence[Chunk], wanted: set[int]
) -> tuple[dict[KeyTuple, dict[str, Any]], set[KeyTuple]]:
    """The lake's rows of the ``wanted`` chunks by key, and the keys the lake holds more than once."""
    kinds = [c.kind for c in scope.key]
    bounds = uppers(chunks, kinds)
    ordering = scope.cfg.ordering
    names = [c.name for c in scope.columns] + [p.column for p in position_parts(ordering) if p.column is not None]
    present = {f.name for f in lake.schema().fields}
    out: dict[KeyTuple, dict[str, Any]] = {}
    duplicates: set[KeyTuple] = set()
    for batch in _scan(lake, [n for n in names if n in present], chunks_filter(scope, chunks, wanted)):
        for row in batch.to_pylist():
            key = tuple(row[c.name] for c in scope.key)
            if scope.in_key_range(key) and chunk_of(bounds, key) in wanted:
                if key in out:
                    duplicates.add(key)
                    if BinlogPosition.from_row(row, ordering) < BinlogPosition.from_row(out[key], ordering):
                        continue  # the newest copy's position decides the verdict
                out[key] = row
    return out, duplicates


def _compare_rows(
    catalog: Catalog,
    lake: Table,
    scope: ReconcileScope,
    params: ReconcileParams,
    chunks: Sequence[Chunk],
    targets: Sequence[Chunk],
    db: SourceDatabase,
    catch_up: Callable[[], None],
    identity: SourceIdentity | None,
) -> tuple[dict[int, ChunkOutcome], str]:
    """Row-level rounds over the chunks ``targets`` of ``chunks`` (all of them, in key order;
    module docstring, 4); returns the outcomes and the last read's position (text)."""
    cfg = scope.cfg
    kinds = [c.kind for c in scope.key]
    outcomes = {c.index: ChunkOutcome(c) for c in targets}
    pending = {c.index for c in targets}
    bounds = uppers(chunks, kinds)
    pending_keys: set[KeyTuple] | None = None
    read_text = ""
    sighted: set[KeyTuple] = set()  # keys that differed in the previous round
    for round_no in range(1, params.rounds + 1):
        todo = [c for c in targets if c.index in pending]
        source, read = chunk_rows(db, scope.source, todo)
        read_text = f"{read.binlog_file_seq}:{read.binlog_pos}" + (f" ({read.gtid_pos})" if read.gtid_pos else "")
        catch_up()
        position = read_position_of(cfg, identity, read)
        lake_rows, duplicates = _lake_rows(lake, scope, chunks, pending)
        source_by_lake_key = {key_to_lake(kinds, k): v for k, v in source.items()}
        keys = set(source_by_lake_key) | set(lake_rows)
        if pending_keys is not None:
            keys &= pending_keys
        tombs = lake_tombstones(catalog, cfg, {k for k in keys if k not in lake_rows})
        still: set[KeyTuple] = set()
        now_sighted: set[KeyTuple] = set()
        for oc in outcomes.values():
            if oc.chunk.index in pending:
                oc.unsettled = []
        for k in sorted(keys, key=repr):
            oc = outcomes[chunk_of(bounds, k)]
            src, row = source_by_lake_key.get(k), lake_rows.get(k)
            if round_no == 1:
                oc.source_rows += src is not None
                oc.lake_rows += row is not None
            v, bad_columns = _key_verdict(scope, k, src, row, tombs, duplicates, position)
            if v is not Verdict.EQUAL and v is not Verdict.UNSETTLED and k not in sighted:
                # a difference counts when two reads in a row show it (the second after another
                # catch-up): a record still in flight to another partition cannot fake it
                now_sighted.add(k)
                v = Verdict.UNSETTLED
            if v is Verdict.UNSETTLED:
                still.add(k)
            _record_verdict(oc, k, v, bad_columns)
        log.info(
            "table %s: row-level round %d over %d chunk(s) at source position %s: %d key(s) still changing",
            cfg.identifier,
            round_no,
            len(todo),
            read_text,
            len(still),
        )
        if not still:
            break
        pending = {chunk_of(bounds, k) for k in still}
        pending_keys = still
        sighted = now_sighted
    return outcomes, read_text


def _key_verdict(
    scope: ReconcileScope,
    key: KeyTuple,
    src: tuple[list[str | None], list[Any]] | None,
    row: dict[str, Any] | None,
    tombs: dict[KeyTuple, dict[str, Any]],
    duplicates: set[KeyTuple],
    position: BinlogPosition,
) -> tuple[Verdict, list[str]]:
    """``(verdict, columns that differ)`` of ``key`` in one round, before a difference is
    confirmed by a second round: its source row ``src`` (canonical texts, raw values) against its
    lake row ``row`` (or its tombstone in ``tombs``) at the read's ``position``; a key the lake
    holds more than once (in ``duplicates``) differs in :data:`DUPLICATE`."""
    bad_columns = [DUPLICATE] if key in duplicates else []
    if src is not None and row is not None:
        texts, raws = src
        for i, col in enumerate(scope.columns):
            raw = raws[i] if col.kind is Kind.FLOAT else None
            if not values_equal(col.kind, texts[i], row[col.name], raw):
                bad_columns.append(col.name)
    ordering = scope.cfg.ordering
    version = (
        BinlogPosition.from_row(row, ordering)
        if row is not None
        else BinlogPosition.from_row(tombs[key], ordering, change=True)
        if key in tombs
        else None
    )
    return verdict(src is not None, row is not None, not bad_columns, version, position), bad_columns


def _record_verdict(outcome: ChunkOutcome, key: KeyTuple, v: Verdict, bad_columns: list[str]) -> None:
    """Note ``key``'s verdict ``v`` in its chunk's ``outcome`` (nothing for an equal key)."""
    if v is Verdict.UNSETTLED:
        outcome.unsettled.append(key)
    elif v is Verdict.ONLY_IN_SOURCE:
        outcome.only_in_source.append(key)
    elif v is Verdict.ONLY_IN_LAKE:
        outcome.only_in_lake.append(key)
    elif v is Verdict.DIFFERING:
        outcome.differing[key] = bad_columns


def reconcile_table(
    settings: Settings,
    kafka: KafkaClients,
    cfg: TableConfig,
    db: SourceDatabase,
    params: ReconcileParams,
    catch_up: CatchUp,
) -> ReconcileResult:
    """Reconcile (and in ``repair`` mode mend) one table (module docstring); appends the result to
    :data:`RECONCILE_TABLE`.

    Raises:
        ReconcileError: the table does not exist, or the lake cannot be caught up.
        ConfigError: a primary-key column reconcile cannot chunk by.
    """
    from cdclake.io.refs import committed_state

    catalog = load_catalog(settings)
    lake = load_table_or_none(catalog, cfg.identifier)
    if lake is None:
        raise ReconcileError(f"table {cfg.identifier} does not exist: nothing to reconcile")
    scope = reconcile_scope(db, cfg, lake, key_range=params.key_range, ignored_columns=params.ignored_columns)
    if scope.skipped:
        log.warning("table %s: column(s) not compared: %s", cfg.identifier, scope.skipped)

    def caught() -> None:
        wait_for_lake(settings, kafka, cfg, db, catch_up)

    chunks = chunk_bounds(db, scope.source, params.chunk_rows)
    source = chunk_digests(db, scope.source, chunks)
    caught()
    lake_d = lake_digests(lake, scope, chunks)
    differing = _differing_chunks(cfg, params, chunks, [s for s, _ in source], lake_d)
    identity = committed_state(lake.refresh(), cfg.topic).identity
    outcomes, read_text = (
        _compare_rows(catalog, lake, scope, params, chunks, differing, db, caught, identity) if differing else ({}, "")
    )
    result = _result(cfg, scope, len(chunks), sum(s.rows for s, _ in source), sum(d.rows for d in lake_d), outcomes)
    log.info("%s", result.summary())
    if params.mode == "repair" and result.differences:
        repair(
            settings,
            kafka,
            catalog,
            db,
            scope,
            result.outcomes,
            identity,
            run_id=params.run_id,
            snapshot_timeout_s=params.snapshot_timeout_s,
        )
        outcomes, read_text = _compare_rows(
            catalog, lake, scope, params, chunks, [o.chunk for o in result.outcomes], db, caught, identity
        )
        result = _result(cfg, scope, len(chunks), result.source_rows, result.lake_rows, outcomes, repaired=True)
        log.info("after repair: %s", result.summary())
    if cfg.history is not None:  # after a repair: the table as it is left
        result.history = check_history(catalog, cfg, scope.columns, scope.key_range)
    write_result(catalog, cfg, params, result, read_text)
    return result


def _differing_chunks(
    cfg: TableConfig, params: ReconcileParams, chunks: Sequence[Chunk], source: Sequence[Digest], lake: Sequence[Digest]
) -> list[Chunk]:
    """The ``chunks`` whose ``source`` and ``lake`` digests (in the chunks' order) differ; logs how many."""
    differing = [c for c, s, ld in zip(chunks, source, lake, strict=True) if (s.rows, s.xor) != (ld.rows, ld.xor)]
    log.info(
        "table %s: %d chunk(s) of %d row(s), %d with differing digests %s",
        cfg.identifier,
        len(chunks),
        params.chunk_rows,
        len(differing),
        [c.index for c in differing][:50],
    )
    return differing


def _result(
    cfg: TableConfig,
    scope: ReconcileScope,
    chunks: int,
    source_rows: int,
    lake_rows: int,
    outcomes: dict[int, ChunkOutcome],
    *,
    repaired: bool = False,
) -> ReconcileResult:
    """The table's :class:`ReconcileResult`, of the ``outcomes`` with differences or unsettled keys."""
    return ReconcileResult(
        cfg.identifier,
        chunks,
        source_rows,
        lake_rows,
        [o for o in outcomes.values() if not o.clean or o.unsettled],
        scope.skipped,
        repaired=repaired,
    )


def _sample(keys: Sequence[KeyTuple]) -> list[list[str]]:
    return [[str(v) for v in k] for k in sorted(keys, key=repr)[:SAMPLE_KEYS]]


def write_result(
    catalog: Catalog, cfg: TableConfig, params: ReconcileParams, result: ReconcileResult, read_text: str
) -> None:
    """Append the result to :data:`RECONCILE_TABLE`: a row per chunk with differences or unsettled
    keys, and the table's summary row (``chunk`` -1), with ``compared_with`` ``source``; and with a
    history check, its row (``chunk`` -2, ``compared_with`` ``history``)."""
    import pyarrow as pa

    table = ensure_side_table(
        catalog,
        RECONCILE_TABLE,
        [(n, t, False) for n, t, _ in RECONCILE_COLUMNS],
        {n: d for n, _, d in RECONCILE_COLUMNS},
    )
    now = datetime.now(timezone.utc)
    base = {
        "run_id": params.run_id,
        "table_name": cfg.name,
        "identifier": cfg.identifier,
        "mode": params.mode,
        "compared_with": "source",
    }
    rows = []
    for o in result.outcomes:
        by_column: dict[str, list[list[str]]] = {}
        for k, cols in o.differing.items():
            for c in cols:
                by_column.setdefault(c, []).append([str(v) for v in k])
        rows.append(
            {
                **base,
                "chunk": o.chunk.index,
                "lower_key": json.dumps(o.chunk.to_json()["lower"]),
                "upper_key": json.dumps(o.chunk.to_json()["upper"]),
                "source_rows": o.source_rows,
                "lake_rows": o.lake_rows,
                "only_in_source": len(o.only_in_source),
                "only_in_lake": len(o.only_in_lake),
                "differing": len(o.differing),
                "unsettled": len(o.unsettled),
                "sample_keys": json.dumps(
                    {
                        "only_in_source": _sample(o.only_in_source),
                        "only_in_lake": _sample(o.only_in_lake),
                        "differing": _sample(list(o.differing)),
                        "unsettled": _sample(o.unsettled),
                    }
                ),
                "differing_columns": json.dumps({c: ks[:SAMPLE_KEYS] for c, ks in by_column.items()}),
                "repaired": result.repaired,
                "read_position": read_text,
                "reconciled_at": now,
            }
        )
    rows.append(
        {
            **base,
            "chunk": -1,
            "lower_key": None,
            "upper_key": None,
            "source_rows": result.source_rows,
            "lake_rows": result.lake_rows,
            "only_in_source": len(result.keys("only_in_source")),
            "only_in_lake": len(result.keys("only_in_lake")),
            "differing": len(result.keys("differing")),
            "unsettled": result.unsettled,
            "sample_keys": json.dumps({"not_compared": result.skipped_columns}),
            "differing_columns": None,
            "repaired": result.repaired,
            "read_position": read_text,
            "reconciled_at": now,
        }
    )
    if result.history is not None:
        rows.append(_history_row(base, result.history, now))
    table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))


def _history_row(base: dict[str, Any], check: HistoryCheck, now: datetime) -> dict[str, Any]:
    """The reconcile table's row of a history check (:data:`RECONCILE_COLUMNS`, ``compared_with``)."""
    by_column: dict[str, list[list[str]]] = {}
    for k, cols in check.differing.items():
        for c in cols:
            by_column.setdefault(c, []).append([str(v) for v in k])
    return {
        **base,
        "compared_with": "history",
        "chunk": -2,  # apart from the summary rows (-1) that status reads
        "lower_key": None,
        "upper_key": None,
        "source_rows": check.table_rows,
        "lake_rows": check.history_rows,
        "only_in_source": len(check.only_in_table),
        "only_in_lake": len(check.only_in_history),
        "differing": len(check.differing),
        "unsettled": 0,
        "sample_keys": json.dumps(
            {
                "only_in_table": _sample(check.only_in_table),
                "only_in_history": _sample(check.only_in_history),
                "differing": _sample(list(check.differing)),
                "table_snapshot_id": check.table_snapshot_id,
                "history_snapshot_id": check.history_snapshot_id,
            }
        ),
        "differing_columns": json.dumps({c: ks[:SAMPLE_KEYS] for c, ks in by_column.items()}),
        "repaired": False,
        "read_position": None,
        "reconciled_at": now,
    }
