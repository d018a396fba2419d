"""Reconcile and repair one table: compare the Iceberg table with its source table chunk by chunk,
report the keys that differ, and mend exactly those (docs/operations.md, "Reconcile and repair";
the rules are in :mod:`cdclake.model.reconcile`).

One run of :func:`reconcile_table`:

1. cut the source's primary-key order into chunks and read each chunk's digest, each in a
   consistent read (its binlog position noted);
2. make sure the lake has applied everything before the newest of those reads (:func:`catch_up`);
3. compute the lake's chunk digests in one scan (pyiceberg, streamed in batches);
4. for the chunks that differ, read their rows from the source again (one consistent read), catch
   the lake up past it, and compare key by key; a key whose lake version is newer than the read is
   read again in the next round (``rounds``), then reported as unsettled;
5. in ``repair`` mode: delete the lake rows the source does not have (a tombstone at the read's
   position keeps a re-emitted older event from bringing them back), ask Debezium for an
   incremental snapshot of exactly the keys that are missing or differ (``additional-conditions``),
   wait for it, catch up, and compare those chunks again;
6. append one row per differing chunk and one summary row to the reconcile table.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from cdclake.errors import ReconcileError, TopicNotFoundError
from cdclake.io.catalog import committed_offsets, ensure_side_table, load_catalog, load_table_or_none, source_schema
from cdclake.io.kafka import KafkaClients, read_partition, topic_watermarks
from cdclake.io.source_db import (
    SourceDatabase,
    SourceRead,
    chunk_bounds,
    chunk_digests,
    chunk_rows,
    send_marker,
    send_source_signal,
    source_columns,
)
from cdclake.model.config import TableConfig
from cdclake.model.convergence import SourceIdentity
from cdclake.model.layout import (
    TOMBSTONE_COLUMNS,
    TOMBSTONES_SUFFIX,
    side_table,
)
from cdclake.model.position import BinlogPosition, parse_mariadb_gtid
from cdclake.model.reconcile import (
    Chunk,
    ChunkOutcome,
    CompareColumn,
    Digest,
    KeyTuple,
    Kind,
    Verdict,
    canonical_text,
    check_key_kinds,
    chunk_of,
    compare_columns,
    key_to_lake,
    read_position,
    repair_condition,
    row_hash,
    row_text,
    uppers,
    values_equal,
    verdict,
)
from cdclake.model.snapshot import build_signal, caught_up, parse_notification
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
    ("chunk", "int", "chunk index in primary-key order; -1 for the table's summary row"),
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
)

SAMPLE_KEYS = 20
DUPLICATE = "<duplicate rows>"
"""The "column" a key differs in when the lake holds it more than once."""
CatchUp = Callable[[dict[int, int]], None]
"""Makes the table's committed offsets reach the given end offsets (runs its DAG, or waits)."""


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

    @property
    def differences(self) -> int:
        return sum(len(o.only_in_source) + len(o.only_in_lake) + len(o.differing) for o in self.outcomes)

    @property
    def unsettled(self) -> int:
        return sum(len(o.unsettled) for o in self.outcomes)

    def keys(self, which: str) -> set[KeyTuple]:
        """Every key of ``only_in_source``, ``only_in_lake`` or ``differing``."""
        out: set[KeyTuple] = set()
        for o in self.outcomes:
            out |= set(getattr(o, which))
        return out

    def summary(self) -> str:
        return (
            f"table {self.table}: {self.chunks} chunk(s), {self.source_rows} source row(s), {self.lake_rows} lake "
            f"row(s): {len(self.keys('only_in_source'))} only in the source, {len(self.keys('only_in_lake'))} only "
            f"in the lake, {len(self.keys('differing'))} differing, {self.unsettled} unsettled"
            + (f"; not compared: {self.skipped_columns}" if self.skipped_columns else "")
        )


@dataclass(frozen=True)
class _Setup:
    cfg: TableConfig
    database: str
    table: str
    key: list[CompareColumn]
    columns: list[CompareColumn]
    skipped: dict[str, str]
    where: tuple[str, list[Any]]
    key_range: tuple[KeyTuple, KeyTuple] | None = None


def _setup(db: SourceDatabase, cfg: TableConfig, lake: Table, params: ReconcileParams) -> _Setup:
    if cfg.write_mode != "upsert":
        raise ReconcileError(
            f"table {cfg.identifier} is a {cfg.write_mode} table (every event a row): it does not mirror its "
            "source table, so reconcile does not compare it"
        )
    _prefix, database, table = cfg.topic.rsplit(".", 2)
    src = source_columns(db, database, table)
    schema = source_schema(lake)
    columns, skipped = compare_columns(src, schema.columns, params.ignored_columns)
    by_name = {c.name: c for c in columns}
    missing = [k for k in cfg.primary_key if k not in by_name]
    if missing:
        raise ReconcileError(f"table {cfg.identifier}: primary-key column(s) {missing} cannot be compared ({skipped})")
    key = [by_name[k] for k in cfg.primary_key]
    check_key_kinds(cfg.identifier, key)
    where: tuple[str, list[Any]] = ("1=1", [])
    key_range = None
    if params.key_range is not None:
        from cdclake.model.reconcile import key_order_sql, parse_key_value

        try:
            lo, hi = (tuple(parse_key_value(c.kind, v) for c, v in zip(key, b, strict=True)) for b in params.key_range)
        except ValueError as e:
            raise ReconcileError(
                f"table {cfg.identifier}: key_range {params.key_range} does not fit key {cfg.primary_key}: {e}"
            ) from e
        cols = "(" + ", ".join(key_order_sql(key)) + ")"
        marks = "(" + ", ".join("%s" for _ in key) + ")"
        where = (f"{cols} >= {marks} AND {cols} <= {marks}", [*lo, *hi])
        kinds = [c.kind for c in key]
        key_range = (key_to_lake(kinds, lo), key_to_lake(kinds, hi))
    return _Setup(cfg, database, table, key, columns, skipped, where, key_range)


def _in_range(setup: _Setup, params: ReconcileParams, key: KeyTuple) -> bool:
    if setup.key_range is None:
        return True
    return bool(setup.key_range[0] <= key <= setup.key_range[1])


def _read_pos(cfg: TableConfig, identity: SourceIdentity | None, read: SourceRead) -> BinlogPosition:
    seq = None
    if cfg.ordering == "gtid":
        domain = identity.gtid_domain if identity is not None and identity.gtid_domain is not None else 0
        for part in read.gtid_pos.split(","):
            parsed = parse_mariadb_gtid(part) if part.strip() else None
            if parsed is not None and parsed[0] == domain:
                seq = parsed[2]
        seq = 0 if seq is None else seq
    return read_position(cfg.ordering, read.binlog_file_seq, read.binlog_pos, seq)


def _lake_version(cfg: TableConfig, row: dict[str, Any], *, tombstone: bool = False) -> BinlogPosition:
    first: Any = row.get("_cdc_gtid_seq") if cfg.ordering == "gtid" else row.get("_cdc_binlog_file_seq")
    rank = 1 if tombstone or not row.get("_cdc_snapshot") else 0
    return BinlogPosition(
        -1 if first is None else int(first),
        int(row.get("_cdc_binlog_pos") or -1),
        int(row.get("_cdc_binlog_row") or 0),
        rank,
    )


def _scan(lake: Table, fields: Sequence[str], row_filter: Any = None) -> Any:
    """The table's rows as pyarrow record batches (the current snapshot); ``row_filter`` (a
    pyiceberg expression) lets pyiceberg skip data files by their column statistics."""
    scan = lake.refresh().scan(selected_fields=tuple(fields), row_filter=row_filter or _ex().AlwaysTrue())
    return scan.to_arrow_batch_reader()


def _chunks_filter(setup: _Setup, chunks: Sequence[Chunk], wanted: set[int]) -> Any:
    """pyiceberg filter of the key ranges of the ``wanted`` chunks (single-column keys; ``None``
    for others)."""
    if len(setup.key) != 1 or setup.key[0].kind not in (Kind.INT, Kind.DECIMAL, Kind.DATE):
        return None
    e, name = _ex(), setup.key[0].name
    terms = []
    for c in chunks:
        if c.index in wanted:
            parts = []
            if c.lower is not None:
                parts.append(e.GreaterThan(name, c.lower[0]))
            if c.upper is not None:
                parts.append(e.LessThanOrEqual(name, c.upper[0]))
            terms.append(e.AlwaysTrue() if not parts else parts[0] if len(parts) == 1 else e.And(*parts))
    return _balanced_or(terms) if terms else None


def lake_digests(lake: Table, setup: _Setup, params: ReconcileParams, chunks: Sequence[Chunk]) -> list[Digest]:
    """Each chunk's digest of the lake's rows, in one streamed scan."""
    kinds = [c.kind for c in setup.key]
    bounds = uppers(chunks, kinds)
    digests = [Digest() for _ in chunks]
    names = [c.name for c in setup.columns]
    for batch in _scan(lake, names):
        for row in batch.to_pylist():
            key = tuple(row[c.name] for c in setup.key)
            if not _in_range(setup, params, key):
                continue
            text = row_text(canonical_text(c.kind, row[c.name]) for c in setup.columns)
            digests[chunk_of(bounds, key)].add(row_hash(text))
    return digests


def _lake_rows(
    lake: Table, setup: _Setup, params: ReconcileParams, chunks: Sequence[Chunk], wanted: set[int]
) -> tuple[dict[KeyTuple, dict[str, Any]], set[KeyTuple]]:
    """The lake's rows of the ``wanted`` chunks by key, and the keys the lake holds more than once."""
    kinds = [c.kind for c in setup.key]
    bounds = uppers(chunks, kinds)
    names = [c.name for c in setup.columns] + [
        "_cdc_snapshot",
        "_cdc_binlog_file_seq",
        "_cdc_binlog_pos",
        "_cdc_binlog_row",
        "_cdc_gtid_seq",
    ]
    present = {f.name for f in lake.schema().fields}
    out: dict[KeyTuple, dict[str, Any]] = {}
    duplicates: set[KeyTuple] = set()
    for batch in _scan(lake, [n for n in names if n in present], _chunks_filter(setup, chunks, wanted)):
        for row in batch.to_pylist():
            key = tuple(row[c.name] for c in setup.key)
            if _in_range(setup, params, key) and chunk_of(bounds, key) in wanted:
                if key in out:
                    duplicates.add(key)
                    if _lake_version(setup.cfg, row) < _lake_version(setup.cfg, out[key]):
                        continue  # the newest copy's position decides the verdict
                out[key] = row
    return out, duplicates


def _tombstones(catalog: Catalog, cfg: TableConfig, keys: set[KeyTuple]) -> dict[KeyTuple, dict[str, Any]]:
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


def _compare_rows(
    catalog: Catalog,
    lake: Table,
    setup: _Setup,
    params: ReconcileParams,
    chunks: Sequence[Chunk],
    targets: Sequence[Chunk],
    db: SourceDatabase,
    catch_up: Callable[[], None],
    identity: SourceIdentity | None,
) -> tuple[dict[int, ChunkOutcome], str]:
    """Row-level rounds over the chunks ``targets`` of ``chunks`` (all of them, in key order;
    module docstring, 4); returns the outcomes and the last read's position (text)."""
    cfg = setup.cfg
    kinds = [c.kind for c in setup.key]
    outcomes = {c.index: ChunkOutcome(c) for c in targets}
    pending = {c.index for c in targets}
    bounds = uppers(chunks, kinds)
    pending_keys: set[KeyTuple] | None = None
    read_text = ""
    sighted: set[KeyTuple] = set()  # keys that differed in the previous round
    for round_no in range(1, params.rounds + 1):
        todo = [c for c in targets if c.index in pending]
        source, read = chunk_rows(db, setup.database, setup.table, setup.key, setup.columns, todo, setup.where)
        read_text = f"{read.binlog_file_seq}:{read.binlog_pos}" + (f" ({read.gtid_pos})" if read.gtid_pos else "")
        catch_up()
        position = _read_pos(cfg, identity, read)
        lake_rows, duplicates = _lake_rows(lake, setup, params, chunks, pending)
        source_by_lake_key = {key_to_lake(kinds, k): v for k, v in source.items()}
        keys = set(source_by_lake_key) | set(lake_rows)
        if pending_keys is not None:
            keys &= pending_keys
        tombs = _tombstones(catalog, cfg, {k for k in keys if k not in lake_rows})
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
            bad_columns = [DUPLICATE] if k in duplicates else []
            if src is not None and row is not None:
                texts, raws = src
                for i, col in enumerate(setup.columns):
                    raw = raws[i] if col.kind is Kind.FLOAT else None
                    if not values_equal(col.kind, texts[i], row[col.name], raw):
                        bad_columns.append(col.name)
            version = (
                _lake_version(cfg, row)
                if row is not None
                else _lake_version(cfg, tombs[k], tombstone=True)
                if k in tombs
                else None
            )
            v = verdict(src is not None, row is not None, not bad_columns, version, position)
            if v is not Verdict.EQUAL and v is not Verdict.UNSETTLED and k not in sighted:
                # a difference counts when two reads in a row show it (the second after another
                # catch-up): a record still in flight to another partition cannot fake it
                now_sighted.add(k)
                v = Verdict.UNSETTLED
            if v is Verdict.UNSETTLED:
                still.add(k)
                oc.unsettled.append(k)
            elif v is Verdict.ONLY_IN_SOURCE:
                oc.only_in_source.append(k)
            elif v is Verdict.ONLY_IN_LAKE:
                oc.only_in_lake.append(k)
            elif v is Verdict.DIFFERING:
                oc.differing[k] = bad_columns
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


def wait_for_lake(
    settings: Settings,
    kafka: KafkaClients,
    catalog: Catalog,
    cfg: TableConfig,
    db: SourceDatabase,
    catch_up: CatchUp,
    *,
    marker_timeout_s: float = 300.0,
) -> None:
    """Make sure the lake has applied every event committed at the source before now: a marker
    signal (:func:`~cdclake.io.source_db.send_marker`) shows on the signal table's topic once the
    connector has read the binlog past everything before it; ``catch_up`` then brings the table's
    committed offsets to the data topic's end offsets of that moment.

    Raises:
        ReconcileError: the marker did not reach Kafka within ``marker_timeout_s`` (the connector
            is down, or does not capture its signal table).
    """
    topic = f"{settings.topic_prefix}.{settings.signal_table}"
    start = _high_or_empty(kafka, topic)  # the connector creates the topic with its first event
    marker = f"cdclake-marker-{uuid.uuid4().hex[:16]}"
    send_marker(db, settings.signal_table, marker)
    deadline = time.monotonic() + marker_timeout_s
    seen = False
    while not seen:
        if time.monotonic() > deadline:
            raise ReconcileError(
                f"the reconcile marker {marker} did not reach topic {topic!r} within {marker_timeout_s:.0f} s: the "
                "connector is not streaming, or does not capture its signal table; differences cannot be confirmed"
            )
        end = _high_or_empty(kafka, topic)
        for p, high in end.items():
            for msg in read_partition(kafka, topic, p, start.get(p, 0), high, group_id="cdclake-reconcile"):
                value = msg.value()
                if value and marker.encode() in value:
                    seen = True
            start[p] = high
        if not seen:
            time.sleep(1.0)
    time.sleep(2.0)  # the producer's in-flight batches to the data topic's other partitions
    catch_up(topic_watermarks(kafka, cfg.topic).high)


def _high_or_empty(kafka: KafkaClients, topic: str) -> dict[int, int]:
    try:
        return topic_watermarks(kafka, topic).high
    except TopicNotFoundError:
        return {}


def poll_catch_up(catalog: Catalog, cfg: TableConfig, timeout_s: float = 3600.0, interval_s: float = 15.0) -> CatchUp:
    """A :data:`CatchUp` that waits for the table's DAG runs (on their schedule) to commit.

    Raises:
        ReconcileError: the table did not commit the offsets within ``timeout_s``.
    """

    def wait(end: dict[int, int]) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            committed = committed_offsets(load_table_or_none(catalog, cfg.identifier), cfg.topic)
            if caught_up(committed, end):
                return
            if time.monotonic() > deadline:
                raise ReconcileError(
                    f"table {cfg.identifier}: committed offsets {committed} did not reach {end} within "
                    f"{timeout_s:.0f} s; its DAG (cdc_{cfg.name}) must run for reconcile to confirm differences"
                )
            time.sleep(interval_s)

    return wait


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
    from cdclake.io.catalog import committed_state

    catalog = load_catalog(settings)
    lake = load_table_or_none(catalog, cfg.identifier)
    if lake is None:
        raise ReconcileError(f"table {cfg.identifier} does not exist: nothing to reconcile")
    setup = _setup(db, cfg, lake, params)
    if setup.skipped:
        log.warning("table %s: column(s) not compared: %s", cfg.identifier, setup.skipped)

    def caught() -> None:
        wait_for_lake(settings, kafka, catalog, cfg, db, catch_up)

    chunks = chunk_bounds(db, setup.database, setup.table, setup.key, params.chunk_rows, setup.where)
    source = chunk_digests(db, setup.database, setup.table, setup.key, setup.columns, chunks, setup.where)
    caught()
    lake_d = lake_digests(lake, setup, params, chunks)
    differing = [
        c for c, (s, _r), ld in zip(chunks, source, lake_d, strict=True) if (s.rows, s.xor) != (ld.rows, ld.xor)
    ]
    log.info(
        "table %s: %d chunk(s) of %d row(s), %d with differing digests %s",
        cfg.identifier,
        len(chunks),
        params.chunk_rows,
        len(differing),
        [c.index for c in differing][:50],
    )
    identity = committed_state(lake.refresh(), cfg.topic).identity
    outcomes, read_text = (
        _compare_rows(catalog, lake, setup, params, chunks, differing, db, caught, identity) if differing else ({}, "")
    )
    result = ReconcileResult(
        cfg.identifier,
        len(chunks),
        sum(s.rows for s, _ in source),
        sum(d.rows for d in lake_d),
        [o for o in outcomes.values() if not o.clean or o.unsettled],
        setup.skipped,
    )
    log.info("%s", result.summary())
    if params.mode == "repair" and result.differences:
        _repair(settings, kafka, catalog, cfg, db, setup, params, result, identity)
        outcomes, read_text = _compare_rows(
            catalog, lake, setup, params, chunks, [o.chunk for o in result.outcomes], db, caught, identity
        )
        result = ReconcileResult(
            cfg.identifier,
            len(chunks),
            result.source_rows,
            result.lake_rows,
            [o for o in outcomes.values() if not o.clean or o.unsettled],
            setup.skipped,
            repaired=True,
        )
        log.info("after repair: %s", result.summary())
    write_result(catalog, cfg, params, result, read_text)
    return result


SIGNAL_DATA_LIMIT = 1800
"""Characters of a signal's ``data`` JSON per repair signal (the signal table's ``data`` column
is ``VARCHAR(2048)`` in Debezium's docs): larger key lists are split into several signals."""


def _repair(
    settings: Settings,
    kafka: KafkaClients,
    catalog: Catalog,
    cfg: TableConfig,
    db: SourceDatabase,
    setup: _Setup,
    params: ReconcileParams,
    result: ReconcileResult,
    identity: SourceIdentity | None,
) -> None:
    """Delete the lake rows the source lacks (with tombstones at the read position) and re-read
    the missing and differing keys through incremental snapshots of exactly those keys (a key the
    lake holds twice loses its copies first)."""
    extra = sorted(result.keys("only_in_lake"), key=repr)
    differing = {k: cols for o in result.outcomes for k, cols in o.differing.items()}
    duplicated = sorted((k for k, cols in differing.items() if DUPLICATE in cols), key=repr)
    reread = sorted(result.keys("only_in_source") | set(differing), key=repr)
    if extra:
        _delete_lake_rows(catalog, cfg, setup, extra, db, identity, params, absent=True)
    if duplicated:
        _delete_lake_rows(catalog, cfg, setup, duplicated, db, identity, params, absent=False)
    collection = f"{setup.database}.{setup.table}"
    batch: list[KeyTuple] = []
    batches: list[list[KeyTuple]] = []
    for k in reread:
        if batch and len(repair_condition(setup.key, [*batch, k])) > SIGNAL_DATA_LIMIT:
            batches.append(batch)
            batch = []
        batch.append(k)
    if batch:
        batches.append(batch)
    for keys in batches:
        # unique per table and attempt: the mapped tasks of one DAG run share its run id
        signal = build_signal(
            f"cdclake-repair-{uuid.uuid4().hex}",
            "execute",
            [collection],
            "incremental",
            {collection: repair_condition(setup.key, keys)},
        )
        since = int(time.time() * 1000)
        if not send_source_signal(db, settings.signal_table, signal):
            raise ReconcileError(f"repair signal {signal.id} was not inserted into {settings.signal_table}")
        _wait_snapshot(kafka, settings.notification_topic, signal.id, since, params.snapshot_timeout_s)
        log.info("table %s: re-read %d key(s) through incremental snapshot %s", cfg.identifier, len(keys), signal.id)


def _source_key(kinds: Sequence[Kind], key: KeyTuple) -> KeyTuple:
    out = []
    for kind, v in zip(kinds, key, strict=True):
        if kind is Kind.TIMESTAMP and isinstance(v, datetime) and v.tzinfo is not None:
            v = v.astimezone(timezone.utc).replace(tzinfo=None)
        out.append(v)
    return tuple(out)


def _wait_snapshot(kafka: KafkaClients, topic: str, signal_id: str, since_ms: int, timeout_s: float) -> None:
    """Wait for the incremental snapshot's ``COMPLETED`` notification.

    Raises:
        ReconcileError: it ended otherwise, or not within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    start = topic_watermarks(kafka, topic).low
    while time.monotonic() < deadline:
        end = topic_watermarks(kafka, topic).high
        for p, high in end.items():
            for msg in read_partition(kafka, topic, p, start.get(p, 0), high, group_id="cdclake-reconcile"):
                n = parse_notification(msg.value())
                if n is None or n.id != signal_id or n.timestamp_ms < since_ms - 60_000:
                    continue
                if n.type == "COMPLETED":
                    return
                if n.type == "ABORTED":
                    raise ReconcileError(f"the repair's incremental snapshot {signal_id} was aborted")
            start[p] = high
        time.sleep(2.0)
    raise ReconcileError(f"the repair's incremental snapshot {signal_id} did not complete within {timeout_s:.0f} s")


def _delete_lake_rows(
    catalog: Catalog,
    cfg: TableConfig,
    setup: _Setup,
    keys: list[KeyTuple],
    db: SourceDatabase,
    identity: SourceIdentity | None,
    params: ReconcileParams,
    *,
    absent: bool,
) -> None:
    """Delete ``keys``' lake rows written before a fresh source read, in one commit.

    ``absent``: the keys the source does not have; a read confirms it (a key that came back is
    left alone) and each gets a tombstone at the read's position first, so that neither a crash
    between the two commits nor a re-emitted older event brings the row back. Otherwise (keys the
    lake holds twice) the copies go and the repair's snapshot writes the key again.
    """
    import pyarrow as pa

    from cdclake.io.source_db import consistent_read
    from cdclake.model.reconcile import pyformat, quote

    kinds = [c.kind for c in setup.key]
    with consistent_read(db) as (cur, read):
        target = pyformat(f"{quote(setup.database)}.{quote(setup.table)}")
        chosen = []
        for k in keys:
            names = " AND ".join(f"{pyformat(quote(c.name))} = %s" for c in setup.key)
            cur.execute(f"SELECT COUNT(*) FROM {target} WHERE {names}", list(_source_key(kinds, k)))
            if (int(cur.fetchone()[0]) == 0) == absent:
                chosen.append(k)
    if not chosen:
        return
    position = _read_pos(cfg, identity, read)
    lake = catalog.load_table(cfg.identifier)
    if absent:
        by_name = {c.name: c for c in source_schema(lake).columns}
        pk_fields = [(c, by_name[c].iceberg_type, True) for c in cfg.primary_key]
        tombs = ensure_side_table(
            catalog,
            side_table(cfg.identifier, TOMBSTONES_SUFFIX),
            pk_fields + [(n, t, False) for n, t, _ in TOMBSTONE_COLUMNS],
            {n: d for n, _, d in TOMBSTONE_COLUMNS},
        )
        gtid = cfg.ordering == "gtid"
        now = datetime.now(timezone.utc)
        new = {
            "_cdc_binlog_file_seq": read.binlog_file_seq,
            "_cdc_binlog_pos": 2**62 if gtid else position.pos,
            "_cdc_binlog_row": 0 if gtid else -1,
            "_cdc_gtid_seq": position.file_seq - 1 if gtid else None,
            "_cdc_source_ts": now,
            "_cdc_recorded_at": now,
        }
        at = _lake_version(cfg, new, tombstone=True)
        existing = _tombstones(catalog, cfg, set(chosen))
        older = [k for k, row in existing.items() if _lake_version(cfg, row, tombstone=True) < at]
        fresh = [k for k in chosen if k not in existing or k in older]  # a newer tombstone stays
        if older:
            tombs.delete(_keys_predicate(cfg, older))
        if fresh:
            rows = [{**dict(zip(cfg.primary_key, k, strict=True)), **new} for k in fresh]
            tombs.append(pa.Table.from_pylist(rows, schema=tombs.schema().as_arrow()))
    # only rows written before the read: a row a later event wrote (the key came back) stays
    lake.delete(
        _ex().And(_keys_predicate(cfg, chosen), _written_before(cfg, position)),
        snapshot_properties={"cdc.reconcile-repair": params.run_id},
    )
    log.info(
        "table %s: deleted the lake rows of %d key(s) %s written before %s",
        cfg.identifier,
        len(chosen),
        "the source does not have (tombstones at that position)" if absent else "held more than once",
        position.to_text(),
    )


def _ex() -> Any:
    """pyiceberg's expressions module (its constructors typed loosely here)."""
    from pyiceberg import expressions

    return expressions


def _written_before(cfg: TableConfig, position: BinlogPosition) -> Any:
    """pyiceberg filter: rows written by an event before ``position`` (a read position)."""
    e = _ex()
    if cfg.ordering == "gtid":
        return e.Or(e.IsNull("_cdc_gtid_seq"), e.LessThan("_cdc_gtid_seq", position.file_seq))
    f, p = position.file_seq, position.pos
    return e.Or(
        e.LessThan("_cdc_binlog_file_seq", f),
        e.And(e.EqualTo("_cdc_binlog_file_seq", f), e.LessThan("_cdc_binlog_pos", p)),
    )


def _keys_predicate(cfg: TableConfig, keys: list[KeyTuple]) -> Any:
    """pyiceberg filter selecting exactly ``keys`` (values bound by pyiceberg: binary keys too)."""
    e = _ex()
    if len(cfg.primary_key) == 1:
        return e.In(cfg.primary_key[0], {k[0] for k in keys})
    terms = [e.And(*[e.EqualTo(c, v) for c, v in zip(cfg.primary_key, k, strict=True)]) for k in keys]
    return _balanced_or(terms)


def _balanced_or(terms: list[Any]) -> Any:
    """``Or`` of ``terms`` as a balanced tree (a chain thousands deep would overflow the
    recursion of pyiceberg's expression visitors)."""
    if len(terms) == 1:
        return terms[0]
    middle = len(terms) // 2
    return _ex().Or(_balanced_or(terms[:middle]), _balanced_or(terms[middle:]))


def _sample(keys: Sequence[KeyTuple]) -> list[list[str]]:
    return [[str(v) for v in k] for k in sorted(keys, key=repr)[:SAMPLE_KEYS]]


def write_result(
    catalog: Catalog, cfg: TableConfig, params: ReconcileParams, result: ReconcileResult, read_text: str
) -> None:
    """Append the result to :data:`RECONCILE_TABLE`: a row per chunk with differences or unsettled
    keys, and the table's summary row (``chunk`` -1)."""
    import pyarrow as pa

    table = ensure_side_table(
        catalog,
        RECONCILE_TABLE,
        [(n, t, False) for n, t, _ in RECONCILE_COLUMNS],
        {n: d for n, _, d in RECONCILE_COLUMNS},
    )
    now = datetime.now(timezone.utc)
    base = {"run_id": params.run_id, "table_name": cfg.name, "identifier": cfg.identifier, "mode": params.mode}
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
    table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))
