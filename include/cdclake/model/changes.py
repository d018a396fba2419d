"""The change feed of a table (``change_feed`` in the table config; pure: no pyiceberg, no Spark).

``<namespace>.<table>__changes`` is an append-only Iceberg table with one row per change a run
applied, after the run's reduction and guard rules: the rows the run's ``MERGE`` changed (one per
key per run: ``c``/``u``/``r`` with the row's after image, ``d`` with its key and NULL elsewhere)
and, when the run applied a truncate, one ``t`` row (NULL key and image) at the truncate's
position, which deletes every row below that position. A run that completes a full snapshot also
deletes the rows below the snapshot's position that it did not read (they no longer existed then:
:mod:`cdclake.model.convergence`): each is a ``d`` row marked ``_cdc_change = 'repair'`` (the key,
NULL elsewhere; ``_cdc_source_ts`` the newest read of the snapshot in the run, the other position
columns NULL: no event made it), so that the feed, replayed, rebuilds the table; every other row is
``event`` (the history's column and values, :data:`~cdclake.model.history.CHANGE_COLUMN`). The columns are the table's source
columns, the table's own metadata columns (:data:`~cdclake.model.layout.METADATA_COLUMNS`: the
same position columns as the table's rows), then :data:`FEED_COLUMNS`. It is partitioned by day
of ``_cdc_source_ts`` (``source.ts_ms``), for time-range reads and whole-partition retention.

**Exactly once.** A run writes its change rows in a commit of their own just before the table's
commit, as an overwrite of the rows whose ``_cdc_base_snapshot_id`` is the table's current
snapshot (:mod:`cdclake.spark.changes`): rows an earlier try of the run left (it failed before the
table's commit) have that base and are replaced; rows of committed runs have older bases. The
table's commit records the changes snapshot (:attr:`~cdclake.model.layout.SummaryKeys.CHANGES_SNAPSHOT`)
and the row count (:attr:`~cdclake.model.layout.SummaryKeys.CHANGES_ROWS`).

**Reading.** The change rows of the run that made a table commit are those whose
``_cdc_run_id`` is the commit's ``cdc.run-id`` and whose ``_cdc_base_snapshot_id`` is the run's
previous snapshot (:func:`committed_runs`; NULL for the table's first commit). Rows of a try that
never committed (its retry started from another snapshot, after a maintenance commit) match no
commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from cdclake.errors import ChangeFeedGapError
from cdclake.model.history import CHANGE_COLUMN
from cdclake.model.layout import SIDE_TABLE_PROPERTIES, SummaryKeys

CHANGES_SUFFIX = "__changes"
"""Suffix of a table's change feed (:func:`~cdclake.model.layout.side_table`)."""

TRANSACTION_COLUMN, RUN_ID_COLUMN, BASE_SNAPSHOT_COLUMN = "_cdc_transaction_id", "_cdc_run_id", "_cdc_base_snapshot_id"
"""The change feed's own columns (``_cdc_`` names are never source columns)."""

FEED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    (TRANSACTION_COLUMN, "string", "Debezium transaction id (transaction.id); null without transaction metadata"),
    (RUN_ID_COLUMN, "string", "the run that applied the change: cdc.run-id of the table's commit"),
    (
        BASE_SNAPSHOT_COLUMN,
        "long",
        "the table's snapshot the run's commit started from (its previous snapshot); null for its first commit",
    ),
    (
        CHANGE_COLUMN,
        "string",
        "event: a source event's change; repair: a delete by the run's complete full snapshot, which did not "
        "read the key; null in rows written before the column",
    ),
)
"""``(name, Iceberg type, doc)`` of the change feed's columns after the metadata columns."""

OP_DOC = "Debezium op of the change: c, u, r (after image), d (key only) or t (truncate: no key)"
"""The doc of ``_cdc_op`` in the change feed (the table's own rows are never ``d`` or ``t``)."""

PARTITION_SOURCE = "_cdc_source_ts"
"""The column whose day partitions the change feed (``day`` transform)."""

CHANGES_TABLE_PROPERTIES: Mapping[str, str] = MappingProxyType(
    {
        **SIDE_TABLE_PROPERTIES,
        # the overwrite that replaces an earlier try's rows selects whole files by this column's
        # bounds: kept whatever the table's width (Iceberg infers metrics for the first 100 columns)
        f"write.metadata.metrics.column.{BASE_SNAPSHOT_COLUMN}": "full",
    }
)
"""Properties of a change feed table."""

_DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class RunCommit:
    """The snapshots of the table that one run's commit made: what a reader of the change feed
    needs to take the run's change rows (:func:`committed_runs`).

    Attributes:
        run_id: the run (:attr:`~cdclake.model.layout.SummaryKeys.RUN_ID`).
        previous_snapshot_id: the snapshot the run's commit started from, the ``_cdc_base_snapshot_id``
            of its change rows; ``None`` for the table's first commit, or when the snapshot before
            it was expired.
        snapshot_id: the run's newest snapshot (the one ``main`` was fast-forwarded to).
        changes_rows: the change rows the run wrote
            (:attr:`~cdclake.model.layout.SummaryKeys.CHANGES_ROWS`); ``None``: the table had no
            change feed then.
    """

    run_id: str
    previous_snapshot_id: int | None
    snapshot_id: int
    changes_rows: int | None


def committed_runs(
    ancestry: Iterable[tuple[int, Mapping[str, str] | None]], topic: str, *, after: int | None = None
) -> list[RunCommit]:
    """The runs whose commits are in the table's history after snapshot ``after``, oldest first.

    A run's commit is one snapshot, or several (a run that accepts a new binlog history demotes
    the rows first; a run that fills a column's default updates rows after its merge), each
    carrying the run id; the commit starts from the snapshot before the first of them. The table's
    first commit starts from the empty snapshot Iceberg gives a branch created on a table without
    snapshots (no parent, no CDC summary): no previous snapshot.

    Args:
        ancestry: ``(snapshot id, summary properties)`` of the table's current snapshot and its
            ancestors, newest first (:func:`cdclake.io.refs.ancestry`).
        topic: the table's topic (:attr:`~cdclake.model.layout.SummaryKeys.TOPIC`).
        after: the last snapshot a reader processed (its runs and those before are left out);
            ``None``: the whole ancestry.

    Returns:
        One :class:`RunCommit` per run, oldest first.

    Raises:
        ChangeFeedGapError: ``after`` is not in the ancestry (expired, or the table was rolled back
            or re-created): reading the whole ancestry again would repeat the changes the reader
            processed, and the runs between ``after`` and the oldest snapshot kept are not known.
    """
    newer: list[tuple[int, Mapping[str, str] | None]] = []
    for snapshot_id, summary in ancestry:
        if snapshot_id == after:
            break
        newer.append((snapshot_id, summary))
    else:
        if after is not None:
            raise ChangeFeedGapError(
                f"topic {topic!r}: snapshot {after}, the last one the reader processed, is not in the table's "
                "history (expired by cdc_maintenance's expire_snapshots, or the table was rolled back or "
                "re-created): the runs committed since cannot be told apart. Keep the table's "
                "snapshot_retention_hours above the reader's longest pause; to start the reader over, reset "
                "its progress (it then reads the history kept)"
            )
    runs: list[RunCommit] = []
    previous = after
    for n, (snapshot_id, summary) in enumerate(reversed(newer)):
        props = summary or {}
        run_id = props.get(SummaryKeys.RUN_ID)
        if run_id is not None and props.get(SummaryKeys.TOPIC) == topic and SummaryKeys.END_OFFSETS in props:
            rows = props.get(SummaryKeys.CHANGES_ROWS)
            if runs and runs[-1].run_id == run_id and runs[-1].snapshot_id == previous:
                first = runs.pop().previous_snapshot_id  # a later snapshot of the same run
            else:
                first = previous
            runs.append(RunCommit(run_id, first, snapshot_id, None if rows is None else int(rows)))
        # the oldest snapshot kept, without a CDC summary: the empty start of the first commit
        if n > 0 or after is not None or SummaryKeys.TOPIC in props:
            previous = snapshot_id
    return runs


def retention_cutoff_ms(now_ms: int, retention_days: int) -> int:
    """The source time (epoch ms) below which change rows are deleted: the start of the UTC day
    ``retention_days`` days before ``now_ms``'s, so that whole day partitions go and the rows of
    the last ``retention_days`` full days stay.

    Raises:
        ValueError: ``retention_days`` below 1.
    """
    if retention_days < 1:
        raise ValueError(f"retention_days must be at least 1, not {retention_days!r}")
    return (now_ms // _DAY_MS - retention_days) * _DAY_MS
