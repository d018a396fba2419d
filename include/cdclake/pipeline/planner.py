"""The plan step of a table run: committed offsets (Iceberg) + watermarks (Kafka) -> the run's
:class:`~cdclake.model.plan.RunPlan`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cdclake.errors import CommittedStateLostError, OffsetsOutOfRangeError, TopicNotFoundError
from cdclake.io.catalog import load_table_or_none
from cdclake.io.kafka import (
    KafkaClients,
    Watermarks,
    offsets_for_time,
    oldest_timestamps,
    topic_id,
    topic_watermarks,
)
from cdclake.io.refs import ancestry, committed_offsets
from cdclake.model.config import TableConfig
from cdclake.model.layout import COMMITTED_PROPERTY, SummaryKeys
from cdclake.model.offsets import OffsetRange, Offsets, plan_range
from cdclake.model.plan import RunPlan, TransactionRange
from cdclake.model.replay import ReplayStart, check_exclusive, check_offsets, check_retained
from cdclake.model.run_state import lost_commits
from cdclake.model.transactions import cuts_whole

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


def plan_next(
    catalog: Catalog,
    kafka: KafkaClients,
    cfg: TableConfig,
    run_id: str,
    *,
    replay_from_offsets: Offsets | None = None,
    replay_from_timestamp_ms: int | None = None,
    accept_source_change: bool = False,
) -> RunPlan:
    """Plan the table's next run (see :func:`cdclake.model.offsets.plan_range`).

    A manual replay starts at ``replay_from_offsets`` (partitions not named start at their low
    watermark) or at the first records at or after ``replay_from_timestamp_ms`` (Kafka's
    offsets-for-times), instead of the committed offsets; it still ends at the high watermarks,
    capped by ``max_events_per_run``. Replaying a range that ends at the current end converges to
    the same table, since an event never overwrites a row written at a greater position.

    Raises:
        TopicNotFoundError: the topic does not exist.
        OffsetsOutOfRangeError: the start offsets are outside the topic's watermarks.
        CommittedStateLostError: not a replay, and the table holds rows but no snapshot of its
            ancestry records offsets (:func:`check_commits_kept`).
        ConfigError: the table cannot be applied as configured (no primary key, not changelog;
            ``value_format: avro`` and the Kafka clients have no schema registry).
        TriggerParamError: both replay starts given; ``accept_source_change`` without replay start
            offsets (the new history's start); a start offset of a partition the topic does not
            have or outside its watermarks; a start time whose records retention may have deleted
            (:mod:`cdclake.model.replay`).
    """
    cfg.check_runnable(has_schema_registry=kafka.schema_registry is not None)
    check_exclusive(ReplayStart(replay_from_offsets, replay_from_timestamp_ms, accept_source_change))
    watermarks = topic_watermarks(kafka, cfg.topic, suggest=True)  # a typo in the config: the near topic
    table = load_table_or_none(catalog, cfg.identifier)
    committed = committed_offsets(table, cfg.topic)
    replaying = replay_from_offsets is not None or replay_from_timestamp_ms is not None
    if committed is None and table is not None and not replaying:
        check_commits_kept(table, cfg)
    current_id = topic_id(kafka, cfg.topic)
    if committed is not None and table is not None and not replaying:
        check_same_topic(table, cfg, current_id)
    start = committed
    if replay_from_offsets is not None:
        check_offsets(cfg.topic, replay_from_offsets, watermarks.low, watermarks.high)
        start = {p: replay_from_offsets.get(p, watermarks.low[p]) for p in watermarks.high}
    elif replay_from_timestamp_ms is not None:
        oldest = oldest_timestamps(
            kafka, cfg.topic, {p: o for p, o in watermarks.low.items() if o > 0}, watermarks.high
        )
        check_retained(cfg.topic, replay_from_timestamp_ms, watermarks.low, oldest)
        start = offsets_for_time(kafka, cfg.topic, replay_from_timestamp_ms)
    offset_range = plan_range(cfg.topic, start, watermarks.low, watermarks.high, cfg.max_events_per_run)
    replay = replaying
    log.info(
        "table %s: %stopic %r: committed %s, low watermarks %s, high watermarks %s; planned %d event(s) %s",
        cfg.identifier,
        "REPLAY " if replay else "",
        cfg.topic,
        committed,
        watermarks.low,
        watermarks.high,
        offset_range.event_count,
        offset_range.to_json(),
    )
    return RunPlan(
        table=cfg,
        run_id=run_id,
        range=offset_range,
        replay=replay,
        committed=committed,
        accept_source_change=accept_source_change,
        transactions=plan_transactions(kafka, cfg, offset_range, watermarks),
        topic_id=current_id,
    )


def check_commits_kept(table: Table, cfg: TableConfig) -> None:
    """Refuse to plan from the low watermarks a table cdclake committed to
    (:data:`~cdclake.model.layout.COMMITTED_PROPERTY`) that holds rows but whose ancestry records no
    committed offsets (:func:`~cdclake.model.run_state.lost_commits`). A table loaded outside
    cdclake and never applied to starts at the low watermarks, as a new one.

    Raises:
        CommittedStateLostError: names the table and the remedies.
    """
    if table.properties.get(COMMITTED_PROPERTY) == "true" and lost_commits(
        summary for _, _, summary in ancestry(table)
    ):
        raise CommittedStateLostError(
            f"table {cfg.identifier} holds rows but no snapshot of its history records the Kafka offsets, "
            "truncate and snapshot floors, source identity and positions cdclake committed (its CDC commits "
            "were expired by another engine or the catalog, or the table was replaced); planning from the low watermarks would apply old events over newer rows without the "
            "floors. Nothing was applied. Rebuild the table with the snapshot-bootstrap DAG (drop it first), "
            "or, if its rows are right as of known offsets, trigger the DAG once with replay_from_offsets "
            "(or replay_from_timestamp) to start there. Keep snapshot expiry to cdclake's maintenance, which "
            "keeps the newest commit of each topic."
        )


def check_same_topic(table: Table, cfg: TableConfig, current_id: str | None) -> None:
    """Refuse offsets committed against another topic of the same name: the newest CDC commit of
    the topic recorded Kafka's topic id (:attr:`~cdclake.model.layout.SummaryKeys.TOPIC_ID`) and
    the topic has another one now (deleted and created again, KIP-516). Its offsets name other
    records, whether or not its new end is still above them. Commits without an id (before this
    check, or a broker without ids) are not compared.

    Raises:
        OffsetsOutOfRangeError: names both ids and the remedies.
    """
    if current_id is None:
        return
    for _, _, summary in ancestry(table):
        if summary is None or summary.get(SummaryKeys.TOPIC) != cfg.topic or SummaryKeys.END_OFFSETS not in summary:
            continue
        committed_id = summary.get(SummaryKeys.TOPIC_ID)
        if committed_id is not None and committed_id != current_id:
            raise OffsetsOutOfRangeError(
                f"topic {cfg.topic!r} was deleted and created again: its id is {current_id}, and the offsets table "
                f"{cfg.identifier} committed are of topic id {committed_id}, records that are gone. Nothing was "
                "applied. Re-snapshot the table with the snapshot-bootstrap DAG (blocking), then trigger the table "
                "DAG with replay_from_offsets at the new topic's start; or rebuild the table."
            )
        return


TRANSACTION_MARGIN_MS = 60_000
"""How long before the batch's first records the transaction topic is read from: an ``END``
follows its transaction's events, and the producer stamps records in the order it sends them;
the margin covers clocks and batching."""


def plan_transactions(
    kafka: KafkaClients, cfg: TableConfig, offset_range: OffsetRange, watermarks: Watermarks
) -> TransactionRange | None:
    """Where the apply reads the ``END`` records of the batch's transactions
    (:class:`~cdclake.model.plan.TransactionRange`); ``None`` when the table does not commit whole
    transactions (``transactions: ignore``, ``ordering: kafka``: :func:`~cdclake.model.transactions.cuts_whole`),
    the range is empty, or the connector writes no transaction topic (a warning, once per plan: the
    batch is cut by offsets as under ``transactions: ignore``)."""
    if not cuts_whole(cfg) or offset_range.is_empty:
        return None
    topic = cfg.transaction_topic_name
    try:
        marks = topic_watermarks(kafka, topic)  # after the data topic's: every END of the range's events
    except TopicNotFoundError:
        log.warning(
            "table %s: transactions: whole, but there is no transaction topic %r (the connector runs without "
            "provide.transaction.metadata): the batch is cut by offsets, and a commit may hold part of a source "
            "transaction (set transactions: ignore to accept it)",
            cfg.identifier,
            topic,
        )
        return None
    reading = {p: o for p, o in offset_range.start.items() if o < offset_range.end[p]}
    first = oldest_timestamps(kafka, cfg.topic, reading, dict(offset_range.end))
    start = dict(marks.low)
    if first:
        since = offsets_for_time(kafka, topic, min(first.values()) - TRANSACTION_MARGIN_MS)
        start = {p: min(max(o, since.get(p, o)), marks.high[p]) for p, o in start.items()}
    return TransactionRange(
        topic=topic,
        start=start,
        end=dict(marks.high),
        read_to_end=tuple(sorted(p for p, o in offset_range.end.items() if o >= watermarks.high.get(p, 0))),
    )
