"""The apply context: everything one apply run needs, resolved once (table config, catalog,
Iceberg table, committed state, source columns, Kafka clients) and handed to each step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cdclake.errors import BadRecordError, ConcurrentRunError, SchemaError
from cdclake.io.catalog import create_cdc_table, load_table_or_none
from cdclake.io.kafka import KafkaClients, read_partition
from cdclake.io.refs import head_snapshot
from cdclake.io.schema_evolution import source_schema
from cdclake.io.side_tables import ensure_side_table
from cdclake.model.avro import SchemaLookup
from cdclake.model.config import TableConfig
from cdclake.model.envelope import KafkaCoordinates, parse_table_value
from cdclake.model.layout import side_table
from cdclake.model.plan import RunPlan
from cdclake.model.run_state import CommittedState
from cdclake.model.types import ColumnSpec, columns_from_config, columns_from_connect
from cdclake.settings import Settings
from cdclake.spark.names import quote_identifier

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class ApplyContext:
    """One apply run's resolved inputs.

    Attributes:
        spark: the run's Spark session.
        settings: where the catalog is.
        kafka: the Kafka clients (Spark source options come from them).
        plan: the run plan (table config, range, run id, replay).
        catalog: the pyiceberg catalog, loaded once.
        table: the Iceberg table (created on first use), as loaded at the start of the run.
        state: what the table's newest CDC commit recorded, read at the start of the run.
        columns: the table's source columns with their encodings, in order.
    """

    spark: SparkSession
    settings: Settings
    kafka: KafkaClients
    plan: RunPlan
    catalog: Catalog
    table: Table
    state: CommittedState
    columns: tuple[ColumnSpec, ...]
    _values: dict[tuple[int, int], bytes | None] = field(default_factory=dict, repr=False, compare=False)
    """Record values read again from Kafka, by ``(partition, offset)``: the few records that the
    connector-mode check and schema evolution both read (:meth:`record_value`)."""

    @property
    def cfg(self) -> TableConfig:
        return self.plan.table

    def spark_name(self, suffix: str = "") -> str:
        """The Spark SQL name of the table (or its side table ``suffix``), each part quoted
        (:func:`~cdclake.spark.names.quote_identifier`): ``<catalog>.<ns>.<table><suffix>``."""
        return quote_identifier(self.settings.catalog_name, *side_table(self.cfg.identifier, suffix).split("."))

    def check_at_base(self) -> None:
        """Check that the table is still at the run's base snapshot, before a commit to a table
        beside it (the change feed, the history) that the table's own commit follows.

        Raises:
            ConcurrentRunError: another run committed since this run read the table.
        """
        base = self.state.snapshot_id
        current = head_snapshot(self.table.refresh())
        if (current.snapshot_id if current is not None else None) != base:
            raise ConcurrentRunError(
                f"table {self.cfg.identifier}: another run committed since this run read snapshot {base}; nothing "
                "was committed. The next run plans from the table's offsets."
            )

    def record_value(self, partition: int, offset: int) -> bytes | None:
        """The value of the record at ``partition``/``offset`` of the table's topic, read again
        from Kafka (the parse cache keeps no values); ``None`` for a tombstone or a record no
        longer there."""
        key = (partition, offset)
        if key not in self._values:
            records = read_partition(
                self.kafka, self.cfg.topic, partition, offset, offset + 1, group_id="cdclake-record"
            )
            self._values[key] = next((m.value() for m in records), None)
        return self._values[key]

    def row_schema(self, partition: int, offset: int) -> dict[str, Any] | None:
        """The Connect row schema of the record at ``partition``/``offset`` (``json_with_schema``:
        the value's Connect schema; ``avro``: the writer schema read as one), or ``None`` for a
        tombstone, a record without one (``json``) or a bad record."""
        where = KafkaCoordinates(self.cfg.topic, partition, offset)
        try:
            event = parse_table_value(self.cfg, self.record_value(partition, offset), where, self.kafka.schema_lookup)
        except BadRecordError:
            return None
        return event.row_schema() if event is not None else None

    def side_table(
        self, suffix: str, columns: list[tuple[str, str, bool]] | None = None, docs: dict[str, str] | None = None
    ) -> Table | None:
        """The side table ``<table><suffix>``; created with ``columns`` when given, else ``None``
        while it does not exist."""
        identifier = side_table(self.cfg.identifier, suffix)
        if columns is None:
            return load_table_or_none(self.catalog, identifier)
        return ensure_side_table(self.catalog, identifier, columns, docs)


def source_columns(table: Table) -> tuple[ColumnSpec, ...]:
    """The table's source columns with their recorded encodings.

    Raises:
        SchemaError: a column has no recorded encoding (the table was not created by cdclake).
    """
    columns = source_schema(table).columns
    missing = [c.name for c in columns if not c.encoding]
    if missing:
        raise SchemaError(f"table {table.name()}: column(s) {missing} have no recorded encoding")
    return columns


def resolve_table(catalog: Catalog, cfg: TableConfig, raw: DataFrame, *, schema_lookup: SchemaLookup | None) -> Table:
    """Load the Iceberg table, creating it on first use from the events' schema or the config
    (``schema_lookup``: the writer schemas of ``avro`` events, :attr:`KafkaClients.schema_lookup`).

    Raises:
        SchemaError: the table does not exist and neither the config (``columns``) nor an event
            of the range (a Connect schema) says what its columns are.
    """
    from pyiceberg.exceptions import TableAlreadyExistsError

    table = load_table_or_none(catalog, cfg.identifier)
    if table is not None:
        return table
    if cfg.columns is not None:
        columns = columns_from_config(cfg.columns, cfg.primary_key)
    elif cfg.value_format in ("json_with_schema", "avro"):
        columns = _columns_from_first_schema(raw, cfg, schema_lookup)
    else:
        raise SchemaError(
            f"table {cfg.identifier} does not exist and its events carry no schema "
            "(value_format json): declare its 'columns' in the table config"
        )
    if cfg.write_mode == "changelog":
        # a change log row may be a delete's before image or a truncate: no column is required
        columns = [ColumnSpec(c.name, c.iceberg_type, False, c.encoding) for c in columns]
    try:
        return create_cdc_table(
            catalog,
            cfg.identifier,
            columns,
            cfg.primary_key,
            ordering=cfg.ordering,
            format_version=cfg.format_version,
        )
    except TableAlreadyExistsError:
        return catalog.load_table(cfg.identifier)


def _columns_from_first_schema(
    raw: DataFrame, cfg: TableConfig, schema_lookup: SchemaLookup | None
) -> list[ColumnSpec]:
    rows = raw.filter("value is not null").select("partition", "offset", "value").limit(100).collect()
    first_bad: BadRecordError | None = None
    for rec in rows:
        where = KafkaCoordinates(cfg.topic, rec["partition"], rec["offset"])
        try:
            event = parse_table_value(cfg, bytes(rec["value"]), where, schema_lookup)
        except BadRecordError as e:
            first_bad = first_bad or e
            continue
        row_schema = event.row_schema() if event else None
        if row_schema:
            return columns_from_connect(row_schema)
    raise SchemaError(
        f"table {cfg.identifier} does not exist and no event of topic {cfg.topic!r} in this range "
        "carries a row schema to create it from" + (f"; the first bad record: {first_bad}" if first_bad else "")
    )
