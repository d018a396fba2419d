"""Table groups (pure: no Spark, no Kafka, no pyiceberg): tables whose readers see them all at one
source transaction boundary, through the group's tag (``docs/architecture.md``, "Table groups").

The position of a group is an offset in the one partition of the members' shared transaction topic
(Debezium's ``<topic.prefix>.transaction``): it writes an ``END`` record per source transaction in
commit order, so the offsets order the transactions of every table of the source. A member's commit
equals its source table at every position from the ``END`` of the last transaction it applied to
just before the ``END`` of the first transaction touching it that it did not apply
(:func:`valid_interval`, recorded as :attr:`~cdclake.model.layout.SummaryKeys.TRANSACTION_INTERVAL`).
The group's position is the greatest one that a commit of every member covers
(:func:`choose_position`); the group's tag (:func:`~cdclake.model.layout.group_tag`) points each
member at that commit. So that the members' commits meet at one, each publish also sets the
group's target (:func:`choose_target`), the greatest position every member's next run reaches,
where those runs stop.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from cdclake.errors import ConfigError
from cdclake.model.layout import SummaryKeys, group_tag

if TYPE_CHECKING:
    from cdclake.model.position import BinlogPosition

GROUP_NAME = re.compile(r"^[a-z0-9_]+$")
"""A group name: the tag ``cdc_group_<name>`` and the DAG ``cdc_group_<name>`` are made of it."""


class Member(Protocol):
    """What :func:`group_members` reads of a table's config (:class:`cdclake.model.config.TableConfig`,
    which validates its file with it)."""

    @property
    def name(self) -> str: ...
    @property
    def group(self) -> str | None: ...
    @property
    def transactions(self) -> str: ...
    @property
    def ordering(self) -> str: ...
    @property
    def transaction_topic_name(self) -> str: ...


M = TypeVar("M", bound=Member)


class End(Protocol):
    """What :func:`valid_interval` reads of an ``END`` record
    (:class:`cdclake.model.transactions.TransactionEnd`)."""

    @property
    def id(self) -> str: ...
    @property
    def event_counts(self) -> Mapping[str, int]: ...
    @property
    def offset(self) -> int: ...


def group_members(tables: Iterable[M]) -> dict[str, tuple[M, ...]]:
    """The groups of ``tables`` (``group:`` of their config), each with its members in config order.

    Raises:
        ConfigError: a member not configured ``transactions: whole`` (its commits may hold part
            of a transaction, so no position is ever valid for it), or members reading other
            transaction topics than the group's first member (their positions are offsets of
            different topics); the message names the table and the group.
    """
    groups: dict[str, list[M]] = {}
    for t in tables:
        if t.group is None:
            continue
        if t.transactions != "whole" or t.ordering == "kafka":
            raise ConfigError(
                f"table {t.name!r} is in group {t.group!r} but is configured transactions: {t.transactions}, "
                f"ordering: {t.ordering}: a group member needs transactions: whole and a source ordering"
            )
        members = groups.setdefault(t.group, [])
        if members and members[0].transaction_topic_name != t.transaction_topic_name:
            raise ConfigError(
                f"table {t.name!r} is in group {t.group!r} with transaction topic {t.transaction_topic_name!r}, "
                f"but table {members[0].name!r} of the group reads {members[0].transaction_topic_name!r}: the "
                "members of a group must come from one connector (one transaction topic)"
            )
        members.append(t)
    return {g: tuple(ms) for g, ms in groups.items()}


@dataclass(frozen=True)
class SourceInterval:
    """The transaction-topic positions at which a commit equals its source table.

    Attributes:
        topic: the transaction topic.
        start: the offset of the ``END`` of the last transaction the table's state holds.
        end: the last offset at which it still equals the source (>= ``start``).
    """

    topic: str
    start: int
    end: int

    def covers(self, position: int) -> bool:
        return self.start <= position <= self.end

    def to_json(self) -> str:
        return json.dumps({"topic": self.topic, "from": self.start, "to": self.end})

    @classmethod
    def from_json(cls, text: str) -> SourceInterval | None:
        """The interval :meth:`to_json` wrote; ``None`` when ``text`` is not one (a publish never
        fails on one odd summary: that commit is no candidate)."""
        try:
            d = json.loads(text)
            interval = cls(str(d["topic"]), int(d["from"]), int(d["to"]))
        except (KeyError, TypeError, ValueError):
            return None
        return interval if interval.start <= interval.end else None


def batch_is_prefix(
    applied_through: BinlogPosition,
    partition_last: Mapping[int, BinlogPosition | None],
    read_to_end: Iterable[int],
    applied_before: BinlogPosition | None,
) -> bool:
    """Whether a table holds, after a commit, every event of its binlog up to ``applied_through``
    and none above it: each data-topic partition was read to its end, or read to an event at or
    above ``applied_through`` (Debezium writes a partition in binlog order, so the records after
    the range are above it); and nothing above it was applied before.

    The one-table cut (:func:`cdclake.model.transactions.cut_position`) keeps transactions whole
    but not the batch a prefix: with ``max_events_per_run`` shared over partitions, one partition
    may be read far beyond another. Such a commit is at no source position.

    Args:
        applied_through: the position of the last event of the newest transaction the commit applied.
        partition_last: every partition of the planned range with the greatest position read in
            it before the cut (``None``: nothing read).
        read_to_end: the partitions whose range ended at the topic's high watermark.
        applied_before: the table's greatest applied position before the run.
    """
    done = set(read_to_end)
    if applied_before is not None and applied_before > applied_through:
        return False
    return all(p in done or (last is not None and last >= applied_through) for p, last in partition_last.items())


def valid_interval(topic: str, ends: Sequence[End], data_collection: str, last_id: str) -> SourceInterval | None:
    """The interval of a commit whose table holds every transaction touching it up to ``last_id``
    and none after it (:func:`batch_is_prefix`).

    ``start`` is the offset of ``last_id``'s ``END``; ``end`` the offset before the first ``END``
    after it of a transaction touching ``data_collection`` (one not applied), or the last ``END``
    read when there is none. A connector that restarts writes some ``END`` records again: a
    transaction is placed by its first ``END``, and a copy of one applied is no later transaction.

    Args:
        topic: the transaction topic (one partition).
        ends: the ``END`` records the run read, from before its batch's first transaction to the
            topic's high watermark.
        data_collection: the table, ``<database>.<table>``.
        last_id: the newest transaction the commit applied.

    Returns:
        The interval; ``None`` when ``last_id``'s ``END`` was not read.
    """
    first: dict[str, int] = {}
    for e in sorted(ends, key=lambda e: e.offset):
        first.setdefault(e.id, e.offset)
    start = first.get(last_id)
    if start is None:
        return None
    later = [first[e.id] for e in ends if data_collection in e.event_counts and first[e.id] > start]
    end = min(later) - 1 if later else max(e.offset for e in ends)
    return SourceInterval(topic, start, end)


def extend_interval(interval: SourceInterval, ends: Sequence[End], data_collection: str) -> SourceInterval:
    """The interval of a table's newest commit, extended by the ``END`` records written since:
    nothing after it was applied, so it equals the source until the first transaction touching
    the table (``data_collection``) after ``interval.end``; to the last ``END`` read when none does.
    A member whose source table is quiet so keeps up with the group without committing.

    Args:
        interval: the newest commit's interval (or a greater ``end`` already known).
        ends: the ``END`` records after ``interval.end``, to the topic's high watermark.
        data_collection: the table, ``<database>.<table>``.
    """
    later = [e.offset for e in ends if e.offset > interval.end]
    touching = [e.offset for e in ends if e.offset > interval.end and data_collection in e.event_counts]
    end = min(touching) - 1 if touching else max(later, default=interval.end)
    return SourceInterval(interval.topic, interval.start, end)


@dataclass(frozen=True)
class MemberSnapshot:
    """A commit of a member and the positions it covers.

    Attributes:
        snapshot_id: the Iceberg snapshot.
        interval: the positions at which it equals the source table.
        newest: it is the member's newest commit of its topic (:func:`extend_interval` applies).
    """

    snapshot_id: int
    interval: SourceInterval
    newest: bool = False


def member_snapshots(
    snapshots: Iterable[tuple[int, int, Mapping[str, str] | None]], topic: str, transaction_topic: str
) -> list[MemberSnapshot]:
    """The commits of a member that cover a position: those of ``topic`` with a
    :attr:`~cdclake.model.layout.SummaryKeys.TRANSACTION_INTERVAL` of ``transaction_topic``. A
    commit without one (a run from before the group, a batch that was not a prefix) has no known
    position and is never a candidate.

    Args:
        snapshots: ``(snapshot id, timestamp ms, summary or None)``, newest first
            (:func:`cdclake.io.refs.ancestry`).
        topic: the member's data topic.
        transaction_topic: the group's transaction topic.
    """
    found: list[MemberSnapshot] = []
    newest = True
    for snapshot_id, _, summary in snapshots:
        if summary is None or summary.get(SummaryKeys.TOPIC) != topic or SummaryKeys.END_OFFSETS not in summary:
            continue
        interval = SourceInterval.from_json(summary.get(SummaryKeys.TRANSACTION_INTERVAL) or "")
        if interval is not None and interval.topic == transaction_topic:
            found.append(MemberSnapshot(snapshot_id, interval, newest))
        newest = False
    return found


@dataclass(frozen=True)
class GroupPoint:
    """Where a group can be published.

    Attributes:
        position: the transaction-topic offset every chosen commit covers.
        snapshots: per member, the commit that covers it (the newest one when several do).
    """

    position: int
    snapshots: Mapping[str, int]


def choose_position(members: Mapping[str, Sequence[MemberSnapshot]]) -> GroupPoint | None:
    """The greatest position covered by a commit of every member, and those commits.

    The greatest point of an intersection of unions of closed intervals is the end of one of them,
    so only the ends are tried, greatest first.

    Args:
        members: per member, its candidate commits newest first (:func:`member_snapshots`).

    Returns:
        The point; ``None`` when no position is covered by every member (a member without
        candidates, or intervals that never meet), or when there are no members.
    """
    if not members:
        return None
    for position in sorted({s.interval.end for snaps in members.values() for s in snaps}, reverse=True):
        chosen = {}
        for name, snaps in members.items():
            found = next((s.snapshot_id for s in snaps if s.interval.covers(position)), None)
            if found is None:
                break
            chosen[name] = found
        else:
            return GroupPoint(position, chosen)
    return None


def member_reach(interval: SourceInterval, ends: Sequence[End], data_collection: str, max_events: int) -> int:
    """The greatest position a member's next run reaches from its newest commit (``interval``):
    just before the ``END`` of the first transaction touching the table (``data_collection``)
    whose events would take the run past ``max_events``; the first one always counts (a run applies
    a larger transaction whole). The last ``END`` read when the run reaches all of them.

    Args:
        interval: the newest commit's interval (extended: :func:`extend_interval`).
        ends: the ``END`` records after it (an ``END`` of a transaction seen before in them is a
            restarted connector's copy and counts at its first offset).
        data_collection: the table, ``<database>.<table>``.
        max_events: the table's ``max_events_per_run``.
    """
    seen: set[str] = set()
    spent, reach = 0, interval.end
    for e in sorted(ends, key=lambda e: e.offset):
        if e.id in seen:
            continue
        seen.add(e.id)
        if e.offset <= interval.end:
            continue
        n = e.event_counts.get(data_collection)
        if n is not None and spent and spent + n > max_events:
            return e.offset - 1
        spent += n or 0
        reach = e.offset
    return reach


def choose_target(
    members: Mapping[str, Sequence[MemberSnapshot]], reach: Mapping[str, int], after: int | None
) -> int | None:
    """The position the members' next runs stop at: the greatest one above ``after`` (the group's
    position) that every member covers with a commit or can stop at in its next run (from its
    newest commit's start, before which it holds every transaction, to its ``reach``:
    :func:`member_reach`). When a member ran so far ahead that no next run of another reaches a
    position it covers, the smallest one above ``after`` that every member covers or can reach in
    later runs (from its newest commit's start on).

    Args:
        members: per member, its candidate commits newest first, the newest extended
            (:func:`member_snapshots`, :func:`extend_interval`).
        reach: per member, the greatest position its next run reaches.
        after: the group's position (``None``: not published yet).

    Returns:
        The target; ``None`` when a member's newest commit is at no known position (its runs
        place nothing yet), or some member's runs have nothing beyond ``after`` to reach.
    """
    spans: dict[str, list[tuple[int, int]]] = {}
    for name, snaps in members.items():
        if not snaps or not snaps[0].newest or reach[name] <= (after if after is not None else -1):
            return None
        spans[name] = [(s.interval.start, s.interval.end) for s in snaps]
    if not spans:
        return None
    floor = after if after is not None else -1
    now = {name: [*spans[name], (members[name][0].interval.start, reach[name])] for name in spans}
    ends = sorted({hi for intervals in now.values() for _, hi in intervals}, reverse=True)
    best = next((p for p in ends if _covered(now, p)), None)
    if best is not None and best > floor:
        return best
    later = {name: [*spans[name], (members[name][0].interval.start, _NO_END)] for name in spans}
    starts = sorted({floor + 1, *(lo for intervals in later.values() for lo, _ in intervals if lo > floor)})
    return next((p for p in starts if _covered(later, p)), None)


def target_holds(members: Mapping[str, Sequence[MemberSnapshot]], target: int, after: int | None) -> bool:
    """Whether a target set before still serves: it is above ``after`` (the group's position) and
    every member covers it with a commit or has not passed it (its newest commit starts at or
    below it). A target is kept while it holds, so that the commits members made there stay of
    use however far the others' runs get."""
    if after is not None and target <= after:
        return False
    return all(
        snaps
        and snaps[0].newest
        and (snaps[0].interval.start <= target or any(s.interval.covers(target) for s in snaps))
        for snaps in members.values()
    )


_NO_END = 2**63 - 1
"""The end of an interval without one (a member that can reach any later position)."""


def _covered(intervals: Mapping[str, Sequence[tuple[int, int]]], position: int) -> bool:
    return all(any(lo <= position <= hi for lo, hi in spans) for spans in intervals.values())


class GroupTarget(BaseModel):
    """The group's target (:data:`~cdclake.model.layout.GROUP_TARGET_PROPERTY`), set by its publish
    on every member (:func:`choose_target`).

    Attributes:
        group: the group.
        position: the transaction-topic position the members' next runs stop at.
    """

    model_config = ConfigDict(frozen=True)

    group: str
    position: int

    @classmethod
    def from_text(cls, text: str | None) -> GroupTarget | None:
        """The record of a table property; ``None`` when absent or unreadable (the runs go as far
        as their cap; the next publish sets it again)."""
        with contextlib.suppress(ValueError):
            return cls.model_validate_json(text or "")
        return None


class GroupPosition(BaseModel):
    """What a member records of its group's newest publish
    (:data:`~cdclake.model.layout.GROUP_POSITION_PROPERTY`).

    Attributes:
        group: the group.
        position: the transaction-topic offset the group's tag shows the source at.
        snapshot_id: the member's snapshot the tag points at.
        published_ms: when it was published (epoch ms).
    """

    model_config = ConfigDict(frozen=True)

    group: str
    position: int
    snapshot_id: int
    published_ms: int

    @classmethod
    def from_text(cls, text: str | None) -> GroupPosition | None:
        """The record of a table property; ``None`` when absent or unreadable (a publish starts
        the group again, the status shows it unpublished)."""
        with contextlib.suppress(ValueError):
            return cls.model_validate_json(text or "")
        return None


@dataclass(frozen=True)
class GroupStatus:
    """A group's published position, for ``cdclake status``.

    Attributes:
        group: the group.
        members: its tables (names).
        transaction_topic: the topic its positions are offsets of.
        position: the group's position: the smallest its members record (all record the same,
            except while a publish by pointer moves them one by one); ``None``: not published yet
            (or a member joined since the last publish).
        published_ms: when that position was published (epoch ms).
        read_ref: the ref to read every member at to see the group whole (``VERSION AS OF``):
            the group's tag, or the position's tag of a group published by pointer.
        moving: members record different positions (a publish by pointer is under way, or
            stopped half-way until the next).
    """

    group: str
    members: tuple[str, ...]
    transaction_topic: str
    position: int | None = None
    published_ms: int | None = None
    read_ref: str | None = None
    moving: bool = False

    @classmethod
    def of(
        cls,
        group: str,
        members: Sequence[str],
        transaction_topic: str,
        marks: Sequence[GroupPosition | None],
        read_ref: str | None = None,
    ) -> GroupStatus:
        """The status from each member's :class:`GroupPosition` (``None``: it has none of ``group``)."""
        found = [m for m in marks if m is not None and m.group == group]
        if not found or len(found) != len(members):
            return cls(group, tuple(members), transaction_topic)
        first = min(found, key=lambda m: m.position)
        moving = len({m.position for m in found}) > 1
        return cls(group, tuple(members), transaction_topic, first.position, first.published_ms, read_ref, moving)

    def describe(self, now_ms: int) -> str:
        """One line: ``group bank (accounts, ledger): tag cdc_group_bank at dbserver1.transaction
        offset 120, published 95 s ago``; by pointer, the tag is the position's."""
        head = f"group {self.group} ({', '.join(self.members)}): tag {self.read_ref or group_tag(self.group)}"
        if self.position is None or self.published_ms is None:
            return f"{head} not published yet"
        age_s = max(0, (now_ms - self.published_ms) // 1000)
        moving = " (members moving to a newer position)" if self.moving else ""
        return f"{head} at {self.transaction_topic} offset {self.position}, published {age_s} s ago{moving}"
