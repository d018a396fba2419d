"""One DAG per table group, ``cdc_group_<group>`` (docs/architecture.md, "Table groups").

Scheduled on the members' assets (any of them: each table's ``apply`` emits its asset when it
commits), one task, **publish** (pyiceberg and the transaction topic's ``END`` records; no Spark,
no engine slot): reads the members' commits, chooses the greatest source position all of them cover
and moves ``main`` and the tag ``cdc_group_<group>`` of every member to its commit there in one
catalog commit (:func:`cdclake.pipeline.groups.publish_group`). The members keep their own DAGs
``cdc_<name>``, whose runs commit to each member's stage branch. When it moves the group, the task
emits the group's asset (:func:`group_asset_uri`): what a downstream DAG that reads the members'
``main`` schedules on; otherwise it is skipped (no asset event).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from cdclake.settings import Settings
from cdclake_airflow.table_dag import table_asset

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from cdclake.model.config import TableConfig

log = logging.getLogger(__name__)

DAG_PREFIX = "cdc_group_"


def group_asset_uri(settings: Settings, group: str) -> str:
    """The asset URI of a table group: ``iceberg://<catalog>/cdc_group_<group>`` (a table's has
    three parts, :func:`~cdclake_airflow.table_dag.table_asset_uri`)."""
    return f"iceberg://{settings.catalog_name}/{DAG_PREFIX}{group}"


def publish(group: str) -> dict[str, Any]:
    """The ``publish`` task: :func:`~cdclake.pipeline.groups.publish_group` over the group's members
    as the table config has them now.

    Returns:
        The :class:`~cdclake.pipeline.groups.GroupPublish` as a dict.

    Raises:
        AirflowSkipException: the group did not move (the reason is logged): no asset event.
        ConfigError: the group is no longer in the table config, or its catalog has no
            multi-table commit (``CDCLAKE_GROUP_COMMIT=pointer`` publishes without one).
        MultiTableCommitError: the commit lost to the members' own commits every try (retried).
    """
    from cdclake.errors import ConfigError
    from cdclake.model.config import load_tables
    from cdclake.model.groups import group_members
    from cdclake.pipeline.groups import publish_group
    from cdclake_airflow.hooks import CdcLakeHook

    hook = CdcLakeHook()
    settings = hook.settings
    members = group_members(load_tables(settings.tables_config, settings.discovery_registry).tables).get(group)
    if not members:
        raise ConfigError(f"group {group!r} has no tables in the table config {settings.tables_config}")
    from airflow.sdk.exceptions import AirflowSkipException

    result = publish_group(hook.catalog, group, members, int(time.time() * 1000), hook.kafka, settings.group_commit)
    if not result.moved:
        raise AirflowSkipException(f"group {group} stays at position {result.position}: {result.reason}")
    return dataclasses.asdict(result)


def build_group_dags(settings: Settings, tables: list[TableConfig]) -> list[DAG]:
    """The DAG ``cdc_group_<group>`` of each group of ``tables``
    (:func:`~cdclake.model.groups.group_members`), scheduled on any member's asset."""
    from airflow.sdk import Asset, AssetAny, task

    from cdclake.model.groups import group_members
    from cdclake_airflow.params import tables_dag

    dags = []
    for group, members in group_members(tables).items():
        assets = [table_asset(settings, m) for m in members]  # as the members' DAGs declare them
        with tables_dag(
            f"{DAG_PREFIX}{group}",
            f"Publishes group {group} ({', '.join(m.name for m in members)}) at one source transaction boundary",
            __doc__,
            schedule=AssetAny(*assets),
            tags=["cdc", "group"],
            task_defaults={
                "retries": 3,
                "retry_delay": timedelta(seconds=30),
                "execution_timeout": timedelta(minutes=10),
            },
        ) as dag:
            outlet = Asset(name=f"{settings.catalog_name}.{DAG_PREFIX}{group}", uri=group_asset_uri(settings, group))
            task(task_id="publish", outlets=[outlet])(publish)(group)
        dags.append(dag)
    return dags
