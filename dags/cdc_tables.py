"""One CDC DAG per table of the table config (``CDCLAKE_TABLES_CONFIG``, default
``include/tables.yaml``) and per table its ``discover`` patterns make of the topics in the
discovery registry (``CDCLAKE_DISCOVERY_REGISTRY``, a file the ``cdc_discovery`` DAG writes; never
Kafka): ``cdc_<name>``, plan -> schema_sync -> apply -> publish.

Parsing stays cheap: only the config (pydantic, YAML) and the DAG factory are imported here;
Spark, Kafka and Iceberg are imported by the tasks when they run. When a task runs, Airflow's
parsing context names its DAG, and only that DAG is built (not one per configured table).
"""

from __future__ import annotations

from airflow.sdk import get_parsing_context

from cdclake.model.config import load_tables
from cdclake.settings import Settings
from cdclake_airflow.table_dag import build_table_dag

_settings = Settings.from_env()
_running = get_parsing_context().dag_id
for _cfg in load_tables(_settings.tables_config, _settings.discovery_registry).tables:
    if _running is None or _running == _cfg.dag_id:
        globals()[_cfg.dag_id] = build_table_dag(_settings, _cfg)
