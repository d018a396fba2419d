"""Whole source transactions (pure: no Spark, no Kafka): where a table's batch is cut so that a
commit holds, for every source transaction that touched the table, all of its events for the table
or none.

With ``provide.transaction.metadata=true`` Debezium writes a ``BEGIN`` and an ``END`` record per
transaction to ``<topic.prefix>.transaction`` (one partition, in binlog order), and every change
event carries ``transaction {id, total_order, data_collection_order}``. ``END`` says how many
events the transaction wrote to each table (``data_collections[{data_collection, event_count}]``);
``data_collection_order`` numbers a transaction's events of one table from 1. Source: Debezium's
MySQL connector documentation, "Transaction metadata".

A batch is whole up to the first event of the earliest transaction (by binlog position) that is
not whole in it: :func:`cut_position`. Every partition is cut before its first event at or after
that position, so the applied set is a prefix of the table's binlog in whole transactions; the rest
waits for the next run. A transaction is whole when the batch holds as many distinct
``data_collection_order`` values of it as ``END`` counts for the table (distinct: a connector that
restarts re-emits a transaction's events, and both copies may be in one batch), or when its missing
events cannot come after the batch: every partition has passed it (holds a later event) or was read
to its end, and its ``END`` was read (the connector sends ``END`` after the transaction's events).
Those were read by an earlier run (a run from before the metadata, a replay that started inside a
transaction). Events without a transaction (snapshot reads, a connector without the setting) are a
whole unit each, and so is a truncate (:data:`UNIT_OPS`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from cdclake.errors import TransactionTooLargeError
from cdclake.model.layout import SummaryKeys
from cdclake.model.offsets import Offsets
from cdclake.model.position import SOURCE_ORDERINGS, BinlogPosition

if TYPE_CHECKING:
    from cdclake.model.config import TableConfig

CHANGE_OPS = ("c", "u", "d")
"""The Debezium ops a source transaction writes (snapshot reads carry no ``transaction`` block)."""

UNIT_OPS = ("t",)
"""Ops whose event is a whole transaction by itself, whatever its ``transaction`` block says.
``TRUNCATE TABLE`` commits implicitly before and after it (MySQL Reference Manual, "Statements
That Cause an Implicit Commit"; MariaDB likewise), so its transaction holds its ``t`` event alone.
Debezium's MariaDB connector (3.5.0.Final) gives the ``t`` event a transaction id and writes that
transaction's ``BEGIN`` but never its ``END``: waiting for the ``END`` would stop the table."""


def cuts_whole(cfg: TableConfig) -> bool:
    """Whether the table's commits are cut to whole source transactions: ``transactions: whole``
    and a source ordering (under ``ordering: kafka`` nothing orders events across partitions)."""
    return cfg.transactions == "whole" and cfg.ordering in SOURCE_ORDERINGS


@dataclass(frozen=True)
class TransactionEnd:
    """One ``END`` record of the transaction topic.

    Attributes:
        id: the transaction id (MariaDB/MySQL: the GTID, or ``file:pos`` without GTIDs).
        event_counts: events per data collection (``"<database>.<table>"``).
        offset: the record's offset in its partition of the transaction topic.
    """

    id: str
    event_counts: Mapping[str, int]
    offset: int

    @classmethod
    def from_value(cls, value: Mapping[str, Any], offset: int) -> TransactionEnd | None:
        """The ``END`` of a transaction-topic value (the JSON payload, or the Avro datum as JSON);
        ``None`` for a ``BEGIN``.

        Raises:
            ValueError: not a transaction metadata record (no ``status`` or ``id``, or an ``END``
                without ``data_collections``); the message names what is missing.
        """
        status, txn = value.get("status"), value.get("id")
        if status not in ("BEGIN", "END") or not isinstance(txn, str):
            raise ValueError(f"not a Debezium transaction metadata record (status {status!r}, id {txn!r})")
        if status == "BEGIN":
            return None
        collections = value.get("data_collections")
        if not isinstance(collections, list):
            raise ValueError(f"transaction {txn!r}: END without data_collections")
        counts = {str(c["data_collection"]): int(c["event_count"]) for c in collections}
        return cls(txn, counts, offset)


@dataclass(frozen=True)
class BatchTransaction:
    """What a batch holds of one transaction, for one table.

    Attributes:
        id: the transaction id.
        orders: distinct ``data_collection_order`` values of its events in the batch.
        first: the lowest position of its events in the batch.
        last: the highest.
    """

    id: str
    orders: int
    first: BinlogPosition
    last: BinlogPosition


@dataclass(frozen=True)
class Cut:
    """Where a batch is cut (:func:`cut_position`).

    Attributes:
        position: every partition is cut before its first event at or after it.
        transaction: the transaction that is not whole (its id), or, for a cut of a group member's
            batch, the first one after the cut.
        have: its distinct events in the batch for the table.
        want: the events ``END`` counts for the table; ``None``: its ``END`` is not read yet.
        reason: ``whole`` (the transaction is not whole in the batch), or for a group member
            (:func:`cdclake.spark.transactions.cut_batch`) ``prefix`` (a partition was read less
            far: the batch ends where every partition was read) or ``target`` (the transaction
            ends after the group's target, :data:`~cdclake.model.layout.GROUP_TARGET_PROPERTY`).
    """

    position: BinlogPosition
    transaction: str
    have: int
    want: int | None
    reason: Literal["whole", "prefix", "target"] = "whole"

    def describe(self) -> str:
        if self.reason == "prefix":
            return (
                f"a partition was read only to before {self.position.to_event_text()}: the batch ends before "
                f"transaction {self.transaction!r}, so that it holds every event of the table up to its end"
            )
        if self.reason == "target":
            return (
                f"transaction {self.transaction!r} ends after the group's target: the batch ends before "
                f"{self.position.to_event_text()}"
            )
        missing = (
            "its END is not in the transaction topic: not written yet, or deleted by the topic's retention "
            "(then set transactions: ignore for the table's runs to go on)"
            if self.want is None
            else f"{self.want} in its END"
        )
        return (
            f"transaction {self.transaction!r} is not whole in the batch ({self.have} of its events for the "
            f"table, {missing}): the batch ends before {self.position.to_event_text()}"
        )


def cut_position(
    batch: Iterable[BatchTransaction],
    ends: Mapping[str, int],
    partition_last: Mapping[int, BinlogPosition | None],
    read_to_end: Iterable[int],
    applied_through: BinlogPosition | None = None,
) -> Cut | None:
    """Where to cut a batch so that it holds whole transactions only (see the module docstring).

    Args:
        batch: the batch's transactions of the table (events without a transaction left out).
        ends: events for the table per transaction id, from the ``END`` records read
            (:class:`TransactionEnd`, ``event_counts[<database>.<table>]``).
        partition_last: per partition of the range, the highest position of its events in the
            batch (``None``: it has none).
        read_to_end: the partitions whose range ends at the topic's high watermark.
        applied_through: the table's greatest applied position: a transaction that starts at or
            below it is a re-emission of one applied already (the apply discards it), never a cut.

    Returns:
        The cut at the earliest (lowest first position) transaction that is not whole, or
        ``None`` when every one is.
    """
    done = set(read_to_end)
    cut: Cut | None = None
    for txn in batch:
        if applied_through is not None and txn.first <= applied_through:
            continue
        want = ends.get(txn.id)
        passed = all(p in done or (last is not None and last > txn.last) for p, last in partition_last.items())
        if want is not None and (txn.orders >= want or passed):
            continue
        if cut is None or txn.first < cut.position:
            cut = Cut(txn.first, txn.id, txn.orders, want)
    return cut


def partition_ends(
    start: Mapping[int, int], end: Mapping[int, int], first_at_or_after: Mapping[int, int]
) -> dict[int, int]:
    """Per partition, the end offset of a cut batch: before the partition's first event at or after
    the cut position (``first_at_or_after``; a partition without one keeps its planned ``end``).

    Raises:
        ValueError: an offset outside the planned range ``[start, end)``.
    """
    out = {}
    for p, hi in end.items():
        o = first_at_or_after.get(p)
        if o is not None and not start[p] <= o < hi:
            raise ValueError(f"partition {p}: offset {o} is outside the planned range [{start[p]}, {hi})")
        out[p] = hi if o is None else o
    return out


@dataclass(frozen=True)
class LastTransaction:
    """The last whole transaction a commit applied (:attr:`~cdclake.model.layout.SummaryKeys.LAST_TRANSACTION`).

    Attributes:
        id: its id.
        position: its last event's position.
    """

    id: str
    position: BinlogPosition

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "position": self.position.to_text()})

    @classmethod
    def from_json(cls, text: str) -> LastTransaction:
        """Raises: ValueError: not the JSON :meth:`to_json` writes."""
        try:
            d = json.loads(text)
            return cls(str(d["id"]), BinlogPosition.from_text(d["position"]))
        except (KeyError, TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"not a last-transaction record: {text!r} ({e})") from e


class TransactionWait(BaseModel):
    """Records a run left for the next one because a source transaction was not whole
    (:attr:`~cdclake.model.layout.SummaryKeys.TRANSACTION_WAIT` of a commit that cut its range;
    :data:`~cdclake.model.layout.TRANSACTION_WAIT_PROPERTY` of a run that applied nothing).

    Attributes:
        events: Kafka records of the run's planned range not applied (from the cut to the range's
            end; the whole range when nothing was applied).
        transaction: the transaction that was not whole (its id).
        start: the run's start offsets (the table property only: the wait holds while the
            table's committed offsets are these); empty in a commit's summary.
    """

    model_config = ConfigDict(frozen=True)

    events: int
    transaction: str
    start: Offsets = {}

    @classmethod
    def from_text(cls, text: str | None) -> TransactionWait | None:
        """The record of a summary value or table property; ``None`` when absent or unreadable
        (status never fails on it)."""
        if not text:
            return None
        try:
            return cls.model_validate_json(text)
        except ValueError:
            return None


class TransactionStatus(BaseModel):
    """A table's whole source transactions, for ``cdclake status`` and the CDC monitor.

    Attributes:
        last_id: the newest whole transaction applied (``cdc.last-transaction`` of the newest CDC
            commit that has it); ``None``: none yet.
        last_position: its last event's position ``<file seq>:<pos>:<row>:<rank>``.
        waiting_events: Kafka records waiting for a transaction that is not whole yet: those the
            newest CDC commit's run left (``cdc.transaction-wait``), or, when a run applied nothing
            since, that run's range (:data:`~cdclake.model.layout.TRANSACTION_WAIT_PROPERTY`).
            Records beyond the runs' ranges are in the lag, not here.
        waiting_for: the transaction they wait for (its id); ``None`` when none waits.
        without_metadata: change events the newest CDC commit applied without transaction
            metadata (``cdc.events-without-transaction``): it may hold part of a transaction.
    """

    model_config = ConfigDict(frozen=True)

    last_id: str | None = None
    last_position: str | None = None
    waiting_events: int = 0
    waiting_for: str | None = None
    without_metadata: int = 0

    def warning(self) -> str | None:
        """One sentence for the status's warnings when the newest commit applied events without
        transaction metadata; ``None`` otherwise."""
        if not self.without_metadata:
            return None
        return (
            f"transactions: whole, but the last CDC commit applied {self.without_metadata} change event(s) "
            "without Debezium transaction metadata (the connector runs without provide.transaction.metadata, "
            "or its transaction topic is missing): batches are cut by offsets and a reader may see part of a "
            "source transaction; turn the setting on, or set transactions: ignore to accept it "
            '(docs/operations.md, "Whole source transactions")'
        )


def transaction_status(
    snapshots: Iterable[tuple[int, int, Mapping[str, str] | None]],
    topic: str,
    committed: Mapping[int, int] | None,
    wait_property: str | None,
) -> TransactionStatus:
    """The :class:`TransactionStatus` of a table configured ``transactions: whole``.

    Args:
        snapshots: ``(snapshot id, timestamp ms, summary or None)`` from the current snapshot back
            through its ancestors, newest first; read until a CDC commit of ``topic`` with
            ``cdc.last-transaction``.
        topic: the table's topic.
        committed: the table's committed offsets (``None``: it never committed).
        wait_property: :data:`~cdclake.model.layout.TRANSACTION_WAIT_PROPERTY`, if set.
    """
    fields: dict[str, Any] = {}
    newest = True
    for _, _, summary in snapshots:
        if summary is None or SummaryKeys.END_OFFSETS not in summary or summary.get(SummaryKeys.TOPIC) != topic:
            continue
        if newest:
            newest = False
            wait = TransactionWait.from_text(summary.get(SummaryKeys.TRANSACTION_WAIT))
            if wait is not None:
                fields.update(waiting_events=wait.events, waiting_for=wait.transaction)
            fields["without_metadata"] = int(summary.get(SummaryKeys.WITHOUT_TRANSACTION) or 0)
        last = summary.get(SummaryKeys.LAST_TRANSACTION)
        if last:
            try:
                found = LastTransaction.from_json(last)
            except ValueError:
                continue
            fields.update(last_id=found.id, last_position=found.position.to_text())
            break
    waited = TransactionWait.from_text(wait_property)
    # a commit since moves the committed offsets off the waiting run's start (a table that never
    # committed has none: the wait is its first run's)
    if waited is not None and all(waited.start.get(p) == o for p, o in (committed or {}).items()):
        fields.update(waiting_events=waited.events, waiting_for=waited.transaction)
    return TransactionStatus(**fields)


def extended_end(
    cut: Cut,
    start: Mapping[int, int],
    end: Mapping[int, int],
    high: Mapping[int, int],
    *,
    limit: int,
) -> dict[int, int]:
    """The end offsets of a range extended past its cap so that it may hold transaction ``cut``
    whole: each partition's range at least doubled (re-emitted copies take offsets but add no
    event) and by at least the events it misses, up to the high watermarks.

    Args:
        cut: the transaction that is not whole (``want`` is not ``None``).
        start, end: the range's offsets per partition.
        high: the partitions' high watermarks.
        limit: the most records the extended range may hold (``max_transaction_events``).

    Raises:
        TransactionTooLargeError: the extended range would hold more than ``limit`` records.
    """
    want = cut.want if cut.want is not None else cut.have
    more = {p: max(want - cut.have, o - start[p]) for p, o in end.items()}
    extended = {p: min(high.get(p, o), o + more[p]) for p, o in end.items()}
    records = sum(extended[p] - start[p] for p in extended)
    if records > limit:
        raise TransactionTooLargeError(
            f"transaction {cut.transaction!r} needs a run of more than {limit} records to be applied whole "
            f"(max_transaction_events; {cut.have} of its {want} events for the table read so far, the range "
            f"would grow to {records} records): the table stops here, nothing was applied. Raise "
            "max_transaction_events for the table if the engine's memory allows a run that large, or set "
            "transactions: ignore for the table so that runs may commit part of a source transaction "
            '(docs/operations.md, "A source transaction too large to apply whole").'
        )
    return extended
