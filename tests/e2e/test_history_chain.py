"""The history and the change feed on the real chain (MariaDB -> Debezium -> Kafka -> the table DAG
-> Iceberg) under a seeded workload (issue 32): the history answers "as of" each source time as
the source was then, and the change feed, replayed in commit order, rebuilds the table."""

from __future__ import annotations

import json
import math
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from cdclake.io.catalog import load_catalog
from cdclake.io.changes import runs_after
from cdclake.io.history import history_as_of
from cdclake.io.kafka import KafkaClients, read_topic
from cdclake.model.changes import CHANGES_SUFFIX
from cdclake.model.config import load_tables
from cdclake.model.history import HISTORY_SUFFIX
from cdclake.model.layout import METADATA_COLUMNS, side_table
from cdclake.model.reconcile import CompareColumn, Kind
from cdclake.model.snapshot import build_signal
from cdclake.pipeline.reconcile_history import check_history
from cdclake.pipeline.snapshot import read_notifications
from cdclake_dev import chain as source_chain
from cdclake_dev.cli import run_table_dag
from tests.e2e.test_chain import wait_for_note
from tests.e2e.test_convergence import DDL, catch_up, lake_rows, source_rows, with_table
from tests.integration.test_change_feed import replay, run_changes, table_now

pytestmark = pytest.mark.e2e

SEED = 32
NAME = "hist"
SOURCE_COLUMNS = ("id", "v", "note", "c1", "c2")
"""The source table's columns at the end (``c1``, ``c2`` added mid-stream)."""
COMPARED = [CompareColumn(c, Kind.INT if c in ("id", "c2") else Kind.STRING) for c in SOURCE_COLUMNS]


@dataclass(frozen=True)
class State:
    """The source table as it was at ``at``: its columns then and ``SELECT *`` of them. ``streamed``
    is false while the source held a change its binlog never carried (only a snapshot tells the
    lake of it)."""

    step: str
    at: datetime
    columns: tuple[str, ...]
    rows: list[tuple]
    streamed: bool = True


class Workload:
    """Seeded changes to ``inventory.hist``, each step recorded with the time just after its commit.

    MariaDB's binlog times are whole seconds (the statement's start): after each step the next
    waits for the next second, so the events of a step are stamped at or before its recorded time
    and those of the next step after it."""

    def __init__(self, db, seed: int) -> None:
        self.db = db
        self.rng = random.Random(seed)
        self.columns: tuple[str, ...] = ("id", "v", "note")
        self.states: list[State] = []
        self.next_id = 100

    def ids(self) -> list[int]:
        return [r[0] for r in source_rows(self.db, NAME, "id")]

    def value(self) -> str:
        return f"v{self.rng.randrange(10**6)}"

    def insert(self, k: int) -> tuple[str, tuple]:
        if "c1" not in self.columns or self.rng.random() < 0.3:  # the defaults of c1 and c2
            return "INSERT INTO hist (id, v) VALUES (%s, %s)", (k, self.value())
        return "INSERT INTO hist (id, v, c1, c2) VALUES (%s, %s, %s, %s)", (k, self.value(), f"c{k}", k % 7)

    def mix(self, n: int, note: str | None = None) -> list[tuple[str, tuple]]:
        """``n`` random inserts, updates and deletes; then ``note`` set on a row (a barrier to wait for)."""
        ids = set(self.ids())
        out = []
        for _ in range(n):
            op = self.rng.choice(("insert", "update", "update", "delete")) if ids else "insert"
            if op == "insert":
                self.next_id += 1
                ids.add(self.next_id)
                out.append(self.insert(self.next_id))
            elif op == "update":
                note_value = self.rng.choice((None, self.value()))
                out.append(
                    ("UPDATE hist SET v = %s, note = %s WHERE id = %s", (self.value(), note_value, self.pick(ids)))
                )
            else:
                k = self.pick(ids)
                ids.discard(k)
                out.append(("DELETE FROM hist WHERE id = %s", (k,)))
        if note is not None:
            out.append(("UPDATE hist SET note = %s WHERE id = %s", (note, self.pick(ids))))
        return out

    def pick(self, ids: set[int]) -> int:
        return self.rng.choice(sorted(ids))

    def step(
        self, name: str, statements: list[tuple[str, tuple | None]], *, transaction: bool = True, streamed: bool = True
    ) -> None:
        with self.db.cursor() as cur:
            if not streamed:
                cur.execute("SET SESSION sql_log_bin = 0")
            if transaction:
                cur.execute("BEGIN")
            for sql, args in statements:
                cur.execute(sql, args)
            if transaction:
                cur.execute("COMMIT")
            if not streamed:
                cur.execute("SET SESSION sql_log_bin = 1")
        self.record(name, streamed=streamed)

    def add_column(self, name: str, definition: str) -> None:
        self.columns = (*self.columns, name)
        self.step(f"add {name}", [(f"ALTER TABLE hist ADD COLUMN {name} {definition}", None)], transaction=False)

    def record(self, name: str, *, streamed: bool = True) -> None:
        at = time.time()
        rows = source_rows(self.db, NAME, ", ".join(self.columns))
        self.states.append(
            State(f"{len(self.states):02d} {name}", datetime.fromtimestamp(at, UTC), self.columns, rows, streamed)
        )
        time.sleep(max(0.0, math.floor(at) + 1.05 - time.time()))


def wait_snapshot_completed(settings, signal_id: str, timeout_s: float = 120.0) -> None:
    """Wait for the ``COMPLETED`` notification of the incremental snapshot started by ``signal_id``."""
    kafka = KafkaClients.from_settings(settings)
    deadline = time.monotonic() + timeout_s
    seen: list = []
    while time.monotonic() < deadline:
        seen = [n for n in read_notifications(kafka, settings.notification_topic) if n.id == signal_id]
        assert not [n for n in seen if n.type == "ABORTED"], seen
        if any(n.type == "COMPLETED" for n in seen):
            return
        time.sleep(1)
    raise AssertionError(f"the incremental snapshot {signal_id} did not complete within {timeout_s}s: {seen}")


def emitted(settings, topic: str) -> Counter:
    """How many times Debezium emitted each change of ``topic``: ``(file, pos, row, op, id)``."""
    found: Counter = Counter()
    for msg in read_topic(KafkaClients.from_settings(settings), topic) or ():
        payload = json.loads(msg.value()).get("payload") if msg.value() else None
        if payload:
            s, image = payload["source"], payload.get("after") or payload.get("before") or {}
            found[(s["file"], s["pos"], s.get("row"), payload["op"], image.get("id"))] += 1
    return found


def history_rows(catalog, cfg, state: State) -> list[tuple]:
    rows = history_as_of(catalog, cfg.identifier, state.at).to_pylist()
    return sorted(tuple(r[c] for c in state.columns) for r in rows)


def test_history_and_change_feed_follow_a_seeded_workload(chain, stack_settings, tmp_path):
    """A seeded workload on ``inventory.hist`` through two table DAG runs: random inserts, updates
    and deletes in transactions, primary-key changes and a truncate in the first; ``ADD COLUMN``
    with and without a default (followed by changes of rows the first run wrote), Connect killed
    (kill -9) and restarted from offsets it flushed before the workload (Debezium emits every
    change since again, those the first run applied too), a change behind Debezium's back
    (``sql_log_bin=0``) and an incremental snapshot of the table that reads it, in the second.

    The source's state is recorded just after each step's commit; the next step starts in a later
    second, so every event of a step is stamped at or before that moment and every later event
    after it: the history's answer "as of" it is well-defined, and must be the recorded state (the
    columns the source had then). The one exception is a moment inside a window the lake only learns
    of through the snapshot: the history knows a change from the event that carried it, and a change
    the binlog never carried only from the snapshot's read, which is valid from the read's time (the
    change's own time is nowhere in the events). As of a moment between the offline change and the
    read, the history answers what the binlog said (the state before the offline change), and the
    test checks that; from the read on, the source again.

    The change feed, replayed in commit order, is the table: every column, the ``_cdc_*`` metadata
    included. The feed does not hold the default the ``ALTER``'s run fills into older rows without
    an event; the snapshot's reads (an ``r`` row for every row) carry it."""
    settings, topic = with_table(stack_settings, tmp_path, NAME, change_feed={}, history={})
    cfg = load_tables(settings.tables_config).get(NAME)
    db = source_chain.mariadb_connect(settings, database="inventory")
    began = time.monotonic()

    def took(what: str) -> None:
        print(f"--- {time.monotonic() - began:5.1f} s: {what}")

    # offsets flushed now, and not again before the kill: the restart emits every change since;
    # Connect starts while the first steps are written to the binlog
    print(source_chain.stop_connect(settings))
    flushed = source_chain.connect_offsets_file(settings).read_bytes()
    starting = ThreadPoolExecutor(1).submit(source_chain.start_connect, settings, offset_flush_interval_ms=600_000)
    try:
        with db.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS hist")
            cur.execute(DDL.format(name="hist"))
        w = Workload(db, SEED)
        w.step("insert", [("INSERT INTO hist (id, v) VALUES (%s, %s)", (k, f"v{k}")) for k in range(1, 21)])
        w.step("mix", w.mix(8))
        first, second = w.rng.sample(w.ids(), 2)
        w.step(
            "primary-key changes",
            [
                ("UPDATE hist SET id = 501 WHERE id = %s", (first,)),
                ("UPDATE hist SET v = 'moved' WHERE id = 501", ()),
                ("UPDATE hist SET id = 502, note = 'moved too' WHERE id = %s", (second,)),
            ],
        )
        w.step("mix", w.mix(5))
        w.step("truncate", [("TRUNCATE TABLE hist", None)], transaction=False)
        w.step("refill", [w.insert(k) for k in range(1, 16)])
        w.step("mix", w.mix(6, note="run-1"))
        print(starting.result())
        took("Connect started")
        wait_for_note(settings, topic, "run-1")
        took("first run starts")
        assert run_table_dag(NAME, settings) == 0
        took("first run done")

        older = w.rng.sample(w.ids(), 3)  # rows the first run wrote
        w.step("mix", w.mix(4))
        w.add_column("c1", "VARCHAR(10) NOT NULL DEFAULT 'dflt'")
        w.add_column("c2", "INT NULL")
        w.step(
            "after the ALTERs",
            [
                ("UPDATE hist SET v = 'after-alter' WHERE id = %s", (older[0],)),
                ("UPDATE hist SET c1 = 'set', c2 = 7 WHERE id = %s", (older[1],)),
                ("DELETE FROM hist WHERE id = %s", (older[2],)),
                w.insert(600),
            ],
        )
        w.step("mix", w.mix(6, note="before-kill"))
        wait_for_note(settings, topic, "before-kill")
        print(source_chain.stop_connect(settings, hard=True))
        # the offsets flushed before the workload, as a kill before any flush leaves them: seen
        # once, the worker had committed newer ones (its source task commits on its own, too)
        source_chain.connect_offsets_file(settings).write_bytes(flushed)
        w.step("Connect down", w.mix(6))
        print(source_chain.start_connect(settings))
        took("Connect killed and started")
        moved = w.rng.choice(w.ids())
        w.step("primary-key change", [("UPDATE hist SET id = 801 WHERE id = %s", (moved,))])
        w.step("mix", w.mix(4, note="restarted"))
        wait_for_note(settings, topic, "restarted", timeout_s=240)
        took("streamed again")

        offline = w.rng.choice(w.ids())
        w.step(
            "offline",
            [
                ("UPDATE hist SET v = 'offline' WHERE id = %s", (offline,)),
                ("INSERT INTO hist (id, v) VALUES (900, 'offline')", ()),
            ],
            streamed=False,
        )
        signal = build_signal(f"hist-{time.time_ns()}", "execute", ["inventory.hist"])
        with db.cursor() as cur:
            cur.execute(
                "INSERT INTO debezium_signal (id, type, data) VALUES (%s, %s, %s)",
                (signal.id, signal.type, signal.data_json),
            )
        wait_snapshot_completed(settings, signal.id)
        w.record("snapshot read")
        took("snapshot completed")
        w.step("mix", w.mix(5, note="caught-up"))
        wait_for_note(settings, topic, "caught-up")
        took("second run starts")
        catch_up(settings, NAME, db)
        took("second run done")
    finally:
        starting.exception()  # a failure while it started: it has tried
        print(source_chain.start_connect(settings))  # after a failure while it was down

    assert lake_rows(settings, NAME, SOURCE_COLUMNS) == source_rows(db, NAME, ", ".join(SOURCE_COLUMNS))
    # Debezium emitted the changes before the kill again
    again = emitted(settings, topic)
    assert sum(1 for n in again.values() if n > 1) >= 20, again

    catalog = load_catalog(settings)
    history = catalog.load_table(side_table(cfg.identifier, HISTORY_SUFFIX)).scan().to_arrow().to_pylist()
    checked = check_history(catalog, cfg, COMPARED)
    assert checked is not None and checked.differences == 0, checked.message()
    versions = Counter((v["id"], tuple(v["_cdc_valid_from_position"].values())) for v in history)
    assert [v for v, n in versions.items() if n > 1] == []  # a re-emitted change is no second version

    # as of each recorded moment, the source then; in the offline window, what the binlog said
    wrong = {}
    for before, state in zip([None, *w.states], w.states, strict=False):
        expected = state.rows if state.streamed else [r[: len(state.columns)] for r in before.rows]
        found = history_rows(catalog, cfg, state)
        if found != sorted(expected):
            wrong[state.step] = {
                "at": state.at.isoformat(),
                "history only": sorted(set(found) - set(expected)),
                "source only": sorted(set(expected) - set(found)),
            }
    assert not wrong, json.dumps(wrong, indent=1, default=str)
    snapshot = next(s for s in w.states if s.step.endswith("snapshot read"))
    assert {v["id"] for v in history if v["_cdc_op"] == "r"} == {r[0] for r in snapshot.rows}

    # the change feed, replayed in commit order, rebuilds the table
    table = catalog.load_table(cfg.identifier)
    runs = [run_changes(settings, cfg, r.run_id)[0] for r in runs_after(table, cfg.topic)]
    assert len(runs) == 2
    columns = [*SOURCE_COLUMNS, *[n for n, _, _ in METADATA_COLUMNS]]
    assert replay(runs, columns) == table_now(settings, cfg, columns)
    feed = catalog.load_table(side_table(cfg.identifier, CHANGES_SUFFIX)).scan().to_arrow().to_pylist()
    once = Counter(
        (c["id"], c["_cdc_binlog_file_seq"], c["_cdc_binlog_pos"], c["_cdc_binlog_row"], c["_cdc_snapshot"])
        for c in feed
    )
    assert [c for c, n in once.items() if n > 1] == []  # a re-emitted change (or truncate) is in the feed once
    took("checked")
