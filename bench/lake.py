"""The benchmarks' workload (:mod:`workload`) in Kafka and Iceberg: change events produced to a
topic as Debezium keys them, starting tables written as a snapshot read would have written them,
zero-copy clones, and the comparison of a table with the source state its events came from."""

from __future__ import annotations

import base64
import io
import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Protocol

import workload as wl
from cdclake.settings import Settings

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from cdclake.io.kafka import KafkaClients
    from cdclake.model.offsets import OffsetRange

PARTITIONS = 3
"""Partitions of every workload topic."""
BASE_FILE_ROWS = 250_000
"""Rows per data file of the starting tables (one pyiceberg append each)."""
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass
class Loaded:
    """A workload in Kafka: its topic, offset range, event coordinates and resulting source."""

    topic: str
    range_json: str
    events: int
    state: wl.SourceState
    coords: list[tuple[int, int]]
    """``(partition, offset)`` of each event, by event index."""
    meta: list[tuple[str, tuple[int, int, int], int]]
    """``(op, position, source ts_ms)`` of each event, by event index."""
    bytes: int
    load_s: float


def kafka_clients(settings: Settings) -> KafkaClients:
    from cdclake.io.kafka import KafkaClients

    return KafkaClients.from_bootstrap(settings.kafka_bootstrap)


def full_range(kafka: KafkaClients, topic: str) -> OffsetRange:
    """The offset range of everything ``topic`` holds: from offset 0 to its high watermarks."""
    from cdclake.io.kafka import topic_watermarks
    from cdclake.model.offsets import OffsetRange

    marks = topic_watermarks(kafka, topic)
    return OffsetRange(topic=topic, start={p: 0 for p in marks.high}, end=dict(marks.high))


class AvroEncoder:
    """The workload's events as a Kafka Connect Avro converter writes them: the Avro writer schema
    of the events' Connect schema (``tests/avro_events.py``, Confluent's ``AvroData`` mapping)
    registered once in the schema registry, each event's payload in the Confluent wire format
    (magic byte 0, the schema id, the Avro binary).

    Only the payload of each ``JsonConverter`` value is parsed (the Connect schema before it is
    the same in every event), its one ``bytes`` column decoded from base64 directly, and written
    with the schema parsed once (``fastavro.schemaless_writer``): about 40 µs an event on this
    machine, where the generic Connect-to-Avro datum of the tests' encoder costs 40 µs more.
    """

    def __init__(self, registry_url: str, subject: str, decimal: bool) -> None:
        import fastavro
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        from tests.avro_events import _raw, avro_schema

        connect = wl.value_schema(decimal)
        schema = avro_schema(connect)
        self.schema_id = SchemaRegistryClient({"url": registry_url}).register_schema(
            subject, Schema(json.dumps(schema), "AVRO")
        )
        # the datum holds the raw values (decimal bytes, epoch numbers) as the converter encodes them
        self._parsed = fastavro.parse_schema(_raw(schema))
        self._header = b"\x00" + self.schema_id.to_bytes(4, "big", signed=True)
        self._skip = len(b'{"schema":' + json.dumps(connect, separators=(",", ":")).encode() + b',"payload":')
        self._bytes_columns = [f["field"] for f in wl.row_fields(decimal) if f["type"] == "bytes"]
        self.seconds = 0.0
        """Seconds spent encoding so far."""

    def encode(self, value: bytes) -> bytes:
        """The Confluent-framed Avro value of one ``JsonConverter`` value of the workload."""
        import fastavro

        t0 = time.monotonic()
        payload = json.loads(value[self._skip : -1])
        for image in (payload["before"], payload["after"]):
            for column in self._bytes_columns if image is not None else ():
                image[column] = base64.b64decode(image[column])
        out = io.BytesIO()
        out.write(self._header)
        fastavro.schemaless_writer(out, self._parsed, payload)
        self.seconds += time.monotonic() - t0
        return out.getvalue()


class Encoder(Protocol):
    """A second encoding of the workload's events (:class:`AvroEncoder`, :class:`FlattenEncoder`):
    one ``JsonConverter`` value in, the other format's value out, and the seconds it took so far."""

    seconds: float

    def encode(self, value: bytes) -> bytes: ...


class FlattenEncoder:
    """The workload's events as Debezium's ``ExtractNewRecordState`` transform writes them with
    ``add.fields`` :data:`~cdclake.model.flattened.TRANSFORM_FIELDS` (prefix ``__``) and
    ``delete.tombstone.handling.mode=rewrite``, through ``JsonConverter`` with schemas: the row
    image (``after``; a delete's ``before``) with the added fields and ``__deleted``
    (``tests/flattening.py``'s :func:`~tests.flattening.flatten`, the model of the transform).

    The flattened record's Connect schema is the same for every event (``before`` and ``after``
    share the row schema): it is taken once from :func:`~tests.flattening.flatten` of the first
    event; each event's payload alone is then parsed and its flat value written after it. The
    first event of each op is checked against :func:`~tests.flattening.flatten` whole (schema and
    value), so a workload change that the fast path would miss fails the load.
    """

    PREFIX = "__"

    def __init__(self, decimal: bool) -> None:
        self._skip = len(
            b'{"schema":' + json.dumps(wl.value_schema(decimal), separators=(",", ":")).encode() + b',"payload":'
        )
        self._prefix: bytes | None = None
        self._added: list[tuple[str, str | None, str]] = []
        self._checked: set[str] = set()
        self.seconds = 0.0
        """Seconds spent encoding so far."""

    def _flatten(self, value: bytes) -> dict[str, Any]:
        from cdclake.model.flattened import TRANSFORM_FIELDS
        from tests.flattening import flatten

        flat = flatten(json.loads(value), TRANSFORM_FIELDS, prefix=self.PREFIX, deletes="rewrite")
        if not isinstance(flat, dict):
            raise RuntimeError(f"the transform would not keep this event as a record: {flat!r}")
        return flat

    def _start(self, value: bytes) -> None:
        """The schema prefix and the added fields, from the first event's flattened record."""
        from cdclake.model.flattened import TRANSFORM_FIELDS
        from tests.flattening import _entry

        schema = self._flatten(value)["schema"]
        self._prefix = ('{"schema":' + json.dumps(schema, separators=(",", ":")) + ',"payload":').encode()
        names = {f["field"] for f in schema["fields"]}
        for entry in TRANSFORM_FIELDS.split(","):
            struct, field, name = _entry(entry.strip(), self.PREFIX)
            if name in names:  # the transform leaves out an entry the envelope has no field for
                self._added.append((name, struct, field))

    def encode(self, value: bytes) -> bytes:
        """The flattened ``JsonConverter`` value of one ``JsonConverter`` envelope of the workload."""
        from cdclake.model.flattened import DELETED_FIELD

        t0 = time.monotonic()
        if self._prefix is None:
            self._start(value)
        assert self._prefix is not None
        payload = json.loads(value[self._skip : -1])
        op = payload["op"]
        flat = dict(payload["before"] if op == "d" else payload["after"])
        for name, struct, field in self._added:
            flat[name] = payload.get(field) if struct is None else (payload.get(struct) or {}).get(field)
        flat[DELETED_FIELD] = "true" if op == "d" else "false"
        out = self._prefix + json.dumps(flat, separators=(",", ":")).encode() + b"}"
        if op not in self._checked:
            if json.loads(out) != self._flatten(value):
                raise RuntimeError(f"the flattened {op!r} event differs from tests/flattening.py's: {out[-400:]!r}")
            self._checked.add(op)
        self.seconds += time.monotonic() - t0
        return out


def produce(
    kafka: KafkaClients,
    topic: str,
    events: Iterable[wl.Event],
    *,
    create: bool = True,
    avro: tuple[Encoder, list[tuple[bytes, bytes, None]]] | None = None,
) -> tuple[list[tuple[int, int]], list[tuple[str, tuple[int, int, int], int]], int]:
    """Produce ``events`` to ``topic`` (made with :data:`PARTITIONS` partitions when ``create``)
    keyed as Debezium keys them (``cdclake.model.keys.build_key``) with Kafka's default
    partitioner, as ``cdclake.io.events.load_events`` does. Returns each event's ``(partition,
    offset)`` and ``(op, position, source ts_ms)``, and the bytes of the values. ``avro``: an
    encoder (Avro, or another :class:`Encoder`) and a list that receives each event's record in
    its format, same key."""
    from cdclake.io.kafka import ensure_topic
    from cdclake.io.kafka import produce as produce_records
    from cdclake.model.envelope import KafkaCoordinates, parse_value
    from cdclake.model.keys import build_key

    if create:
        ensure_topic(kafka, topic, PARTITIONS)
    meta: list[tuple[str, tuple[int, int, int], int]] = []
    keys: dict[int, bytes] = {}
    template = None
    size = 0

    def records() -> Iterator[tuple[bytes, bytes, None]]:
        nonlocal template, size
        for ev in events:
            if template is None:
                template = parse_value(ev.value, "json_with_schema", KafkaCoordinates(topic))
            key = keys.get(ev.id)
            if key is None:
                key = keys[ev.id] = build_key(
                    replace(template, op="c", before=None, after={"id": ev.id}), ("id",), "json_with_schema"
                )
            meta.append((ev.op, ev.position, ev.ts_ms))
            size += len(ev.value)
            if avro is not None:
                avro[1].append((key, avro[0].encode(ev.value), None))
            yield key, ev.value, None

    return produce_records(kafka, topic, records(), **PRODUCER_CONFIG), meta, size


PRODUCER_CONFIG = {"partitioner": "murmur2_random", "linger.ms": 20, "queue.buffering.max.kbytes": 512 * 1024}
"""Kafka's default partitioner (by key, as Debezium's records are placed) and large batches."""


def load_workload(
    settings: Settings, topic: str, spec: wl.WorkloadSpec, decimal: bool, state: wl.SourceState | None = None
) -> Loaded:
    """Generate ``spec``'s events (continuing ``state``) and produce them to a new ``topic``.

    Raises:
        RuntimeError: the topic holds another number of records than the events.
    """
    return _load(settings, topic, spec, decimal, state, None)[0]


def load_workload_avro(
    settings: Settings, topic: str, spec: wl.WorkloadSpec, decimal: bool, avro_topic: str, encoder: Encoder
) -> tuple[Loaded, Loaded]:
    """:func:`load_workload`, and the same events in Avro (``encoder``; or in another format, a
    :class:`FlattenEncoder`'s), same keys, to ``avro_topic``.

    Returns:
        The JSON workload and the Avro (other) one: the same source state and events, each with its
        own coordinates, bytes and seconds (the second one's include the encoding).

    Raises:
        RuntimeError: a topic holds another number of records than the events.
    """
    loaded, avro = _load(settings, topic, spec, decimal, None, (avro_topic, encoder))
    assert avro is not None
    return loaded, avro


def _load(
    settings: Settings,
    topic: str,
    spec: wl.WorkloadSpec,
    decimal: bool,
    state: wl.SourceState | None,
    avro: tuple[str, Encoder] | None,
) -> tuple[Loaded, Loaded | None]:
    from cdclake.io.kafka import ensure_topic
    from cdclake.io.kafka import produce as produce_records

    t0 = time.monotonic()
    events, state = wl.generate(spec, decimal, state)
    kafka = kafka_clients(settings)
    records: list[tuple[bytes, bytes, None]] = []
    coords, meta, size = produce(kafka, topic, events, avro=(avro[1], records) if avro else None)
    rng = _checked_range(kafka, topic, spec.events)
    encode_s = avro[1].seconds if avro else 0.0
    loaded = Loaded(topic, rng, spec.events, state, coords, meta, size, time.monotonic() - t0 - encode_s)
    if avro is None:
        return loaded, None
    t1 = time.monotonic()
    ensure_topic(kafka, avro[0], PARTITIONS)
    avro_coords = produce_records(kafka, avro[0], iter(records), **PRODUCER_CONFIG)
    avro_rng = _checked_range(kafka, avro[0], spec.events)
    avro_size = sum(len(v) for _, v, _ in records)
    avro_s = time.monotonic() - t1 + encode_s
    return loaded, Loaded(avro[0], avro_rng, spec.events, state, avro_coords, meta, avro_size, avro_s)


def load_transactions(settings: Settings, loaded: Loaded, data_collection: str) -> tuple[str, float]:
    """The transaction topic of ``loaded`` (``<topic.prefix>.transaction``, one partition, as
    Debezium writes it): a ``BEGIN`` and an ``END`` per transaction of its source state
    (:func:`workload.transaction_records`), produced after the events, as the connector sends an
    ``END`` after its transaction's events.

    Returns:
        The :class:`~cdclake.model.plan.TransactionRange` JSON of the whole topic (every data
        partition read to its end) and the seconds it took.
    """
    from cdclake.io.kafka import ensure_topic
    from cdclake.io.kafka import produce as produce_records
    from cdclake.model.offsets import OffsetRange
    from cdclake.model.plan import TransactionRange

    t0 = time.monotonic()
    kafka = kafka_clients(settings)
    topic = f"{loaded.topic.rsplit('.', 2)[0]}.transaction"
    ensure_topic(kafka, topic, 1)
    records = ((None, value, None) for value in wl.transaction_records(loaded.state, data_collection))
    produce_records(kafka, topic, records, **PRODUCER_CONFIG)
    whole = full_range(kafka, topic)
    data = OffsetRange.from_json(loaded.range_json)
    marks = TransactionRange(topic=topic, start=whole.start, end=whole.end, read_to_end=tuple(sorted(data.end)))
    return marks.model_dump_json(), time.monotonic() - t0


def _checked_range(kafka: KafkaClients, topic: str, events: int) -> str:
    """The JSON of the offset range of everything ``topic`` holds, which must be ``events`` records."""
    rng = full_range(kafka, topic)
    if rng.event_count != events:
        raise RuntimeError(f"topic {topic!r} holds {rng.event_count} records, expected {events}")
    return rng.to_json()


# --- Iceberg tables -----------------------------------------------------------------------------


def create_base_table(catalog: Catalog, identifier: str, rows: int, decimal: bool) -> float:
    """The starting table: ``rows`` rows (ids ``0..rows-1``) as a snapshot read wrote them, in
    files of :data:`BASE_FILE_ROWS` rows. Returns seconds."""
    from cdclake.io.catalog import create_cdc_table
    from cdclake.model.types import columns_from_connect

    t0 = time.monotonic()
    columns = columns_from_connect({"fields": wl.row_fields(decimal)})
    table = create_cdc_table(catalog, identifier, columns, ("id",))
    schema = table.schema().as_arrow()
    for start in range(0, rows, BASE_FILE_ROWS):
        table.append(wl.base_rows_arrow(start, min(start + BASE_FILE_ROWS, rows), schema, decimal))
    return time.monotonic() - t0


def copy_table(catalog: Catalog, source: str, target: str) -> None:
    """Register ``target`` on ``source``'s current metadata: a zero-copy clone (new files of
    either go to the shared location under unique names; neither deletes files)."""
    catalog.register_table(target, catalog.load_table(source).metadata_location)


def expected_rows(loaded: Loaded, ids: list[int], decimal: bool, columns: list[str]) -> dict[int, dict[str, Any]]:
    """The rows the table must hold for ``ids`` (touched, present keys): the source columns of
    the last event per key (in binlog order) and that event's metadata."""
    out = {}
    for i in ids:
        row = loaded.state.rows[i]
        index = loaded.state.written_by[i]
        op, (f, pos, r), ts_ms = loaded.meta[index]
        part, offset = loaded.coords[index]
        values = {c: wl.iceberg_value(c, row[c], decimal) for c in columns}
        values.update(
            {
                "_cdc_op": op,
                "_cdc_snapshot": False,
                "_cdc_binlog_file_seq": f,
                "_cdc_binlog_pos": pos,
                "_cdc_binlog_row": r,
                "_cdc_gtid_seq": f * 10_000_000 + pos,  # the GTID sequence the workload writes
                "_cdc_source_ts": _EPOCH + timedelta(milliseconds=ts_ms),
                "_cdc_kafka_partition": part,
                "_cdc_kafka_offset": offset,
            }
        )
        out[i] = values
    return out


def check_table(catalog: Catalog, identifier: str, loaded: Loaded, existing_rows: int, decimal: bool) -> dict[str, Any]:
    """Compare the table with the source state the events were generated from: the same ids, and
    for every touched key the last event's values and metadata. Untouched rows are the starting
    rows (their ids are checked)."""
    import numpy as np
    import pyarrow as pa

    state = loaded.state
    touched = np.array(sorted(state.rows), dtype=np.int64)
    deleted = np.array(sorted(i for i, r in state.rows.items() if r is None), dtype=np.int64)
    present_touched = np.array(sorted(i for i, r in state.rows.items() if r is not None), dtype=np.int64)
    expected_ids = np.union1d(np.setdiff1d(np.arange(existing_rows, dtype=np.int64), deleted), present_touched)

    table = catalog.load_table(identifier)
    ids = table.scan(selected_fields=("id",)).to_arrow()["id"].to_numpy()
    problems = []
    if len(ids) != len(np.unique(ids)):
        problems.append(f"{len(ids) - len(np.unique(ids))} duplicate id(s)")
    if not np.array_equal(np.sort(ids), expected_ids):
        missing = np.setdiff1d(expected_ids, ids)
        extra = np.setdiff1d(ids, expected_ids)
        problems.append(
            f"ids differ: {len(missing)} missing (e.g. {missing[:5].tolist()}), "
            f"{len(extra)} unexpected (e.g. {extra[:5].tolist()})"
        )
    from pyiceberg.expressions import In

    columns = [f["field"] for f in wl.row_fields(decimal)]
    arrow = (
        table.scan(row_filter=In("id", present_touched.tolist())).to_arrow() if len(present_touched) else pa.table({})
    )
    got = {r["id"]: r for r in arrow.to_pylist()} if arrow.num_columns else {}
    want = expected_rows(loaded, present_touched.tolist(), decimal, columns)
    mismatched = [i for i, row in want.items() if i not in got or any(got[i][c] != v for c, v in row.items())]
    if mismatched:
        i = mismatched[0]
        diff = {c: (got.get(i, {}).get(c), v) for c, v in want[i].items() if got.get(i, {}).get(c) != v}
        problems.append(f"{len(mismatched)} touched row(s) differ; id {i}: (table, expected) {diff}")
    return {
        "table": identifier,
        "rows": int(len(ids)),
        "expected_rows": int(len(expected_ids)),
        "touched_keys": int(len(touched)),
        "checked_rows": len(want),
        "ok": not problems,
        "problems": problems,
    }


def check_one_event(catalog: Catalog, identifier: str, ev: wl.Event) -> bool:
    """Whether the table holds the row of the update ``ev`` (one row of its id, with its
    ``quantity`` and binlog position)."""
    from pyiceberg.expressions import EqualTo

    row = catalog.load_table(identifier).scan(row_filter=EqualTo("id", ev.id)).to_arrow().to_pylist()
    return (
        len(row) == 1
        and ev.after is not None
        and row[0]["quantity"] == ev.after["quantity"]
        and row[0]["_cdc_binlog_pos"] == ev.position[1]
    )
