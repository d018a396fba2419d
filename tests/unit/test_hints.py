"""Unit tests for :mod:`cdclake.model.hints` and the topic hint of :mod:`cdclake.io.kafka`: the near
name a message suggests after a name that is not known."""

from __future__ import annotations

import pytest

from cdclake.io.kafka import topic_hint
from cdclake.model.hints import did_you_mean, near_match

TOPICS = ["cdc.inventory.products", "cdc.inventory.customers", "cdc.inventory.orders", "__consumer_offsets", "cdc"]


@pytest.mark.parametrize(
    ("typed", "known", "near"),
    [
        ("prodcts", ["products", "customers"], "products"),  # a letter left out
        ("primary_keys", ["primary_key", "write_mode"], "primary_key"),  # one too many
        ("tabels", ["defaults", "tables", "discover"], "tables"),  # a swapped pair
        ("scheduel", ["schedule", "owner"], "schedule"),
        ("snapshot_retention", ["snapshot_retention_hours", "retain_last"], "snapshot_retention_hours"),  # cut short
        ("max_event_per_run", ["max_events_per_run", "max_transaction_events"], "max_events_per_run"),
        ("nosuch", ["products", "customers"], None),
        ("products", ["products"], None),  # never itself
        # only a shared prefix: not near (the ratio alone would say 0.8)
        ("inventory_orders", ["inventory_products", "inventory_customers"], None),
    ],
)
def test_near_match_is_a_small_difference(typed, known, near):
    assert near_match(typed, known) == near


def test_did_you_mean_ends_a_message_or_is_empty():
    assert did_you_mean("prodcts", ["products"]) == "; did you mean 'products'?"
    assert did_you_mean("nosuch", ["products"]) == ""
    assert did_you_mean("x", []) == ""


def test_a_missing_topic_is_told_the_near_topic_of_the_cluster():
    assert topic_hint("cdc.inventory.productz", TOPICS) == "; did you mean 'cdc.inventory.products'?"
    assert topic_hint("cdc.inventroy.customers", TOPICS) == "; did you mean 'cdc.inventory.customers'?"
    # the database's prefix alone is not near; Kafka's internal topics are never suggested
    assert topic_hint("cdc.inventory.shipments", TOPICS) == ""
    assert topic_hint("__consumer_offset", TOPICS) == ""
    assert topic_hint("cdc.inventory.products", []) == ""
