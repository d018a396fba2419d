"""Table upkeep with pyiceberg (no Spark): delete-tombstone expiry, quarantine release and the
removal of run branches left by killed apply jobs."""

from __future__ import annotations

import logging
import time
from functools import reduce
from typing import TYPE_CHECKING

from cdclake.io.catalog import load_table_or_none
from cdclake.io.positions import expressions
from cdclake.io.refs import head_snapshot
from cdclake.model.layout import QUARANTINE_SUFFIX, RUN_BRANCH_PREFIX, TOMBSTONES_SUFFIX, side_table
from cdclake.model.maintenance import RunBranch, stale_run_branch

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


def expire_tombstones(catalog: Catalog, identifier: str, retention_hours: int, *, now_ms: int | None = None) -> int:
    """Delete the tombstones of ``identifier`` recorded more than ``retention_hours`` ago.

    Runs with pyiceberg (no Spark). Tombstones must outlive the topic's retention: an event older
    than its key's tombstone can only come back from Kafka while Kafka still holds it.

    Returns:
        The number of tombstones removed.
    """
    e = expressions()
    table = load_table_or_none(catalog, side_table(identifier, TOMBSTONES_SUFFIX))
    if table is None:
        return 0
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff_us = (now_ms - retention_hours * 3600 * 1000) * 1000
    expired = e.LessThan("_cdc_recorded_at", cutoff_us)
    n = table.scan(row_filter=expired, selected_fields=("_cdc_recorded_at",)).to_arrow().num_rows
    if n:
        table.delete(delete_filter=expired, snapshot_properties={"cdc.maintenance": "expire-tombstones"})
    return n


def release_quarantined(catalog: Catalog, identifier: str, partition: int, offset: int) -> int:
    """Release the quarantined record at ``partition``/``offset`` of ``identifier``'s topic, and
    the records held back behind it: their status becomes ``released``.

    A released bad record no longer holds its key back. Its held-back records are applied by the
    next manual replay that starts at or before ``offset`` (the bad record itself is skipped), and
    before the records held back behind it in other partitions (the key's bytes moved it there).

    Returns:
        The number of quarantine entries released.

    Raises:
        LookupError: no open quarantine entry at that partition and offset.
    """
    import pyarrow as pa

    e = expressions()
    table = load_table_or_none(catalog, side_table(identifier, QUARANTINE_SUFFIX))
    if table is None:
        raise LookupError(f"table {identifier} has no quarantine table")
    this = e.And(e.EqualTo("partition", partition), e.EqualTo("offset", offset))
    behind = e.EqualTo("held_back_behind", offset)
    if "held_back_partition" in {f.name for f in table.schema().fields}:
        # an entry from before the column was added has none: it is held back in its own partition
        of_partition = e.Or(
            e.EqualTo("held_back_partition", partition),
            e.And(e.IsNull("held_back_partition"), e.EqualTo("partition", partition)),
        )
        behind = e.And(behind, of_partition)
    else:
        behind = e.And(behind, e.EqualTo("partition", partition))
    match = e.And(e.EqualTo("status", "open"), e.Or(this, behind))
    rows = table.scan(row_filter=match).to_arrow()
    if not any(
        (r["partition"], r["offset"]) == (partition, offset) and r["held_back_behind"] is None for r in rows.to_pylist()
    ):
        raise LookupError(f"no open quarantine entry of {identifier} at partition {partition} offset {offset}")
    status = rows.schema.get_field_index("status")
    released = rows.set_column(
        status, rows.schema.field(status), pa.array(["released"] * rows.num_rows, rows.schema.field(status).type)
    )
    # the rewrite filter names the entries by their (non-null) coordinates
    by_partition: dict[int, set[int]] = {}
    for p, o in zip(rows["partition"].to_pylist(), rows["offset"].to_pylist(), strict=True):
        by_partition.setdefault(p, set()).add(o)
    coordinates = reduce(
        e.Or, [e.And(e.EqualTo("partition", p), e.In("offset", offsets)) for p, offsets in by_partition.items()]
    )
    table.overwrite(
        released, overwrite_filter=coordinates, snapshot_properties={"cdc.maintenance": "release-quarantined"}
    )
    return rows.num_rows


def stale_run_branches(table: Table, *, max_age_ms: int, now_ms: int) -> list[str]:
    """The run branches of ``table`` that :func:`~cdclake.model.maintenance.stale_run_branch`
    judges stale (left by killed applies), sorted.

    Args:
        table: the CDC table.
        max_age_ms: :func:`~cdclake.model.maintenance.run_branch_max_age_ms` of the table.
        now_ms: the time of the maintenance run, epoch ms.
    """
    from pyiceberg.table.snapshots import ancestors_of

    main = head_snapshot(table)  # the head of the branch the runs fast-forward
    stale = []
    for name, ref in table.refs().items():
        if not name.startswith(RUN_BRANCH_PREFIX):
            continue
        head = table.snapshot_by_id(ref.snapshot_id)
        lineage = () if head is None else (s.snapshot_id for s in ancestors_of(head, table.metadata))
        branch = RunBranch(
            name=name,
            head_timestamp_ms=None if head is None else head.timestamp_ms,
            main_in_lineage=main is not None and main.snapshot_id in lineage,
        )
        if stale_run_branch(branch, now_ms, max_age_ms):
            stale.append(name)
    return sorted(stale)


def remove_stale_run_branches(
    catalog: Catalog, identifier: str, *, older_than_ms: int, now_ms: int | None = None
) -> list[str]:
    """Remove the run branches left by killed applies: those :func:`stale_run_branches` finds with
    ``older_than_ms`` as the age (never a branch created less than ``older_than_ms`` ago).

    A job killed between its branch write and the fast-forward leaves its branch behind; nothing
    reads it, and the retry commits on a branch of its own.

    Returns:
        The names of the branches removed, sorted.
    """
    table = load_table_or_none(catalog, identifier)
    if table is None:
        return []
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    stale = stale_run_branches(table, max_age_ms=older_than_ms, now_ms=now_ms)
    if stale:
        manage = table.manage_snapshots()
        for name in stale:
            manage = manage.remove_branch(name)
        manage.commit()
    return stale
