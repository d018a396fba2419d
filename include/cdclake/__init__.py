"""cdclake: Debezium MySQL/MariaDB change events applied to Apache Iceberg tables, exactly once.

The public surface, importable from ``cdclake`` itself (each name is imported on first use, so
that ``import cdclake`` stays cheap in DAG files; docs/architecture.md has the layers):

- :class:`Settings` (``cdclake.settings``): where Kafka, the catalog, the warehouse and the engine
  are, from ``CDCLAKE_*`` variables and Airflow connections.
- :func:`load_tables`, :class:`TableConfig`, :class:`TablesFile` (``cdclake.model.config``): the
  table config (docs/table-config.md).
- :func:`run_once` (``cdclake.runner``): one table run (plan, schema sync, apply, commit); what
  the table DAG's ``apply`` task calls.
- :func:`reconcile_table` (``cdclake.pipeline.reconcile``): compare a table with its source.
- :class:`CdcLakeError` and :class:`ConfigError` (``cdclake.errors``): the root of every error
  the project raises, and a bad configuration.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdclake.errors import CdcLakeError, ConfigError
    from cdclake.model.config import TableConfig, TablesFile, load_tables
    from cdclake.pipeline.reconcile import reconcile_table
    from cdclake.runner import run_once
    from cdclake.settings import Settings

__all__ = [
    "CdcLakeError",
    "ConfigError",
    "Settings",
    "TableConfig",
    "TablesFile",
    "load_tables",
    "reconcile_table",
    "run_once",
]

_HOMES = {
    "CdcLakeError": "cdclake.errors",
    "ConfigError": "cdclake.errors",
    "Settings": "cdclake.settings",
    "TableConfig": "cdclake.model.config",
    "TablesFile": "cdclake.model.config",
    "load_tables": "cdclake.model.config",
    "reconcile_table": "cdclake.pipeline.reconcile",
    "run_once": "cdclake.runner",
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (PEP 562).

    Raises:
        AttributeError: ``name`` is not in :data:`__all__`.
    """
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'cdclake' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value
