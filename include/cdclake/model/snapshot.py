"""Snapshot bootstrap through Debezium signals (pure): build a signal, read the connector's
notifications, and tell when a table has applied everything the snapshot emitted. Sending and
reading are in :mod:`cdclake.pipeline.snapshot`.

Sources (Debezium documentation, "Sending signals to a Debezium connector" and "Debezium
notifications"):

* The **source channel** is a row ``(id, type, data)`` inserted into the table named by the
  connector's ``signal.data.collection``. Incremental snapshots always need that table: the
  connector writes its window-open/close markers there, whichever channel carried the signal.
* The **Kafka channel** is a record on ``signal.kafka.topic`` (one partition) whose key equals the
  connector's ``topic.prefix`` and whose value is ``{"type": ..., "data": {...}}``; the connector
  uses the record's offset as the signal id.
* ``execute-snapshot`` data: ``{"data-collections": ["db.table", ...], "type": "incremental" |
  "blocking", "additional-conditions": [{"data-collection": "db.table", "filter": "<SQL>"}]}``;
  ``stop-snapshot`` takes ``data-collections`` and ``type``; ``pause-snapshot`` and
  ``resume-snapshot`` take ``type``.
* Notifications ``{id, aggregate_type, type, additional_data, timestamp}``: an incremental
  snapshot's notifications carry the id of the signal that started it; its ``TABLE_SCAN_COMPLETED``
  names the table (``data_collection``) and a ``status`` (``SUCCEEDED``, ``EMPTY``, or a failure:
  ``NO_PRIMARY_KEY``, ``SQL_EXCEPTION``, ``UNKNOWN_SCHEMA``, ``SKIPPED``); ``COMPLETED`` or
  ``ABORTED`` ends it. A ``COMPLETED`` notification means *emitted* by Debezium, not applied by
  us: :func:`caught_up` compares the table's committed offsets with the data topic's end offsets
  noted at that moment.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from cdclake.errors import ConfigError, SchemaError, SnapshotError, UnknownSchemaIdError
from cdclake.model.avro import SchemaLookup, is_framed, read_value
from cdclake.model.config import NO_SCHEMA_REGISTRY

ACTIONS = ("execute", "stop", "pause", "resume")
"""The bootstrap DAG's actions: Debezium signal types ``<action>-snapshot``."""

SNAPSHOT_TYPES = ("incremental", "blocking")

FAILED_SCAN_STATUSES = frozenset({"NO_PRIMARY_KEY", "SQL_EXCEPTION", "UNKNOWN_SCHEMA", "SKIPPED"})
"""``TABLE_SCAN_COMPLETED`` statuses that mean the table was not snapshotted."""

SIGNAL_ID_HEADER = "cdclake-signal-id"
"""Kafka header carrying our signal id on the Kafka channel (the connector ignores headers), so a
retried task finds the record it already sent instead of signalling twice."""


@dataclass(frozen=True)
class Signal:
    """One Debezium signal: ``id`` (<= 64 characters), ``type`` and ``data`` (a JSON object)."""

    id: str
    type: str
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def data_json(self) -> str:
        return json.dumps(self.data, sort_keys=True)


def signal_id(run_id: str, action: str) -> str:
    """A signal id derived from the DAG run, so that a retry of the signal task finds its own
    signal instead of sending a second one: ``cdclake-<action>-<sha1(run_id)[:24]>``."""
    digest = hashlib.sha1(run_id.encode()).hexdigest()[:24]
    return f"cdclake-{action}-{digest}"


def build_signal(
    sid: str,
    action: str,
    data_collections: list[str],
    snapshot_type: str = "incremental",
    additional_conditions: dict[str, str] | None = None,
) -> Signal:
    """The signal of ``action`` for ``data_collections`` (``db.table`` names).

    Raises:
        ValueError: unknown action or snapshot type, no tables for execute/stop, or a filter for a
            table that is not in the snapshot.
    """
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {ACTIONS}, got {action!r}")
    if snapshot_type not in SNAPSHOT_TYPES:
        raise ValueError(f"snapshot type must be one of {SNAPSHOT_TYPES}, got {snapshot_type!r}")
    conditions = additional_conditions or {}
    if action in ("execute", "stop") and not data_collections:
        raise ValueError(f"{action}-snapshot needs at least one table")
    unknown = sorted(set(conditions) - set(data_collections))
    if unknown:
        raise ValueError(f"additional-conditions for table(s) not in the snapshot: {unknown}")
    data: dict[str, Any] = {"type": snapshot_type}
    if action in ("execute", "stop"):
        data["data-collections"] = list(data_collections)
    if action == "execute" and conditions:
        data["additional-conditions"] = [{"data-collection": c, "filter": f} for c, f in conditions.items() if f]
    return Signal(sid, f"{action}-snapshot", data)


@dataclass(frozen=True)
class Notification:
    """A Debezium notification (``io.debezium.connector.common.Notification``)."""

    id: str
    aggregate_type: str
    type: str
    additional_data: dict[str, str]
    timestamp_ms: int

    @property
    def data_collection(self) -> str | None:
        data = self.additional_data
        return (
            data.get("data_collection") or data.get("scanned_collection") or data.get("current_collection_in_progress")
        )


def metadata_document(value: bytes | str, schema_lookup: SchemaLookup | None, what: str) -> Any:
    """The document of a Debezium metadata record value (a notification, a transaction's
    ``BEGIN``/``END``): Confluent-framed Avro read with ``schema_lookup`` (the schema registry's
    writer schemas) when the value starts with the magic byte, else ``JsonConverter`` JSON, its
    ``payload`` when it has the schema envelope.

    Raises:
        ConfigError: an Avro value without ``schema_lookup`` (``what`` names the records), or a
            registry config that is wrong (from ``schema_lookup``).
        SchemaRegistryUnavailableError: the registry does not answer (from ``schema_lookup``).
        ValueError, SchemaError, UnknownSchemaIdError: a value that does not decode.
    """
    if is_framed(value):
        if schema_lookup is None:
            raise ConfigError(f"Debezium's {what} are Avro: {NO_SCHEMA_REGISTRY}")
        return read_value(value, schema_lookup)[2]
    doc = json.loads(value)
    if isinstance(doc, dict) and "payload" in doc and "schema" in doc:
        return doc["payload"]
    return doc


def parse_notification(value: bytes | str | None, schema_lookup: SchemaLookup | None = None) -> Notification | None:
    """Parse a notification record value (JsonConverter, with or without the schema envelope; or
    Confluent-framed Avro, read with ``schema_lookup``, the schema registry's writer schemas, when
    the value starts with the magic byte: :func:`cdclake.model.avro.is_framed`); ``None`` for a
    tombstone or a value that is not a notification (nor readable: a schema id the registry does not
    have, bytes that do not decode).

    Raises:
        ConfigError: an Avro value without ``schema_lookup`` (no schema registry configured), or
            a registry config that is wrong (from ``schema_lookup``).
        SchemaRegistryUnavailableError: the registry does not answer (from ``schema_lookup``).
    """
    if value is None:
        return None
    try:
        doc = metadata_document(value, schema_lookup, "notifications")
    except ConfigError:  # no registry, or its URL or config is wrong
        raise
    except (ValueError, SchemaError, UnknownSchemaIdError):
        return None
    if not isinstance(doc, dict) or "type" not in doc or "aggregate_type" not in doc:
        return None
    return Notification(
        id=str(doc.get("id", "")),
        aggregate_type=str(doc["aggregate_type"]),
        type=str(doc["type"]),
        additional_data={str(k): str(v) for k, v in (doc.get("additional_data") or {}).items()},
        timestamp_ms=int(doc.get("timestamp") or 0),
    )


def belongs_to(n: Notification, signal_ids: list[str], snapshot_type: str, since_ms: int) -> bool:
    """Whether notification ``n`` reports on the snapshot started by one of ``signal_ids``.

    Incremental snapshot notifications carry the signal's id. A blocking snapshot reports through
    the connector's snapshot notifications, whose ids are not the signal's: those are matched by
    time (at or after ``since_ms``, when the signal was sent).
    """
    if n.aggregate_type == "Incremental Snapshot":
        return n.id in signal_ids
    if snapshot_type == "blocking" and n.aggregate_type in ("Initial Snapshot", "Blocking Snapshot"):
        return n.timestamp_ms >= since_ms
    return False


def match_notification(
    message: Any,
    signal_ids: list[str],
    snapshot_type: str,
    since_ms: int,
    data_collections: list[str],
    schema_lookup: SchemaLookup | None = None,
) -> dict[str, Any] | None:
    """The test of the bootstrap DAG's notification wait (its ``apply_function``,
    :func:`cdclake_airflow.bootstrap_dag.match_notification`): a dict (which fires the trigger)
    when ``message`` ends the snapshot (``COMPLETED``, ``ABORTED``) or reports a failed table scan
    of one of ``data_collections``; ``None`` (keep waiting) otherwise. ``schema_lookup``: as
    :func:`parse_notification`'s."""
    n = parse_notification(message.value(), schema_lookup)
    if n is None or not belongs_to(n, list(signal_ids), snapshot_type, int(since_ms)):
        return None
    failed_scan = (
        n.type == "TABLE_SCAN_COMPLETED"
        and n.additional_data.get("status") in FAILED_SCAN_STATUSES
        and n.data_collection in data_collections
    )
    if n.type in ("COMPLETED", "ABORTED") or failed_scan:
        return {
            "id": n.id,
            "type": n.type,
            "aggregate_type": n.aggregate_type,
            "additional_data": n.additional_data,
            "timestamp": n.timestamp_ms,
            "partition": message.partition(),
            "offset": message.offset(),
        }
    return None


def scan_results(
    notifications: list[Notification],
    signal_ids: list[str],
    snapshot_type: str,
    since_ms: int,
    data_collections: list[str],
) -> dict[str, str]:
    """``{data collection: status}`` from the snapshot's ``TABLE_SCAN_COMPLETED`` notifications;
    a table the snapshot did not report on is absent."""
    results: dict[str, str] = {}
    for n in notifications:
        if n.type == "TABLE_SCAN_COMPLETED" and belongs_to(n, signal_ids, snapshot_type, since_ms):
            name = n.data_collection
            if name in data_collections:
                results[name] = n.additional_data.get("status", "SUCCEEDED")
    return results


def check_scan(end: dict[str, Any], results: dict[str, str], data_collections: list[str]) -> None:
    """Raise unless the snapshot ended with ``COMPLETED`` and no table scan failed.

    Raises:
        SnapshotError: naming each failed table and its status (``NO_PRIMARY_KEY``: the table has
            no primary key and no ``snapshot.key.columns`` for it; ``SQL_EXCEPTION``: the
            connector's chunk query failed, e.g. a bad ``additional-conditions`` filter;
            ``UNKNOWN_SCHEMA``: the connector has no schema for the table, e.g. it is not in its
            include lists), or the snapshot being aborted.
    """
    failed = {t: s for t, s in results.items() if s in FAILED_SCAN_STATUSES}
    if end.get("type") == "TABLE_SCAN_COMPLETED" and not failed:
        data = end.get("additional_data") or {}
        failed[data.get("data_collection") or data.get("scanned_collection") or "?"] = data.get("status", "?")
    if failed:
        detail = ", ".join(f"{t}: {s}" for t, s in sorted(failed.items()))
        raise SnapshotError(f"snapshot {end.get('id')} failed for {detail}")
    if end.get("type") == "ABORTED":
        raise SnapshotError(
            f"snapshot {end.get('id')} was ABORTED (a stop-snapshot signal, or the connector gave up); "
            f"tables reported: {results or 'none'}"
        )


def caught_up(committed: dict[int, int] | None, end_offsets: dict[int, int]) -> bool:
    """Whether a table's committed offsets (next offset to read per partition, from its Iceberg
    snapshot summary) have reached ``end_offsets`` (the data topic's high watermarks noted when
    the snapshot completed). An empty partition needs nothing."""
    committed = committed or {}
    return all(committed.get(p, 0) >= end for p, end in end_offsets.items() if end > 0)
