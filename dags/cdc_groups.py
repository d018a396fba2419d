"""One DAG per table group of the table config, ``cdc_group_<group>`` (scheduled on its members'
assets; see :mod:`cdclake_airflow.group_dag`). Parsing imports only the config and the factory."""

from __future__ import annotations

from cdclake.model.config import load_tables
from cdclake.settings import Settings
from cdclake_airflow.group_dag import build_group_dags

_settings = Settings.from_env()
for _dag in build_group_dags(
    _settings, list(load_tables(_settings.tables_config, _settings.discovery_registry).tables)
):
    globals()[_dag.dag_id] = _dag
