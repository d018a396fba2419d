"""The commit of one run (Spark + pyiceberg): a merge into a branch created at the run's base
snapshot, the snapshot summary properties of :class:`~cdclake.model.layout.SummaryKeys` set on
the Spark session for that commit, then the table's write ref (``main``, or for a table of a group
its stage branch: :func:`~cdclake.io.refs.write_ref`) fast-forwarded to the branch. The
fast-forward is Iceberg's optimistic check: it fails if the ref moved since the run read it
(another run committed), so two runs never both commit from the same start.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdclake.errors import ConcurrentRunError, lost_commit_race
from cdclake.io.refs import head_snapshot, write_ref
from cdclake.model.layout import run_branch_name
from cdclake.model.position import DEMOTED, BinlogPosition
from cdclake.spark.context import ApplyContext
from cdclake.spark.merge import SOURCE, merge_into, source_column
from cdclake.spark.names import quote_identifier
from cdclake.spark.positions import position_column, position_literal, supersedes_column

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

SNAPSHOT_PROPERTY_PREFIX = "spark.sql.iceberg.snapshot-property."
"""Iceberg (1.11, Spark 4.x modules) copies Spark session settings named
``spark.sql.iceberg.snapshot-property.<key>`` into the summary of the commits of that session."""

PAUSE_ENV = "CDCLAKE_APPLY_PAUSE_AT"
"""Debugging: ``<point>[@<marker file>]`` pauses the apply job at a commit boundary for up to an
hour, so that the run branch can be inspected, another commit made, or the process killed there
(the crash and maintenance tests do these). Points: ``before_fast_forward`` (the run branch holds
the data, ``main`` does not yet) and ``after_commit`` (``main`` holds it). The job logs that it
pauses and writes the marker file, if one is named, with the branch or snapshot id; deleting the
marker file resumes the job. See ``docs/operations.md``, "Debugging". ``history_before_fast_forward``:
the history's statements are on its branch (:func:`side_branch`), its ``main`` does not hold them yet."""

PAUSE_POINTS = ("before_fast_forward", "after_commit", "history_before_fast_forward")


def debug_pause(point: str, detail: object) -> None:
    """Pause at ``point`` when :data:`PAUSE_ENV` names it (see there)."""
    spec = os.environ.get(PAUSE_ENV)
    if not spec:
        return
    name, _, marker = spec.partition("@")
    if name not in PAUSE_POINTS:
        raise ValueError(f"{PAUSE_ENV}={spec!r}: the point must be one of {PAUSE_POINTS}")
    if name != point:
        return
    log.warning(
        "%s=%s: pausing the apply job at %s (%s) for up to an hour%s",
        PAUSE_ENV,
        spec,
        point,
        detail,
        f"; delete {marker} to resume" if marker else "",
    )
    if not marker:
        time.sleep(3600)
        return
    with open(marker, "w") as out:
        out.write(str(detail))
    deadline = time.monotonic() + 3600
    while os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.2)


def merge(
    ctx: ApplyContext,
    target: str,
    source: DataFrame,
    all_cols: list[str],
    truncate: BinlogPosition | None,
    completed_snapshot: BinlogPosition | None = None,
) -> None:
    """The merge of a reduced batch (one row per key) into ``target`` (a name
    :func:`~cdclake.spark.names.quote_identifier` made), with ``DataFrame.mergeInto``: a row is
    replaced or deleted only by an event that supersedes the one that wrote it
    (:func:`~cdclake.model.position.supersedes`: a strictly greater position, or at an equal one a
    later offset in the same Kafka partition); a truncate in the batch
    deletes every row below it, and a full snapshot completed by the batch every row below its
    position that the batch does not rewrite (:mod:`cdclake.model.convergence`)."""
    ordering = ctx.cfg.ordering
    newer = supersedes_column(ordering, SOURCE, target)
    deleting = source_column("_cdc_op") == "d"
    values = {quote_identifier(c): source_column(c) for c in all_cols}
    writer = (
        merge_into(source, target, ctx.cfg.primary_key)
        .whenMatched(deleting & newer)
        .delete()
        .whenMatched(~deleting & newer)
        .update(values)
        .whenNotMatched(~deleting)
        .insert(values)
    )
    below = [p for p in (truncate, completed_snapshot) if p is not None]
    if below:
        writer = writer.whenNotMatchedBySource(
            position_column(ordering, target) < position_literal(max(below))
        ).delete()
    writer.merge()


def demote_rows(ctx: ApplyContext, target: str, where: str | None = None) -> None:
    """Move every row of ``target`` (those matching the Spark SQL condition ``where``, when given)
    below all positions of any binlog history (file sequence -1; GTID sequence
    :data:`~cdclake.model.position.DEMOTED`, below events without a GTID; Kafka offset -1, below
    every offset of its partition under ``ordering: kafka``), keeping its values: the rows of an
    abandoned history, which events of the new history replace and the new history's next complete
    full snapshot deletes (``accept_source_change``); the history's versions the same way."""
    file_seq, gtid_seq = quote_identifier("_cdc_binlog_file_seq"), quote_identifier("_cdc_gtid_seq")
    offset = quote_identifier("_cdc_kafka_offset")
    condition = "" if where is None else f" WHERE {where}"
    ctx.spark.sql(f"UPDATE {target} SET {file_seq} = -1, {gtid_seq} = {DEMOTED}, {offset} = -1{condition}")


@contextmanager
def _refused_as_concurrent(message: str) -> Iterator[None]:
    """Turn Iceberg's refusal of a commit because another commit moved the table (:func:`~cdclake.errors.lost_commit_race`)
    into :class:`~cdclake.errors.ConcurrentRunError` with ``message``; any other error passes through."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - Spark wraps Iceberg's error in several types
        if not lost_commit_race(e):
            raise
        raise ConcurrentRunError(message) from e


def commit(ctx: ApplyContext, properties: dict[str, str], write: Callable[[str], None]) -> int:
    """Run ``write(target)`` as one commit on top of the run's base snapshot (the table's current
    snapshot when the run started) and return its id. ``target`` is the quoted Spark SQL name
    (:func:`~cdclake.spark.names.quote_identifier`) of the run's branch.

    The write goes to a branch created at the base snapshot; the table's write ref (``main``, or
    a group table's stage branch: :func:`~cdclake.io.refs.write_ref`) is then fast-forwarded to
    it, which Iceberg refuses when the ref moved since the base (another run committed). A write
    that changes no row still commits (an empty append), so that its offsets are recorded. A table
    without snapshots has no base: the branch starts with an empty snapshot of its own
    (:func:`_start_branch`) and the fast-forward creates the ref, which Iceberg refuses when another
    run created it meanwhile (its snapshots are no ancestors of this branch). Each catalog commit of
    the run (branch, write, fast-forward) that loses a race with another commit is a
    :class:`~cdclake.errors.ConcurrentRunError`, and the ref is unchanged.

    Raises:
        ConcurrentRunError: another commit moved the table since the run's base snapshot (another
            run committed, a first commit too), or changed it while this run committed (Iceberg's
            retries ran out).
    """
    spark, cfg = ctx.spark, ctx.cfg
    target = ctx.spark_name()
    base_snapshot_id = ctx.state.snapshot_id
    branch = run_branch_name(int(time.time() * 1000), uuid.uuid4().hex[:12])
    lost = (
        f"table {cfg.identifier}: another commit changed the table while this run %s; nothing was "
        "committed. The next run plans from the table's offsets."
    )
    if base_snapshot_id is None:
        at, moved = "on the table without snapshots", "another run made the table's first commit while this run made it"
    else:
        at, moved = (
            f"at snapshot {base_snapshot_id}",
            f"another run committed since this run read snapshot {base_snapshot_id}",
        )
    removed = False
    try:
        with _refused_as_concurrent(lost % f"created its branch {at}"):
            if base_snapshot_id is None:
                start = _start_branch(ctx, branch)
            else:
                start = base_snapshot_id
                spark.sql(f"ALTER TABLE {target} CREATE BRANCH {quote_identifier(branch)} AS OF VERSION {start}")
        with _refused_as_concurrent(lost % f"wrote to its branch {branch}"):
            snapshot_id = _write_branch(ctx, branch, start, properties, write)
        debug_pause("before_fast_forward", branch)
        with _refused_as_concurrent(
            f"table {cfg.identifier}: {moved}; this run's commit was discarded (nothing changed). The "
            "next run plans from the table's offsets."
        ):
            _fast_forward(ctx, branch, base_snapshot_id, snapshot_id)
        removed = True  # by the fast-forward's commit
    finally:
        if not removed:
            _drop_failed_branch(ctx, branch)
    debug_pause("after_commit", snapshot_id)
    return snapshot_id


def _drop_failed_branch(ctx: ApplyContext, branch: str) -> None:
    """Drop the run branch of a commit that failed. A drop that fails too (its server died) is a
    warning: the commit's own error is the one raised, and the maintenance DAG removes run branches
    left behind (:func:`~cdclake.io.maintenance.remove_stale_run_branches`)."""
    try:
        ctx.spark.sql(f"ALTER TABLE {ctx.spark_name()} DROP BRANCH IF EXISTS {quote_identifier(branch)}")
    except Exception as e:  # noqa: BLE001 - clean-up: the commit's error stands
        log.warning(
            "table %s: the failed run's branch %s was not dropped (maintenance removes it): %s",
            ctx.cfg.identifier,
            branch,
            e,
        )


def _fast_forward(ctx: ApplyContext, branch: str, base_snapshot_id: int | None, head_id: int) -> None:
    """Move the table's write ref (:func:`~cdclake.io.refs.write_ref`) from the run's base
    snapshot to ``head_id``, the head of the run's ``branch``: :func:`fast_forward`."""
    fast_forward(ctx.table, write_ref(ctx.table), branch, base_snapshot_id, head_id)


def fast_forward(table: Table, ref: str, branch: str, base_snapshot_id: int | None, head_id: int) -> None:
    """Move ``table``'s ``ref`` from ``base_snapshot_id`` to ``head_id``, the head of the run's
    ``branch``, and remove the branch: one catalog
    commit (pyiceberg), which requires the ref still at the base (absent on a table that had no
    snapshot) and the branch at its head (Iceberg's ``assert-ref-snapshot-id``), so the catalog
    refuses it when another commit moved the ref meanwhile. The ref keeps its retention settings.
    What Spark's ``fast_forward`` procedure and a ``DROP BRANCH`` do in two commits: the branch
    starts at the base, so the ref at the base is an ancestor of the branch.

    Raises:
        pyiceberg.exceptions.CommitFailedException: the ref is no longer at the base (another run
            committed), or another commit moved the ref or the branch during the commit.
    """
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.update.snapshot import ManageSnapshots

    # the table as the write left it (refreshed); the commit checks its requirements on the latest
    current = table.refs().get(ref)
    if (current.snapshot_id if current is not None else None) != base_snapshot_id:
        raise CommitFailedException(
            f"Requirement failed: {ref} is at snapshot {current.snapshot_id if current else None}, not at the "
            f"run's base {base_snapshot_id}"
        )
    with table.transaction() as tx:
        ManageSnapshots(transaction=tx).create_branch(
            head_id,
            ref,
            max_ref_age_ms=current.max_ref_age_ms if current is not None else None,
            max_snapshot_age_ms=current.max_snapshot_age_ms if current is not None else None,
            min_snapshots_to_keep=current.min_snapshots_to_keep if current is not None else None,
        ).remove_branch(branch).commit()


def _start_branch(ctx: ApplyContext, branch: str) -> int:
    """:func:`start_branch` of the run's table."""
    return start_branch(ctx.spark, ctx.table, ctx.spark_name(), branch, lambda t: head_snapshot(t) is not None)


def start_branch(spark: SparkSession, table: Table, name: str, branch: str, has_head: Callable[[Table], bool]) -> int:
    """Create ``branch`` on ``table`` (Spark name ``name``), which had no snapshot when the run
    started; returns its first snapshot. Iceberg starts a branch created on a table without
    snapshots with an empty snapshot of its own, without parent and without CDC summary
    properties; on a table that has a current snapshot by then (another run's first commit), at
    that snapshot.

    Raises:
        ConcurrentRunError: the branch starts at another run's commit (``has_head`` of the
            refreshed table: its write ref has a snapshot now).
    """
    spark.sql(f"ALTER TABLE {name} CREATE BRANCH {quote_identifier(branch)}")
    table = table.refresh()
    start = table.snapshot_by_name(branch)
    if start is None or start.parent_snapshot_id is not None or has_head(table):
        raise ConcurrentRunError(
            f"table {table.name()}: another run made the table's first commit while this run started "
            "its own; nothing was committed. The next run plans from the table's offsets."
        )
    return start.snapshot_id


@dataclass(frozen=True)
class SideBranch:
    """The branch :func:`side_branch` writes to.

    Attributes:
        name: the branch's name.
        target: its quoted Spark SQL name (``<table>.`branch_<name>```), to write and read.
    """

    name: str
    target: str


@contextmanager
def side_branch(
    spark: SparkSession, table: Table, name: str, what: str, *, pause: str | None = None
) -> Iterator[SideBranch]:
    """Write a side table (``table``, Spark name ``name``: a history) as one change: the ``with``
    body writes to the branch yielded, created at the head of ``main``; on leaving
    it, ``main`` is fast-forwarded to the branch (:func:`fast_forward`), which the catalog refuses
    when ``main`` moved since: another try of the run (a task killed while its engine went on)
    wrote the side table meanwhile, and its writes and this try's would add the same rows twice.
    On any failure the branch is dropped and ``main`` is unchanged. ``pause``: the prefix of the
    :data:`PAUSE_ENV` point before the fast-forward (``<pause>_before_fast_forward``).

    Raises:
        ConcurrentRunError: ``main`` moved since the branch was created; nothing was changed.
    """
    main = table.refs().get("main")
    base = main.snapshot_id if main is not None else None
    branch = run_branch_name(int(time.time() * 1000), uuid.uuid4().hex[:12])
    removed = False
    try:
        with _refused_as_concurrent(f"{what}: another commit changed it while this run created its branch"):
            if base is None:
                start_branch(spark, table, name, branch, lambda t: t.refs().get("main") is not None)
            else:
                spark.sql(f"ALTER TABLE {name} CREATE BRANCH {quote_identifier(branch)} AS OF VERSION {base}")
        yield SideBranch(branch, f"{name}.{quote_identifier(f'branch_{branch}')}")
        table = table.refresh()
        head = table.snapshot_by_name(branch)
        if head is None:  # created with the branch
            raise RuntimeError(f"{what}: branch {branch} has no snapshot after its write")
        if head.snapshot_id != base:
            debug_pause(f"{pause}_before_fast_forward" if pause else "", branch)
            with _refused_as_concurrent(
                f"{what}: another try of this run wrote it since this try read it at snapshot {base}; this try's "
                "writes were discarded (nothing changed). The next try finds the other's."
            ):
                fast_forward(table, "main", branch, base, head.snapshot_id)
            removed = True  # by the fast-forward's commit
    finally:
        if not removed:
            spark.sql(f"ALTER TABLE {name} DROP BRANCH IF EXISTS {quote_identifier(branch)}")


def empty_commit(spark: SparkSession, target: str) -> None:
    """Commit an empty append to ``target`` (a quoted Spark SQL name, ``<table>.`branch_<name>``` for
    a branch) through Spark: a snapshot without files whose summary holds the session's snapshot
    properties (:data:`SNAPSHOT_PROPERTY_PREFIX`). For v3 tables, to which pyiceberg 0.12 writes no
    manifests (:mod:`cdclake.model.format_version`); Iceberg's Spark append commits a snapshot for
    no rows too."""
    spark.table(target).limit(0).writeTo(target).append()


def _write_branch(
    ctx: ApplyContext, branch: str, base_snapshot_id: int, properties: dict[str, str], write: Callable[[str], None]
) -> int:
    """``write`` to ``branch`` with ``properties`` in its snapshot summaries (an empty append
    carrying them when the write committed nothing: Spark's on a v3 table, :func:`empty_commit`,
    else pyiceberg's); returns the branch's head."""
    spark = ctx.spark
    target = f"{ctx.spark_name()}.{quote_identifier(f'branch_{branch}')}"
    for key, value in properties.items():
        spark.conf.set(SNAPSHOT_PROPERTY_PREFIX + key, value)
    try:
        write(target)
        table = ctx.table.refresh()
        head = table.snapshot_by_name(branch)
        if (head is None or head.snapshot_id == base_snapshot_id) and table.format_version >= 3:
            empty_commit(spark, target)
            head = table.refresh().snapshot_by_name(branch)
    finally:
        for key in properties:
            spark.conf.unset(SNAPSHOT_PROPERTY_PREFIX + key)
    if head is None or head.snapshot_id == base_snapshot_id:
        import pyarrow as pa

        empty = pa.Table.from_pylist([], schema=table.schema().as_arrow())
        table.append(empty, snapshot_properties=properties, branch=branch)
        head = table.snapshot_by_name(branch)
    if head is None:  # the append above commits a snapshot to the branch
        raise RuntimeError(f"table {ctx.cfg.identifier}: branch {branch} has no snapshot after its write")
    return head.snapshot_id
