"""The snapshot-bootstrap DAG ``cdc_snapshot_bootstrap``: (re)fill Iceberg tables from a Debezium
snapshot, triggered by hand from the Airflow UI (its trigger form).

Trigger form (Params): ``tables`` (from the table config), ``snapshot_type`` (``incremental`` or
``blocking``), ``additional_conditions`` (an optional SQL filter per table, Debezium's
``additional-conditions``) and ``action`` (``execute``, or ``stop``/``pause``/``resume`` a running
snapshot).

Tasks of an ``execute`` run:

1. **prepare** checks the form and maps each table to the connector's data collection
   (``<database>.<table>``, the data topic without the ``topic.prefix``).
2. **ensure_tables** makes sure each Iceberg table exists with the source table's current schema
   (schema sync from the connector's schema-change topic).
3. **signal** sends the ``execute-snapshot`` signal: a row inserted with bound parameters into the
   connector's signal table (``CDCLAKE_SIGNAL_TABLE``, connection ``cdc_source_db``), or a record
   on the Kafka signal topic (``CDCLAKE_SIGNAL_CHANNEL=kafka``; key = the connector's
   ``topic.prefix``). The signal id is derived from the DAG run: a retried task never signals twice.
4. **wait_for_snapshot** defers (triggerer, no worker slot) on the connector's notification topic
   until the snapshot reports ``COMPLETED`` or ``ABORTED``, or a table's scan fails.
5. **check_snapshot** fails with the table and Debezium's status on ``SQL_EXCEPTION``,
   ``NO_PRIMARY_KEY``, ``UNKNOWN_SCHEMA``, ``SKIPPED`` or ``ABORTED``, and notes each data topic's end
   offsets: everything the snapshot emitted is below them.
6. **trigger_table_dag** starts a run of each table's DAG ``cdc_<name>`` (the snapshot's ``r``
   events are applied there like any other event; if the table DAG is paused, unpause it).
7. **wait_until_applied** finishes when each table's committed offsets (its Iceberg snapshot
   summary) have passed the noted end offsets: a ``COMPLETED`` notification means emitted by
   Debezium, not applied to the lake. A table whose DAG caps events per run catches up over its
   scheduled runs.

``stop``/``pause``/``resume`` runs send their signal and end there.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator

from cdclake.errors import ConfigError
from cdclake.settings import ConnectionIds, Settings

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from cdclake.model.config import TableConfig

log = logging.getLogger(__name__)

DAG_ID = "cdc_snapshot_bootstrap"


def data_collection(cfg: TableConfig) -> str:
    """The connector's name of a table's source, ``<database>.<table>``: the data topic
    ``<topic.prefix>.<database>.<table>`` without its prefix (the topic name the connector
    derives; the table config checks its shape)."""
    _prefix, db, table = cfg.topic.rsplit(".", 2)
    return f"{db}.{table}"


def _configs(plan: dict[str, Any]) -> dict[str, TableConfig]:
    from cdclake.model.config import TableConfig

    return {name: TableConfig.model_validate(c) for name, c in plan["configs"].items()}


def prepare(tables_json: str, **context: Any) -> dict[str, Any]:
    """Check the trigger form; the run's plan: tables (with their configs), data collections,
    signal id and type."""
    from cdclake.model.config import TableConfig
    from cdclake.model.selection import select_tables
    from cdclake.model.snapshot import build_signal, signal_id

    params = context["params"]
    if not params.get("tables"):
        raise ConfigError("choose at least one table in the trigger form ('tables')")
    configured = [TableConfig.model_validate(c) for c in json.loads(tables_json)]
    chosen = {c.name: c for c in select_tables(configured, params["tables"])}
    names = list(chosen)
    collections = {n: data_collection(chosen[n]) for n in names}
    conditions = params.get("additional_conditions") or {}
    unknown = sorted(set(conditions) - set(names))
    if unknown:
        raise ConfigError(f"additional_conditions names table(s) not chosen: {unknown}; chosen: {names}")
    filtered = sorted(n for n, f in conditions.items() if f and chosen[n].authoritative_snapshots)
    if params["snapshot_type"] == "blocking" and filtered:
        # a blocking snapshot carries the markers of a full one, filter or not: applied as
        # authoritative it would delete every row the filter left out (model/convergence.py)
        raise ConfigError(
            f"a blocking snapshot with additional_conditions for {filtered} would look complete to the "
            "table and delete the rows the filter leaves out: use snapshot_type incremental for a filtered "
            "snapshot (or set authoritative_snapshots: false for the table)"
        )
    action = params["action"]
    sid = signal_id(context["run_id"], action)
    signal = build_signal(
        sid,
        action,
        list(collections.values()),
        params["snapshot_type"],
        {collections[n]: f for n, f in conditions.items() if f},
    )
    plan = {
        "action": action,
        "snapshot_type": params["snapshot_type"],
        "tables": names,
        "configs": {n: chosen[n].model_dump(mode="json") for n in names},
        "collections": collections,
        "signal": {"id": signal.id, "type": signal.type, "data": signal.data},
    }
    log.info("plan: %s", {k: v for k, v in plan.items() if k != "configs"})
    return plan


def ensure_tables(plan: dict[str, Any]) -> dict[str, str]:
    """Make sure each chosen Iceberg table exists with the source table's current schema, from the
    connector's schema-change topic (see :mod:`cdclake.pipeline.schema_sync`)."""
    from cdclake.pipeline.schema_sync import sync_table_schema
    from cdclake_airflow.hooks import CdcLakeHook

    if plan["action"] != "execute":
        return {}
    hook = CdcLakeHook()
    catalog, kafka = hook.catalog, hook.kafka
    done = {}
    for name, cfg in _configs(plan).items():
        result = sync_table_schema(catalog, kafka, cfg)
        done[name] = "created" if result.created else f"{len(result.applied)} change(s) applied"
        for line in result.applied:
            log.info("%s: schema change applied: %s", name, line)
        if result.capped_before:
            log.info("%s: %s waits for the table's DAG (events before it are pending)", name, result.capped_before)
    return done


def send_signal(plan: dict[str, Any]) -> dict[str, Any]:
    """Send the run's signal through the configured channel; returns its ids and when it was sent."""
    import time

    from cdclake.io.source_db import send_source_signal
    from cdclake.model.snapshot import Signal
    from cdclake.pipeline.snapshot import send_kafka_signal
    from cdclake_airflow.hooks import CdcLakeHook

    hook = CdcLakeHook()
    settings = hook.settings
    s = plan["signal"]
    signal = Signal(s["id"], s["type"], s["data"])
    sent_ms = int(time.time() * 1000)
    ids = [signal.id]
    if settings.signal_channel == "kafka":
        offset = send_kafka_signal(hook.kafka, settings.signal_topic, settings.topic_prefix, signal)
        ids.append(str(offset))  # the connector names a Kafka-channel signal by its offset
    else:
        send_source_signal(hook.source_database(), settings.signal_table, signal)
    return {"signal_ids": ids, "sent_ms": sent_ms - 60_000}


def check_snapshot(plan: dict[str, Any], sent: dict[str, Any], end: dict[str, Any]) -> list[dict[str, Any]]:
    """Fail on a failed or aborted snapshot; otherwise note each table's data-topic end offsets,
    once they have settled (:func:`~cdclake.io.kafka.settled_watermarks`: the connector's last
    snapshot chunk can still be in flight to other partitions when its notification is read).

    Returns one ``{"table", "identifier", "topic", "dag_id", "end_offsets"}`` per table, for the
    mapped tasks.

    Raises:
        SnapshotError: a table scan failed or the snapshot was aborted (names table and status).
    """
    from cdclake.io.kafka import settled_watermarks
    from cdclake.model.snapshot import check_scan, scan_results
    from cdclake.pipeline.snapshot import read_notifications
    from cdclake_airflow.hooks import CdcLakeHook

    hook = CdcLakeHook()
    settings, kafka = hook.settings, hook.kafka
    collections = list(plan["collections"].values())
    results = scan_results(
        read_notifications(kafka, settings.notification_topic),
        sent["signal_ids"],
        plan["snapshot_type"],
        sent["sent_ms"],
        collections,
    )
    log.info("snapshot ended with %s; table scans: %s", end.get("type"), results)
    check_scan(end, results, collections)
    noted = []
    for name, cfg in _configs(plan).items():
        marks = settled_watermarks(kafka, cfg.topic)
        noted.append(
            {
                "table": name,
                "identifier": cfg.identifier,
                "dag_id": cfg.dag_id,
                "topic": cfg.topic,
                "end_offsets": {str(p): o for p, o in marks.high.items()},
            }
        )
        log.info("%s: %s end offsets %s: finished when committed past them", name, cfg.topic, marks.high)
    return noted


def applied(target: dict[str, Any]) -> Any:
    """Sensor: has the table committed offsets at or past the noted end offsets?"""
    from airflow.sdk import PokeReturnValue

    from cdclake.io.catalog import load_table_or_none
    from cdclake.io.refs import committed_offsets
    from cdclake.model.snapshot import caught_up
    from cdclake_airflow.hooks import CdcLakeHook

    table = load_table_or_none(CdcLakeHook().catalog, target["identifier"])
    committed = committed_offsets(table, target["topic"])
    end = {int(p): o for p, o in target["end_offsets"].items()}
    done = caught_up(committed, end)
    log.info(
        "%s: committed %s, snapshot end %s: %s", target["identifier"], committed, end, "applied" if done else "not yet"
    )
    return PokeReturnValue(is_done=done, xcom_value={"table": target["identifier"], "committed": committed})


def match_notification(message: Any, **kwargs: Any) -> dict[str, Any] | None:
    """``apply_function`` of the notification wait, run in the triggerer:
    :func:`cdclake.model.snapshot.match_notification`, an Avro notification read with the schema
    registry of :class:`~cdclake_airflow.hooks.CdcLakeHook` (resolved for each Avro record: the
    connection may change while a wait runs; the notifications of one wait are few)."""
    from cdclake.model.avro import is_framed
    from cdclake.model.snapshot import match_notification as match
    from cdclake_airflow.hooks import CdcLakeHook

    lookup = None
    if is_framed(message.value()):
        registry = CdcLakeHook().schema_registry
        lookup = registry.writer_schema if registry is not None else None
    return match(message, **kwargs, schema_lookup=lookup)


class NotificationSensor(BaseSensorOperator):
    """Deferrable wait on Debezium's notification topic: the Kafka provider's
    ``AwaitMessageTrigger`` runs in the triggerer (no worker slot) and fires on the first record
    for which ``apply_function(message, **apply_function_kwargs)`` returns a value. The trigger is
    imported when the task runs: the provider's own ``AwaitMessageSensor`` module imports
    confluent-kafka, which DAG parsing must not. It never commits consumer offsets, so each wait
    reads the topic from its start."""

    template_fields = ("topics", "apply_function_kwargs")

    def __init__(
        self,
        *,
        kafka_config_id: str,
        topics: list[str],
        apply_function: str,
        apply_function_kwargs: dict[str, Any],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.kafka_config_id = kafka_config_id
        self.topics = topics
        self.apply_function = apply_function
        self.apply_function_kwargs = apply_function_kwargs

    def execute(self, context: Any) -> None:
        from airflow.providers.apache.kafka.triggers.await_message import AwaitMessageTrigger

        timeout = self.timeout if isinstance(self.timeout, timedelta) else timedelta(seconds=self.timeout)
        self.defer(
            trigger=AwaitMessageTrigger(
                topics=self.topics,
                apply_function=self.apply_function,
                apply_function_kwargs=self.apply_function_kwargs,
                kafka_config_id=self.kafka_config_id,
                poll_timeout=1,
                poll_interval=0.05,
                commit_offset=False,
            ),
            method_name="execute_complete",
            timeout=timeout,
        )

    def execute_complete(self, context: Any, event: Any = None) -> Any:
        log.info("snapshot notification: %s", event)
        return event


def _trigger_params(tables: list[TableConfig]) -> dict[str, Any]:
    """The trigger form of ``cdc_snapshot_bootstrap`` (module docstring): its Params by name."""
    from airflow.sdk import Param

    from cdclake_airflow.params import tables_param

    return {
        "tables": tables_param([t.name for t in tables], "snapshot", empty_means_all=False),
        "snapshot_type": Param(
            "incremental",
            type="string",
            enum=["incremental", "blocking"],
            title="Snapshot type",
            description="incremental: chunked, interleaved with streaming (no locks); blocking: "
            "streaming pauses while the tables are read.",
        ),
        "additional_conditions": Param(
            {},
            type="object",
            title="Filters (additional-conditions)",
            description='Optional SQL filter per table, e.g. {"orders": "id > 1000"}; rows '
            "outside the filter are not re-read.",
        ),
        "action": Param(
            "execute",
            type="string",
            enum=["execute", "stop", "pause", "resume"],
            title="Action",
            description="execute a snapshot, or stop / pause / resume the running one.",
        ),
    }


def build_bootstrap_dag(settings: Settings, tables: list[TableConfig]) -> DAG:
    """The DAG ``cdc_snapshot_bootstrap`` for the configured ``tables``."""
    from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
    from airflow.sdk import task

    from cdclake_airflow.params import tables_dag

    with tables_dag(
        DAG_ID,
        "Snapshot-bootstrap Iceberg tables through Debezium signals (manual)",
        __doc__,
        schedule=None,
        tags=["cdc", "bootstrap"],
        task_defaults={
            "retries": 2,
            "retry_delay": timedelta(seconds=30),
            "execution_timeout": timedelta(minutes=30),
        },
        # the sensor's apply_function takes lists and numbers from XCom, not their str()
        render_template_as_native_obj=True,
        params=_trigger_params(tables),
    ) as dag:
        tables_json = json.dumps([t.model_dump(mode="json") for t in tables])
        plan = task(task_id="prepare")(prepare)(tables_json)
        ensured = task(task_id="ensure_tables")(ensure_tables)(plan)
        sent = task(task_id="signal")(send_signal)(plan)
        ensured >> sent
        executing = task.short_circuit(task_id="is_execute")(lambda p: p["action"] == "execute")(plan)
        sent >> executing
        wait = NotificationSensor(
            task_id="wait_for_snapshot",
            kafka_config_id=ConnectionIds.KAFKA_NOTIFICATIONS,
            topics=[settings.notification_topic],
            apply_function="cdclake_airflow.bootstrap_dag.match_notification",
            apply_function_kwargs={
                "signal_ids": "{{ ti.xcom_pull(task_ids='signal')['signal_ids'] }}",
                "snapshot_type": "{{ params.snapshot_type }}",
                "since_ms": "{{ ti.xcom_pull(task_ids='signal')['sent_ms'] }}",
                "data_collections": "{{ ti.xcom_pull(task_ids='prepare')['collections'].values() | list }}",
            },
            timeout=timedelta(hours=12),
            execution_timeout=timedelta(hours=12, minutes=30),
            # one retry, soon: Airflow's scheduler can fail a try whose own state update loses the
            # race with the executor's event ("task state changed externally", seen with
            # standalone on SQLite under load); a retry reads the notifications since the signal
            # again, so it finds the one the failed try found
            retries=1,
            retry_delay=timedelta(seconds=10),
        )
        executing >> wait
        noted = task(task_id="check_snapshot")(check_snapshot)(plan, sent, wait.output)
        trigger = TriggerDagRunOperator.partial(
            task_id="trigger_table_dag",
            trigger_run_id="bootstrap__{{ run_id }}",
            skip_when_already_exists=True,
            wait_for_completion=False,
        ).expand(trigger_dag_id=noted.map(lambda t: t["dag_id"]))
        waiting = task.sensor(
            task_id="wait_until_applied",
            poke_interval=15,
            timeout=12 * 3600,
            mode="reschedule",
        )(applied).expand(target=noted)
        trigger >> waiting
    return dag
