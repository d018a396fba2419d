"""One discovery pass: the cluster's topics against the table config's ``discover`` patterns, the
primary key of each new topic read from its first record's key, and the registry updated
(:mod:`cdclake.model.discovery`). What the ``cdc_discovery`` DAG runs and ``cdclake discover``
shows (a dry run unless asked to write).

A new topic with no record to read yet (all expired, or created ahead of its first event) takes
its primary key from the source table's latest ``tableChanges`` entry in the connector's
schema-change topic (``primaryKeyColumnNames``, through the schema-change index); without one
(no schema-change topic, or the table is not in it) it is ``pending``: it is registered by the
first pass that finds a record in it or its ``tableChanges``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from cdclake.errors import ConfigError, SchemaError
from cdclake.io.kafka import KafkaClients, read_partition, topics_watermarks
from cdclake.io.kafka_auth import TIMEOUT_S
from cdclake.model.discovery import Candidate, first_match, key_columns, read_registry, write_registry

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from cdclake.model.config import TablesFile

log = logging.getLogger(__name__)

State = Literal["registered", "new", "pending", "excluded", "configured", "left_out"]
"""What a pass found of a topic: ``registered`` (in the registry already: a table), ``new``
(registered by this pass, or to be with ``write``), ``pending`` (no record to read its key from
yet), ``excluded`` (an include or exclude list keeps it out, or its key is not Debezium's),
``configured`` (an entry of ``tables`` has its topic), ``left_out`` (registered, but its table
would be invalid or clash with another: :meth:`~cdclake.model.config.TablesFile.discovered`)."""


@dataclass(frozen=True)
class Finding:
    """One topic of a pattern's scope, as a pass found it.

    Attributes:
        topic: the Debezium data topic.
        state: see :data:`State`.
        name: the table's name (DAG ``cdc_<name>``); ``""`` when it is none.
        identifier: the Iceberg ``namespace.table``; ``""`` when it is none.
        primary_key: the key columns; ``()`` for a changelog table or when unknown.
        reason: why excluded, pending or left out; ``"topic gone"`` for a registered topic no
            longer in Kafka (a dropped source table: its table and DAG stay); else ``""``.
        dag_id: the DAG that applies the table on schedule (``cdc_<name>``, or its shared DAG
            ``cdc_shared_<shared_dag>``); ``""`` when it is none.
    """

    topic: str
    state: State
    name: str = ""
    identifier: str = ""
    primary_key: tuple[str, ...] = ()
    reason: str = ""
    dag_id: str = ""


def topic_names(kafka: KafkaClients) -> list[str]:
    """Every topic of the cluster (one metadata request of an ``AdminClient``), sorted."""
    return sorted(kafka.admin().list_topics(timeout=TIMEOUT_S).topics)


def first_key(kafka: KafkaClients, topics: list[str]) -> dict[str, bytes | None]:
    """The key of the first record of each of ``topics`` that holds one (a topic without a record
    is absent; ``None``: the record has no key)."""
    keys: dict[str, bytes | None] = {}
    for topic, marks in topics_watermarks(kafka, topics).items():
        if marks is None:  # deleted since listed
            continue
        for p in sorted(marks.high):
            # one record is enough: Debezium keys every record of a table alike (or none)
            for msg in read_partition(kafka, topic, p, marks.low[p], marks.high[p], group_id="cdclake-discovery"):
                keys[topic] = msg.key()
                break
            if topic in keys:
                break
    return keys


def table_changes_key(catalog: Catalog, schema_topic: str, table_id: str) -> tuple[str, ...] | None:
    """The primary key of source table ``table_id`` (``"db"."table"``) in its latest
    ``tableChanges`` entry of schema-change topic ``schema_topic`` (Debezium's
    ``primaryKeyColumnNames``; ``()``: the table has none), read from the schema-change index
    (:mod:`cdclake.pipeline.schema_index`; call :func:`~cdclake.pipeline.schema_index.catch_up`
    first). ``None``: the topic does not name the table, or its latest change drops or renames it.
    """
    from cdclake.model.schema_changes import changes_from_record
    from cdclake.pipeline.schema_index import indexed_records

    latest = None
    for partition, offset, value in indexed_records(catalog, schema_topic, table_id):
        for change in changes_from_record(value, table_id, partition, offset):
            if latest is None or change.position >= latest.position:
                latest = change
    if latest is None or latest.kind in ("DROP", "RENAME"):
        return None
    return latest.primary_key


def _keys_from_table_changes(
    tables: TablesFile, catalog: Catalog, kafka: KafkaClients, topics: list[str]
) -> dict[str, tuple[str, ...]]:
    """The primary key of each of ``topics`` (data topics without a record) that its connector's
    schema-change topic knows (:func:`table_changes_key`); each schema-change topic is caught up
    once."""
    from cdclake.pipeline.schema_index import catch_up

    made, _ = tables.discovered(dict.fromkeys(topics, ()))
    caught_up: dict[str, bool] = {}
    keys: dict[str, tuple[str, ...]] = {}
    for cfg in made:
        topic = cfg.schema_change_topic
        if topic not in caught_up:
            caught_up[topic] = catch_up(catalog, kafka, topic) is not None
        if not caught_up[topic]:
            continue  # no schema-change topic (include.schema.changes=false)
        key = table_changes_key(catalog, topic, cfg.source_table_id)
        if key is not None:
            keys[cfg.topic] = key
    return keys


def discover(
    tables: TablesFile,
    kafka: KafkaClients,
    registry: Path,
    *,
    write: bool,
    now_ms: int,
    catalog: Catalog | None = None,
) -> list[Finding]:
    """Match the cluster's topics against ``tables.discover``, read the primary key of each new
    one (its first record's key; for a topic without a record, its ``tableChanges`` through
    ``catalog``'s schema-change index, when ``catalog`` is given), and with ``write`` add them to
    ``registry`` (atomically).

    Returns:
        One finding per topic of a pattern's scope and per registered topic, in topic order.

    Raises:
        ConfigError: the registry is not one; an Avro key without a schema registry.
        confluent_kafka.KafkaException: the cluster did not answer within
            :data:`~cdclake.io.kafka_auth.TIMEOUT_S`.
    """
    registered = read_registry(registry)
    present = topic_names(kafka)
    configured = {t.topic: t for t in tables.tables}
    findings: dict[str, Finding] = {}
    fresh: list[str] = []
    for topic in present:
        match = first_match(tables.discover, topic)
        if match is None:
            continue
        if topic in configured:
            cfg = configured[topic]
            findings[topic] = Finding(
                topic, "configured", cfg.name, cfg.identifier, cfg.primary_key, dag_id=cfg.scheduled_dag_id
            )
        elif not isinstance(match[1], Candidate):  # registered or not: its DAG is not built
            findings[topic] = Finding(topic, "excluded", reason=match[1].reason)
        elif topic not in registered:
            fresh.append(topic)
    added: dict[str, tuple[str, ...]] = {}
    for topic, key in first_key(kafka, fresh).items():
        try:
            added[topic] = key_columns(key, kafka.schema_lookup)
        except SchemaError as e:
            findings[topic] = Finding(topic, "excluded", reason=str(e))
        except ConfigError as e:
            raise ConfigError(f"topic {topic!r}: {e}") from e
    unread = [t for t in fresh if t not in added and t not in findings]
    if unread and catalog is not None:
        added.update(_keys_from_table_changes(tables, catalog, kafka, unread))
    for topic in fresh:
        if topic not in added and topic not in findings:
            findings[topic] = Finding(
                topic, "pending", reason="no record to read its key from yet, and no tableChanges of its table"
            )
    if write and added:
        write_registry(registry, added, now_ms=now_ms)
        log.info("registered %d new topic(s): %s", len(added), sorted(added))
    made, left_out = tables.discovered({**registered, **added})
    for cfg in made:
        state: State = "new" if cfg.topic in added else "registered"
        gone = "topic gone" if cfg.topic not in present else ""
        findings[cfg.topic] = Finding(
            cfg.topic, state, cfg.name, cfg.identifier, cfg.primary_key, gone, dag_id=cfg.scheduled_dag_id
        )
    for topic, why in left_out.items():
        findings[topic] = Finding(topic, "left_out", reason=why)
    return [findings[t] for t in sorted(findings)]
