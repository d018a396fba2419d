"""spark-submit entry point: apply one planned Kafka offset range of a table to Iceberg.

Usage (the table DAG's ``apply`` task builds this command)::

    spark-submit [--conf ...] spark_jobs/apply_cdc.py --table NAME --plan JSON --run-id ID \
        [--bootstrap-servers HOST:PORT]

``--plan`` is the plan task's output ``{"range": <OffsetRange JSON>, "replay": <bool>}``. The job prints one line
``CDC_APPLY_RESULT <json>`` and exits 0, or raises (non-zero exit) with the reason.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="apply_cdc.py", description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="table name in the table config")
    parser.add_argument("--plan", required=True, help='{"range": <OffsetRange>, "replay": bool} from the plan task')
    parser.add_argument("--run-id", required=True, help="Airflow run id, recorded in the commit")
    parser.add_argument("--bootstrap-servers", help="Kafka bootstrap servers (default: settings)")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    from cdclake.config import load_tables
    from cdclake.offsets import OffsetRange
    from cdclake.settings import Settings
    from cdclake.spark_apply import apply_range

    settings = Settings.from_env()
    if args.bootstrap_servers:
        settings = settings.model_copy(update={"kafka_bootstrap": args.bootstrap_servers})
    cfg = load_tables(settings.tables_config).get(args.table)
    import json

    plan = json.loads(args.plan)
    offset_range = OffsetRange.model_validate(plan["range"])
    spark = SparkSession.builder.appName(f"cdc-apply-{cfg.name}").getOrCreate()
    try:
        result = apply_range(spark, settings, cfg, offset_range, args.run_id, replay=bool(plan.get("replay")))
    finally:
        spark.stop()
    print(f"CDC_APPLY_RESULT {result.to_json()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
