"""Table upkeep with Iceberg's own Spark procedures, for one CDC table and its side tables.

:func:`maintain_table` runs the actions of :data:`~cdclake.model.maintenance.ACTIONS`, in that
order, on the table ``<catalog>.<namespace>.<table>`` of a :class:`~cdclake.model.config.TableConfig`
(settings in its ``maintenance:`` block, :class:`~cdclake.model.config_blocks.MaintenancePolicy`):

1. ``remove_stale_run_branches``: run branches created more than 6 h ago (twice
   ``task_timeout_minutes`` when longer: :func:`~cdclake.model.maintenance.run_branch_max_age_ms`),
   left by killed applies (:func:`cdclake.io.maintenance.remove_stale_run_branches`, pyiceberg).
2. ``expire_tombstones``: delete tombstones older than ``tombstone_retention_hours``
   (:func:`cdclake.io.maintenance.expire_tombstones`, pyiceberg).
3. ``expire_changes``: with a change feed (``change_feed``), delete its change rows older than
   ``retention_days`` whole days (:func:`cdclake.io.changes.expire_changes`, pyiceberg).
4. ``rewrite_position_delete_files``: ``CALL <catalog>.system.rewrite_position_delete_files``.
5. ``rewrite_data_files``: bin-pack compaction that also rewrites every data file with at least
   ``delete_file_threshold`` delete files (or :data:`DELETE_RATIO_THRESHOLD` of its rows deleted),
   so that merge-on-read deletes are folded into the data; dangling deletes are removed.
6. ``rewrite_manifests``.
7. ``expire_snapshots``: snapshots older than the time-travel window ``snapshot_retention_hours``,
   keeping the newest ``retain_last`` and NEVER the newest snapshot that carries the table's
   committed Kafka offsets (see :func:`~cdclake.model.maintenance.expiry_cutoff_ms`).
8. ``remove_orphan_files``: files no snapshot references, older than ``orphan_file_age_hours``
   (at least 24 h: an apply in flight writes its files before its commit).

Actions 4-8 also run on the side tables (``<table>__cdc_tombstones``, ``<table>__cdc_quarantine``,
with ``history`` ``<table>__history``) that exist: they accumulate snapshots and small files too; actions 6-8 also on the change feed
(:data:`~cdclake.model.maintenance.CHANGE_FEED_ACTIONS` says why not the others). The procedures and their options are
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

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cdclake.errors import RACE_EXCEPTIONS, lost_commit_race
from cdclake.io.catalog import load_catalog, load_table_or_none
from cdclake.io.changes import expire_changes
from cdclake.io.maintenance import expire_tombstones, remove_stale_run_branches, stale_run_branches
from cdclake.io.refs import MAIN_BRANCH, ancestry, head_snapshot, write_ref
from cdclake.model.changes import CHANGES_SUFFIX, PARTITION_SOURCE, retention_cutoff_ms
from cdclake.model.config import TableConfig
from cdclake.model.history import HISTORY_SUFFIX
from cdclake.model.layout import QUARANTINE_SUFFIX, TOMBSTONES_SUFFIX, side_table
from cdclake.model.maintenance import (
    CHANGE_FEED_ACTIONS,
    SIDE_TABLE_ACTIONS,
    ActionReport,
    MaintenanceResult,
    RefInfo,
    SnapshotInfo,
    Status,
    check_actions,
    expiry_cutoff_ms,
    run_branch_max_age_ms,
    snapshots_to_expire,
)
from cdclake.settings import Settings
from cdclake.spark.names import quote_identifier

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

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


def maintain_table(
    spark: SparkSession,
    settings: Settings,
    cfg: TableConfig,
    *,
    actions: Sequence[str] | None = None,
    dry_run: bool = False,
    now_ms: int | None = None,
) -> MaintenanceResult:
    """Run the maintenance ``actions`` (default: all of :data:`~cdclake.model.maintenance.ACTIONS`, always in that order) on
    ``cfg``'s table and its side tables (see the module docstring).

    Args:
        spark: a classic or Spark Connect session with the Iceberg catalog ``settings.catalog_name``
            and the Iceberg SQL extensions.
        settings: where the catalog is (pyiceberg reads the same catalog).
        cfg: the table; its ``maintenance`` block and ``tombstone_retention_hours`` apply.
        actions: names out of :data:`~cdclake.model.maintenance.ACTIONS`.
        dry_run: commit nothing and delete nothing; report what would be done.
        now_ms: "now" in epoch ms for the age rules (tests); default: the clock. Orphan-file age
            is always counted from the earlier of ``now_ms`` and the clock, so that a ``now_ms``
            in the future never makes fresh files orphans.

    Returns:
        One :class:`~cdclake.model.maintenance.ActionReport` per action and table. A table that does not exist yet gets one
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
    before = head_snapshot(table)  # a group table's runs and compactions move its stage branch, not main
    side_tables = [
        ident
        for ident in (side_table(cfg.identifier, s) for s in _side_table_suffixes(cfg))
        if load_table_or_none(catalog, ident) is not None
    ]
    feed = side_table(cfg.identifier, CHANGES_SUFFIX) if cfg.change_feed is not None else None
    if feed is not None and load_table_or_none(catalog, feed) is None:
        feed = None
    job = _Maintenance(spark, settings, catalog, cfg, dry_run, now_ms)
    out: list[ActionReport] = []
    for action in chosen:
        targets = [cfg.identifier, *side_tables] if action in SIDE_TABLE_ACTIONS else [cfg.identifier]
        if feed is not None and action in CHANGE_FEED_ACTIONS:
            targets.append(feed)
        for ident in targets:
            out.append(job.run(action, ident))
    after = head_snapshot(table.refresh())
    return MaintenanceResult(
        table=cfg.identifier,
        dry_run=dry_run,
        actions=chosen,
        snapshot_id_before=before.snapshot_id if before else None,
        snapshot_id_after=after.snapshot_id if after else None,
        reports=tuple(out),
        seconds=time.monotonic() - started,
    )


def _side_table_suffixes(cfg: TableConfig) -> tuple[str, ...]:
    """The side tables the procedures also run on (those that exist): the tombstones, the
    quarantine and, with ``history``, the history (a merge-on-read table like the table itself)."""
    return (TOMBSTONES_SUFFIX, QUARANTINE_SUFFIX, *((HISTORY_SUFFIX,) if cfg.history is not None else ()))


@dataclass
class _Outcome:
    """What an action function returns (the runner adds status, timing and attempts)."""

    summary: str
    figures: dict[str, int] = field(default_factory=dict)
    snapshot_ids: tuple[int, ...] = ()
    branches: tuple[str, ...] = ()
    skipped: bool = False


def _on_main_only(table: Table) -> _Outcome:
    """The outcome of a procedure that works on ``main`` only (Iceberg 1.11's
    ``rewrite_position_delete_files``, ``rewrite_manifests``) on a table whose runs commit to
    another branch: skipped, since the next publish of its group moves ``main`` past its commit."""
    return _Outcome(f"on main only; the table's runs commit to branch {write_ref(table)} (a table group)", skipped=True)


def _on_snapshot(action: Callable[[_Maintenance, str, Table], _Outcome]) -> Callable[[_Maintenance, str], _Outcome]:
    """An action on the current snapshot of ``ident``: ``skipped`` ("no snapshot") when the table
    does not exist or has none; else ``action`` with the table freshly loaded (each attempt)."""

    @functools.wraps(action)
    def run(self: _Maintenance, ident: str) -> _Outcome:
        table = self._table(ident)
        if table is None:
            return _Outcome("no snapshot", skipped=True)
        return action(self, ident, table)

    return run


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
        """The quoted Spark SQL name of the table ``<namespace>.<table>`` in the catalog."""
        return quote_identifier(self.settings.catalog_name, *ident.split("."))

    def _sql(self, statement: str) -> list[dict[str, Any]]:
        """Run ``statement`` and return its rows as dicts (works over Spark Connect)."""
        log.debug("maintenance SQL: %s", statement)
        return [row.asDict() for row in self.spark.sql(statement).collect()]

    def _call(self, procedure: str, ident: str, args: Mapping[str, str]) -> list[dict[str, Any]]:
        """``CALL <catalog>.system.<procedure>(table => '<ident>', <name> => <SQL expression>...)``."""
        named = "".join(f", {k} => {v}" for k, v in args.items())
        return self._sql(
            f"CALL {quote_identifier(self.settings.catalog_name)}.system.{procedure}(table => '{ident}'{named})"
        )

    def _count(self, rows: str) -> int:
        """``SELECT count(*) FROM <rows>``: ``rows`` is a table name, with a ``WHERE`` clause if any."""
        return int(self._sql(f"SELECT count(*) AS n FROM {rows}")[0]["n"])

    def _rewrite(
        self,
        procedure: str,
        ident: str,
        options: Mapping[str, str],
        files: str,
        what: str,
        *,
        failed: bool = False,
        branch: str = MAIN_BRANCH,
    ) -> _Outcome:
        """Run the rewrite ``procedure`` with ``options`` (on ``branch``: ``rewrite_data_files``
        only). Its outcome says ``rewrote <n> <what> into <m>`` from the procedure's figures
        ``rewritten_<files>_count`` and ``added_<files>_count``, and with ``failed``, ``, <k> failed``
        from ``failed_<files>_count``."""
        args = self._options(options) | ({"branch": f"'{branch}'"} if branch != MAIN_BRANCH else {})
        figures = self._figures(self._call(procedure, ident, args))
        summary = (
            f"rewrote {figures.get(f'rewritten_{files}_count', 0)} {what} into {figures.get(f'added_{files}_count', 0)}"
        )
        if failed:
            summary += f", {figures.get(f'failed_{files}_count', 0)} failed"
        return _Outcome(summary, figures)

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
        return table if table is not None and head_snapshot(table) is not None else None

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
        """The run branches of the table, and of its history (a killed try's history writes, on
        their branch: :func:`cdclake.spark.commit.side_branch`), named ``<table>:<branch>`` for the
        history's."""
        age_ms = run_branch_max_age_ms(self.cfg.task_timeout_minutes)
        age = f"created more than {age_ms / _HOUR_MS:g} h ago"
        history = side_table(ident, HISTORY_SUFFIX) if self.cfg.history is not None else None
        if self.dry_run:
            # not _table(): a killed first run leaves a branch on a table whose main has no snapshot
            table = load_table_or_none(self.catalog, ident)
            if table is None:
                return _Outcome("no table", skipped=True)
            stale = stale_run_branches(table, max_age_ms=age_ms, now_ms=self.now_ms)
            history_table = None if history is None else load_table_or_none(self.catalog, history)
            if history_table is not None:
                found = stale_run_branches(history_table, max_age_ms=age_ms, now_ms=self.now_ms)
                stale = [*stale, *(f"{history}:{b}" for b in found)]
            return _Outcome(
                f"would remove {len(stale)} run branch(es) {age}", {"stale_branches": len(stale)}, branches=tuple(stale)
            )
        removed = remove_stale_run_branches(self.catalog, ident, older_than_ms=age_ms, now_ms=self.now_ms)
        if history is not None and load_table_or_none(self.catalog, history) is not None:
            found = remove_stale_run_branches(self.catalog, history, older_than_ms=age_ms, now_ms=self.now_ms)
            removed = [*removed, *(f"{history}:{b}" for b in found)]
        return _Outcome(
            f"removed {len(removed)} run branch(es) {age}", {"removed_branches": len(removed)}, branches=tuple(removed)
        )

    def _expire_tombstones(self, ident: str) -> _Outcome:
        tombstones = side_table(ident, TOMBSTONES_SUFFIX)
        hours = self.cfg.tombstone_retention_hours
        if self._table(tombstones) is None:
            return _Outcome("no tombstones", skipped=True)
        if self.dry_run:
            # the rule of cdclake.io.maintenance.expire_tombstones, counted without deleting
            cutoff_us = (self.now_ms - hours * _HOUR_MS) * 1000
            n = self._count(f"{self._spark_name(tombstones)} WHERE _cdc_recorded_at < timestamp_micros({cutoff_us})")
            return _Outcome(f"would delete {n} tombstone(s) older than {hours} h", {"expired_tombstones": n})
        n = expire_tombstones(self.catalog, ident, hours, now_ms=self.now_ms)
        return _Outcome(f"deleted {n} tombstone(s) older than {hours} h", {"expired_tombstones": n})

    def _expire_changes(self, ident: str) -> _Outcome:
        feed = self.cfg.change_feed
        if feed is None:  # no catalog call for a table without a change feed
            return _Outcome("no change feed", skipped=True)
        changes = side_table(ident, CHANGES_SUFFIX)
        if self._table(changes) is None:
            return _Outcome("no change rows yet", skipped=True)
        days = feed.retention_days
        if self.dry_run:
            # the rule of cdclake.io.changes.expire_changes, counted without deleting
            cutoff_ms = retention_cutoff_ms(self.now_ms, days)
            n = self._count(f"{self._spark_name(changes)} WHERE {PARTITION_SOURCE} < timestamp_millis({cutoff_ms})")
            return _Outcome(f"would delete {n} change row(s) older than {days} day(s)", {"expired_changes": n})
        n = expire_changes(self.catalog, ident, days, now_ms=self.now_ms)
        return _Outcome(f"deleted {n} change row(s) older than {days} day(s)", {"expired_changes": n})

    @_on_snapshot
    def _rewrite_position_delete_files(self, ident: str, table: Table) -> _Outcome:
        if write_ref(table) != MAIN_BRANCH:
            return _on_main_only(table)
        if self.dry_run:
            rows = self._sql(
                "SELECT count_if(content = 1) AS position_delete_files, count_if(content = 2) AS equality_delete_files "
                f"FROM {self._spark_name(ident)}.delete_files"
            )
            figures = {k: int(v) for k, v in rows[0].items()}
            return _Outcome(f"would compact up to {figures['position_delete_files']} position delete file(s)", figures)
        options = {"min-input-files": str(MIN_INPUT_FILES), **self._size_options()}
        return self._rewrite("rewrite_position_delete_files", ident, options, "delete_files", "position delete file(s)")

    @_on_snapshot
    def _rewrite_data_files(self, ident: str, table: Table) -> _Outcome:
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
            figures["delete_files"] = self._count(f"{name}.delete_files")
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
        ref = write_ref(table)  # a group table's runs commit to its stage branch: compacted there
        return self._rewrite(
            "rewrite_data_files", ident, options, "data_files", "data file(s)", failed=True, branch=ref
        )

    @_on_snapshot
    def _rewrite_manifests(self, ident: str, table: Table) -> _Outcome:
        if write_ref(table) != MAIN_BRANCH:
            return _on_main_only(table)
        if self.dry_run:
            n = self._count(f"{self._spark_name(ident)}.manifests")
            return _Outcome(f"would rewrite up to {n} manifest(s)", {"manifests": n})
        return self._rewrite("rewrite_manifests", ident, {}, "manifests", "manifest(s)")

    @_on_snapshot
    def _expire_snapshots(self, ident: str, table: Table) -> _Outcome:
        from pyiceberg.table.refs import SnapshotRefType

        window_cut = self.now_ms - self.policy.snapshot_retention_hours * _HOUR_MS
        kept = None
        if ident == self.cfg.identifier:
            older_than, kept = expiry_cutoff_ms(list(ancestry(table)), self.cfg.topic, window_cut)
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

    @_on_snapshot
    def _remove_orphan_files(self, ident: str, table: Table) -> _Outcome:
        # A local warehouse is listed through Hadoop's FileSystem. An object store (s3://) has no
        # Hadoop FileSystem here (the catalog's S3FileIO is the only client): list it with the
        # FileIO's prefix listing, under "<location>/". The slash matters: a side table's location
        # (<table>__cdc_tombstones) starts with the table's location as a string, so a prefix
        # listing without it would count the side table's files as orphans.
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
    named = [line for line in lines if any(m in line for m in RACE_EXCEPTIONS)]
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
