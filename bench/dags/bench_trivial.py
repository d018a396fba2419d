"""The benchmark's baseline DAG: one task that does nothing. ``airflow dags test`` of it is
Airflow's own floor for a DAG run on this machine (parse, DB, task process), against which the
table DAG's short-circuit run is measured. Loaded only by the benchmark (its own dags folder)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, task

with DAG(dag_id="bench_trivial", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["bench"]):

    @task(task_id="noop")
    def noop() -> None:
        return None

    noop()
