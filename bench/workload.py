"""The benchmark's workload: an ``orders`` source table of 12 columns, its starting rows, and a
stream of Debezium change events (Kafka Connect ``JsonConverter`` with ``schemas.enable=true``)
generated from a simulated source, so that every event is one the source could have produced:
an insert names an absent key, an update or delete a present one, and ``before`` is the row as
it was.

Columns (MySQL type -> Debezium encoding with ``decimal.handling.mode=precise`` and
``time.precision.mode=adaptive_time_microseconds``):

=============  ====================  ==============================================
column         MySQL                 Debezium (Connect) encoding
=============  ====================  ==============================================
id             BIGINT PRIMARY KEY    int64
customer_id    INT                   int32
status         VARCHAR(16)           string
item           VARCHAR(64)           string
email          VARCHAR(128)          string
quantity       INT                   int32
price          DECIMAL(10,2)         bytes, ``org.apache.kafka.connect.data.Decimal``
                                     (base64 of the big-endian unscaled value)
weight         DOUBLE                double
created_at     DATETIME(3)           int64, ``io.debezium.time.Timestamp`` (ms)
updated_at     TIMESTAMP             string, ``io.debezium.time.ZonedTimestamp``
ship_date      DATE                  int32, ``io.debezium.time.Date`` (days)
note           TEXT NULL             string, optional (mostly null)
=============  ====================  ==============================================

While cdclake does not map ``org.apache.kafka.connect.data.Decimal`` (:mod:`cdclake.model.types`),
``price`` is announced as plain Connect ``bytes`` instead: the bytes on the wire (base64 of the
unscaled value) are the same, the Iceberg column is ``binary`` rather than ``decimal(10,2)``.
:func:`decimal_supported` says which one a run uses.

Keys: ``existing_fraction`` (40 %) of the workload's keys are rows of the starting table (ids below ``existing_rows``, spread over the whole id range), the rest are new
ids from ``new_id_start`` up. Op mix per binlog event: 20 % inserts, 70 % updates, 10 % deletes;
15 % of binlog events carry 2-5 rows (``source.row`` 0..n-1 at one ``file``/``pos``). An insert
when no key is absent, or an update/delete when none is present, becomes the other kind; the
counts actually produced are reported.
"""

from __future__ import annotations

import base64
import json
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

SERVER = "bench"
DATABASE = "shop"
TABLE = "orders"
SERVER_ID = 223344
BINLOG_BASENAME = "mysql-bin"
MAX_BINLOG_SIZE = 64 * 1024 * 1024
"""Bytes after which the simulated binlog rotates to the next file (MySQL's default is 1 GiB)."""

SNAPSHOT_POSITION = (1, 4, 0)
"""Binlog position ``(file seq, pos, row)`` of the snapshot that wrote the starting rows."""
BASE_MS = 1_767_225_600_000
"""2026-01-01T00:00:00Z: ``created_at`` of row 0, and the snapshot's time."""
STATUSES = ("new", "paid", "packed", "shipped", "delivered")
PRICE_SCALE = 2

_DECIMAL_FIELD = {
    "type": "bytes",
    "optional": False,
    "name": "org.apache.kafka.connect.data.Decimal",
    "version": 1,
    "parameters": {"scale": str(PRICE_SCALE), "connect.decimal.precision": "10"},
    "field": "price",
}


def decimal_supported() -> bool:
    """Whether cdclake maps Connect ``Decimal`` columns (else ``price`` goes as plain bytes)."""
    from cdclake.errors import SchemaError
    from cdclake.model.types import column_from_connect

    try:
        column_from_connect(_DECIMAL_FIELD)
    except SchemaError:
        return False
    return True


def row_fields(decimal: bool) -> list[dict[str, Any]]:
    """The Connect schema fields of the row struct (``before``/``after``)."""
    price = dict(_DECIMAL_FIELD) if decimal else {"type": "bytes", "optional": False, "field": "price"}
    return [
        {"type": "int64", "optional": False, "field": "id"},
        {"type": "int32", "optional": False, "field": "customer_id"},
        {"type": "string", "optional": False, "field": "status"},
        {"type": "string", "optional": False, "field": "item"},
        {"type": "string", "optional": False, "field": "email"},
        {"type": "int32", "optional": False, "field": "quantity"},
        price,
        {"type": "double", "optional": False, "field": "weight"},
        {"type": "int64", "optional": False, "name": "io.debezium.time.Timestamp", "version": 1, "field": "created_at"},
        {
            "type": "string",
            "optional": False,
            "name": "io.debezium.time.ZonedTimestamp",
            "version": 1,
            "default": "1970-01-01T00:00:00Z",
            "field": "updated_at",
        },
        {"type": "int32", "optional": False, "name": "io.debezium.time.Date", "version": 1, "field": "ship_date"},
        {"type": "string", "optional": True, "field": "note"},
    ]


def value_schema(decimal: bool) -> dict[str, Any]:
    """The Connect schema of the record value (the Debezium MariaDB connector 3.5 envelope)."""
    row = {
        "type": "struct",
        "fields": row_fields(decimal),
        "optional": True,
        "name": f"{SERVER}.{DATABASE}.{TABLE}.Value",
    }
    source_fields = [
        ("string", False, "version"),
        ("string", False, "connector"),
        ("string", False, "name"),
        ("int64", False, "ts_ms"),
        ("string", True, "snapshot"),
        ("string", False, "db"),
        ("string", True, "sequence"),
        ("int64", True, "ts_us"),
        ("int64", True, "ts_ns"),
        ("string", True, "table"),
        ("int64", False, "server_id"),
        ("string", True, "gtid"),
        ("string", False, "file"),
        ("int64", False, "pos"),
        ("int32", False, "row"),
        ("int64", True, "thread"),
        ("string", True, "query"),
    ]
    source = []
    for typ, optional, name in source_fields:
        f: dict[str, Any] = {"type": typ, "optional": optional, "field": name}
        if name == "snapshot":
            f.update(
                {
                    "name": "io.debezium.data.Enum",
                    "version": 1,
                    "default": "false",
                    "parameters": {
                        "allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"
                    },
                }
            )
        source.append(f)
    return {
        "type": "struct",
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            {
                "type": "struct",
                "fields": source,
                "optional": False,
                "name": "io.debezium.connector.mariadb.Source",
                "version": 1,
                "field": "source",
            },
            {
                "type": "struct",
                "fields": [
                    {"type": "string", "optional": False, "field": "id"},
                    {"type": "int64", "optional": False, "field": "total_order"},
                    {"type": "int64", "optional": False, "field": "data_collection_order"},
                ],
                "optional": True,
                "name": "event.block",
                "version": 1,
                "field": "transaction",
            },
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            {"type": "int64", "optional": True, "field": "ts_us"},
            {"type": "int64", "optional": True, "field": "ts_ns"},
        ],
        "optional": False,
        "name": f"{SERVER}.{DATABASE}.{TABLE}.Envelope",
        "version": 2,
    }


def _unscaled_bytes(unscaled: int) -> bytes:
    """Big-endian two's complement, minimal length: Kafka Connect's ``Decimal`` logical type."""
    return unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True)


def _zoned(ms: int) -> str:
    return datetime.fromtimestamp(ms // 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def base_row(i: int, created_ms: int | None = None) -> dict[str, Any]:
    """Row ``i`` as Debezium encodes it (JSON level). The starting table holds exactly these
    values for ids below its size (:func:`base_rows_arrow` is the same formulas, column-wise)."""
    created = BASE_MS + i * 1000 if created_ms is None else created_ms
    return {
        "id": i,
        "customer_id": i % 50_000 + 1,
        "status": STATUSES[i % 5],
        "item": f"item-{i % 1000}",
        "email": f"user{i}@example.com",
        "quantity": i % 100 + 1,
        "price": base64.b64encode(_unscaled_bytes((i * 7919) % 1_000_000)).decode(),
        "weight": (i % 1000) / 8.0,
        "created_at": created,
        "updated_at": _zoned(created),
        "ship_date": 20_454 + i % 365,
        "note": f"note {i}" if i % 10 == 0 else None,
    }


def base_rows_arrow(start: int, stop: int, arrow_schema: Any, decimal: bool) -> Any:
    """Rows ``start..stop-1`` of the starting table as a pyarrow table of ``arrow_schema`` (the
    Iceberg table's), written by a snapshot read at :data:`SNAPSHOT_POSITION`."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = np.arange(start, stop, dtype=np.int64)
    id_str = pc.cast(pa.array(ids), pa.string())
    created = BASE_MS + ids * 1000
    price_unscaled = (ids * 7919) % 1_000_000
    if decimal:
        price = pa.array([Decimal(int(v)).scaleb(-PRICE_SCALE) for v in price_unscaled], pa.decimal128(10, PRICE_SCALE))
    else:
        price = pa.array([_unscaled_bytes(int(v)) for v in price_unscaled], pa.binary())
    note = pc.if_else(
        pa.array(ids % 10 == 0), pc.binary_join_element_wise("note ", id_str, ""), pa.nulls(len(ids), pa.string())
    )
    n = len(ids)
    columns = {
        "id": pa.array(ids),
        "customer_id": pa.array((ids % 50_000 + 1).astype(np.int32)),
        "status": pa.array(np.array(STATUSES, dtype=object)[ids % 5]),
        "item": pc.binary_join_element_wise("item-", pc.cast(pa.array(ids % 1000), pa.string()), ""),
        "email": pc.binary_join_element_wise("user", id_str, "@example.com", ""),
        "quantity": pa.array((ids % 100 + 1).astype(np.int32)),
        "price": price,
        "weight": pa.array((ids % 1000) / 8.0),
        "created_at": pa.array(created * 1000, pa.timestamp("us")),
        "updated_at": pa.array((created // 1000) * 1_000_000, pa.timestamp("us", tz="UTC")),
        "ship_date": pa.array((20_454 + ids % 365).astype(np.int32), pa.date32()),
        "note": note,
        "_cdc_op": pa.array(["r"] * n, pa.string()),
        "_cdc_snapshot": pa.array(np.ones(n, dtype=bool)),
        "_cdc_binlog_file_seq": pa.array(np.full(n, SNAPSHOT_POSITION[0], dtype=np.int64)),
        "_cdc_binlog_pos": pa.array(np.full(n, SNAPSHOT_POSITION[1], dtype=np.int64)),
        "_cdc_binlog_row": pa.array(np.full(n, SNAPSHOT_POSITION[2], dtype=np.int32)),
        "_cdc_gtid_seq": pa.nulls(n, pa.int64()),
        "_cdc_source_ts": pa.array(np.full(n, BASE_MS * 1000, dtype=np.int64), pa.timestamp("us", tz="UTC")),
        "_cdc_kafka_partition": pa.nulls(n, pa.int32()),
        "_cdc_kafka_offset": pa.nulls(n, pa.int64()),
    }
    return pa.Table.from_arrays([columns[f.name].cast(f.type) for f in arrow_schema], schema=arrow_schema)


@dataclass(frozen=True)
class WorkloadSpec:
    """What to generate.

    Attributes:
        events: change events (Kafka records) in all.
        keys: distinct primary keys the events touch (about).
        existing_rows: the starting table holds ids ``0..existing_rows-1``.
        new_id_start: first id of a key the starting table does not hold.
        existing_fraction: share of ``keys`` that are rows of the starting table.
        first_file_seq: binlog file sequence number of the first event.
        seed: random seed (the same spec gives the same events).
        transaction_events: 0: events carry no transaction block (a connector without
            ``provide.transaction.metadata``); ``N``: consecutive binlog events form source
            transactions of 1 to ``N`` events (uniform; a multi-row binlog event is cut to fit),
            every event with Debezium's ``transaction`` block and each transaction recorded in
            :attr:`SourceState.transactions` (:func:`transaction_records` writes its BEGIN/END).
    """

    events: int
    keys: int
    existing_rows: int
    new_id_start: int
    existing_fraction: float = 0.4
    first_file_seq: int = 2
    seed: int = 6
    transaction_events: int = 0


@dataclass
class Event:
    """One generated change event: its key (Kafka), value (JSON bytes) and what it did."""

    id: int
    op: str
    position: tuple[int, int, int]
    ts_ms: int
    """``source.ts_ms``: when the change was made in the source."""
    after: dict[str, Any] | None
    value: bytes


@dataclass
class SourceState:
    """The simulated source table: rows of the touched keys (``None``: deleted) and, per key,
    the index of the event that wrote that state. Ids not in ``rows`` are untouched
    (``base_row(i)`` if ``i < existing_rows``, else absent)."""

    existing_rows: int
    rows: dict[int, dict[str, Any] | None] = field(default_factory=dict)
    written_by: dict[int, int] = field(default_factory=dict)
    ops: Counter = field(default_factory=Counter)
    multi_row_events: int = 0
    last_position: tuple[int, int, int] = SNAPSHOT_POSITION
    last_ts_ms: int = BASE_MS
    transactions: list[tuple[str, int]] = field(default_factory=list)
    """``(id, events)`` of each source transaction generated, in binlog order
    (:attr:`WorkloadSpec.transaction_events`)."""

    def current(self, i: int) -> dict[str, Any] | None:
        if i in self.rows:
            return self.rows[i]
        return base_row(i) if i < self.existing_rows else None


class _Pool:
    """A set of ids with O(1) random pick and removal."""

    def __init__(self, ids: list[int]) -> None:
        self.items = list(ids)
        self.index = {v: k for k, v in enumerate(self.items)}

    def __len__(self) -> int:
        return len(self.items)

    def add(self, v: int) -> None:
        self.index[v] = len(self.items)
        self.items.append(v)

    def remove(self, v: int) -> None:
        k = self.index.pop(v)
        last = self.items.pop()
        if k < len(self.items):
            self.items[k] = last
            self.index[last] = k

    def sample(self, rng: random.Random, n: int) -> list[int]:
        return [self.items[k] for k in rng.sample(range(len(self.items)), n)]


class EventWriter:
    """Serializes envelopes exactly as ``JsonConverter`` (compact, schema first)."""

    def __init__(self, decimal: bool) -> None:
        schema = json.dumps(value_schema(decimal), separators=(",", ":"))
        self._prefix = ('{"schema":' + schema + ',"payload":').encode()
        self._gtid = 0

    def envelope(
        self,
        op: str,
        before: dict | None,
        after: dict | None,
        position: tuple[int, int, int],
        ts_ms: int,
        snapshot: str = "false",
        transaction: dict[str, Any] | None = None,
    ) -> bytes:
        f, pos, row = position
        payload = {
            "before": before,
            "after": after,
            "source": {
                "version": "3.5.0.Final",
                "connector": "mariadb",
                "name": SERVER,
                "ts_ms": ts_ms,
                "snapshot": snapshot,
                "db": DATABASE,
                "sequence": None,
                "ts_us": ts_ms * 1000,
                "ts_ns": ts_ms * 1_000_000,
                "table": TABLE,
                "server_id": SERVER_ID,
                "gtid": f"0-{SERVER_ID}-{f * 10_000_000 + pos}",
                "file": f"{BINLOG_BASENAME}.{f:06d}",
                "pos": pos,
                "row": row,
                "thread": 7,
                "query": None,
            },
            "transaction": transaction,
            "op": op,
            "ts_ms": ts_ms + 150,
            "ts_us": (ts_ms + 150) * 1000,
            "ts_ns": (ts_ms + 150) * 1_000_000,
        }
        return self._prefix + json.dumps(payload, separators=(",", ":")).encode() + b"}"


def _updated(row: dict[str, Any], ts_ms: int, rng: random.Random) -> dict[str, Any]:
    new = dict(row)
    new["status"] = STATUSES[(STATUSES.index(row["status"]) + 1) % len(STATUSES)]
    new["quantity"] = row["quantity"] % 1000 + 1
    unscaled = int.from_bytes(base64.b64decode(row["price"]), "big", signed=True)
    new["price"] = base64.b64encode(_unscaled_bytes((unscaled + 100) % 100_000_000)).decode()
    new["updated_at"] = _zoned(ts_ms)
    new["note"] = None if rng.random() < 0.7 else f"updated at {ts_ms}"
    return new


def generate(
    spec: WorkloadSpec, decimal: bool, state: SourceState | None = None
) -> tuple[Iterator[Event], SourceState]:
    """The events of ``spec`` in binlog order, and the source state they leave (filled in as the
    iterator is consumed). Pass the ``state`` of an earlier workload to continue its binlog."""
    rng = random.Random(spec.seed)
    state = state or SourceState(spec.existing_rows)
    n_existing = min(int(spec.keys * spec.existing_fraction), spec.existing_rows)
    step = max(spec.existing_rows // max(n_existing, 1), 1)
    existing = [k * step + rng.randrange(step) for k in range(n_existing)]
    new = list(range(spec.new_id_start, spec.new_id_start + spec.keys - n_existing))
    present = _Pool([i for i in existing if state.current(i) is not None])
    absent = _Pool(new + [i for i in existing if state.current(i) is None])
    writer = EventWriter(decimal)
    # its own random stream: the events are the same with and without transactions (but for the
    # multi-row binlog events cut to fit one)
    txn_rng = random.Random(spec.seed + 1)
    txn: dict[str, Any] = {"id": None, "size": 0, "written": 0}

    def rows_in_transaction(rows: int) -> int:
        """``rows`` cut to what the open transaction still takes (a new one opened when it is full)."""
        if not spec.transaction_events:
            return rows
        if txn["written"] == txn["size"]:
            txn.update(id=f"0-{SERVER_ID}-{len(state.transactions) + 1}", written=0)
            txn["size"] = txn_rng.randint(1, spec.transaction_events)
            state.transactions.append((txn["id"], 0))
        return min(rows, txn["size"] - txn["written"])

    def transaction_block() -> dict[str, Any] | None:
        """The block of the next event of the open transaction (``None`` without transactions)."""
        if not spec.transaction_events:
            return None
        txn["written"] += 1
        state.transactions[-1] = (txn["id"], txn["written"])
        return {"id": txn["id"], "total_order": txn["written"], "data_collection_order": txn["written"]}

    def events() -> Iterator[Event]:
        f, pos, _ = state.last_position
        if f < spec.first_file_seq:
            f, pos = spec.first_file_seq, 4
        ts = state.last_ts_ms
        produced = 0
        while produced < spec.events:
            r = rng.random()
            op = "c" if r < 0.2 else ("u" if r < 0.9 else "d")
            if op == "c" and not absent:
                op = "u"
            if op != "c" and not present:
                op = "c"
            rows = 1 if rng.random() < 0.85 else rng.randint(2, 5)
            rows = min(rows, spec.events - produced, len(absent) if op == "c" else len(present))
            rows = rows_in_transaction(rows)
            ids = (absent if op == "c" else present).sample(rng, rows)
            pos += 120 + 180 * rows
            if pos > MAX_BINLOG_SIZE:
                f, pos = f + 1, 4 + 120 + 180 * rows
            ts += rng.randint(0, 3)
            if rows > 1:
                state.multi_row_events += 1
            for row_index, i in enumerate(ids):
                position = (f, pos, row_index)
                before = state.current(i)
                if op == "c":
                    after = base_row(i, created_ms=ts)
                    absent.remove(i)
                    present.add(i)
                elif op == "u":
                    after = _updated(before, ts, rng)
                else:
                    after = None
                    present.remove(i)
                    absent.add(i)
                value = writer.envelope(
                    op, before if op != "c" else None, after, position, ts, transaction=transaction_block()
                )
                state.written_by[i] = produced
                state.rows[i] = after
                state.ops[op] += 1
                state.last_position = position
                state.last_ts_ms = ts
                produced += 1
                yield Event(i, op, position, ts, after, value)

    return events(), state


def transaction_records(state: SourceState, data_collection: str) -> Iterator[bytes]:
    """The transaction topic's records of ``state``'s transactions, in order: a ``BEGIN`` and an
    ``END`` each (payload-only JSON), the ``END`` counting its events for ``data_collection``
    (``<database>.<table>`` of the topic name). Source: Debezium's MySQL connector documentation,
    "Transaction metadata"."""
    for txn, events in state.transactions:
        yield json.dumps({"status": "BEGIN", "id": txn, "event_count": None, "data_collections": None}).encode()
        yield json.dumps(
            {
                "status": "END",
                "id": txn,
                "event_count": events,
                "data_collections": [{"data_collection": data_collection, "event_count": events}],
            }
        ).encode()


def update_event(state: SourceState, i: int, decimal: bool) -> Event:
    """One more update of row ``i`` after everything ``state`` has seen (the overhead stage)."""
    f, pos, _ = state.last_position
    pos += 300
    ts = state.last_ts_ms + 1
    before = state.current(i)
    after = _updated(before, ts, random.Random(pos))
    value = EventWriter(decimal).envelope("u", before, after, (f, pos, 0), ts)
    state.rows[i] = after
    state.last_position = (f, pos, 0)
    state.last_ts_ms = ts
    return Event(i, "u", (f, pos, 0), ts, after, value)


def iceberg_value(column: str, value: Any, decimal: bool) -> Any:
    """A JSON-level (Debezium) value as the Iceberg table holds it (pyiceberg's Python value)."""
    if value is None:
        return None
    if column == "price":
        unscaled = base64.b64decode(value)
        return Decimal(int.from_bytes(unscaled, "big", signed=True)).scaleb(-PRICE_SCALE) if decimal else unscaled
    if column == "created_at":
        return datetime(1970, 1, 1) + timedelta(milliseconds=value)
    if column == "updated_at":
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    if column == "ship_date":
        return date(1970, 1, 1) + timedelta(days=value)
    return value
