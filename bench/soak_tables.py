"""The soak's tables (``make soak``, :mod:`soak`): their source DDL, their table config, the seeded
DML/DDL workload on them, and the comparison of each Iceberg table with its source.

Four kinds, in turn: ``composite`` (primary key ``(tenant, id)``), ``keyless`` (no primary key:
``write_mode: changelog``; its column ``seq`` is unique and never updated, so that the change log
can be replayed), ``wide`` (40 columns) and ``keyed`` (primary key ``id``). Every table's first
column (``id``, ``seq``) is unique, and the comparisons key the rows by it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cdclake.settings import Settings
from cdclake_dev import chain
from cdclake_dev.production_demo import differences, lake_rows, source_rows

log = logging.getLogger(__name__)

DATABASE = "inventory"
"""The source database (the topology's Debezium connector captures every table of it)."""
NAMESPACE = "soak"
"""The Iceberg namespace of the soak's tables."""
KINDS = ("composite", "keyless", "wide", "keyed")

_WIDE_TYPES = ("INT", "VARCHAR(40)", "DOUBLE", "DECIMAL(12,2)")
_WIDE_COLUMNS = tuple(f"c{i:02d}" for i in range(1, 40))
_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "keyed": [
        ("id", "BIGINT NOT NULL"),
        ("name", "VARCHAR(60) NULL"),
        ("amount", "DECIMAL(12,2) NULL"),
        ("qty", "INT NULL"),
        ("updated", "DATETIME(6) NULL"),
    ],
    "composite": [
        ("id", "BIGINT NOT NULL"),
        ("tenant", "INT NOT NULL"),
        ("status", "VARCHAR(20) NULL"),
        ("amount", "DECIMAL(12,2) NULL"),
        ("note", "VARCHAR(100) NULL"),
    ],
    "keyless": [("seq", "BIGINT NOT NULL"), ("label", "VARCHAR(40) NULL"), ("val", "INT NULL")],
    "wide": [("id", "BIGINT NOT NULL")]
    + [(c, _WIDE_TYPES[i % len(_WIDE_TYPES)] + " NULL") for i, c in enumerate(_WIDE_COLUMNS)],
}
_PRIMARY_KEYS = {"keyed": ("id",), "composite": ("tenant", "id"), "keyless": (), "wide": ("id",)}
_UPDATES = {
    "keyed": "qty = qty + 1, amount = amount + 0.50, name = %s, updated = NOW(6)",
    "composite": "status = %s, amount = amount + 1.00",
    "keyless": "label = %s, val = val + 1",
    "wide": "c01 = c01 + 1, c02 = %s, c03 = c03 * 1.5, c04 = c04 + 0.25",
}
_WIDENINGS = {  # type changes Iceberg applies as promotions (int -> long) or as they are (strings)
    "keyed": ["MODIFY qty BIGINT NULL", "MODIFY name VARCHAR(200) NULL"],
    "composite": ["MODIFY note VARCHAR(300) NULL"],
    "wide": ["MODIFY c01 BIGINT NULL", "MODIFY c02 VARCHAR(120) NULL"],
    "keyless": [],
}
_ADDED_COLUMNS_MAX = 4
"""Columns the DDL adds to one table at most."""


@dataclass(frozen=True)
class SoakTable:
    """One soak table: ``inventory.<name>`` in MariaDB, ``soak.<name>`` in Iceberg, DAG ``cdc_<name>``."""

    name: str
    kind: str

    @property
    def key(self) -> str:
        """The unique first column the comparisons key rows by."""
        return _COLUMNS[self.kind][0][0]

    @property
    def identifier(self) -> str:
        return f"{NAMESPACE}.{self.name}"

    @property
    def dag_id(self) -> str:
        return f"cdc_{self.name}"

    @property
    def changelog(self) -> bool:
        return self.kind == "keyless"

    def create_sql(self) -> str:
        cols = ", ".join(f"{n} {t}" for n, t in _COLUMNS[self.kind])
        pk = _PRIMARY_KEYS[self.kind]
        return f"CREATE TABLE IF NOT EXISTS {DATABASE}.{self.name} ({cols}" + (
            f", PRIMARY KEY ({', '.join(pk)}))" if pk else ")"
        )

    def row(self, key: int, rng: random.Random) -> tuple[Any, ...]:
        """A new row whose first column is ``key``."""
        if self.kind == "keyed":
            return (
                key,
                f"n{rng.randrange(10**6)}",
                f"{rng.randrange(10**6)}.{rng.randrange(100):02d}",
                rng.randrange(100),
                None,
            )
        if self.kind == "composite":
            return (key, key % 7, rng.choice(("new", "paid", "sent")), f"{rng.randrange(10**5)}.25", None)
        if self.kind == "keyless":
            return (key, f"l{rng.randrange(1000)}", rng.randrange(1000))
        values: list[Any] = [key]
        for i in range(len(_WIDE_COLUMNS)):
            kind = _WIDE_TYPES[i % len(_WIDE_TYPES)]
            values.append(
                rng.randrange(10**6)
                if kind == "INT"
                else f"w{rng.randrange(10**6)}"
                if kind.startswith("VARCHAR")
                else rng.randrange(10**6) / 8
                if kind == "DOUBLE"
                else f"{rng.randrange(10**5)}.{rng.randrange(100):02d}"
            )
        return tuple(values)


def soak_tables(count: int) -> list[SoakTable]:
    """``count`` tables, the kinds of :data:`KINDS` in turn: ``soak_01_composite``, ..."""
    return [SoakTable(f"soak_{i + 1:02d}_{KINDS[i % len(KINDS)]}", KINDS[i % len(KINDS)]) for i in range(count)]


def write_tables_config(
    path: Path,
    tables: list[SoakTable],
    settings: Settings,
    *,
    task_timeout_minutes: int,
    freshness_minutes: int,
    retries: int,
) -> Path:
    """The soak's table config (docs/table-config.md): each table on a one-minute schedule,
    ``retries`` retries 10 s apart (doubling), the task timeout the engine pause outlasts."""
    doc = {
        "defaults": {
            "owner": "soak",
            "schedule": "* * * * *",
            "retries": retries,
            "retry_delay_s": 10,
            "task_timeout_minutes": task_timeout_minutes,
            "freshness_minutes": freshness_minutes,
            "tags": ["cdc", "soak"],
        },
        "tables": [
            {
                "name": t.name,
                "topic": f"{settings.topic_prefix}.{DATABASE}.{t.name}",
                "namespace": NAMESPACE,
                "table": t.name,
                "primary_key": list(_PRIMARY_KEYS[t.kind]),
                **({"write_mode": "changelog"} if t.changelog else {}),
            }
            for t in tables
        ],
    }
    path.write_text("# Generated by bench/soak.py: the soak's tables\n" + yaml.safe_dump(doc, sort_keys=False))
    return path


# --- the workload --------------------------------------------------------------------------------


class Background(ABC):
    """A loop in a daemon thread (:meth:`_run`, until :attr:`_stop` is set): :meth:`start`, and
    :meth:`stop`, which returns once the loop ended."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @abstractmethod
    def _run(self) -> None:
        """The loop: runs until :attr:`_stop` is set."""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class _Live:
    """The keys a table holds now (as far as the workload's commits go) and its next key."""

    keys: list[int] = field(default_factory=list)
    next_key: int = 1
    added: int = 0
    widenings: list[str] = field(default_factory=list)


class Workload(Background):
    """Seeded DML and DDL on the soak's tables in a thread: transactions of 1-3 tables, each with
    inserts, updates and deletes; every ``ddl_interval_s`` seconds an added column or a widened
    type on one table (not the keyless), followed by an update that writes it.

    Args:
        settings: the topology's settings (MariaDB's port).
        tables: the soak's tables.
        seed: the random seed.
        pause_s: the pause between transactions.
        ddl_interval_s: seconds between two DDL statements.
    """

    def __init__(
        self,
        settings: Settings,
        tables: list[SoakTable],
        seed: int,
        *,
        pause_s: float = 0.2,
        ddl_interval_s: float = 60.0,
    ) -> None:
        self.settings = settings
        self.tables = tables
        self.rng = random.Random(seed)
        self.pause_s = pause_s
        self.ddl_interval_s = ddl_interval_s
        self.live = {t.name: _Live(widenings=list(_WIDENINGS[t.kind])) for t in tables}
        self.counts: Counter[str] = Counter()
        self.ddl: list[dict[str, Any]] = []
        self.errors: list[str] = []
        super().__init__("soak-workload")

    def create(self, initial_rows: int) -> None:
        """Create the source tables with ``initial_rows`` rows each (streamed by Debezium as ``c``)."""
        conn = chain.mariadb_connect(self.settings)
        try:
            with conn.cursor() as cur:
                for t in self.tables:
                    cur.execute(f"DROP TABLE IF EXISTS {DATABASE}.{t.name}")
                    cur.execute(t.create_sql())
                    self._insert(cur, t, initial_rows)
            for t in self.tables:
                self.live[t.name].keys = list(range(1, initial_rows + 1))
                self.live[t.name].next_key = initial_rows + 1
        finally:
            conn.close()

    def _insert(self, cur: Any, t: SoakTable, n: int) -> list[int]:
        live = self.live[t.name]
        keys = list(range(live.next_key, live.next_key + n))
        rows = [t.row(k, self.rng) for k in keys]
        names = ", ".join(n for n, _ in _COLUMNS[t.kind])  # the added columns stay null
        marks = ", ".join(["%s"] * len(rows[0]))
        cur.executemany(f"INSERT INTO {DATABASE}.{t.name} ({names}) VALUES ({marks})", rows)
        live.next_key += n
        return keys

    def _run(self) -> None:
        conn = None
        next_ddl = time.monotonic() + self.ddl_interval_s / 2
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = chain.mariadb_connect(self.settings)
                if time.monotonic() >= next_ddl:
                    self._ddl(conn)
                    next_ddl = time.monotonic() + self.ddl_interval_s
                else:
                    self._transaction(conn)
            except Exception as e:  # a MariaDB error: counted, the connection opened again
                self.errors.append(f"{type(e).__name__}: {str(e)[:200]}")
                conn = None
            self._stop.wait(self.pause_s)
        if conn is not None:
            conn.close()

    def _transaction(self, conn: Any) -> None:
        chosen = self.rng.sample(self.tables, min(len(self.tables), self.rng.randint(1, 3)))
        added: dict[str, list[int]] = {}
        removed: dict[str, set[int]] = {}
        statements = 0
        conn.begin()
        try:
            with conn.cursor() as cur:
                for t in chosen:
                    live = self.live[t.name]
                    added[t.name] = self._insert(cur, t, self.rng.randint(1, 5))
                    picked = self.rng.sample(live.keys, min(len(live.keys), self.rng.randint(1, 4)))
                    if picked:
                        marks = ", ".join(["%s"] * len(picked))
                        cur.execute(
                            f"UPDATE {DATABASE}.{t.name} SET {_UPDATES[t.kind]} WHERE {t.key} IN ({marks})",
                            [f"u{self.rng.randrange(10**6)}", *picked],
                        )
                        self.counts["updated"] += cur.rowcount
                    gone = set()
                    if live.keys and self.rng.random() < 0.4:
                        gone = {self.rng.choice(live.keys)}
                        cur.execute(f"DELETE FROM {DATABASE}.{t.name} WHERE {t.key} = %s", list(gone))
                        self.counts["deleted"] += cur.rowcount
                    removed[t.name] = gone
                    statements += 3
            conn.commit()
        except BaseException:
            conn.rollback()
            for name, keys in added.items():  # the keys stay used: a later insert takes new ones
                self.live[name].next_key = max(self.live[name].next_key, max(keys) + 1)
            raise
        for name, keys in added.items():
            live = self.live[name]
            live.keys = [k for k in live.keys if k not in removed[name]] + keys
            self.counts["inserted"] += len(keys)
        self.counts["transactions"] += 1
        self.counts["statements"] += statements

    def _ddl(self, conn: Any) -> None:
        candidates = [t for t in self.tables if not t.changelog]
        if not candidates:
            return
        t = self.rng.choice(candidates)
        live = self.live[t.name]
        if live.widenings and (live.added >= _ADDED_COLUMNS_MAX or self.rng.random() < 0.5):
            change, column = live.widenings.pop(0), None
        elif live.added < _ADDED_COLUMNS_MAX:
            live.added += 1
            column = f"extra_{live.added}"
            change = f"ADD COLUMN {column} VARCHAR(30) NULL"
        else:
            return
        with conn.cursor() as cur:
            cur.execute(f"ALTER TABLE {DATABASE}.{t.name} {change}")
            # a change event with the new schema, so that the table's runs see it
            picked = self.rng.sample(live.keys, min(len(live.keys), 5))
            if picked:
                marks = ", ".join(["%s"] * len(picked))
                target = f"{column} = %s" if column else _UPDATES[t.kind]
                cur.execute(
                    f"UPDATE {DATABASE}.{t.name} SET {target} WHERE {t.key} IN ({marks})",
                    [f"x{self.rng.randrange(10**6)}", *picked],
                )
        self.ddl.append({"at": time.time(), "table": t.name, "ddl": change})
        self.counts["ddl"] += 1


# --- the comparison ------------------------------------------------------------------------------

_POSITION = ("_cdc_binlog_file_seq", "_cdc_binlog_pos", "_cdc_binlog_row")


def compare_table(source: Settings, lake: Settings, t: SoakTable) -> dict[str, Any]:
    """A direct ``SELECT *`` comparison of the source table with its Iceberg table (through
    pyiceberg): rows ``lost`` (in the source only), ``stale`` (in the lake only: a delete not
    applied), ``duplicated`` (a key, or for the change log a Kafka record, twice), ``wrong``
    (values differ, :func:`cdclake_dev.production_demo.differences`; counted up to 21), and the
    first difference lines (``sample``). A ``keyless`` table's change log is replayed first
    (:func:`replay_changelog`).

    Args:
        source: the topology's settings (MariaDB).
        lake: the task settings (the catalog with its credentials).
        t: the table.
    """
    from cdclake.io.catalog import load_catalog

    src = source_rows(source, t.name)
    columns = list(next(iter(src.values())).keys()) if src else [t.key]
    table = load_catalog(lake).load_table(t.identifier)
    extra_info: dict[str, Any] = {}
    if t.changelog:
        events = (
            table.scan(
                selected_fields=(
                    *columns,
                    "_cdc_op",
                    "_cdc_snapshot",
                    "_cdc_kafka_partition",
                    "_cdc_kafka_offset",
                    *_POSITION,
                )
            )
            .to_arrow()
            .to_pylist()
        )
        rows, duplicated, reemitted = replay_changelog(events, t.key, columns)
        extra_info = {"events": len(events), "reemitted_by_debezium": reemitted}
    else:
        rows = lake_rows(lake, t.identifier, columns)
        duplicated = table.scan(selected_fields=(t.key,)).to_arrow().num_rows - len(rows)
    diffs = differences(src, rows)
    return {
        "source_rows": len(src),
        "lake_rows": len(rows),
        "lost": len(set(src) - set(rows)),
        "stale": len(set(rows) - set(src)),
        "duplicated": duplicated,
        "wrong": sum(1 for d in diffs if d.startswith("key ")),
        "sample": diffs[:5],
        **extra_info,
    }


def replay_changelog(
    events: list[dict[str, Any]], key: str, columns: list[str]
) -> tuple[dict[Any, dict[str, Any]], int, int]:
    """The rows a ``write_mode: changelog`` table holds after its events, replayed in source order
    (binlog file, position, row; a snapshot read below a change at the same position): ``c``,
    ``u`` and ``r`` write the row of ``key`` (unique, never updated), ``d`` removes it; the reads of
    a snapshot at a new position replace the whole state (a re-snapshot after lost offsets reads
    what changed while the connector was not streaming).

    Returns:
        The rows by ``key`` (``columns`` only); how many events came twice from the same Kafka
        record (the pipeline applied a record twice); how many came again at another offset from
        the same source position (Debezium re-emitted them after a restart; each applied once).
    """
    seen_records: Counter[tuple[Any, Any]] = Counter(
        (e["_cdc_kafka_partition"], e["_cdc_kafka_offset"]) for e in events
    )
    duplicated = sum(n - 1 for n in seen_records.values())
    order = sorted(events, key=lambda e: (*(e[c] for c in _POSITION), 0 if e["_cdc_snapshot"] else 1))
    state: dict[Any, dict[str, Any]] = {}
    seen: set[tuple[Any, ...]] = set()
    snapshot_at: tuple[Any, ...] | None = None
    reemitted = 0
    for e in order:
        position = tuple(e[c] for c in _POSITION)
        ident = (*position, e["_cdc_op"], e[key])
        if ident in seen:
            reemitted += 1
            continue
        seen.add(ident)
        if e["_cdc_snapshot"] and position[:2] != snapshot_at:
            snapshot_at, state = position[:2], {}
        if e["_cdc_op"] == "d":
            state.pop(e[key], None)
        else:
            state[e[key]] = {c: e.get(c) for c in columns}
    return state, duplicated, reemitted - duplicated
