"""Whole source transactions on a real broker, Spark and catalog (:mod:`cdclake.spark.transactions`):
a run commits whole transactions only, one whose ``END`` is not in the transaction topic yet waits
with everything after it, and one larger than ``max_events_per_run`` is applied whole."""

from __future__ import annotations

import json
import uuid

import pytest

from cdclake.io.catalog import committed_offsets, load_catalog
from cdclake.io.kafka import KafkaClients, ensure_topic
from cdclake.model.layout import SummaryKeys
from cdclake.spark.apply import apply_range
from tests.conftest import make_table, plan_offsets

pytestmark = pytest.mark.integration


class Source:
    """Debezium's records of ``d.accounts`` (payload-only JSON, two partitions by key) and of its
    transaction topic ``<prefix>.transaction``."""

    def __init__(self, kafka: KafkaClients, prefix: str) -> None:
        self.kafka, self.prefix = kafka, prefix
        self.topic, self.transactions = f"{prefix}.d.accounts", f"{prefix}.transaction"
        ensure_topic(kafka, self.topic, 2)
        ensure_topic(kafka, self.transactions, 1)
        self.pos, self.txn = 1000, 0

    def transaction(self, changes: list[tuple[int, int]], *, end: bool = True) -> str:
        """One source transaction setting ``balance`` of each ``(id, balance)``; its END unless
        ``end`` is false (written later with :meth:`end`)."""
        txn, producer = f"0-1-{self.txn}", self.kafka.producer()
        self.txn += 1
        producer.produce(self.transactions, value=json.dumps({"status": "BEGIN", "id": txn}).encode(), partition=0)
        for order, (key, balance) in enumerate(changes, start=1):
            value = {
                "before": None,
                "after": {"id": key, "balance": balance},
                "op": "c",
                "ts_ms": 1_700_000_000_000,
                "source": {
                    "connector": "mariadb",
                    "server_id": 1,
                    "file": "mysql-bin.000001",
                    "pos": self.pos,
                    "row": 0,
                    "snapshot": "false",
                    "ts_ms": 1_700_000_000_000,
                    "db": "d",
                    "table": "accounts",
                },
                "transaction": {"id": txn, "total_order": order, "data_collection_order": order},
            }
            self.pos += 100
            key_bytes = json.dumps({"id": key}).encode()
            producer.produce(self.topic, key=key_bytes, value=json.dumps(value).encode(), partition=key % 2)
        producer.flush(30)
        if end:
            self.end(txn, len(changes))
        return txn

    def end(self, txn: str, events: int) -> None:
        value = {
            "status": "END",
            "id": txn,
            "event_count": events,
            "data_collections": [{"data_collection": "d.accounts", "event_count": events}],
        }
        producer = self.kafka.producer()
        producer.produce(self.transactions, value=json.dumps(value).encode(), partition=0)
        producer.flush(30)


def test_a_commit_holds_whole_transactions_and_a_large_one_is_applied_whole(spark, kafka, stack_settings):
    source = Source(KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap), f"tx{uuid.uuid4().hex[:8]}")
    cfg = make_table(topic=source.topic, value_format="json", columns={"id": "int", "balance": "long"})

    plans = {}

    def run(run_id: str, cap: int = 100):
        plans[run_id] = plan_offsets(stack_settings, cfg.model_copy(update={"max_events_per_run": cap}), run_id)
        assert plans[run_id].transactions is not None and plans[run_id].transactions.topic == source.transactions
        return apply_range(spark, stack_settings, plans[run_id])

    def balances() -> dict[int, int]:
        rows = load_catalog(stack_settings).load_table(cfg.identifier).scan().to_arrow().to_pylist()
        return {r["id"]: r["balance"] for r in rows}

    def summary() -> dict[str, str]:
        snap = load_catalog(stack_settings).load_table(cfg.identifier).current_snapshot()
        return dict(snap.summary.additional_properties)

    source.transaction([(1, 100), (2, 100)])  # opening balances: 200 in all
    moved = source.transaction([(1, 70), (2, 130)])  # 30 from 1 to 2
    late = source.transaction([(1, 50), (3, 20)], end=False)  # 20 from 1 to the new 3, END not yet written
    assert run("r1").status == "committed"
    assert balances() == {1: 70, 2: 130}  # the first two, whole; the third waits
    assert json.loads(summary()[SummaryKeys.LAST_TRANSACTION])["id"] == moved
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert sum(committed_offsets(table, cfg.topic).values()) == 4
    # a retry of the task (its plan as the submit engine's XCom holds it, uncut) finds its commit
    assert apply_range(spark, stack_settings, plans["r1"]).status == "already_applied"

    source.end(late, 2)
    assert run("r2").status == "committed"
    assert balances() == {1: 50, 2: 130, 3: 20}
    assert json.loads(summary()[SummaryKeys.LAST_TRANSACTION])["id"] == late

    # six events of one transaction, over a run's cap of four (two per partition): applied whole
    big = source.transaction([(k, 10 * k) for k in (1, 2, 3, 4, 5, 6)])
    assert run("r3", cap=4).status == "committed"
    assert balances() == {k: 10 * k for k in range(1, 7)}
    assert json.loads(summary()[SummaryKeys.LAST_TRANSACTION])["id"] == big
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert sum(committed_offsets(table, cfg.topic).values()) == 12
