"""The change feed (``change_feed`` in the table config, :mod:`cdclake.model.changes`) and the
history (``history``, :mod:`cdclake.model.history`) on the real stack: Kafka broker, SparkSession
with the Iceberg runtime, SQLite JDBC catalog."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from datetime import UTC, datetime
from types import ModuleType

import pytest
import yaml

from cdclake.io.catalog import load_catalog, load_table_or_none
from cdclake.io.changes import changes_of, runs_after
from cdclake.io.history import history_as_of
from cdclake.io.kafka import ensure_topic
from cdclake.io.refs import committed_offsets
from cdclake.model.changes import CHANGES_SUFFIX
from cdclake.model.config_blocks import HistoryPolicy
from cdclake.model.history import HISTORY_SUFFIX
from cdclake.model.layout import METADATA_COLUMNS, SummaryKeys, side_table
from cdclake.pipeline.reconcile_history import check_history
from cdclake.spark.maintenance import maintain_table
from tests.conftest import ROOT, apply_offsets, make_table, plan_offsets
from tests.integration.test_contract import COLUMNS, ev, key, send

pytestmark = pytest.mark.integration

TABLE_COLUMNS = ["id", "v", *[n for n, _, _ in METADATA_COLUMNS]]
EXAMPLE_DAG = ROOT / "examples" / "dags" / "change_counts.py"
"""The example downstream DAG (examples/README.md)."""


def fail_between_the_two_commits(*args, **kwargs):
    """Stands in for the table's commit (a mock, to inject the fault only): the worker dies after
    the side table's commit, before the table's."""
    raise RuntimeError("injected: the worker died between the two commits")


@pytest.fixture
def fed(kafka):
    cfg = make_table(value_format="json", columns=COLUMNS, change_feed={"retention_days": 30})
    ensure_topic(kafka, cfg.topic, 2)
    return cfg


def position(row: dict) -> tuple[int, int, int, int]:
    """The row's position as the table orders it (binlog ordering: file, pos, row, change rank)."""
    return (
        row["_cdc_binlog_file_seq"],
        row["_cdc_binlog_pos"],
        row["_cdc_binlog_row"],
        0 if row["_cdc_snapshot"] else 1,
    )


def run_changes(settings, cfg, run_id: str) -> tuple[list[dict], dict]:
    """The change rows of ``run_id``'s commit, found as a reader finds them (docs/guide.md,
    "Reading the change feed"), and that commit's summary."""
    catalog = load_catalog(settings)
    table = catalog.load_table(cfg.identifier)
    [run] = [r for r in runs_after(table, cfg.topic) if r.run_id == run_id]
    rows = changes_of(catalog, cfg.identifier, run).to_pylist()
    assert len(rows) == run.changes_rows
    return rows, dict(table.snapshot_by_id(run.snapshot_id).summary.additional_properties)


def replay(runs: list[list[dict]], columns: list[str] = TABLE_COLUMNS) -> dict[int, dict]:
    """The table the change rows of ``runs`` (in commit order) rebuild, in ``columns``: a ``t`` row
    deletes the rows below its position, a ``d`` row its key, any other row upserts its key."""
    rows: dict[int, dict] = {}
    for changes in runs:
        for t in (c for c in changes if c["_cdc_op"] == "t"):
            rows = {k: r for k, r in rows.items() if position(r) >= position(t)}
        for c in changes:
            if c["_cdc_op"] == "d":
                rows.pop(c["id"])
            elif c["_cdc_op"] != "t":
                rows[c["id"]] = {n: c[n] for n in columns}
    return rows


def table_now(settings, cfg, columns: list[str] = TABLE_COLUMNS) -> dict[int, dict]:
    arrow = load_catalog(settings).load_table(cfg.identifier).scan().to_arrow()
    return {r["id"]: {n: r[n] for n in columns} for r in arrow.to_pylist()}


def ops(changes: list[dict]) -> set[tuple]:
    return {(c["_cdc_op"], c["id"], c["v"], c["_cdc_binlog_pos"]) for c in changes}


def run(spark, settings, cfg, run_id: str):
    planned = plan_offsets(settings, cfg, run_id)
    return apply_offsets(spark, settings, cfg, planned.range, run_id)


def test_change_feed_holds_each_runs_applied_changes_and_rebuilds_the_table(spark, kafka, stack_settings, fed):
    from cdclake_airflow.table_dag import _publish

    # key 1 created then updated, key 6 created and deleted within the run (never in the table)
    send(kafka, fed, [(key(k), ev(op, k, v, pos)) for op, k, v, pos in [
        ("c", 1, "a", 100), ("c", 2, "b", 110), ("c", 3, "c", 120), ("u", 1, "a2", 130), ("c", 6, "f", 140),
        ("d", 6, "f", 150)]])  # fmt: skip
    first = run(spark, stack_settings, fed, "run-1")
    changes1, _ = run_changes(stack_settings, fed, "run-1")
    assert ops(changes1) == {("u", 1, "a2", 130), ("c", 2, "b", 110), ("c", 3, "c", 120)}
    assert {c["_cdc_base_snapshot_id"] for c in changes1} == {None}  # the table's first commit

    # a re-emitted older create (the guard discards it), an update then delete, a primary-key change
    send(kafka, fed, [(key(k), ev(op, k, v, pos, row=row)) for op, k, v, pos, row in [
        ("c", 1, "a", 100, 0), ("u", 2, "b2", 200, 0), ("d", 3, "c", 210, 0), ("c", 4, "c", 210, 1),
        ("d", 2, "b2", 220, 0)]])  # fmt: skip
    run(spark, stack_settings, fed, "run-2")
    changes2, _ = run_changes(stack_settings, fed, "run-2")
    assert ops(changes2) == {("d", 2, None, 220), ("d", 3, None, 210), ("c", 4, "c", 210)}
    assert {c["_cdc_base_snapshot_id"] for c in changes2} == {first.snapshot_id}

    # a truncate (other partition) between an event it discards and two it keeps
    send(kafka, fed, [(key(7), ev("c", 7, "g", 290)), (key(5), ev("c", 5, "e", 310)), (key(4), ev("u", 4, "c2", 320))])
    send(kafka, fed, [(None, ev("t", None, None, 300))], partition=1)
    third = run(spark, stack_settings, fed, "run-3")
    changes3, summary3 = run_changes(stack_settings, fed, "run-3")
    assert ops(changes3) == {("t", None, None, 300), ("c", 5, "e", 310), ("u", 4, "c2", 320)}

    now = table_now(stack_settings, fed)
    assert set(now) == {4, 5}
    assert replay([changes1, changes2, changes3]) == now
    catalog = load_catalog(stack_settings)
    feed_name = side_table(fed.identifier, CHANGES_SUFFIX)
    feed = catalog.load_table(feed_name)
    assert len(feed.scan().to_arrow()) == 9  # nothing but the rows of the three runs
    assert [(f.name, str(f.transform)) for f in feed.spec().fields] == [("_cdc_source_ts_day", "day")]
    assert summary3[SummaryKeys.CHANGES_SNAPSHOT] == str(feed.current_snapshot().snapshot_id)

    # the asset event of run 3 carries the range it committed
    _, extra, _ = _publish(catalog, fed, {"run_id": "run-3"})
    assert extra["snapshot_id"] == third.snapshot_id
    assert extra["previous_snapshot_id"] == {c["_cdc_base_snapshot_id"] for c in changes3}.pop()
    assert (
        extra["previous_snapshot_id"]
        == catalog.load_table(fed.identifier).snapshot_by_id(third.snapshot_id).parent_snapshot_id
    )
    assert (extra[SummaryKeys.FIRST_POSITION], extra[SummaryKeys.LAST_POSITION]) == ("7:290:0", "7:320:0")
    assert (extra[SummaryKeys.CHANGES_SNAPSHOT], extra[SummaryKeys.CHANGES_ROWS]) == (
        summary3[SummaryKeys.CHANGES_SNAPSHOT],
        "3",
    )

    # retention: cdc_maintenance deletes the days older than retention_days; its snapshots expire too
    day_ms = 24 * 3600 * 1000
    source_ms = 1_700_000_000_000  # every event's source.ts_ms
    kept = maintain_table(spark, stack_settings, fed, actions=["expire_changes"], now_ms=source_ms + 30 * day_ms)
    assert kept.report("expire_changes").figures == {"expired_changes": 0}
    result = maintain_table(
        spark, stack_settings, fed, actions=["expire_changes", "expire_snapshots"], now_ms=source_ms + 31 * day_ms
    )
    assert result.report("expire_changes").figures == {"expired_changes": 9}
    assert len(feed.refresh().scan().to_arrow()) == 0
    assert result.report("expire_snapshots", feed_name).status == "done"


def test_a_try_that_fails_after_writing_its_changes_is_replaced_by_its_retry(
    spark, kafka, stack_settings, fed, monkeypatch
):
    """The fault between the feed's commit and the table's cannot be made real in-process: the
    table's commit is replaced by one that raises (a mock, to inject the fault only)."""
    from cdclake.spark import apply as apply_module

    send(kafka, fed, [(key(1), ev("c", 1, "a", 100)), (key(2), ev("c", 2, "b", 110))])
    run(spark, stack_settings, fed, "run-1")
    send(kafka, fed, [(key(1), ev("u", 1, "a2", 200)), (key(3), ev("c", 3, "c", 210)), (key(2), ev("d", 2, "b", 220))])
    planned = plan_offsets(stack_settings, fed, "run-2")

    monkeypatch.setattr(apply_module, "commit", fail_between_the_two_commits)
    with pytest.raises(RuntimeError, match="injected"):
        apply_offsets(spark, stack_settings, fed, planned.range, "run-2")
    catalog = load_catalog(stack_settings)
    assert committed_offsets(catalog.load_table(fed.identifier), fed.topic) == planned.range.start
    feed = catalog.load_table(side_table(fed.identifier, CHANGES_SUFFIX))
    assert sorted(r["_cdc_run_id"] for r in feed.scan().to_arrow().to_pylist()) == ["run-1"] * 2 + ["run-2"] * 3

    monkeypatch.undo()  # the Airflow retry: the same plan
    assert apply_offsets(spark, stack_settings, fed, planned.range, "run-2").status == "committed"
    rows = feed.refresh().scan().to_arrow().to_pylist()
    assert sorted(r["_cdc_run_id"] for r in rows) == ["run-1"] * 2 + ["run-2"] * 3  # no duplicate
    # the failed try's rows went in the retry's own commit: one overwrite, whole files
    replaced = feed.current_snapshot().summary
    assert (replaced.operation.value, replaced["deleted-records"], replaced["added-records"]) == ("overwrite", "3", "3")
    changes1, _ = run_changes(stack_settings, fed, "run-1")
    changes2, _ = run_changes(stack_settings, fed, "run-2")
    assert replay([changes1, changes2]) == table_now(stack_settings, fed)


# --- the history (``history`` in the table config, :mod:`cdclake.model.history`) ---

SOURCE_MS = 1_700_000_000_000
"""Source time of binlog position 0 in the history tests: position ``p`` happened ``p`` seconds later."""


def at(pos: float) -> datetime:
    return datetime.fromtimestamp(SOURCE_MS / 1000 + pos, tz=UTC)


def timed(op, k, v, pos, row=0) -> bytes:
    """:func:`ev` with the source time of its position (``SOURCE_MS`` + ``pos`` seconds)."""
    envelope = json.loads(ev(op, k, v, pos, row=row))
    envelope["ts_ms"] = envelope["source"]["ts_ms"] = SOURCE_MS + pos * 1000
    return json.dumps(envelope).encode()


def source_at(changes: list[tuple], pos: float) -> dict[int, str]:
    """The source table at position ``pos`` (each change made in the source once, in position order)."""
    state: dict[int, str] = {}
    for op, k, v, p, _ in sorted(changes, key=lambda c: (c[3], c[4])):
        if p > pos:
            break
        if op == "t":
            state = {}
        elif op == "d":
            state.pop(k)
        else:
            state[k] = v
    return state


def history_at(settings, cfg, pos: float) -> dict[int, str]:
    rows = history_as_of(load_catalog(settings), cfg.identifier, at(pos)).to_pylist()
    found = {r["id"]: r["v"] for r in rows}
    assert len(found) == len(rows)  # one version per key at any time
    return found


def test_history_holds_every_version_and_answers_as_of_each_source_time(spark, kafka, stack_settings, monkeypatch):
    """Several runs: a key changed twice in one run, created and deleted in one run, deleted and
    inserted again, re-emitted events (an older one, the key's newest), a primary-key change
    (delete and create at one binlog position), a truncate from another partition with events
    below and above it in its run; then a try that fails after the history's commit, and its
    retry. The source's state at each source time is known from the changes made."""
    from cdclake.spark import apply as apply_module

    cfg = make_table(value_format="json", columns=COLUMNS, history={})
    ensure_topic(kafka, cfg.topic, 2)
    changes: list[tuple] = []

    def produce(events, partition=0, re_emitted=False):
        send(kafka, cfg, [(None if k is None else key(k), timed(op, k, v, pos, row)) for op, k, v, pos, row in events],
             partition=partition)  # fmt: skip
        if not re_emitted:
            changes.extend(events)

    produce([("c", 1, "a", 100, 0), ("c", 2, "b", 110, 0), ("u", 1, "a2", 120, 0), ("u", 1, "a3", 130, 0),
             ("c", 3, "c", 140, 0), ("d", 3, "c", 150, 0)])  # fmt: skip
    run(spark, stack_settings, cfg, "run-1")
    produce([("c", 1, "a", 100, 0)], re_emitted=True)  # a connector restart: the guard discards it
    produce([("u", 2, "b2", 200, 0), ("d", 1, "a3", 210, 0), ("c", 1, "n", 220, 0), ("c", 3, "c2", 230, 0),
             ("d", 2, "b2", 240, 0), ("c", 5, "b2", 240, 1)])  # fmt: skip
    run(spark, stack_settings, cfg, "run-2")
    produce([("c", 1, "n", 220, 0)], re_emitted=True)  # the key's newest event again: the same version
    produce([("c", 4, "d", 280, 0), ("u", 4, "d2", 290, 0), ("c", 6, "f", 310, 0), ("c", 1, "n2", 320, 0)])
    produce([("t", None, None, 300, 0)], partition=1)
    run(spark, stack_settings, cfg, "run-3")

    times = sorted({p + d for *_, p, _ in changes for d in (0, 5)} | {50})
    assert {t: history_at(stack_settings, cfg, t) for t in times} == {t: source_at(changes, t) for t in times}
    catalog = load_catalog(stack_settings)
    history = catalog.load_table(side_table(cfg.identifier, HISTORY_SUFFIX))
    rows = history.scan().to_arrow().to_pylist()
    assert len(rows) == sum(1 for c in changes if c[0] != "t")  # each change once, the re-emission not
    opened = {r["id"]: r["v"] for r in rows if r["_cdc_is_current"] and not r["_cdc_is_deleted"]}
    assert opened == {k: r["v"] for k, r in table_now(stack_settings, cfg).items()} == {1: "n2", 6: "f"}
    closed_by_truncate = {r["id"] for r in rows if r["_cdc_valid_to_position"] == {
        "file_seq": 7, "pos": 300, "row": 0, "change_rank": 1}}  # fmt: skip
    assert closed_by_truncate == {1, 2, 3, 4, 5}  # 2: its deleted version; 4: made in the truncate's run

    # a try that commits the history, then fails before the table's commit; its retry
    produce([("u", 6, "f2", 400, 0), ("d", 1, "n2", 410, 0)])
    planned = plan_offsets(stack_settings, cfg, "run-4")

    # the fault between the history's commit and the table's cannot be made real in-process: the
    # table's commit is replaced by one that raises (a mock, to inject the fault only)
    monkeypatch.setattr(apply_module, "commit", fail_between_the_two_commits)
    with pytest.raises(RuntimeError, match="injected"):
        apply_offsets(spark, stack_settings, cfg, planned.range, "run-4")
    assert committed_offsets(catalog.load_table(cfg.identifier), cfg.topic) == planned.range.start
    tried = history.refresh().scan().to_arrow().to_pylist()
    assert len(tried) == len(rows) + 2
    monkeypatch.undo()  # the Airflow retry: the same plan
    retried = apply_offsets(spark, stack_settings, cfg, planned.range, "run-4")
    assert retried.status == "committed"
    after = history.refresh().scan().to_arrow().to_pylist()
    assert sorted(map(str, after)) == sorted(map(str, tried))  # nothing doubled, nothing changed
    for t in (305, 405, 415):
        assert history_at(stack_settings, cfg, t) == source_at(changes, t)
    assert source_at(changes, 415) == {6: "f2"}
    summary = catalog.load_table(cfg.identifier).snapshot_by_id(retried.snapshot_id).summary
    assert summary[SummaryKeys.HISTORY_SNAPSHOT] == str(history.current_snapshot().snapshot_id)
    # the asset event of the retried run names the history's snapshot
    from cdclake_airflow.table_dag import _publish

    _, extra, _ = _publish(catalog, cfg, {"run_id": "run-4"})
    assert extra[SummaryKeys.HISTORY_SNAPSHOT] == summary[SummaryKeys.HISTORY_SNAPSHOT]

    # cdc_maintenance keeps the history like the table's other side tables
    result = maintain_table(spark, stack_settings, cfg, actions=["expire_snapshots"])
    assert result.report("expire_snapshots", side_table(cfg.identifier, HISTORY_SUFFIX)).status == "done"


def test_history_turned_on_for_a_table_with_rows_is_seeded_once(spark, kafka, stack_settings, monkeypatch):
    """A table with rows gets ``history: {}``: the run that starts the history seeds it with one
    version per row, then applies its events on top; that run fails between the history's commit
    and the table's, and its retry seeds nothing again."""
    from cdclake.model.reconcile import CompareColumn, Kind
    from cdclake.spark import apply as apply_module

    plain = make_table(value_format="json", columns=COLUMNS)
    ensure_topic(kafka, plain.topic, 1)
    changes: list[tuple] = []

    def produce(events):
        send(kafka, plain, [(key(k), timed(op, k, v, pos, row)) for op, k, v, pos, row in events])
        changes.extend(events)

    produce([("c", 1, "a", 100, 0), ("c", 2, "b", 110, 0), ("u", 1, "a2", 120, 0), ("c", 3, "c", 130, 0),
             ("d", 3, "c", 140, 0)])  # fmt: skip
    run(spark, stack_settings, plain, "run-1")
    catalog = load_catalog(stack_settings)
    assert load_table_or_none(catalog, side_table(plain.identifier, HISTORY_SUFFIX)) is None

    cfg = plain.model_copy(update={"history": HistoryPolicy()})  # the option turned on
    columns = [CompareColumn("id", Kind.INT), CompareColumn("v", Kind.STRING)]
    assert check_history(catalog, cfg, columns) is None  # no history yet: reconcile skips the check
    produce([("u", 2, "b2", 200, 0), ("c", 4, "d", 210, 0)])
    planned = plan_offsets(stack_settings, cfg, "run-2")
    # the fault between the history's commit and the table's cannot be made real in-process: the
    # table's commit is replaced by one that raises (a mock, to inject the fault only)
    monkeypatch.setattr(apply_module, "commit", fail_between_the_two_commits)
    with pytest.raises(RuntimeError, match="injected"):
        apply_offsets(spark, stack_settings, cfg, planned.range, "run-2")
    history = catalog.load_table(side_table(cfg.identifier, HISTORY_SUFFIX))
    tried = history.scan().to_arrow().to_pylist()
    assert sorted(r["_cdc_change"] for r in tried) == ["event", "event", "seed", "seed"]  # the try seeded
    assert check_history(catalog, cfg, columns) is None  # no table commit names a history snapshot yet
    monkeypatch.undo()  # the Airflow retry: the same plan
    assert apply_offsets(spark, stack_settings, cfg, planned.range, "run-2").status == "committed"
    rows = history.refresh().scan().to_arrow().to_pylist()
    assert sorted(map(str, rows)) == sorted(map(str, tried))  # nothing seeded twice
    assert check_history(catalog, cfg, columns).differences == 0

    seeded = sorted((r for r in rows if r["_cdc_change"] == "seed"), key=lambda r: r["id"])
    assert [(r["id"], r["v"], r["_cdc_run_id"]) for r in seeded] == [(1, "a2", "run-2"), (2, "b", "run-2")]
    assert [r["_cdc_valid_from_ts"] for r in seeded] == [at(120), at(110)]  # each row's own source time
    assert [r["_cdc_valid_from_position"]["pos"] for r in seeded] == [120, 110]
    assert {(r["id"], r["_cdc_is_current"], r["_cdc_is_deleted"]) for r in seeded} == {
        (1, True, False),
        (2, False, False),
    }
    assert sorted((r["id"], r["v"], r["_cdc_change"]) for r in rows if r["_cdc_change"] != "seed") == [
        (2, "b2", "event"),
        (4, "d", "event"),
    ]
    # from the seeded rows' source times on, the history answers as the source was
    for t in (125, 145, 205, 215):
        assert history_at(stack_settings, cfg, t) == source_at(changes, t)
    assert history_at(stack_settings, cfg, 215) == {k: r["v"] for k, r in table_now(stack_settings, cfg).items()}


def test_reconcile_checks_the_historys_current_rows_against_the_table(spark, kafka, stack_settings):
    """cdc_reconcile's history check (:mod:`cdclake.pipeline.reconcile_history`) on a real table and
    history: equal after runs; then versions of the history are deleted and changed with pyiceberg
    directly (the fault injection), and the next run's table commit names that history."""
    import pyarrow as pa
    from pyiceberg.expressions import And, EqualTo

    from cdclake.model.reconcile import CompareColumn, Kind
    from cdclake.pipeline.reconcile import ReconcileParams, ReconcileResult, write_result

    cfg = make_table(value_format="json", columns=COLUMNS, history={})
    ensure_topic(kafka, cfg.topic, 1)
    columns = [CompareColumn("id", Kind.INT), CompareColumn("v", Kind.STRING)]
    send(kafka, cfg, [(key(k), timed(op, k, v, pos)) for op, k, v, pos in [
        ("c", 1, "a", 100), ("c", 2, "b", 110), ("c", 3, "c", 120), ("u", 1, "a2", 130), ("c", 4, "d", 140)]])  # fmt: skip
    run(spark, stack_settings, cfg, "run-1")
    send(kafka, cfg, [(key(k), timed(op, k, v, pos)) for op, k, v, pos in [("d", 4, "d", 200), ("u", 2, "b2", 210)]])
    run(spark, stack_settings, cfg, "run-2")
    catalog = load_catalog(stack_settings)
    equal = check_history(catalog, cfg, columns)
    assert (equal.table_rows, equal.history_rows, equal.differences) == (3, 3, 0)

    # the fault: key 2's current version deleted from the history, key 1's changed
    history = catalog.load_table(side_table(cfg.identifier, HISTORY_SUFFIX))
    named = str(history.current_snapshot().snapshot_id)
    current = EqualTo("_cdc_is_current", True)
    one = history.scan(row_filter=And(EqualTo("id", 1), current)).to_arrow()
    changed = one.set_column(one.schema.get_field_index("v"), one.schema.field("v"), pa.array(["x"]))
    with history.transaction() as tx:
        tx.delete(And(EqualTo("id", 2), current))
        tx.delete(And(EqualTo("id", 1), current))
        tx.append(changed)
    # the table's commit still names the history before the fault: that pair is consistent
    assert check_history(catalog, cfg, columns).differences == 0

    send(kafka, cfg, [(key(3), timed("u", 3, "c2", 300))])
    third = run(spark, stack_settings, cfg, "run-3")
    summary = catalog.load_table(cfg.identifier).snapshot_by_id(third.snapshot_id).summary
    assert summary[SummaryKeys.HISTORY_SNAPSHOT] != named
    found = check_history(catalog, cfg, columns)
    assert (found.table_rows, found.history_rows) == (3, 2)
    assert (found.only_in_table, found.only_in_history, found.differing) == ([(2,)], [], {(1,): ["v"]})
    message = found.message()
    assert "1 only in the table ((2,))" in message and "1 differing ((1,))" in message
    assert "docs/operations.md" in message
    # in reconcile's result: the run fails (the DAG raises DriftError with this message) and the
    # reconcile table gets the history's row
    result = ReconcileResult(cfg.identifier, 1, 3, 3, [], {}, history=found)
    assert result.differences == 0 and result.history_differences == 2
    drift = result.drift("reconcile-test")  # what the DAG's DriftError says
    assert drift is not None and message in drift
    params = ReconcileParams(run_id=f"reconcile-{cfg.name}")
    write_result(catalog, cfg, params, result, "")
    written = catalog.load_table("cdc_ops.reconcile").scan(row_filter=EqualTo("run_id", params.run_id)).to_arrow()
    by_kind = {r["compared_with"]: r for r in written.to_pylist()}
    assert set(by_kind) == {"source", "history"}
    assert (by_kind["history"]["only_in_source"], by_kind["history"]["differing"]) == (1, 1)
    assert json.loads(by_kind["history"]["sample_keys"])["only_in_table"] == [["2"]]


def example_dag() -> ModuleType:
    """``examples/dags/change_counts.py`` as a module, loaded as Airflow loads a DAG file."""
    spec = importlib.util.spec_from_file_location("change_counts", EXAMPLE_DAG)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_downstream_dag_counts_each_change_once_across_a_pause_a_crash_and_a_race(
    spark, kafka, stack_settings, fed, tmp_path, monkeypatch
):
    """The example DAG of examples/dags on the real stack: its first run through ``airflow dags
    test``, the later ones by calling its task's function. The crash between the counting and the
    output's commit, and the concurrent try, are injected by replacing pyiceberg's ``Table.append``
    for one call (a mock, to inject the fault and its timing only; the commits are real)."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table import Table

    from cdclake_dev.cli import ensure_airflow_db, run_airflow

    example = example_dag()
    settings = stack_settings.model_copy(update={"tables_config": tmp_path / "tables.yaml"})
    settings.tables_config.write_text(
        yaml.safe_dump({"defaults": {"schedule": None}, "tables": [fed.model_dump(mode="json", exclude_unset=True)]})
    )
    output_id = example.output_identifier(fed)

    def counts() -> Counter:
        rows = load_catalog(settings).load_table(output_id).scan().to_arrow().to_pylist()
        total: Counter = Counter()
        for r in rows:
            total[(r["id"], r["_cdc_op"])] += r["changes"]
        return total

    def count_changes() -> dict:
        return example.count_changes(load_catalog(settings), fed)

    # run 1 (key 1 created then updated within the run: one change), then the DAG's first run
    send(kafka, fed, [(key(1), ev("c", 1, "a", 100)), (key(2), ev("c", 2, "b", 110)), (key(1), ev("u", 1, "a2", 120))])
    run(spark, settings, fed, "run-1")
    ensure_airflow_db(settings)
    dag_id = f"{example.DAG_PREFIX}{fed.name}"
    proc = run_airflow(
        ["dags", "test", dag_id], settings, dags_folder=EXAMPLE_DAG.parent, capture_output=True, text=True
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "state=success" in out.replace(" ", ""), out[-5000:]
    assert counts() == {(1, "u"): 1, (2, "c"): 1}

    # runs 2 and 3 while the DAG is paused (no run, no event received); then one run reads both
    send(kafka, fed, [(key(2), ev("u", 2, "b2", 200)), (key(1), ev("d", 1, "a2", 210))])
    run(spark, settings, fed, "run-2")
    send(kafka, fed, [(key(3), ev("c", 3, "c", 310)), (key(2), ev("u", 2, "b3", 320))])
    send(kafka, fed, [(None, ev("t", None, None, 300))], partition=1)
    third = run(spark, settings, fed, "run-3")
    result = count_changes()
    assert (result["runs"], result["changes"], result["source_snapshot_id"]) == (
        ["run-2", "run-3"],
        5,
        third.snapshot_id,
    )
    after_pause = {(1, "u"): 1, (2, "c"): 1, (2, "u"): 2, (1, "d"): 1, (3, "c"): 1, (None, "t"): 1}
    assert counts() == after_pause
    # a retry after the commit, an extra trigger, a backfill: nothing new, nothing committed
    again = count_changes()
    assert (again["runs"], again["output_snapshot_id"]) == ([], None)
    assert counts() == after_pause

    # run 4; the task crashes after counting, before the output's commit: nothing was written
    send(kafka, fed, [(key(3), ev("u", 3, "c2", 400)), (key(4), ev("c", 4, "d", 410))])
    run(spark, settings, fed, "run-4")
    original = Table.append

    def crash(self, *args, **kwargs):
        raise RuntimeError("injected: the worker died before the output's commit")

    monkeypatch.setattr(Table, "append", crash)
    with pytest.raises(RuntimeError, match="injected"):
        count_changes()
    assert counts() == after_pause

    # its retry races a zombie try that commits first: the retry's commit is refused, not re-applied
    def concurrent_try_commits_first(self, *args, **kwargs):
        monkeypatch.setattr(Table, "append", original)
        assert count_changes()["runs"] == ["run-4"]
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Table, "append", concurrent_try_commits_first)
    with pytest.raises(CommitFailedException):
        count_changes()
    final = {**after_pause, (3, "u"): 1, (4, "c"): 1}
    assert counts() == final
    assert count_changes()["runs"] == []  # the retry after: the work is done
    assert counts() == final
    assert sum(final.values()) == sum(
        len(run_changes(settings, fed, r)[0]) for r in ("run-1", "run-2", "run-3", "run-4")
    )
