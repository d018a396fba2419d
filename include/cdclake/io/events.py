"""Captured Debezium event files -> Kafka, keyed and partitioned as Debezium would.

The demo and the tests load real captured events (``examples/debezium/``,
``tests/fixtures/debezium/``) with :func:`load_events`.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdclake.errors import BadRecordError
from cdclake.io.kafka import KafkaClients, ensure_topic, produce
from cdclake.model.config import TableConfig
from cdclake.model.envelope import KafkaCoordinates, parse_table_value
from cdclake.model.keys import build_key, key_fields

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FileLine(KafkaCoordinates):
    """An event of a captured file, not in Kafka yet: errors name its file and the line it starts on."""

    path: str = ""
    line: int = 0

    def __str__(self) -> str:
        return f"{self.path}, line {self.line}"


def read_event_file(path: Path) -> list[bytes]:
    """The event values of a captured file, as bytes exactly as written (:func:`read_event_lines`
    without the line numbers).

    Raises:
        ValueError: the file holds text that is not a JSON document (names the file and line).
    """
    return [value for _, value in read_event_lines(path)]


def read_event_lines(path: Path) -> list[tuple[int, bytes]]:
    """``(line number, value)`` of each event of a captured file: the 1-based line its JSON
    document starts on, the value as bytes exactly as written.

    Accepts JSON lines (one event per line) and files of concatenated, possibly pretty-printed,
    JSON documents; blank lines are skipped.

    Raises:
        ValueError: the file holds text that is not a JSON document (names the file and line).
    """
    text = path.read_text()
    decoder = json.JSONDecoder()
    values: list[tuple[int, bytes]] = []
    line, counted = 1, 0
    idx = 0
    while idx < len(text):
        while idx < len(text) and text[idx].isspace():
            idx += 1
        if idx >= len(text):
            break
        try:
            _, end = decoder.raw_decode(text, idx)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}, line {e.lineno}: not JSON: {e.msg}") from None
        line += text.count("\n", counted, idx)
        counted = idx
        values.append((line, text[idx:end].encode()))
        idx = end
    return values


def load_events(path: Path, table: TableConfig, kafka: KafkaClients, *, partitions: int = 1) -> Counter[int]:
    """Produce the events of a captured file to ``table.topic`` as Debezium would.

    Values are sent byte for byte as in the file; keys are built from the primary key in
    Debezium's key format (:func:`cdclake.model.keys.build_key`) and partitioned by Kafka's
    default partitioner (murmur2 of the key bytes, as Kafka Connect's producer does), so that all
    events of a key land in one partition in file order. The topic is created with ``partitions``
    partitions if it does not exist.

    Returns:
        Number of records produced per partition.

    Raises:
        ValueError: the file holds text that is not JSON (names the file and the line).
        BadRecordError: an event is not a valid envelope of the table's ``value_format``, or lacks
            a primary-key column (names the file and the line it starts on, :class:`FileLine`).
            Every event is checked before any is produced.
        RuntimeError: the broker rejected a record.
        confluent_kafka.KafkaException: every broker is down (code ``_ALL_BROKERS_DOWN``, about a
            second after the events were checked), or the broker did not answer.
    """
    records: list[tuple[bytes | None, bytes | None, None]] = []
    events = []
    known: dict[str, dict[str, Any]] = {}  # key columns' fields from the events with a schema
    for line, value in read_event_lines(path):
        where = FileLine(table.topic, path=str(path), line=line)
        event = parse_table_value(table, value, where, kafka.schema_lookup)
        if event is not None:
            known.update({c: f for c, f in key_fields(event).items() if c in table.primary_key and c not in known})
        events.append((where, value, event))
    for where, value, event in events:
        try:
            key = (
                None
                if event is None or event.op == "t"
                else build_key(event, table.primary_key, table.value_format, known)
            )
        except ValueError as e:
            raise BadRecordError(where, str(e)) from None
        records.append((key, value, None))
    ensure_topic(kafka, table.topic, partitions, give_up_when_down=True)  # a loader says so at once

    # the broker's first idempotent producer may be told to retry while the transaction
    # coordinator loads; librdkafka retries by itself
    delivered = produce(kafka, table.topic, iter(records), partitioner="murmur2_random", **{"linger.ms": 5})
    counts = Counter(partition for partition, _ in delivered)
    log.info("produced %d event(s) of %s to %r", len(delivered), path, table.topic)
    return counts
