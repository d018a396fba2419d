"""The plan step against a real broker and a real SQL catalog: a table that holds rows but lost
the commits recording its offsets is never planned from the low watermarks in silence."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cdclake.errors import CommittedStateLostError, OffsetsOutOfRangeError
from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import ensure_topic, produce
from cdclake.model.layout import COMMITTED_PROPERTY, SummaryKeys
from tests.conftest import make_table, plan_offsets

pytestmark = pytest.mark.integration


def test_a_table_whose_offset_commits_are_gone_is_not_planned_from_the_low_watermarks(kafka, stack_settings):
    cfg = make_table(value_format="json", columns={"id": "int", "v": "string"})
    ensure_topic(kafka, cfg.topic, 2)
    produce(kafka, cfg.topic, iter([(b'{"id": 1}', b"{}", None)] * 4))
    catalog = load_catalog(stack_settings)
    catalog.create_namespace_if_not_exists(cfg.namespace)
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False), ("v", pa.string())])
    table = catalog.create_table(cfg.identifier, schema=schema)
    assert plan_offsets(stack_settings, cfg).range.start == {0: 0, 1: 0}  # no snapshot yet: a new table

    # rows loaded outside cdclake, never applied to: a new table
    table.append(pa.table({"id": pa.array([1, 2], pa.int32()), "v": ["a", "b"]}, schema=schema))
    assert plan_offsets(stack_settings, cfg).range.start == {0: 0, 1: 0}
    # what CREATE OR REPLACE TABLE ... AS SELECT, or an expiry that kept only later snapshots, leaves
    # of a table cdclake committed to: rows, its cdc.committed property, no snapshot recording offsets
    with table.transaction() as txn:
        txn.set_properties({COMMITTED_PROPERTY: "true"})
    with pytest.raises(CommittedStateLostError, match=rf"table {cfg.identifier} holds rows but no snapshot"):
        plan_offsets(stack_settings, cfg)
    # the remedy the error names: a replay from chosen offsets plans
    assert plan_offsets(stack_settings, cfg, replay_from_offsets={0: 0, 1: 1}).range.start == {0: 0, 1: 1}

    # a snapshot recording offsets anywhere in the ancestry: planned from them as always
    table.append(
        pa.table({"id": pa.array([3], pa.int32()), "v": ["c"]}, schema=schema),
        snapshot_properties={
            SummaryKeys.TOPIC: cfg.topic,
            SummaryKeys.END_OFFSETS: '{"0": 0, "1": 2}',
        },
    )
    table.append(pa.table({"id": pa.array([4], pa.int32()), "v": ["d"]}, schema=schema))  # e.g. maintenance
    assert plan_offsets(stack_settings, cfg).range.start == {0: 0, 1: 2}


def test_offsets_of_a_topic_deleted_and_created_again_are_refused_by_its_id(kafka, stack_settings):
    """A topic recreated under its name gets another Kafka topic id: offsets committed against the
    old one are refused even where the new topic's end is above them (KIP-516)."""
    import time

    from cdclake.io.kafka import topic_exists, topic_id

    cfg = make_table(value_format="json", columns={"id": "int", "v": "string"})
    ensure_topic(kafka, cfg.topic, 1)
    produce(kafka, cfg.topic, iter([(b'{"id": 1}', b"{}", None)] * 2))
    first_id = topic_id(kafka, cfg.topic)
    assert first_id
    plan = plan_offsets(stack_settings, cfg)
    assert plan.topic_id == first_id
    catalog = load_catalog(stack_settings)
    catalog.create_namespace_if_not_exists(cfg.namespace)
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False), ("v", pa.string())])
    table = catalog.create_table(cfg.identifier, schema=schema)
    table.append(
        pa.table({"id": pa.array([1], pa.int32()), "v": ["a"]}, schema=schema),
        snapshot_properties={
            SummaryKeys.TOPIC: cfg.topic,
            SummaryKeys.TOPIC_ID: first_id,
            SummaryKeys.END_OFFSETS: '{"0": 2}',
        },
    )
    assert plan_offsets(stack_settings, cfg).range.start == {0: 2}

    # each step waits on its own deadline: on a loaded machine the broker's deletion, the new
    # topic's creation and its id reaching the metadata each take seconds
    admin = kafka.admin()
    admin.delete_topics([cfg.topic])[cfg.topic].result(60)
    deadline = time.monotonic() + 90
    while topic_exists(kafka, cfg.topic):
        assert time.monotonic() < deadline, "the topic was not deleted"
        time.sleep(0.5)
    deadline = time.monotonic() + 90
    while True:
        try:
            ensure_topic(kafka, cfg.topic, 1)
            produce(kafka, cfg.topic, iter([(b'{"id": 1}', b"{}", None)] * 5))  # its end (5) above 2
            break
        except Exception:  # the broker may still be finishing the deletion
            assert time.monotonic() < deadline, "the topic could not be created again"
            time.sleep(0.5)
    deadline = time.monotonic() + 60
    while (second_id := topic_id(kafka, cfg.topic)) in (None, first_id):
        assert time.monotonic() < deadline, f"the topic created again kept id {second_id!r} (was {first_id!r})"
        time.sleep(0.5)
    with pytest.raises(OffsetsOutOfRangeError, match=rf"topic '{cfg.topic}' was deleted and created again"):
        plan_offsets(stack_settings, cfg)
    assert plan_offsets(stack_settings, cfg, replay_from_offsets={0: 0}).range.start == {0: 0}
