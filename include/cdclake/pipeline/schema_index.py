"""The schema-change index: the connector's schema-change topic, read from Kafka once per cycle
and kept per table in the Iceberg table :data:`SCHEMA_CHANGE_INDEX_TABLE`, so that a table's
schema sync reads only the records that may concern it (pyiceberg, Kafka; no Spark).

One row per (record, table name the record may concern): the names of its ``tableChanges[].id``
(``"db"."table"``, the name without its database) and both names of every table rename in its
DDL. A record that cannot be sorted out without knowing the table (its DDL cannot be parsed, it is
not a schema-change event, or its position is malformed) gets one row whose ``table_name`` is
NULL: every table's read includes it, and
:func:`~cdclake.model.schema_changes.changes_from_record` re-evaluates it exactly as a full read
of the topic would. Records that concern no table (``SET``, ``CREATE DATABASE``, Kafka tombstones)
get no row. The name is a superset key: the exact filter stays ``changes_from_record``.

A connector writing Avro (Confluent wire format) writes its schema-change records so too: a value
that starts with the magic byte is read with the schema registry of the Kafka clients and indexed
as the JSON ``JsonConverter`` would have written (:func:`json_value`), so that everything
downstream reads one format.

The offsets indexed so far are in the snapshot summary of each commit (key
:data:`~cdclake.model.layout.SCHEMA_INDEX_OFFSETS_KEY`), so rows and offsets move together in ONE
commit. Several tables' tasks catch up at once: each commit asserts the snapshot it read the
offsets from, a commit that loses the race is retried from the winner's offsets, and no record is
indexed twice. pyiceberg's own commit retry (which would re-apply the loser's append on top of the
winner's, indexing its records twice) is switched off on this table
(``commit.retry.num-retries=0``); the retry here starts over from the new offsets.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from cdclake.errors import ConfigError, SchemaChangeError, SchemaError, TopicNotFoundError, UnknownSchemaIdError
from cdclake.io.catalog import load_table_or_none
from cdclake.io.kafka import KafkaClients, read_partition, topic_watermarks
from cdclake.io.refs import ancestry
from cdclake.io.schema_evolution import iceberg_type
from cdclake.model.avro import is_framed, read_value
from cdclake.model.config import NO_SCHEMA_REGISTRY
from cdclake.model.ddl import ddl_effects
from cdclake.model.layout import SCHEMA_INDEX_OFFSETS_KEY, SIDE_TABLE_PROPERTIES
from cdclake.model.position import ORDERINGS, BinlogPosition
from cdclake.model.schema_changes import gap_value, split_table_id

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

SCHEMA_CHANGE_INDEX_TABLE = "cdc_ops.schema_change_index"
"""The Iceberg table holding the index of every schema-change topic (one per deployment)."""

INDEX_COLUMNS: tuple[tuple[str, str, bool, str], ...] = (
    ("topic", "string", True, "schema-change topic of the record"),
    ("partition", "int", True, "Kafka partition of the record"),
    ("offset", "long", True, "Kafka offset of the record"),
    (
        "table_name",
        "string",
        False,
        "a source table name (without its database) the record may concern; null: every table must read it",
    ),
    ("value", "string", True, "the record value (UTF-8 JSON text; an Avro value as JSON)"),
)
"""``(name, Iceberg type, required, doc)`` of the index table's columns."""

INDEX_TABLE_PROPERTIES: Mapping[str, str] = MappingProxyType({**SIDE_TABLE_PROPERTIES, "commit.retry.num-retries": "0"})
"""Properties of the index table: a lost commit race must come back to :func:`catch_up` (which
re-reads the offsets), not be re-applied by pyiceberg on top of the winner's commit."""

COMMIT_ATTEMPTS = 10
"""Catch-up attempts (each from the offsets of the newest commit) before a lost race is raised."""

_GROUP_ID = "cdclake-schema-index"


@dataclass(frozen=True)
class CatchUpResult:
    """What one :func:`catch_up` did.

    Attributes:
        topic: the schema-change topic.
        records_read: Kafka records read by the attempt that committed (0 when nothing was new).
        rows_added: index rows appended (a record concerning two tables adds two, one concerning
            none adds none).
        offsets: ``{partition: next offset}`` indexed for the topic after the catch-up.
        rebuilt: the topic's rows were deleted and reindexed from its low watermarks (the topic
            was recreated: a high watermark below the indexed offset).
    """

    topic: str
    records_read: int
    rows_added: int
    offsets: dict[int, int]
    rebuilt: bool = False


def record_table_names(value: bytes | str) -> tuple[str | None, ...]:
    """The index keys of one schema-change record value: the table names it may concern.

    Returns:
        The sorted names (without database) of its ``tableChanges[].id`` and of both sides of
        every table rename in its DDL; ``()`` when it concerns no table; ``(None,)`` when every
        table must evaluate it (its DDL cannot be parsed, it is not valid UTF-8 JSON, not a
        Debezium schema-change event, or its position is malformed in some ordering):
        :func:`~cdclake.model.schema_changes.changes_from_record` then raises, or not, per table
        exactly as on a full read of the topic.
    """
    everyone: tuple[str | None, ...] = (None,)
    try:
        doc = json.loads(value)
    except ValueError:  # not UTF-8, not JSON
        return everyone
    if isinstance(doc, dict) and "payload" in doc and "ddl" not in doc:
        doc = doc["payload"]
    if not isinstance(doc, dict) or not isinstance(doc.get("source"), dict):
        return everyone
    for ordering in ORDERINGS:
        try:
            BinlogPosition.from_source(doc["source"], "c", ordering)
        except ValueError:
            return everyone
    names: set[str] = set()
    for change in doc.get("tableChanges") or ():
        if not isinstance(change, dict):
            return everyone
        table_id = change.get("id")
        if isinstance(table_id, str):
            names.add(split_table_id(table_id)[1])
    ddl = doc.get("ddl") or ""
    try:
        effects = ddl_effects(ddl)
    except Exception:  # DdlParseError, or anything else: every table's read meets it as today
        return everyone
    for rename in effects.table_renames:
        names.update((rename.old.name, rename.new.name))
    return tuple(sorted(names))


def ensure_index_table(catalog: Catalog) -> Table:
    """The index table :data:`SCHEMA_CHANGE_INDEX_TABLE`, created (with its namespace) unless it
    exists; a concurrent creator's table is loaded."""
    from pyiceberg.exceptions import TableAlreadyExistsError
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    table = load_table_or_none(catalog, SCHEMA_CHANGE_INDEX_TABLE)
    if table is not None:
        return table
    namespace = SCHEMA_CHANGE_INDEX_TABLE.rsplit(".", 1)[0]
    try:
        catalog.create_namespace_if_not_exists(namespace)
    except Exception:  # a concurrent creator won: the SQL catalog raises its driver's IntegrityError
        if not catalog.namespace_exists(namespace):
            raise
    fields = [
        NestedField(i, name, iceberg_type(typ), required=required, doc=doc)
        for i, (name, typ, required, doc) in enumerate(INDEX_COLUMNS, start=1)
    ]
    try:
        table = catalog.create_table(
            SCHEMA_CHANGE_INDEX_TABLE, schema=Schema(*fields), properties=dict(INDEX_TABLE_PROPERTIES)
        )
    except TableAlreadyExistsError:
        return catalog.load_table(SCHEMA_CHANGE_INDEX_TABLE)
    log.info("created the schema-change index table %s", SCHEMA_CHANGE_INDEX_TABLE)
    return table


def indexed_offsets(table: Table) -> dict[str, dict[int, int]]:
    """``{topic: {partition: next offset}}`` indexed so far: the summary of the newest snapshot in
    the current snapshot's ancestry that carries :data:`SCHEMA_INDEX_OFFSETS_KEY` (a maintenance
    snapshot, which adds no record, is walked past); ``{}`` for an empty index."""
    for _, _, summary in ancestry(table):
        text = None if summary is None else summary.get(SCHEMA_INDEX_OFFSETS_KEY)
        if text is not None:
            doc = json.loads(text)
            return {topic: {int(p): int(o) for p, o in offsets.items()} for topic, offsets in doc.items()}
    return {}


def catch_up(catalog: Catalog, kafka: KafkaClients, topic: str) -> CatchUpResult | None:
    """Index the records of schema-change ``topic`` written since the last catch-up: those between
    the indexed offsets and the high watermarks, appended in ONE commit with the new offsets.

    A commit that loses the race to a concurrent catch-up is retried (up to
    :data:`COMMIT_ATTEMPTS` times) from the offsets the winner committed. When a partition's high
    watermark is below its indexed offset (or an indexed partition is gone), the topic was
    recreated: a WARNING is logged and the topic's rows are deleted and reindexed from the low
    watermarks, in one transaction. Logs one INFO line (records read, offsets).

    Returns:
        What was done, or ``None`` when the topic does not exist (nothing indexed).

    Raises:
        pyiceberg.exceptions.CommitFailedException: the race was lost :data:`COMMIT_ATTEMPTS` times.
        TimeoutError, confluent_kafka.KafkaException: reading the topic failed
            (:func:`~cdclake.io.kafka.read_partition`).
    """
    from pyiceberg.exceptions import CommitFailedException
    from tenacity import (
        Retrying,
        before_sleep_log,
        retry_if_exception_type,
        stop_after_attempt,
        wait_random_exponential,
    )

    table = ensure_index_table(catalog)
    retrying = Retrying(
        retry=retry_if_exception_type(CommitFailedException),
        stop=stop_after_attempt(COMMIT_ATTEMPTS),
        wait=wait_random_exponential(multiplier=0.05, max=2.0),
        before_sleep=before_sleep_log(log, logging.INFO),
        reraise=True,
    )
    try:
        return retrying(_catch_up_once, table, kafka, topic)
    except TopicNotFoundError:
        return None


def _catch_up_once(table: Table, kafka: KafkaClients, topic: str) -> CatchUpResult:
    """One attempt: the offsets of the newest commit, then the watermarks (read after them, so a
    concurrent winner's offsets are never above a live topic's high watermarks), then the records."""
    import pyarrow as pa
    from pyiceberg.expressions import EqualTo, Reference
    from pyiceberg.expressions.literals import literal

    table.refresh()
    offsets = indexed_offsets(table)
    indexed = offsets.get(topic, {})
    marks = topic_watermarks(kafka, topic)
    recreated = {p: o for p, o in indexed.items() if p not in marks.high or marks.high[p] < o}
    if recreated:
        log.warning(
            "schema-change topic %r was recreated: indexed up to %s, high watermarks now %s; "
            "rebuilding its index rows from the low watermarks %s",
            topic,
            _offsets_text(indexed),
            _offsets_text(marks.high),
            _offsets_text(marks.low),
        )
        start = dict(marks.low)
        gaps: dict[int, tuple[int, int]] = {}
    else:
        start = {p: max(indexed.get(p, marks.low[p]), marks.low[p]) for p in marks.high}
        gaps = {p: (indexed[p], marks.low[p]) for p in marks.high if p in indexed and indexed[p] < marks.low[p]}
    for partition, gap in sorted(gaps.items()):
        log.warning(
            "schema-change topic %r partition %d: offsets %d to %d were deleted by retention before they were "
            "indexed; every table of this topic stops until its schema is checked (docs/operations.md, "
            '"Schema changes lost to retention")',
            topic,
            partition,
            gap[0],
            gap[1] - 1,
        )
    if not recreated and not gaps and all(start[p] >= marks.high[p] for p in marks.high):
        log.info(
            "schema-change index: topic %r: read 0 records (indexed up to %s, the high watermarks)",
            topic,
            _offsets_text(indexed),
        )
        return CatchUpResult(topic, 0, 0, dict(marks.high))
    read = 0
    rows: list[dict[str, Any]] = [
        {"topic": topic, "partition": p, "offset": gap[0], "table_name": None, "value": gap_value(*gap)}
        for p, gap in sorted(gaps.items())
    ]
    for partition, offset, value in _records(kafka, topic, start, marks.high):
        read += 1
        if value is None:  # a Kafka tombstone: skipped by schema sync, concerns no table
            continue
        value = json_value(kafka, topic, partition, offset, value)
        text = value.decode("utf-8", errors="replace")
        names = record_table_names(value)
        rows.extend(
            {"topic": topic, "partition": partition, "offset": offset, "table_name": name, "value": text}
            for name in names
        )
    offsets[topic] = dict(marks.high)
    properties = {
        SCHEMA_INDEX_OFFSETS_KEY: json.dumps(
            {t: {str(p): o for p, o in sorted(parts.items())} for t, parts in sorted(offsets.items())}
        )
    }
    frame = pa.Table.from_pylist(rows, schema=table.schema().as_arrow())
    with table.transaction() as txn:
        if recreated:
            txn.delete(EqualTo(term=Reference("topic"), value=literal(topic)), snapshot_properties=properties)
        txn.append(frame, snapshot_properties=properties)
    log.info(
        "schema-change index: topic %r: read %d record(s) from offsets %s to %s, added %d row(s)%s",
        topic,
        read,
        _offsets_text(start),
        _offsets_text(marks.high),
        len(rows),
        " (rebuilt)" if recreated else "",
    )
    return CatchUpResult(topic, read, len(rows), dict(marks.high), bool(recreated))


def _records(
    kafka: KafkaClients, topic: str, start: dict[int, int], end: dict[int, int]
) -> Iterator[tuple[int, int, bytes | None]]:
    for partition in sorted(end):
        for msg in read_partition(kafka, topic, partition, start[partition], end[partition], group_id=_GROUP_ID):
            value = msg.value()
            yield partition, msg.offset() or 0, value if isinstance(value, bytes) or value is None else value.encode()


def json_value(kafka: KafkaClients, topic: str, partition: int, offset: int, value: bytes) -> bytes:
    """``value``, or, when it is Confluent-framed Avro (:func:`cdclake.model.avro.is_framed`), its
    datum as the JSON ``JsonConverter`` writes with ``schemas.enable=false`` (UTF-8).

    Raises:
        ConfigError: an Avro value and the Kafka clients have no schema registry, or its config
            is wrong.
        SchemaChangeError: an Avro value that cannot be read (bad framing, a schema id the registry
            does not have, bytes that do not decode); names topic, partition, offset and the id.
            Every table's schema sync would stop on it, as on any unreadable schema-change record.
        SchemaRegistryUnavailableError: the registry does not answer (a retry may succeed).
    """
    if not is_framed(value):
        return value
    where = f"schema-change topic {topic!r} partition {partition} offset {offset}"
    if kafka.schema_lookup is None:
        raise ConfigError(f"{where} holds Avro values: {NO_SCHEMA_REGISTRY}")
    try:
        doc = read_value(value, kafka.schema_lookup)[2]
    except ConfigError:  # the registry's URL or config is wrong: not the record's fault
        raise
    except (ValueError, SchemaError, UnknownSchemaIdError) as e:
        raise SchemaChangeError(
            f"{where}: the Avro schema-change record cannot be read: {e}. Every table's schema sync needs it"
        ) from e
    return json.dumps(doc).encode()


def _offsets_text(offsets: dict[int, int]) -> str:
    return json.dumps({str(p): o for p, o in sorted(offsets.items())})


def indexed_records(catalog: Catalog, topic: str, table_id: str) -> list[tuple[int, int, str]]:
    """``(partition, offset, value)`` of the indexed records of ``topic`` that may concern
    ``table_id`` (``"db"."table"``): those keyed by its name, and those every table must read;
    one per record, in (partition, offset) order. Reads the index only (call :func:`catch_up`
    first); ``[]`` when the index table does not exist."""
    from pyiceberg.expressions import And, EqualTo, IsNull, Or, Reference
    from pyiceberg.expressions.literals import literal

    table = load_table_or_none(catalog, SCHEMA_CHANGE_INDEX_TABLE)
    if table is None:
        return []
    name = split_table_id(table_id)[1]
    row_filter = And(
        EqualTo(term=Reference("topic"), value=literal(topic)),
        Or(EqualTo(term=Reference("table_name"), value=literal(name)), IsNull(term=Reference("table_name"))),
    )
    rows = table.scan(row_filter=row_filter, selected_fields=("partition", "offset", "value")).to_arrow()
    records = {(r["partition"], r["offset"]): r["value"] for r in rows.to_pylist()}
    return [(p, o, v) for (p, o), v in sorted(records.items())]
