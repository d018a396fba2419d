"""Unit tests of the reference model of the apply contract (:mod:`tests.model`): hand-computed
cases, and the model against the simulated source on many generated histories (no Spark)."""

from __future__ import annotations

from hypothesis import given, settings

from tests.model import ContractModel, Record, apply_runs, position_of


def env(op, k, v, pos, *, seq=7, row=0, snapshot="false"):
    image = None if k is None else {"id": k, "v": v}
    return {
        "before": image if op in ("u", "d") else None,
        "after": image if op in ("c", "u", "r") else None,
        "op": op,
        "source": {"file": f"mysql-bin.{seq:06d}", "pos": pos, "row": row, "snapshot": snapshot},
    }


def run(model, *envelopes):
    """Apply one run of the given envelopes (``None``: a Kafka tombstone), all in partition 0."""
    model.apply_run([Record(0, i, None, e) for i, e in enumerate(envelopes)])
    return model.table()


def test_position_orders_file_sequence_numbers_as_integers_and_ranks_reads_below_changes():
    assert position_of(env("c", 1, "a", 900, seq=999_999)) == (999_999, 900, 0, 1)
    assert position_of(env("c", 1, "a", 4, seq=1_000_000)) > position_of(env("c", 1, "a", 900, seq=999_999))
    assert position_of(env("r", 1, "a", 100, snapshot="true")) == (7, 100, 0, 0)
    assert position_of(env("c", 1, "a", 100, snapshot="last")) == (7, 100, 0, 0)  # 1.x snapshot read
    assert position_of(env("t", None, None, 100)) == (7, 100, 0, 1)


def test_truncate_floor_removes_older_rows_and_events_and_keeps_later_ones():
    m = ContractModel()
    assert run(m, env("c", 1, "a", 100), env("c", 2, "b", 110)) == {1: "a", 2: "b"}
    # one run: an update below the truncate, the truncate, a create above it
    assert run(m, env("u", 1, "a2", 120), env("t", None, None, 150), env("c", 3, "c", 160)) == {3: "c"}
    assert m.floor == (7, 150, 0, 1)
    # a later run re-emitting an event from before the truncate cannot bring its row back
    assert run(m, env("c", 2, "b", 110), env("c", 4, "d", 170)) == {3: "c", 4: "d"}
    # an older truncate re-emitted does not lower the floor; a newer one raises it
    run(m, env("t", None, None, 150))
    assert m.floor == (7, 150, 0, 1)
    assert run(m, env("t", None, None, 165), env("c", 5, "e", 180)) == {4: "d", 5: "e"}
    assert m.floor == (7, 165, 0, 1)


def test_truncate_keeps_rows_written_above_it_by_an_earlier_run():
    m = ContractModel()
    # the create at 200 (one partition) is applied a run before the truncate at 150 (another one)
    run(m, env("c", 1, "a", 100), env("c", 2, "b", 200))
    assert run(m, env("t", None, None, 150)) == {2: "b"}
    assert m.rows[2] == ("b", (7, 200, 0, 1))


def test_tombstone_blocks_a_reemitted_insert():
    m = ContractModel()
    run(m, env("c", 1, "a", 100), env("c", 2, "b", 110))
    assert run(m, env("d", 1, "a", 200)) == {2: "b"}
    assert m.tombstones == {1: (7, 200, 0, 1)}
    # the connector re-emits the create and an update, both below the delete
    assert run(m, env("c", 1, "a", 100), env("u", 1, "a2", 150)) == {2: "b"}
    # a genuinely newer insert comes back
    assert run(m, env("c", 1, "again", 300)) == {1: "again", 2: "b"}
    assert m.tombstones == {1: (7, 200, 0, 1)}


def test_tombstone_at_the_same_position_blocks_a_snapshot_read():
    m = ContractModel()
    run(m, env("r", 1, "s", 100, snapshot="true"))
    assert run(m, env("d", 1, "s", 100)) == {}
    assert run(m, env("r", 1, "s", 100, snapshot="true")) == {}  # re-emitted read, rank 0 <= tombstone


def test_snapshot_read_ranks_below_a_change_at_an_equal_position():
    # within a run, whatever the offsets: the change wins
    m = ContractModel()
    assert run(m, env("u", 1, "changed", 100), env("r", 1, "read", 100, snapshot="true")) == {1: "changed"}
    assert m.rows[1] == ("changed", (7, 100, 0, 1))
    # across runs: a read at the row's position does not replace the change ...
    assert run(m, env("r", 1, "read", 100, snapshot="first")) == {1: "changed"}
    # ... and a change at a read's position replaces the read
    m = ContractModel()
    run(m, env("r", 1, "read", 100, snapshot="true"))
    assert run(m, env("u", 1, "changed", 100)) == {1: "changed"}


def test_binlog_rollover_orders_by_file_sequence_number():
    m = ContractModel()
    # the newer event (mysql-bin.1000000:4) first in Kafka, the older (.999999:900) re-emitted after
    assert run(m, env("u", 1, "new", 4, seq=1_000_000), env("c", 1, "old", 900, seq=999_999)) == {1: "new"}
    assert run(m, env("c", 1, "old", 900, seq=999_999)) == {1: "new"}
    # a delete at .999999 does not block an insert at .1000000
    m = ContractModel()
    run(m, env("c", 2, "a", 800, seq=999_999), env("d", 2, "a", 900, seq=999_999))
    assert run(m, env("c", 2, "b", 4, seq=1_000_000)) == {2: "b"}


def test_reduce_keeps_the_latest_event_of_a_key_in_a_run():
    m = ContractModel()
    # delete then re-insert in one run: the insert wins, the delete leaves no tombstone
    assert run(m, env("c", 1, "a", 100), env("d", 1, "a", 200), env("c", 1, "b", 300), None) == {1: "b"}
    assert m.tombstones == {}
    # insert then delete in one run: the delete wins and leaves a tombstone
    assert run(m, env("u", 1, "c", 400), env("d", 1, "c", 500)) == {}
    assert m.tombstones == {1: (7, 500, 0, 1)}
    # rows of one multi-row event are ordered by row
    m = ContractModel()
    assert run(m, env("c", 1, "x", 100, row=1), env("u", 1, "y", 100, row=0)) == {1: "x"}


def test_an_older_update_does_not_replace_a_newer_row():
    m = ContractModel()
    run(m, env("c", 1, "a", 100), env("u", 1, "b", 200))
    assert run(m, env("u", 1, "b", 200), env("u", 1, "a", 150)) == {1: "b"}
    assert m.rows[1] == ("b", (7, 200, 0, 1))


def test_apply_runs_cuts_partitions_into_runs():
    log = {
        0: [Record(0, 0, None, env("c", 1, "a", 100)), Record(0, 1, None, env("d", 1, "a", 300))],
        1: [Record(1, 0, None, env("c", 2, "b", 200)), Record(1, 1, None, env("t", None, None, 250))],
    }
    states = apply_runs(log, [({0: 0, 1: 0}, {0: 1, 1: 1}), ({0: 1, 1: 1}, {0: 2, 1: 2})])
    assert [{k: v for k, (v, _) in rows.items()} for rows, _, _ in states] == [{1: "a", 2: "b"}, {}]
    assert states[-1][1] == {1: (7, 300, 0, 1)}
    assert states[-1][2] == (7, 250, 0, 1)


def test_handpicked_history_model_states():
    from tests.integration.test_property import handpicked_history, model_states

    h = handpicked_history()
    assert [replay for _, _, replay in h.all_runs()] == [False] * 6 + [True, False]
    assert h.all_runs()[-1][:2] == ({0: 10, 1: 5, 2: 9}, {0: 19, 1: 9, 2: 9})
    states = model_states(h)
    assert states[0][0][1] == ("s1", (999_999, 4000, 0, 0))
    assert states[1][0][1] == ("a1", (999_999, 4000, 0, 1))  # the change replaces the read at its position
    assert 1 in states[2][0] and 4 in states[2][0]  # written above the truncate that has not arrived yet
    assert {k: v for k, (v, _) in states[3][0].items()} == h.expected
    assert states[3][1][4] == (1_000_000, 204, 0, 1)
    assert states[4][0] == states[3][0]  # the re-emitted u(4) is discarded by the tombstone
    assert {k: v for k, (v, _) in states[-1][0].items()} == h.expected
    assert states[-1][2] == (999_999, 4300, 0, 1)


def test_model_matches_the_simulated_source_on_generated_histories():
    from tests.integration.test_property import histories, model_states

    @settings(max_examples=300, deadline=None)
    @given(h=histories(max_steps=14))
    def check(h):
        states = model_states(h)
        assert {k: v for k, (v, _) in states[-1][0].items()} == h.expected, repr(h)

    check()


def test_an_older_complete_snapshot_behind_an_aborted_newer_one_converges():
    """The property test's find: the older, complete snapshot's records are applied a run after
    the records of a newer snapshot that never ends; the older one still deletes key 1."""
    from tests.integration.test_property import model_states, older_snapshot_behind_an_aborted_one_history

    h = older_snapshot_behind_an_aborted_one_history()
    assert h.runs == [({0: 0, 1: 0, 2: 0}, {0: 0, 1: 0, 2: 2}), ({0: 0, 1: 0, 2: 2}, {0: 1, 1: 2, 2: 2})]
    states = model_states(h)
    assert {k: v for k, (v, _) in states[0][0].items()} == {3: "c3"}  # the newer snapshot's read
    rows, tombstones, _ = states[-1]
    assert {k: v for k, (v, _) in rows.items()} == h.expected == {2: "u2", 3: "c3"}
    assert tombstones == {}
    # the same log applied in one run (no partition ahead of another) ends the same
    model = ContractModel()
    one_run = apply_runs(h.model_log(), [({0: 0, 1: 0, 2: 0}, {0: 1, 1: 2, 2: 2})], model)
    assert one_run[-1][0] == rows
    assert model.snapshot_floor == (999_999, 54, 0, 0)


def test_an_ended_snapshot_replaced_while_pending_completes_later():
    from tests.integration.test_property import ended_snapshot_replaced_while_pending_history, model_states

    h = ended_snapshot_replaced_while_pending_history()
    states = model_states(h)
    assert 1 in states[0][0] and 1 in states[1][0]  # pending: partition 2 not applied yet
    assert {k: v for k, (v, _) in states[-1][0].items()} == h.expected == {2: "u2", 3: "c3"}
