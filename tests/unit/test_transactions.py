"""Whole source transactions (:mod:`cdclake.model.transactions`): the cut of a batch, on random
interleavings of transactions over partitions, ``END`` records late or missing, transactions larger
than a batch, snapshot reads mixed in, and transactions begun before the batch."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdclake.model.position import BinlogPosition
from cdclake.model.transactions import (
    BatchTransaction,
    LastTransaction,
    TransactionEnd,
    cut_position,
    partition_ends,
)


@dataclass(frozen=True)
class Event:
    txn: str | None  # None: a snapshot read
    order: int
    position: BinlogPosition
    partition: int


def source(txn_sizes: list[int], partitions_of: list[int], reads: list[int]) -> list[Event]:
    """Events in binlog order: transaction ``i`` writes ``txn_sizes[i]`` events of the table, each to
    a partition drawn from ``partitions_of``; ``reads[i]`` snapshot reads follow it."""
    events, draw, pos = [], iter(partitions_of * 100), 100
    for i, size in enumerate(txn_sizes):
        for order in range(1, size + 1):
            events.append(Event(f"0-1-{i}", order, BinlogPosition(1, pos, order, 1), next(draw)))
        pos += 100
        for _ in range(reads[i % len(reads)] if reads else 0):
            events.append(Event(None, 0, BinlogPosition(1, pos, 0, 0), next(draw)))
            pos += 1
    return events


def batch_of(events: list[Event], taken: dict[int, int]) -> dict[int, list[Event]]:
    """Per partition, its first ``taken[p]`` events (Kafka keeps each partition in binlog order)."""
    by_partition: dict[int, list[Event]] = defaultdict(list)
    for e in events:
        by_partition[e.partition].append(e)
    return {p: by_partition[p][: taken.get(p, 0)] for p in by_partition}


def cut_of(
    batch: dict[int, list[Event]], ends: dict[str, int], complete: set[int]
) -> tuple[dict[int, int], dict[str, list[Event]]]:
    """The model's cut of ``batch`` (offsets from 0 in each partition); returns each partition's
    end offset and the applied events per transaction."""
    txns: dict[str, list[Event]] = defaultdict(list)
    for events in batch.values():
        for e in events:
            if e.txn is not None:
                txns[e.txn].append(e)
    candidates = [
        BatchTransaction(t, len({e.order for e in es}), min(e.position for e in es), max(e.position for e in es))
        for t, es in txns.items()
    ]
    last = {p: (max(e.position for e in es) if es else None) for p, es in batch.items()}
    cut = cut_position(candidates, ends, last, complete)
    start = {p: 0 for p in batch}
    end = {p: len(es) for p, es in batch.items()}
    if cut is not None:
        first = {p: next((i for i, e in enumerate(es) if e.position >= cut.position), None) for p, es in batch.items()}
        end = partition_ends(start, end, {p: o for p, o in first.items() if o is not None})
    applied: dict[str, list[Event]] = defaultdict(list)
    for p, es in batch.items():
        for e in es[: end[p]]:
            applied[e.txn or f"read@{e.position}"].append(e)
    return end, applied


@settings(max_examples=300, deadline=None)
@given(
    txn_sizes=st.lists(st.integers(1, 6), min_size=1, max_size=12),
    partitions_of=st.lists(st.integers(0, 2), min_size=1, max_size=20),
    reads=st.lists(st.integers(0, 2), max_size=4),
    taken=st.dictionaries(st.integers(0, 2), st.integers(0, 40)),
    ends_seen=st.integers(0, 12),
)
def test_a_cut_batch_is_a_prefix_of_the_binlog_in_whole_transactions(txn_sizes, partitions_of, reads, taken, ends_seen):
    events = source(txn_sizes, partitions_of, reads)
    batch = batch_of(events, taken)
    complete = {p for p, es in batch.items() if len(es) == sum(1 for e in events if e.partition == p)}
    # the END of the first ``ends_seen`` transactions is in the transaction topic
    ends = {f"0-1-{i}": size for i, size in enumerate(txn_sizes) if i < ends_seen}
    _, applied = cut_of(batch, ends, complete)

    for txn, es in applied.items():
        if not txn.startswith("read@"):
            assert len(es) == txn_sizes[int(txn.split("-")[-1])], f"{txn} applied in part: {es}"
            assert txn in ends, f"{txn} applied before its END was read"
    # a prefix: no event applied above an event of the batch that was not
    kept = {id(e) for es in applied.values() for e in es}
    left = [e.position for es in batch.values() for e in es if id(e) not in kept]
    if left:
        assert all(e.position < min(left) for es in applied.values() for e in es)


@settings(max_examples=100, deadline=None)
@given(
    txn_sizes=st.lists(st.integers(1, 6), min_size=1, max_size=12),
    partitions_of=st.lists(st.integers(0, 2), min_size=1, max_size=20),
)
def test_every_end_read_and_every_partition_read_to_its_end_cuts_nothing(txn_sizes, partitions_of):
    events = source(txn_sizes, partitions_of, [])
    batch = batch_of(events, {p: 10_000 for p in range(3)})
    ends = {f"0-1-{i}": size for i, size in enumerate(txn_sizes)}
    end, applied = cut_of(batch, ends, set(batch))
    assert end == {p: len(es) for p, es in batch.items()}
    assert sum(len(es) for es in applied.values()) == len(events)


def test_a_transaction_without_its_end_waits_and_everything_after_it_too():
    events = source([2, 3, 1], [0, 1], [])
    batch = batch_of(events, {0: 100, 1: 100})
    end, applied = cut_of(batch, {"0-1-0": 2, "0-1-2": 1}, {0, 1})  # transaction 1's END not read
    assert set(applied) == {"0-1-0"}
    assert sum(end.values()) == 2


def test_a_transaction_begun_before_the_batch_is_whole_once_every_partition_passed_it():
    """A run from before the metadata (or a replay) ended inside transaction 0: the batch holds
    only its later events. Its END is read and every partition holds a later event (or was read to
    its end), so nothing of it can come after the batch: the rest was applied already."""
    events = source([4, 2], [0, 1], [])
    batch = batch_of(events, {0: 100, 1: 100})
    batch = {p: [e for e in es if not (e.txn == "0-1-0" and e.order <= 2)] for p, es in batch.items()}
    _, applied = cut_of(batch, {"0-1-0": 4, "0-1-1": 2}, set())
    assert set(applied) == {"0-1-0", "0-1-1"}
    # with a partition neither past it nor read to its end, the rest may still come: it waits
    quiet = {**batch, 2: []}
    _, applied = cut_of(quiet, {"0-1-0": 4, "0-1-1": 2}, set())
    assert applied == {}


def test_re_emitted_events_count_once_and_applied_transactions_never_cut():
    p = BinlogPosition(1, 100, 1, 1)
    twice = BatchTransaction("t1", 2, p, BinlogPosition(1, 100, 2, 1))
    assert cut_position([twice], {"t1": 3}, {0: twice.last}, ()) is not None
    assert cut_position([twice], {"t1": 3}, {0: twice.last}, (), applied_through=p) is None


def test_end_records_and_marks_parse():
    end = TransactionEnd.from_value(
        {
            "status": "END",
            "id": "0-1-7",
            "event_count": 3,
            "data_collections": [
                {"data_collection": "inventory.accounts", "event_count": 2},
                {"data_collection": "inventory.ledger", "event_count": 1},
            ],
        },
        offset=41,
    )
    assert end == TransactionEnd("0-1-7", {"inventory.accounts": 2, "inventory.ledger": 1}, 41)
    assert TransactionEnd.from_value({"status": "BEGIN", "id": "0-1-7"}, 40) is None
    with pytest.raises(ValueError, match="not a Debezium transaction metadata record"):
        TransactionEnd.from_value({"op": "c"}, 3)
    mark = LastTransaction("0-1-7", BinlogPosition(2, 300, 1, 1))
    assert LastTransaction.from_json(mark.to_json()) == mark
    with pytest.raises(ValueError, match="outside the planned range"):
        partition_ends({0: 5}, {0: 9}, {0: 9})


def test_a_commits_summary_records_the_last_transaction_the_records_left_and_the_events_without_metadata(caplog):
    """:func:`cdclake.spark.transactions.transaction_summary` (no Spark): what a commit records of
    whole transactions, and the one warning of a batch whose events carry no transaction block."""
    import json
    import logging

    from cdclake.model.layout import SummaryKeys
    from cdclake.model.offsets import OffsetRange
    from cdclake.model.transactions import Cut
    from cdclake.spark.transactions import TransactionCut, transaction_summary
    from tests.conftest import make_table

    cfg = make_table()
    planned = OffsetRange(topic=cfg.topic, start={0: 0, 1: 0}, end={0: 6, 1: 5})
    applied = OffsetRange(topic=cfg.topic, start={0: 0, 1: 0}, end={0: 4, 1: 5})
    last = LastTransaction("0-1-7", BinlogPosition(1, 900, 0, 3))
    cut = TransactionCut(Cut(BinlogPosition(1, 1000, 0, 3), "0-1-8", 1, None), last, ends=3)
    summary = transaction_summary(cfg, planned, applied, cut, {"u": 9})
    assert json.loads(summary[SummaryKeys.LAST_TRANSACTION]) == {"id": "0-1-7", "position": "1:900:0:3"}
    assert json.loads(summary[SummaryKeys.TRANSACTION_WAIT]) == {"events": 2, "transaction": "0-1-8"}
    assert SummaryKeys.WITHOUT_TRANSACTION not in summary
    # no transaction topic (the planner warned): every change event; snapshot reads are no transaction's
    assert transaction_summary(cfg, planned, planned, None, {"c": 2, "u": 3, "r": 6}) == {
        SummaryKeys.WITHOUT_TRANSACTION: "5"
    }
    assert not caplog.records
    # a transaction topic, but events without a transaction block: said once
    with caplog.at_level(logging.WARNING):
        plain = transaction_summary(cfg, planned, planned, TransactionCut(None, None, 0, 4), {"u": 4})
    assert plain == {SummaryKeys.WITHOUT_TRANSACTION: "4"}
    (record,) = caplog.records
    assert "transactions: whole" in record.getMessage() and "provide.transaction.metadata" in record.getMessage()
    ignore = cfg.model_copy(update={"transactions": "ignore"})
    assert transaction_summary(ignore, planned, planned, None, {"u": 4}) == {}


def test_a_range_extended_for_a_whole_transaction_is_capped_by_max_transaction_events():
    from cdclake.errors import TransactionTooLargeError
    from cdclake.model.position import BinlogPosition
    from cdclake.model.transactions import Cut, extended_end

    cut = Cut(BinlogPosition(1, 100, 0, 1), "file=mysql-bin.000001,pos=90", have=4, want=10)
    start, end, high = {0: 0, 1: 0}, {0: 2, 1: 2}, {0: 50, 1: 50}
    # at least doubled, and by the events missing: 6 more per partition
    assert extended_end(cut, start, end, high, limit=100) == {0: 8, 1: 8}
    assert extended_end(cut, start, end, {0: 5, 1: 50}, limit=100) == {0: 5, 1: 8}  # never past the end
    with pytest.raises(
        TransactionTooLargeError, match=r"transaction 'file=mysql-bin.000001,pos=90' needs a run of more than 15"
    ):
        extended_end(cut, start, end, high, limit=15)
