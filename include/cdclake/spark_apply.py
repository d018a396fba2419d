"""The apply job: one Kafka offset range of Debezium events -> one Iceberg commit.

Steps (``ARCHITECTURE.md`` sections 3 and 4):

1. Check that the table's committed offsets are the range's start (else another run committed:
   :class:`~cdclake.errors.ConcurrentRunError`; or this range is already applied: nothing to do).
2. Read exactly ``[start, end)`` of each partition with Spark's Kafka source (``assign``,
   ``startingOffsets``/``endingOffsets``, ``failOnDataLoss``).
3. Parse the envelope with ``from_json`` (value with or without the Connect ``schema`` part).
   Kafka tombstones (null values) are skipped and counted. Any record that cannot be applied
   (not JSON, no or unknown ``op``, no binlog position, no row image, a value that does not fit
   its column) fails the run with :class:`~cdclake.errors.BadBatchError` naming topic, partition
   and offset; nothing is committed.
4. Order by binlog position (:mod:`cdclake.position`), keep the latest event per primary key.
5. ``MERGE INTO`` the table: ``c``/``u``/``r`` upsert the after image, ``d`` deletes, and a row is
   replaced only by an event at a strictly greater position than the one that wrote it. The end
   offsets and the run id go into the same commit's snapshot summary
   (``spark.sql.iceberg.snapshot-property.*``).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from cdclake.config import TableConfig
from cdclake.envelope import KafkaCoordinates, parse_value
from cdclake.errors import BadBatchError, BadRecordError, ConcurrentRunError, PositionOrderError, SchemaError
from cdclake.lake import (
    METADATA_COLUMNS,
    SummaryKeys,
    column_encodings,
    committed_offsets,
    create_cdc_table,
    load_catalog,
    load_table_or_none,
)
from cdclake.offsets import OffsetRange, encode_offsets
from cdclake.position import BINLOG_FILE_PATTERN, SNAPSHOT_MARKERS
from cdclake.settings import Settings, spark_jars
from cdclake.types import ColumnSpec, columns_from_config, columns_from_connect

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

_SNAPSHOT_PROPERTY = "spark.sql.iceberg.snapshot-property."
_MAX_REPORTED_BAD = 10


@dataclass(frozen=True)
class ApplyResult:
    """What one apply did.

    Attributes:
        status: ``committed``, ``already_applied`` (the table is at the range's end already) or
            ``empty`` (the range has no records).
        snapshot_id: the Iceberg snapshot committed (``committed`` only).
        events: Kafka records read, tombstones included.
        tombstones: Kafka tombstones (null values) skipped.
        ops: events per Debezium op.
        keys_changed: distinct primary keys in the merge source after reduction.
    """

    status: str
    snapshot_id: int | None = None
    events: int = 0
    tombstones: int = 0
    ops: dict[str, int] | None = None
    keys_changed: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def spark_conf(settings: Settings) -> dict[str, str]:
    """Spark settings every apply job runs with (catalog, UTC session time zone, small shuffles)."""
    conf = dict(settings.spark_catalog_conf())
    conf.update(
        {
            # Debezium's Timestamp/MicroTimestamp are UTC wall-clock values; read them in UTC
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": "8",
            "spark.sql.adaptive.enabled": "true",
            "spark.ui.showConsoleProgress": "false",
        }
    )
    return conf


def build_session(settings: Settings, app_name: str = "cdclake") -> SparkSession:
    """A SparkSession with the project's jars and :func:`spark_conf` (tests, CLI, benchmarks).

    ``spark-submit`` runs (the DAG's apply task) get the same settings from the command line.
    """
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(settings.spark_master)
        .appName(app_name)
        .config("spark.jars", ",".join(str(j) for j in spark_jars()))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
    )
    for key, value in spark_conf(settings).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def read_range(spark: SparkSession, bootstrap: str, offset_range: OffsetRange) -> DataFrame:
    """Exactly the records ``[start, end)`` of each partition, with Spark's Kafka source.

    Columns: ``key`` (binary), ``value`` (binary), ``topic``, ``partition``, ``offset``,
    ``timestamp``. Partitions whose range is empty are not read.
    """
    parts = sorted(p for p in offset_range.end if offset_range.end[p] > offset_range.start[p])
    topic = offset_range.topic
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", json.dumps({topic: parts}))
        .option("startingOffsets", json.dumps({topic: {str(p): offset_range.start[p] for p in parts}}))
        .option("endingOffsets", json.dumps({topic: {str(p): offset_range.end[p] for p in parts}}))
        .option("failOnDataLoss", "true")
        .option("includeHeaders", "true")
        .load()
    )


_JSON_READ_TYPE = {
    "int8": "int", "int16": "int", "int32": "int", "int64": "bigint", "float": "float",
    "float32": "float", "double": "double", "float64": "double", "boolean": "boolean",
    "string": "string", "bytes": "string",
    "io.debezium.time.Date": "int",
    "io.debezium.time.Timestamp": "bigint",
    "io.debezium.time.MicroTimestamp": "bigint",
    "io.debezium.time.ZonedTimestamp": "string",
    "io.debezium.time.Year": "int",
    "io.debezium.data.Enum": "string",
    "io.debezium.data.EnumSet": "string",
    "io.debezium.data.Json": "string",
}
"""Spark type that ``from_json`` reads each encoding as, before :func:`_decode`."""


def _decode(col: Column, encoding: str) -> Column:
    """Turn the JSON-level value of a column into its Iceberg value (see :mod:`cdclake.types`)."""
    from pyspark.sql import functions as F

    if encoding == "bytes":
        return F.unbase64(col)
    if encoding == "io.debezium.time.Date":
        return F.date_from_unix_date(col)
    if encoding == "io.debezium.time.Timestamp":
        return F.timestamp_millis(col).cast("timestamp_ntz")
    if encoding == "io.debezium.time.MicroTimestamp":
        return F.timestamp_micros(col).cast("timestamp_ntz")
    if encoding == "io.debezium.time.ZonedTimestamp":
        return F.to_timestamp(col)
    return col


def _envelope_ddl(columns: list[tuple[str, str]], value_format: str) -> str:
    row = ",".join(f"`{name}`:{typ}" for name, typ in columns)
    envelope = (
        f"struct<before:struct<{row}>,after:struct<{row}>,"
        "source:struct<connector:string,name:string,server_id:bigint,file:string,pos:bigint,"
        "row:int,snapshot:string,ts_ms:bigint,db:string,table:string,gtid:string>,"
        "op:string,ts_ms:bigint>"
    )
    if value_format == "json_with_schema":
        return f"struct<payload:{envelope},_corrupt_record:string>"
    return envelope[: -1] + ",_corrupt_record:string>"


def parse_records(
    raw: DataFrame, value_format: str, columns: list[ColumnSpec], primary_key: tuple[str, ...]
) -> DataFrame:
    """Parse Kafka records into one row per record with its op, position, image and error.

    Output columns: ``partition``, ``offset``, ``timestamp``, ``is_tombstone``, ``op``,
    ``snapshot`` (bool), ``file_base``, ``file_seq``, ``pos``, ``row``, ``server_id``,
    ``source_ts_ms``, ``image`` (struct of the source columns, decoded), ``error`` (null when the
    record can be applied, else the reason).
    """
    from pyspark.sql import functions as F

    ddl = _envelope_ddl([(c.name, _JSON_READ_TYPE[c.encoding]) for c in columns], value_format)
    parsed = F.from_json(
        F.col("value").cast("string"),
        ddl,
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"},
    )
    df = raw.select("topic", "partition", "offset", "timestamp", "value", parsed.alias("j"))
    env = "j.payload" if value_format == "json_with_schema" else "j"
    op = F.col(f"{env}.op")
    src = f"{env}.source"
    image_raw = F.when(op == "d", F.col(f"{env}.before")).otherwise(F.col(f"{env}.after"))
    image = F.struct(*[_decode(image_raw[c.name], c.encoding).alias(c.name) for c in columns])
    file = F.col(f"{src}.file")
    snapshot = (op == "r") | F.col(f"{src}.snapshot").isin(*SNAPSHOT_MARKERS)
    pk_null = F.lit(None).cast("string")
    for col in reversed(primary_key):
        pk_null = F.when(image_raw[col].isNull(), F.lit(f"primary key column {col!r} is null")).otherwise(pk_null)
    error = (
        F.when(F.col("value").isNull(), F.lit(None))
        .when(F.col("j._corrupt_record").isNotNull() & F.col(env).isNull(), F.lit("value is not JSON"))
        .when(
            F.col("j._corrupt_record").isNotNull(),
            F.lit("a value does not fit the table's column types, or the value is malformed"),
        )
        .when(F.col(env).isNull(), F.lit(
            "value has no 'payload' (expected value_format json_with_schema)"
            if value_format == "json_with_schema" else "value is not a JSON object"))
        .when(op.isNull(), F.lit("envelope has no 'op'"))
        .when(~op.isin("c", "u", "d", "r", "t"), F.concat(F.lit("unknown op '"), op, F.lit("'")))
        .when(op == "t", F.lit("op 't' (truncate) is not applied by this version"))
        .when(file.isNull() | F.col(f"{src}.pos").isNull(), F.lit("source has no binlog position (file, pos)"))
        .when(F.regexp_extract(file, BINLOG_FILE_PATTERN, 2) == "", F.lit("source.file has no numeric suffix"))
        .when(op.isin("c", "u", "r") & F.col(f"{env}.after").isNull(), F.concat(F.lit("op '"), op, F.lit("' without an 'after' image")))
        .when((op == "d") & F.col(f"{env}.before").isNull(), F.lit("op 'd' without a 'before' image"))
        .otherwise(pk_null)
    )
    return df.select(
        "partition",
        "offset",
        "timestamp",
        F.col("value").isNull().alias("is_tombstone"),
        op.alias("op"),
        F.coalesce(snapshot, F.lit(False)).alias("snapshot"),
        F.regexp_extract(file, BINLOG_FILE_PATTERN, 1).alias("file_base"),
        F.regexp_extract(file, BINLOG_FILE_PATTERN, 2).cast("bigint").alias("file_seq"),
        F.col(f"{src}.pos").alias("pos"),
        F.coalesce(F.col(f"{src}.row"), F.lit(0)).alias("row"),
        F.col(f"{src}.server_id").alias("server_id"),
        F.col(f"{src}.ts_ms").alias("source_ts_ms"),
        image.alias("image"),
        error.alias("error"),
    )


def reduce_latest(events: DataFrame, primary_key: tuple[str, ...]) -> DataFrame:
    """Keep, per primary key, the event at the greatest position.

    Order: ``(file_seq, pos, row, change rank)``, where a snapshot read ranks below a change at an
    equal position; identical positions (the same event twice) keep either copy.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rank = F.when(F.col("snapshot"), 0).otherwise(1)
    w = Window.partitionBy(*[F.col("image")[c] for c in primary_key]).orderBy(
        F.col("file_seq").desc(), F.col("pos").desc(), F.col("row").desc(), rank.desc(),
        F.col("partition").desc(), F.col("offset").desc(),
    )
    return events.withColumn("_rn", F.row_number().over(w)).filter("_rn = 1").drop("_rn")


def _resolve_table(spark: SparkSession, settings: Settings, cfg: TableConfig, raw: DataFrame):  # noqa: ANN202
    """Load the Iceberg table, creating it on first use from the events' schema or the config."""
    catalog = load_catalog(settings)
    table = load_table_or_none(catalog, cfg.identifier)
    if table is not None:
        return table
    if cfg.columns is not None:
        columns = columns_from_config(cfg.columns, cfg.primary_key)
    elif cfg.value_format == "json_with_schema":
        columns = _columns_from_first_schema(raw, cfg)
    else:
        raise SchemaError(
            f"table {cfg.identifier} does not exist and its events carry no schema "
            "(value_format json): declare its 'columns' in the table config"
        )
    return create_cdc_table(catalog, cfg.identifier, columns, cfg.primary_key)


def _columns_from_first_schema(raw: DataFrame, cfg: TableConfig) -> list[ColumnSpec]:
    for rec in raw.filter("value is not null").select("partition", "offset", "value").limit(100).collect():
        try:
            event = parse_value(bytes(rec["value"]), cfg.value_format, KafkaCoordinates(cfg.topic, rec["partition"], rec["offset"]))
        except BadRecordError:
            continue
        row_schema = event.row_schema() if event else None
        if row_schema:
            return columns_from_connect(row_schema)
    raise SchemaError(
        f"table {cfg.identifier} does not exist and no event of topic {cfg.topic!r} in this range "
        "carries a row schema to create it from"
    )


def _source_columns(table) -> list[ColumnSpec]:  # noqa: ANN001 - pyiceberg Table
    meta = {name for name, _, _ in METADATA_COLUMNS}
    encodings = column_encodings(table)
    specs = []
    for field in table.schema().fields:
        if field.name in meta:
            continue
        encoding = encodings.get(field.name)
        if encoding is None:
            raise SchemaError(f"table {table.name()}: column {field.name!r} has no recorded encoding")
        specs.append(ColumnSpec(field.name, str(field.field_type), field.required, encoding))
    return specs


def _describe_bad_record(value: bytes | None, cfg: TableConfig, columns: list[ColumnSpec], where: KafkaCoordinates, spark_reason: str) -> str:
    """A precise reason for a record Spark flagged, found by re-parsing it in Python."""
    try:
        parse_value(value, cfg.value_format, where)
    except BadRecordError as e:
        return e.reason
    doc = json.loads(value)  # parse_value accepted it, so this is JSON
    envelope = doc.get("payload", doc) if cfg.value_format == "json_with_schema" else doc
    image = envelope.get("before") if envelope.get("op") == "d" else envelope.get("after")
    for col in columns:
        v = (image or {}).get(col.name)
        if v is None:
            continue
        expected = _JSON_READ_TYPE[col.encoding]
        ok = {
            "int": isinstance(v, int) and not isinstance(v, bool) and -2**31 <= v < 2**31,
            "bigint": isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63,
            "float": isinstance(v, (int, float)) and not isinstance(v, bool),
            "double": isinstance(v, (int, float)) and not isinstance(v, bool),
            "boolean": isinstance(v, bool),
            "string": True,
        }[expected]
        if not ok:
            return f"column {col.name!r}: value {v!r} does not fit {col.iceberg_type} (encoding {col.encoding})"
    return spark_reason


def apply_range(
    spark: SparkSession,
    settings: Settings,
    cfg: TableConfig,
    offset_range: OffsetRange,
    run_id: str,
) -> ApplyResult:
    """Apply one offset range to the table in one Iceberg commit (see the module docstring).

    Raises:
        ConcurrentRunError: the table's committed offsets are neither the range's start nor its
            end.
        BadBatchError: records that cannot be applied (nothing committed).
        PositionOrderError: the batch mixes binlog basenames or source servers.
        SchemaError: the table cannot be created from, or does not fit, the events.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    if offset_range.is_empty:
        return ApplyResult("empty")
    catalog = load_catalog(settings)
    existing = load_table_or_none(catalog, cfg.identifier)
    if existing is not None:
        committed = committed_offsets(existing, cfg.topic)
        if committed is not None and committed != offset_range.start:
            if committed == offset_range.end:
                return ApplyResult("already_applied", events=offset_range.event_count)
            raise ConcurrentRunError(
                f"table {cfg.identifier}: committed offsets {encode_offsets(committed)} are not "
                f"this run's start {encode_offsets(offset_range.start)}; another run committed "
                "in between. Nothing was committed; the next run plans from the table's offsets."
            )

    raw = read_range(spark, settings.kafka_bootstrap, offset_range).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        table = _resolve_table(spark, settings, cfg, raw)
        columns = _source_columns(table)
        parsed = parse_records(raw, cfg.value_format, columns, cfg.primary_key).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        stats = parsed.agg(
            F.count(F.lit(1)).alias("events"),
            F.sum(F.col("is_tombstone").cast("int")).alias("tombstones"),
            F.sum(F.col("error").isNotNull().cast("int")).alias("bad"),
            F.countDistinct("file_base").alias("basenames"),
            # snapshot reads carry server_id 0: only changes name the server that wrote them
            F.countDistinct(F.when(F.col("server_id") != 0, F.col("server_id"))).alias("servers"),
            F.min(F.struct("file_seq", "pos", "row")).alias("first"),
            F.max(F.struct("file_seq", "pos", "row")).alias("last"),
        ).collect()[0]
        if stats["bad"]:
            bad_rows = (
                parsed.filter("error is not null").orderBy("partition", "offset")
                .select("partition", "offset", "error").limit(_MAX_REPORTED_BAD).collect()
            )
            values = {
                (r["partition"], r["offset"]): r["value"]
                for r in raw.join(
                    spark.createDataFrame([(b["partition"], b["offset"]) for b in bad_rows], "partition int, offset long"),
                    ["partition", "offset"],
                ).select("partition", "offset", "value").collect()
            }
            reported = []
            for b in bad_rows:
                where = KafkaCoordinates(cfg.topic, b["partition"], b["offset"])
                value = values.get((b["partition"], b["offset"]))
                reason = _describe_bad_record(
                    bytes(value) if value is not None else None, cfg, columns, where, b["error"]
                )
                reported.append((cfg.topic, b["partition"], b["offset"], reason))
            raise BadBatchError(reported, stats["bad"])
        if stats["basenames"] > 1 or stats["servers"] > 1:
            found = (
                parsed.filter("not is_tombstone and (server_id <> 0 or snapshot)")
                .select("file_base", "server_id").distinct().collect()
            )
            raise PositionOrderError(
                f"topic {cfg.topic!r}: the range mixes binlog sources "
                f"{sorted((r['file_base'], r['server_id']) for r in found)}; positions of different "
                "binlogs are not comparable (failover?). Re-snapshot the table after a failover."
            )
        ops = {r["op"]: r["count"] for r in parsed.filter("not is_tombstone").groupBy("op").count().collect()}
        events = parsed.filter("not is_tombstone")
        reduced = reduce_latest(events, cfg.primary_key)
        source = reduced.select(
            *[F.col("image")[c.name].alias(c.name) for c in columns],
            F.col("op").alias("_cdc_op"),
            F.col("snapshot").alias("_cdc_snapshot"),
            F.col("file_seq").alias("_cdc_binlog_file_seq"),
            F.col("pos").alias("_cdc_binlog_pos"),
            F.col("row").alias("_cdc_binlog_row"),
            # Debezium 1.x snapshot reads carry ts_ms 0: unknown, not 1970
            F.when(F.col("source_ts_ms") > 0, F.timestamp_millis("source_ts_ms")).alias("_cdc_source_ts"),
            F.col("partition").alias("_cdc_kafka_partition"),
            F.col("offset").alias("_cdc_kafka_offset"),
        )
        keys_changed = source.count()
        properties = {
            SummaryKeys.TOPIC: cfg.topic,
            SummaryKeys.START_OFFSETS: encode_offsets(offset_range.start),
            SummaryKeys.END_OFFSETS: encode_offsets(offset_range.end),
            SummaryKeys.RUN_ID: run_id,
            SummaryKeys.EVENTS: str(stats["events"]),
            SummaryKeys.TOMBSTONES: str(stats["tombstones"] or 0),
            SummaryKeys.UPSERTS: str(sum(v for k, v in ops.items() if k != "d")),
            SummaryKeys.DELETES: str(ops.get("d", 0)),
        }
        if stats["first"] is not None and stats["first"]["file_seq"] is not None:
            properties[SummaryKeys.FIRST_POSITION] = "{}:{}:{}".format(*stats["first"])
            properties[SummaryKeys.LAST_POSITION] = "{}:{}:{}".format(*stats["last"])
        snapshot_id = _merge(spark, settings, cfg, table, columns, source, properties)
        return ApplyResult(
            "committed",
            snapshot_id=snapshot_id,
            events=stats["events"],
            tombstones=stats["tombstones"] or 0,
            ops=ops,
            keys_changed=keys_changed,
        )
    finally:
        raw.unpersist()


def _merge(
    spark: SparkSession,
    settings: Settings,
    cfg: TableConfig,
    table: Any,
    columns: list[ColumnSpec],
    source: DataFrame,
    properties: dict[str, str],
) -> int:
    """``MERGE INTO`` with the snapshot-summary properties; returns the new snapshot id.

    A batch whose events reduce to no change (only tombstones) still commits, so that its end
    offsets are recorded: an empty append snapshot carrying the properties.
    """
    target = f"{settings.catalog_name}.{cfg.identifier}"
    view = f"cdc_batch_{uuid.uuid4().hex}"
    source.createOrReplaceTempView(view)
    all_cols = [c.name for c in columns] + [name for name, _, _ in METADATA_COLUMNS]
    q = lambda name: f"`{name}`"  # noqa: E731
    on = " AND ".join(f"t.{q(c)} = s.{q(c)}" for c in cfg.primary_key)

    def pos(alias: str) -> str:
        rank = f"CASE WHEN {alias}._cdc_snapshot THEN 0 ELSE 1 END"
        return (
            f"named_struct('f', coalesce({alias}._cdc_binlog_file_seq, -1), "
            f"'p', coalesce({alias}._cdc_binlog_pos, -1), 'r', coalesce({alias}._cdc_binlog_row, -1), "
            f"'k', {rank})"
        )

    newer = f"{pos('s')} > {pos('t')}"
    sql = f"""
        MERGE INTO {target} t
        USING {view} s
        ON {on}
        WHEN MATCHED AND s._cdc_op = 'd' AND {newer} THEN DELETE
        WHEN MATCHED AND s._cdc_op <> 'd' AND {newer} THEN
          UPDATE SET {", ".join(f"t.{q(c)} = s.{q(c)}" for c in all_cols)}
        WHEN NOT MATCHED AND s._cdc_op <> 'd' THEN
          INSERT ({", ".join(q(c) for c in all_cols)}) VALUES ({", ".join(f"s.{q(c)}" for c in all_cols)})
    """
    before = table.current_snapshot()
    before_id = before.snapshot_id if before else None
    for key, value in properties.items():
        spark.conf.set(_SNAPSHOT_PROPERTY + key, value)
    try:
        spark.sql(sql)
    finally:
        for key in properties:
            spark.conf.unset(_SNAPSHOT_PROPERTY + key)
        spark.catalog.dropTempView(view)
    table = table.refresh()
    after = table.current_snapshot()
    if after is not None and after.snapshot_id != before_id:
        if after.summary.get(SummaryKeys.END_OFFSETS) != properties[SummaryKeys.END_OFFSETS]:
            raise ConcurrentRunError(
                f"table {cfg.identifier}: the newest snapshot {after.snapshot_id} is not this "
                "run's commit; another writer committed concurrently"
            )
        return after.snapshot_id
    # Nothing changed in the data: record the offsets in an empty snapshot of their own.
    import pyarrow as pa

    empty = pa.Table.from_pylist([], schema=table.schema().as_arrow())
    table.append(empty, snapshot_properties=properties)
    return table.refresh().current_snapshot().snapshot_id
