"""The conformance harness (issue 51): one seeded history on the real chain (MariaDB -> Debezium ->
Kafka -> the table DAGs -> Iceberg) across the options users combine, and a matrix of what each
option gave after each phase of it: ``equal``, ``N differing rows``, ``Q quarantined``.

* **Cells** (:data:`CELLS`): each varies one or two options from the JSON baseline (value format,
  schema source, a table group, history and change feed) and has source tables of its own
  (``cf<tag>_<cell>_<role>``), so all of them run in one start of the chain: the JSON connector
  (``include/stack/debezium/inventory-connector.json``) and the Avro one
  (``inventory-connector-avro.json``, its ``table.include.list`` the Avro cells' tables) run from
  their files on the worker's command line, so a kill -9 and a start keep both. Both write
  transaction metadata: the ``whole`` cells apply whole source transactions (``transactions:
  whole``, the default), the others cut batches by offsets (``transactions: ignore``).
* **The history** (:class:`History`, ``random.Random(seed)``): the same statements on every cell's
  tables, in phases (:data:`PHASES`): ``dml`` (inserts, updates, deletes, primary-key changes,
  multi-statement transactions, a TRUNCATE), ``kill9`` (Connect restarted without offsets, killed
  with SIGKILL before its first offset flush, changes while it is down, started again: Debezium
  takes new snapshots), ``ddl`` (ADD COLUMN ... DEFAULT on a populated table, INT -> BIGINT,
  RENAME COLUMN, a DECIMAL precision increase, DML between them, a JSON column throughout),
  ``replay`` (a replay from offset 0 of every partition), ``partitions`` (every data topic from 3
  to 5 partitions, then more DML).
* **After each phase** every table is caught up (its DAG run until it has applied its topic to the
  end and no snapshot is in progress; a group's DAG publishes its members) and compared with its
  source: every column of ``SELECT *``, typed values (the lake's ``main``; a history's current
  versions too), plus the records its runs quarantined in the phase.

``cdclake conformance`` (``make conformance``) runs the whole matrix on a stack of its own and
writes ``bench/results/conformance-<run id>.json`` and ``.md``; ``tests/e2e/test_conformance.py``
runs a reduced one on the tests' chain (:func:`run_matrix`).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import random
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from cdclake.settings import PROJECT_ROOT, Settings

NAMESPACE = "conformance"
"""The Iceberg namespace of the harness's tables."""
RESULTS_DIR = PROJECT_ROOT / "bench" / "results"
"""Where ``cdclake conformance`` writes ``conformance-<run id>.json`` and ``.md``."""


@dataclass(frozen=True)
class Dags:
    """How the harness runs DAGs and reads their output: the CLI's helpers
    (:func:`cdclake_dev.cli.conformance_dags`), handed in as the CLI imports this module."""

    run_table: Callable[[str, Settings, dict | None], int]
    """Run ``cdc_<name>`` once (``airflow dags test``) with these Params; 0 when it succeeded."""
    run_group: Callable[[str, Settings], int]
    """Run ``cdc_group_<group>`` once; 0 when it succeeded."""
    ensure_db: Callable[[Settings], None]
    """Create or upgrade the Airflow metadata DB of the settings."""
    cause: Callable[[str], str | None]
    """The exception a failed run raised, from its output."""


@dataclass(frozen=True)
class Cell:
    """One option cell: the connector its tables come from and their table config keys."""

    name: str
    converter: Literal["json", "avro"]
    options: Mapping[str, Any] = field(default_factory=dict)
    roles: tuple[str, ...] = ("a",)
    """Its source tables (``a``; a group's ``a`` and ``b``): each gets the history's statements
    of its role, and a transaction of the history over both roles is one transaction here."""

    flattened: bool = False
    """Its connector flattens the records (Debezium's ``ExtractNewRecordState``:
    ``include/stack/debezium/inventory-connector-flat.json``, ``...-avro-flat.json``) and its
    tables read them so (``flattened: {}``)."""

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "_", self.name)

    @property
    def connector(self) -> str:
        """Its connector's name in :data:`cdclake_dev.chain.CONNECTOR_FILES`."""
        return self.converter + ("-flat" if self.flattened else "")


_OFFSETS = {"transactions": "ignore"}
CELLS: tuple[Cell, ...] = (
    Cell("json/topic", "json", _OFFSETS),
    Cell("avro/topic", "avro", _OFFSETS),
    Cell("avro/events", "avro", {**_OFFSETS, "schema_changes": {"source": "events"}}),
    Cell("json/events", "json", {**_OFFSETS, "schema_changes": {"source": "events"}}),
    Cell("json/whole", "json"),
    Cell("avro/whole", "avro"),
    Cell("json/group+whole", "json", {"group": "{tag}_group"}, roles=("a", "b")),
    Cell("json/history+feed", "json", {**_OFFSETS, "history": {}, "change_feed": {}}),
    Cell("json/flattened", "json", {**_OFFSETS, "flattened": {}}, flattened=True),
    Cell("avro/flattened", "avro", {**_OFFSETS, "flattened": {}}, flattened=True),
    Cell("json/flattened+kafka", "json", {**_OFFSETS, "flattened": {}, "ordering": "kafka"}, flattened=True),
)
"""The matrix's cells: the JSON baseline (``json_with_schema``, the schema-change topic, batches
cut by offsets: ``transactions: ignore``) and one or two options varied each. The connectors write
transaction metadata, which the ``whole`` cells use (``transactions: whole``, the table default).
The ``flattened`` cells read records flattened by Debezium's ``ExtractNewRecordState`` (their own
connectors, positions in the added fields, deletes rewritten); ``json/flattened+kafka`` applies
them in Kafka order, as a table without positions is (docs/table-config.md, ``ordering: kafka``:
its give-ups show in the matrix)."""
PHASES = ("dml", "kill9", "ddl", "replay", "partitions")
"""The history's phases, in order; the lake is caught up and compared after each."""
REDUCED_CELLS = ("avro/topic",)
REDUCED_PHASES = ("dml", "ddl")
"""The reduced matrix of ``tests/e2e/test_conformance.py``: the Avro cell (the JSON path's
convergence has tests/e2e/test_convergence.py), DML then DDL, within the suite's time budget."""

MAX_ROUNDS = 8
"""Runs of each table's DAG a phase's catch-up takes at most."""
SETTLE_S = 61.0
"""After a round that left a full snapshot in progress although every partition got a record after
it: wait this long (:data:`cdclake.model.convergence.SNAPSHOT_SETTLE_MS` and a second) before the
next."""
SAMPLES = 5
"""Differing rows (and quarantine errors) each table's outcome keeps."""

# --- the history ----------------------------------------------------------------------------------

Stmt = tuple[str, str, tuple[Any, ...]]
"""``(role, SQL with {t} for the table, parameters)``."""
Txn = list[Stmt]
"""Statements run as one source transaction (one statement: autocommit)."""

_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")

CREATE = """CREATE TABLE {t} (
  id INT NOT NULL PRIMARY KEY,
  name VARCHAR(40) NOT NULL,
  qty INT NOT NULL,
  price DECIMAL(8,2) NULL,
  updated DATETIME(6) NULL,
  doc JSON NULL,
  note VARCHAR(40) NULL
)"""
"""Every source table; ``doc`` is a MariaDB JSON column (LONGTEXT with a json_valid CHECK: Debezium
reads it as ``io.debezium.data.Json`` from the DDL, as a plain string from a snapshot)."""


class History:
    """The seeded history: the statements of each phase for the roles ``a`` and ``b``, from
    ``random.Random(seed)``, with the source state they lead to (keys, columns) so that later
    statements touch rows that exist. Every cell's tables get the same statements."""

    def __init__(self, seed: int, rows: int = 40, ops: int = 60, *, truncate: bool = True) -> None:
        self.rng = random.Random(seed)
        self.rows = rows
        self.ops = ops
        self.with_truncate = truncate
        self.ids: dict[str, set[int]] = {"a": set(), "b": set()}
        self.next_id = 1
        self.label = "name"  # RENAME COLUMN name TO label
        self.big_qty = False  # MODIFY qty BIGINT
        self.big_price = False  # MODIFY price DECIMAL(12,2)
        self.status = False  # ADD COLUMN status ... DEFAULT

    # values
    def _name(self) -> str:
        return f"{self.rng.choice(_WORDS)}-{self.rng.randint(0, 9999)}"

    def _qty(self) -> int:
        if self.big_qty and self.rng.random() < 0.4:
            return self.rng.randint(2**31, 2**40)
        return self.rng.randint(-999, 99999)

    def _price(self) -> Decimal | None:
        if self.rng.random() < 0.1:
            return None
        top = 999_999_999_999 if self.big_price and self.rng.random() < 0.4 else 99_999_999
        return Decimal(self.rng.randint(0, top)) / 100

    def _updated(self) -> dt.datetime:
        return dt.datetime(2026, 1, 1) + dt.timedelta(
            seconds=self.rng.randint(0, 10**7), microseconds=self.rng.randint(0, 999_999)
        )

    def _doc(self) -> str | None:
        if self.rng.random() < 0.2:
            return None
        doc = {"k": self.rng.randint(0, 100), "tags": self.rng.sample(_WORDS, self.rng.randint(0, 3))}
        if self.rng.random() < 0.5:
            doc["nested"] = {"x": self.rng.random() < 0.5, "n": None}
        return json.dumps(doc)

    # statements
    def insert(self, role: str) -> Stmt:
        key = self.next_id
        self.next_id += 1
        self.ids[role].add(key)
        cols = ["id", self.label, "qty", "price", "updated", "doc"]
        values: list[Any] = [key, self._name(), self._qty(), self._price(), self._updated(), self._doc()]
        if self.status and self.rng.random() < 0.5:  # else the column's default
            cols.append("status")
            values.append(self.rng.choice(("old", "hot", "cold")))
        marks = ", ".join(["%s"] * len(cols))
        return role, f"INSERT INTO {{t}} ({', '.join(cols)}) VALUES ({marks})", tuple(values)

    def _key(self, role: str) -> int:
        return self.rng.choice(sorted(self.ids[role]))

    def update(self, role: str) -> Stmt:
        setters: dict[str, Any] = {
            self.label: self._name,
            "qty": self._qty,
            "price": self._price,
            "updated": self._updated,
            "doc": self._doc,
        }
        if self.status:
            setters["status"] = lambda: self.rng.choice(("old", "hot", "cold"))
        chosen = self.rng.sample(sorted(setters), self.rng.randint(1, 3))
        values = tuple(setters[c]() for c in chosen)
        sets = ", ".join(f"{c} = %s" for c in chosen)
        return role, f"UPDATE {{t}} SET {sets} WHERE id = %s", (*values, self._key(role))

    def delete(self, role: str) -> Stmt:
        key = self._key(role)
        self.ids[role].discard(key)
        return role, "DELETE FROM {t} WHERE id = %s", (key,)

    def change_key(self, role: str) -> Stmt:
        """UPDATE of the primary key: Debezium's delete of the old key and create of the new."""
        old, new = self._key(role), self.next_id
        self.next_id += 1
        self.ids[role].discard(old)
        self.ids[role].add(new)
        return role, "UPDATE {t} SET id = %s WHERE id = %s", (new, old)

    def range_update(self, role: str) -> Stmt:
        keys = sorted(self.ids[role])
        lo = self.rng.randrange(len(keys))
        hi = min(len(keys) - 1, lo + self.rng.randint(1, 6))
        return (
            role,
            "UPDATE {t} SET qty = qty + 1, note = %s WHERE id BETWEEN %s AND %s",
            (
                f"range-{self.rng.randint(0, 999)}",
                keys[lo],
                keys[hi],
            ),
        )

    def _one(self, role: str) -> Stmt:
        if len(self.ids[role]) < self.rows // 2:
            return self.insert(role)
        pick = self.rng.random()
        if pick < 0.3:
            return self.insert(role)
        if pick < 0.6:
            return self.update(role)
        if pick < 0.72:
            return self.delete(role)
        if pick < 0.86:
            return self.change_key(role)
        return self.range_update(role)

    def dml(self, n: int) -> list[Txn]:
        """``n`` transactions: one statement mostly, one in five of 2 to 5 statements over both
        roles."""
        txns: list[Txn] = []
        for _ in range(n):
            if self.rng.random() < 0.2:
                txns.append([self._one(self.rng.choice("ab")) for _ in range(self.rng.randint(2, 5))])
            else:
                txns.append([self._one(self.rng.choice("aab"))])
        return txns

    def load(self) -> list[Txn]:
        """The tables and their first rows (one transaction of inserts per role)."""
        txns: list[Txn] = [[(role, CREATE, ())] for role in "ab"]
        for role in "ab":
            txns.append([self.insert(role) for _ in range(self.rows)])
        return txns

    def truncate(self, role: str) -> list[Txn]:
        """A TRUNCATE (its own transaction: MariaDB commits around it) and new rows."""
        self.ids[role].clear()
        return [[(role, "TRUNCATE TABLE {t}", ())], [self.insert(role) for _ in range(self.rows // 2 + 5)]]

    def phase_dml(self) -> list[Txn]:
        half = self.ops // 2
        truncate = self.truncate("a") if self.with_truncate else []
        return [*self.load(), *self.dml(half), *truncate, *self.dml(self.ops - half)]

    def phase_offline(self) -> list[Txn]:
        """While Connect is down: deletes, updates, a key change, inserts."""
        txns: list[Txn] = []
        for role in "ab":
            txns += [[self.delete(role)] for _ in range(min(5, len(self.ids[role]) // 4))]
            txns += [[self.update(role)] for _ in range(4)]
            txns += [[self.change_key(role)], [self.insert(role)], [self.insert(role)]]
        return txns

    def phase_ddl(self) -> list[Txn]:
        txns: list[Txn] = [[self.update(r)] for r in "ab" for _ in range(3)]  # the old schema
        txns += [[(r, "ALTER TABLE {t} ADD COLUMN status VARCHAR(10) NOT NULL DEFAULT 'new'", ())] for r in "ab"]
        self.status = True
        txns += self.dml(self.ops // 6)
        txns += [[(r, "ALTER TABLE {t} MODIFY qty BIGINT NOT NULL", ())] for r in "ab"]
        self.big_qty = True
        txns += [[self.insert(r)] for r in "ab" for _ in range(2)]
        txns += [[(r, "ALTER TABLE {t} RENAME COLUMN name TO label", ())] for r in "ab"]
        self.label = "label"
        txns += self.dml(self.ops // 6)
        txns += [[(r, "ALTER TABLE {t} MODIFY price DECIMAL(12,2) NULL", ())] for r in "ab"]
        self.big_price = True
        txns += self.dml(self.ops // 6)
        return txns

    def barrier(self, note: str) -> list[Txn]:
        """Every row of each table gets ``note``: each partition of each topic has a record after
        everything before (a snapshot or a schema change settles at once), and the harness waits
        for the note on every topic."""
        return [[(role, "UPDATE {t} SET note = %s", (note,))] for role in "ab"]


# --- outcomes -----------------------------------------------------------------------------------------


@dataclass
class TableOutcome:
    """One table after one phase."""

    table: str
    source_rows: int = 0
    lake_rows: int = 0
    only_in_source: int = 0
    only_in_lake: int = 0
    differing_values: int = 0
    samples: list[str] = field(default_factory=list)
    quarantined: int = 0
    """Records its runs quarantined in this phase."""
    quarantine_errors: list[str] = field(default_factory=list)
    history_differing: int | None = None
    """With a history: keys whose current version differs from the source (``None``: no history)."""
    failed: str | None = None
    """Why the table could not be caught up (a run failed, not caught up), or ``None``."""
    runs: int = 0

    @property
    def differing(self) -> int:
        return self.only_in_source + self.only_in_lake + self.differing_values


@dataclass
class CellOutcome:
    """One cell after one phase: its tables' outcomes."""

    cell: str
    phase: str
    tables: list[TableOutcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(
            t.failed is None and t.differing == 0 and t.quarantined == 0 and not t.history_differing
            for t in self.tables
        )

    def text(self) -> str:
        """``equal``, or what differs: ``N differing rows``, ``Q quarantined``, ``run failed``."""
        if self.ok:
            return "equal"
        parts = []
        differing = sum(t.differing for t in self.tables)
        history = sum(t.history_differing or 0 for t in self.tables)
        quarantined = sum(t.quarantined for t in self.tables)
        if differing:
            parts.append(f"{differing} differing row{'s' if differing != 1 else ''}")
        if history:
            parts.append(f"{history} differing in history")
        if quarantined:
            parts.append(f"{quarantined} quarantined")
        failed = [t.failed for t in self.tables if t.failed]
        if failed:
            parts.append("run failed" if any(f.startswith("run failed") for f in failed) else failed[0].split(":")[0])
        return ", ".join(parts)


@dataclass
class Matrix:
    """The result: every phase x cell outcome."""

    seed: int
    cells: list[str]
    phases: list[str]
    outcomes: dict[str, dict[str, CellOutcome]] = field(default_factory=dict)
    """phase -> cell -> outcome."""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(o.ok for by_cell in self.outcomes.values() for o in by_cell.values()) and self.complete

    @property
    def complete(self) -> bool:
        return all(c in self.outcomes.get(p, {}) for p in self.phases for c in self.cells)

    def table(self) -> str:
        """The matrix as a plain text table: a row per phase, a column per cell."""
        head = ["phase", *self.cells]
        rows = [
            [p, *(self.outcomes[p][c].text() if c in self.outcomes.get(p, {}) else "-" for c in self.cells)]
            for p in self.phases
        ]
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        line = "  ".join("-" * w for w in widths)
        fmt = [("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True))).rstrip() for r in [head, *rows]]
        verdict = "every cell equal, nothing quarantined" if self.ok else "NOT every cell equal"
        return "\n".join(
            [
                f"conformance matrix: seed {self.seed}, {len(self.cells)} cells x {len(self.phases)} phases, "
                f"{self.seconds:.0f} s: {verdict}",
                fmt[0],
                line,
                *fmt[1:],
            ]
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "cells": self.cells,
            "phases": self.phases,
            "seconds": round(self.seconds, 1),
            "ok": self.ok,
            "matrix": {p: {c: o.text() for c, o in by_cell.items()} for p, by_cell in self.outcomes.items()},
            "outcomes": {
                p: {
                    c: {**asdict(o), "ok": o.ok, "text": o.text(), "seconds": round(o.seconds, 1)}
                    for c, o in by_cell.items()
                }
                for p, by_cell in self.outcomes.items()
            },
            "notes": self.notes,
        }


# --- comparing ---------------------------------------------------------------------------------------


def _norm(value: Any) -> Any:
    """One comparable value: bytes for binary, naive UTC for an aware timestamp."""
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


def compare_rows(
    source: Mapping[Any, Mapping[str, Any]], lake: Mapping[Any, Mapping[str, Any]], columns: Sequence[str]
) -> tuple[int, int, int, list[str]]:
    """``(only in source, only in lake, differing values, samples)`` of two tables by key, over
    the source's ``columns`` (a column the lake lacks differs in every row)."""
    only_source = [k for k in source if k not in lake]
    only_lake = [k for k in lake if k not in source]
    samples = [f"key {k}: only in the source" for k in sorted(only_source)[:SAMPLES]]
    samples += [f"key {k}: only in the lake" for k in sorted(only_lake)[:SAMPLES]]
    differing = 0
    for key in sorted(k for k in source if k in lake):
        s, lk = source[key], lake[key]
        cols = [c for c in columns if c not in lk or _norm(s[c]) != _norm(lk[c])]
        if cols:
            differing += 1
            if len(samples) < 3 * SAMPLES:
                samples.append(
                    f"key {key}: "
                    + "; ".join(
                        f"{c} source {s[c]!r} lake {lk[c]!r}" if c in lk else f"{c} not in the lake" for c in cols
                    )
                )
    return len(only_source), len(only_lake), differing, samples


# --- the harness ------------------------------------------------------------------------------------


class Harness:
    """One run of the matrix on a running chain (broker, MariaDB, Kafka Connect) of ``settings``,
    with a schema registry at ``registry_url`` (its Confluent-compatible API) for the Avro cells.

    The Connect worker is restarted with the connectors the cells need; :meth:`close` restarts it
    with the JSON connector alone (what the chain runs otherwise).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        cells: Sequence[Cell],
        phases: Sequence[str],
        seed: int,
        registry_url: str | None,
        work: Path,
        dags: Dags,
        say: Callable[[str], None] = print,
        rows: int = 40,
        ops: int = 60,
        truncate: bool = True,
    ) -> None:
        from cdclake.io.kafka import KafkaClients
        from cdclake.io.registry import SchemaRegistry

        unknown = [p for p in phases if p not in PHASES]
        if unknown:
            raise ValueError(f"unknown phase(s) {unknown}: choose from {list(PHASES)}")
        if any(c.converter == "avro" for c in cells) and not registry_url:
            raise ValueError("Avro cells need a schema registry (registry_url)")
        self.cells = list(cells)
        self.phases = [p for p in PHASES if p in phases]
        self.seed = seed
        self.tag = "cf" + uuid.uuid4().hex[:5]
        self.work = work
        (work / "logs").mkdir(parents=True, exist_ok=True)
        self.registry_url = registry_url
        self.settings = settings.model_copy(
            update={"tables_config": work / "tables.yaml", "schema_registry_url": registry_url or ""}
        )
        self.say = say
        self.dags = dags
        self.history = History(seed, rows=rows, ops=ops, truncate=truncate)
        self.kafka = KafkaClients.from_bootstrap(settings.kafka_bootstrap)
        self.avro_kafka = (
            KafkaClients.from_bootstrap(settings.kafka_bootstrap, SchemaRegistry({"url": registry_url}))
            if registry_url
            else self.kafka
        )
        self.quarantined: dict[str, int] = {}
        self.matrix = Matrix(seed, [c.name for c in self.cells], list(self.phases))
        self._runs = 0
        self._read: dict[str, dict[int, int]] = {}
        if not truncate:
            self.matrix.notes.append("the history without its TRUNCATE (--no-truncate)")

    # names
    def table(self, cell: Cell, role: str) -> str:
        return f"{self.tag}_{cell.slug}_{role}"

    def tables(self) -> Iterator[tuple[Cell, str]]:
        for cell in self.cells:
            for role in cell.roles:
                yield cell, self.table(cell, role)

    def prefix(self, cell: Cell) -> str:
        from cdclake_dev.chain import PREFIX_SUFFIXES

        return self.settings.topic_prefix + PREFIX_SUFFIXES[cell.connector]

    def topic(self, cell: Cell, table: str) -> str:
        return f"{self.prefix(cell)}.inventory.{table}"

    def _group(self, cell: Cell) -> str | None:
        group = cell.options.get("group")
        return str(group).format(tag=self.tag) if group else None

    def _connectors(self) -> tuple[str, ...]:
        from cdclake_dev.chain import CONNECTOR_FILES

        wanted = {"json"} | {c.connector for c in self.cells}
        return tuple(name for name in CONNECTOR_FILES if name in wanted)

    def write_config(self) -> None:
        import yaml

        entries = []
        for cell, table in self.tables():
            options = dict(cell.options)
            if "group" in options:
                options["group"] = self._group(cell)
            entry = {
                "name": table,
                "topic": self.topic(cell, table),
                "namespace": NAMESPACE,
                "table": table,
                "primary_key": ["id"],
                **options,
            }
            if cell.converter == "avro":
                entry["value_format"] = "avro"
            entries.append(entry)
        config = {"defaults": {"schedule": None, "retries": 0}, "tables": entries}
        self.settings.tables_config.write_text(yaml.safe_dump(config, sort_keys=False))

    # the chain
    def start_connect(self, **kwargs: Any) -> None:
        from cdclake_dev import chain

        tables: dict[str, list[str]] = {}
        for c, t in self.tables():
            tables.setdefault(c.connector, []).append(f"inventory.{t}")
        self.say(
            "  "
            + chain.start_connect(
                self.settings,
                connectors=self._connectors(),
                registry_url=self.registry_url,
                tables=tables,
                transaction_metadata=True,
                **kwargs,
            )
        )

    def _notification_topics(self) -> list[tuple[str, Any]]:
        from cdclake_dev.chain import PREFIX_SUFFIXES

        prefix = self.settings.topic_prefix
        return [
            (
                f"{prefix}{PREFIX_SUFFIXES[name]}.notifications",
                self.avro_kafka if name.startswith("avro") else self.kafka,
            )
            for name in self._connectors()
        ]

    def wait_streaming(self, since_ms: int, timeout_s: float = 240.0) -> None:
        """Wait until every connector's initial snapshot of a start at or after ``since_ms`` ended
        (its ``Initial Snapshot`` notification ``COMPLETED``, or ``SKIPPED`` when it resumes from
        its offsets)."""
        from cdclake.pipeline.snapshot import read_notifications
        from cdclake_dev import chain

        deadline = time.monotonic() + timeout_s
        pending = dict(self._notification_topics())
        while pending:
            for topic, kafka in list(pending.items()):
                if any(
                    n.aggregate_type == "Initial Snapshot"
                    and n.type in ("COMPLETED", "SKIPPED")
                    and n.timestamp_ms >= since_ms - 1000
                    for n in read_notifications(kafka, topic)
                ):
                    del pending[topic]
            if not pending:
                return
            if time.monotonic() > deadline:
                statuses = {n: chain.connector_status(self.settings, n) for n in chain.connector_names(self.settings)}
                raise RuntimeError(f"no snapshot end on {sorted(pending)} within {timeout_s:.0f} s: {statuses}")
            time.sleep(1.0)

    def restart_connect(self, *, hard: bool = False, without_offsets: bool = False, **kwargs: Any) -> None:
        from cdclake_dev import chain

        self.say("  " + chain.stop_connect(self.settings, hard=hard))
        if without_offsets:
            chain.connect_offsets_file(self.settings).unlink(missing_ok=True)
        since = int(time.time() * 1000)
        self.start_connect(**kwargs)
        self.wait_streaming(since)

    def close(self) -> None:
        """Restart the worker with the JSON connector alone, as the chain runs otherwise."""
        from cdclake_dev import chain

        self.say("  " + chain.stop_connect(self.settings))
        self.say("  " + chain.start_connect(self.settings))

    # the source
    def _db(self) -> Any:
        from cdclake_dev.chain import mariadb_connect

        return mariadb_connect(self.settings, database="inventory")

    def execute(self, txns: Sequence[Txn]) -> int:
        """Run ``txns`` on every cell's tables (cell after cell); returns the statements run."""
        done = 0
        with contextlib.closing(self._db()) as db, db.cursor() as cur:
            for cell in self.cells:
                for txn in txns:
                    stmts = [s for s in txn if s[0] in cell.roles]
                    if not stmts:
                        continue
                    if len(stmts) > 1:
                        cur.execute("START TRANSACTION")
                    for role, sql, params in stmts:
                        cur.execute(sql.format(t=self.table(cell, role)), params)
                        done += 1
                    if len(stmts) > 1:
                        cur.execute("COMMIT")
        return done

    def barrier(self, note: str, timeout_s: float = 240.0) -> None:
        """Every row of every table gets ``note``; returns once each table's topic holds it."""
        self.execute(self.history.barrier(note))
        for cell, table in self.tables():
            self._wait_note(cell, table, note, timeout_s)

    def _wait_note(self, cell: Cell, table: str, note: str, timeout_s: float) -> None:
        from cdclake.io.kafka import read_partition, topic_watermarks
        from cdclake.model.avro import is_framed, read_value

        kafka = self.avro_kafka if cell.converter == "avro" else self.kafka
        topic = self.topic(cell, table)
        read = self._read.setdefault(topic, {})  # a note is always written after the last one looked for
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                high = topic_watermarks(kafka, topic).high
            except LookupError:
                high = {}
            for p, end in high.items():
                for msg in read_partition(kafka, topic, p, read.get(p, 0), end, group_id="cdclake-conformance"):
                    read[p] = (msg.offset() or 0) + 1
                    value = msg.value()
                    if value is None:
                        continue
                    if is_framed(value):
                        lookup = kafka.schema_lookup
                        assert lookup is not None
                        payload = read_value(value, lookup)[2]
                    else:
                        doc = json.loads(value)
                        payload = doc.get("payload") if isinstance(doc, dict) and "payload" in doc else doc
                    if not isinstance(payload, dict):
                        continue
                    row = payload if cell.flattened else payload.get("after") or {}
                    if row.get("note") == note and row.get("__deleted") != "true":
                        return
                read[p] = max(read.get(p, 0), end)
            time.sleep(0.5)
        raise RuntimeError(f"no event with note {note!r} on {topic} within {timeout_s:.0f} s")

    # the lake
    def _run_dag(self, table: str, conf: dict | None = None) -> str | None:
        """Run the table's DAG once, its output in ``logs/``; the failure's cause or ``None``."""
        self._runs += 1
        log = self.work / "logs" / f"{self._runs:04d}-{table}.log"
        with open(log, "w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            rc = self.dags.run_table(table, self.settings, conf)
        if rc == 0:
            return None
        return "run failed: " + (self.dags.cause(log.read_text()) or f"see {log}").splitlines()[0][:300]

    def _run_group(self, group: str) -> str | None:
        self._runs += 1
        log = self.work / "logs" / f"{self._runs:04d}-group-{group}.log"
        with open(log, "w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            rc = self.dags.run_group(group, self.settings)
        if rc == 0:
            return None
        return "group publish failed: " + (self.dags.cause(log.read_text()) or f"see {log}").splitlines()[0][:300]

    def _state(self, cell: Cell, table: str) -> tuple[bool, bool, Any]:
        """``(caught up, snapshot in progress, committed offsets)``: the committed offsets of the
        table's runs (its stage branch in a group) against the topic's high watermarks."""
        from cdclake.io.catalog import load_catalog, load_table_or_none
        from cdclake.io.kafka import topic_watermarks
        from cdclake.io.refs import committed_offsets, head_snapshot
        from cdclake.model.layout import SummaryKeys
        from cdclake.model.snapshot import caught_up

        lake = load_table_or_none(load_catalog(self.settings), f"{NAMESPACE}.{table}")
        if lake is None:
            return False, False, None
        topic = self.topic(cell, table)
        head = head_snapshot(lake)
        props = dict(head.summary.additional_properties) if head is not None and head.summary else {}
        committed = committed_offsets(lake, topic)
        done = caught_up(committed, topic_watermarks(self.kafka, topic).high)
        return done, SummaryKeys.SNAPSHOT_IN_PROGRESS in props, committed

    def catch_up(
        self, phase: str, outcomes: dict[str, TableOutcome], first_conf: Mapping[str, dict] | None = None
    ) -> None:
        """Run every table's DAG until it applied its topic to the end with no full snapshot in
        progress (at most :data:`MAX_ROUNDS` runs each); a table whose run fails is left with the
        failure. ``first_conf``: the Params of each table's first run, by table (a replay)."""
        pending = [(c, t) for c, t in self.tables() if outcomes[t].failed is None]
        nudged = 0
        before: dict[str, Any] = {}
        for round_ in range(MAX_ROUNDS):
            for _, table in pending:
                outcomes[table].runs += 1
                failed = self._run_dag(table, (first_conf or {}).get(table) if round_ == 0 else None)
                if failed:
                    outcomes[table].failed = failed
            for group in sorted({g for c, _ in pending if (g := self._group(c))}):
                failed = self._run_group(group)
                if failed:
                    for cell, table in self.tables():
                        if self._group(cell) == group:
                            outcomes[table].failed = outcomes[table].failed or failed
            states = {t: self._state(c, t) for c, t in pending if outcomes[t].failed is None}
            pending = [(c, t) for c, t in pending if t in states and not (states[t][0] and not states[t][1])]
            for cell, table in list(pending):
                # a run that moved nothing, twice: the table waits for something that does not come
                if round_ >= 1 and not states[table][1] and states[table][2] == before.get(table, "none"):
                    if outcomes[table].runs >= 2:
                        outcomes[table].failed = f"not caught up: stalled at offsets {states[table][2]}"
                        pending.remove((cell, table))
                before[table] = states[table][2]
            if not pending:
                return
            if any(states[t][1] for _, t in pending):
                # a full snapshot in progress: every partition needs a record after its end, or
                # the settle time since it
                if nudged >= 2:
                    time.sleep(SETTLE_S)
                nudged += 1
                self.barrier(f"nudge-{phase}-{round_}")
        for _, table in pending:
            outcomes[table].failed = f"not caught up after {MAX_ROUNDS} runs"

    def compare(self, cell: Cell, table: str, outcome: TableOutcome) -> None:
        from cdclake.io.catalog import load_catalog, load_table_or_none
        from cdclake.model.history import HISTORY_SUFFIX, IS_CURRENT_COLUMN, IS_DELETED_COLUMN
        from cdclake.model.layout import QUARANTINE_SUFFIX, side_table

        with contextlib.closing(self._db()) as db, db.cursor() as cur:
            cur.execute(f"SELECT * FROM {table}")
            columns = [d[0] for d in cur.description]
            source = {r[0]: dict(zip(columns, r, strict=True)) for r in cur.fetchall()}
        catalog = load_catalog(self.settings)
        identifier = f"{NAMESPACE}.{table}"
        lake_table = load_table_or_none(catalog, identifier)
        lake = {r["id"]: r for r in lake_table.scan().to_arrow().to_pylist()} if lake_table is not None else {}
        outcome.source_rows, outcome.lake_rows = len(source), len(lake)
        outcome.only_in_source, outcome.only_in_lake, outcome.differing_values, outcome.samples = compare_rows(
            source, lake, columns
        )
        if cell.options.get("history") is not None:
            history = load_table_or_none(catalog, side_table(identifier, HISTORY_SUFFIX))
            current = (
                {
                    r["id"]: r
                    for r in history.scan().to_arrow().to_pylist()
                    if r[IS_CURRENT_COLUMN] and not r[IS_DELETED_COLUMN]
                }
                if history is not None
                else {}
            )
            a, b, c, samples = compare_rows(source, current, columns)
            outcome.history_differing = a + b + c
            outcome.samples += [f"history: {s}" for s in samples[:SAMPLES]]
        quarantine = load_table_or_none(catalog, side_table(identifier, QUARANTINE_SUFFIX))
        rows = quarantine.scan().to_arrow().to_pylist() if quarantine is not None else []
        outcome.quarantined = len(rows) - self.quarantined.get(table, 0)
        if outcome.quarantined:
            new = sorted(rows, key=lambda r: r["quarantined_at"])[-outcome.quarantined :]
            outcome.quarantine_errors = sorted({str(r["error"])[:300] for r in new})[:SAMPLES]
        self.quarantined[table] = len(rows)

    def settle(self, phase: str, started: float, first_conf: Mapping[str, dict] | None = None) -> None:
        """Catch every table up, compare it, and record the phase's outcomes."""
        outcomes = {t: TableOutcome(t) for _, t in self.tables()}
        self.catch_up(phase, outcomes, first_conf)
        for cell, table in self.tables():
            try:
                self.compare(cell, table, outcomes[table])
            except Exception as e:  # noqa: BLE001 - the outcome says so; the other cells go on
                outcomes[table].failed = f"compare failed: {type(e).__name__}: {e}"[:300]
        took = time.monotonic() - started
        self.matrix.outcomes[phase] = {
            cell.name: CellOutcome(cell.name, phase, [outcomes[self.table(cell, r)] for r in cell.roles], took)
            for cell in self.cells
        }
        self.say(
            f"phase {phase} ({took:.0f} s): "
            + "; ".join(f"{c}: {o.text()}" for c, o in self.matrix.outcomes[phase].items())
        )

    # the phases
    def run(self) -> Matrix:
        """Run every phase (in :data:`PHASES` order); returns the matrix."""
        t0 = time.monotonic()
        self.write_config()
        self.dags.ensure_db(self.settings)
        self.say(f"conformance: seed {self.seed}, cells {self.matrix.cells}, phases {self.phases}, tables {self.tag}_*")
        self.say("connectors from their files:")
        self.restart_connect()
        for phase in self.phases:
            started = time.monotonic()
            self.say(f"--- phase {phase}")
            try:
                getattr(self, f"_phase_{phase}")(phase, started)
            except Exception as e:  # noqa: BLE001 - the matrix keeps the phases before, and says so
                error = f"harness error: {type(e).__name__}: {e}"[:300]
                self.say(f"phase {phase} stopped: {error}")
                self.matrix.notes.append(f"phase {phase} stopped: {error}")
                self.matrix.outcomes[phase] = {
                    cell.name: CellOutcome(
                        cell.name, phase, [TableOutcome(self.table(cell, r), failed=error) for r in cell.roles]
                    )
                    for cell in self.cells
                }
                break
        self.matrix.seconds = time.monotonic() - t0
        return self.matrix

    def _phase_dml(self, phase: str, started: float) -> None:
        if "dml" != self.phases[0]:
            raise ValueError("the dml phase creates the tables: it comes first")
        with contextlib.closing(self._db()) as db, db.cursor() as cur:
            for _, table in self.tables():
                cur.execute(f"DROP TABLE IF EXISTS {table}")
        self.say(f"  {self.execute(self.history.phase_dml())} statement(s) per the history")
        self.barrier(f"barrier-{phase}")
        self.settle(phase, started)

    def _phase_kill9(self, phase: str, started: float) -> None:
        from cdclake_dev import chain

        # no offsets saved for an hour: the kill below comes before the first flush
        self.restart_connect(without_offsets=True, offset_flush_interval_ms=3_600_000)
        self.say(f"  {self.execute(self.history.dml(self.history.ops // 3))} statement(s) streamed")
        self.barrier(f"barrier-{phase}-streamed")
        for _, table in self.tables():  # the lake applies some of it before the kill
            self._run_dag(table)
        if chain.connect_offsets_file(self.settings).exists():
            self.matrix.notes.append("kill9: Connect saved offsets before the kill (not a first-flush kill)")
        self.say("  " + chain.stop_connect(self.settings, hard=True))
        self.say(f"  {self.execute(self.history.phase_offline())} statement(s) while Connect is down")
        since = int(time.time() * 1000)
        self.start_connect()  # no offsets: new initial snapshots
        self.wait_streaming(since)
        self.say(f"  {self.execute(self.history.dml(self.history.ops // 3))} statement(s) after the restart")
        self.barrier(f"barrier-{phase}")
        self.settle(phase, started)

    def _phase_ddl(self, phase: str, started: float) -> None:
        self.say(f"  {self.execute(self.history.phase_ddl())} statement(s) with ALTERs")
        self.barrier(f"barrier-{phase}")
        self.settle(phase, started)

    def _phase_replay(self, phase: str, started: float) -> None:
        from cdclake.io.kafka import topic_watermarks

        self.say(f"  {self.execute(self.history.dml(self.history.ops // 4))} statement(s)")
        self.barrier(f"barrier-{phase}")
        replays = {
            t: {"replay_from_offsets": {str(p): 0 for p in sorted(topic_watermarks(self.kafka, self.topic(c, t)).high)}}
            for c, t in self.tables()
        }
        self.settle(phase, started, first_conf=replays)

    def _phase_partitions(self, phase: str, started: float) -> None:
        from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]  # re-exported at run time

        from cdclake.io.kafka import topic_watermarks

        topics = [self.topic(c, t) for c, t in self.tables()]
        grow = [NewPartitions(t, len(topic_watermarks(self.kafka, t).high) + 2) for t in topics]
        admin = self.kafka.admin()  # kept until its futures are done (destroyed, it fails them)
        for topic, future in admin.create_partitions(grow).items():
            future.result(30)
            self.say(f"  {topic}: {len(topic_watermarks(self.kafka, topic).high)} partitions")
        # the connectors' producers see the new partitions at their next metadata refresh (5 min by
        # default): a restart (offsets saved) at once
        self.restart_connect()
        self.say(f"  {self.execute(self.history.dml(self.history.ops // 2))} statement(s)")
        self.barrier(f"barrier-{phase}")
        self.settle(phase, started)


def run_matrix(
    settings: Settings,
    *,
    cells: Sequence[str] | None = None,
    phases: Sequence[str] = PHASES,
    seed: int = 51,
    registry_url: str | None = None,
    work: Path,
    dags: Dags,
    say: Callable[[str], None] = print,
    rows: int = 40,
    ops: int = 60,
    truncate: bool = True,
    restore: bool = True,
) -> Matrix:
    """Run the matrix of ``cells`` (names of :data:`CELLS`) and ``phases`` on the running chain of
    ``settings`` (broker, MariaDB, Kafka Connect; the engine is started on demand) with ``dags``
    (:func:`cdclake_dev.cli.conformance_dags`), its work files in ``work``; with ``restore`` the Connect worker runs the JSON connector alone afterwards, as
    the chain does otherwise.

    Raises:
        ValueError: an unknown cell or phase, or Avro cells without ``registry_url``.
    """
    by_name = {cell.name: cell for cell in CELLS}
    cells = list(by_name) if cells is None else cells
    unknown = [c for c in cells if c not in by_name]
    if unknown:
        raise ValueError(f"unknown cell(s) {unknown}: choose from {list(by_name)}")
    harness = Harness(
        settings,
        cells=[by_name[c] for c in cells],
        phases=phases,
        seed=seed,
        registry_url=registry_url,
        work=work,
        dags=dags,
        say=say,
        rows=rows,
        ops=ops,
        truncate=truncate,
    )
    try:
        return harness.run()
    finally:
        if restore:
            harness.close()


# --- the command ----------------------------------------------------------------------------------------


def _own_stack(work: Path) -> Settings:
    from cdclake_dev.process import LOOPBACK, free_port

    return Settings.from_env(
        {
            "CDCLAKE_STATE_DIR": str(work / "stack"),
            "CDCLAKE_KAFKA_BOOTSTRAP": f"{LOOPBACK}:{free_port(2)}",
            "CDCLAKE_TABLES_CONFIG": str(work / "tables.yaml"),
            "CDCLAKE_MARIADB_PORT": str(free_port()),
            "CDCLAKE_CONNECT_PORT": str(free_port()),
            "CDCLAKE_SPARK_CONNECT_PORT": str(free_port()),
            "CDCLAKE_TOPIC_PREFIX": "conf",
            "CDCLAKE_ENGINE_MEMORY": "2g",
        }
    )


def markdown(result: dict[str, Any], table: str) -> str:
    """The result file's Markdown: the matrix, then each outcome that is not ``equal``."""
    lines = ["# Conformance matrix", "", "```", table, "```", ""]
    for phase, by_cell in result["outcomes"].items():
        for cell, outcome in by_cell.items():
            if outcome["ok"]:
                continue
            lines.append(f"## {phase} x {cell}: {outcome['text']}")
            for t in outcome["tables"]:
                for what in ("failed",):
                    if t[what]:
                        lines.append(f"- {t['table']}: {t[what]}")
                lines += [f"- {t['table']}: {s}" for s in t["samples"]]
                lines += [f"- {t['table']}: quarantined: {e}" for e in t["quarantine_errors"]]
            lines.append("")
    return "\n".join(lines) + "\n"


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="cdclake conformance", description=__doc__)
    parser.add_argument("--seed", type=int, default=None, help="the history's seed (default: a random one, printed)")
    parser.add_argument(
        "--cells",
        default=",".join(c.name for c in CELLS),
        help=f"comma-separated cells (default all: {CELLS[0].name},...)",
    )
    parser.add_argument(
        "--phases", default=",".join(PHASES), help=f"comma-separated phases (default {','.join(PHASES)})"
    )
    parser.add_argument("--rows", type=int, default=40, help="rows each table starts with (40)")
    parser.add_argument("--ops", type=int, default=60, help="transactions of the DML phase (60; the others scale)")
    parser.add_argument("--no-truncate", action="store_true", help="leave the TRUNCATE out of the history")
    parser.add_argument("--out", default=str(RESULTS_DIR), help="folder of the result files (bench/results)")
    parser.add_argument("--state-dir", help="the work folder (default: a temporary one, deleted afterwards)")
    parser.add_argument("--keep-state", action="store_true", help="keep the temporary work folder")
    return parser


def run_command(args: argparse.Namespace, dags: Dags, say: Callable[[str], None]) -> int:
    """``cdclake conformance`` (arguments of :func:`build_parser`): the matrix on a stack of its own
    (broker, MariaDB, Kafka Connect, Apicurio Registry in memory, the Spark Connect engine, all on
    free loopback ports, state in a temporary folder); ``say`` prints each line: the progress, the
    matrix, the result files ``<out>/conformance-<run id>.json`` and ``.md``. Returns 1 unless
    every cell is equal with nothing quarantined."""
    from cdclake_dev import chain, engine, stack
    from cdclake_dev.parts.registry import SchemaRegistry
    from cdclake_dev.process import free_port

    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1_000_000)
    started = dt.datetime.now(dt.timezone.utc)
    run_id = started.strftime("%Y%m%dT%H%M%SZ")
    work = Path(args.state_dir).resolve() if args.state_dir else Path(tempfile.mkdtemp(prefix="cdclake-conformance-"))
    work.mkdir(parents=True, exist_ok=True)
    settings = _own_stack(work)

    say(f"conformance run {run_id}: seed {seed} (--seed {seed} runs the same history), work folder {work}")
    registry = SchemaRegistry(settings.state_dir / "registry", free_port())
    t0 = time.monotonic()
    matrix: Matrix | None = None
    error: str | None = None
    try:
        say("  " + stack.start_broker(settings))
        say("  " + chain.start_mariadb(settings))
        took = registry.start()
        say(f"  Apicurio Registry on {registry.url} in {took:.1f} s")
        say("  " + engine.start_engine(settings))
        matrix = run_matrix(
            settings,
            cells=[c for c in args.cells.split(",") if c],
            phases=[p for p in args.phases.split(",") if p],
            seed=seed,
            registry_url=registry.ccompat_url,
            work=work,
            dags=dags,
            say=say,
            rows=args.rows,
            ops=args.ops,
            truncate=not args.no_truncate,
            restore=False,
        )
    except Exception as e:  # noqa: BLE001 - the result file says so; exit 1
        error = f"{type(e).__name__}: {e}"
        say(f"conformance run stopped: {error}")
    finally:
        for stop in (chain.stop_connect, engine.stop_engine, chain.stop_mariadb, stack.stop_broker):
            try:
                say("  " + stop(settings))
            except Exception as e:  # noqa: BLE001 - stop the others all the same
                say(f"  stopping failed: {e}")
        registry.stop()
    wall = time.monotonic() - t0
    if matrix is None:
        matrix = Matrix(seed, args.cells.split(","), args.phases.split(","))
    matrix.seconds = wall
    if error:
        matrix.notes.append(f"stopped: {error}")
    table = matrix.table()
    result = {"started": run_id, **matrix.as_dict(), "wall_seconds": round(wall, 1)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"conformance-{run_id}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2, default=str).replace(str(work), "<work_dir>"))
    stem.with_suffix(".md").write_text(markdown(result, table).replace(str(work), "<work_dir>"))
    say(table)
    say(f"results: {stem}.json, {stem}.md")
    if not args.state_dir and not args.keep_state:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if matrix.ok and error is None else 1
