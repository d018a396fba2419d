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

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator

from cdclake_airflow.connections import KAFKA_CONN_ID

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from cdclake.config import TableConfig
    from cdclake.settings import Settings

DAG_ID = "cdc_snapshot_bootstrap"
NOTIFICATIONS_CONN_ID = "kafka_notifications"
SOURCE_DB_CONN_ID = "cdc_source_db"


def data_collection(cfg: TableConfig) -> str:
    """The connector's name of a table's source, ``<database>.<table>``: the data topic
    ``<topic.prefix>.<database>.<table>`` without its prefix (the topic name the connector
    derives; the table config checks its shape)."""
    _prefix, db, table = cfg.topic.rsplit(".", 2)
    return f"{db}.{table}"


def prepare(**context: Any) -> dict[str, Any]:
    """Check the trigger form; the run's plan: tables, data collections, signal id and type."""
    from cdclake.config import load_tables
    from cdclake.settings import Settings
    from cdclake.snapshot import build_signal, signal_id

    settings = Settings.from_env()
    tables = load_tables(settings.tables_config)
    params = context["params"]
    names = list(params.get("tables") or [])
    if not names:
        raise ValueError("choose at least one table in the trigger form ('tables')")
    cfgs = [tables.get(n) for n in names]
    collections = {c.name: data_collection(c) for c in cfgs}
    conditions = params.get("additional_conditions") or {}
    unknown = sorted(set(conditions) - set(names))
    if unknown:
        raise ValueError(f"additional_conditions names table(s) not chosen: {unknown}; chosen: {names}")
    action = params["action"]
    sid = signal_id(context["run_id"], action)
    signal = build_signal(
        sid, action, list(collections.values()), params["snapshot_type"],
        {collections[n]: f for n, f in conditions.items() if f},
    )
    plan = {
        "action": action, "snapshot_type": params["snapshot_type"], "tables": names,
        "collections": collections, "signal": {"id": signal.id, "type": signal.type, "data": signal.data},
    }
    print(f"plan: {plan}")
    return plan


def ensure_tables(plan: dict[str, Any]) -> dict[str, str]:
    """Make sure each chosen Iceberg table exists with the source table's current schema, from the
    connector's schema-change topic (see :mod:`cdclake.schema_sync`)."""
    from cdclake.config import load_tables
    from cdclake.schema_sync import sync_table_schema
    from cdclake.settings import Settings

    settings = Settings.from_env()
    tables = load_tables(settings.tables_config)
    if plan["action"] != "execute":
        return {}
    from cdclake_airflow.connections import kafka_bootstrap

    done = {}
    for name in plan["tables"]:
        result = sync_table_schema(settings, tables.get(name), kafka_bootstrap(KAFKA_CONN_ID))
        done[name] = "created" if result.created else f"{len(result.applied)} change(s) applied"
        for line in result.applied:
            print(f"{name}: schema change applied: {line}")
        if result.capped_before:
            print(f"{name}: {result.capped_before} waits for the table's DAG (events before it are pending)")
    return done


def send_signal(plan: dict[str, Any]) -> dict[str, Any]:
    """Send the run's signal through the configured channel; returns its ids and when it was sent."""
    import time

    from cdclake.settings import Settings
    from cdclake.snapshot import Signal, send_kafka_signal, send_source_signal

    from cdclake_airflow.connections import kafka_bootstrap

    settings = Settings.from_env()
    s = plan["signal"]
    signal = Signal(s["id"], s["type"], s["data"])
    sent_ms = int(time.time() * 1000)
    ids = [signal.id]
    if settings.signal_channel == "kafka":
        offset = send_kafka_signal(kafka_bootstrap(KAFKA_CONN_ID), settings.signal_topic, settings.topic_prefix, signal)
        ids.append(str(offset))  # the connector names a Kafka-channel signal by its offset
        print(f"signal {signal.type} {signal.data_json} on {settings.signal_topic!r} at offset {offset}")
    else:
        import pymysql
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(SOURCE_DB_CONN_ID)
        db = pymysql.connect(host=conn.host, port=int(conn.port or 3306), user=conn.login,
                             password=conn.password or "", autocommit=True, charset="utf8mb4")
        with db:
            inserted = send_source_signal(db, settings.signal_table, signal)
        print(f"signal {signal.id} {signal.type} {signal.data_json} into {settings.signal_table}: "
              f"{'inserted' if inserted else 'already there (a retry): not sent again'}")
    return {"signal_ids": ids, "sent_ms": sent_ms - 60_000}


def check_snapshot(plan: dict[str, Any], sent: dict[str, Any], end: dict[str, Any]) -> list[dict[str, Any]]:
    """Fail on a failed or aborted snapshot; otherwise note each table's data-topic end offsets.

    Returns one ``{"table", "dag_id", "topic", "end_offsets"}`` per table, for the mapped tasks.
    """
    from cdclake.config import load_tables
    from cdclake.kafka_io import topic_watermarks
    from cdclake.settings import Settings
    from cdclake.snapshot import check_scan, read_notifications, scan_results

    from cdclake_airflow.connections import kafka_bootstrap

    settings = Settings.from_env()
    bootstrap = kafka_bootstrap(KAFKA_CONN_ID)
    collections = list(plan["collections"].values())
    results = scan_results(read_notifications(bootstrap, settings.notification_topic),
                           sent["signal_ids"], plan["snapshot_type"], sent["sent_ms"], collections)
    print(f"snapshot ended with {end.get('type')}; table scans: {results}")
    check_scan(end, results, collections)
    tables = load_tables(settings.tables_config)
    noted = []
    for name in plan["tables"]:
        cfg = tables.get(name)
        marks = topic_watermarks(bootstrap, cfg.topic)
        noted.append({"table": name, "dag_id": cfg.dag_id, "topic": cfg.topic,
                      "end_offsets": {str(p): o for p, o in marks.high.items()}})
        print(f"{name}: {cfg.topic} end offsets {marks.high}: finished when committed past them")
    return noted


def applied(target: dict[str, Any]) -> Any:
    """Sensor: has the table committed offsets at or past the noted end offsets?"""
    from airflow.sdk import PokeReturnValue

    from cdclake.config import load_tables
    from cdclake.lake import committed_offsets, load_catalog, load_table_or_none
    from cdclake.settings import Settings
    from cdclake.snapshot import caught_up

    settings = Settings.from_env()
    cfg = load_tables(settings.tables_config).get(target["table"])
    table = load_table_or_none(load_catalog(settings), cfg.identifier)
    committed = committed_offsets(table, cfg.topic) if table is not None else None
    end = {int(p): o for p, o in target["end_offsets"].items()}
    done = caught_up(committed, end)
    print(f"{cfg.identifier}: committed {committed}, snapshot end {end}: {'applied' if done else 'not yet'}")
    return PokeReturnValue(is_done=done, xcom_value={"table": cfg.identifier, "committed": committed})


class NotificationSensor(BaseSensorOperator):
    """Deferrable wait on Debezium's notification topic: the Kafka provider's
    ``AwaitMessageTrigger`` runs in the triggerer (no worker slot) and fires on the first record
    for which ``apply_function(message, **apply_function_kwargs)`` returns a value. The trigger is
    imported when the task runs: the provider's own ``AwaitMessageSensor`` module imports
    confluent-kafka, which DAG parsing must not. It never commits consumer offsets, so each wait
    reads the topic from its start."""

    template_fields = ("topics", "apply_function_kwargs")

    def __init__(self, *, kafka_config_id: str, topics: list[str], apply_function: str,
                 apply_function_kwargs: dict[str, Any], **kwargs: Any) -> None:
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
                topics=self.topics, apply_function=self.apply_function,
                apply_function_kwargs=self.apply_function_kwargs,
                kafka_config_id=self.kafka_config_id, poll_timeout=1, poll_interval=0.05,
                commit_offset=False,
            ),
            method_name="execute_complete",
            timeout=timeout,
        )

    def execute_complete(self, context: Any, event: Any = None) -> Any:
        print(f"snapshot notification: {event}")
        return event


def build_bootstrap_dag(settings: Settings, tables: list[TableConfig]) -> DAG:
    """The DAG ``cdc_snapshot_bootstrap`` for the configured ``tables``."""
    from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
    from airflow.sdk import DAG, Param, task

    names = [t.name for t in tables]
    with DAG(
        dag_id=DAG_ID,
        description="Snapshot-bootstrap Iceberg tables through Debezium signals (manual)",
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        default_args={"owner": "data-platform", "retries": 2, "retry_delay": timedelta(seconds=30)},
        tags=["cdc", "bootstrap"],
        doc_md=__doc__,
        # the sensor's apply_function takes lists and numbers from XCom, not their str()
        render_template_as_native_obj=True,
        params={
            "tables": Param(
                names[:1], type="array", items={"type": "string", "enum": names} if names else {"type": "string"},
                title="Tables", description="Tables of the table config to snapshot.", examples=names,
            ),
            "snapshot_type": Param(
                "incremental", type="string", enum=["incremental", "blocking"], title="Snapshot type",
                description="incremental: chunked, interleaved with streaming (no locks); blocking: "
                            "streaming pauses while the tables are read.",
            ),
            "additional_conditions": Param(
                {}, type="object", title="Filters (additional-conditions)",
                description='Optional SQL filter per table, e.g. {"orders": "id > 1000"}; rows '
                            "outside the filter are not re-read.",
            ),
            "action": Param(
                "execute", type="string", enum=["execute", "stop", "pause", "resume"], title="Action",
                description="execute a snapshot, or stop / pause / resume the running one.",
            ),
        },
    ) as dag:
        plan = task(task_id="prepare")(prepare)()
        ensured = task(task_id="ensure_tables")(ensure_tables)(plan)
        sent = task(task_id="signal")(send_signal)(plan)
        ensured >> sent
        executing = task.short_circuit(task_id="is_execute")(lambda p: p["action"] == "execute")(plan)
        sent >> executing
        wait = NotificationSensor(
            task_id="wait_for_snapshot",
            kafka_config_id=NOTIFICATIONS_CONN_ID,
            topics=[settings.notification_topic],
            apply_function="cdclake.snapshot.match_notification",
            apply_function_kwargs={
                "signal_ids": "{{ ti.xcom_pull(task_ids='signal')['signal_ids'] }}",
                "snapshot_type": "{{ params.snapshot_type }}",
                "since_ms": "{{ ti.xcom_pull(task_ids='signal')['sent_ms'] }}",
                "data_collections": "{{ ti.xcom_pull(task_ids='prepare')['collections'].values() | list }}",
            },
            timeout=timedelta(hours=12),
            retries=0,
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
            task_id="wait_until_applied", poke_interval=15, timeout=12 * 3600, mode="reschedule",
        )(applied).expand(target=noted)
        trigger >> waiting
    return dag
