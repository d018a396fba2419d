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
  ``spark_jobs/apply_cdc.py`` calls it) into ``--table``.

Prints one line ``BENCH_STAGE_RESULT <json>``: ``session_s`` (SparkSession start), ``job_s``
(the stage's work) and what it counted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spark_stage.py", description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=["read_parse", "append", "apply"])
    parser.add_argument("--range", required=True, help="OffsetRange JSON")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--table", required=True, help="Iceberg table (append target or apply target)")
    parser.add_argument(
        "--count-after", action="store_true", help="apply: count the table's rows afterwards (not timed)"
    )
    args = parser.parse_args(argv)

    t0 = time.monotonic()
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from cdclake.io.catalog import load_catalog
    from cdclake.io.kafka import KafkaClients
    from cdclake.model.config import TableConfig
    from cdclake.model.layout import METADATA_COLUMNS
    from cdclake.model.offsets import OffsetRange
    from cdclake.model.plan import RunPlan
    from cdclake.settings import Settings
    from cdclake.spark.apply import apply_range
    from cdclake.spark.context import source_columns
    from cdclake.spark.parse import parse_records
    from cdclake.spark.read import read_range

    settings = Settings.from_env()
    kafka = KafkaClients.from_bootstrap(settings.kafka_bootstrap)
    offset_range = OffsetRange.from_json(args.range)
    cfg = TableConfig.model_validate(
        {
            "name": args.table.lower(),
            "topic": offset_range.topic,
            "namespace": args.namespace,
            "table": args.table,
            "primary_key": ["id"],
            "value_format": "json_with_schema",
        }
    )
    spark = SparkSession.builder.getOrCreate()  # name and settings from spark-submit
    session_s = time.monotonic() - t0
    out: dict = {"stage": args.stage, "session_s": session_s}
    try:
        t1 = time.monotonic()
        if args.stage == "apply":
            plan = RunPlan(table=cfg, run_id=f"bench-{args.table}", range=offset_range)
            # the apply alone, not cdclake.runner.apply_plan: the session is the driver's, timed
            # apart (session_s), and job_s times every stage the same way
            result = apply_range(spark, settings, plan, kafka=kafka)
            out.update(result=json.loads(result.to_json()))
        else:
            columns = list(source_columns(load_catalog(settings).load_table(cfg.identifier)))
            raw = read_range(spark, kafka, offset_range)
            if args.stage == "read_parse":
                parsed = parse_records(raw, cfg.value_format, columns, cfg.primary_key)
                row = (
                    parsed.select(F.xxhash64(*parsed.columns).alias("h"))
                    .agg(F.count(F.lit(1)).alias("n"), F.bit_xor("h").alias("h"))
                    .collect()[0]
                )
                out.update(events=row["n"], checksum=row["h"])
            else:
                parsed = parse_records(raw.filter("value is not null"), cfg.value_format, columns, cfg.primary_key)
                parsed.select(
                    *[F.col("image")[c.name].alias(c.name) for c in columns], *[m for m, _, _ in METADATA_COLUMNS]
                ).writeTo(f"{settings.catalog_name}.{cfg.identifier}").append()
        out["job_s"] = time.monotonic() - t1
        if args.count_after:
            out["rows_after"] = spark.table(f"{settings.catalog_name}.{cfg.identifier}").count()
    finally:
        spark.stop()
    print("BENCH_STAGE_RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
