"""The table config: which Debezium topics become which Iceberg tables, and how they are run.

The file (YAML) has three top-level keys, ``defaults`` (optional; any per-table field except the
identity fields), ``tables`` (a list) and ``discover`` (optional: patterns of topics that become
tables without an entry, :mod:`cdclake.model.discovery`; ``tables`` may then be left out). Every
key is validated on load and unknown keys are an error, so a typo never becomes a silent no-op::

    defaults:
      owner: data-platform
      schedule: "*/15 * * * *"
      max_events_per_run: 500000
    tables:
      - name: inventory_products            # DAG id: cdc_inventory_products
        topic: dbserver1.inventory.products # Debezium topic <topic.prefix>.<db>.<table>
        namespace: inventory                # Iceberg namespace
        table: products                     # Iceberg table
        primary_key: [id]
        value_format: json_with_schema      # or: json (schemas.enable=false), avro (a schema registry)
        schema_changes:                     # optional; see SchemaChangePolicy
          incompatible: fail                # or: new_column
          dropped_columns: keep             # or: delete
        connector:                          # optional; the Debezium connector's handling modes
          decimal_handling_mode: precise
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails

from cdclake.errors import ConfigError
from cdclake.model.config_blocks import (
    ChangeFeedPolicy,
    ConnectorModes,
    HistoryPolicy,
    MaintenancePolicy,
    ReconcilePolicy,
    SchemaChangePolicy,
)
from cdclake.model.config_errors import ConfigShape, config_problems, yaml_tree
from cdclake.model.discovery import Candidate, DiscoverPattern, first_match, read_registry
from cdclake.model.flattened import FlattenedRecords
from cdclake.model.format_version import DEFAULT_FORMAT_VERSION, FormatVersion
from cdclake.model.groups import GROUP_NAME, group_members
from cdclake.model.hints import did_you_mean
from cdclake.model.shared import SHARED_DAG_NAME, SHARED_DAG_PREFIX, shared_dags, shared_mismatch
from cdclake.model.types import parse_decimal_type
from cdclake.settings import ConnectionIds

log = logging.getLogger(__name__)

_M = TypeVar("_M", bound=BaseModel)

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME = re.compile(r"^[a-z0-9_]+$")

NAMES_SHOWN = 20
"""How many configured table names the error of an unknown table lists."""

BadRecordsTolerance = Annotated[int, Field(ge=0)] | Literal["all"]
"""How many bad records a run may quarantine and succeed (``bad_records_tolerance``): a count, or
``all``; ``none`` reads as 0."""

ValueFormat = Literal["json", "json_with_schema", "avro"]
"""How the Kafka record value is serialized by the connector's value converter:

* ``json_with_schema``: ``JsonConverter`` with ``schemas.enable=true``,
  ``{"schema": {...}, "payload": <envelope>}``
* ``json``: ``JsonConverter`` with ``schemas.enable=false``, the bare envelope
  ``{"before", "after", "source", "op", "ts_ms"}``
* ``avro``: an Avro converter writing Confluent's wire format (Confluent's ``AvroConverter``,
  Apicurio's with ``as-confluent``): magic byte, schema id, Avro datum; the writer schema is read
  from the schema registry (:mod:`cdclake.model.avro`; needs :data:`NO_SCHEMA_REGISTRY`'s
  connection or variable)
"""

NO_SCHEMA_REGISTRY = (
    "value_format: avro needs a schema registry, and none is configured: define the Airflow connection "
    f"{ConnectionIds.SCHEMA_REGISTRY!r} (host: the registry's URL, e.g. http://<host>:<port>/apis/ccompat/v7 "
    "for Apicurio) or set CDCLAKE_SCHEMA_REGISTRY_URL (the CLI, the local stack)"
)
"""The remedy when an Avro topic is read without a schema registry (docs/operations.md)."""

ICEBERG_PRIMITIVES = {
    "boolean",
    "int",
    "long",
    "float",
    "double",
    "date",
    "timestamp",
    "timestamptz",
    "string",
    "binary",
}


class TableDefaults(BaseModel):
    """Per-table settings that may be given once under ``defaults``."""

    # the fields' docstrings are their descriptions: a config error says what a missing key is for
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    owner: str = "data-platform"
    schedule: str | None = "*/15 * * * *"
    """Cron expression or Airflow preset (``@hourly``); ``null`` for manual runs only."""
    max_events_per_run: Annotated[int, Field(gt=0)] = 500_000
    """Cap on the Kafka records (events, in all partitions together) one run consumes."""
    max_transaction_events: Annotated[int, Field(gt=0)] = 2_000_000
    """Hard cap on the Kafka records of a run extended past ``max_events_per_run`` to hold a source
    transaction whole (``transactions: whole``): a transaction that needs more stops the table with
    :class:`~cdclake.errors.TransactionTooLargeError` naming it, instead of a range that doubles
    until the shared engine runs out of memory for every table."""
    value_format: ValueFormat = "json_with_schema"
    flattened: FlattenedRecords | None = None
    """The topic's records were flattened by Debezium's ``ExtractNewRecordState`` transform (the
    row image with added metadata fields: :mod:`cdclake.model.flattened`); ``None``: Debezium's
    envelopes."""
    retries: Annotated[int, Field(ge=0)] = 3
    retry_delay_s: Annotated[int, Field(gt=0)] = 60
    """First retry delay in seconds; doubles on each retry (exponential backoff)."""
    task_timeout_minutes: Annotated[int, Field(gt=0)] = 60
    """Airflow ``execution_timeout`` of every task of the table's DAG: a task running longer is
    failed (and retried); a killed apply never half-commits (docs/architecture.md)."""
    tags: tuple[str, ...] = ()
    bad_records: Literal["quarantine", "fail"] = "quarantine"
    """What a run does with a record it cannot apply: ``quarantine`` writes it to the table's
    quarantine table and goes on; ``fail`` (strict mode) stops the run naming the record."""
    bad_records_tolerance: BadRecordsTolerance = 0
    """With ``bad_records: quarantine``, how many bad records one run may newly quarantine and
    still succeed (in the spirit of Kafka Connect's ``errors.tolerance``): a run that quarantines
    more commits its good rows, the quarantine and its offsets as any run, then fails with
    :class:`~cdclake.errors.QuarantineToleranceError` naming the causes, so that Airflow's failure
    alerting fires (:mod:`cdclake.model.bad_records`). ``0`` (or ``none``, the default): any bad
    record fails the run; a count ``N``: more than ``N``; ``all``: never (the run succeeds and
    counts them). Records held back behind a bad record of their key, and records an earlier run
    quarantined already (a replay), do not count. No effect with ``bad_records: fail``."""
    tombstone_retention_hours: Annotated[int, Field(gt=0)] = 24 * 8
    """How long delete tombstones are kept (hours); at least the topic's retention (Kafka's
    default is 7 days), so that no re-emitted or replayed event can outlive its tombstone."""
    schema_changes: SchemaChangePolicy = SchemaChangePolicy()
    connector: ConnectorModes = ConnectorModes()
    authoritative_snapshots: bool = True
    """Whether a complete full (initial or blocking) snapshot of the table deletes the rows and
    tombstones below its position that it did not read (:mod:`cdclake.model.convergence`).
    Set ``false`` when the connector reads the table through
    ``snapshot.select.statement.overrides`` (its snapshot then holds only the rows the statement
    selects, yet carries the same markers as a full one). Filtered blocking snapshots
    (``additional-conditions``) are refused by the bootstrap DAG for tables where this is true."""
    reconcile: ReconcilePolicy = ReconcilePolicy()
    maintenance: MaintenancePolicy = MaintenancePolicy()
    """Table upkeep with Iceberg's procedures: snapshot expiry, compaction, orphan files."""
    freshness_minutes: Annotated[int, Field(gt=0)] | None = None
    """Freshness target (minutes): when the table has events not applied yet and its lag in time
    (now minus the source time of the newest event applied) passes it, the table's task of the
    ``cdc_freshness`` DAG fails, so that Airflow's alerting (callbacks, email, chat providers)
    fires. ``None``: no target (the table's figures are still reported)."""
    engine: Literal["connect", "submit"] | None = None
    """How the table's runs apply (``CDCLAKE_ENGINE`` when unset): ``connect``, a session of the
    shared Spark Connect server; ``submit``, a ``spark-submit`` job of its own (for a table whose
    batches are too large to share the engine's heap)."""
    ordering: Literal["binlog", "gtid", "kafka"] = "binlog"
    """How events are ordered (:mod:`cdclake.model.position`): ``binlog`` by binlog coordinates
    (file, pos, row); a change of server or binlog stops the table. ``gtid`` by the MariaDB GTID's
    sequence number (needs ``gtid_strict_mode`` sources, one GTID domain): a failover to another
    server of the same domain is followed without a stop. ``kafka`` by Kafka offset within a
    partition only, for producers that write no binlog position (Flink CDC, Paimon, some TiCDC and
    Maxwell setups: ``source.file`` ``""``, ``pos`` 0); it gives up the guards that compare
    positions (docs/table-config.md, ``ordering``). The ordering is fixed when the table is first
    applied (docs/operations.md, "GTID ordering")."""
    transactions: Literal["whole", "ignore"] = "whole"
    """``whole``: when the connector writes transaction metadata (``provide.transaction.metadata=true``:
    its transaction topic exists), every commit holds only whole source transactions of the table
    (:mod:`cdclake.model.transactions`); without the topic (or with events without a
    ``transaction`` block), batches are cut by offsets as with ``ignore``, said at warning once per
    run and in the status. ``ignore``: batches are cut by ``max_events_per_run`` and the high watermarks only,
    and a commit may hold part of a source transaction."""
    transaction_topic: str | None = None
    """The connector's transaction topic; default ``<topic.prefix>.transaction`` (Debezium's
    ``topic.transaction`` default)."""
    group: Annotated[str, Field(pattern=GROUP_NAME.pattern)] | None = None
    """A table group (``[a-z0-9_]``): the tables of one group are published together at one source
    transaction boundary, as ``main`` and the tag ``cdc_group_<group>`` of each; their runs commit
    to the branch ``cdc_stage`` (:mod:`cdclake.model.groups`); members need ``transactions: whole``
    and one transaction topic. ``None``: no group."""
    shared_dag: Annotated[str, Field(pattern=SHARED_DAG_NAME.pattern)] | None = None
    """A shared DAG (``[a-z0-9_]``): the DAG ``cdc_shared_<shared_dag>`` applies the table on
    ``schedule``, together with every other table naming it, several tables per task in one Spark
    Connect session, each with its own commit (:mod:`cdclake.model.shared`; docs/architecture.md,
    "Shared DAGs"): the fixed cost of a run (a task, a session) is paid once per task, not per
    table. The table's own DAG ``cdc_<name>`` stays, unscheduled, for manual runs and replays.
    Its members share ``schedule``, ``tables_per_task``, ``retries``, ``retry_delay_s`` and
    ``task_timeout_minutes``, and apply through the ``connect`` engine. ``None``: the table's own
    DAG runs it on ``schedule``."""
    tables_per_task: Annotated[int, Field(ge=1, le=1000)] = 50
    """With ``shared_dag``: how many tables one task of the shared DAG applies, one after the other
    (the tables in name order, cut into tasks ``apply_0``, ``apply_1``, ...); the tasks run at once
    as the pool ``cdc_apply`` allows."""
    format_version: FormatVersion = DEFAULT_FORMAT_VERSION
    """The Iceberg format version the table is created with (:mod:`cdclake.model.format_version`).
    ``3``: the runs' row-level deletes are deletion vectors (one Puffin bitmap per data file)
    instead of position-delete files; it needs the REST catalog (pyiceberg, which commits the
    runs' refs and properties, writes no v3 metadata into a SQL catalog) and readers that read v3.
    Its side tables stay v2. A table that exists keeps its version: ``cdclake upgrade`` upgrades
    it in place (``docs/operations.md``, "Upgrading a table to format v3"); no table is ever
    downgraded."""

    @field_validator("bad_records_tolerance", mode="before")
    @classmethod
    def _tolerance(cls, v: Any) -> Any:
        if isinstance(v, bool):  # YAML's yes/no/true/false are not counts
            raise ValueError(f"bad_records_tolerance is none, all or a count of records, not {v!r}")
        return 0 if v == "none" else v

    def tolerates_bad_records(self, bad: int) -> bool:
        """Whether a run that newly quarantined ``bad`` bad records succeeds
        (:attr:`bad_records_tolerance`)."""
        return self.bad_records_tolerance == "all" or bad <= self.bad_records_tolerance


class TableConfig(TableDefaults):
    """One source table: its Debezium topic, its Iceberg table and how its DAG runs."""

    name: str
    """Unique name, lower case ``[a-z0-9_]``; the DAG id is ``cdc_<name>``."""
    topic: str
    """The Debezium data topic, ``<topic.prefix>.<database>.<table>``."""
    namespace: str
    """Iceberg namespace of the target table."""
    table: str
    """Iceberg table name within ``namespace``."""
    primary_key: tuple[str, ...]
    """Primary-key columns of the source table, in key order; the Iceberg identifier fields.
    Empty for a table without a primary key, which needs ``write_mode: changelog``."""
    write_mode: Literal["upsert", "changelog"] = "upsert"
    """``upsert``: the Iceberg table mirrors the source table (needs a primary key).
    ``changelog``: every event is appended as a row (op, position, row image): the explicit
    choice for source tables without a primary key."""
    columns: dict[str, str] | None = None
    """Column name -> Iceberg primitive type, in source order. Needed only to create the table
    from ``json`` values (no Connect schema in the events); ``json_with_schema`` tables are
    created from the events' own schema. Edited once the table exists, the next run adds the new
    columns and promotes widened types (:mod:`cdclake.spark.evolve`); an incompatible type is a
    :class:`~cdclake.errors.SchemaChangeError`, a removed column is kept."""
    change_feed: ChangeFeedPolicy | None = None
    """The table's change feed (``upsert`` tables): absent, none is written."""
    history: HistoryPolicy | None = None
    """The table's SCD type 2 history (``upsert`` tables ordered by source position): absent,
    none is written."""

    @field_validator("topic")
    @classmethod
    def _topic(cls, v: str) -> str:
        if v.count(".") < 2:
            raise ValueError(f"topic {v!r} is not <topic.prefix>.<database>.<table>")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"name {v!r} must match [a-z0-9_]+ (it becomes the DAG id)")
        return v

    @field_validator("namespace", "table")
    @classmethod
    def _ident(cls, v: str) -> str:
        if not _IDENT.match(v):
            raise ValueError(f"{v!r} is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)")
        return v

    @field_validator("primary_key")
    @classmethod
    def _pk(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for col in v:
            if not _IDENT.match(col):
                raise ValueError(f"primary key column {col!r} is not a plain identifier")
        if len(set(v)) != len(v):
            raise ValueError(f"primary_key {list(v)} repeats a column")
        return v

    @field_validator("columns")
    @classmethod
    def _columns(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v is None:
            return v
        for col, typ in v.items():
            if not _IDENT.match(col):
                raise ValueError(f"column {col!r} is not a plain identifier")
            if typ not in ICEBERG_PRIMITIVES and parse_decimal_type(typ) is None:
                raise ValueError(
                    f"column {col!r}: type {typ!r} is not one of {sorted(ICEBERG_PRIMITIVES)} or decimal(P,S)"
                )
        return v

    @model_validator(mode="after")
    def _change_feed_needs_keys(self) -> TableConfig:
        if self.change_feed is not None and self.write_mode != "upsert":
            raise ValueError(
                "change_feed needs write_mode: upsert (a write_mode: changelog table is a change log already)"
            )
        return self

    @model_validator(mode="after")
    def _history_needs_keys_and_positions(self) -> TableConfig:
        if self.history is not None and self.write_mode != "upsert":
            raise ValueError("history needs write_mode: upsert (a row's versions are those of its primary key)")
        if self.history is not None and self.ordering == "kafka":
            raise ValueError(
                "history needs ordering: binlog or gtid (a version is valid from its source position to the "
                "next one's; under ordering: kafka events carry none)"
            )
        return self

    @model_validator(mode="after")
    def _tombstone_deletes_reach_no_history(self) -> TableConfig:
        if self.flattened is not None and self.flattened.deletes == "tombstone":
            for key, value in (("history", self.history), ("change_feed", self.change_feed)):
                if value is not None:
                    raise ValueError(
                        f"{key} needs deletes with positions: with flattened.deletes: tombstone a delete is a Kafka "
                        "tombstone alone, which reaches no history or change feed; set the transform's "
                        "delete.tombstone.handling.mode=rewrite and flattened.deletes: rewrite"
                    )
        return self

    @model_validator(mode="after")
    def _shared_dag_applies_through_connect(self) -> TableConfig:
        if self.shared_dag is not None and self.engine == "submit":
            raise ValueError(
                "shared_dag needs the connect engine (its tables share one Spark Connect session per task): "
                "remove engine: submit, or shared_dag"
            )
        return self

    @model_validator(mode="after")
    def _pk_in_columns(self) -> TableConfig:
        if self.columns is not None:
            missing = [c for c in self.primary_key if c not in self.columns]
            if missing:
                raise ValueError(f"primary key column(s) {missing} are not in columns")
        return self

    def check_runnable(self, *, has_schema_registry: bool) -> None:
        """Refuse a table that cannot be applied as configured.

        Args:
            has_schema_registry: whether the run's Kafka clients have a schema registry
                (:attr:`cdclake.io.kafka.KafkaClients.schema_registry`).

        Raises:
            ConfigError: no primary key and ``write_mode`` is not ``changelog``; ``value_format:
                avro`` without a schema registry (:data:`NO_SCHEMA_REGISTRY`).
        """
        if self.value_format == "avro" and not has_schema_registry:
            raise ConfigError(f"table {self.name!r} ({self.topic}): {NO_SCHEMA_REGISTRY}")
        if not self.primary_key and self.write_mode != "changelog":
            raise ConfigError(
                f"table {self.name!r} ({self.topic}) has no primary key, so its rows cannot be "
                "upserted: set `write_mode: changelog` to write it as an append-only change log, "
                "or declare its primary_key"
            )

    @property
    def dag_id(self) -> str:
        """The table's own DAG, ``cdc_<name>``."""
        return f"cdc_{self.name}"

    @property
    def scheduled_dag_id(self) -> str:
        """The DAG that applies the table on its schedule: its shared DAG
        (``cdc_shared_<shared_dag>``, :mod:`cdclake.model.shared`) or its own (:attr:`dag_id`)."""
        return f"{SHARED_DAG_PREFIX}{self.shared_dag}" if self.shared_dag is not None else self.dag_id

    @property
    def schema_change_topic(self) -> str:
        """The topic schema sync reads (``schema_changes.topic`` or ``<topic.prefix>``)."""
        return self.schema_changes.topic or self.topic.rsplit(".", 2)[0]

    @property
    def transaction_topic_name(self) -> str:
        """The transaction topic (``transaction_topic`` or ``<topic.prefix>.transaction``)."""
        return self.transaction_topic or f"{self.topic.rsplit('.', 2)[0]}.transaction"

    @property
    def data_collection(self) -> str:
        """The source table as the transaction topic's ``data_collections`` names it:
        ``<database>.<table>``, from the data topic ``<topic.prefix>.<database>.<table>``."""
        _, db, table = self.topic.rsplit(".", 2)
        return f"{db}.{table}"

    @property
    def source_table_id(self) -> str:
        """The source table as ``tableChanges[].id`` names it: ``"<database>"."<table>"``, from
        the data topic ``<topic.prefix>.<database>.<table>``."""
        _, db, table = self.topic.rsplit(".", 2)
        return f'"{db}"."{table}"'

    @property
    def identifier(self) -> str:
        """``namespace.table``, as pyiceberg and Spark (after the catalog name) spell it."""
        return f"{self.namespace}.{self.table}"


class TablesFile(BaseModel):
    """The whole table-config file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    defaults: dict[str, Any] = Field(default_factory=dict)
    tables: tuple[TableConfig, ...] = ()
    discover: tuple[DiscoverPattern, ...] = ()
    """Patterns of source tables that become tables without an entry (:mod:`cdclake.model.discovery`)."""
    _origin: Path | None = PrivateAttr(default=None)
    """The file it was read from (:func:`load_tables`), for messages; ``None``: not read from a file."""

    @model_validator(mode="before")
    @classmethod
    def _apply_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ValueError("the table config must be a mapping with a 'tables' list")
        defaults = data.get("defaults") or {}
        _validated_at(TableDefaults, defaults, "defaults")  # unknown default keys are errors too
        patterns = tuple(
            _validated_at(DiscoverPattern, p, "discover", i) for i, p in enumerate(data.get("discover") or ())
        )
        for i, p in enumerate(patterns):  # a pattern's unknown keys too
            _validated_at(TableDefaults, {**defaults, **p.defaults}, "discover", i, "defaults")
        tables = data.get("tables", [] if patterns else None)
        if not isinstance(tables, list):
            raise ValueError("'tables' must be a list of table entries")

        def layered(entry: dict[str, Any]) -> dict[str, Any]:
            # an entry whose topic a pattern takes overrides that pattern's defaults
            found = first_match(patterns, str(entry.get("topic")))
            own = patterns[found[0]].defaults if found is not None and isinstance(found[1], Candidate) else {}
            return {**defaults, **own, **entry}

        merged = [layered(t) if isinstance(t, dict) else t for t in tables]
        return {**data, "defaults": defaults, "tables": merged, "discover": patterns}

    def discovered(self, registry: Mapping[str, tuple[str, ...]]) -> tuple[list[TableConfig], dict[str, str]]:
        """The tables the ``discover`` patterns make of the registered topics ``registry``
        (``{topic: primary-key columns}``, :func:`cdclake.model.discovery.read_registry`): each
        is the file's ``defaults``, over them its pattern's, its names by the pattern's rules,
        ``primary_key`` as registered and ``write_mode: changelog`` when that is empty.

        A registered topic that has an entry in ``tables`` is that entry; one no pattern takes
        any more is left out. A table that would be invalid, share a name, topic or Iceberg
        table with another, or disagree with the other tables of its shared DAG
        (:func:`~cdclake.model.shared.shared_mismatch`) is left out with the reason, so that one
        odd source table never breaks the DAG file of every table.

        Returns:
            The tables (registry order), and ``{topic: why it was left out}``.
        """
        taken = {attr: {getattr(t, attr) for t in self.tables} for attr in ("name", "topic", "identifier")}
        found: list[TableConfig] = []
        skipped: dict[str, str] = {}
        first_of_shared = {name: members[0] for name, members in shared_dags(self.tables).items()}
        for topic, pk in registry.items():
            match = first_match(self.discover, topic)
            if topic in taken["topic"] or match is None or not isinstance(match[1], Candidate):
                continue
            pattern, c = self.discover[match[0]], match[1]
            spec = {**self.defaults, **pattern.defaults, "name": c.name, "topic": topic}
            spec.update(namespace=c.namespace, table=c.table, primary_key=pk)
            spec["write_mode"] = "upsert" if pk else "changelog"
            try:
                cfg = TableConfig.model_validate(spec)
            except ValidationError as e:
                skipped[topic] = f"invalid table: {e.errors()[0]['msg']}"
                continue
            clash = [a for a in ("name", "identifier") if getattr(cfg, a) in taken[a]]
            if clash:
                skipped[topic] = f"its {clash[0]} {getattr(cfg, clash[0])!r} is another table's"
                continue
            mismatch = shared_mismatch(cfg, first_of_shared.get(cfg.shared_dag)) if cfg.shared_dag else None
            if mismatch is not None:
                skipped[topic] = mismatch
                continue
            if cfg.shared_dag is not None:
                first_of_shared.setdefault(cfg.shared_dag, cfg)
            for attr in taken:
                taken[attr].add(getattr(cfg, attr))
            found.append(cfg)
        return found, skipped

    @model_validator(mode="after")
    def _unique(self) -> TablesFile:
        for attr in ("name", "topic", "identifier"):
            seen: set[str] = set()
            for t in self.tables:
                value = getattr(t, attr)
                if value in seen:
                    raise ValueError(f"two tables share the {attr} {value!r}")
                seen.add(value)
        group_members(self.tables)
        shared_dags(self.tables)
        return self

    def get(self, name: str) -> TableConfig:
        """The table named ``name``.

        Raises:
            ConfigError: no such table; the message names the file, the configured table nearest
                ``name`` (:func:`~cdclake.model.hints.did_you_mean`) and the configured names (the
                first :data:`NAMES_SHOWN`), e.g. ``no table 'prodcts' in include/tables.yaml; did
                you mean 'products'? configured: products, customers``.
        """
        for t in self.tables:
            if t.name == name:
                return t
        names = [t.name for t in self.tables]
        where = self._origin or "the table config"
        shown = ", ".join(names[:NAMES_SHOWN]) + (
            f" (and {len(names) - NAMES_SHOWN} more)" if len(names) > NAMES_SHOWN else ""
        )
        hint = did_you_mean(name, names)
        raise ConfigError(f"no table {name!r} in {where}{hint}{' ' if hint else '; '}configured: {shown or 'none'}")


def load_tables(path: Path | str, registry: Path | None = None) -> TablesFile:
    """Read and validate a table-config file; with ``registry`` (the discovery registry,
    ``Settings.discovery_registry``), its ``tables`` also hold the tables its ``discover``
    patterns make of the registered topics (:meth:`TablesFile.discovered`; those left out are
    logged). Kafka is never called: the registry is a file.

    Raises:
        ConfigError: the file is missing, is not YAML, or fails validation; the message names
            the file and, for validation errors, each problem on a line of its own
            (:func:`~cdclake.model.config_errors.config_problems`: its line, the table by its name,
            the key, the near key of an unknown one); the registry is not one.
    """
    tables = _load_file(Path(path))
    if registry is None or not tables.discover:
        return tables
    found, skipped = tables.discovered(read_registry(registry))
    for topic, why in skipped.items():
        log.warning("discovered topic %r is left out: %s", topic, why)
    return tables.model_copy(update={"tables": (*tables.tables, *found)})


def _load_file(path: Path) -> TablesFile:
    try:
        text = path.read_text()
        raw = yaml.safe_load(text)
    except FileNotFoundError as e:
        raise ConfigError(f"table config {path} not found") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"table config {path} is not UTF-8 text: {e}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"table config {path} is not valid YAML: {e}") from e
    try:
        tables = TablesFile.model_validate(raw)
    except ValidationError as e:
        problems = config_problems(e, raw, yaml_tree(text), ConfigShape(TablesFile, TableDefaults, TableConfig))
        # from None: each of pydantic's errors is a line of the message, said for a person
        raise ConfigError(f"table config {path} is invalid:\n" + "\n".join(f"  {p}" for p in problems)) from None
    tables._origin = path
    return tables


def _validated_at(model: type[_M], data: Any, *loc: str | int) -> _M:
    """``model.model_validate(data)``, its errors located at ``loc`` (pydantic locates the errors
    of a validation inside a ``before`` validator at the top of the file)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        located = [
            InitErrorDetails(type=err["type"], loc=(*loc, *err["loc"]), input=err["input"], ctx=err.get("ctx", {}))
            for err in e.errors()
        ]
        raise ValidationError.from_exception_data(e.title, located) from e
