"""A manual replay's start, as the trigger form of a table DAG gives it: the Params' rules (JSON
schema, which Airflow's trigger form and its REST API enforce before a run exists) and the checks
that need the run (both starts given, a time still to come, then against the topic's watermarks).

Every refusal is a :class:`~cdclake.errors.TriggerParamError`: one line naming the Param and the
values it allows. Pure: the watermarks and the records' timestamps come from the caller
(:func:`cdclake.pipeline.planner.plan_next`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from cdclake.errors import TriggerParamError

OFFSETS_PARAM = "replay_from_offsets"
TIMESTAMP_PARAM = "replay_from_timestamp"
ACCEPT_PARAM = "accept_source_change"

OFFSETS_FORMAT = 'JSON object of partition to non-negative offset, e.g. {"0": 120, "1": 98}'
"""The JSON-schema ``format`` of ``replay_from_offsets`` (:data:`PARAM_FORMATS`): named by what it
allows, since jsonschema's message for a value that does not fit is ``'<value>' is not a
'<format>'``, and Airflow's trigger form shows that message as it is."""
TIMESTAMP_FORMAT = "ISO 8601 time, e.g. 2026-11-20T08:00:00Z (UTC when it names no offset)"
"""The JSON-schema ``format`` of ``replay_from_timestamp`` (:data:`PARAM_FORMATS`)."""

OFFSETS_SCHEMA: dict[str, Any] = {"format": OFFSETS_FORMAT}
"""The JSON schema of ``replay_from_offsets``: empty, or partition -> non-negative offset as a JSON
object (``airflow dags trigger --conf``, the REST API) or as its text (the trigger form, whose
field is a plain text box when the schema has no ``type``: the form keeps the text as typed)."""

TIMESTAMP_SCHEMA: dict[str, Any] = {"type": ["null", "string"], "format": TIMESTAMP_FORMAT}
"""The JSON schema of ``replay_from_timestamp``: empty, or an ISO 8601 date, or date and time with
an optional UTC offset (``2026-11-20``, ``2026-11-20T08:00``, ``2026-11-20T08:00:00Z``,
``2026-11-20 08:00:00+01:00``)."""

OFFSETS_ALLOWED = f"a {OFFSETS_FORMAT}"
TIMESTAMP_ALLOWED = f"an {TIMESTAMP_FORMAT}, not in the future"


@dataclass(frozen=True)
class ReplayStart:
    """Where a run starts: its committed offsets (nothing given), ``offsets`` (partition ->
    offset) or the first records at or after ``timestamp_ms`` (epoch ms); with
    ``accept_source_change``, a new binlog history starts at ``offsets``."""

    offsets: dict[int, int] | None = None
    timestamp_ms: int | None = None
    accept_source_change: bool = False

    @property
    def is_replay(self) -> bool:
        """Whether the run is a manual replay (a start was given)."""
        return self.offsets is not None or self.timestamp_ms is not None


def check_exclusive(start: ReplayStart) -> None:
    """Refuse both starts, and ``accept_source_change`` without start offsets.

    Raises:
        TriggerParamError: names the Params and what to give.
    """
    if start.offsets is not None and start.timestamp_ms is not None:
        raise TriggerParamError(
            f"{OFFSETS_PARAM} and {TIMESTAMP_PARAM}: give one of them (offsets or a time), not both"
        )
    if start.accept_source_change and start.offsets is None:
        raise TriggerParamError(
            f"{ACCEPT_PARAM} needs {OFFSETS_PARAM}: the first record of the new binlog history in each "
            "partition, as the error that stopped the table names them"
        )


def _is_offsets(value: Any) -> bool:
    """The check of :data:`OFFSETS_FORMAT`: empty, or what :func:`_offsets` takes."""
    if value not in (None, ""):
        _offsets(value)
    return True


def _is_time(value: Any) -> bool:
    """The check of :data:`TIMESTAMP_FORMAT`: not a string (the schema's ``type`` judges it), or
    what :func:`_parse_time` takes."""
    if isinstance(value, str) and value:
        _parse_time(value)
    return True


PARAM_FORMATS: dict[str, Callable[[Any], bool]] = {OFFSETS_FORMAT: _is_offsets, TIMESTAMP_FORMAT: _is_time}
"""The replay Params' JSON-schema formats and their checks (each raises
:class:`~cdclake.errors.TriggerParamError` on a value that does not fit): the same rules as the
run's (:func:`replay_start`), for the form to check before a run exists
(:func:`cdclake_airflow.params.register_param_formats` gives them to jsonschema)."""


def _offsets(value: Any) -> dict[int, int]:
    """``replay_from_offsets`` (JSON text or object) as partition -> offset."""
    try:
        mapping = json.loads(value) if isinstance(value, str) else value
        offsets = {int(p): o for p, o in mapping.items()}
    except (AttributeError, TypeError, ValueError):
        offsets = None
    if not offsets or not all(
        isinstance(o, int) and not isinstance(o, bool) and o >= 0 and p >= 0 for p, o in offsets.items()
    ):
        raise TriggerParamError(f"{OFFSETS_PARAM} must be {OFFSETS_ALLOWED}; got {value!r}")
    return offsets


def _parse_time(value: Any) -> datetime:
    """``replay_from_timestamp`` (ISO 8601, UTC when naive) as an aware time."""
    try:
        parsed = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
    except ValueError:
        raise TriggerParamError(f"{TIMESTAMP_PARAM} must be {TIMESTAMP_ALLOWED}; got {value!r}") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)


def _timestamp_ms(value: Any, now_ms: int) -> int:
    """``replay_from_timestamp`` (ISO 8601, UTC when naive) as epoch ms, not after ``now_ms``."""
    ms = int(_parse_time(value).timestamp() * 1000)
    if ms > now_ms:
        now = datetime.fromtimestamp(now_ms / 1000, timezone.utc).isoformat(timespec="seconds")
        raise TriggerParamError(f"{TIMESTAMP_PARAM} {value!r} is in the future: give a time before now ({now})")
    return ms


def replay_start(params: Mapping[str, Any], *, now_ms: int) -> ReplayStart:
    """The replay start of a run's trigger-form ``params`` (an empty value is not given), checked
    without the topic: shapes, ranges, both starts, a time after ``now_ms`` (epoch ms).

    Raises:
        TriggerParamError: names the Param and the values it allows.
    """
    offsets = params.get(OFFSETS_PARAM)
    stamp = params.get(TIMESTAMP_PARAM)
    given = ReplayStart(
        offsets=None if offsets in (None, "") else _offsets(offsets),
        timestamp_ms=None if stamp in (None, "") else _timestamp_ms(stamp, now_ms),
        accept_source_change=bool(params.get(ACCEPT_PARAM)),
    )
    check_exclusive(given)
    return given


def check_offsets(topic: str, offsets: Mapping[int, int], low: Mapping[int, int], high: Mapping[int, int]) -> None:
    """Refuse start offsets of a partition the topic does not have, or outside its watermarks.

    Args:
        topic: the table's topic.
        offsets: the replay's start offsets (partition -> offset).
        low, high: the topic's low and high watermarks per partition.

    Raises:
        TriggerParamError: names the partitions and the offsets each allows.
    """
    allowed = ", ".join(f"{p}: {low[p]}..{high[p]}" for p in sorted(high))
    unknown = sorted(set(offsets) - set(high))
    if unknown:
        raise TriggerParamError(
            f"{OFFSETS_PARAM}: topic {topic!r} has no partition {', '.join(map(str, unknown))}; "
            f"allowed: partition: offset in {{{allowed}}}"
        )
    outside = {p: o for p, o in sorted(offsets.items()) if not low[p] <= o <= high[p]}
    if outside:
        raise TriggerParamError(
            f"{OFFSETS_PARAM}: offset(s) {outside} outside what Kafka keeps of topic {topic!r}; "
            f"allowed: partition: offset in {{{allowed}}} (low..high watermark)"
        )


def check_retained(topic: str, timestamp_ms: int, low: Mapping[int, int], oldest_ms: Mapping[int, int]) -> None:
    """Refuse a replay time whose records retention may have deleted: a partition that lost
    records (low watermark above 0) and whose oldest kept record is newer than ``timestamp_ms``.

    Args:
        topic: the table's topic.
        timestamp_ms: the replay's start (epoch ms).
        low: the topic's low watermarks per partition.
        oldest_ms: the Kafka timestamp (epoch ms) of the record at the low watermark of each
            partition that has one.

    Raises:
        TriggerParamError: names the oldest time the topic still holds in every partition.
    """
    lost = {p: ms for p, ms in oldest_ms.items() if low.get(p, 0) > 0 and ms > timestamp_ms}
    if lost:
        kept_from = max(ms for p, ms in oldest_ms.items() if low.get(p, 0) > 0)
        earliest = datetime.fromtimestamp(kept_from / 1000, timezone.utc).isoformat(timespec="seconds")
        raise TriggerParamError(
            f"{TIMESTAMP_PARAM}: retention deleted the oldest records of topic {topic!r} (partition(s) "
            f"{sorted(lost)} keep none from before {earliest}), so records from that time may be gone; "
            f"allowed: a time from {earliest} to now"
        )
