"""The discovery DAG ``cdc_discovery`` (every 10 minutes; see
:mod:`cdclake_airflow.discovery_dag`). Parsing imports only the settings and the factory."""

from __future__ import annotations

from cdclake.settings import Settings
from cdclake_airflow.discovery_dag import DAG_ID, build_discovery_dag

globals()[DAG_ID] = build_discovery_dag(Settings.from_env())
