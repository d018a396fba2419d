"""One DAG per shared DAG of the table config, ``cdc_shared_<name>`` (docs/architecture.md, "Shared
DAGs"; :mod:`cdclake.model.shared`): a fleet of small tables applied on one schedule, several
tables per task.

Its tasks ``apply_0``, ``apply_1``, ... each apply a run of the members in name order
(``tables_per_task`` each), in the Airflow pool ``cdc_apply``, as many at once as it has slots.
A task opens one session of the shared Spark Connect server (connection
``spark_connect_default``) and runs each of its tables in it, one after the other, exactly as the
table's own DAG's ``apply`` task runs it (:func:`cdclake_airflow.table_dag.run_table`: plan, schema
sync, apply, publish; its own Iceberg commit holding its offsets): the task's start-up and the
session are paid once per task, not per table. A table with nothing new costs its plan only.

Each table that commits emits its asset (``iceberg://<catalog>/<namespace>/<table>``, through the
task's asset alias ``<dag id>.<task id>``), so DAGs scheduled on a table run as when its own DAG
applies it. A table that fails does not stop the others: its failed try is counted in its record
of failed tries (``cdclake status``, the CDC monitor, ``cdc_freshness``) and, once every table was
tried, the task fails with :class:`~cdclake.errors.SharedTablesError` naming each failed table,
and Airflow retries it (a table committed by the failed try is found committed and published
only). Asset events are sent when the task succeeds. Errors a retry cannot change
(:data:`~cdclake_airflow.table_failures.NOT_RETRIED`) fail the task without retry when every failed
table has one.

Each member keeps its own DAG ``cdc_<name>``, unscheduled, for manual runs and replays (its trigger
form); such a run and the shared DAG's never apply the same events twice (each commit checks the
offsets it starts from).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from cdclake.model.shared import SHARED_DAG_PREFIX, shared_dags, task_tables
from cdclake.settings import APPLY_POOL, APPLY_PRIORITY_WEIGHT, Settings
from cdclake_airflow.table_dag import table_asset
from cdclake_airflow.table_failures import NOT_RETRIED, record_failure, retry_args

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from cdclake.model.config import TableConfig

log = logging.getLogger(__name__)


def alias_name(dag_id: str, task_id: str) -> str:
    """The asset alias through which task ``task_id`` of shared DAG ``dag_id`` emits its tables'
    asset events: ``<dag id>.<task id>``."""
    return f"{dag_id}.{task_id}"


def apply_tables(tables_json: list[str], alias: str, **context: Any) -> dict[str, str]:
    """A task of a shared DAG: run each table of ``tables_json`` in one Spark Connect session
    (:class:`cdclake.runner.SharedSession`; a new one after a table that failed), each as its own
    DAG would (:func:`cdclake_airflow.table_dag.run_table`).

    Args:
        tables_json: the task's tables (:class:`~cdclake.model.config.TableConfig` as JSON).
        alias: the task's asset alias (:func:`alias_name`).

    Returns:
        ``{table name: outcome}``: ``committed``, ``nothing_new`` or ``waiting`` (the XCom).

    Raises:
        SharedTablesError: tables failed (each named with its error); retried by Airflow.
        AirflowFailException: every failed table failed with an error a retry cannot change
            (:data:`~cdclake_airflow.table_failures.NOT_RETRIED`): not retried.
    """
    from airflow.sdk import Asset, AssetAlias
    from airflow.sdk.exceptions import AirflowFailException

    from cdclake.errors import SharedTablesError
    from cdclake.model.config import TableConfig
    from cdclake.runner import SharedSession
    from cdclake_airflow.hooks import CdcLakeHook
    from cdclake_airflow.table_dag import run_table

    hook = CdcLakeHook()
    settings = hook.settings
    events = context["outlet_events"][AssetAlias(alias)]
    ti = context["ti"]
    outcomes: dict[str, str] = {}
    failed: dict[str, BaseException] = {}
    with SharedSession(hook.spark_session) as session:
        for table_json in tables_json:
            cfg = TableConfig.model_validate_json(table_json)
            asset = table_asset(settings, cfg)

            def emit(extra: dict[str, Any], asset: Asset = asset) -> None:
                events.add(asset, extra=extra)

            try:
                outcomes[cfg.name] = run_table(hook, cfg, context, session, emit).outcome
            except Exception as exc:  # noqa: BLE001 - one table's error never stops the others
                log.exception("table %s failed; the task goes on with its other tables", cfg.identifier)
                failed[cfg.name] = exc
                session.close()  # the next table opens a new session (the engine may have restarted)
                retried = not isinstance(exc, NOT_RETRIED) and int(ti.try_number) <= int(ti.max_tries)
                try:
                    record_failure(cfg.identifier, "retrying" if retried else "failing", {**context, "exception": exc})
                except Exception as record_exc:  # noqa: BLE001 - the task's own failure still shows it
                    log.warning("table %s: its failed try was not recorded: %s", cfg.identifier, record_exc)
    counts = {o: list(outcomes.values()).count(o) for o in sorted(set(outcomes.values()))}
    log.info(
        "%d table(s): %s; %d failed%s; %d Spark session(s) opened",
        len(tables_json),
        counts,
        len(failed),
        f" ({', '.join(failed)})" if failed else "",
        session.opened,
    )
    if failed:
        error = SharedTablesError(failed)
        if all(isinstance(e, NOT_RETRIED) for e in failed.values()):
            raise AirflowFailException(f"{error} (not retried: a retry cannot change these errors)") from error
        raise error
    return outcomes


def build_shared_dags(settings: Settings, tables: list[TableConfig], only: str | None = None) -> list[DAG]:
    """The DAG ``cdc_shared_<name>`` of each shared DAG of ``tables``
    (:func:`~cdclake.model.shared.shared_dags`): its members' schedule, one task per run of
    ``tables_per_task`` members (:func:`~cdclake.model.shared.task_tables`), each in the pool
    ``cdc_apply`` with the members' retries, retry delay and timeout.

    Args:
        only: build only this DAG id (the DAG a task runs, from Airflow's parsing context).

    Raises:
        ConfigError: members that disagree on the shared DAG's settings.
    """
    from airflow.sdk import DAG, AssetAlias, task

    from cdclake_airflow.params import OWNER, RUN_TYPES, START_DATE, plain_markdown

    dags = []
    for name, members in shared_dags(tables).items():
        dag_id = f"{SHARED_DAG_PREFIX}{name}"
        if only is not None and only != dag_id:
            continue
        first = members[0]
        with DAG(
            dag_id=dag_id,
            description=f"Applies {len(members)} table(s) of shared DAG {name}, "
            f"{first.tables_per_task} per task in one Spark Connect session",
            schedule=first.schedule,
            start_date=START_DATE,
            catchup=False,
            max_active_runs=1,
            default_args={"owner": OWNER, **retry_args(first)},  # the members agree on these
            tags=["cdc", "shared"],
            doc_md=plain_markdown(__doc__),
            allowed_run_types=RUN_TYPES,
        ) as dag:
            for k, chunk in enumerate(task_tables(members)):
                task_id = f"apply_{k}"
                alias = alias_name(dag_id, task_id)
                task(
                    task_id=task_id,
                    pool=APPLY_POOL,
                    priority_weight=APPLY_PRIORITY_WEIGHT,
                    outlets=[AssetAlias(alias)],
                    doc_md="Tables: " + ", ".join(f"`{t.name}` ({t.identifier})" for t in chunk),
                )(apply_tables)([t.model_dump_json() for t in chunk], alias)
        dags.append(dag)
    return dags
