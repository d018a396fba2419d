"""spark-submit entry point: apply one run plan of a table to Iceberg.

Usage (the table DAG's ``apply`` task builds this command)::

    spark-submit [--conf ...] spark_jobs/apply_cdc.py --plan JSON [--bootstrap-servers HOST:PORT]

``--plan`` is the :class:`~cdclake.model.plan.RunPlan` the ``schema_sync`` task returned (table
config, offset range, run id, replay); the job does not read the table config file. The job
prints one line ``CDC_APPLY_RESULT <json>`` and exits 0, or raises (non-zero exit) with the reason.
"""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="apply_cdc.py", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--plan", required=True, help="the run plan (RunPlan JSON) from the schema_sync task")
    parser.add_argument("--bootstrap-servers", help="Kafka bootstrap servers (default: settings)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from pyspark.sql import SparkSession

    from cdclake.io.kafka import KafkaClients
    from cdclake.model.plan import RunPlan
    from cdclake.settings import Settings
    from cdclake.spark.apply import apply_range

    settings = Settings.from_env()
    plan = RunPlan.from_json(args.plan)
    kafka = KafkaClients.from_bootstrap(args.bootstrap_servers or settings.kafka_bootstrap)
    spark = SparkSession.builder.appName(f"cdc-apply-{plan.table.name}").getOrCreate()
    try:
        result = apply_range(spark, settings, plan, kafka=kafka)
    finally:
        spark.stop()
    print(f"CDC_APPLY_RESULT {result.to_json()}", flush=True)  # the task reads this line
    return 0


if __name__ == "__main__":
    sys.exit(main())
