"""A primary key changed at the source (``DROP PRIMARY KEY, ADD PRIMARY KEY (id, tenant)``, the
table config updated): the tombstone table follows the new key, and runs with deletes go on."""

from __future__ import annotations

import json

import pytest

from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import ensure_topic
from cdclake.model.layout import COMMITTED_PROPERTY, TOMBSTONES_SUFFIX, side_table
from tests.conftest import make_table
from tests.integration.test_apply import produce_raw, run_once

pytestmark = pytest.mark.integration


def ev(op: str, image: dict, pos: int) -> str:
    source = {"file": "mysql-bin.000003", "pos": pos, "row": 0, "snapshot": "false", "server_id": 1, "ts_ms": 1}
    payload = {
        "before": image if op in ("u", "d") else None,
        "after": image if op in ("c", "u") else None,
        "op": op,
        "ts_ms": 1,
        "source": source,
    }
    return json.dumps(payload)


def test_a_primary_key_changed_at_the_source_keeps_deletes_working(spark, kafka, stack_settings):
    cfg = make_table(value_format="json", columns={"id": "int", "tenant": "int", "v": "string"})
    ensure_topic(kafka, cfg.topic, 1)

    def send(records):
        produce_raw(kafka, cfg.topic, [(json.dumps(k).encode(), v) for k, v in records])

    a, b = {"id": 1, "tenant": 1, "v": "a"}, {"id": 2, "tenant": 1, "v": "b"}
    send([({"id": 1}, ev("c", a, 100)), ({"id": 2}, ev("c", b, 110)), ({"id": 2}, ev("d", b, 120))])
    assert run_once(spark, stack_settings, cfg)[1].status == "committed"  # the tombstone table: key (id)
    catalog = load_catalog(stack_settings)
    assert catalog.load_table(cfg.identifier).properties[COMMITTED_PROPERTY] == "true"  # set by the first commit
    tombstones = side_table(cfg.identifier, TOMBSTONES_SUFFIX)
    assert [f.name for f in catalog.load_table(tombstones).schema().fields if f.required] == ["id"]

    # the source's key becomes (id, tenant): schema sync sets the identifier fields (tenant is NOT
    # NULL at the source), and the operator updates the table config
    with catalog.load_table(cfg.identifier).update_schema(allow_incompatible_changes=True) as update:
        update.update_column("tenant", required=True)
        update.set_identifier_fields("id", "tenant")
    rekeyed = cfg.model_copy(update={"primary_key": ("id", "tenant")})
    a2, c = {"id": 1, "tenant": 2, "v": "a2"}, {"id": 3, "tenant": 1, "v": "c"}
    send(
        [
            ({"id": 1, "tenant": 2}, ev("c", a2, 200)),
            ({"id": 3, "tenant": 1}, ev("c", c, 210)),
            ({"id": 1, "tenant": 1}, ev("d", a, 220)),
        ]
    )
    assert run_once(spark, stack_settings, rekeyed)[1].status == "committed"
    rows = catalog.load_table(cfg.identifier).scan().to_arrow().to_pylist()
    assert sorted((r["id"], r["tenant"], r["v"]) for r in rows) == [(1, 2, "a2"), (3, 1, "c")]
    schema = catalog.load_table(tombstones).schema()
    # the new key's tenant added (optional: the old tombstones have none), id still required
    assert {f.name for f in schema.fields if f.required} == {"id"} and "tenant" in {f.name for f in schema.fields}
    # a replayed older create of the deleted (1, 1) does not bring it back: its new tombstone holds
    send([({"id": 1, "tenant": 1}, ev("c", a, 215))])
    run_once(spark, stack_settings, rekeyed)
    rows = catalog.load_table(cfg.identifier).scan().to_arrow().to_pylist()
    assert sorted((r["id"], r["tenant"], r["v"]) for r in rows) == [(1, 2, "a2"), (3, 1, "c")]
