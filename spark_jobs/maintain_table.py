"""spark-submit entry point: maintain one table (the ``cdc_maintenance`` DAG's ``submit`` engine).

Usage (the DAG's ``maintain`` task builds this command)::

    spark-submit [--conf ...] spark_jobs/maintain_table.py --table JSON [--actions A,B] [--dry-run]
        [--connections-file PATH]

``--table`` is the table's :class:`~cdclake.model.config.TableConfig` as JSON. The job prints one
line ``CDC_MAINTENANCE_RESULT <json>`` and exits 0, or raises (non-zero exit) with the reason.
"""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="maintain_table.py", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--table", required=True, help="the table config (TableConfig JSON)")
    parser.add_argument("--actions", default="", help="comma-separated actions (default: all)")
    parser.add_argument("--dry-run", action="store_true", help="report what would be done; commit nothing")
    parser.add_argument("--connections-file", help="the task's private connections file (catalog, Kafka)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from cdclake.model.config import TableConfig
    from cdclake.settings import Settings
    from cdclake.spark.maintenance import maintain_table
    from cdclake.spark.session import job_connections, submit_session

    settings, _ = job_connections(args.connections_file, Settings.from_env())
    cfg = TableConfig.model_validate_json(args.table)
    actions = [a for a in args.actions.split(",") if a] or None
    with submit_session(settings, f"cdc-maintenance-{cfg.name}") as spark:
        result = maintain_table(spark, settings, cfg, actions=actions, dry_run=args.dry_run)
    print(f"CDC_MAINTENANCE_RESULT {result.to_json()}", flush=True)  # the job's one line of output
    return 0


if __name__ == "__main__":
    sys.exit(main())
