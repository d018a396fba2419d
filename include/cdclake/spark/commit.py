"""The commit of one run (Spark + pyiceberg): a merge into a branch created at the run's base
snapshot, the snapshot summary properties of :class:`~cdclake.model.layout.SummaryKeys` set on
the Spark session for that commit, then ``main`` fast-forwarded to the branch. The fast-forward is
Iceberg's optimistic check: it fails if ``main`` moved since the run read it (another run
committed), so two runs never both commit from the same start.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from cdclake.errors import ConcurrentRunError
from cdclake.model.layout import RUN_BRANCH_PREFIX
from cdclake.model.position import DEMOTED, BinlogPosition
from cdclake.spark.context import ApplyContext
from cdclake.spark.merge import SOURCE, merge_into, source_column
from cdclake.spark.names import quote_identifier
from cdclake.spark.positions import position_column, position_literal

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

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
marker file resumes the job. See ``docs/operations.md``, "Debugging"."""

PAUSE_POINTS = ("before_fast_forward", "after_commit")


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
    replaced or deleted only by an event at a strictly greater position; a truncate in the batch
    deletes every row below it, and a full snapshot completed by the batch every row below its
    position that the batch does not rewrite (:mod:`cdclake.model.convergence`)."""
    ordering = ctx.cfg.ordering
    newer = position_column(ordering, SOURCE) > position_column(ordering, target)
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


def demote_rows(ctx: ApplyContext, target: str) -> None:
    """Move every row of ``target`` below all positions of any binlog history (file sequence -1;
    GTID sequence :data:`~cdclake.model.position.DEMOTED`, below events without a GTID), keeping
    its values: the rows of an abandoned binlog history, which events of the new history replace
    and the new history's next complete full snapshot deletes (``accept_source_change``)."""
    file_seq, gtid_seq = quote_identifier("_cdc_binlog_file_seq"), quote_identifier("_cdc_gtid_seq")
    ctx.spark.sql(f"UPDATE {target} SET {file_seq} = -1, {gtid_seq} = {DEMOTED}")


@contextmanager
def _refused_as_concurrent(marker: str, message: str) -> Iterator[None]:
    """Turn Iceberg's refusal of a change because another commit moved the table (its error text
    holds ``marker``) into :class:`~cdclake.errors.ConcurrentRunError` with ``message``; any other
    error passes through."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - Spark wraps Iceberg's error in several types
        if marker not in str(e):
            raise
        raise ConcurrentRunError(message) from e


def commit(ctx: ApplyContext, properties: dict[str, str], write: Callable[[str], None]) -> int:
    """Run ``write(target)`` as one commit on top of the run's base snapshot (the table's current
    snapshot when the run started) and return its id. ``target`` is the quoted Spark SQL name
    (:func:`~cdclake.spark.names.quote_identifier`) of the run's branch, or of the table itself.

    The write goes to a branch created at the base snapshot; ``main`` is then fast-forwarded to it,
    which Iceberg refuses when ``main`` moved since the base (another run committed). A write that
    changes no row still commits (an empty append), so that its offsets are recorded.

    Raises:
        ConcurrentRunError: ``main`` is no longer at ``base_snapshot_id``, or another commit changed
            the table while the run branch was created.
    """
    spark, cfg = ctx.spark, ctx.cfg
    base_snapshot_id = ctx.state.snapshot_id
    target = ctx.spark_name()
    branch = None
    if base_snapshot_id is None:
        debug_pause("before_fast_forward", "main")  # a table without snapshots is written directly
    else:
        branch = f"{RUN_BRANCH_PREFIX}{uuid.uuid4().hex[:12]}"
        # another commit (a racing run, maintenance) may change the table's metadata between this
        # run's read of it and the branch's creation
        with _refused_as_concurrent(
            "CommitFailedException",
            f"table {cfg.identifier}: another commit changed the table while this run created its "
            f"branch at snapshot {base_snapshot_id}; nothing was committed. The next run plans from "
            "the table's offsets.",
        ):
            spark.sql(f"ALTER TABLE {target} CREATE BRANCH {quote_identifier(branch)} AS OF VERSION {base_snapshot_id}")
    try:
        for key, value in properties.items():
            spark.conf.set(SNAPSHOT_PROPERTY_PREFIX + key, value)
        try:
            write(f"{target}.{quote_identifier(f'branch_{branch}')}" if branch else target)
        finally:
            for key in properties:
                spark.conf.unset(SNAPSHOT_PROPERTY_PREFIX + key)
        table = ctx.table.refresh()
        ref = branch or "main"
        head = table.snapshot_by_name(ref)
        if head is None or head.snapshot_id == base_snapshot_id:
            import pyarrow as pa

            empty = pa.Table.from_pylist([], schema=table.schema().as_arrow())
            table.append(empty, snapshot_properties=properties, branch=ref)
        if branch:
            debug_pause("before_fast_forward", branch)
            procedure = quote_identifier(ctx.settings.catalog_name, "system", "fast_forward")
            with _refused_as_concurrent(
                "not an ancestor",
                f"table {cfg.identifier}: another run committed since this run read snapshot "
                f"{base_snapshot_id}; this run's commit was discarded (nothing changed). The "
                "next run plans from the table's offsets.",
            ):
                spark.sql(f"CALL {procedure}('{cfg.identifier}', 'main', '{branch}')")
        current = table.refresh().current_snapshot()
        if current is None:  # the write and the empty append above both commit a snapshot
            raise RuntimeError(f"table {cfg.identifier} has no snapshot after its commit")
        snapshot_id = current.snapshot_id
    finally:
        if branch:
            spark.sql(f"ALTER TABLE {target} DROP BRANCH IF EXISTS {quote_identifier(branch)}")
    debug_pause("after_commit", snapshot_id)
    return snapshot_id
