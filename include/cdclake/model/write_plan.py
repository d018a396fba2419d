"""How a run writes its decision (:class:`WritePlan`): the choices of the write, made before Spark
runs and unit-tested without it (``tests/unit/test_write_plan.py``). The Spark write
(:func:`cdclake.spark.apply.apply_once`'s step 8) carries a plan out; the decision it comes from is
:class:`~cdclake.model.decision.RunDecision` (docs/architecture.md, "The apply contract")."""

from __future__ import annotations

from dataclasses import dataclass

from cdclake.model.config import TableConfig
from cdclake.model.decision import RunDecision
from cdclake.model.plan import RunPlan
from cdclake.model.position import BinlogPosition


@dataclass(frozen=True)
class Backfill:
    """A column added with a default since the last run: the rows below the ALTER's position
    (written before the column existed) get the default (``sql``, a Spark SQL expression) in the
    run's commit, where their value is not that already."""

    column: str
    position: BinlogPosition
    sql: str


@dataclass(frozen=True)
class WritePlan:
    """What the write of one run does, in its order.

    Attributes:
        append: a change-log table (``write_mode: changelog``): every event appended as a row;
            the other attributes are then empty (no floors, merge, feed or history).
        truncate_floor: events at or below it are discarded (a truncate applied by this or an
            earlier run).
        snapshot_floor: events below it are discarded (a completed full snapshot).
        demote: ``accept_source_change``: the rows are demoted below every position of the new
            binlog history before the merge (:func:`cdclake.spark.commit.demote_rows`).
        change_feed: the changes the merge applies are committed to ``<table>__changes`` first.
        history: the versions are committed to ``<table>__history`` first.
        completed: the full snapshot this commit completes: the rows below it that the batch does
            not rewrite are deleted (and counted for the summary).
        backfill: the column defaults filled in the rows below their ALTER, in the decision's order.
        delete_compacted: the batch has Kafka tombstones: the rows whose delete only a tombstone
            still carries (a compacted topic) are deleted (:mod:`cdclake.spark.compacted`).
    """

    append: bool
    truncate_floor: BinlogPosition | None = None
    snapshot_floor: BinlogPosition | None = None
    demote: bool = False
    change_feed: bool = False
    history: bool = False
    completed: BinlogPosition | None = None
    backfill: tuple[Backfill, ...] = ()
    delete_compacted: bool = False

    @property
    def source_read_again(self) -> bool:
        """Whether the merge source is read by more than the merge (the change feed, the history,
        the count of the rows a completed full snapshot deletes): it is persisted for the write."""
        return self.change_feed or self.history or self.completed is not None


def write_plan(cfg: TableConfig, plan: RunPlan, decision: RunDecision, *, tombstones: int) -> WritePlan:
    """The write of ``decision`` for the table ``cfg`` (``plan``: the run's plan; ``tombstones``:
    the batch's Kafka tombstones, :attr:`~cdclake.model.run_state.BatchStats.tombstones`)."""
    if cfg.write_mode == "changelog":
        return WritePlan(append=True)
    return WritePlan(
        append=False,
        truncate_floor=decision.state.truncate_floor,
        snapshot_floor=decision.state.snapshot_floor,
        demote=plan.accept_source_change,
        change_feed=cfg.change_feed is not None,
        history=cfg.history is not None,
        completed=decision.completed,
        backfill=tuple(Backfill(column, position, sql) for column, (position, sql) in decision.backfill.items()),
        delete_compacted=tombstones > 0,
    )
