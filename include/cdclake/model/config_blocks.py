"""The nested blocks of a table's config (:class:`cdclake.model.config.TableDefaults`):
``schema_changes``, ``connector``, ``reconcile``, ``maintenance``, ``change_feed`` and ``history``.
Each is a frozen model whose unknown keys are an error, as every key of the table config is.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class SchemaChangePolicy(BaseModel):
    """How schema sync applies source schema changes it cannot apply as they are
    (``docs/architecture.md``, "Schema sync"; rules in :mod:`cdclake.model.schema_diff`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    incompatible: Literal["fail", "new_column"] = "fail"
    """A column type change Iceberg cannot apply (string->int, a scale change, narrowing):
    ``fail`` stops the table with an error naming the DDL, its position and the column, nothing
    advanced; ``new_column`` renames the old column aside (``<column>__<file>_<pos>``, keeping
    its values) and adds the column with its new type."""
    dropped_columns: Literal["keep", "delete"] = "keep"
    """A column dropped at the source: ``keep`` it (optional, null in rows written afterwards) or
    ``delete`` it from the Iceberg schema (old snapshots keep their values)."""
    topic: str | None = None
    """The connector's schema-change topic; default: the data topic's ``<topic.prefix>`` (the
    data topic without its last two parts, ``<database>.<table>``)."""
    source: Literal["topic", "events"] = "topic"
    """Where the table's schema changes come from. ``topic``: the schema-change topic (schema
    sync, :mod:`cdclake.pipeline.schema_sync`); while that topic does not exist (the connector
    runs with ``include.schema.changes=false``), or under ``ordering: kafka`` (nothing places a
    change among the events), from the events as with ``events``. ``events``: the topic is never
    read; the apply evolves the table from the row schema the events carry (the Connect schema of
    ``json_with_schema``, the Avro writer schema): new columns added, types promoted, columns
    absent from the events kept (:func:`cdclake.model.schema_from_events.plan_from_events`)."""


class ConnectorModes(BaseModel):
    """The Debezium connector the table's topic comes from: its name in Kafka Connect, and its
    value handling modes (its properties of the same names, dots as underscores), which decide how
    a source column type is encoded, hence its Iceberg type.
    The defaults are those of the project's connector config
    (``include/stack/debezium/inventory-connector.json``); they must mirror the connector the
    table's topic comes from. ``bigint_unsigned_handling_mode`` defaults to ``precise`` there
    (Debezium's own default, ``long``, wraps values >= 2^63 to negative numbers)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[str, Field(min_length=1)] | None = None
    """The connector's name in Kafka Connect, whose state and binlog position the status and the
    freshness check watch (:mod:`cdclake.model.source_health`); ``None``: the connector whose
    ``topic.prefix`` (of its config, else of its source offsets) is the table topic's prefix, else
    the one that wrote the table's topic (Kafka Connect's ``GET /connectors/<name>/topics``)."""

    decimal_handling_mode: Literal["precise", "double", "string"] = "precise"
    time_precision_mode: Literal["adaptive_time_microseconds", "adaptive", "connect"] = "adaptive_time_microseconds"
    bigint_unsigned_handling_mode: Literal["long", "precise"] = "precise"
    binary_handling_mode: Literal["bytes", "base64", "base64-url-safe", "hex"] = "bytes"


class ReconcilePolicy(BaseModel):
    """How the ``cdc_reconcile`` DAG treats a table (docs/operations.md, "Reconcile and repair")."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ignored_columns: tuple[str, ...] = ()
    """Source columns never compared (``_cdc_*`` columns never are)."""
    on_difference: Literal["fail", "warn"] = "fail"
    """What a reconcile run does when differences remain: fail its task (Airflow's alerting
    fires), or log a warning and succeed."""


class MaintenancePolicy(BaseModel):
    """How table upkeep (:mod:`cdclake.spark.maintenance`, Iceberg's Spark procedures) treats the
    table and its side tables. Iceberg's own rules: "Maintenance" in the Iceberg docs
    (``expire_snapshots``, ``rewrite_data_files``, ``remove_orphan_files``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    snapshot_retention_hours: Annotated[int, Field(ge=0)] = 24 * 7
    """Time-travel window (hours): snapshots younger than this are never expired. Older ones go,
    except the newest ``retain_last``, the snapshots branches and tags reference, and never the
    newest snapshot carrying the table's committed Kafka offsets (nor anything newer)."""
    retain_last: Annotated[int, Field(ge=1)] = 10
    """Snapshots of the current ancestry kept whatever their age (``expire_snapshots``'
    ``retain_last``)."""
    orphan_file_age_hours: Annotated[int, Field(ge=24)] = 72
    """Files in the table's location that no snapshot references are deleted only once older than
    this (hours). At least 24: an apply in flight writes its files before its commit, and a file
    younger than the longest run must never count as an orphan (Iceberg's docs warn the same)."""
    target_file_size_mb: Annotated[int, Field(gt=0)] | None = None
    """Target size of the files ``rewrite_data_files`` and ``rewrite_position_delete_files``
    write (MiB); default: the table property ``write.target-file-size-bytes`` (Iceberg: 512 MiB)."""
    delete_file_threshold: Annotated[int, Field(ge=1)] = 1
    """``rewrite_data_files`` rewrites every data file with at least this many delete files
    (``delete-file-threshold``), folding merge-on-read deletes into the data; 1: every data file
    with a delete."""


class ChangeFeedPolicy(BaseModel):
    """The table's change feed, ``<namespace>.<table>__changes``: one row per change each run
    applies (:mod:`cdclake.model.changes`; ``docs/guide.md``, "Reading the change feed")."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    retention_days: Annotated[int, Field(gt=0)] = 30
    """Change rows whose source time (``_cdc_source_ts``) is more than this many days old are
    deleted by the ``cdc_maintenance`` DAG, whole day partitions at a time."""


class HistoryPolicy(BaseModel):
    """The table's SCD type 2 history, ``<namespace>.<table>__history``: one row per version of
    each row, with the source time and position it was valid from and to
    (:mod:`cdclake.model.history`; ``docs/guide.md``, "Querying the history as of a time"). No
    options yet: ``history: {}`` turns it on."""

    model_config = ConfigDict(frozen=True, extra="forbid")
