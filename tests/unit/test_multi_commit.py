"""Several tables' tags moved in one catalog commit (:mod:`cdclake.io.multi_commit`), on a SQLite
SQL catalog in a temporary folder (pyiceberg only); the same check runs on PostgreSQL and the REST
catalog in ``tests/integration/test_catalogs.py``."""

from __future__ import annotations

import uuid

import pytest

from cdclake.errors import MultiTableCommitError
from cdclake.io.catalog import load_catalog
from cdclake.io.multi_commit import RefMove, RefUpdate, move_refs, stage_sql, swap_sql
from cdclake.settings import Settings

TAG = "cdc_group_g"


def tag_move(identifier: str, expected: int | None, snapshot_id: int, properties=None) -> RefMove:
    """The move of ``identifier``'s tag :data:`TAG` from ``expected`` to ``snapshot_id``."""
    return RefMove(identifier, (RefUpdate(TAG, expected, snapshot_id),), properties or {})


def check_tags_move_on_every_table_or_none(catalog, *, sql: bool) -> None:
    """The tag of two tables moves in one commit with a table property; a concurrent move of one
    table's tag between the read and the commit (a second publisher) fails the commit and neither
    tag moves; with ``sql`` (a SQL catalog), a commit to one table between the staging of the
    metadata files and the pointer swap too."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    namespace = f"grp_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    a, b = f"{namespace}.a", f"{namespace}.b"
    rows = pa.table({"id": pa.array([1], pa.int64())})
    snaps: dict[str, list[int]] = {}
    for identifier in (a, b):
        table = catalog.create_table(identifier, Schema(NestedField(1, "id", LongType(), required=False)))
        for _ in range(3):
            table.append(rows)
        snaps[identifier] = [s.snapshot_id for s in table.snapshots()]

    def tags() -> tuple[int | None, int | None]:
        refs = [catalog.load_table(i).refs().get(TAG) for i in (a, b)]
        return tuple(r.snapshot_id if r is not None else None for r in refs)  # type: ignore[return-value]

    move_refs(catalog, [tag_move(i, None, snaps[i][0], {"cdc.group-position": "0"}) for i in (a, b)])
    assert tags() == (snaps[a][0], snaps[b][0])
    assert {catalog.load_table(i).properties["cdc.group-position"] for i in (a, b)} == {"0"}

    stale = [tag_move(a, snaps[a][0], snaps[a][1]), tag_move(b, snaps[b][0], snaps[b][1])]
    move_refs(catalog, [tag_move(b, snaps[b][0], snaps[b][2])])  # another publisher, in between
    with pytest.raises(MultiTableCommitError):
        move_refs(catalog, stale)
    assert tags() == (snaps[a][0], snaps[b][2])

    moves = [tag_move(a, snaps[a][0], snaps[a][1]), tag_move(b, snaps[b][2], snaps[b][1])]
    if sql:
        staged = stage_sql(catalog, moves)
        catalog.load_table(b).append(rows)  # a run commits to b in between
        with pytest.raises(MultiTableCommitError, match=f"table {b} was committed to since it was read"):
            swap_sql(catalog, staged)
        assert tags() == (snaps[a][0], snaps[b][2])
    move_refs(catalog, moves)
    assert tags() == (snaps[a][1], snaps[b][1])

    # a group's publish: main (a branch) of both tables moves with the tag, back to their first
    # snapshots here, as from a stage branch's lineage
    mains = {i: catalog.load_table(i).current_snapshot().snapshot_id for i in (a, b)}  # type: ignore[union-attr]
    move_refs(
        catalog,
        [
            RefMove(
                i, (RefUpdate(TAG, snaps[i][1], snaps[i][0]), RefUpdate("main", mains[i], snaps[i][0], branch=True))
            )
            for i in (a, b)
        ],
    )
    assert tags() == (snaps[a][0], snaps[b][0])
    assert [catalog.load_table(i).current_snapshot().snapshot_id for i in (a, b)] == [snaps[a][0], snaps[b][0]]  # type: ignore[union-attr]
    with pytest.raises(MultiTableCommitError):  # main is no longer where the caller read it
        move_refs(catalog, [RefMove(a, (RefUpdate("main", mains[a], snaps[a][1], branch=True),))])
    for identifier in (a, b):
        catalog.drop_table(identifier)


def test_a_group_tag_moves_on_every_table_or_on_none_in_a_sqlite_catalog(tmp_path):
    check_tags_move_on_every_table_or_none(
        load_catalog(Settings.from_env({"CDCLAKE_STATE_DIR": str(tmp_path)})), sql=True
    )


def test_a_group_is_published_at_the_greatest_position_its_members_share_and_never_backwards(tmp_path):
    """:func:`cdclake.pipeline.groups.publish_group` over two tables of a SQLite catalog whose
    commits carry the interval a group member's run records."""
    import json

    import pyarrow as pa

    from cdclake.model.config import TableConfig
    from cdclake.model.groups import GroupPosition, SourceInterval
    from cdclake.model.layout import GROUP_POSITION_PROPERTY, SummaryKeys
    from cdclake.pipeline.groups import group_statuses, publish_group

    catalog = load_catalog(Settings.from_env({"CDCLAKE_STATE_DIR": str(tmp_path)}))
    members, tables = _bank(catalog)
    rows = pa.table({"id": pa.array([1], pa.int64())})

    def commit(name: str, start: int | None, end: int = 0) -> int:
        summary = {SummaryKeys.TOPIC: f"db1.bank.{name}", SummaryKeys.END_OFFSETS: json.dumps({"0": 1})}
        if start is not None:
            summary[SummaryKeys.TRANSACTION_INTERVAL] = SourceInterval("db1.transaction", start, end).to_json()
        tables[name].append(rows, snapshot_properties=summary)
        tables[name] = catalog.load_table(tables[name].name())
        return tables[name].current_snapshot().snapshot_id  # type: ignore[union-attr]

    a1 = commit("accounts", 3, 7)
    assert (
        publish_group(catalog, "bank", members, 1000, None).reason
        == "no commit of ledger is at a known source position yet"
    )
    commit("ledger", None)  # a run whose batch was no prefix of the binlog
    b1 = commit("ledger", 5, 9)
    a2 = commit("accounts", 10, 12)
    b2 = commit("ledger", 13, 20)
    done = publish_group(catalog, "bank", members, 1000, None)
    assert (done.position, done.moved, dict(done.snapshots)) == (7, True, {"accounts": a1, "ledger": b1})
    ledger = catalog.load_table("bank.ledger")
    assert ledger.refs()["cdc_group_bank"].snapshot_id == b1
    assert GroupPosition.from_text(ledger.properties[GROUP_POSITION_PROPERTY]) == GroupPosition(
        group="bank", position=7, snapshot_id=b1, published_ms=1000
    )
    assert publish_group(catalog, "bank", members, 2000, None).reason == "no position beyond 7 yet"
    a3 = commit("accounts", 13, 25)
    done = publish_group(catalog, "bank", members, 3000, None)
    assert (done.position, dict(done.snapshots)) == (20, {"accounts": a3, "ledger": b2})
    assert {catalog.load_table(c.identifier).refs()["cdc_group_bank"].snapshot_id for c in members} == {a3, b2}
    assert a2 not in done.snapshots.values()
    (status,) = group_statuses(catalog, members)
    assert status.describe(63_000) == (
        "group bank (accounts, ledger): tag cdc_group_bank at db1.transaction offset 20, published 60 s ago"
    )
    # a member that joined since the last publish: the group is not at one position until the next
    joined = TableConfig(
        name="cards", topic="db1.bank.cards", namespace="bank", table="cards", primary_key=["id"], group="bank"
    )
    (status,) = group_statuses(catalog, [*members, joined])
    assert status.describe(63_000) == "group bank (accounts, ledger, cards): tag cdc_group_bank not published yet"


def test_members_commit_to_the_stage_branch_and_main_moves_only_when_the_group_is_published(tmp_path):
    """A table that joins a group (:func:`cdclake.io.refs.ensure_write_ref`) starts its stage
    branch at ``main``; its commits and its committed state are the branch's, ``main`` stays; the
    publish moves ``main`` of every member with the tag, in one commit; a table that leaves the
    group gets ``main`` at the branch's head and commits to ``main`` again."""
    import json

    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from cdclake.io.refs import committed_offsets, ensure_write_ref, head_snapshot, write_ref
    from cdclake.model.groups import SourceInterval
    from cdclake.model.layout import STAGE_BRANCH, WRITE_REF_PROPERTY, SummaryKeys
    from cdclake.pipeline.groups import publish_group

    catalog = load_catalog(Settings.from_env({"CDCLAKE_STATE_DIR": str(tmp_path)}))
    members, tables = _bank(catalog)
    rows = pa.table({"id": pa.array([1], pa.int64())})
    before = {}
    for c in members:  # a commit from before the group: main has a snapshot
        tables[c.name].append(rows)
        tables[c.name] = ensure_write_ref(tables[c.name], "bank")
        before[c.name] = tables[c.name].current_snapshot().snapshot_id  # type: ignore[union-attr]
        assert write_ref(tables[c.name]) == STAGE_BRANCH
    assert tables["accounts"].snapshot_by_name(STAGE_BRANCH).snapshot_id == before["accounts"]  # type: ignore[union-attr]
    assert ensure_write_ref(tables["accounts"], "bank").metadata_location == tables["accounts"].metadata_location
    fresh = catalog.create_table("bank.cards", Schema(NestedField(1, "id", LongType(), required=False)))
    fresh = ensure_write_ref(fresh, "bank")  # nothing to start at: the first run's commit makes the branch
    assert write_ref(fresh) == STAGE_BRANCH and STAGE_BRANCH not in fresh.refs() and head_snapshot(fresh) is None

    def commit(name: str, start: int, end: int, offset: int) -> int:
        summary = {
            SummaryKeys.TOPIC: f"db1.bank.{name}",
            SummaryKeys.END_OFFSETS: json.dumps({"0": offset}),
            SummaryKeys.TRANSACTION_INTERVAL: SourceInterval("db1.transaction", start, end).to_json(),
        }
        tables[name].append(rows, snapshot_properties=summary, branch=STAGE_BRANCH)
        tables[name] = catalog.load_table(tables[name].name())
        return head_snapshot(tables[name]).snapshot_id  # type: ignore[union-attr]

    a1, b1 = commit("accounts", 3, 9, 1), commit("ledger", 5, 9, 1)
    a2 = commit("accounts", 10, 12, 2)
    for name, main in before.items():  # the runs left main where it was
        assert tables[name].current_snapshot().snapshot_id == main  # type: ignore[union-attr]
    assert committed_offsets(tables["accounts"], "db1.bank.accounts") == {0: 2}  # the branch's

    done = publish_group(catalog, "bank", members, 1000, None)
    assert (done.position, dict(done.snapshots)) == (9, {"accounts": a1, "ledger": b1})
    for c in members:
        table = catalog.load_table(c.identifier)
        assert (
            table.current_snapshot().snapshot_id == done.snapshots[c.name] == table.refs()["cdc_group_bank"].snapshot_id
        )  # type: ignore[union-attr]
        assert head_snapshot(table).snapshot_id == (a2 if c.name == "accounts" else b1)  # type: ignore[union-attr]

    left = ensure_write_ref(catalog.load_table("bank.accounts"), None)
    assert WRITE_REF_PROPERTY not in left.properties and STAGE_BRANCH not in left.refs()
    assert left.current_snapshot().snapshot_id == a2  # type: ignore[union-attr]


def _bank(catalog, namespace: str = "bank"):
    """In ``catalog``, the empty tables ``<namespace>.accounts`` and ``<namespace>.ledger`` (one
    column ``id``) of group ``bank``: ``(members, {name: table})``."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from cdclake.model.config import TableConfig

    catalog.create_namespace(namespace)
    members = [
        TableConfig(name=n, topic=f"db1.bank.{n}", namespace=namespace, table=n, primary_key=["id"], group="bank")
        for n in ("accounts", "ledger")
    ]
    tables = {
        c.name: catalog.create_table(c.identifier, Schema(NestedField(1, "id", LongType(), required=False)))
        for c in members
    }
    return members, tables


def test_a_group_published_by_pointer_tags_every_member_first_and_readers_find_the_smallest_position(tmp_path):
    check_group_published_by_pointer(load_catalog(Settings.from_env({"CDCLAKE_STATE_DIR": str(tmp_path)})))


def check_group_published_by_pointer(catalog) -> None:
    """``CDCLAKE_GROUP_COMMIT=pointer`` (a catalog without a multi-table commit), on ``catalog``
    (a namespace of its own, dropped at the end): the publish tags every member at the position,
    then moves each member's ``main``, group tag and position in a single-table commit; readers
    read every member at the tag of the smallest position the members record, which every member
    has, also while the members are one publish apart; the tags below the previous position are
    removed, and a table that leaves the group drops its position tags."""
    import json

    import pyarrow as pa

    from cdclake.io.multi_commit import RefMove, RefUpdate, commit_refs
    from cdclake.io.refs import ensure_write_ref
    from cdclake.model.groups import SourceInterval
    from cdclake.model.layout import STAGE_BRANCH, SummaryKeys
    from cdclake.pipeline.groups import group_read_refs, group_statuses, publish_group

    namespace = f"bank_{uuid.uuid4().hex[:8]}"
    members, tables = _bank(catalog, namespace)
    accounts, ledger = (c.identifier for c in members)
    rows = pa.table({"id": pa.array([1], pa.int64())})
    for c in members:  # a commit from before the group (pyiceberg appends to a branch of a table with one)
        tables[c.name].append(rows)
        tables[c.name] = ensure_write_ref(tables[c.name], "bank")
    offsets = {"accounts": 0, "ledger": 0}

    def commit(name: str, start: int, end: int) -> int:
        offsets[name] += 1
        summary = {
            SummaryKeys.TOPIC: f"db1.bank.{name}",
            SummaryKeys.END_OFFSETS: json.dumps({"0": offsets[name]}),
            SummaryKeys.TRANSACTION_INTERVAL: SourceInterval("db1.transaction", start, end).to_json(),
        }
        tables[name].append(rows, snapshot_properties=summary, branch=STAGE_BRANCH)
        tables[name] = catalog.load_table(f"{namespace}.{name}")
        return tables[name].snapshot_by_name(STAGE_BRANCH).snapshot_id  # type: ignore[union-attr]

    def position_tags(identifier: str) -> dict[str, int]:
        refs = catalog.load_table(identifier).refs()
        return {r: refs[r].snapshot_id for r in refs if r.startswith("cdc_group_bank-at-")}

    try:
        a1, b1 = commit("accounts", 3, 9), commit("ledger", 5, 9)
        assert group_read_refs(catalog, "bank", members) == {}
        done = publish_group(catalog, "bank", members, 1000, None, "pointer")
        assert (done.position, done.moved) == (9, True)
        for c, snap in zip(members, (a1, b1), strict=True):
            table = catalog.load_table(c.identifier)
            assert position_tags(c.identifier) == {"cdc_group_bank-at-9": snap}
            assert table.current_snapshot().snapshot_id == table.refs()["cdc_group_bank"].snapshot_id == snap  # type: ignore[union-attr]
        assert group_read_refs(catalog, "bank", members) == {
            accounts: "cdc_group_bank-at-9",
            ledger: "cdc_group_bank-at-9",
        }

        a2, b2 = commit("accounts", 10, 20), commit("ledger", 10, 20)
        # the state a publish leaves when it stops after its first member's commit: every member
        # tagged at 20, only accounts moved
        for c, snap in zip(members, (a2, b2), strict=True):
            commit_refs(catalog, RefMove(c.identifier, (RefUpdate("cdc_group_bank-at-20", None, snap),)))
        mark = catalog.load_table(accounts).properties["cdc.group-position"]
        commit_refs(
            catalog,
            RefMove(
                accounts,
                (RefUpdate("cdc_group_bank", a1, a2), RefUpdate("main", a1, a2, branch=True)),
                {"cdc.group-position": mark.replace('"position":9', '"position":20')},
            ),
        )
        (status,) = group_statuses(catalog, members)
        assert (status.position, status.read_ref, status.moving) == (9, "cdc_group_bank-at-9", True)
        assert group_read_refs(catalog, "bank", members) == {
            accounts: "cdc_group_bank-at-9",
            ledger: "cdc_group_bank-at-9",
        }
        # the next publish finds the tags made and moves the rest
        done = publish_group(catalog, "bank", members, 2000, None, "pointer")
        assert (done.position, dict(done.snapshots)) == (20, {"accounts": a2, "ledger": b2})
        (status,) = group_statuses(catalog, members)
        assert (status.position, status.read_ref, status.moving) == (20, "cdc_group_bank-at-20", False)
        assert status.describe(3000).startswith("group bank (accounts, ledger): tag cdc_group_bank-at-20 at")
        assert position_tags(ledger) == {"cdc_group_bank-at-9": b1, "cdc_group_bank-at-20": b2}

        a3, b3 = commit("accounts", 21, 30), commit("ledger", 21, 30)
        assert publish_group(catalog, "bank", members, 4000, None, "pointer").position == 30
        for c, (snap2, snap3) in zip(members, ((a2, a3), (b2, b3)), strict=True):
            assert position_tags(c.identifier) == {"cdc_group_bank-at-20": snap2, "cdc_group_bank-at-30": snap3}
            assert catalog.load_table(c.identifier).current_snapshot().snapshot_id == snap3  # type: ignore[union-attr]

        left = ensure_write_ref(catalog.load_table(ledger), None)  # leaves the group: no position tag
        assert position_tags(ledger) == {} and left.current_snapshot().snapshot_id == b3  # type: ignore[union-attr]
        assert "cdc_group_bank" in left.refs()  # the group's tag stays for time travel
    finally:
        for c in members:
            catalog.drop_table(c.identifier)
        catalog.drop_namespace(namespace)
