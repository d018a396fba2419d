"""Table upkeep with Iceberg's own Spark procedures, for one CDC table and its side tables.

:func:`maintain_table` runs the actions of :data:`ACTIONS`, in that order, on the table
``<catalog>.<namespace>.<table>`` of a :class:`~cdclake.model.config.TableConfig` (settings in its
``maintenance:`` block, :class:`~cdclake.model.config.MaintenancePolicy`):

1. ``remove_stale_run_branches``: run branches older than :data:`RUN_BRANCH_MAX_AGE_MS` (6 h),
   left by killed applies (:func:`cdclake.io.maintenance.remove_stale_run_branches`, pyiceberg).
2. ``expire_tombstones``: delete tombstones older than ``tombstone_retention_hours``
   (:func:`cdclake.io.maintenance.expire_tombstones`, pyiceberg).
3. ``rewrite_position_delete_files``: ``CALL <catalog>.system.rewrite_position_delete_files``.
4. ``rewrite_data_files``: bin-pack compaction that also rewrites every data file with at least
   ``delete_file_threshold`` delete files (or :data:`DELETE_RATIO_THRESHOLD` of its rows deleted),
   so that merge-on-read deletes are folded into the data; dangling deletes are removed.
5. ``rewrite_manifests``.
6. ``expire_snapshots``: snapshots older than the time-travel window ``snapshot_retention_hours``,
   keeping the newest ``retain_last`` and NEVER the newest snapshot that carries the table's
   committed Kafka offsets (see :func:`expiry_cutoff_ms`).
7. ``remove_orphan_files``: files no snapshot references, older than ``orphan_file_age_hours``
   (at least 24 h: an apply in flight writes its files before its commit).

Actions 3-7 also run on the side tables (``<table>__cdc_tombstones``, ``<table>__cdc_quarantine``)
that exist: they accumulate snapshots and small files too. The procedures and their options are
those of the pinned Iceberg runtime (1.11, ``iceberg-spark-runtime-4.1``; Iceberg docs, "Spark
Procedures" and "Maintenance").

**Concurrency.** Maintenance may run while the table's apply runs. A procedure that loses a commit
race (Iceberg's ``CommitFailedException`` or ``ValidationException``, as Spark or Spark Connect
wraps them; pyiceberg's ``CommitFailedException``) is retried :data:`COMMIT_ATTEMPTS` times with
random exponential backoff; when it loses every time its report says ``lost_race`` (nothing was
changed by it) and the next actions run: a lost race is never an error of the maintenance run.
Rewrites run with ``partial-progress.enabled``, so a race lost by one file group keeps the others.

**Dry run.** Nothing is committed and no file is deleted: each action reports what it would do,
from the metadata tables (``data_files``, ``delete_files``, ``position_deletes``, ``manifests``),
the snapshot list (the ids ``expire_snapshots`` would expire) and ``remove_orphan_files`` with
``dry_run => true``.

Every statement goes through the given SparkSession with ``spark.sql(...).collect()``, so it works
on a classic session and on a Spark Connect session alike. One INFO line is logged per action and
table, with its figures.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from cdclake.errors import ConfigError
from cdclake.io.catalog import load_catalog, load_table_or_none
from cdclake.io.maintenance import expire_tombstones, remove_stale_run_branches
from cdclake.model.config import TableConfig
from cdclake.model.layout import (
    QUARANTINE_SUFFIX,
    RUN_BRANCH_PREFIX,
    TOMBSTONES_SUFFIX,
    side_table,
)
from cdclake.model.run_state import committed_state_of
from cdclake.settings import Settings

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ACTIONS: tuple[str, ...] = (
    "remove_stale_run_branches",
    "expire_tombstones",
    "rewrite_position_delete_files",
    "rewrite_data_files",
    "rewrite_manifests",
    "expire_snapshots",
    "remove_orphan_files",
)
"""The maintenance actions, in the order :func:`maintain_table` runs them."""

SIDE_TABLE_ACTIONS = frozenset(ACTIONS[2:])
"""The actions that also run on the side tables (the procedures; 1-2 concern the table alone)."""

RUN_BRANCH_MAX_AGE_MS = 6 * 3600 * 1000
"""Run branches whose snapshot is older than this (6 h, in ms) were left by killed applies."""

COMMIT_ATTEMPTS = 4
"""Attempts of an action that loses a commit race to a concurrent writer (the apply)."""

RETRY_WAIT_S = (0.5, 10.0)
"""Backoff between those attempts: random exponential from the first figure (seconds), at most
the second."""

MIN_INPUT_FILES = 2
"""``min-input-files`` of the rewrites: two small files are already worth one (Iceberg's default,
5, leaves the few small files of each CDC run alone for many runs)."""

DELETE_RATIO_THRESHOLD = 0.3
"""``delete-ratio-threshold`` of ``rewrite_data_files`` (Iceberg 1.11's default, given explicitly):
a data file with this share of its rows deleted is rewritten whatever its delete-file count."""

MIN_ORPHAN_AGE_HOURS = 24
"""Iceberg's ``remove_orphan_files`` procedure refuses a younger ``older_than`` (an apply in
flight has written files its commit does not reference yet)."""

DEFAULT_TARGET_FILE_SIZE = 512 * 1024 * 1024
"""Iceberg's default ``write.target-file-size-bytes`` (512 MiB)."""

_MIB = 1024 * 1024
_HOUR_MS = 3600 * 1000

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
    """The outcome of :func:`maintain_table`.

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


def maintain_table(
    spark: SparkSession,
    settings: Settings,
    cfg: TableConfig,
    *,
    actions: Sequence[str] | None = None,
    dry_run: bool = False,
    now_ms: int | None = None,
) -> MaintenanceResult:
    """Run the maintenance ``actions`` (default: all of :data:`ACTIONS`, always in that order) on
    ``cfg``'s table and its side tables (see the module docstring).

    Args:
        spark: a classic or Spark Connect session with the Iceberg catalog ``settings.catalog_name``
            and the Iceberg SQL extensions.
        settings: where the catalog is (pyiceberg reads the same catalog).
        cfg: the table; its ``maintenance`` block and ``tombstone_retention_hours`` apply.
        actions: names out of :data:`ACTIONS`.
        dry_run: commit nothing and delete nothing; report what would be done.
        now_ms: "now" in epoch ms for the age rules (tests); default: the clock. Orphan-file age
            is always counted from the earlier of ``now_ms`` and the clock, so that a ``now_ms``
            in the future never makes fresh files orphans.

    Returns:
        One :class:`ActionReport` per action and table. A table that does not exist yet gets one
        ``skipped`` report per action.

    Raises:
        ConfigError: an unknown action name.
        Exception: any failure of an action other than a lost commit race (Spark's or pyiceberg's
            error, as raised); the actions before it have taken effect.
    """
    chosen = check_actions(actions)
    started = time.monotonic()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    catalog = load_catalog(settings)
    table = load_table_or_none(catalog, cfg.identifier)
    if table is None:
        reports = tuple(
            _log_report(ActionReport(action=a, table=cfg.identifier, status="skipped", summary="no such table"))
            for a in chosen
        )
        return MaintenanceResult(
            table=cfg.identifier,
            dry_run=dry_run,
            actions=chosen,
            snapshot_id_before=None,
            snapshot_id_after=None,
            reports=reports,
            seconds=time.monotonic() - started,
        )
    before = table.current_snapshot()
    side_tables = [
        ident
        for ident in (side_table(cfg.identifier, s) for s in (TOMBSTONES_SUFFIX, QUARANTINE_SUFFIX))
        if load_table_or_none(catalog, ident) is not None
    ]
    job = _Maintenance(spark, settings, catalog, cfg, dry_run, now_ms)
    out: list[ActionReport] = []
    for action in chosen:
        targets = [cfg.identifier, *side_tables] if action in SIDE_TABLE_ACTIONS else [cfg.identifier]
        for ident in targets:
            out.append(job.run(action, ident))
    after = table.refresh().current_snapshot()
    return MaintenanceResult(
        table=cfg.identifier,
        dry_run=dry_run,
        actions=chosen,
        snapshot_id_before=before.snapshot_id if before else None,
        snapshot_id_after=after.snapshot_id if after else None,
        reports=tuple(out),
        seconds=time.monotonic() - started,
    )


def lost_commit_race(error: BaseException) -> bool:
    """Whether ``error`` (or an error it was raised from) is a lost optimistic commit: Iceberg's
    ``CommitFailedException`` (the table moved under the commit) or ``ValidationException`` (a
    concurrent commit conflicts with a rewrite, e.g. new deletes on a rewritten file), as
    Spark (``Py4JJavaError``, a captured exception) or Spark Connect (``SparkConnectGrpcException``)
    wraps them, naming the Java class in the message or the JVM stack trace; or pyiceberg's
    ``CommitFailedException``. ``CommitStateUnknownException`` is not one: the commit may have
    happened."""
    markers = ("CommitFailedException", "ValidationException")
    seen: set[int] = set()
    err: BaseException | None = error
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        names = [cls.__name__ for cls in type(err).__mro__]
        text = " ".join([str(err), str(getattr(err, "_stackTrace", "") or "")])
        if any(m in names for m in markers) or any(f"iceberg.exceptions.{m}" in text for m in markers):
            return True
        err = err.__cause__ or err.__context__
    return False


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


@dataclass
class _Outcome:
    """What an action function returns (the runner adds status, timing and attempts)."""

    summary: str
    figures: dict[str, int] = field(default_factory=dict)
    snapshot_ids: tuple[int, ...] = ()
    branches: tuple[str, ...] = ()
    skipped: bool = False


class _Maintenance:
    """The actions of one :func:`maintain_table` run, bound to its session, catalog and clock."""

    def __init__(
        self, spark: SparkSession, settings: Settings, catalog: Catalog, cfg: TableConfig, dry_run: bool, now_ms: int
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.catalog = catalog
        self.cfg = cfg
        self.policy = cfg.maintenance
        self.dry_run = dry_run
        self.now_ms = now_ms

    # --- the runner ---------------------------------------------------------------------------

    def run(self, action: str, ident: str) -> ActionReport:
        """Run ``action`` on ``ident``, retrying a lost commit race; log and report it."""
        from tenacity import Retrying, before_sleep_log, retry_if_exception, stop_after_attempt, wait_random_exponential

        fn: Callable[[str], _Outcome] = getattr(self, "_" + action)
        started = time.monotonic()
        attempts = 0

        def once() -> _Outcome:
            nonlocal attempts
            attempts += 1
            return fn(ident)

        retrying = Retrying(
            retry=retry_if_exception(lost_commit_race),
            stop=stop_after_attempt(COMMIT_ATTEMPTS),
            wait=wait_random_exponential(multiplier=RETRY_WAIT_S[0], max=RETRY_WAIT_S[1]),
            before_sleep=before_sleep_log(log, logging.WARNING),
            reraise=True,
        )
        status: Status
        try:
            outcome = retrying(once)
            status = "skipped" if outcome.skipped else ("dry_run" if self.dry_run else "done")
        except Exception as e:
            if not lost_commit_race(e):
                raise
            first_line = _race_line(e)
            log.warning(
                "maintenance %s of %s lost the commit race %d times; nothing changed, the next maintenance "
                "run tries again: %s",
                action,
                ident,
                attempts,
                first_line,
            )
            outcome = _Outcome(f"lost the commit race {attempts} times; nothing changed ({first_line})")
            status = "lost_race"
        return _log_report(
            ActionReport(
                action=action,
                table=ident,
                status=status,
                summary=outcome.summary,
                figures=outcome.figures,
                snapshot_ids=outcome.snapshot_ids,
                branches=outcome.branches,
                attempts=attempts,
                seconds=round(time.monotonic() - started, 3),
            )
        )

    # --- helpers ------------------------------------------------------------------------------

    def _spark_name(self, ident: str) -> str:
        return f"{self.settings.catalog_name}.{ident}"

    def _sql(self, statement: str) -> list[dict[str, Any]]:
        """Run ``statement`` and return its rows as dicts (works over Spark Connect)."""
        log.debug("maintenance SQL: %s", statement)
        return [row.asDict() for row in self.spark.sql(statement).collect()]

    def _call(self, procedure: str, ident: str, args: Mapping[str, str]) -> list[dict[str, Any]]:
        """``CALL <catalog>.system.<procedure>(table => '<ident>', <name> => <SQL expression>...)``."""
        named = "".join(f", {k} => {v}" for k, v in args.items())
        return self._sql(f"CALL {self.settings.catalog_name}.system.{procedure}(table => '{ident}'{named})")

    @staticmethod
    def _options(options: Mapping[str, str]) -> dict[str, str]:
        """The ``options => map(...)`` argument (none when ``options`` is empty)."""
        if not options:
            return {}
        return {"options": "map(" + ", ".join(f"'{k}', '{v}'" for k, v in options.items()) + ")"}

    @staticmethod
    def _figures(rows: list[dict[str, Any]]) -> dict[str, int]:
        """The integer columns of a procedure's result rows, summed."""
        figures: dict[str, int] = {}
        for row in rows:
            for k, v in row.items():
                if isinstance(v, int) and not isinstance(v, bool):
                    figures[k] = figures.get(k, 0) + v
        return figures

    def _table(self, ident: str) -> Table | None:
        """The table freshly loaded, or ``None`` when it does not exist or has no snapshot (no
        procedure has anything to do there)."""
        table = load_table_or_none(self.catalog, ident)
        return table if table is not None and table.current_snapshot() is not None else None

    def _target_file_size(self, table: Table) -> int:
        if self.policy.target_file_size_mb is not None:
            return self.policy.target_file_size_mb * _MIB
        return int(table.properties.get("write.target-file-size-bytes", DEFAULT_TARGET_FILE_SIZE))

    def _size_options(self) -> dict[str, str]:
        if self.policy.target_file_size_mb is None:
            return {}
        return {"target-file-size-bytes": str(self.policy.target_file_size_mb * _MIB)}

    # --- the actions (one method per name of ACTIONS) -----------------------------------------

    def _remove_stale_run_branches(self, ident: str) -> _Outcome:
        if self.dry_run:
            table = self._table(ident)
            if table is None:
                return _Outcome("no snapshot", skipped=True)
            stale = []
            for name, ref in table.refs().items():
                snap = table.snapshot_by_id(ref.snapshot_id)
                if name.startswith(RUN_BRANCH_PREFIX) and (
                    snap is None or self.now_ms - snap.timestamp_ms > RUN_BRANCH_MAX_AGE_MS
                ):
                    stale.append(name)
            return _Outcome(
                f"would remove {len(stale)} run branch(es) older than 6 h",
                {"stale_branches": len(stale)},
                branches=tuple(sorted(stale)),
            )
        removed = remove_stale_run_branches(
            self.catalog, ident, older_than_ms=RUN_BRANCH_MAX_AGE_MS, now_ms=self.now_ms
        )
        return _Outcome(
            f"removed {len(removed)} run branch(es) older than 6 h",
            {"removed_branches": len(removed)},
            branches=tuple(sorted(removed)),
        )

    def _expire_tombstones(self, ident: str) -> _Outcome:
        tombstones = side_table(ident, TOMBSTONES_SUFFIX)
        hours = self.cfg.tombstone_retention_hours
        if self._table(tombstones) is None:
            return _Outcome("no tombstones", skipped=True)
        if self.dry_run:
            # the rule of cdclake.io.maintenance.expire_tombstones, counted without deleting
            cutoff_us = (self.now_ms - hours * _HOUR_MS) * 1000
            rows = self._sql(
                f"SELECT count(*) AS n FROM {self._spark_name(tombstones)} "
                f"WHERE _cdc_recorded_at < timestamp_micros({cutoff_us})"
            )
            n = int(rows[0]["n"])
            return _Outcome(f"would delete {n} tombstone(s) older than {hours} h", {"expired_tombstones": n})
        n = expire_tombstones(self.catalog, ident, hours, now_ms=self.now_ms)
        return _Outcome(f"deleted {n} tombstone(s) older than {hours} h", {"expired_tombstones": n})

    def _rewrite_position_delete_files(self, ident: str) -> _Outcome:
        table = self._table(ident)
        if table is None:
            return _Outcome("no snapshot", skipped=True)
        if self.dry_run:
            rows = self._sql(
                "SELECT count_if(content = 1) AS position_delete_files, count_if(content = 2) AS equality_delete_files "
                f"FROM {self._spark_name(ident)}.delete_files"
            )
            figures = {k: int(v) for k, v in rows[0].items()}
            return _Outcome(f"would compact up to {figures['position_delete_files']} position delete file(s)", figures)
        options = {"min-input-files": str(MIN_INPUT_FILES), **self._size_options()}
        figures = self._figures(self._call("rewrite_position_delete_files", ident, self._options(options)))
        return _Outcome(
            f"rewrote {figures.get('rewritten_delete_files_count', 0)} position delete file(s) into "
            f"{figures.get('added_delete_files_count', 0)}",
            figures,
        )

    def _rewrite_data_files(self, ident: str) -> _Outcome:
        table = self._table(ident)
        if table is None:
            return _Outcome("no snapshot", skipped=True)
        threshold = self.policy.delete_file_threshold
        if self.dry_run:
            # BinPackRewriteFilePlanner's file filter: outside [0.75, 1.8] x target size, or with
            # too many deletes; whether a group of small files reaches min-input-files is not
            # estimated, hence "up to"
            target = self._target_file_size(table)
            low, high = int(target * 0.75), int(target * 1.8)
            name = self._spark_name(ident)
            rows = self._sql(f"""
                SELECT count(*) AS data_files,
                       count_if(f.file_size_in_bytes < {low} OR f.file_size_in_bytes > {high}) AS wrongly_sized_data_files,
                       count_if(coalesce(d.n, 0) >= {threshold}) AS data_files_with_deletes,
                       count_if(f.file_size_in_bytes < {low} OR f.file_size_in_bytes > {high}
                                OR coalesce(d.n, 0) >= {threshold}) AS candidate_data_files
                FROM {name}.data_files f
                LEFT JOIN (SELECT file_path, count(DISTINCT delete_file_path) AS n
                           FROM {name}.position_deletes GROUP BY file_path) d
                  ON f.file_path = d.file_path
            """)
            figures = {k: int(v or 0) for k, v in rows[0].items()}
            deletes = self._sql(f"SELECT count(*) AS n FROM {name}.delete_files")
            figures["delete_files"] = int(deletes[0]["n"])
            return _Outcome(
                f"would rewrite up to {figures['candidate_data_files']} of {figures['data_files']} data file(s) "
                f"({figures['data_files_with_deletes']} with deletes, {figures['delete_files']} delete file(s))",
                figures,
            )
        options = {
            "delete-file-threshold": str(threshold),
            "delete-ratio-threshold": str(DELETE_RATIO_THRESHOLD),
            "min-input-files": str(MIN_INPUT_FILES),
            "partial-progress.enabled": "true",
            "remove-dangling-deletes": "true",
            **self._size_options(),
        }
        figures = self._figures(self._call("rewrite_data_files", ident, self._options(options)))
        return _Outcome(
            f"rewrote {figures.get('rewritten_data_files_count', 0)} data file(s) into "
            f"{figures.get('added_data_files_count', 0)}, {figures.get('failed_data_files_count', 0)} failed",
            figures,
        )

    def _rewrite_manifests(self, ident: str) -> _Outcome:
        table = self._table(ident)
        if table is None:
            return _Outcome("no snapshot", skipped=True)
        if self.dry_run:
            rows = self._sql(f"SELECT count(*) AS n FROM {self._spark_name(ident)}.manifests")
            n = int(rows[0]["n"])
            return _Outcome(f"would rewrite up to {n} manifest(s)", {"manifests": n})
        figures = self._figures(self._call("rewrite_manifests", ident, {}))
        return _Outcome(
            f"rewrote {figures.get('rewritten_manifests_count', 0)} manifest(s) into "
            f"{figures.get('added_manifests_count', 0)}",
            figures,
        )

    def _expire_snapshots(self, ident: str) -> _Outcome:
        from pyiceberg.table.refs import SnapshotRefType
        from pyiceberg.table.snapshots import ancestors_of

        table = self._table(ident)
        if table is None:
            return _Outcome("no snapshot", skipped=True)
        window_cut = self.now_ms - self.policy.snapshot_retention_hours * _HOUR_MS
        kept = None
        if ident == self.cfg.identifier:
            current = table.current_snapshot()
            ancestry = [
                (s.snapshot_id, s.timestamp_ms, s.summary.additional_properties if s.summary else None)
                for s in (ancestors_of(current, table.metadata) if current else ())
            ]
            older_than, kept = expiry_cutoff_ms(ancestry, self.cfg.topic, window_cut)
        else:
            older_than = window_cut
        retain_last = self.policy.retain_last
        predicted = snapshots_to_expire(
            [SnapshotInfo(s.snapshot_id, s.parent_snapshot_id, s.timestamp_ms) for s in table.snapshots()],
            {
                name: RefInfo(
                    ref.snapshot_id,
                    ref.snapshot_ref_type == SnapshotRefType.BRANCH,
                    ref.min_snapshots_to_keep,
                    ref.max_snapshot_age_ms,
                    ref.max_ref_age_ms,
                )
                for name, ref in table.refs().items()
            },
            older_than,
            retain_last,
            int(time.time() * 1000),
        )
        guard = f"; kept the offsets snapshot {kept}" if kept is not None else ""
        figures: dict[str, int] = {"older_than_ms": older_than, "retain_last": retain_last}
        if self.dry_run:
            figures["expired_snapshots"] = len(predicted)
            return _Outcome(
                f"would expire {len(predicted)} snapshot(s) older than {older_than} ms{guard}",
                figures,
                snapshot_ids=tuple(predicted),
            )
        before = {s.snapshot_id: s.timestamp_ms for s in table.snapshots()}
        rows = self._call(
            "expire_snapshots",
            ident,
            {"older_than": f"timestamp_millis({older_than})", "retain_last": str(retain_last)},
        )
        figures.update(self._figures(rows))
        table = table.refresh()
        gone = sorted(set(before) - {s.snapshot_id for s in table.snapshots()}, key=lambda i: (before[i], i))
        figures["expired_snapshots"] = len(gone)
        return _Outcome(
            f"expired {len(gone)} snapshot(s) older than {older_than} ms{guard}",
            figures,
            snapshot_ids=tuple(gone),
        )

    def _remove_orphan_files(self, ident: str) -> _Outcome:
        # A local warehouse is listed through Hadoop's FileSystem. An object store (s3://) has no
        # Hadoop FileSystem here (the catalog's S3FileIO is the only client): list it with the
        # FileIO's prefix listing, under "<location>/". The slash matters: a side table's location
        # (<table>__cdc_tombstones) starts with the table's location as a string, so a prefix
        # listing without it would count the side table's files as orphans.
        table = self._table(ident)
        if table is None:
            return _Outcome("no snapshot", skipped=True)
        hours = max(self.policy.orphan_file_age_hours, MIN_ORPHAN_AGE_HOURS)
        older_than = min(self.now_ms, int(time.time() * 1000)) - hours * _HOUR_MS
        args = {"older_than": f"timestamp_millis({older_than})", "dry_run": "true" if self.dry_run else "false"}
        location = table.location()
        if "://" in location and not location.startswith("file:"):
            args.update({"location": "'" + location.rstrip("/") + "/'", "prefix_listing": "true"})
        rows = self._call("remove_orphan_files", ident, args)
        verb = "would delete" if self.dry_run else "deleted"
        return _Outcome(f"{verb} {len(rows)} orphan file(s) older than {hours} h", {"orphan_files": len(rows)})


def _race_line(error: BaseException) -> str:
    """The line of ``error``'s message that names the Iceberg exception (else its first line)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    named = [line for line in lines if "CommitFailedException" in line or "ValidationException" in line]
    return (named or lines or [type(error).__name__])[0][:300]


def _log_report(report: ActionReport) -> ActionReport:
    figures = " ".join(f"{k}={v}" for k, v in report.figures.items())
    ids = f" snapshots={list(report.snapshot_ids)}" if report.snapshot_ids else ""
    branches = f" branches={list(report.branches)}" if report.branches else ""
    log.info(
        "maintenance %s %s [%s]: %s; %s%s%s (%.2f s, %d attempt(s))",
        report.action,
        report.table,
        report.status,
        report.summary,
        figures or "-",
        ids,
        branches,
        report.seconds,
        report.attempts,
    )
    return report
