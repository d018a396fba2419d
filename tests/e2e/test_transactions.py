"""Whole source transactions on the real chain: money moved between accounts in MariaDB
transactions, captured by a Debezium connector with ``provide.transaction.metadata=true`` and
applied in small batches (a cap of twelve events over three partitions), with a Connect
kill -9 in the middle; no snapshot of the Iceberg table ever shows money half moved
(:mod:`cdclake.model.transactions`)."""

from __future__ import annotations

import random
import time

import pytest

from cdclake.io.catalog import load_catalog
from cdclake.model.config import TableConfig
from cdclake.spark.apply import apply_range
from cdclake_dev import chain as source_chain
from tests.conftest import plan_offsets
from tests.e2e.test_chain import wait_for_note

pytestmark = pytest.mark.e2e

ACCOUNTS, OPENING = 12, 1000


def test_no_snapshot_shows_money_half_moved_across_a_connect_kill(chain, stack_settings, spark):
    settings = stack_settings
    prefix = f"{settings.topic_prefix}_tx"
    cfg = TableConfig(
        name="accounts",
        topic=f"{prefix}.inventory.accounts",
        namespace="tx",
        table="accounts",
        primary_key=["id"],
        max_events_per_run=12,
    )
    db = source_chain.mariadb_connect(settings, database="inventory")
    with db.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS accounts")
        cur.execute("CREATE TABLE accounts (id INT NOT NULL PRIMARY KEY, balance BIGINT NOT NULL, note VARCHAR(20))")
    rng = random.Random(7)

    def transfers(n: int, note: str) -> None:
        """``n`` transactions of 2 to 4 statements moving money among the accounts, then a
        one-row transaction setting ``note``."""
        with db.cursor() as cur:
            for _ in range(n):
                cur.execute("START TRANSACTION")
                ids = rng.sample(range(1, ACCOUNTS + 1), rng.randint(2, 4))
                amounts = [rng.randint(1, 50) for _ in ids[1:]]
                cur.execute("UPDATE accounts SET balance = balance - %s WHERE id = %s", (sum(amounts), ids[0]))
                for i, amount in zip(ids[1:], amounts, strict=True):
                    cur.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", (amount, i))
                cur.execute("COMMIT")
            cur.execute("UPDATE accounts SET note = %s WHERE id = 1", (note,))
        wait_for_note(settings, cfg.topic, note)

    def catch_up(run: str) -> int:
        """Runs until one applies nothing; returns how many committed."""
        committed = 0
        for i in range(40):
            plan = plan_offsets(settings, cfg, f"{run}-{i}")
            if plan.range.is_empty or apply_range(spark, settings, plan).status != "committed":
                return committed
            committed += 1
        raise AssertionError("not caught up in 40 runs")

    # offsets saved every 2 s: the kill -9 below loses at most that much, and the connector resumes
    source_chain.stop_connect(settings)
    source_chain.start_connect(settings, offset_flush_interval_ms=2_000)
    connector = {
        "name": "tx-connector",
        "topic_prefix": prefix,
        "overrides": {"database.server.id": "184060", "provide.transaction.metadata": "true"},
    }
    print(source_chain.add_table_connector(settings, ["inventory.accounts"], **connector))
    try:
        with db.cursor() as cur:  # every account opened in one transaction of twelve events
            cur.execute("START TRANSACTION")
            cur.executemany(
                "INSERT INTO accounts VALUES (%s, %s, NULL)", [(i, OPENING) for i in range(1, ACCOUNTS + 1)]
            )
            cur.execute("COMMIT")
        transfers(8, "first")
        runs = catch_up("a")
        time.sleep(3)  # the connector's offsets are saved
        transfers(6, "before-kill")
        source_chain.stop_connect(settings, hard=True)
        source_chain.start_connect(settings)
        # a standalone worker forgets a connector added over REST: added again, it resumes from its
        # saved offsets and emits again the transactions after them
        print(source_chain.add_table_connector(settings, ["inventory.accounts"], **connector))
        transfers(8, "after-kill")
        runs += catch_up("b")
    finally:
        print(source_chain.remove_connector(settings, "tx-connector"))

    with db.cursor() as cur:
        cur.execute("SELECT id, balance FROM accounts ORDER BY id")
        source = {r[0]: r[1] for r in cur.fetchall()}
    table = load_catalog(settings).load_table(cfg.identifier)
    assert {r["id"]: r["balance"] for r in table.scan().to_arrow().to_pylist()} == source
    seen = 0
    for snap in table.snapshots():
        rows = table.scan(snapshot_id=snap.snapshot_id).to_arrow().to_pylist()
        if rows:  # the creation's empty snapshot, and the run branches' bases, hold none
            assert (len(rows), sum(r["balance"] for r in rows)) == (ACCOUNTS, ACCOUNTS * OPENING), snap
            seen += 1
    assert runs >= 4 and seen >= runs, (runs, seen)
    print(f"\n{runs} runs, {seen} snapshots with rows, every one whole")
