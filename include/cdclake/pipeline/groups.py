"""Publish a table group (pyiceberg and the transaction topic; no Spark): choose the greatest
source position every member's commits cover and move the group's tag and ``main`` of every member
to its commit there (``docs/architecture.md``, "Table groups"), in one of two ways
(``CDCLAKE_GROUP_COMMIT``, :attr:`cdclake.settings.Settings.group_commit`):

* ``multi_table``: in one catalog commit (:func:`~cdclake.io.multi_commit.move_refs`); ``main`` of
  the members is at one source transaction boundary at every moment.
* ``pointer``, for a catalog without a multi-table commit: every member is first tagged at the
  position (:func:`~cdclake.model.layout.position_tag`), then each member's ``main``, group tag and
  :data:`~cdclake.model.layout.GROUP_POSITION_PROPERTY` move in a commit of its own. The group's
  position is the smallest its members record, and every member has a tag there
  (:func:`group_read_tags`): a reader who needs the group whole reads each member at that tag.
  While a publish moves the members one by one (or after it failed half-way, until the next one),
  ``main`` of two members may be one publish apart.

Either way the publish also sets the group's target on every member
(:data:`~cdclake.model.layout.GROUP_TARGET_PROPERTY`, :func:`~cdclake.model.groups.choose_target`):
the greatest position every member's next run reaches, where those runs stop, so that the next
publish finds a position all of them cover.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from cdclake.errors import MultiTableCommitError, TopicNotFoundError
from cdclake.io.catalog import load_table_or_none, update_table_property
from cdclake.io.kafka import topic_watermarks
from cdclake.io.multi_commit import RefMove, RefUpdate, commit_refs, move_refs
from cdclake.io.refs import MAIN_BRANCH, ancestry, write_ref
from cdclake.io.transaction_topic import read_transaction_ends
from cdclake.model.groups import (
    GroupPoint,
    GroupPosition,
    GroupStatus,
    GroupTarget,
    MemberSnapshot,
    SourceInterval,
    choose_position,
    choose_target,
    extend_interval,
    group_members,
    member_reach,
    member_snapshots,
    target_holds,
)
from cdclake.model.layout import (
    GROUP_POSITION_PROPERTY,
    GROUP_TARGET_PROPERTY,
    group_tag,
    position_of_tag,
    position_tag,
)
from cdclake.model.plan import TransactionRange

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from cdclake.io.kafka import KafkaClients
    from cdclake.model.config import TableConfig
    from cdclake.model.transactions import TransactionEnd

log = logging.getLogger(__name__)

PUBLISH_ATTEMPTS = 3
"""Tries of one publish: a member's run committing between the read and the catalog commit fails
it (the SQL catalog compares every table's metadata pointer), and a new read usually wins."""


@dataclass(frozen=True)
class GroupPublish:
    """What :func:`publish_group` did.

    Attributes:
        group: the group.
        position: the group's published position after the call (a transaction-topic offset);
            ``None``: never published.
        moved: whether this call moved the tag.
        snapshots: per member (table name), the snapshot the tag points at.
        reason: why the tag did not move (empty when it moved).
        target: the position the members' next runs stop at
            (:data:`~cdclake.model.layout.GROUP_TARGET_PROPERTY`); ``None``: none set.
    """

    group: str
    position: int | None
    moved: bool
    snapshots: Mapping[str, int] = field(default_factory=dict)
    reason: str = ""
    target: int | None = None


GroupCommit = Literal["multi_table", "pointer"]
"""How a group is published (module docstring)."""


def publish_group(
    catalog: Catalog,
    group: str,
    members: Sequence[TableConfig],
    now_ms: int,
    kafka: KafkaClients | None,
    commit: GroupCommit = "multi_table",
) -> GroupPublish:
    """Move the tag ``cdc_group_<group>`` of every member to its commit at the greatest position
    all of them cover (:func:`~cdclake.model.groups.choose_position`), and ``main`` with it for
    every member whose runs commit to the stage branch (:func:`~cdclake.io.refs.write_ref`), with
    the table property :data:`~cdclake.model.layout.GROUP_POSITION_PROPERTY`, in one catalog commit;
    never backwards. Sets the group's target for the members' next runs
    (:data:`~cdclake.model.layout.GROUP_TARGET_PROPERTY`: :func:`~cdclake.model.groups.choose_target`;
    kept while it holds, :func:`~cdclake.model.groups.target_holds`), in the same commit when the
    group moves, else by a metadata commit of each member when it changes.

    Args:
        catalog: the members' catalog (REST or SQL: :func:`~cdclake.io.multi_commit.move_refs`).
        group: the group's name.
        members: its tables (:func:`~cdclake.model.groups.group_members`).
        now_ms: the publish time recorded (epoch ms).
        kafka: where the transaction topic is read to extend each member's newest commit to the
            ``END`` records written since (:func:`~cdclake.model.groups.extend_interval`: a member
            whose source table is quiet commits nothing); ``None``: the intervals as recorded.
        commit: ``multi_table`` or ``pointer`` (module docstring).

    Raises:
        MultiTableCommitError: the commit lost to other commits :data:`PUBLISH_ATTEMPTS` times.
        ConfigError: ``multi_table`` on a catalog without multi-table commits.
    """
    for attempt in range(1, PUBLISH_ATTEMPTS + 1):
        try:
            return _publish_once(catalog, group, members, now_ms, kafka, commit)
        except MultiTableCommitError as e:
            if attempt == PUBLISH_ATTEMPTS:
                raise
            log.info("group %s: %s; reading the members again (try %d)", group, e, attempt + 1)
    raise AssertionError("unreachable")  # the last attempt returns or raises


def _publish_once(
    catalog: Catalog,
    group: str,
    members: Sequence[TableConfig],
    now_ms: int,
    kafka: KafkaClients | None,
    commit: GroupCommit,
) -> GroupPublish:
    """One try of :func:`publish_group` (its arguments, answer and errors)."""
    tag = group_tag(group)
    transaction_topic = members[0].transaction_topic_name
    read = _read_members(catalog, group, members, tag, transaction_topic)
    if isinstance(read, str):
        return GroupPublish(group, None, False, reason=read)
    candidates, tagged = read.candidates, read.tagged
    # a member added to the group since the last publish has no mark: the group starts again
    known = [p for p in read.published if p is not None]
    before = min(known) if known and len(known) == len(read.published) else None
    ends = None if kafka is None else _extend_newest(kafka, transaction_topic, members, candidates, tagged, before)
    current = {n: s for n, s in tagged.items() if s is not None}
    point = choose_position(candidates)
    moving = point is not None and (before is None or point.position > before)
    after = point.position if point is not None and moving else before
    target = _next_target(group, members, candidates, ends, read.targets, after)
    wanted = GroupTarget(group=group, position=target) if target is not None else None
    if point is None or not moving:
        reason = _no_move_reason(candidates, point, before)
        if wanted is not None:
            _set_target(catalog, members, read.targets, wanted)
            log.info(
                "group %s: %s; the members' next runs stop at %s offset %d", group, reason, transaction_topic, target
            )
        return GroupPublish(group, before, False, current, reason, target)
    assert point is not None  # moving
    moves = [_member_move(cfg, group, tag, read, point, now_ms, wanted) for cfg in members]
    if commit == "pointer":
        _publish_by_pointer(catalog, group, point.position, before, moves)
    else:
        move_refs(catalog, moves)
    log.info(
        "group %s: published at %s offset %d (was %s): %s; the members' next runs stop at %s",
        group,
        transaction_topic,
        point.position,
        before,
        ", ".join(f"{n} snapshot {s}" for n, s in point.snapshots.items()),
        target,
    )
    return GroupPublish(group, point.position, True, dict(point.snapshots), target=target)


@dataclass(frozen=True)
class _MemberReads:
    """What a publish reads of the members, keyed by table name (lists: in the members' order).

    Attributes:
        candidates: each member's commits at a known source position
            (:func:`~cdclake.model.groups.member_snapshots`, newest first).
        tagged: the snapshot each member's group tag is at (``None``: no tag).
        mains: of the members whose runs commit to the stage branch (``main`` moves with the tag,
            from where it is), the snapshot ``main`` is at (``None``: none).
        published: each member's recorded position of the group (``None``: none of the group).
        targets: each member's recorded group target (``None``: none).
    """

    candidates: dict[str, list[MemberSnapshot]]
    tagged: dict[str, int | None]
    mains: dict[str, int | None]
    published: list[int | None]
    targets: list[GroupTarget | None]


def _read_members(
    catalog: Catalog, group: str, members: Sequence[TableConfig], tag: str, transaction_topic: str
) -> _MemberReads | str:
    """The members' tables read for a publish of ``group`` (group tag ``tag``), or why it cannot
    be published: the first member whose table does not exist (the members after it are not read)."""
    read = _MemberReads({}, {}, {}, [], [])
    for cfg in members:
        table = load_table_or_none(catalog, cfg.identifier)
        if table is None:
            return f"table {cfg.identifier} does not exist yet"
        read.candidates[cfg.name] = member_snapshots(ancestry(table), cfg.topic, transaction_topic)
        ref = table.refs().get(tag)
        read.tagged[cfg.name] = ref.snapshot_id if ref is not None else None
        if write_ref(table) != MAIN_BRANCH:
            main = table.current_snapshot()
            read.mains[cfg.name] = main.snapshot_id if main is not None else None
        mark = GroupPosition.from_text(table.properties.get(GROUP_POSITION_PROPERTY))
        read.published.append(mark.position if mark is not None and mark.group == group else None)
        read.targets.append(GroupTarget.from_text(table.properties.get(GROUP_TARGET_PROPERTY)))
    return read


def _no_move_reason(
    candidates: Mapping[str, Sequence[MemberSnapshot]], point: GroupPoint | None, before: int | None
) -> str:
    """Why the group does not move from ``before``: no position all members cover (``point`` is
    ``None``), or none beyond ``before``."""
    if point is not None:
        return f"no position beyond {before} yet"
    missing = [n for n, c in candidates.items() if not c]
    return (
        f"no commit of {', '.join(missing)} is at a known source position yet"
        if missing
        else "the members' commits share no source position yet"
    )


def _set_target(
    catalog: Catalog, members: Sequence[TableConfig], held: Sequence[GroupTarget | None], wanted: GroupTarget
) -> None:
    """Set the group target ``wanted`` on each member whose recorded one (``held``) differs, by a
    metadata commit of its own."""
    text = wanted.model_dump_json()
    for cfg, target in zip(members, held, strict=True):
        if target != wanted:
            update_table_property(catalog, cfg.identifier, GROUP_TARGET_PROPERTY, lambda _: text)


def _member_move(
    cfg: TableConfig,
    group: str,
    tag: str,
    read: _MemberReads,
    point: GroupPoint,
    now_ms: int,
    wanted: GroupTarget | None,
) -> RefMove:
    """Member ``cfg``'s part of a publish at ``point``: its group tag ``tag`` (and ``main`` when it
    moves with the tag) to its commit there, its position of the group and the target ``wanted``."""
    return RefMove(
        cfg.identifier,
        (
            RefUpdate(tag, read.tagged[cfg.name], point.snapshots[cfg.name]),
            *(
                (RefUpdate(MAIN_BRANCH, read.mains[cfg.name], point.snapshots[cfg.name], branch=True),)
                if cfg.name in read.mains
                else ()
            ),
        ),
        {
            GROUP_POSITION_PROPERTY: GroupPosition(
                group=group, position=point.position, snapshot_id=point.snapshots[cfg.name], published_ms=now_ms
            ).model_dump_json(),
            **({GROUP_TARGET_PROPERTY: wanted.model_dump_json()} if wanted is not None else {}),
        },
    )


def _next_target(
    group: str,
    members: Sequence[TableConfig],
    candidates: Mapping[str, Sequence[MemberSnapshot]],
    ends: Sequence[TransactionEnd] | None,
    recorded: Sequence[GroupTarget | None],
    after: int | None,
) -> int | None:
    """The group's target after a publish at ``after``: the one the members record while it holds
    (:func:`~cdclake.model.groups.target_holds`: the commits members made there stay of use), else
    a new one (:func:`~cdclake.model.groups.choose_target`) from each member's reach in the ``END``
    records read (:func:`~cdclake.model.groups.member_reach`); ``None``: none can be set (or no
    ``END`` records were read)."""
    held = {t.position if t is not None and t.group == group else None for t in recorded}
    if len(held) == 1 and (position := held.pop()) is not None and target_holds(candidates, position, after):
        return position
    if ends is None:
        return None
    reach = {
        cfg.name: member_reach(candidates[cfg.name][0].interval, ends, cfg.data_collection, cfg.max_events_per_run)
        if candidates[cfg.name] and candidates[cfg.name][0].newest
        else -1
        for cfg in members
    }
    return choose_target(candidates, reach, after)


def _publish_by_pointer(
    catalog: Catalog, group: str, position: int, before: int | None, moves: Sequence[RefMove]
) -> None:
    """Publish ``moves`` (each member's group tag, ``main``, position property) by pointer: first
    every member tagged at ``position`` (:func:`~cdclake.model.layout.position_tag`), so that
    whichever member moves first, the smallest position the members record has its tag on all of
    them; then each member in a commit of its own, which also removes the member's position tags
    below ``before`` (the position a reader may have resolved just before: kept until the next
    publish). A retry after a failure half-way finds the tags already made and moves the rest.

    Raises:
        MultiTableCommitError: a member's commit lost to another (that member and the ones after
            it did not move; the next try reads them again), or a position tag exists at another
            snapshot.
    """
    tag = position_tag(group, position)
    tables = {move.identifier: catalog.load_table(move.identifier) for move in moves}
    for move in moves:
        snapshot_id = move.refs[0].snapshot_id
        ref = tables[move.identifier].refs().get(tag)
        if ref is None:
            commit_refs(
                catalog, RefMove(move.identifier, (RefUpdate(tag, None, snapshot_id),)), tables[move.identifier]
            )
        elif ref.snapshot_id != snapshot_id:
            raise MultiTableCommitError(
                f"table {move.identifier}: tag {tag} is at snapshot {ref.snapshot_id}, not {snapshot_id}"
            )
    for move in moves:  # the refs as loaded: the tag made above is not stale
        stale = tuple(r for r in tables[move.identifier].refs() if _stale(group, r, position, before))
        commit_refs(
            catalog, RefMove(move.identifier, move.refs, move.properties, removed=stale), tables[move.identifier]
        )


def _stale(group: str, ref: str, position: int, before: int | None) -> bool:
    """Whether ``ref`` is a position tag of ``group`` below both ``position`` and ``before``."""
    at = position_of_tag(group, ref)
    return at is not None and at != position and (before is None or at < before)


def group_read_refs(catalog: Catalog, group: str, members: Sequence[TableConfig]) -> dict[str, str]:
    """Where to read each member to see the whole group at its published position: member
    identifier -> the ref for ``VERSION AS OF``, the position tag of the smallest position the
    members record when the group is published by pointer, else the group's tag. Empty when the
    group is not published (a member has no position of the group: not created yet, or joined
    since the last publish)."""
    return _read_refs(catalog, group, members)[1]


def _read_refs(
    catalog: Catalog, group: str, members: Sequence[TableConfig]
) -> tuple[list[GroupPosition | None], dict[str, str]]:
    """The members' positions of ``group`` (``None``: none of the group) and
    :func:`group_read_refs`."""
    tables: dict[str, Table] = {}
    marks: list[GroupPosition | None] = []
    for cfg in members:
        table = load_table_or_none(catalog, cfg.identifier)
        mark = None if table is None else GroupPosition.from_text(table.properties.get(GROUP_POSITION_PROPERTY))
        marks.append(mark if mark is not None and mark.group == group else None)
        if table is not None:
            tables[cfg.identifier] = table
    if not marks or any(m is None for m in marks):
        return marks, {}
    tag = position_tag(group, min(m.position for m in marks if m is not None))
    pointer = all(tag in t.refs() for t in tables.values())
    return marks, {identifier: tag if pointer else group_tag(group) for identifier in tables}


def group_statuses(catalog: Catalog, tables: Sequence[TableConfig]) -> list[GroupStatus]:
    """The :class:`~cdclake.model.groups.GroupStatus` of each group of ``tables``, from its members'
    :data:`~cdclake.model.layout.GROUP_POSITION_PROPERTY` (a member not created yet has none)."""
    out = []
    for group, members in group_members(tables).items():
        marks, refs = _read_refs(catalog, group, members)
        out.append(
            GroupStatus.of(
                group,
                [m.name for m in members],
                members[0].transaction_topic_name,
                marks,
                read_ref=next(iter(refs.values()), None),
            )
        )
    return out


def _extend_newest(
    kafka: KafkaClients,
    transaction_topic: str,
    members: Sequence[TableConfig],
    candidates: dict[str, list[MemberSnapshot]],
    tagged: Mapping[str, int | None],
    before: int | None,
) -> list[TransactionEnd] | None:
    """Extend each member's newest commit, in ``candidates``, to the ``END`` records of
    ``transaction_topic`` written since (:func:`~cdclake.model.groups.extend_interval`), read once
    for all members, and return them (``None``: none read). A tagged newest commit was valid at the
    group's position ``before`` already: the read starts there. Nothing is extended when the topic
    has several partitions or its retention deleted ``END`` records after a member's interval."""
    newest = {m.name: candidates[m.name][0] for m in members if candidates[m.name] and candidates[m.name][0].newest}
    if not newest:
        return None
    ends_known = {
        name: max(s.interval.end, before) if before is not None and tagged[name] == s.snapshot_id else s.interval.end
        for name, s in newest.items()
    }
    try:
        marks = topic_watermarks(kafka, transaction_topic)
    except TopicNotFoundError:
        return None
    start = min(ends_known.values()) + 1
    if len(marks.high) != 1 or 0 not in marks.high or start < marks.low[0]:
        return None
    ends = read_transaction_ends(kafka, TransactionRange(topic=transaction_topic, start={0: start}, end=marks.high))
    collections = {m.name: m.data_collection for m in members}
    for name, snap in newest.items():
        interval = SourceInterval(snap.interval.topic, snap.interval.start, ends_known[name])
        candidates[name][0] = MemberSnapshot(
            snap.snapshot_id, extend_interval(interval, ends, collections[name]), newest=True
        )
    return ends
