"""Repair (reconcile's ``repair`` mode, :mod:`cdclake.pipeline.reconcile`): delete the lake rows
the source lacks behind tombstones, and re-read the missing and differing keys through Debezium
incremental snapshots of exactly those keys (``additional-conditions``; Debezium docs, "Ad hoc
incremental snapshots")."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from cdclake.errors import ReconcileError
from cdclake.io.catalog import load_table_or_none
from cdclake.io.kafka import KafkaClients, read_partition, topic_watermarks
from cdclake.io.positions import expressions, position_below
from cdclake.io.refs import write_ref
from cdclake.io.schema_evolution import source_schema
from cdclake.io.side_tables import ensure_side_table
from cdclake.io.source_db import SourceDatabase, consistent_read, send_source_signal
from cdclake.model.config import TableConfig
from cdclake.model.convergence import SourceIdentity
from cdclake.model.history import (
    CHANGE_COLUMN,
    CHANGE_REPAIR,
    HISTORY_SUFFIX,
    IS_CURRENT_COLUMN,
    IS_DELETED_COLUMN,
    RUN_ID_COLUMN,
    VALID_FROM_POSITION_COLUMN,
    VALID_FROM_TS_COLUMN,
    VALID_TO_POSITION_COLUMN,
    VALID_TO_TS_COLUMN,
)
from cdclake.model.layout import TOMBSTONE_COLUMNS, TOMBSTONES_SUFFIX, SummaryKeys, side_table
from cdclake.model.position import ORDERINGS, BinlogPosition, position_parts
from cdclake.model.reconcile import ChunkOutcome, KeyTuple, Kind, pyformat, quote, repair_condition
from cdclake.model.snapshot import build_signal, parse_notification
from cdclake.pipeline.reconcile_scope import (
    DUPLICATE,
    ReconcileScope,
    keys_predicate,
    lake_tombstones,
    read_position_of,
)
from cdclake.settings import Settings

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

log = logging.getLogger(__name__)

SIGNAL_DATA_LIMIT = 1800
"""Characters of a signal's ``data`` JSON per repair signal (the signal table's ``data`` column
is ``VARCHAR(2048)`` in Debezium's docs): larger key lists are split into several signals."""


def repair(
    settings: Settings,
    kafka: KafkaClients,
    catalog: Catalog,
    db: SourceDatabase,
    scope: ReconcileScope,
    outcomes: Sequence[ChunkOutcome],
    identity: SourceIdentity | None,
    *,
    run_id: str,
    snapshot_timeout_s: float,
) -> None:
    """Mend the differences of ``outcomes``: delete the lake rows the source lacks (with
    tombstones at the read position) and re-read the missing and differing keys through
    incremental snapshots of exactly those keys (a key the lake holds twice loses its copies
    first).

    Args:
        identity: the table's source identity (its GTID domain, under GTID ordering).
        run_id: the reconcile run, recorded in the snapshot summary of the deletes
            (``cdc.reconcile-repair``).
        snapshot_timeout_s: how long to wait for each incremental snapshot.

    Raises:
        ReconcileError: a signal was not inserted, or its snapshot did not complete in time.
    """
    cfg = scope.cfg
    extra = sorted({k for o in outcomes for k in o.only_in_lake}, key=repr)
    differing = {k: cols for o in outcomes for k, cols in o.differing.items()}
    duplicated = sorted((k for k, cols in differing.items() if DUPLICATE in cols), key=repr)
    reread = sorted({k for o in outcomes for k in o.only_in_source} | set(differing), key=repr)
    if extra:
        _delete_lake_rows(catalog, scope, extra, db, identity, run_id, absent=True)
    if duplicated:
        _delete_lake_rows(catalog, scope, duplicated, db, identity, run_id, absent=False)
    collection = f"{scope.database}.{scope.table}"
    batch: list[KeyTuple] = []
    batches: list[list[KeyTuple]] = []
    for k in reread:
        if batch and len(repair_condition(scope.key, [*batch, k])) > SIGNAL_DATA_LIMIT:
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
            {collection: repair_condition(scope.key, keys)},
        )
        since = int(time.time() * 1000)
        if not send_source_signal(db, settings.signal_table, signal):
            raise ReconcileError(f"repair signal {signal.id} was not inserted into {settings.signal_table}")
        _wait_snapshot(kafka, settings.notification_topic, signal.id, since, snapshot_timeout_s)
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
                n = parse_notification(msg.value(), kafka.schema_lookup)
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
    scope: ReconcileScope,
    keys: list[KeyTuple],
    db: SourceDatabase,
    identity: SourceIdentity | None,
    run_id: str,
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
    from pyiceberg.expressions import And

    cfg = scope.cfg
    kinds = [c.kind for c in scope.key]
    with consistent_read(db) as (cur, read):
        target = pyformat(f"{quote(scope.database)}.{quote(scope.table)}")
        chosen = []
        for k in keys:
            names = " AND ".join(f"{pyformat(quote(c.name))} = %s" for c in scope.key)
            cur.execute(f"SELECT COUNT(*) FROM {target} WHERE {names}", list(_source_key(kinds, k)))
            if (int(cur.fetchone()[0]) == 0) == absent:
                chosen.append(k)
    if not chosen:
        return
    position = read_position_of(cfg, identity, read)
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
        at = BinlogPosition.from_row(new, cfg.ordering, change=True)
        existing = lake_tombstones(catalog, cfg, set(chosen))
        older = [k for k, row in existing.items() if BinlogPosition.from_row(row, cfg.ordering, change=True) < at]
        fresh = [k for k in chosen if k not in existing or k in older]  # a newer tombstone stays
        if older:
            tombs.delete(keys_predicate(cfg, older))
        if fresh:
            rows = [{**dict(zip(cfg.primary_key, k, strict=True)), **new} for k in fresh]
            tombs.append(pa.Table.from_pylist(rows, schema=tombs.schema().as_arrow()))
    properties = {"cdc.reconcile-repair": run_id}
    if absent and cfg.history is not None:  # committed first: the table's delete names it
        properties.update(_end_in_history(catalog, cfg, chosen, at, new, run_id))
    # only rows written before the read: a row a later event wrote (the key came back) stays
    lake.delete(  # on the branch the runs commit to (a group table's main moves when the group is published)
        And(keys_predicate(cfg, chosen), position_below(position, cfg.ordering)),
        snapshot_properties=properties,
        branch=write_ref(lake),
    )
    log.info(
        "table %s: deleted the lake rows of %d key(s) %s written before %s",
        cfg.identifier,
        len(chosen),
        "the source does not have (tombstones at that position)" if absent else "held more than once",
        position.to_text(),
    )


def _end_in_history(
    catalog: Catalog, cfg: TableConfig, keys: list[KeyTuple], at: BinlogPosition, tombstone: dict[str, Any], run_id: str
) -> dict[str, str]:
    """The repair's deletes in the table's history (:mod:`cdclake.model.history`, "Repairs"): each
    key's open version below ``at`` (the tombstone's position) ends there, and a deleted version
    (``_cdc_change`` :data:`~cdclake.model.history.CHANGE_REPAIR`) opens there, valid from the read's
    time, with the tombstone's metadata columns; in one transaction, before the table's delete.
    Returns the summary property of the table's delete that names the history's snapshot
    (:attr:`~cdclake.model.layout.SummaryKeys.HISTORY_SNAPSHOT`; none without a history table).
    A retry finds those keys' open versions deleted already and writes nothing."""
    import pyarrow as pa

    e = expressions()
    history = load_table_or_none(catalog, side_table(cfg.identifier, HISTORY_SUFFIX))
    if history is None:
        return {}
    parts = [p.field for p in position_parts(ORDERINGS[0])]
    at_struct = {f: getattr(at, f) for f in parts}
    open_now = e.And(e.EqualTo(IS_CURRENT_COLUMN, True), e.EqualTo(IS_DELETED_COLUMN, False))
    found = history.scan(row_filter=e.And(keys_predicate(cfg, keys), open_now)).to_arrow().to_pylist()
    ending = [r for r in found if BinlogPosition(*(r[VALID_FROM_POSITION_COLUMN][f] for f in parts)) < at]
    if ending:
        names = history.schema().column_names
        ended = [
            {**r, VALID_TO_TS_COLUMN: tombstone["_cdc_source_ts"], VALID_TO_POSITION_COLUMN: at_struct,
             IS_CURRENT_COLUMN: False}
            for r in ending
        ]  # fmt: skip
        deleted = [
            {
                **dict.fromkeys(names),
                **{k: r[k] for k in cfg.primary_key},
                **{k: v for k, v in tombstone.items() if k in names},
                "_cdc_op": "d",
                "_cdc_snapshot": False,
                VALID_FROM_TS_COLUMN: tombstone["_cdc_source_ts"],
                VALID_FROM_POSITION_COLUMN: at_struct,
                IS_CURRENT_COLUMN: True,
                IS_DELETED_COLUMN: True,
                RUN_ID_COLUMN: run_id,
                CHANGE_COLUMN: CHANGE_REPAIR,
            }
            for r in ending
        ]
        ended_keys = [tuple(r[k] for k in cfg.primary_key) for r in ending]
        with history.transaction() as tx:
            tx.delete(e.And(keys_predicate(cfg, ended_keys), open_now))
            tx.append(pa.Table.from_pylist(ended + deleted, schema=history.schema().as_arrow()))
        log.info(
            "table %s: %d key(s) deleted by the repair end in its history at %s (%s = '%s')",
            cfg.identifier,
            len(ending),
            at.to_text(),
            CHANGE_COLUMN,
            CHANGE_REPAIR,
        )
    head = history.refresh().current_snapshot()
    return {} if head is None else {SummaryKeys.HISTORY_SNAPSHOT: str(head.snapshot_id)}
