"""spark-submit entry point: apply one run plan of a table to Iceberg.

Usage (the table DAG's ``apply`` task builds this command)::

    spark-submit [--conf ...] spark_jobs/apply_cdc.py --plan JSON [--connections-file PATH]
        [--bootstrap-servers HOST:PORT]

``--plan`` is the :class:`~cdclake.model.plan.RunPlan` the ``schema_sync`` task returned (table
config, offset range, run id, replay); the job does not read the table config file.
``--connections-file`` is the task's private file of the Iceberg catalog's properties and the Kafka
client config (:func:`cdclake.spark.session.job_connections`); without it the job uses the
``CDCLAKE_*`` catalog and a plaintext Kafka cluster at ``--bootstrap-servers``. The job
prints one line ``CDC_APPLY_RESULT <json>`` and exits 0, or raises (non-zero exit) with the reason.
With ``--alert-file``, a run that committed and quarantined more bad records than its table
tolerates (:class:`~cdclake.errors.QuarantineToleranceError`) writes the error's message there and
exits 0: the task raises it, so that the try that committed fails without retry.
"""

from __future__ import annotations

import argparse
import logging
import sys
from functools import partial


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="apply_cdc.py", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--plan", required=True, help="the run plan (RunPlan JSON) from the schema_sync task")
    parser.add_argument("--connections-file", help="the task's private connections file (catalog, Kafka)")
    parser.add_argument("--bootstrap-servers", help="Kafka bootstrap servers without --connections-file")
    parser.add_argument("--alert-file", help="where to write a QuarantineToleranceError's message (exit 0)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from cdclake.errors import QuarantineToleranceError
    from cdclake.model.plan import RunPlan
    from cdclake.runner import apply_plan
    from cdclake.settings import Settings
    from cdclake.spark.session import job_connections, submit_session

    settings, kafka = job_connections(args.connections_file, Settings.from_env(), args.bootstrap_servers)
    plan = RunPlan.from_json(args.plan)
    session = partial(submit_session, settings, f"cdc-apply-{plan.table.name}")
    try:
        result = apply_plan(session, settings, plan, kafka=kafka)
    except QuarantineToleranceError as e:
        if args.alert_file is None:
            raise
        # committed: the task raises it (a failed job would be retried, and its retry find the run committed)
        logging.getLogger("apply_cdc").error("%s: %s", type(e).__name__, e)
        with open(args.alert_file, "w", encoding="utf-8") as out:
            out.write(str(e))
        return 0
    print(f"CDC_APPLY_RESULT {result.to_json()}", flush=True)  # the task reads this line
    return 0


if __name__ == "__main__":
    sys.exit(main())
