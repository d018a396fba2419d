"""Replays the real events recorded from the MariaDB -> Debezium chain (tests/data/chain, written
by tests/e2e/test_chain.py with CDCLAKE_TEST_RECORD_EVENTS=1) without the chain: the same Kafka
records, partitions, keys and headers, applied in several runs, give the recorded SELECT result."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import ensure_topic
from cdclake.model.offsets import OffsetRange
from tests.conftest import apply_offsets, make_table

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data" / "chain"


@pytest.mark.parametrize("ordering", ["binlog", "gtid"])
def test_recorded_chain_events_replay_to_the_recorded_source_state(spark, kafka, stack_settings, ordering):
    """In either ordering: the recorded events carry MariaDB GTIDs (0-223344-<n>), which order
    them as their binlog coordinates do."""

    records = [json.loads(line) for line in (DATA / "orders.jsonl").read_text().splitlines() if line]
    ops = {json.loads(r["value"])["payload"]["op"] for r in records if r["value"]}
    assert {"c", "u", "d", "t"} <= ops, "the recording should hold creates, updates, deletes and a truncate"
    cfg = make_table(primary_key=["id"], ordering=ordering)
    partitions = max(r["partition"] for r in records) + 1
    ensure_topic(kafka, cfg.topic, partitions)
    producer = kafka.producer()
    for r in sorted(records, key=lambda r: (r["partition"], r["offset"])):
        producer.produce(
            cfg.topic,
            partition=r["partition"],
            key=r["key"].encode() if r["key"] else None,
            value=r["value"].encode() if r["value"] else None,
            headers=[(k, v.encode() if v else None) for k, v in r["headers"]],
        )
    producer.flush(30)
    ends = {p: sum(1 for r in records if r["partition"] == p) for p in range(partitions)}
    middle = {p: n // 2 for p, n in ends.items()}
    for start, end in [({p: 0 for p in ends}, middle), (middle, ends)]:
        result = apply_offsets(
            spark, stack_settings, cfg, OffsetRange(topic=cfg.topic, start=start, end=end), "replay-recorded"
        )
        assert result.status == "committed" and result.quarantined == 0

    expected = [
        [dt.datetime.fromisoformat(v) if i == 5 and v else v for i, v in enumerate(row)]
        for row in json.loads((DATA / "orders.expected.json").read_text())
    ]
    arrow = load_catalog(stack_settings).load_table(cfg.identifier).scan().to_arrow()
    got = [
        [r["id"], r["customer"], r["qty"], r["price"], r["note"], r["placed"], r["active"]]
        for r in sorted(arrow.to_pylist(), key=lambda r: r["id"])
    ]
    assert got == expected
    if ordering == "gtid":
        assert all(r["_cdc_gtid_seq"] > 0 for r in arrow.to_pylist())
