"""The apply context: one try's Spark session and Kafka clients, its inputs read once at its
start (:class:`~cdclake.io.run_inputs.RunInputs`: the plan, the table, its committed state and
columns) and the range's Kafka records, handed to each step."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from cdclake.errors import BadRecordError, ConcurrentRunError, SchemaError
from cdclake.io.catalog import create_cdc_table, load_table_or_none
from cdclake.io.kafka import KafkaClients, read_partition
from cdclake.io.refs import head_snapshot
from cdclake.io.run_inputs import RunInputs
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
    """One apply try: its session and clients, and what it read at its start.

    Attributes:
        spark: the run's Spark session.
        settings: where the catalog is.
        kafka: the Kafka clients (Spark source options come from them).
        inputs: the plan, catalog, table, committed state and columns (:func:`~cdclake.io.run_inputs.read_run_inputs`).
        records: the range's Kafka records (:func:`~cdclake.spark.read.read_range`; not cached: read
            again by each Spark job over them); ``None`` in a context made outside a run.
    """

    spark: SparkSession
    settings: Settings
    kafka: KafkaClients
    inputs: RunInputs
    records: DataFrame | None = None
    _values: dict[tuple[int, int], bytes | None] = field(default_factory=dict, repr=False, compare=False)
    """Record values read again from Kafka, by ``(partition, offset)``: the few records that the
    connector-mode check and schema evolution both read (:meth:`record_value`)."""

    @property
    def plan(self) -> RunPlan:
        """The run plan (:attr:`RunInputs.plan`): a range cut to whole source transactions is a
        context made by :meth:`with_plan`."""
        return self.inputs.plan

    @property
    def cfg(self) -> TableConfig:
        return self.inputs.plan.table

    @property
    def catalog(self) -> Catalog:
        return self.inputs.catalog

    @property
    def table(self) -> Table:
        return self.inputs.table

    @property
    def state(self) -> CommittedState:
        return self.inputs.state

    @property
    def columns(self) -> tuple[ColumnSpec, ...]:
        return self.inputs.columns

    @property
    def raw(self) -> DataFrame:
        """:attr:`records`, in a context made by a run.

        Raises:
            AssertionError: the context holds no records (made outside a run).
        """
        if self.records is None:
            raise AssertionError(f"table {self.cfg.identifier}: this apply context holds no Kafka records")
        return self.records

    def with_plan(self, plan: RunPlan) -> ApplyContext:
        """This context with ``plan`` (the range cut to whole source transactions or before a
        barrier: :mod:`cdclake.spark.transactions`)."""
        return replace(self, inputs=replace(self.inputs, plan=plan))

    def with_table(self, table: Table, columns: tuple[ColumnSpec, ...]) -> ApplyContext:
        """This context with the table evolved to ``columns`` (:func:`cdclake.spark.evolve.evolve_table`)."""
        return replace(self, inputs=replace(self.inputs, table=table, columns=columns))

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


def create_table(catalog: Catalog, cfg: TableConfig, raw: DataFrame, *, schema_lookup: SchemaLookup | None) -> None:
    """Create the Iceberg table of a first run from the events' schema (``raw``: the range's
    Kafka records; ``schema_lookup``: the writer schemas of ``avro`` events,
    :attr:`KafkaClients.schema_lookup`) or the config's ``columns``; a table that a first run racing
    this one created meanwhile is left as it is.

    Raises:
        SchemaError: neither the config (``columns``) nor an event of the range (a Connect schema)
            says what the table's columns are.
    """
    from pyiceberg.exceptions import TableAlreadyExistsError

    if cfg.columns is None and cfg.value_format in ("json_with_schema", "avro"):
        columns = _columns_from_first_schema(raw, cfg, schema_lookup)
    elif cfg.columns is not None:
        columns = columns_from_config(cfg.columns, cfg.primary_key)
    else:
        raise SchemaError(
            f"table {cfg.identifier} does not exist and its events carry no schema "
            "(value_format json): declare its 'columns' in the table config"
        )
    if cfg.write_mode == "changelog":
        # a change log row may be a delete's before image or a truncate: no column is required
        columns = [ColumnSpec(c.name, c.iceberg_type, False, c.encoding) for c in columns]
    try:
        create_cdc_table(
            catalog,
            cfg.identifier,
            columns,
            cfg.primary_key,
            ordering=cfg.ordering,
            format_version=cfg.format_version,
        )
    except TableAlreadyExistsError:
        pass


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
