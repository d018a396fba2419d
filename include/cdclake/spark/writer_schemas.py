"""The writer schemas of a batch of Avro values (Confluent wire format, a schema registry) and
the schema ids of its records (Spark).

A batch is parsed (:func:`cdclake.spark.parse_avro.parse_avro_records`) with a writer schema for
each schema id it holds. Two ways to know them: the schemas of the newest versions of the topic's
value subject in the registry (:func:`subject_writer_schemas`; no Spark job), checked against the
ids the parse found by the statistics pass (:func:`id_aggregates`, :func:`batch_writers_of`) or, for
a batch holding other ids, by a job over the parse's cache (:func:`batch_writer_schemas`); or the
ids read from the records' headers first (:func:`read_writer_schemas`, one more read of the
batch), when the registry has no subject of the topic's name. :func:`writer_schemas_for` picks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cdclake.errors import SchemaError, SchemaRegistryUnavailableError, UnknownSchemaIdError
from cdclake.model.avro import HEADER_BYTES, MAGIC_BYTE, connect_schema, wire_header
from cdclake.model.flattened import FlattenedRecords, envelope_schema
from cdclake.spark.flat import first_of

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from cdclake.io.kafka import KafkaClients
    from cdclake.io.registry import SchemaRegistry
    from cdclake.model.config import TableConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WriterSchemas:
    """The writer schemas of a batch's records.

    Attributes:
        schemas: schema id -> the Avro writer schema (parsed JSON), for the ids the registry knows.
        unusable: schema id -> why its schema in the registry cannot read its records (not an
            Avro record schema); an id the registry does not have is in neither.
        first: schema id -> ``(partition, offset)`` of the batch's first record of that id
            (every id of the batch).
        first_in_partition: schema id -> ``{partition: offset}`` of the first record of that id
            in each partition holding one.
    """

    schemas: Mapping[int, Any]
    unusable: Mapping[int, str] = field(default_factory=dict)
    first: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    first_in_partition: Mapping[int, Mapping[int, int]] = field(default_factory=dict)
    complete: bool = True
    """The ids are the batch's (with their first records); ``False``: the schemas of the topic's
    newest versions in the registry (:func:`subject_writer_schemas`), the batch not read yet."""

    def covers(self, other: WriterSchemas) -> bool:
        """Whether these hold every schema and every reason ``other`` holds: a batch whose ids are
        ``other``'s, parsed with these, needs no second parse."""
        return set(other.schemas) <= set(self.schemas) and set(other.unusable) <= set(self.unusable)

    def row_schemas(
        self, flattened: FlattenedRecords | None = None
    ) -> list[tuple[int, tuple[int, int], dict[str, Any]]]:
        """``(schema id, (partition, offset) of its first record, Connect row schema)`` of each
        known id whose writer schema has a row image (``after`` or ``before``; ``flattened``: the
        record's fields that are not the transform's), in the order of their first records
        (Kafka order: partition, offset)."""
        out = []
        for schema_id in sorted(self.schemas, key=lambda i: self.first.get(i, (0, 0))):
            try:
                row = row_schema(envelope_fields(envelope_connect_schema(self.schemas[schema_id], flattened)))
            except SchemaError:
                continue
            if row is not None:
                out.append((schema_id, self.first.get(schema_id, (0, 0)), row))
        return out


CANDIDATE_VERSIONS = 3
"""How many of the newest versions of a topic's value subject :func:`subject_writer_schemas`
gives: a batch's records are written with the latest schema, or the one before a DDL."""


def subject_writer_schemas(topic: str, registry: SchemaRegistry) -> WriterSchemas | None:
    """The writer schemas of the :data:`CANDIDATE_VERSIONS` newest versions of subject
    ``<topic>-value`` (:meth:`~cdclake.io.registry.SchemaRegistry.subject_schemas`), to decode a
    batch with before its ids are known (``complete`` false; :func:`batch_writer_schemas` then
    gives the batch's own, from the parse): the batch is read once, where
    :func:`read_writer_schemas` reads it once more first. ``None`` when the registry has no such
    subject (another naming strategy).

    Raises:
        SchemaRegistryUnavailableError, ConfigError: as the registry's.
    """
    schemas = registry.subject_schemas(f"{topic}-value", CANDIDATE_VERSIONS)
    return None if schemas is None else WriterSchemas(schemas, complete=False)


def read_writer_schemas(raw: DataFrame, writer_schema: Callable[[int], Any]) -> WriterSchemas:
    """The schema ids of ``raw``'s framed records (one Spark job over their 5-byte headers) and
    the writer schema of each, by ``writer_schema`` (the registry client's
    :meth:`~cdclake.io.registry.SchemaRegistry.writer_schema`).

    An id the registry does not have, or whose schema is not an Avro record, is left out of
    :attr:`WriterSchemas.schemas` (its records become bad records), unless no id of the batch is
    known: then :class:`~cdclake.errors.SchemaRegistryUnavailableError` (a wrong or emptied
    registry is a fault of the set-up; nothing is quarantined). Any other registry error
    propagates: :class:`~cdclake.errors.SchemaRegistryUnavailableError` (nothing is applied; the
    task's retry tries again), :class:`~cdclake.errors.ConfigError`.
    """
    headers = raw.filter(framed()).select(schema_id_of_value().alias("schema_id"), "partition", "offset")
    return _resolve(_first_offsets(headers), writer_schema, {})


def batch_writer_schemas(
    records: DataFrame, decoded_with: WriterSchemas, writer_schema: Callable[[int], Any]
) -> WriterSchemas:
    r""":func:`read_writer_schemas` of a batch parsed by :func:`parse_avro_records` (its
    ``schema_id`` column; one Spark job over the parse's cache): the schemas ``decoded_with``
    has are taken from it, the others read from the registry. The parse needs doing again when
    the result is not :meth:`~WriterSchemas.covers`\ ed by ``decoded_with``.

    Raises:
        SchemaRegistryUnavailableError, ConfigError: as :func:`read_writer_schemas`.
    """
    from pyspark.sql import functions as F

    ids = records.filter(F.col("schema_id").isNotNull()).select("schema_id", "partition", "offset")
    return _resolve(_first_offsets(ids), writer_schema, decoded_with.schemas)


MAX_ID_AGGREGATES = 256
"""The most first-offset aggregates (candidate ids x partitions) :func:`id_aggregates` adds to the
statistics pass; a topic of more partitions has its batch's ids read by a job of their own
(:func:`batch_writer_schemas`)."""

_OTHER_IDS = "_cdc_other_schema_ids"


def id_aggregates(candidates: WriterSchemas, partitions: Sequence[int]) -> dict[str, Column] | None:
    """Aggregates over a batch parsed by :func:`parse_avro_records` that give, for each id of
    ``candidates`` (:func:`subject_writer_schemas`), its first offset in each of ``partitions``
    (the range's), and how many records are of another id: added to the statistics pass
    (:func:`cdclake.spark.stats.batch_stats`), they give the batch's writer schemas without a
    Spark job of their own (:func:`batch_writers_of`). ``None`` beyond :data:`MAX_ID_AGGREGATES`.
    Declarative aggregates only (no set collected), which Spark runs in generated code.
    """
    from pyspark.sql import functions as F

    ids = sorted(candidates.schemas)
    if len(ids) * len(partitions) > MAX_ID_AGGREGATES:
        return None
    sid, partition = F.col("schema_id"), F.col("partition")
    out = {_OTHER_IDS: F.count_if(sid.isNotNull() & ~sid.isin(*ids))}
    for k, schema_id in enumerate(ids):
        for p in partitions:
            out[f"_cdc_first_{k}_{p}"] = F.min(F.when((sid == schema_id) & (partition == p), F.col("offset")))
    return out


def batch_writers_of(
    values: Mapping[str, Any],
    candidates: WriterSchemas,
    partitions: Sequence[int],
    writer_schema: Callable[[int], Any],
) -> WriterSchemas | None:
    """The batch's :class:`WriterSchemas` from the values of :func:`id_aggregates`, as
    :func:`batch_writer_schemas` gives them; ``None`` when the batch holds an id ``candidates``
    lack (whose first offsets the aggregates do not give: :func:`batch_writer_schemas` reads them)."""
    if values[_OTHER_IDS]:
        return None
    ids = sorted(candidates.schemas)
    in_partition: dict[int, dict[int, int]] = {}
    for k, schema_id in enumerate(ids):
        for p in partitions:
            offset = values[f"_cdc_first_{k}_{p}"]
            if offset is not None:
                in_partition.setdefault(schema_id, {})[p] = int(offset)
    return _resolve(in_partition, writer_schema, candidates.schemas)


def _first_offsets(ids: DataFrame) -> dict[int, dict[int, int]]:
    """schema id -> partition -> the first offset of ``ids``' rows (``schema_id``, ``partition``, ``offset``)."""
    from pyspark.sql import functions as F

    rows = ids.groupBy("schema_id", "partition").agg(F.min("offset").alias("offset")).collect()
    out: dict[int, dict[int, int]] = {}
    for r in rows:
        out.setdefault(int(r["schema_id"]), {})[int(r["partition"])] = int(r["offset"])
    return out


def _resolve(
    in_partition: dict[int, dict[int, int]], writer_schema: Callable[[int], Any], known: Mapping[int, Any]
) -> WriterSchemas:
    """The :class:`WriterSchemas` of a batch's ids and first offsets: each schema from ``known``
    or ``writer_schema`` (see :func:`read_writer_schemas`)."""
    first = {schema_id: min(by.items()) for schema_id, by in in_partition.items()}
    schemas, unusable, unknown = {}, {}, []
    for schema_id in sorted(first):
        partition, offset = first[schema_id]
        if schema_id in known:
            schemas[schema_id] = known[schema_id]
            continue
        try:
            schemas[schema_id] = writer_schema(schema_id)
        except UnknownSchemaIdError as e:
            log.warning(
                "the records of schema id %s (the first: partition %s offset %s) are bad records: %s",
                schema_id,
                partition,
                offset,
                e,
            )
            unknown.append(e)
        except SchemaError as e:
            log.warning(
                "the records of schema id %s (the first: partition %s offset %s) are bad records: %s",
                schema_id,
                partition,
                offset,
                e,
            )
            unusable[schema_id] = str(e)
    if unknown and not schemas and not unusable:
        # not one id of the batch known: the registry is the wrong one or lost its schemas (an
        # in-memory registry restarted), a fault of the set-up, not of the records: nothing is
        # quarantined, and the run fails for its retry (or the operator) to find the registry
        raise SchemaRegistryUnavailableError(
            f"none of the batch's {len(unknown)} schema id(s) is in the registry (first: {unknown[0]}; its first "
            f"record at partition {first[unknown[0].schema_id][0]} offset {first[unknown[0].schema_id][1]}): "
            "is the connection the registry the connector writes to, and does the registry keep its schemas?"
        )
    return WriterSchemas(schemas, unusable, first, in_partition)


def writer_schemas_for(cfg: TableConfig, kafka: KafkaClients, raw: DataFrame) -> WriterSchemas | None:
    """The writer schemas an ``avro`` table's batch ``raw`` is parsed with: :func:`subject_writer_schemas`,
    else :func:`read_writer_schemas`; ``None`` for a JSON table.

    Raises:
        SchemaRegistryUnavailableError, ConfigError: as the registry's.
    """
    registry = kafka.schema_registry
    if cfg.value_format != "avro" or registry is None:
        return None
    return subject_writer_schemas(cfg.topic, registry) or read_writer_schemas(raw, registry.writer_schema)


def framed() -> Column:
    """The value is long enough for the Confluent header and starts with the magic byte."""
    from pyspark.sql import functions as F

    return (F.length("value") >= HEADER_BYTES) & (F.substring("value", 1, 1) == F.lit(bytearray([MAGIC_BYTE])))


def schema_id_of_value(known: Iterable[int] = ()) -> Column:
    """The schema id of a value, null when it is not framed (:func:`framed`): bytes 1-4, a
    big-endian signed int32 (as :func:`~cdclake.model.avro.split_wire` reads it). The header of
    each id of ``known`` is compared as bytes first: reading the id as a number goes through its
    hexadecimal text, three conversions a record."""
    from pyspark.sql import functions as F

    unsigned = F.conv(F.hex(F.substring("value", 2, 4)), 16, 10).cast("bigint")
    read = F.when(framed(), F.when(unsigned >= 2**31, unsigned - 2**32).otherwise(unsigned))
    header = F.substring("value", 1, HEADER_BYTES)
    schema_id = first_of(
        [(header == F.lit(bytearray(wire_header(known_id))), F.lit(known_id)) for known_id in sorted(known)], read
    )
    return schema_id.cast("bigint")


def envelope_connect_schema(schema: Any, flattened: FlattenedRecords | None) -> dict[str, Any]:
    """The Connect schema of the envelope an Avro writer schema's values are read as: its own
    (:func:`~cdclake.model.avro.connect_schema`), or with ``flattened`` the envelope of its
    flattened records (:func:`~cdclake.model.flattened.envelope_schema`).

    Raises:
        SchemaError: the writer schema is not a Connect schema."""
    schema_of_values = connect_schema(schema)
    return schema_of_values if flattened is None else envelope_schema(schema_of_values, flattened)


def envelope_fields(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["field"]: f for f in schema.get("fields", ()) if "field" in f}


def row_schema(envelope: Mapping[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The Connect struct schema of the envelope's row image (``after``, else ``before``)."""
    for image in ("after", "before"):
        row = envelope.get(image)
        if row is not None and row.get("type") == "struct":
            return row
    return None
