"""spark-submit entry point of the benchmark's Spark stages (``bench/run.py`` builds the command
with ``bench/harness.py``'s ``spark_submit``, the way the table DAG's ``apply`` task does: same
jars, ``--conf`` settings and driver memory).

Stages, on one Kafka offset range of the workload topic:

* ``read_parse``: read the range with Spark's Kafka source and parse every event
  (:func:`cdclake.spark.read.read_range`, :func:`cdclake.spark.parse.parse_records`); a hash
  over every parsed column is summed so that no column can be pruned away. The floor.
* ``append``: the same, then append every parsed event (unreduced) to an Iceberg table. The floor
  of any write. Only Kafka tombstones (null values) are left out, before parsing: a filter on the
  parsed ``error`` would be pushed below the parse and evaluate ``from_json`` once per reference
  (measured at 1,000,000 events: the append took 285 s, five times the read+parse), which no
  floor should pay.
* ``apply``: the apply job itself (:func:`cdclake.spark.apply.apply_range`, as
  ``spark_jobs/apply_cdc.py`` calls it) into ``--table``; with ``--transactions RANGE`` (a
  :class:`~cdclake.model.plan.TransactionRange` JSON) as ``transactions: whole`` plans it, each
  commit cut to whole source transactions, else as ``transactions: ignore``; with
  ``--change-feed`` the table has ``change_feed: {}`` (the run's change rows go to
  ``<table>__changes`` first) and with ``--history`` ``history: {}`` (its versions go to
  ``<table>__history``), else neither. The run id is ``bench-<table>``.

Each reads ``json_with_schema`` values, or with ``--format avro`` Avro through the schema
registry of ``CDCLAKE_SCHEMA_REGISTRY_URL`` (the read stages then parse as the apply does: the
writer schemas, :func:`cdclake.spark.writer_schemas.writer_schemas_for`, and
:func:`cdclake.spark.parse_avro.parse_avro_records`), or with ``--format flattened``
``json_with_schema`` values flattened by Debezium's ``ExtractNewRecordState`` transform (the table
config's ``flattened: {}``: prefix ``__``, rewritten deletes; the read stages parse with
:func:`cdclake.spark.parse.parse_records`' ``flattened``). ``--then STAGE FORMAT RANGE TABLE`` (repeated)
runs more stages afterwards in the same process, in order (the tiny size's way: one JVM start for
every stage). ``--count-after TABLE`` (repeated) counts a table's rows after the last stage (not
timed).

Prints one line ``BENCH_STAGE_RESULT <json>``: ``session_s`` (SparkSession start), ``stages`` (per
stage in order: ``job_s``, the stage's work, and what it counted) and ``rows_after`` (table ->
rows).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

STAGES = ("read_parse", "append", "apply")
FORMATS = ("json_with_schema", "avro", "flattened")
FLATTENED = "flattened"
"""The ``--format`` of flattened records: ``json_with_schema`` values and ``flattened: {}``."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spark_stage.py", description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=STAGES)
    parser.add_argument("--range", required=True, help="OffsetRange JSON")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--table", required=True, help="Iceberg table (append target or apply target)")
    parser.add_argument("--format", choices=FORMATS, default="json_with_schema")
    parser.add_argument(
        "--then",
        nargs=4,
        action="append",
        default=[],
        metavar=("STAGE", "FORMAT", "RANGE", "TABLE"),
        help="then this stage in this process (repeatable; run in order)",
    )
    parser.add_argument(
        "--transactions",
        help="TransactionRange JSON: the apply commits whole source transactions (transactions: whole)",
    )
    parser.add_argument(
        "--change-feed", action="store_true", help="the apply writes the table's change feed (change_feed: {})"
    )
    parser.add_argument("--history", action="store_true", help="the apply writes the table's history (history: {})")
    parser.add_argument(
        "--count-after", action="append", default=[], metavar="TABLE", help="count TABLE's rows afterwards (not timed)"
    )
    args = parser.parse_args(argv)
    for stage, value_format, _, _ in args.then:
        if stage not in STAGES or value_format not in FORMATS:
            parser.error(f"--then {stage} {value_format}: a stage of {STAGES} and a format of {FORMATS}")

    t0 = time.monotonic()
    from pyspark.sql import SparkSession

    from cdclake.io.kafka import KafkaClients
    from cdclake.settings import Settings

    settings = Settings.from_env()
    kafka = KafkaClients.from_settings(settings)  # with the schema registry of CDCLAKE_SCHEMA_REGISTRY_URL
    spark = SparkSession.builder.getOrCreate()  # name and settings from spark-submit
    out: dict = {"session_s": time.monotonic() - t0, "stages": [], "rows_after": {}}
    try:
        for stage, value_format, range_json, table in [
            (args.stage, args.format, args.range, args.table),
            *args.then,
        ]:
            out["stages"].append(
                run_stage(
                    spark,
                    settings,
                    kafka,
                    stage,
                    value_format,
                    range_json,
                    args.namespace,
                    table,
                    args.transactions,
                    change_feed=args.change_feed,
                    history=args.history,
                )
            )
        for table in args.count_after:
            out["rows_after"][table] = spark.table(f"{settings.catalog_name}.{args.namespace}.{table}").count()
    finally:
        spark.stop()
    print("BENCH_STAGE_RESULT " + json.dumps(out), flush=True)
    return 0


def run_stage(
    spark: Any,
    settings: Any,
    kafka: Any,
    stage: str,
    value_format: str,
    range_json: str,
    namespace: str,
    table: str,
    transactions: str | None = None,
    *,
    change_feed: bool = False,
    history: bool = False,
) -> dict[str, Any]:
    """One stage on the range ``range_json`` of events in ``value_format`` (``transactions``: the
    apply's transaction range; ``change_feed``, ``history``: the table's options; see the module
    docstring); returns ``stage``,
    ``job_s`` (its seconds) and what it counted; an Avro read (``read_parse``, ``append``) also
    ``prepass_s``, the seconds of finding its writer schemas as the apply does
    (:func:`~cdclake.spark.writer_schemas.writer_schemas_for`: the registry's newest versions of the
    topic's subject, or a schema-id pass over the range), which ``job_s`` includes."""
    from pyspark.sql import functions as F

    from cdclake.io.catalog import load_catalog
    from cdclake.io.schema_evolution import source_columns
    from cdclake.model.config import TableConfig
    from cdclake.model.layout import METADATA_COLUMNS
    from cdclake.model.offsets import OffsetRange
    from cdclake.model.plan import RunPlan, TransactionRange
    from cdclake.spark.apply import apply_range
    from cdclake.spark.parse import parse_records
    from cdclake.spark.parse_avro import parse_avro_records
    from cdclake.spark.read import read_range
    from cdclake.spark.writer_schemas import writer_schemas_for

    offset_range = OffsetRange.from_json(range_json)
    flattened = value_format == FLATTENED
    cfg = TableConfig.model_validate(
        {
            "name": table.lower(),
            "topic": offset_range.topic,
            "namespace": namespace,
            "table": table,
            "primary_key": ["id"],
            "value_format": "json_with_schema" if flattened else value_format,
            "flattened": {} if flattened else None,
            "transactions": "ignore" if transactions is None else "whole",
            "change_feed": {} if change_feed else None,
            "history": {} if history else None,
        }
    )
    out: dict[str, Any] = {"stage": stage, "format": value_format}
    t1 = time.monotonic()
    if stage == "apply":
        whole = None if transactions is None else TransactionRange.model_validate_json(transactions)
        plan = RunPlan(table=cfg, run_id=f"bench-{table}", range=offset_range, transactions=whole)
        # the apply alone, not cdclake.runner.apply_plan: the session is the driver's, timed
        # apart (session_s), and job_s times every stage the same way
        out.update(result=json.loads(apply_range(spark, settings, plan, kafka=kafka).to_json()))
        out["job_s"] = time.monotonic() - t1
        return out
    columns = list(source_columns(load_catalog(settings).load_table(cfg.identifier)))
    raw = read_range(spark, kafka, offset_range)
    if stage == "append":
        raw = raw.filter("value is not null")

    def parse(raw: Any) -> Any:
        if value_format != "avro":
            return parse_records(raw, cfg.value_format, columns, cfg.primary_key, flattened=cfg.flattened)
        t2 = time.monotonic()
        writers = writer_schemas_for(cfg, kafka, raw)
        assert writers is not None  # an avro table with the registry
        out["prepass_s"] = time.monotonic() - t2
        return parse_avro_records(raw, writers.schemas, columns, cfg.primary_key, unusable=writers.unusable)

    parsed = parse(raw)
    if stage == "read_parse":
        row = (
            parsed.select(F.xxhash64(*parsed.columns).alias("h"))
            .agg(F.count(F.lit(1)).alias("n"), F.bit_xor("h").alias("h"))
            .collect()[0]
        )
        out.update(events=row["n"], checksum=row["h"])
    else:
        parsed.select(
            *[F.col("image")[c.name].alias(c.name) for c in columns], *[m for m, _, _ in METADATA_COLUMNS]
        ).writeTo(f"{settings.catalog_name}.{cfg.identifier}").append()
    out["job_s"] = time.monotonic() - t1
    return out


if __name__ == "__main__":
    sys.exit(main())
