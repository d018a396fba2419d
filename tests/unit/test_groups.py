"""Table groups (:mod:`cdclake.model.groups`): the config's groups, the interval a commit records, and
the position a group is published at, on random interleavings of transactions over tables."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdclake.errors import ConfigError
from cdclake.model.config import TablesFile
from cdclake.model.groups import (
    MemberSnapshot,
    SourceInterval,
    batch_is_prefix,
    choose_position,
    extend_interval,
    member_snapshots,
    valid_interval,
)
from cdclake.model.layout import SummaryKeys, group_tag
from cdclake.model.position import BinlogPosition
from cdclake.model.transactions import TransactionEnd

TX = "dbserver1.transaction"


def tables(*entries: dict) -> TablesFile:
    base = {"namespace": "bank", "primary_key": ["id"]}
    return TablesFile.model_validate({"tables": [{**base, **e} for e in entries]})


def test_group_members_need_whole_transactions_and_one_transaction_topic():
    ok = tables(
        {"name": "accounts", "topic": "dbserver1.bank.accounts", "table": "accounts", "group": "bank"},
        {"name": "ledger", "topic": "dbserver1.bank.ledger", "table": "ledger", "group": "bank"},
        {"name": "other", "topic": "dbserver1.bank.other", "table": "other"},
    )
    assert [t.group for t in ok.tables] == ["bank", "bank", None]
    assert group_tag("bank") == "cdc_group_bank"
    with pytest.raises(ValueError, match="table 'ledger' is in group 'bank' but is configured transactions: ignore"):
        tables(
            {"name": "accounts", "topic": "dbserver1.bank.accounts", "table": "accounts", "group": "bank"},
            {
                "name": "ledger",
                "topic": "dbserver1.bank.ledger",
                "table": "ledger",
                "group": "bank",
                "transactions": "ignore",
            },
        )
    with pytest.raises(
        ValueError, match="table 'ledger' is in group 'bank' with transaction topic 'other.transaction'"
    ):
        tables(
            {"name": "accounts", "topic": "dbserver1.bank.accounts", "table": "accounts", "group": "bank"},
            {"name": "ledger", "topic": "other.bank.ledger", "table": "ledger", "group": "bank"},
        )
    with pytest.raises(ValueError, match="group"):
        tables({"name": "a", "topic": "dbserver1.bank.a", "table": "a", "group": "Bank-1"})


def test_the_group_checks_raise_config_error():
    from cdclake.model.config import TableConfig
    from cdclake.model.groups import group_members

    cfg = TableConfig(
        name="a", topic="p.db.a", namespace="n", table="a", primary_key=["id"], group="g", ordering="kafka"
    )
    with pytest.raises(ConfigError, match="table 'a' is in group 'g'"):
        group_members([cfg])


def end(txn: str, offset: int, *collections: str) -> TransactionEnd:
    return TransactionEnd(txn, {c: 1 for c in collections}, offset)


def test_a_commit_is_valid_from_its_last_transaction_to_before_the_next_that_touches_its_table():
    ends = [
        end("t1", 3, "bank.accounts"),
        end("t2", 5, "bank.ledger"),
        end("t3", 8, "bank.accounts", "bank.ledger"),
        end("t4", 9, "bank.ledger"),
    ]
    assert valid_interval(TX, ends, "bank.accounts", "t1") == SourceInterval(TX, 3, 7)
    # nothing after it touches the table: valid to the last END read
    assert valid_interval(TX, ends, "bank.accounts", "t3") == SourceInterval(TX, 8, 9)
    # a restarted connector wrote t1's END again: a copy of an applied transaction is no later one
    assert valid_interval(TX, [*ends, end("t1", 10, "bank.accounts")], "bank.accounts", "t3") == SourceInterval(
        TX, 8, 10
    )
    assert valid_interval(TX, ends, "bank.accounts", "t9") is None


def test_a_batch_read_further_in_one_partition_than_another_is_at_no_position():
    p = lambda n: BinlogPosition(1, n, 0, 1)  # noqa: E731
    assert batch_is_prefix(p(50), {0: p(60), 1: p(50)}, [], p(10))
    assert batch_is_prefix(p(50), {0: p(60), 1: p(20)}, [1], p(10))
    assert not batch_is_prefix(p(50), {0: p(60), 1: p(20)}, [], p(10))  # partition 1 may hold 21..49
    assert not batch_is_prefix(p(50), {0: p(60), 1: None}, [], None)
    assert not batch_is_prefix(p(50), {0: p(60)}, [0], p(70))  # an earlier run applied beyond it


def test_snapshots_without_an_interval_of_the_groups_topic_are_no_candidates():
    def summary(interval: str | None, topic: str = "dbserver1.bank.accounts") -> dict[str, str]:
        s = {SummaryKeys.TOPIC: topic, SummaryKeys.END_OFFSETS: '{"0": 1}'}
        if interval is not None:
            s[SummaryKeys.TRANSACTION_INTERVAL] = interval
        return s

    found = member_snapshots(
        [
            (5, 0, summary(SourceInterval(TX, 4, 6).to_json())),
            (4, 0, summary(None)),
            (3, 0, None),
            (2, 0, summary(SourceInterval("x.transaction", 1, 2).to_json())),
            (1, 0, summary("{not json")),
            (0, 0, summary(SourceInterval(TX, 0, 1).to_json(), topic="dbserver1.bank.ledger")),
        ],
        "dbserver1.bank.accounts",
        TX,
    )
    assert found == [MemberSnapshot(5, SourceInterval(TX, 4, 6), newest=True)]
    # a newer commit without an interval: the older one is no longer the newest state
    later = [(6, 0, summary(None)), (5, 0, summary(SourceInterval(TX, 4, 6).to_json()))]
    assert member_snapshots(later, "dbserver1.bank.accounts", TX) == [MemberSnapshot(5, SourceInterval(TX, 4, 6))]


def test_a_quiet_members_newest_commit_stays_valid_until_a_transaction_touches_it():
    newest = SourceInterval(TX, 3, 5)
    ends = [end("t4", 7, "bank.ledger"), end("t5", 9, "bank.ledger"), end("t6", 11, "bank.accounts")]
    assert extend_interval(newest, ends, "bank.accounts") == SourceInterval(TX, 3, 10)
    assert extend_interval(newest, ends[:2], "bank.accounts") == SourceInterval(TX, 3, 9)
    assert extend_interval(newest, [], "bank.accounts") == newest
    # END records at or below the interval's end (read from an earlier point) change nothing
    assert extend_interval(SourceInterval(TX, 3, 9), ends, "bank.accounts") == SourceInterval(TX, 3, 10)


def test_the_group_is_published_at_the_greatest_position_every_member_covers():
    a = [MemberSnapshot(2, SourceInterval(TX, 8, 12)), MemberSnapshot(1, SourceInterval(TX, 3, 7))]
    b = [MemberSnapshot(20, SourceInterval(TX, 10, 20)), MemberSnapshot(10, SourceInterval(TX, 5, 9))]
    point = choose_position({"a": a, "b": b})
    assert point is not None and (point.position, dict(point.snapshots)) == (12, {"a": 2, "b": 20})
    # b's newest commit is past a's: the greatest position a and b's older commit share
    b_ahead = [MemberSnapshot(30, SourceInterval(TX, 13, 20)), *b[1:]]
    point = choose_position({"a": a, "b": b_ahead})
    assert point is not None and (point.position, dict(point.snapshots)) == (9, {"a": 2, "b": 10})
    assert choose_position({"a": a, "b": []}) is None
    assert choose_position({"a": a, "b": [MemberSnapshot(1, SourceInterval(TX, 0, 2))]}) is None
    assert choose_position({}) is None


def source_states(n_txns: int, touches: list[set[str]]) -> dict[str, list[int]]:
    """Per table, after each END offset (0..n-1), the number of transactions touching it so far:
    the table's state at that position of the source."""
    states: dict[str, list[int]] = {"a": [], "b": [], "c": []}
    for i in range(n_txns):
        for t in states:
            states[t].append((states[t][-1] if states[t] else 0) + (t in touches[i]))
    return states


@settings(max_examples=300, deadline=None)
@given(
    touches=st.lists(st.sets(st.sampled_from("abc"), min_size=1), min_size=1, max_size=25),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_chosen_commits_show_every_table_at_one_position_of_the_source(touches, seed):
    """Random transactions over three tables, each table committed by runs that apply a prefix of
    its transactions and read the transaction topic to a random point at or beyond it; whatever the
    interleaving, the commits chosen show each table as the source was at the chosen position, and
    no greater position is covered by all three."""
    rng = random.Random(seed)
    n = len(touches)
    ends = [TransactionEnd(f"t{i}", {f"db.{t}": 1 for t in touches[i]}, i) for i in range(n)]
    truth = source_states(n, touches)
    members: dict[str, list[MemberSnapshot]] = {}
    held: dict[int, tuple[str, int]] = {}  # snapshot id -> (table, transactions applied)
    for table in "abc":
        mine = [i for i in range(n) if table in touches[i]]
        snaps: list[MemberSnapshot] = []
        applied = 0
        while applied < len(mine):
            applied = rng.randint(applied + 1, len(mine))
            last = mine[applied - 1]
            seen = rng.randint(last, n - 1)  # the run read ENDs up to here
            interval = valid_interval(TX, ends[: seen + 1], f"db.{table}", f"t{last}")
            assert interval is not None
            sid = len(held)
            held[sid] = (table, applied)
            snaps.append(MemberSnapshot(sid, interval))
        members[table] = list(reversed(snaps))
    point = choose_position(members)
    covering = [p for p in range(n) if all(any(s.interval.covers(p) for s in snaps) for snaps in members.values())]
    if point is None:
        assert covering == []
        return
    assert point.position == max(covering)
    for table, sid in point.snapshots.items():
        assert held[sid] == (table, truth[table][point.position]), (table, point)


def test_a_group_members_commit_records_the_positions_it_is_valid_at():
    """:func:`cdclake.spark.transactions.transaction_summary` (no Spark) writes the interval the
    cut found; a table outside any group never has one."""
    import json

    from cdclake.model.offsets import OffsetRange
    from cdclake.model.transactions import LastTransaction
    from cdclake.spark.transactions import TransactionCut, transaction_summary
    from tests.conftest import make_table

    cfg = make_table(group="bank")
    planned = OffsetRange(topic=cfg.topic, start={0: 0}, end={0: 6})
    last = LastTransaction("0-1-7", BinlogPosition(1, 900, 0, 1))
    cut = TransactionCut(None, last, 3, 0, SourceInterval(TX, 41, 57))
    summary = transaction_summary(cfg, planned, planned, cut, {"u": 6})
    assert json.loads(summary[SummaryKeys.TRANSACTION_INTERVAL]) == {"topic": TX, "from": 41, "to": 57}
    plain = transaction_summary(make_table(), planned, planned, TransactionCut(None, last, 3), {"u": 6})
    assert SummaryKeys.TRANSACTION_INTERVAL not in plain


def test_a_position_tag_names_its_group_and_position_and_no_other_groups():
    """:func:`cdclake.model.layout.position_tag`: a group name has no ``-``, so group ``bank_at_7``
    cannot take the tags of group ``bank``."""
    from cdclake.model.layout import is_position_tag, position_of_tag, position_tag

    assert position_tag("bank", 120) == "cdc_group_bank-at-120"
    assert position_of_tag("bank", "cdc_group_bank-at-120") == 120
    assert position_of_tag("bank_at_7", "cdc_group_bank-at-120") is None
    assert position_of_tag("bank", "cdc_group_bank_at_7-at-3") is None
    assert position_of_tag("bank", "cdc_group_bank") is None
    assert is_position_tag("cdc_group_bank_at_7-at-3") and not is_position_tag("cdc_group_bank")


def test_the_group_commit_setting_takes_the_two_ways_and_no_other():
    """``CDCLAKE_GROUP_COMMIT``: ``multi_table`` by default, ``pointer``; anything else is refused."""
    import pydantic

    from cdclake.settings import Settings

    assert Settings.from_env({}).group_commit == "multi_table"
    assert Settings.from_env({"CDCLAKE_GROUP_COMMIT": "pointer"}).group_commit == "pointer"
    with pytest.raises(pydantic.ValidationError, match="group_commit"):
        Settings.from_env({"CDCLAKE_GROUP_COMMIT": "two_phase"})


def test_a_members_next_run_reaches_before_the_transaction_that_would_pass_its_cap():
    """:func:`cdclake.model.groups.member_reach`: the table's events of the transactions after its
    newest commit, up to ``max_events_per_run``; the first one always counts."""
    from cdclake.model.groups import member_reach

    newest = SourceInterval(TX, 3, 4)
    ends = [
        TransactionEnd("t3", {"bank.accounts": 2}, 3),  # at or below the interval: applied
        TransactionEnd("t5", {"bank.accounts": 3}, 6),
        TransactionEnd("t6", {"bank.ledger": 9}, 8),  # another table's: no cost
        TransactionEnd("t7", {"bank.accounts": 2, "bank.ledger": 1}, 10),
        TransactionEnd("t5", {"bank.accounts": 3}, 11),  # a restarted connector's copy
        TransactionEnd("t8", {"bank.accounts": 4}, 13),
    ]
    assert member_reach(newest, ends, "bank.accounts", 5) == 12  # t5 and t7: 5 events; t8 would pass
    assert member_reach(newest, ends, "bank.accounts", 4) == 9  # t5 alone
    assert member_reach(newest, ends, "bank.accounts", 1) == 9  # t5 is applied whole, over the cap
    assert member_reach(newest, ends, "bank.accounts", 100) == 13  # every END read
    assert member_reach(newest, ends, "bank.other", 1) == 13
    assert member_reach(newest, [], "bank.accounts", 5) == 4


def test_the_target_is_the_greatest_position_every_members_next_run_reaches():
    """:func:`cdclake.model.groups.choose_target` and :func:`~cdclake.model.groups.target_holds`."""
    from cdclake.model.groups import choose_target, target_holds

    a = [MemberSnapshot(2, SourceInterval(TX, 8, 9), newest=True), MemberSnapshot(1, SourceInterval(TX, 3, 5))]
    b = [MemberSnapshot(20, SourceInterval(TX, 11, 12), newest=True), MemberSnapshot(10, SourceInterval(TX, 4, 6))]
    members = {"a": a, "b": b}
    # a can stop anywhere in 8..30, b in 11..25: both meet at 25
    assert choose_target(members, {"a": 30, "b": 25}, after=5) == 25
    # a cannot reach b's newest commit: b's older commits hold no later position than 6, so a aims
    # at b's newest (11), which takes it more than a run
    assert choose_target(members, {"a": 10, "b": 25}, after=5) == 11
    # a member's commit at the position does as well as a run that reaches it
    b_ahead = [
        MemberSnapshot(30, SourceInterval(TX, 16, 17), newest=True),
        MemberSnapshot(20, SourceInterval(TX, 9, 12)),
    ]
    assert choose_target({"a": a, "b": b_ahead}, {"a": 14, "b": 40}, after=5) == 12
    # nothing beyond the group's position for a member, or a member at no known position: no target
    assert choose_target(members, {"a": 5, "b": 25}, after=5) is None
    assert choose_target({"a": a, "b": b[1:]}, {"a": 30, "b": 25}, after=None) is None
    assert choose_target({"a": a, "b": []}, {"a": 30, "b": 25}, after=None) is None
    # a target holds while every member covers it or has not passed it
    assert target_holds(members, 11, after=6)
    assert target_holds(members, 5, after=None)  # a covers it, b's older commit too
    assert not target_holds(members, 10, after=6)  # b is past it and no commit of b covers it
    assert not target_holds(members, 11, after=11)


@settings(max_examples=200, deadline=None)
@given(
    txns=st.lists(
        st.dictionaries(st.sampled_from("ab"), st.integers(1, 4), min_size=1),
        min_size=1,
        max_size=30,
    ),
    caps=st.tuples(st.integers(1, 8), st.integers(1, 8)),
)
def test_with_a_target_every_round_of_capped_runs_moves_the_group(txns, caps):
    """The group's rounds on random transactions over two tables whose runs are capped: each
    member's run applies its transactions up to the group's target when it has one left below it
    (the Spark side reads on to reach it), else as many as its cap allows; then the publish. From
    the second round on (the first runs had no target yet), every round in which a member
    committed moves the group, and the group ends at the last transaction."""
    from cdclake.model.groups import choose_target, member_reach, target_holds

    txns = [{"a": 1, "b": 1}, *txns]  # both tables have a first commit
    ends = [TransactionEnd(f"t{i}", {f"db.{t}": n for t, n in txn.items()}, 2 * i + 1) for i, txn in enumerate(txns)]
    cap = dict(zip("ab", caps, strict=True))
    applied = {"a": -1, "b": -1}  # the END offset of the last transaction applied
    commits: dict[str, list[MemberSnapshot]] = {"a": [], "b": []}
    position: int | None = None
    target: int | None = None

    def run(table: str) -> bool:
        mine = [e for e in ends if f"db.{table}" in e.event_counts and e.offset > applied[table]]
        if not mine:
            return False
        if target is not None and mine[0].offset <= target:
            upto = [e for e in mine if e.offset <= target]
        else:
            upto, spent = [], 0
            for e in mine:
                n = e.event_counts[f"db.{table}"]
                if upto and spent + n > cap[table]:
                    break
                upto.append(e)
                spent += n
        applied[table] = upto[-1].offset
        interval = valid_interval(TX, ends, f"db.{table}", upto[-1].id)
        assert interval is not None
        commits[table] = [MemberSnapshot(len(ends) + applied[table], interval, newest=True)] + [
            MemberSnapshot(s.snapshot_id, s.interval) for s in commits[table]
        ]
        return True

    for n in range(len(ends) + 2):
        committed = [run(t) for t in "ab"]
        candidates = {t: list(c) for t, c in commits.items()}
        point = choose_position(candidates)
        moved = point is not None and (position is None or point.position > position)
        if moved:
            assert point is not None
            position = point.position
        elif n > 0 and any(committed):
            raise AssertionError(f"round {n}: no move with target {target}: {candidates}")
        reach = {t: member_reach(c[0].interval, ends, f"db.{t}", cap[t]) for t, c in candidates.items()}
        if target is None or not target_holds(candidates, target, position):
            chosen = choose_target(candidates, reach, position)
            target = target if chosen is None else chosen
        if not any(committed):
            break
    assert position == ends[-1].offset


def test_a_partition_cut_at_a_barrier_change_counts_as_read_up_to_it():
    """A group member's run capped before a barrier change (a RENAME COLUMN) stops some partitions
    at their first event at or after it: they are read up to the change, though their last event
    read may be far below it, and must not cut the other partitions' events before the change
    from every run (issue 51's group + RENAME defect: the members never passed the change)."""
    from cdclake.model.offsets import OffsetRange
    from cdclake.model.plan import RunPlan
    from cdclake.spark.transactions import _read_to_barrier

    cfg = TablesFile.model_validate(
        {"tables": [{"name": "a", "topic": "p.d.a", "namespace": "n", "table": "a", "primary_key": ["id"]}]}
    ).tables[0]
    barrier = BinlogPosition(1, 5000, 0, 1)
    plan = RunPlan(
        table=cfg,
        run_id="r1",
        range=OffsetRange(topic="p.d.a", start={0: 0, 1: 0, 2: 0}, end={0: 9, 1: 4, 2: 7}),
        capped_before="RENAME COLUMN name TO label",
        barrier_position=barrier.to_text(),
        barrier_cut=(1, 2),
    )
    last = {0: BinlogPosition(1, 4900, 0, 1), 1: BinlogPosition(1, 1200, 0, 1), 2: None}
    _read_to_barrier(plan, last)
    assert last == {0: BinlogPosition(1, 4900, 0, 1), 1: barrier, 2: barrier}
    unchanged = {0: BinlogPosition(1, 10, 0, 1)}
    _read_to_barrier(plan.model_copy(update={"barrier_position": None, "barrier_cut": ()}), unchanged)
    assert unchanged == {0: BinlogPosition(1, 10, 0, 1)}
