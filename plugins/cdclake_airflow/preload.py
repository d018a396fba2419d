"""Import the table runs' modules once in the process that starts Airflow's tasks, so that every
task starts with them (docs/deploying.md, "Airflow settings").

On Linux, Airflow's ``LocalExecutor`` (and a Celery worker) runs each task in a process forked
from its worker, itself forked from the scheduler (Celery: the worker); a module imported there
before the fork is in every task process already. A table run's ``apply`` task imports the Spark
Connect client (with pandas, pyarrow and gRPC), pyiceberg, confluent-kafka and the pipeline: about
2 s of a one-event run on two cores (docs/benchmarks.md, "Fixed cost per run"), paid by every
task. :func:`preload` imports them in the scheduler or worker process instead, and nowhere else
(the DAG processor, the API server and the CLI keep their start-up), from
``plugins/airflow_local_settings.py``, which Airflow imports at start in every process (the
plugins folder is on its ``sys.path``).

Only imports: no client, thread or connection is made before the fork (gRPC, librdkafka and the
JVM-free Spark Connect client start their threads when a client is made, in the task). Set
``CDCLAKE_PRELOAD=0`` to turn it off.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
from collections.abc import Sequence

log = logging.getLogger(__name__)

TASK_MODULES = (
    "pyspark.sql.connect.session",
    "pyspark.sql.functions",
    "pyiceberg.catalog.sql",
    "pyiceberg.catalog.rest",
    "confluent_kafka",
    "confluent_kafka.admin",
    "cdclake.runner",
    "cdclake.spark.apply",
)
"""What a table run's ``apply`` task imports (its Spark Connect session, catalog, Kafka clients and
the pipeline), none of which imports Airflow: Airflow is still starting when its local settings
are imported."""

TASK_HOSTS = (("scheduler",), ("standalone",), ("celery", "worker"))
"""The ``airflow`` commands whose process forks the task processes (LocalExecutor: the scheduler;
``airflow standalone`` runs one; CeleryExecutor: the worker)."""

ENV = "CDCLAKE_PRELOAD"
"""``0`` turns :func:`preload` off."""


def forks_tasks(argv: Sequence[str]) -> bool:
    """Whether ``argv`` (``sys.argv``) is an ``airflow`` command that forks task processes
    (:data:`TASK_HOSTS`)."""
    if not argv or not (os.path.basename(argv[0]) == "airflow" or argv[0].endswith("airflow/__main__.py")):
        return False
    words = [a for a in argv[1:] if not a.startswith("-")]
    return any(tuple(words[: len(host)]) == host for host in TASK_HOSTS)


def preload(argv: Sequence[str] | None = None, modules: Sequence[str] = TASK_MODULES) -> list[str]:
    """Import ``modules`` when the process forks Airflow's tasks (:func:`forks_tasks` of ``argv``,
    default ``sys.argv``) and ``CDCLAKE_PRELOAD`` is not ``0``. A module that does not import is
    left to the task (logged at warning; never raised: the scheduler must start).

    Returns:
        The modules imported (empty when the process does not fork tasks).
    """
    if os.environ.get(ENV, "1") == "0" or not forks_tasks(sys.argv if argv is None else argv):
        return []
    start = time.monotonic()
    done = []
    for name in modules:
        try:
            importlib.import_module(name)
            done.append(name)
        except Exception as e:  # the task imports it again and fails there, naming it
            log.warning("cdclake: could not preload %s for the tasks: %s", name, e)
    log.info("cdclake: preloaded %d modules for the tasks in %.1f s", len(done), time.monotonic() - start)
    return done
