"""The maintenance DAG ``cdc_maintenance`` over the tables of the table config (daily, and manual
with Params; see :mod:`cdclake_airflow.maintenance_dag`). Parsing imports only the config and the
factory."""

from __future__ import annotations

from cdclake.model.config import load_tables
from cdclake.settings import Settings
from cdclake_airflow.maintenance_dag import DAG_ID, build_maintenance_dag

_settings = Settings.from_env()
globals()[DAG_ID] = build_maintenance_dag(
    _settings, list(load_tables(_settings.tables_config, _settings.discovery_registry).tables)
)
