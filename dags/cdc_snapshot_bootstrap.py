"""The snapshot-bootstrap DAG ``cdc_snapshot_bootstrap`` over the tables of the table config
(manual; see :mod:`cdclake_airflow.bootstrap_dag`). Parsing imports only the config and the factory."""

from __future__ import annotations

from cdclake.model.config import load_tables
from cdclake.settings import Settings
from cdclake_airflow.bootstrap_dag import DAG_ID, build_bootstrap_dag

_settings = Settings.from_env()
globals()[DAG_ID] = build_bootstrap_dag(
    _settings, list(load_tables(_settings.tables_config, _settings.discovery_registry).tables)
)
