"""The benchmarks' workload (:mod:`workload`) in Kafka and Iceberg: change events produced to a
topic as Debezium keys them, starting tables written as a snapshot read would have written them,
zero-copy clones, and the comparison of a table with the source state its events came from."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

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


def produce(
    kafka: KafkaClients, topic: str, events: Iterable[wl.Event], *, create: bool = True
) -> tuple[list[tuple[int, int]], list[tuple[str, tuple[int, int, int], int]], int]:
    """Produce ``events`` to ``topic`` (made with :data:`PARTITIONS` partitions when ``create``)
    keyed as Debezium keys them (``cdclake.model.keys.build_key``) with Kafka's default
    partitioner, as ``cdclake.io.events.load_events`` does. Returns each event's ``(partition,
    offset)`` and ``(op, position, source ts_ms)``, and the bytes of the values."""
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
            yield key, ev.value, None

    coords = produce_records(
        kafka,
        topic,
        records(),
        **{"partitioner": "murmur2_random", "linger.ms": 20, "queue.buffering.max.kbytes": 512 * 1024},
    )
    return coords, meta, size


def load_workload(
    settings: Settings, topic: str, spec: wl.WorkloadSpec, decimal: bool, state: wl.SourceState | None = None
) -> Loaded:
    """Generate ``spec``'s events (continuing ``state``) and produce them to a new ``topic``.

    Raises:
        RuntimeError: the topic holds another number of records than the events.
    """
    t0 = time.monotonic()
    events, state = wl.generate(spec, decimal, state)
    kafka = kafka_clients(settings)
    coords, meta, size = produce(kafka, topic, events)
    rng = full_range(kafka, topic)
    if rng.event_count != spec.events:
        raise RuntimeError(f"topic {topic!r} holds {rng.event_count} records, expected {spec.events}")
    return Loaded(topic, rng.to_json(), spec.events, state, coords, meta, size, time.monotonic() - t0)


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
