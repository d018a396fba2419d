"""A CDC table's refs and commits through pyiceberg: the branch its runs commit to (``main``, or
the stage branch of a table of a group), that branch's head and ancestry, and the state its CDC
commits recorded (:mod:`cdclake.model.layout` defines the refs and the summary keys)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from cdclake.model.layout import STAGE_BRANCH, WRITE_REF_PROPERTY, is_position_tag
from cdclake.model.offsets import Offsets
from cdclake.model.run_state import CommittedState, committed_state_of, run_commit_of

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

log = logging.getLogger(__name__)


MAIN_BRANCH = "main"
"""pyiceberg's ``pyiceberg.table.refs.MAIN_BRANCH``, named here: importing that module loads
``pyiceberg.table``, which this module leaves to the functions that need it (DAG files import it)."""


def write_ref(table: Table) -> str:
    """The branch the table's runs commit to and plan from: :data:`~cdclake.model.layout.STAGE_BRANCH`
    for a table of a group (its :data:`~cdclake.model.layout.WRITE_REF_PROPERTY`), else ``main``."""
    return table.properties.get(WRITE_REF_PROPERTY, MAIN_BRANCH)


def head_snapshot(table: Table) -> Snapshot | None:
    """The head of :func:`write_ref`: the table's state as its runs left it (``main``'s current
    snapshot but for a table of a group, whose ``main`` moves when the group is published);
    ``None`` before the first commit."""
    ref = write_ref(table)
    return table.current_snapshot() if ref == MAIN_BRANCH else table.snapshot_by_name(ref)


def ensure_write_ref(table: Table, group: str | None) -> Table:
    """Make the table's :func:`write_ref` fit its group: a table that joins a group starts
    :data:`~cdclake.model.layout.STAGE_BRANCH` at ``main``'s current snapshot (a branch left by an
    earlier membership is dropped first) and records it; a table that leaves one moves ``main`` to
    the branch's head and drops it, with the position tags of a group published by pointer
    (:func:`~cdclake.model.layout.position_tag`), in one commit. Returns the table as it is then.

    Raises:
        CommitFailedException: another commit changed the table's refs twice meanwhile (pyiceberg's).
    """
    from pyiceberg.exceptions import CommitFailedException

    want = STAGE_BRANCH if group is not None else None
    for attempt in (1, 2):
        if table.properties.get(WRITE_REF_PROPERTY) == want:
            return table
        try:
            _move_write_ref(table, want, group)
            return table.refresh()
        except CommitFailedException:
            if attempt == 2:
                raise
            table = table.refresh()  # another run of the table did it meanwhile
    raise AssertionError("unreachable")


def _move_write_ref(table: Table, want: str | None, group: str | None) -> None:
    from pyiceberg.table.update.snapshot import ManageSnapshots

    if want is not None:
        if STAGE_BRANCH in table.refs():
            table.manage_snapshots().remove_branch(STAGE_BRANCH).commit()
        main = table.current_snapshot()
        with table.transaction() as tx:
            if main is not None:
                ManageSnapshots(transaction=tx).create_branch(main.snapshot_id, STAGE_BRANCH).commit()
            tx.set_properties({WRITE_REF_PROPERTY: want})
        log.info(
            "table %s joined group %s: its runs commit to branch %s (from snapshot %s); main moves when the "
            "group is published",
            table.name(),
            group,
            STAGE_BRANCH,
            main.snapshot_id if main is not None else None,
        )
        return
    stage = table.snapshot_by_name(STAGE_BRANCH)
    with table.transaction() as tx:
        manage = ManageSnapshots(transaction=tx)
        if stage is not None:
            manage = manage.set_current_snapshot(snapshot_id=stage.snapshot_id).remove_branch(STAGE_BRANCH)
        for ref in [r for r in table.refs() if is_position_tag(r)]:  # a group published by pointer
            manage = manage.remove_tag(ref)
        manage.commit()
        tx.remove_properties(WRITE_REF_PROPERTY)
    log.info(
        "table %s left its group: main moved to the head of branch %s (snapshot %s); its runs commit to main",
        table.name(),
        STAGE_BRANCH,
        stage.snapshot_id if stage is not None else None,
    )


def ancestry(table: Table) -> Iterator[tuple[int, int, Mapping[str, str] | None]]:
    """``(snapshot id, timestamp ms, summary properties or None)`` of the :func:`head_snapshot`
    and its ancestors, newest first (nothing when the table has no snapshot)."""
    # by id: pyiceberg's ancestors_of looks each parent up in the list of snapshots, quadratic in
    # a long history, and a run's retry walks the whole of it (run_commit)
    by_id = {s.snapshot_id: s for s in table.snapshots()}
    snap = head_snapshot(table)
    while snap is not None:
        yield snap.snapshot_id, snap.timestamp_ms, None if snap.summary is None else snap.summary.additional_properties
        snap = by_id.get(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None


def committed_state(table: Table, topic: str) -> CommittedState:
    """The state recorded by the newest CDC commit of ``topic`` in the :func:`head_snapshot`'s
    ancestry (maintenance snapshots, which carry no offsets, are walked past)."""
    current = head_snapshot(table)
    if current is None:
        return CommittedState(None)
    return committed_state_of(current.snapshot_id, (summary for _, _, summary in ancestry(table)), topic)


def run_commit(table: Table, topic: str, run_id: str) -> tuple[int, Mapping[str, str]] | None:
    """``(snapshot id, summary properties)`` of the newest CDC commit of ``topic`` by run
    ``run_id`` in the :func:`head_snapshot`'s ancestry (:func:`~cdclake.model.run_state.run_commit_of`),
    or ``None``: how a retry of a run finds the commit it made (a commit discarded on a run branch is
    not in the ancestry; an expired snapshot is not found)."""
    return run_commit_of(ancestry(table), topic, run_id)


def committed_offsets(table: Table | None, topic: str) -> Offsets | None:
    """End offsets of the newest CDC commit of ``topic`` (``None``: the table does not exist or
    never committed)."""
    return None if table is None else committed_state(table, topic).offsets
