"""What the DAGs over many tables (``cdc_reconcile``, ``cdc_maintenance``) share: the ``tables``
Param of their trigger form and the check of the names it holds."""

from __future__ import annotations

from typing import Any


def tables_param(names: list[str], purpose: str) -> Any:
    """The ``tables`` Param: a list of configured table names (a pick list of ``names``); empty
    means all. ``purpose`` completes "Tables of the table config to ..."."""
    from airflow.sdk import Param

    return Param(
        [],
        type="array",
        items={"type": "string", "enum": names} if names else {"type": "string"},
        title="Tables",
        description=f"Tables of the table config to {purpose}; empty: all.",
        examples=names,
    )


def select_tables(names: list[str] | None, configured: list[str], what: str = "in the table config") -> list[str]:
    """The tables a run takes: the ``tables`` Param, or every one of ``configured``.

    Raises:
        ConfigError: a name that is not one of ``configured`` (the message says the tables are not
            ``what`` and lists ``configured``).
    """
    from cdclake.errors import ConfigError

    chosen = list(names or configured)
    unknown = sorted(set(chosen) - set(configured))
    if unknown:
        raise ConfigError(f"tables {unknown} are not {what}; eligible: {configured}")
    return chosen
