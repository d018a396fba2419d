"""What the DAGs over many tables (``cdc_snapshot_bootstrap``, ``cdc_reconcile``,
``cdc_maintenance``, ``cdc_freshness``) share: their DAG settings, the ``tables`` Param of their
trigger form and the task that checks it (:func:`cdclake.model.selection.select_tables`)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from cdclake.model.config import TableConfig

OWNER = "data-platform"
START_DATE = datetime(2026, 1, 1)


def tables_dag(
    dag_id: str,
    description: str,
    doc_md: str | None,
    *,
    schedule: str | None,
    tags: list[str],
    task_defaults: dict[str, Any],
    **dag_args: Any,
) -> DAG:
    """A DAG over many tables: owned by :data:`OWNER`, from :data:`START_DATE` without catch-up,
    one run at a time.

    Args:
        dag_id: the DAG id.
        description: its one-line description in the UI.
        doc_md: its documentation (the DAG module's docstring).
        schedule: its schedule (``None``: triggered only).
        tags: its tags.
        task_defaults: the tasks' ``default_args`` besides the owner (retries, timeouts).
        dag_args: further ``DAG`` arguments (``params``, ``render_template_as_native_obj``).
    """
    from airflow.sdk import DAG

    return DAG(
        dag_id=dag_id,
        description=description,
        schedule=schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args={"owner": OWNER, **task_defaults},
        tags=tags,
        doc_md=doc_md,
        **dag_args,
    )


def tables_param(names: list[str], purpose: str, *, empty_means_all: bool = True) -> Any:
    """The ``tables`` Param: a list of configured table names (a pick list of ``names``).
    ``purpose`` completes "Tables of the table config to ...". Empty means all, unless
    ``empty_means_all`` is false: then the first table is chosen by default."""
    from airflow.sdk import Param

    return Param(
        [] if empty_means_all else names[:1],
        type="array",
        items={"type": "string", "enum": names} if names else {"type": "string"},
        title="Tables",
        description=f"Tables of the table config to {purpose}" + ("; empty: all." if empty_means_all else "."),
        examples=names,
    )


def select_tables_task(tables: list[TableConfig], among: str = "in the table config") -> Any:
    """The task ``select_tables``: the names of the tables a run takes, the ``tables`` Param
    checked against ``tables`` (all of them when it is empty); the tasks per table map over its
    XCom.

    Args:
        tables: the tables the DAG takes.
        among: what ``tables`` are, as the message of an unknown name says it.

    Raises:
        ConfigError: (when the task runs) a name that is not one of ``tables``.
    """
    from airflow.sdk import task

    from cdclake.model.selection import select_tables

    return task(task_id="select_tables")(
        lambda **ctx: [t.name for t in select_tables(tables, ctx["params"]["tables"], among=among)]
    )()
