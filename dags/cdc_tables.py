"""One CDC DAG per table of the table config (``CDCLAKE_TABLES_CONFIG``, default
``include/tables.yaml``): ``cdc_<name>``, plan -> apply -> publish.

Parsing stays cheap: only the config (pydantic, YAML) and the DAG factory are imported here;
Spark, Kafka and Iceberg are imported by the tasks when they run.
"""

from __future__ import annotations

from cdclake.model.config import load_tables
from cdclake.settings import Settings
from cdclake_airflow.table_dag import build_table_dag

_settings = Settings.from_env()
for _cfg in load_tables(_settings.tables_config).tables:
    globals()[_cfg.dag_id] = build_table_dag(_settings, _cfg)
