"""The sources of the status: which Debezium connector feeds each table, the connector's state in
Kafka Connect, and how far it is behind its source's binary log (the rules:
:mod:`cdclake.model.source_health`; docs/operations.md, "Sources: the connector and the binlog").

One status call asks Kafka Connect for every connector's state and config (one call), each
source's committed offsets (one call per source) and, only when a table's connector is not found
by the ``topic.prefix`` of a config (shown unresolved when it is a config provider reference),
each connector's offsets (whose partitions name the resolved prefix), then, when these do not
tell either, each connector's topics (one call per connector); then the source
database once (one connection: its binlog position, and the transactions after each source's
newest emitted position). Nothing here raises for a part that does not answer: that is a state
(``unreachable``) or a problem of the source.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cdclake.io.connect import ConnectUnreachableError, KafkaConnect
from cdclake.io.source_db import SourceDatabase, read_binlog
from cdclake.model.config import TableConfig
from cdclake.model.source_health import (
    ConnectorHealth,
    EmittedPoint,
    SourceLag,
    SourceStatus,
    connector_of,
    emitted_of,
    foreign_point,
    newest_emitted,
    offset_prefixes,
    prefix_of,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceProbe:
    """What the status asks about the sources.

    Attributes:
        connect: Kafka Connect's REST API.
        source_db: the source database whose binlog the connectors read; ``None``: the binlog lag
            is not measured.
        source_db_origin: where ``source_db`` came from, for messages (``Airflow connection
            cdc_source_db``).
    """

    connect: KafkaConnect
    source_db: SourceDatabase | None = None
    source_db_origin: str = "the source database"


@dataclass(frozen=True)
class SourceAnswer:
    """:func:`source_statuses`' answer.

    Attributes:
        sources: every source of the tables, in the order of their first table.
        of_table: per table (the order given), its source, or ``None`` when none is watched.
        unwatched: per table, why none is watched (``None`` when one is).
    """

    sources: list[SourceStatus]
    of_table: list[SourceStatus | None]
    unwatched: list[str | None]


def source_statuses(
    probe: SourceProbe, tables: Sequence[TableConfig], lake_points: Sequence[EmittedPoint | None], now_ms: int
) -> SourceAnswer:
    """The sources of ``tables`` (module docstring).

    Args:
        lake_points: per table, the greatest binlog position it applied (``None``: none known, or
            not ordered by binlog position): a position its connector emitted.
        now_ms: the time the lags are counted to.
    """
    connect = probe.connect
    try:
        connectors: dict[str, tuple[ConnectorHealth, str | None]] | None = connect.connectors()
        error = None
    except ConnectUnreachableError as e:
        connectors, error = None, str(e)
        log.info("Kafka Connect at %s did not answer: %s", connect.url, e)
    offsets = _ConnectorOffsets(connect)
    keys, unwatched, health = _table_connectors(connect, connectors, error, tables, offsets)
    order = list(dict.fromkeys(k for k in keys if k is not None))
    members = {k: [cfg.name for cfg, key in zip(tables, keys, strict=True) if key == k] for k in order}
    points: dict[str, EmittedPoint] = {}
    for key in order:
        reachable = connectors is not None and health[key].state != "missing"
        offset = emitted_of(offsets.of(key)) if reachable else None
        lake = [p for p, k in zip(lake_points, keys, strict=True) if k == key]
        point = newest_emitted([offset, *lake])
        if point is not None:
            points[key] = point
    lags, problems = _binlog_lags(probe, points, now_ms)
    for key in order:
        if key not in points and health[key].state not in ("unreachable", "missing"):  # those say it already
            problems.setdefault(key, []).append(
                "no binlog position it emitted is known yet (no committed source offset, no table applied): "
                "its binlog lag is not measured"
            )
    statuses = {
        key: SourceStatus(
            name=key,
            connector=health[key],
            tables=members[key],
            lag=lags.get(key),
            problems=problems.get(key, []),
            checked_at_ms=now_ms,
        )
        for key in order
    }
    return SourceAnswer([statuses[k] for k in order], [None if k is None else statuses[k] for k in keys], unwatched)


@dataclass(frozen=True)
class _ConnectorOffsets:
    """Each connector's source offsets in Kafka Connect, asked once, when first needed."""

    connect: KafkaConnect
    asked: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def of(self, name: str) -> list[dict[str, Any]]:
        """The source offsets of connector ``name`` (:meth:`KafkaConnect.offsets`)."""
        if name not in self.asked:
            self.asked[name] = self.connect.offsets(name)
        return self.asked[name]


def _table_connectors(
    connect: KafkaConnect,
    connectors: dict[str, tuple[ConnectorHealth, str | None]] | None,
    error: str | None,
    tables: Sequence[TableConfig],
    offsets: _ConnectorOffsets,
) -> tuple[list[str | None], list[str | None], dict[str, ConnectorHealth]]:
    """``(keys, unwatched, health)``: per table, the key of its source (``None`` when none is
    watched) and why none is watched (``None`` when one is); each source's connector health.

    Args:
        connectors: Kafka Connect's connectors, name -> (health, ``topic.prefix``); ``None``
            when it did not answer (``error``: why).
    """
    keys: list[str | None] = []
    unwatched: list[str | None] = []
    health: dict[str, ConnectorHealth] = {}
    topics: dict[str, list[str]] | None = None
    for cfg in tables:
        named = cfg.connector.name
        if connectors is None:
            key = named or f"topic prefix {prefix_of(cfg.topic)}"
            health.setdefault(key, ConnectorHealth.unreachable(connect.url, error or "no answer", named))
            keys.append(key)
            unwatched.append(None)
            continue
        found = connector_of(cfg.topic, named, {name: [prefix] for name, (_, prefix) in connectors.items()}, {})
        if found is None:  # the offsets' prefixes (resolved), then the written topics: asked once, when needed
            prefixes = {name: [prefix, *offset_prefixes(offsets.of(name))] for name, (_, prefix) in connectors.items()}
            found = connector_of(cfg.topic, None, prefixes, {})
        if found is None:
            if topics is None:
                topics = {name: connect.topics(name) for name in connectors}
            found = connector_of(cfg.topic, None, {}, topics)
        if found is None:
            keys.append(None)
            unwatched.append(
                f"no connector of Kafka Connect at {connect.url} has topic.prefix {prefix_of(cfg.topic)!r} or wrote "
                f"topic {cfg.topic!r}: its source is not watched (set connector.name in the table config)"
            )
            continue
        if found not in health:
            health[found] = connectors[found][0] if found in connectors else ConnectorHealth.missing(connect.url, found)
        keys.append(found)
        unwatched.append(None)
    return keys, unwatched, health


def _binlog_lags(
    probe: SourceProbe, points: dict[str, EmittedPoint], now_ms: int
) -> tuple[dict[str, SourceLag], dict[str, list[str]]]:
    """Each source's :class:`SourceLag` from one read of the source database, and the problems
    of those it could not measure."""
    if not points:
        return {}, {}
    if probe.source_db is None:
        why = "no source database is configured (Airflow connection cdc_source_db): its binlog lag is not measured"
        return {}, {k: [why] for k in points}
    import pymysql

    try:
        read = read_binlog(probe.source_db, points)
    except (pymysql.err.MySQLError, ValueError, OSError) as e:
        why = f"{probe.source_db_origin} did not answer ({type(e).__name__}: {e}): its binlog lag is not measured"
        log.info("%s", why)
        return {}, {k: [why] for k in points}
    lags: dict[str, SourceLag] = {}
    problems: dict[str, list[str]] = {}
    for key, point in points.items():
        foreign = foreign_point(point, read.server)
        if foreign is not None:
            problems[key] = [
                f"{probe.source_db_origin} ({read.server.server}, server id {read.server.server_id}) is not the server "
                f"this connector reads: {foreign}; its binlog lag is not measured"
            ]
            continue
        found = read.transactions.get(key)
        if isinstance(found, str) or found is None:
            lags[key] = SourceLag.measure(now_ms, read.server, point, None)
            problems[key] = [found or "the transactions after the emitted position are unknown"]
        else:
            lags[key] = SourceLag.measure(now_ms, read.server, point, found[0], found[1])
    return lags, problems
