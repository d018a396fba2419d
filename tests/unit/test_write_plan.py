"""The write's choices without Spark (:mod:`cdclake.model.write_plan`): what a run's write does
for a change-log table, an upsert table with floors, a change feed, a history, a completed full
snapshot, column backfills, a new binlog history and Kafka tombstones."""

from __future__ import annotations

from cdclake.model.config import TableConfig
from cdclake.model.decision import RunDecision
from cdclake.model.offsets import OffsetRange
from cdclake.model.plan import RunPlan
from cdclake.model.position import BinlogPosition
from cdclake.model.run_state import ColumnDefault, CommittedState
from cdclake.model.write_plan import Backfill, write_plan

CFG = TableConfig(name="t", topic="dbz.shop.t", namespace="shop", table="t", primary_key=("id",))
AT = BinlogPosition.from_text("1:100:0:0")
LATER = BinlogPosition.from_text("1:200:0:0")


def plan(cfg: TableConfig = CFG, **kw: object) -> RunPlan:
    return RunPlan(table=cfg, run_id="run-1", range=OffsetRange(topic=cfg.topic, start={0: 0}, end={0: 5}), **kw)


def decision(state: CommittedState | None = None, **kw: object) -> RunDecision:
    fields: dict[str, object] = {
        "state": state or CommittedState(1),
        "truncate": None,
        "completed": None,
        "backfill": {},
        "summary": {},
    }
    fields.update(kw)
    return RunDecision(**fields)  # type: ignore[arg-type]


def test_a_change_log_table_appends_every_event_and_nothing_else():
    cfg = TableConfig.model_validate({**_base(), "primary_key": [], "write_mode": "changelog"})
    state = CommittedState(1, truncate_floor=AT, snapshot_floor=LATER)
    write = write_plan(cfg, plan(cfg), decision(state, completed=LATER), tombstones=3)
    assert write.append
    assert (write.truncate_floor, write.snapshot_floor, write.completed, write.backfill) == (None, None, None, ())
    assert not (write.change_feed or write.history or write.delete_compacted or write.source_read_again)


def test_an_upsert_table_takes_its_floors_from_the_committed_state_and_merges_once():
    state = CommittedState(1, truncate_floor=AT, snapshot_floor=LATER)
    write = write_plan(CFG, plan(), decision(state), tombstones=0)
    assert not write.append
    assert (write.truncate_floor, write.snapshot_floor) == (AT, LATER)
    assert not write.source_read_again  # read by the merge alone: not persisted
    assert not (write.demote or write.delete_compacted)


def test_the_merge_source_is_read_again_for_a_feed_a_history_or_a_completed_snapshot():
    feed = TableConfig.model_validate({**_base(), "change_feed": {}})
    history = TableConfig.model_validate({**_base(), "history": {}})
    assert write_plan(feed, plan(feed), decision(), tombstones=0).source_read_again
    assert write_plan(feed, plan(feed), decision(), tombstones=0).change_feed
    assert write_plan(history, plan(history), decision(), tombstones=0).history
    completed = write_plan(CFG, plan(), decision(completed=LATER), tombstones=0)
    assert completed.completed == LATER and completed.source_read_again


def test_backfills_keep_the_decisions_order_and_a_new_history_demotes_the_rows():
    backfill = {"b": ColumnDefault(LATER, "'x'"), "a": ColumnDefault(AT, "0")}
    write = write_plan(CFG, plan(accept_source_change=True), decision(backfill=backfill), tombstones=2)
    assert write.backfill == (Backfill("b", LATER, "'x'"), Backfill("a", AT, "0"))
    assert write.demote
    assert write.delete_compacted  # the batch's tombstones may be a compacted topic's deletes


def _base() -> dict[str, object]:
    return {"name": "t", "topic": "dbz.shop.t", "namespace": "shop", "table": "t", "primary_key": ["id"]}
