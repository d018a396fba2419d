"""The production topology's demo (``make demo-production``, ``cdclake production demo``): a
workload on the source tables through the real chain (MariaDB, Debezium, Kafka with SASL) and the
scheduled DAGs, then every Iceberg table compared with its source.

The source tables ``inventory.customers``, ``products`` and ``orders`` get first rows (Debezium's
initial snapshot: ``r`` events) and rounds of inserts, updates and deletes (``c``/``u``/``d``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cdclake.settings import Settings
from cdclake_dev import chain
from cdclake_dev.parts.airflow import TERMINAL_RUN_STATES, AirflowProcesses
from cdclake_dev.production import Topology

log = logging.getLogger(__name__)

_DDL = (
    """CREATE TABLE IF NOT EXISTS inventory.customers (
      id INT NOT NULL PRIMARY KEY, name VARCHAR(60) NOT NULL, email VARCHAR(120) NULL,
      created DATETIME(6) NULL)""",
    """CREATE TABLE IF NOT EXISTS inventory.products (
      id INT NOT NULL PRIMARY KEY, name VARCHAR(60) NOT NULL, price DECIMAL(10,2) NOT NULL,
      weight DOUBLE NULL, active BOOLEAN NOT NULL DEFAULT TRUE)""",
    """CREATE TABLE IF NOT EXISTS inventory.orders (
      id BIGINT NOT NULL PRIMARY KEY, customer_id INT NOT NULL, product_id INT NOT NULL,
      qty INT NOT NULL, note VARCHAR(100) NULL)""",
)

SOURCE_TABLES = ("customers", "products", "orders")


def load_initial_rows(settings: Settings, rows: int = 200) -> None:
    """Create the source tables and their first ``rows`` rows each (Debezium reads them in its
    initial snapshot: ``r`` events)."""
    conn = chain.mariadb_connect(settings)
    try:
        with conn.cursor() as cur:
            for ddl in _DDL:
                cur.execute(ddl)
            cur.execute("SELECT COUNT(*) FROM inventory.customers")
            if cur.fetchone()[0]:
                return
            cur.executemany(
                "INSERT INTO inventory.customers VALUES (%s, %s, %s, %s)",
                [
                    (i, f"customer {i}", f"c{i}@example.com", f"2026-01-01 00:00:{i % 60:02d}.123456")
                    for i in range(1, rows + 1)
                ],
            )
            cur.executemany(
                "INSERT INTO inventory.products VALUES (%s, %s, %s, %s, %s)",
                [(i, f"product {i}", f"{i}.{i % 100:02d}", i / 7, i % 5 != 0) for i in range(1, rows + 1)],
            )
            cur.executemany(
                "INSERT INTO inventory.orders VALUES (%s, %s, %s, %s, %s)",
                [(i, 1 + i % rows, 1 + (i * 7) % rows, 1 + i % 9, None) for i in range(1, rows + 1)],
            )
    finally:
        conn.close()


def change_rows(settings: Settings, round_no: int, rows: int = 200) -> None:
    """One round of changes on every table: inserts, updates, deletes (``c``/``u``/``d``)."""
    base = rows + 1000 * round_no
    conn = chain.mariadb_connect(settings)
    try:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO inventory.customers VALUES (%s, %s, %s, NOW(6))",
                [(base + i, f"new customer {base + i}", None) for i in range(25)],
            )
            cur.execute(
                "UPDATE inventory.customers SET email = CONCAT('r', %s, '-', email) WHERE id %% 7 = %s",
                (round_no, round_no % 7),
            )
            cur.execute("DELETE FROM inventory.customers WHERE id %% 11 = %s AND id <= %s", (round_no % 11, rows))
            cur.execute(
                "UPDATE inventory.products SET price = price + 1.25, active = NOT active WHERE id %% 5 = %s",
                (round_no % 5,),
            )
            cur.execute("DELETE FROM inventory.products WHERE id %% 13 = %s AND id <= %s", (round_no % 13, rows))
            cur.executemany(
                "INSERT INTO inventory.orders VALUES (%s, %s, %s, %s, %s)",
                [(base + i, 1 + i, 1 + i, i % 4 + 1, f"round {round_no}") for i in range(40)],
            )
            cur.execute(
                "UPDATE inventory.orders SET qty = qty * 2, note = %s WHERE id %% 3 = %s",
                (f"doubled {round_no}", round_no % 3),
            )
            cur.execute("DELETE FROM inventory.orders WHERE id %% 17 = %s", (round_no % 17,))
    finally:
        conn.close()


def source_rows(settings: Settings, table: str) -> dict[Any, dict[str, Any]]:
    """``SELECT *`` of ``inventory.<table>``, by primary key ``id``."""
    conn = chain.mariadb_connect(settings)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM inventory.{table}")
            names = [d[0] for d in cur.description]
            return {row[0]: dict(zip(names, row, strict=True)) for row in cur.fetchall()}
    finally:
        conn.close()


def lake_rows(settings: Settings, identifier: str, columns: list[str]) -> dict[Any, dict[str, Any]]:
    """The Iceberg table's rows (``columns`` only), by ``id``, through pyiceberg."""
    from cdclake.io.catalog import load_catalog

    table = load_catalog(settings).load_table(identifier)
    data = table.scan(selected_fields=tuple(columns)).to_arrow().to_pylist()
    return {row["id"]: row for row in data}


def differences(source: Mapping[Any, Mapping[str, Any]], lake: Mapping[Any, Mapping[str, Any]]) -> list[str]:
    """What differs between the source's rows and the lake's (keys, then values compared as
    their ``str``: DECIMAL/Decimal, DATETIME/datetime, BOOLEAN/bool and DOUBLE print alike)."""

    def norm(value: Any) -> str:
        if isinstance(value, bool):
            return str(int(value))
        if hasattr(value, "tzinfo") and getattr(value, "tzinfo", None) is not None:
            value = value.replace(tzinfo=None)
        return str(value)

    out = []
    missing = sorted(set(source) - set(lake))
    extra = sorted(set(lake) - set(source))
    if missing:
        out.append(f"{len(missing)} key(s) missing from the lake: {missing[:10]}")
    if extra:
        out.append(f"{len(extra)} key(s) only in the lake: {extra[:10]}")
    for key in sorted(set(source) & set(lake)):
        a = {k: norm(v) for k, v in source[key].items()}
        b = {k: norm(lake[key].get(k)) for k in source[key]}
        if a != b:
            out.append(f"key {key}: source {a} lake {b}")
            if len(out) > 20:
                break
    return out


def wait_published(settings: Settings, topology: Topology, timeout_s: float = 180.0) -> dict[str, int]:
    """Wait until Debezium has published every change made so far: the topics' high watermarks
    stop moving for 5 s after the connector reports RUNNING. Returns events per topic."""
    from cdclake.io.kafka import KafkaClients, topics_watermarks
    from cdclake.model.config import load_tables

    kafka = KafkaClients(topology.kafka_config())
    topics = [t.topic for t in load_tables(settings.tables_config).tables]
    deadline = time.monotonic() + timeout_s
    last: dict[str, int] | None = None
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        marks = topics_watermarks(kafka, topics)
        now = {t: (sum(m.high.values()) if m else -1) for t, m in marks.items()}
        if now != last:
            last, stable_since = now, time.monotonic()
        elif min(now.values()) > 0 and time.monotonic() - stable_since >= 5.0:
            return now
        time.sleep(1.0)
    raise TimeoutError(f"Debezium's topics did not settle within {timeout_s:.0f} s: {last}")


# --- the demo: the workload through the real chain and the scheduled DAGs -----------------------


@dataclass
class DemoResult:
    """What :func:`run_demo` found: per table, the differences between source and lake (empty:
    equal); the reconcile run's state; the DAG runs (as the REST API lists them); for each
    daily DAG whose run did not succeed, the tail of its task logs (why)."""

    differences: dict[str, list[str]]
    reconcile_state: str
    maintenance_state: str
    runs: list[dict[str, Any]]
    failure_logs: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (
            self.reconcile_state == "success"
            and self.maintenance_state == "success"
            and not any(self.differences.values())
        )


def caught_up_tables(topology: Topology) -> dict[str, bool]:
    """Per table name: has the Iceberg table committed every event its topic holds now?"""
    from cdclake.io.catalog import load_catalog, load_table_or_none
    from cdclake.io.kafka import KafkaClients, topics_watermarks
    from cdclake.io.refs import committed_offsets
    from cdclake.model.config import load_tables
    from cdclake.model.snapshot import caught_up

    settings = topology.task_settings()
    catalog = load_catalog(settings)
    tables = load_tables(settings.tables_config).tables
    marks = topics_watermarks(KafkaClients(topology.kafka_config()), [t.topic for t in tables])
    out = {}
    for cfg in tables:
        m = marks.get(cfg.topic)
        committed = committed_offsets(load_table_or_none(catalog, cfg.identifier), cfg.topic)
        out[cfg.name] = m is not None and caught_up(committed, m.high)
    return out


def _next_round(topology: Topology) -> int:
    path = topology.state_dir / "demo-rounds"
    n = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(n))
    return n


def run_workload(
    topology: Topology, airflow: AirflowProcesses, *, say: Any = log.info, timeout_s: float = 600.0
) -> DemoResult:
    """The demo's workload on a started topology (:meth:`Topology.start_parts`, the connector,
    :meth:`Topology.start_airflow`): a round of changes applied by runs triggered and awaited
    through the REST API, a second round left to the DAGs' schedules (every minute), then the
    ``cdc_reconcile`` and ``cdc_maintenance`` DAGs (unpaused once the tables exist: their
    scheduled runs) and a direct comparison of every table with
    ``SELECT *`` of its source.

    Raises:
        RuntimeError: a DAG run did not finish within ``timeout_s`` seconds.
    """
    from cdclake.model.config import load_tables

    settings = topology.settings
    tables = load_tables(settings.tables_config).tables
    dag_ids = {t.dag_id for t in tables}
    airflow.wait_dags(dag_ids | {"cdc_reconcile", "cdc_maintenance"}, timeout_s=timeout_s, unpaused=False)
    for dag_id in sorted(dag_ids):
        airflow.set_paused(dag_id, False)
    say(f"DAGs serialized; table DAGs unpaused (every minute): {sorted(dag_ids)}")

    change_rows(settings, _next_round(topology))
    wait_published(settings, topology)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for t in tables:  # triggered and awaited through the REST API
        airflow.trigger(t.dag_id, f"demo_{stamp}_{t.name}")
    for t in tables:
        run = airflow.wait_run(t.dag_id, f"demo_{stamp}_{t.name}", timeout_s=timeout_s)
        say(f"triggered run of {t.dag_id}: {run['state']}")

    change_rows(settings, _next_round(topology))
    wait_published(settings, topology)
    say("second round of changes published; waiting for the DAGs' scheduled runs (every minute)")
    deadline = time.monotonic() + timeout_s
    while True:
        done = caught_up_tables(topology)
        if all(done.values()):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the scheduled runs did not catch up within {timeout_s:.0f} s: {done}")
        time.sleep(5.0)
    say("every table caught up with its topic")

    # the daily DAGs, now that the tables exist: unpausing creates their latest scheduled run
    states, failure_logs = {}, {}
    for dag_id in ("cdc_reconcile", "cdc_maintenance"):
        airflow.set_paused(dag_id, False)
        states[dag_id], run_id = _wait_scheduled(airflow, dag_id, timeout_s)
        say(f"{dag_id} (scheduled): {states[dag_id]}")
        if states[dag_id] != "success":
            failure_logs[dag_id] = airflow.task_log_tail(dag_id, run_id)
            say(f"{dag_id} did not succeed; its task logs end with:\n{failure_logs[dag_id]}")

    task = topology.task_settings()
    diffs = {}
    for t in tables:
        source = source_rows(settings, t.table)
        columns = list(next(iter(source.values())).keys()) if source else ["id"]
        diffs[t.name] = differences(source, lake_rows(task, t.identifier, columns))
    runs = []
    for dag_id in sorted(dag_ids | {"cdc_reconcile", "cdc_maintenance"}):
        runs += airflow.get_all(f"dags/{dag_id}/dagRuns", "dag_runs")
    return DemoResult(diffs, states["cdc_reconcile"], states["cdc_maintenance"], runs, failure_logs)


def _wait_scheduled(airflow: AirflowProcesses, dag_id: str, timeout_s: float) -> tuple[str, str]:
    """Wait for the first scheduled run of ``dag_id`` to end; its state and run id.

    Raises:
        RuntimeError: no run ended within ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = airflow.get_all(f"dags/{dag_id}/dagRuns", "dag_runs")
        ended = [r for r in runs if r["state"] in TERMINAL_RUN_STATES]
        if ended:
            return str(ended[0]["state"]), str(ended[0]["dag_run_id"])
        time.sleep(3.0)
    raise RuntimeError(f"no run of {dag_id} ended within {timeout_s:.0f} s")


def format_runs(runs: list[dict[str, Any]]) -> str:
    """The DAG runs as a table: DAG, run type, state, start, end."""
    lines = [f"{'DAG':<28} {'type':<10} {'state':<9} {'start':<27} end"]
    for r in sorted(runs, key=lambda r: (r["dag_id"], r.get("start_date") or "")):
        lines.append(
            f"{r['dag_id']:<28} {r.get('run_type', ''):<10} {r.get('state', ''):<9} "
            f"{(r.get('start_date') or '')[:26]:<27} {(r.get('end_date') or '')[:26]}"
        )
    return "\n".join(lines)


def bring_up(topology: Topology, *, say: Any = log.info) -> AirflowProcesses:
    """Start the whole topology (idempotent for the parts): the parts, the source tables and
    their first rows, the Debezium connector (its initial snapshot published), Airflow."""
    for line in topology.start_parts():
        say(line)
    load_initial_rows(topology.settings)
    say(topology.start_connector())
    published = wait_published(topology.settings, topology)
    say(f"Debezium published {published}")
    airflow = topology.start_airflow()
    say(f"Airflow (api-server, scheduler, dag-processor, triggerer; LocalExecutor, PostgreSQL) on {airflow.base}")
    return airflow


def demo(
    topology: Topology,
    *,
    say: Any = log.info,
    keep: bool = False,
    show_tables: Callable[[Settings], None] | None = None,
) -> DemoResult:
    """``make demo-production``: bring the topology up, run the workload (:func:`run_workload`),
    show the tables (``show_tables`` gets the task settings), print the runs, and stop everything
    unless ``keep``."""
    try:
        airflow = bring_up(topology, say=say)
        result = run_workload(topology, airflow, say=say)
        if show_tables is not None:
            show_tables(topology.task_settings())
        say(format_runs(result.runs))
        for name, diffs in result.differences.items():
            say(
                f"{name}: "
                + ("equals its source" if not diffs else "DIFFERS from its source:\n  " + "\n  ".join(diffs))
            )
        return result
    finally:
        if not keep:
            for line in topology.stop():
                say(line)
