"""Airflow's local settings (imported by every Airflow process at start; the plugins folder is on
its ``sys.path``): the scheduler, or a Celery worker, imports the table runs' modules once before
it forks the task processes (:mod:`cdclake_airflow.preload`; ``CDCLAKE_PRELOAD=0`` turns it off).

A deployment with local settings of its own adds the two lines below to its file instead.
"""

from cdclake_airflow.preload import preload

__all__: list[str] = []  # no cluster policy here (Airflow reads the module's public names as policies)

preload()
