"""One DAG per shared DAG of the table config, ``cdc_shared_<name>``: a fleet of small tables
applied on one schedule, several tables per task in one Spark Connect session (see
:mod:`cdclake_airflow.shared_dag`). Parsing imports only the config and the factory; when a task
runs, only its DAG is built."""

from __future__ import annotations

from airflow.sdk import get_parsing_context

from cdclake.model.config import load_tables
from cdclake.settings import Settings
from cdclake_airflow.shared_dag import build_shared_dags

_settings = Settings.from_env()
for _dag in build_shared_dags(
    _settings,
    list(load_tables(_settings.tables_config, _settings.discovery_registry).tables),
    only=get_parsing_context().dag_id,
):
    globals()[_dag.dag_id] = _dag
