"""What table maintenance does and reports, and its pure rules (no engine, no catalog):
the actions and their order, the report of each, which errors are lost commit races, which
snapshots ``expire_snapshots`` may expire and does expire, and which run branches are stale.

:mod:`cdclake.spark.maintenance` runs the actions with Iceberg's Spark procedures
(docs/operations.md, "Table maintenance"). The expiry rules follow the pinned Iceberg runtime
(1.11, ``RemoveSnapshots``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from cdclake.errors import ConfigError
from cdclake.model.layout import run_branch_created_ms
from cdclake.model.run_state import committed_state_of

ACTIONS: tuple[str, ...] = (
    "remove_stale_run_branches",
    "expire_tombstones",
    "expire_changes",
    "rewrite_position_delete_files",
    "rewrite_data_files",
    "rewrite_manifests",
    "expire_snapshots",
    "remove_orphan_files",
)
"""The maintenance actions, in the order :func:`~cdclake.spark.maintenance.maintain_table` runs them."""

SIDE_TABLE_ACTIONS = frozenset(ACTIONS[3:])
"""The actions that also run on the side tables (the procedures; 1-3 concern the table alone)."""

CHANGE_FEED_ACTIONS = frozenset({"rewrite_manifests", "expire_snapshots", "remove_orphan_files"})
"""The procedures that also run on a table's change feed (:mod:`cdclake.model.changes`). Not the
data-file rewrites: a run's overwrite of an earlier try's change rows selects whole files by
their ``_cdc_base_snapshot_id``, and a compaction would mix that try's rows with others'."""


Status = Literal["done", "dry_run", "skipped", "lost_race"]
"""``done``: the action ran (it may have found nothing to do: see its figures); ``dry_run``: it
reports what it would do, nothing changed; ``skipped``: nothing to work on (no snapshot, no
tombstone table); ``lost_race``: it lost the commit race on every attempt, nothing changed."""


class ActionReport(BaseModel):
    """What one action did (or would do) on one table.

    Attributes:
        action: one of :data:`ACTIONS`.
        table: ``namespace.table`` it ran on (the CDC table or a side table).
        status: see :data:`Status`.
        summary: one sentence for humans.
        figures: counts, as the procedure returned them (``rewritten_data_files_count``, ...) or,
            in a dry run, the candidates found (``candidate_data_files``, ...).
        snapshot_ids: ``expire_snapshots``: the snapshots expired (dry run: that would be).
        branches: ``remove_stale_run_branches``: the branches removed (dry run: that would be).
        attempts: how many times it ran (more than 1 after a lost commit race).
        seconds: wall-clock time it took, retries included.
    """

    model_config = ConfigDict(frozen=True)

    action: str
    table: str
    status: Status
    summary: str
    figures: dict[str, int] = {}
    snapshot_ids: tuple[int, ...] = ()
    branches: tuple[str, ...] = ()
    attempts: int = 1
    seconds: float = 0.0


class MaintenanceResult(BaseModel):
    """The outcome of :func:`~cdclake.spark.maintenance.maintain_table`.

    Attributes:
        table: the CDC table, ``namespace.table``.
        dry_run: whether it only reported.
        actions: the actions run, in order.
        snapshot_id_before: the table's current snapshot when maintenance started (``None``: the
            table does not exist or has no snapshot).
        snapshot_id_after: its current snapshot when maintenance ended.
        reports: one per action and table, in the order they ran.
        seconds: wall-clock time of the whole run.
    """

    model_config = ConfigDict(frozen=True)

    table: str
    dry_run: bool
    actions: tuple[str, ...]
    snapshot_id_before: int | None
    snapshot_id_after: int | None
    reports: tuple[ActionReport, ...]
    seconds: float

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> MaintenanceResult:
        return cls.model_validate_json(text)

    def report(self, action: str, table: str | None = None) -> ActionReport:
        """The report of ``action`` on ``table`` (default: the CDC table).

        Raises:
            KeyError: that action did not run on that table.
        """
        table = table or self.table
        for r in self.reports:
            if r.action == action and r.table == table:
                return r
        raise KeyError(f"no report of {action!r} on {table!r}")


def check_actions(actions: Sequence[str] | None) -> tuple[str, ...]:
    """The actions to run, in :data:`ACTIONS` order (``None`` or empty: all of them).

    Raises:
        ConfigError: a name that is not one of :data:`ACTIONS` (the message lists them).
    """
    if not actions:
        return ACTIONS
    unknown = sorted(set(actions) - set(ACTIONS))
    if unknown:
        raise ConfigError(f"unknown maintenance action(s) {unknown}; known: {list(ACTIONS)}")
    return tuple(a for a in ACTIONS if a in actions)


def expiry_cutoff_ms(
    ancestry: Sequence[tuple[int, int, Mapping[str, str] | None]], topic: str, window_cut_ms: int
) -> tuple[int, int | None]:
    """The ``older_than`` of ``expire_snapshots`` (epoch ms) that keeps the table's offsets.

    The apply finds its committed offsets in the newest snapshot of the current snapshot's
    ancestry that carries ``cdc.kafka.end-offsets`` for ``topic``
    (:func:`cdclake.model.run_state.committed_state_of`); maintenance commits carry none. Iceberg
    (``RemoveSnapshots``) keeps a branch's ancestors from its head back while their timestamp is
    at or after ``older_than`` (or fewer than ``retain_last`` are kept): so ``older_than`` is at
    most the timestamp of that snapshot and of every snapshot between it and the head (clocks of
    different writers need not agree).

    Args:
        ancestry: ``(snapshot id, timestamp ms, summary)`` from the current snapshot back, newest
            first.
        topic: the table's Kafka topic.
        window_cut_ms: now minus the time-travel window.

    Returns:
        ``(older_than ms, id of the offset-carrying snapshot or None when there is none)``.
    """
    guard: int | None = None
    for snapshot_id, timestamp_ms, summary in ancestry:
        guard = timestamp_ms if guard is None else min(guard, timestamp_ms)
        if committed_state_of(snapshot_id, [summary], topic).offsets is not None:
            return min(window_cut_ms, guard), snapshot_id
    return window_cut_ms, None


@dataclass(frozen=True)
class SnapshotInfo:
    """A snapshot as the expiry rule sees it."""

    snapshot_id: int
    parent_id: int | None
    timestamp_ms: int


@dataclass(frozen=True)
class RefInfo:
    """A branch or tag as the expiry rule sees it (the ``refs`` of the table metadata)."""

    snapshot_id: int
    is_branch: bool
    min_snapshots_to_keep: int | None = None
    max_snapshot_age_ms: int | None = None
    max_ref_age_ms: int | None = None


def snapshots_to_expire(
    snapshots: Sequence[SnapshotInfo],
    refs: Mapping[str, RefInfo],
    older_than_ms: int,
    retain_last: int,
    now_ms: int,
) -> list[int]:
    """The snapshot ids ``expire_snapshots(older_than, retain_last)`` expires (for a dry run):
    Iceberg 1.11's ``RemoveSnapshots`` rule. A ref (not ``main``) older than its
    ``max_ref_age_ms`` is dropped first; each branch keeps its ancestors from its head back while
    fewer than ``min_snapshots_to_keep`` (default ``retain_last``) are kept or they are at or after
    its ``older_than`` (``now - max_snapshot_age_ms``, default ``older_than_ms``); a tag keeps its
    snapshot; a snapshot no ref reaches is kept when at or after ``older_than_ms``.

    Returns:
        The ids, oldest first.
    """
    by_id = {s.snapshot_id: s for s in snapshots}

    def ancestors(head: int) -> list[SnapshotInfo]:
        out, cur = [], by_id.get(head)
        while cur is not None:
            out.append(cur)
            cur = by_id.get(cur.parent_id) if cur.parent_id is not None else None
        return out

    live: dict[str, RefInfo] = {}
    for name, ref in refs.items():
        head = by_id.get(ref.snapshot_id)
        if name != "main" and ref.max_ref_age_ms is not None and head is not None:
            if now_ms - head.timestamp_ms > ref.max_ref_age_ms:
                continue
        live[name] = ref
    keep: set[int] = set()
    reachable: set[int] = set()
    for ref in live.values():
        if not ref.is_branch:
            keep.add(ref.snapshot_id)
            reachable.add(ref.snapshot_id)
            continue
        cut = now_ms - ref.max_snapshot_age_ms if ref.max_snapshot_age_ms is not None else older_than_ms
        minimum = ref.min_snapshots_to_keep if ref.min_snapshots_to_keep is not None else retain_last
        kept = 0
        lineage = ancestors(ref.snapshot_id)
        reachable.update(s.snapshot_id for s in lineage)
        for snap in lineage:
            if kept < minimum or snap.timestamp_ms >= cut:
                keep.add(snap.snapshot_id)
                kept += 1
            else:
                break
    keep.update(s.snapshot_id for s in snapshots if s.snapshot_id not in reachable and s.timestamp_ms >= older_than_ms)
    gone = [s for s in snapshots if s.snapshot_id not in keep]
    return [s.snapshot_id for s in sorted(gone, key=lambda s: (s.timestamp_ms, s.snapshot_id))]


RUN_BRANCH_MAX_AGE_MS = 6 * 3600 * 1000
"""A run branch created more than this long ago (6 h, in ms) was left by a killed apply, unless
the table's tasks may run longer (:func:`run_branch_max_age_ms`)."""


def run_branch_max_age_ms(task_timeout_minutes: int) -> int:
    """The age (ms) above which a table's run branch is stale: :data:`RUN_BRANCH_MAX_AGE_MS`, or
    twice the table's ``task_timeout_minutes`` when that is longer.

    A run branch lives as long as the try of the ``apply`` task that made it: Airflow kills the try
    at its ``execution_timeout`` (``task_timeout_minutes``), and only the try sends the
    fast-forward. The age must exceed that; twice it leaves room for the kill to land late and for
    the clocks of the apply and of maintenance to differ.
    """
    return max(RUN_BRANCH_MAX_AGE_MS, 2 * task_timeout_minutes * 60 * 1000)


@dataclass(frozen=True)
class RunBranch:
    """A run branch (:data:`~cdclake.model.layout.RUN_BRANCH_PREFIX`) as the stale-branch rule
    sees it.

    Attributes:
        name: the branch's name.
        head_timestamp_ms: timestamp of its head snapshot, epoch ms; ``None`` when the table has
            no such snapshot.
        main_in_lineage: whether ``main``'s current snapshot is the branch's head or one of the
            head's ancestors, i.e. whether Iceberg's ``fast_forward`` of ``main`` to the branch
            can still succeed.
    """

    name: str
    head_timestamp_ms: int | None
    main_in_lineage: bool


def stale_run_branch(branch: RunBranch, now_ms: int, max_age_ms: int) -> bool:
    """Whether ``branch`` was left by a killed apply and may be removed.

    A branch named with its creation time (:func:`~cdclake.model.layout.run_branch_name`) is stale
    once created more than ``max_age_ms`` ago, and never before: the head snapshot says nothing,
    since a new branch starts at the run's base snapshot, as old as the table's last commit. A
    branch of a release before creation times were named is stale only when its head snapshot is
    older than ``max_age_ms`` (or missing) and ``main`` has moved off its lineage: ``fast_forward``
    then refuses it, so no run can still commit through it. Such a branch left on a table whose
    ``main`` never moves again stays; the next commit to ``main`` lets the next maintenance remove it.

    Args:
        branch: the branch.
        now_ms: the time of the maintenance run, epoch ms.
        max_age_ms: :func:`run_branch_max_age_ms` of the table.
    """
    created_ms = run_branch_created_ms(branch.name)
    if created_ms is not None:
        return now_ms - created_ms > max_age_ms
    head_old = branch.head_timestamp_ms is None or now_ms - branch.head_timestamp_ms > max_age_ms
    return head_old and not branch.main_in_lineage
