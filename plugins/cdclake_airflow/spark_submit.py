"""``spark-submit`` for the ``submit`` engine, without a credential on its command line.

:class:`CdcSparkSubmitOperator` is the Spark provider's ``SparkSubmitOperator``; when it runs, it
resolves the task's connections (the Iceberg catalog's properties, the Kafka client config and the
schema registry's config, :class:`cdclake_airflow.hooks.CdcLakeHook`), writes them to a file readable by the task's user only
(mode 0600, in a private temporary folder), passes the job ``--connections-file <path>`` and
deletes the file when the job ends. The job reads it with :func:`cdclake.spark.session.job_connections`. So the
DAG, its rendered fields, the serialized DAG and the ``spark-submit`` command line carry only the
path; the job is a client-mode driver on the task's machine, which is where the file is.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

CONNECTIONS_ARG = "--connections-file"
ALERT_ARG = "--alert-file"


class CdcSparkSubmitOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` handing the job the task's connections in a private file
    (``--connections-file``; see the module docstring). Arguments as ``SparkSubmitOperator``'s, and:

    Args:
        alert_file: pass the job ``--alert-file <path>`` (in the same private folder): the apply job
            writes there the message of a run that committed and quarantined more bad records than
            its table tolerates, and exits 0; the task then fails with
            :class:`~cdclake.errors.QuarantineToleranceError` (not retried). So the try that
            committed fails, once: a failed job would be retried like any, and its retry would find
            the run committed and succeed, the alert lost.
    """

    def __init__(self, *, alert_file: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.alert_file = alert_file

    def execute(self, context: Any) -> None:
        from cdclake_airflow.hooks import CdcLakeHook

        connections = CdcLakeHook()
        folder = Path(tempfile.mkdtemp(prefix="cdclake-run-"))  # mode 0700
        path = folder / "connections.json"
        doc = {
            "catalog": connections.catalog_properties(),
            "kafka": connections.kafka_config(),
            "schema_registry": connections.schema_registry_config(),
        }
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(doc, out)
        base_args = list(self.application_args or [])
        alert = folder / "alert.txt"
        self.application_args = [*base_args, CONNECTIONS_ARG, str(path)]
        if self.alert_file:
            self.application_args += [ALERT_ARG, str(alert)]
        self._hook = None  # built from the arguments above
        try:
            super().execute(context)
            if self.alert_file and alert.exists():
                from cdclake.errors import QuarantineToleranceError

                raise QuarantineToleranceError(alert.read_text())
        finally:
            self.application_args = base_args
            shutil.rmtree(folder, ignore_errors=True)
