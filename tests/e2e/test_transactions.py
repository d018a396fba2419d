"""Whole source transactions on the real chain: money moved between accounts in MariaDB
transactions, inside one table and between the two tables of a group (``checking`` and
``savings``), captured by a Debezium connector with ``provide.transaction.metadata=true`` and
applied in small batches (a cap of twelve events over the topics' partitions) while the workload
runs, with a Connect kill -9 in the middle. No commit of either table ever shows money half moved
(:mod:`cdclake.model.transactions`), and no state of the tables' ``main`` (moved only when the group
is published, with the group's tag ``cdc_group_bank``) ever shows money that left one table and has
not reached the other (:mod:`cdclake.model.groups`; docs/architecture.md, "Table groups")."""

from __future__ import annotations

import random
import threading
import time

import pytest

from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import KafkaClients, topic_watermarks
from cdclake.model.config import TableConfig
from cdclake.pipeline.groups import publish_group
from cdclake.spark.apply import apply_range
from cdclake_dev import chain as source_chain
from tests.conftest import plan_offsets
from tests.e2e.test_chain import wait_for_note

pytestmark = pytest.mark.e2e

ACCOUNTS, OPENING = 8, 1000
"""Accounts of each table, and each one's opening balance. Row 0 of each table is its clearing
account: a transfer to the other table debits an account and credits the clearing row by the
amount in one table, and credits an account and debits the clearing row in the other, so each
table's total stays ``ACCOUNTS * OPENING`` after every transaction (the table's invariant), and the
two clearing rows sum to 0 once both halves are applied (the group's invariant)."""
TABLES = ("checking", "savings")
GROUP = "bank"


def _balances(rows: list[dict]) -> dict[int, int]:
    return {r["id"]: r["balance"] for r in rows}


def _table_invariant(balances: dict[int, int]) -> bool:
    return len(balances) == ACCOUNTS + 1 and sum(balances.values()) == ACCOUNTS * OPENING


def test_no_snapshot_and_no_group_state_shows_money_half_moved_across_a_connect_kill(chain, stack_settings, spark):
    settings = stack_settings
    prefix = f"{settings.topic_prefix}_tx"
    cfgs = {
        name: TableConfig(
            name=name,
            topic=f"{prefix}.inventory.{name}",
            namespace="tx",
            table=name,
            primary_key=["id"],
            max_events_per_run=12,
            group=GROUP,
        )
        for name in TABLES
    }
    members = [cfgs[name] for name in TABLES]
    db = source_chain.mariadb_connect(settings, database="inventory")
    with db.cursor() as cur:
        for name in TABLES:
            cur.execute(f"DROP TABLE IF EXISTS {name}")
            cur.execute(f"CREATE TABLE {name} (id INT NOT NULL PRIMARY KEY, balance BIGINT NOT NULL, note VARCHAR(20))")
    rng = random.Random(7)
    crossed = [0]

    def transfers(n: int) -> None:
        """``n`` transactions of 2 to 6 statements: within one table (money among 1 to 3 of its
        accounts) or, one in three, from one table to the other through the clearing rows."""
        with db.cursor() as cur:
            for _ in range(n):
                cur.execute("START TRANSACTION")
                if rng.random() < 1 / 3:
                    src, dst = rng.sample(TABLES, 2)
                    amount = rng.randint(1, 50)
                    a, b = rng.randint(1, ACCOUNTS), rng.randint(1, ACCOUNTS)
                    cur.execute(f"UPDATE {src} SET balance = balance - %s WHERE id = %s", (amount, a))
                    cur.execute(f"UPDATE {src} SET balance = balance + %s WHERE id = 0", (amount,))
                    cur.execute(f"UPDATE {dst} SET balance = balance - %s WHERE id = 0", (amount,))
                    cur.execute(f"UPDATE {dst} SET balance = balance + %s WHERE id = %s", (amount, b))
                    crossed[0] += 1
                else:
                    table = rng.choice(TABLES)
                    ids = rng.sample(range(1, ACCOUNTS + 1), rng.randint(2, 4))
                    amounts = [rng.randint(1, 50) for _ in ids[1:]]
                    cur.execute(f"UPDATE {table} SET balance = balance - %s WHERE id = %s", (sum(amounts), ids[0]))
                    for i, amount in zip(ids[1:], amounts, strict=True):
                        cur.execute(f"UPDATE {table} SET balance = balance + %s WHERE id = %s", (amount, i))
                cur.execute("COMMIT")
                time.sleep(0.02)

    def mark(note: str) -> None:
        """One transaction setting ``note`` on account 1 of both tables; waits until Debezium has
        published both events."""
        with db.cursor() as cur:
            cur.execute("START TRANSACTION")
            for name in TABLES:
                cur.execute(f"UPDATE {name} SET note = %s WHERE id = 1", (note,))
            cur.execute("COMMIT")
        for name in TABLES:
            wait_for_note(settings, cfgs[name].topic, note)

    kafka = KafkaClients.from_bootstrap(settings.kafka_bootstrap)
    published: list[int] = []
    states: dict[str, set[int]] = {name: set() for name in TABLES}
    """Each table's snapshots the group was published at: the only states its ``main`` may take."""

    def publish() -> None:
        """Publish the group; when it moved, ``main`` of both tables is at the tag, and the state
        they show keeps both invariants."""
        done = publish_group(load_catalog(settings), GROUP, members, int(time.time() * 1000), kafka)
        if not done.moved:
            return
        tagged = {}
        for name in TABLES:
            table = load_catalog(settings).load_table(cfgs[name].identifier)
            ref = table.refs()[f"cdc_group_{GROUP}"]
            assert table.current_snapshot().snapshot_id == ref.snapshot_id, name  # type: ignore[union-attr]
            tagged[name] = _balances(table.scan().to_arrow().to_pylist())
            assert _table_invariant(tagged[name]), (name, done.position, tagged[name])
            states[name].add(ref.snapshot_id)
        assert tagged["checking"][0] + tagged["savings"][0] == 0, (done.position, tagged)
        published.append(done.position)

    def round_of_runs(run: str) -> int:
        """One run of each table (those with something to apply), then a publish; returns how many
        runs committed."""
        committed = 0
        for name in TABLES:
            plan = plan_offsets(settings, cfgs[name], f"{run}-{name}")
            if not plan.range.is_empty and apply_range(spark, settings, plan).status == "committed":
                committed += 1
        publish()
        return committed

    def apply_while(workload: threading.Thread, run: str) -> int:
        """Rounds while ``workload`` writes, then until a round applies nothing."""
        committed = 0
        for i in range(60):
            busy = workload.is_alive()
            done = round_of_runs(f"{run}-{i}")
            committed += done
            if not busy and not done:
                return committed
        raise AssertionError("not caught up in 60 rounds")

    def in_background(n: int) -> threading.Thread:
        thread = threading.Thread(target=transfers, args=(n,), name="transfers", daemon=True)
        thread.start()
        return thread

    # offsets saved every 2 s: the kill -9 below loses at most that much, and the connector resumes
    source_chain.stop_connect(settings)
    source_chain.start_connect(settings, offset_flush_interval_ms=2_000)
    connector = {
        "name": "tx-connector",
        "topic_prefix": prefix,
        "overrides": {"database.server.id": "184060", "provide.transaction.metadata": "true"},
    }
    tables = [f"inventory.{name}" for name in TABLES]
    print(source_chain.add_table_connector(settings, tables, **connector))
    try:
        with db.cursor() as cur:  # every account of both tables opened in one transaction
            cur.execute("START TRANSACTION")
            for name in TABLES:
                rows = [(0, 0)] + [(i, OPENING) for i in range(1, ACCOUNTS + 1)]
                cur.executemany(f"INSERT INTO {name} VALUES (%s, %s, NULL)", rows)
            cur.execute("COMMIT")
        mark("opened")  # both topics exist before the first plan
        # a group's positions are offsets of the transaction topic: the shipped connector config
        # creates it with one partition (the broker's default here is three; docs/operations.md,
        # "Table groups")
        assert len(topic_watermarks(kafka, f"{prefix}.transaction").high) == 1
        workload = in_background(20)
        runs = apply_while(workload, "a")
        mark("first")
        runs += apply_while(workload, "a-end")
        time.sleep(3)  # the connector's offsets are saved
        transfers(6)
        source_chain.stop_connect(settings, hard=True)
        source_chain.start_connect(settings)
        # a standalone worker forgets a connector added over REST: added again, it resumes from its
        # saved offsets and emits again the transactions after them
        print(source_chain.add_table_connector(settings, tables, **connector))
        workload = in_background(20)
        runs += apply_while(workload, "b")
        workload.join()
        mark("last")
        runs += apply_while(workload, "b-end")
    finally:
        print(source_chain.remove_connector(settings, "tx-connector"))

    for name in TABLES:
        with db.cursor() as cur:
            cur.execute(f"SELECT id, balance FROM {name} ORDER BY id")
            source = {r[0]: r[1] for r in cur.fetchall()}
        table = load_catalog(settings).load_table(cfgs[name].identifier)
        assert _balances(table.scan().to_arrow().to_pylist()) == source, name
        # caught up, the group's tag shows the source as well
        tag = table.refs()[f"cdc_group_{GROUP}"].snapshot_id
        assert _balances(table.scan(snapshot_id=tag).to_arrow().to_pylist()) == source, name
        seen = 0
        for snap in table.snapshots():
            balances = _balances(table.scan(snapshot_id=snap.snapshot_id).to_arrow().to_pylist())
            if balances:  # the creation's empty snapshot, and the run branches' bases, hold none
                assert _table_invariant(balances), (name, snap)
                seen += 1
        assert seen >= 3, (name, seen)
        # main moved only when the group was published: every state it took was a published one
        # (or the empty table before the first publish)
        for entry in table.history():
            if entry.snapshot_id not in states[name]:
                assert not table.scan(snapshot_id=entry.snapshot_id).to_arrow().num_rows, (name, entry)
    assert runs >= 8 and crossed[0] >= 5, (runs, crossed)
    assert len(published) >= 3 and published == sorted(published), published
    print(f"\n{runs} runs, {crossed[0]} transfers between the tables, the group published at {published}")
