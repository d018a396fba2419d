"""The bad records of a run, grouped by cause, and the tolerance of ``bad_records_tolerance``.

A run with ``bad_records: quarantine`` writes what it cannot apply to ``<table>__cdc_quarantine``
and commits the rest. When it newly quarantined more bad records than the table's
``bad_records_tolerance`` (default 0: any), it fails *after* its commit with
:class:`~cdclake.errors.QuarantineToleranceError`, so that Airflow's failure alerting fires
(docs/operations.md, "A run that quarantines records").

The message tells systematic causes once, not one line per record: the run's new quarantine
entries are grouped (one Spark aggregate, :func:`cdclake.spark.quarantine.quarantine_causes`) by
schema id (Avro), column, and their error with the variable parts left out (:data:`VARIABLE_PARTS`:
values, binlog files and positions, offsets), each group with its count and remedy
(:func:`remedy`).

Only the try that commits raises: a later try of the same run (Airflow's retry, a cleared task)
finds the run's commit and succeeds (:func:`cdclake.runner.run_once`), and a replay does not count
records an earlier run quarantined.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cdclake.errors import QuarantineToleranceError
from cdclake.model.config import TableConfig
from cdclake.model.layout import QUARANTINE_SUFFIX, side_table
from cdclake.model.plan import RunPlan

ELIDED = "..."
"""What stands for a variable part of an error in its cause."""

VARIABLE_PARTS: tuple[str, ...] = (
    # a value: "column 'c' (after image): value 12.5 (JSON ...) does not fit ...",
    # "column 'c': value abc does not fit decimal(10,2) ...", "... value -1 is BIGINT UNSIGNED ..."
    r"(?<=: value ).*?(?= \((?:JSON |Connect |the event's )| does not fit | is BIGINT UNSIGNED )",
    r"(?<=is BIGINT UNSIGNED )[0-9]+",
    # "source has no binlog position (file 'x', pos 4): ..."
    r"(?<=\(file ')[^']*(?=', pos )",
    r"(?<=', pos )[^):]*(?=\))",
    # "held back behind the quarantined record at offset 41 of the same key"
    r"(?<=at offset )[0-9]+",
    # "value is not in the Confluent wire format (...): 7 bytes long, first byte 0x7B"
    r"(?<=: )[0-9]+(?= bytes long)",
    r"(?<=first byte 0x)[0-9A-Fa-f]+",
)
"""Regular expressions (the common subset of Python's ``re`` and Java's ``java.util.regex``, which
Spark's ``regexp_replace`` runs) of the parts of a quarantine error that vary from record to record;
each is replaced by :data:`ELIDED`. What is left names the cause: the column, the types, the schema
id, the op."""

COLUMN_IN_ERROR = r"column '([^']+)'"
"""The column an error names (its first), as group 1."""

MAX_PATTERN_CHARS = 300
"""A cause's error text is cut to this many characters."""

MAX_CAUSES = 10
"""How many causes a message lists, the largest first; the rest are counted together."""

HELD_BACK = "held back behind the quarantined record at offset ... of the same key"
"""The cause of the records held back behind a bad record of their key."""


def cause_of(error: str) -> str:
    """``error`` (a quarantine entry's) with its variable parts left out (:data:`VARIABLE_PARTS`),
    cut to :data:`MAX_PATTERN_CHARS`: what the Spark aggregate computes, in Python."""
    for pattern in VARIABLE_PARTS:
        error = re.sub(pattern, ELIDED, error)
    return error[:MAX_PATTERN_CHARS]


def column_of(error: str) -> str | None:
    """The column ``error`` names first, or ``None``."""
    found = re.search(COLUMN_IN_ERROR, error)
    return found.group(1) if found else None


@dataclass(frozen=True)
class QuarantineCause:
    """The new quarantine entries of a run that share a cause.

    Attributes:
        cause: their error without its variable parts (:func:`cause_of`).
        records: how many.
        column: the column the error names, if any.
        schema_id: the schema id of their values (``value_format: avro``), if any.
        held_back: whether they are records held back behind a bad record of their key (not bad
            themselves: not counted against the tolerance).
        partition, offset: the first of them (lowest partition, then offset).
    """

    cause: str
    records: int
    column: str | None = None
    schema_id: int | None = None
    held_back: bool = False
    partition: int = 0
    offset: int = 0


@dataclass(frozen=True)
class NewQuarantine:
    """The quarantine entries one run wrote (its run id).

    Attributes:
        bad: bad records (what ``bad_records_tolerance`` counts).
        held: records held back behind a bad record of their key.
        causes: by cause, bad ones first, the largest first; at most :data:`MAX_CAUSES` + 1.
    """

    bad: int = 0
    held: int = 0
    causes: tuple[QuarantineCause, ...] = ()


def remedy(cause: QuarantineCause, cfg: TableConfig) -> str:
    """What to do about a cause, by its kind."""
    text = cause.cause
    column = f"column {cause.column!r}" if cause.column else "the column"
    if cause.held_back:
        return "they wait for their key's bad record: release it and replay from it (the held-back records apply then)"
    if "BIGINT UNSIGNED" in text:
        return "set bigint.unsigned.handling.mode=precise on the connector and in the table config, then re-create the table"
    if "in the writer schema, which the table's column" in text:
        return (
            f"the writer schema of schema id {cause.schema_id} changed the type of {column}: apply the change to the "
            'table (docs/operations.md, "Avro topics and a schema registry"), then release and replay'
        )
    if "is not in the schema registry" in text:
        return "the records were written against another schema registry, or their schema was deleted: check the table's registry"
    if "does not decode" in text or "not in the Confluent wire format" in text:
        return (
            "the producer writes values that are not Avro of the registry's schema: fix the producer or its converter"
        )
    if "does not fit" in text:
        return (
            f"the values of {column} do not fit the table's type: check the table config's connector modes against the "
            'connector (docs/operations.md, "Events that contradict the connector modes") or the column\'s type'
        )
    if "is not JSON" in text or "no 'payload'" in text or "not a JSON object" in text:
        return (
            f"the topic holds values that are not value_format {cfg.value_format!r}: align value_format with the "
            "connector's converter, or keep other producers off the topic"
        )
    if "primary key column" in text:
        return f"{column} of the primary key is null in the events: check primary_key {list(cfg.primary_key)}"
    if "no binlog position" in text:
        return "a producer without binlog positions needs ordering: kafka (docs/table-config.md)"
    if "'op'" in text or "unknown op" in text or "envelope" in text or " image" in text:
        return "these are not Debezium change events of the table: keep other producers off the topic"
    return "fix the producer, then release and replay"


def describe_causes(found: NewQuarantine, cfg: TableConfig) -> str:
    """One line per cause (at most :data:`MAX_CAUSES`), each with its remedy on the next: count,
    schema id, column, cause, first record; then the records of the causes left out."""
    lines = []
    causes = found.causes[:MAX_CAUSES]
    for c in causes:
        named = [f"schema id {c.schema_id}"] if c.schema_id is not None else []
        named += [f"column {c.column!r}"] if c.column else []
        where = f" ({', '.join(named)})" if named else ""
        kind = "held back" if c.held_back else "bad"
        lines.append(
            f"  {c.records} {kind} record(s){where}: {c.cause} (first: partition {c.partition} offset {c.offset})"
            f"\n    remedy: {remedy(c, cfg)}"
        )
    rest = found.bad + found.held - sum(c.records for c in causes)
    if rest > 0:
        lines.append(f"  {rest} more record(s) of other causes")
    return "\n".join(lines)


def tolerance_error(plan: RunPlan, found: NewQuarantine, snapshot_id: int) -> QuarantineToleranceError:
    """The error of a run that newly quarantined more bad records than the table tolerates
    (``found``), raised after its commit (``snapshot_id``)."""
    cfg = plan.table
    ranges = ", ".join(
        f"partition {p} offsets [{plan.range.start[p]}, {end})"
        for p, end in sorted(plan.range.end.items())
        if end > plan.range.start[p]
    )
    return QuarantineToleranceError(
        f"table {cfg.identifier}: this run quarantined {found.bad} bad record(s) of topic {cfg.topic!r} ({ranges}), "
        f"more than bad_records_tolerance {cfg.bad_records_tolerance}"
        + (f", and held back {found.held} record(s) of their keys" if found.held else "")
        + f"; by cause:\n{describe_causes(found, cfg)}\n"
        f"The run committed its other records and its offsets (snapshot {snapshot_id}), and the quarantine holds "
        "these, so nothing is lost and nothing is applied twice; it fails so that it is seen, and is not retried "
        "(a retry or a cleared task of this run finds it committed and succeeds). List them with "
        f"`cdclake quarantine list {cfg.name}` (or read {side_table(cfg.identifier, QUARANTINE_SUFFIX)} WHERE "
        f"run_id = '{plan.run_id}'); fix the cause, then release and replay (docs/operations.md, \"Quarantine: "
        'list, release, replay"). To let such runs succeed, raise bad_records_tolerance in the table config '
        "(a count, or all)."
    )
