"""A fleet of discovered tables without a cluster: a table config whose one ``discover`` pattern
takes every topic of prefix :data:`PREFIX`, and a registry of ``n`` such topics (one in ten
without a primary key), for the DAG-parse test and benchmark (``bench/dag_parse_bench.py``)."""

from __future__ import annotations

from pathlib import Path

import yaml

from cdclake.model.discovery import write_registry

PREFIX = "fleet"
"""The Debezium ``topic.prefix`` of the fleet's topics: ``fleet.db<k>.t<i>``."""


def fleet_topic(i: int) -> str:
    """The data topic of the fleet's table ``i`` (ten source databases)."""
    return f"{PREFIX}.db{i % 10}.t{i:05d}"


def write_fleet(folder: Path, tables: int) -> tuple[Path, Path]:
    """Write the table config and a registry of ``tables`` topics into ``folder``; every tenth
    table (``i % 10 == 9``) has no primary key, so it is a changelog table.

    Returns:
        ``(table config, registry)`` paths: ``CDCLAKE_TABLES_CONFIG`` and
        ``CDCLAKE_DISCOVERY_REGISTRY``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "tables.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "defaults": {"freshness_minutes": 30},
                "discover": [
                    {"topic_prefix": PREFIX, "namespace": "fleet_{database}", "defaults": {"tags": ["fleet"]}}
                ],
            }
        )
    )
    registry = folder / "discovery.json"
    write_registry(registry, {fleet_topic(i): () if i % 10 == 9 else ("id",) for i in range(tables)}, now_ms=0)
    return config, registry
