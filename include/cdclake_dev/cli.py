"""``cdclake``: what a data engineer does by hand on the local stack.

One subcommand per task, each built by :func:`build_parser` (``cdclake --help`` lists them all,
once; ``cdclake COMMAND --help`` gives a command's options). ``cdclake ui start|stop|status``
runs the Airflow UI on loopback (:mod:`cdclake_dev.airflow_env`).

An error of the project's own (:class:`~cdclake.errors.CdcLakeError`: a table not in the config,
an invalid config, a topic that does not exist, a port taken) is its message on stderr, after
``cdclake COMMAND:``, and exit code 2 (:func:`main`); anything else is a crash, with its traceback.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdclake.errors import CdcLakeError
from cdclake.settings import APPLY_POOL, APPLY_POOL_DESCRIPTION, PROJECT_ROOT, Settings
from cdclake_dev import engine
from cdclake_dev.airflow_env import UI_PORT
from cdclake_dev.views import format_status_table, show_table

if TYPE_CHECKING:
    from cdclake_dev.conformance import Dags

DEMO_FILES = {
    "inventory_products": Path("flink/debezium-data-schema-include.txt"),
    "inventory_customers": Path("risingwave/debezium_log.1"),
}
"""Captured Debezium files the demo replays, relative to the fixtures folder."""

BROKER_REMEDY = (
    "start the local stack's Kafka broker with `make stack-start` (or point CDCLAKE_KAFKA_BOOTSTRAP at a running one)"
)
"""What ``cdclake status`` and ``cdclake load`` say to do when Kafka does not answer."""

DEFAULT_FIXTURES = PROJECT_ROOT / "examples" / "debezium"
"""The captured Debezium files copied into the repository (``examples/debezium/README.md``)."""


def _settings() -> Settings:
    return Settings.from_env()


def cmd_stack(args: argparse.Namespace) -> int:
    from cdclake_dev import stack

    settings = _settings()
    with_engine = settings.engine == "connect"
    if args.action == "start":
        stack.check_start_ports(settings, with_engine=with_engine)  # PortTakenError: nothing started
        broker_was_running = stack.broker_status(settings).running
        print(stack.start_broker(settings))
        if with_engine:
            try:
                print(engine.start_engine(settings))
            except BaseException:
                if not broker_was_running:  # nothing left half-started
                    print(stack.stop_broker(settings), file=sys.stderr)
                raise
    elif args.action == "stop":
        print(_stop_ui(settings))
        if with_engine:
            print(engine.stop_engine(settings))
        print(_stop_registry(settings))
        print(stack.stop_broker(settings))
    else:
        status = stack.broker_status(settings)
        state = "running" if status.running else "not running"
        print(f"Kafka broker on {status.bootstrap}: {state} (pid {status.pid})")
        running = status.running
        if with_engine:
            running = _print_engine_status(settings) and running
        print(f"Iceberg catalog: {settings.catalog_name} at {settings.catalog_uri}")
        print(f"Warehouse: {settings.warehouse}")
        print(f"Airflow home: {settings.airflow_home}")
        return 0 if running else 3
    return 0


def _print_engine_status(settings: Settings) -> bool:
    status = engine.engine_status(settings)
    state = "running" if status.running else "not running"
    print(f"Spark Connect server on {status.url}: {state} (pid {status.pid}, log {settings.engine_dir / 'server.log'})")
    return status.running


def cmd_engine(args: argparse.Namespace) -> int:
    settings = _settings()
    if args.action == "start":
        print(engine.start_engine(settings))
    elif args.action == "stop":
        print(engine.stop_engine(settings))
    else:
        return 0 if _print_engine_status(settings) else 3
    return 0


def _stop_registry(settings: Settings) -> str:
    """Stop the local chain's schema registry (:func:`cdclake_dev.chain.local_registry`) if it runs."""
    from cdclake_dev.chain import local_registry

    pid = local_registry(settings).stop()
    return "Apicurio Registry not running" if pid is None else f"Apicurio Registry stopped (pid {pid})"


def cmd_chain(args: argparse.Namespace) -> int:
    from cdclake_dev import chain as source_chain
    from cdclake_dev import stack

    settings = _settings()
    if args.action == "start":
        print(stack.start_broker(settings))
        print(source_chain.start_mariadb(settings))
        registry = source_chain.local_registry(settings)
        if args.registry or args.avro:  # before the Avro connector, whose converter writes to it
            registry.start()
            print(
                f"Apicurio Registry on {registry.url} (storage {registry.dir / 'data'}); "
                f"for value_format: avro tables: export CDCLAKE_SCHEMA_REGISTRY_URL={registry.ccompat_url}"
            )
        print(
            source_chain.start_connect(
                settings,
                schemas_enable=not args.no_schemas,
                snapshot_mode=args.snapshot_mode,
                connectors=("json", *(("avro",) if args.avro else ()), *(("json-flat",) if args.flattened else ())),
                registry_url=registry.ccompat_url,
                avro_tables=args.avro_tables.split(",") if args.avro_tables else None,
                transaction_metadata=not args.no_transaction_metadata,
            )
        )
        prefix = settings.topic_prefix
        print(
            f"MariaDB: mariadb -h 127.0.0.1 -P {settings.mariadb_port} -u root inventory; "
            f"Debezium topics: {prefix}.inventory.<table>, schema changes: {prefix}, "
            f"notifications: {prefix}.notifications"
            + ("" if args.no_transaction_metadata else f", transactions: {prefix}.transaction")
            + (f"; Avro: the same under {prefix}{source_chain.AVRO_PREFIX_SUFFIX}" if args.avro else "")
            + (
                f"; flattened (ExtractNewRecordState): {prefix}{source_chain.PREFIX_SUFFIXES['json-flat']}.inventory.<table>"
                if args.flattened
                else ""
            )
        )
    elif args.action == "stop":
        print(source_chain.stop_connect(settings))
        print(_stop_registry(settings))
        print(source_chain.stop_mariadb(settings))
        print(stack.stop_broker(settings))
    else:
        registry = source_chain.local_registry(settings)
        print(f"Apicurio Registry on {registry.url}: {'running' if registry.running() else 'not running'}")
        try:
            for name in source_chain.connector_names(settings):
                status = source_chain.connector_status(settings, name)
                print(
                    f"connector {status['name']}: {status['connector']['state']}, tasks "
                    f"{[t['state'] for t in status['tasks']]}"
                )
        except OSError as e:
            print(f"Kafka Connect not answering on port {settings.connect_port}: {e}")
            return 3
    return 0


def cmd_load(args: argparse.Namespace) -> int:
    """Produce a captured file's events into the table's topic; a file that cannot be loaded is one
    line naming the file and the line of the event (nothing produced), a broker that does not
    answer one line with the remedy."""
    from confluent_kafka import KafkaException

    from cdclake.errors import CdcLakeError
    from cdclake.io.events import load_events
    from cdclake.io.kafka import KafkaClients
    from cdclake.model.config import load_tables

    settings = _settings()
    kafka = KafkaClients.from_settings(settings)
    try:
        cfg = load_tables(settings.tables_config, settings.discovery_registry).get(args.table)
        counts = load_events(Path(args.file), cfg, kafka, partitions=args.partitions)
    except (CdcLakeError, ValueError, OSError) as e:  # the file, its events or the table name
        print(f"cdclake load: {e}", file=sys.stderr)
        return 2
    except KafkaException as e:
        error = e.args[0].str() if e.args and hasattr(e.args[0], "str") else str(e)
        print(f"cdclake load: Kafka at {kafka.bootstrap} did not answer: {error}: {BROKER_REMEDY}", file=sys.stderr)
        return 3
    total = sum(counts.values())
    print(
        f"loaded {total} event(s) from {args.file} into {cfg.topic!r}: "
        + ", ".join(f"partition {p}: {n}" for p, n in sorted(counts.items()))
    )
    return 0


def run_airflow(
    argv: list[str], settings: Settings | None = None, *, dags_folder: Path | None = None, **kwargs: Any
) -> subprocess.CompletedProcess:
    """Run the ``airflow`` CLI of this virtual environment with the local stack's environment
    (``dags_folder``: another DAGs folder than the project's ``dags/``, such as ``examples/dags``)."""
    airflow = str(Path(sys.executable).parent / "airflow")
    return subprocess.run([airflow, *argv], env=_airflow_command_env(settings, dags_folder), **kwargs)


def _airflow_command_env(settings: Settings | None, dags_folder: Path | None = None) -> dict[str, str]:
    """The environment of an ``airflow`` command of the local stack (its home created)."""
    from cdclake_dev.airflow_env import airflow_env

    settings = settings or _settings()
    settings.airflow_home.mkdir(parents=True, exist_ok=True)
    env = airflow_env(settings)
    if dags_folder is not None:
        env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags_folder)
    return env


def ensure_airflow_db(settings: Settings) -> None:
    """Create or upgrade the local Airflow metadata DB and its pool ``cdc_apply`` of
    ``CDCLAKE_APPLY_POOL_SLOTS`` slots (idempotent; quick when current)."""
    marker = settings.airflow_home / ".migrated"
    if not marker.exists():
        run_airflow(["db", "migrate"], settings, check=True, stdout=subprocess.DEVNULL)
        marker.touch()
    pool_marker = settings.airflow_home / f".pool-{settings.apply_pool_slots}"
    if not pool_marker.exists():
        run_airflow(
            ["pools", "set", APPLY_POOL, str(settings.apply_pool_slots), APPLY_POOL_DESCRIPTION],
            settings,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        for old in settings.airflow_home.glob(".pool-*"):
            old.unlink()
        pool_marker.touch()


def run_table_dag(name: str, settings: Settings | None = None, conf: dict | None = None) -> int:
    """Run ``cdc_<name>`` once with ``airflow dags test`` (``conf``: the trigger form's Params);
    returns 0 when the run succeeded."""

    from cdclake.model.config import load_tables

    settings = settings or _settings()
    cfg = load_tables(settings.tables_config, settings.discovery_registry).get(name)
    ensure_airflow_db(settings)
    if (cfg.engine or settings.engine) == "connect":
        engine.start_engine(settings)  # quick when it runs
    return _dags_test(cfg.dag_id, conf, settings)


def run_shared_dag(name: str, settings: Settings | None = None) -> int:
    """Run the shared DAG ``cdc_shared_<name>`` once with ``airflow dags test``; returns 0 when the
    run succeeded (every task's every table)."""
    from cdclake.model.shared import SHARED_DAG_PREFIX

    settings = settings or _settings()
    ensure_airflow_db(settings)
    engine.start_engine(settings)  # quick when it runs
    return _dags_test(f"{SHARED_DAG_PREFIX}{name}", None, settings)


def run_group_dag(group: str, settings: Settings | None = None) -> int:
    """Run the group DAG ``cdc_group_<group>`` once with ``airflow dags test`` (its ``publish``
    moves the members' ``main`` to one source transaction boundary, or is skipped); returns 0 when
    the run succeeded."""
    settings = settings or _settings()
    ensure_airflow_db(settings)
    return _dags_test(f"cdc_group_{group}", None, settings)


def failure_cause(output: str) -> str | None:
    """The exception a failed task raised, from ``airflow dags test`` output: the exception line
    (``ValueError: ...``) of the last traceback and the lines of its message up to the next log
    line (at most :data:`CAUSE_LINES`); ``None`` when the output holds no traceback."""
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last):")]
    if not starts:
        return None
    cause: list[str] = []
    for line in lines[starts[-1] + 1 :]:
        if not cause:
            if line and not line[0].isspace():  # the frames are indented; the exception line is not
                cause.append(line)
            continue
        if not line.strip() or _LOG_LINE.match(line) or len(cause) >= CAUSE_LINES:
            break
        cause.append(line)
    return "\n".join(cause) or None


CAUSE_LINES = 12
"""The most lines of an exception message :func:`failure_cause` keeps."""
_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT")  # a log line of Airflow's (ISO 8601 time first)


def _dags_test(dag_id: str, conf: dict | None, settings: Settings) -> int:
    """``airflow dags test DAG_ID [--conf JSON]``: its output, its task logs written where the UI
    reads them (:func:`cdclake_dev.task_logs.write_task_logs`), and when the run did not succeed, a
    last line saying so with the cause (:func:`failure_cause`). Returns 0 when it succeeded."""
    import json

    from cdclake_dev import warm_airflow
    from cdclake_dev.airflow_env import task_log_folder
    from cdclake_dev.task_logs import write_task_logs

    argv = ["dags", "test", dag_id] + (["--conf", json.dumps(conf)] if conf else [])
    warm = warm_airflow.enabled()  # the test suite's warm server (cdclake_dev.warm_airflow)
    if warm is not None:
        proc = warm_airflow.run(argv, _airflow_command_env(settings), warm)
    else:
        proc = run_airflow(argv, settings, capture_output=True, text=True)
    sys.stdout.write(proc.stdout[-20000:])
    sys.stderr.write(proc.stderr[-20000:])
    output = proc.stdout + proc.stderr
    write_task_logs(output, dag_id, task_log_folder(settings))
    if proc.returncode == 0 and "state=success" in output.replace(" ", ""):
        return 0
    cause = failure_cause(output) or "see the log above"
    sys.stdout.flush()
    print(f"DAG {dag_id} did not succeed (exit code {proc.returncode}); the cause:\n{cause}", file=sys.stderr)
    return proc.returncode or 1


def cmd_run(args: argparse.Namespace) -> int:
    import json

    conf = {}
    if args.replay_from_offsets:
        conf["replay_from_offsets"] = json.loads(args.replay_from_offsets)
    if args.replay_from_timestamp:
        conf["replay_from_timestamp"] = args.replay_from_timestamp
    return run_table_dag(args.table, conf=conf or None)


def run_maintenance(
    tables: list[str], actions: list[str] | None = None, dry_run: bool = False, settings: Settings | None = None
) -> int:
    """Run ``cdc_maintenance`` once with ``airflow dags test`` (its Params: ``tables``, empty for
    all; ``actions``, ``None`` for all; ``dry_run``); returns 0 when the run succeeded.

    Raises:
        ConfigError: a table or action name that is not known (names the known ones).
    """

    from cdclake.model.config import load_tables
    from cdclake.model.maintenance import check_actions
    from cdclake.model.selection import select_tables

    settings = settings or _settings()
    # unknown names: ConfigError
    select_tables(load_tables(settings.tables_config, settings.discovery_registry).tables, tables)
    chosen = list(check_actions(actions)) if actions else []
    ensure_airflow_db(settings)
    if settings.engine == "connect":
        engine.start_engine(settings)  # quick when it runs
    return _dags_test("cdc_maintenance", {"tables": tables, "actions": chosen, "dry_run": dry_run}, settings)


def cmd_maintain(args: argparse.Namespace) -> int:
    from cdclake.errors import ConfigError

    try:
        return run_maintenance(args.tables, args.actions.split(",") if args.actions else None, args.dry_run)
    except ConfigError as e:
        print(f"cdclake maintain: {e}", file=sys.stderr)
        return 2


def cmd_reconcile(args: argparse.Namespace) -> int:
    """Reconcile a table of the local stack with the local MariaDB (the DAG ``cdc_reconcile`` does
    the same in Airflow); the table's DAG is run to catch the lake up."""
    from cdclake.io.catalog import load_catalog, load_table_or_none
    from cdclake.io.kafka import KafkaClients
    from cdclake.io.refs import committed_offsets
    from cdclake.model.config import load_tables
    from cdclake.model.snapshot import caught_up
    from cdclake.pipeline.reconcile import ReconcileParams, reconcile_table
    from cdclake_dev.chain import local_source

    settings = _settings()
    cfg = load_tables(settings.tables_config, settings.discovery_registry).get(args.table)
    catalog = load_catalog(settings)

    def catch_up(end: dict[int, int]) -> None:
        for _ in range(20):
            if caught_up(committed_offsets(load_table_or_none(catalog, cfg.identifier), cfg.topic), end):
                return
            if run_table_dag(args.table, settings) != 0:
                raise SystemExit(f"the run of {cfg.dag_id} failed: the lake cannot catch up")

    params = ReconcileParams(mode=args.mode, chunk_rows=args.chunk_rows, ignored_columns=cfg.reconcile.ignored_columns)
    result = reconcile_table(
        settings, KafkaClients.from_settings(settings), cfg, local_source(settings), params, catch_up
    )
    print(result.summary())
    for which in ("only_in_source", "only_in_lake", "differing"):
        keys = sorted(result.keys(which), key=repr)
        if keys:
            print(f"  {which}: {keys[:50]}{' ...' if len(keys) > 50 else ''}")
    if result.history is not None:
        print(result.history.message())
    return 1 if result.differences or result.history_differences else 0


def cmd_quarantine(args: argparse.Namespace) -> int:
    from cdclake.io.catalog import load_catalog, load_table_or_none
    from cdclake.io.maintenance import release_quarantined
    from cdclake.model.config import load_tables
    from cdclake.model.layout import QUARANTINE_SUFFIX, side_table

    settings = _settings()
    cfg = load_tables(settings.tables_config, settings.discovery_registry).get(args.table)
    catalog = load_catalog(settings)
    if args.action == "release":
        if args.partition is None or args.offset is None:
            print("release needs --partition and --offset", file=sys.stderr)
            return 2
        n = release_quarantined(catalog, cfg.identifier, args.partition, args.offset)
        print(
            f"released {n} quarantine entr{'y' if n == 1 else 'ies'}; replay from offset "
            f"{args.offset} of partition {args.partition} to apply the held-back events:\n"
            f"  cdclake run {cfg.name} --replay-from-offsets '{{\"{args.partition}\": {args.offset}}}'"
        )
        return 0
    table = load_table_or_none(catalog, side_table(cfg.identifier, QUARANTINE_SUFFIX))
    if table is None:
        print(f"{cfg.identifier}: nothing was ever quarantined")
        return 0
    arrow = (
        table.scan()
        .to_arrow()
        .drop_columns(["key", "value"])
        .sort_by([("partition", "ascending"), ("offset", "ascending")])
    )
    print(arrow.to_pandas().to_string(index=False) if arrow.num_rows else "(empty)")
    return 0


def cmd_upgrade(args: argparse.Namespace) -> int:
    """Upgrade a table's Iceberg format version in place (:func:`cdclake.pipeline.format_version.upgrade_table`);
    a downgrade, a missing table or a catalog that cannot hold the version is a
    :class:`~cdclake.errors.FormatVersionError` (exit code 2, :func:`main`)."""
    from cdclake.io.catalog import load_catalog
    from cdclake.model.config import load_tables
    from cdclake.pipeline.format_version import upgrade_table

    settings = _settings()
    cfg = load_tables(settings.tables_config, settings.discovery_registry).get(args.table)
    print(upgrade_table(load_catalog(settings), cfg, args.format_version).message())
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    sys.stdout.write(show_table(args.table, limit=args.limit, metadata_columns=args.metadata))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Print the status figures of the configured tables (all, or those named), then the
    published position of each of their groups."""
    import json
    import time

    from cdclake.errors import ConfigError
    from cdclake.io.catalog import load_catalog
    from cdclake.io.kafka import KafkaClients
    from cdclake.model.config import load_tables
    from cdclake.model.listing import page_of
    from cdclake.model.selection import select_tables
    from cdclake.pipeline.groups import group_statuses
    from cdclake.pipeline.status import status_report
    from cdclake_dev.views import format_page_summary, format_sources

    settings = _settings()
    try:
        tables = select_tables(load_tables(settings.tables_config, settings.discovery_registry).tables, args.tables)
    except ConfigError as e:
        print(f"cdclake status: {e}", file=sys.stderr)
        return 2
    kafka = KafkaClients.from_settings(settings)
    catalog = load_catalog(settings)
    report = status_report(
        catalog, kafka, tables, freshness_minutes=args.freshness_minutes, sources=_source_probe(settings)
    )
    statuses = report.tables
    cut = page_of(
        statuses,
        name_of=lambda s: s.name,
        fresh_of=lambda s: s.fresh,
        name=args.name,
        state=args.state,
        page=args.page,
        page_size=args.page_size,
    )
    kafka_down = report.kafka_problem if statuses and all(s.topic_exists is None for s in statuses) else None
    if args.json:
        print(json.dumps([s.model_dump(mode="json") for s in cut.rows], indent=2))
    else:
        if kafka_down is not None:  # the cause first: every figure from Kafka below is unknown
            print(f"{kafka_down}: every figure from Kafka below is unknown\n")
        with_fresh = args.freshness_minutes is not None or any(t.freshness_minutes for t in tables)
        sys.stdout.write(format_sources(report.sources))
        sys.stdout.write(
            format_page_summary(cut)
            + format_status_table(cut.rows, with_fresh=with_fresh, said=() if kafka_down is None else (kafka_down,))
        )
        now_ms = int(time.time() * 1000)
        for group in group_statuses(catalog, tables):
            print(group.describe(now_ms))
    if kafka_down is not None:
        print(f"cdclake status: Kafka is down: {BROKER_REMEDY}", file=sys.stderr)
        return 3
    return 0


def _source_probe(settings: Settings) -> Any:
    """The sources ``cdclake status`` asks about: Kafka Connect of ``CDCLAKE_CONNECT_URL`` and the
    local chain's MariaDB (as ``cdclake reconcile``); ``None`` without ``CDCLAKE_CONNECT_URL``."""
    from cdclake.io.connect import connect_from_settings
    from cdclake.pipeline.sources import SourceProbe
    from cdclake_dev.chain import local_source

    connect = connect_from_settings(settings)
    if connect is None:
        return None
    return SourceProbe(connect, local_source(settings), f"the local MariaDB on port {settings.mariadb_port}")


def cmd_discover(args: argparse.Namespace) -> int:
    """List what the table config's ``discover`` patterns take of the cluster's topics (a dry run);
    ``--write`` registers the new ones, as the ``cdc_discovery`` DAG does."""
    import json
    import time
    from dataclasses import asdict

    from cdclake.errors import ConfigError
    from cdclake.io.catalog import load_catalog
    from cdclake.io.kafka import KafkaClients
    from cdclake.model.config import load_tables
    from cdclake.pipeline.discovery import discover
    from cdclake_dev.views import format_findings

    settings = _settings()
    try:
        tables = load_tables(settings.tables_config)  # the file alone: registered topics are read apart
        if not tables.discover:
            print(f"cdclake discover: the table config {settings.tables_config} has no discover patterns")
            return 0
        kafka = KafkaClients.from_settings(settings)
        now_ms = int(time.time() * 1000)
        findings = discover(
            tables, kafka, settings.discovery_registry, write=args.write, now_ms=now_ms, catalog=load_catalog(settings)
        )
    except ConfigError as e:
        print(f"cdclake discover: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([asdict(f) for f in findings], indent=2))
        return 0
    sys.stdout.write(format_findings(findings))
    new = sum(f.state == "new" for f in findings)
    if args.write:
        print(f"registered {new} new topic(s) in {settings.discovery_registry}")
    else:
        print(f"dry run: {new} new topic(s) to register; `cdclake discover --write` registers them")
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    """The local Airflow UI (:func:`cdclake_dev.airflow_env.ui_processes`): start, stop, status."""
    from cdclake_dev.airflow_env import UI_USER, ensure_password, ui_processes

    settings = _settings()
    if args.action == "stop":
        print(_stop_ui(settings))
        return 0
    airflow = ui_processes(settings, args.port)
    if args.action == "status":
        states = {name: "running" if d.running() else "not running" for name, d in airflow.procs.items()}
        print(f"Airflow UI on {airflow.base}: " + ", ".join(f"{name} {state}" for name, state in states.items()))
        return 0 if all(d.running() for d in airflow.procs.values()) else 3
    ensure_airflow_db(settings)
    passwords = ensure_password(settings)  # before the api-server starts: it would print a password it generates
    took = airflow.start()
    print(
        f"Airflow UI on {airflow.base} (127.0.0.1 only; ready in {took:.0f} s): user {UI_USER}, its password in "
        f"{passwords}; logs in {airflow.logs}; stop it with `make airflow-stop` (cdclake ui stop)"
    )
    return 0


def _stop_ui(settings: Settings) -> str:
    """Stop the local UI's Airflow processes, each with its process group (task processes too)."""
    from cdclake_dev.airflow_env import ui_processes

    airflow = ui_processes(settings)
    pids = [pid for pid in airflow.stop() if pid is not None]
    return f"Airflow UI stopped (pids {pids})" if pids else "Airflow UI not running"


def cmd_airflow(args: argparse.Namespace) -> int:
    settings = _settings()
    ensure_airflow_db(settings)
    return run_airflow(args.airflow_args, settings).returncode


def cmd_demo(args: argparse.Namespace) -> int:
    from cdclake.io.events import load_events
    from cdclake.io.kafka import KafkaClients, topic_watermarks
    from cdclake.model.config import load_tables
    from cdclake_dev import stack

    settings = _settings()
    if args.avro:
        from cdclake_dev import demo_avro

        return demo_avro.demo(
            settings,
            run_dag=lambda name, s: _run_quiet(name, s) if args.quiet else run_table_dag(name, s),
            say=lambda line: print(line, flush=True),
        )
    kafka = KafkaClients.from_settings(settings)
    print(stack.start_broker(settings))
    tables = load_tables(settings.tables_config, settings.discovery_registry)
    fixtures = Path(args.fixtures)
    for name, rel in DEMO_FILES.items():
        cfg = tables.get(name)
        try:
            already = sum(topic_watermarks(kafka, cfg.topic).high.values())
        except LookupError:
            already = 0
        if already:
            print(f"{cfg.topic!r} already holds {already} event(s); not loading {rel} again")
        else:
            counts = load_events(fixtures / rel, cfg, kafka, partitions=args.partitions)
            print(f"loaded {sum(counts.values())} event(s) of {rel} into {cfg.topic!r} ({len(counts)} partition(s))")
    for name in DEMO_FILES:
        print(f"--- running DAG cdc_{name} (airflow dags test) ---", flush=True)
        rc = run_table_dag(name, settings) if not args.quiet else _run_quiet(name, settings)
        if rc:
            return rc
    for name in DEMO_FILES:
        sys.stdout.write(show_table(name, limit=50, metadata_columns=False, settings=settings))
    return 0


def cmd_production(args: argparse.Namespace) -> int:
    from cdclake_dev import production, production_demo

    topology = production.Topology(Path(args.state_dir))
    if args.action == "stop":
        for line in topology.stop():
            print(line)
        return 0

    def show_tables(settings: Settings) -> None:
        from cdclake.model.config import load_tables

        for cfg in load_tables(settings.tables_config, settings.discovery_registry).tables:
            sys.stdout.write(show_table(cfg.name, limit=10, metadata_columns=False, settings=settings))

    result = production_demo.demo(
        topology, say=lambda line: print(line, flush=True), keep=args.keep, show_tables=show_tables
    )
    if args.keep:
        print(f"the topology keeps running (state {topology.state_dir}); `cdclake production stop` stops it")
    if not result.ok:
        print(
            f"production demo FAILED: reconcile {result.reconcile_state}; differences {result.differences}",
            file=sys.stderr,
        )
        return 1
    print("production demo: every table equals its source")
    return 0


def _run_quiet(name: str, settings: Settings) -> int:
    import contextlib
    import io

    buf_out, buf_err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf_out), contextlib.redirect_stderr(buf_err):
        rc = run_table_dag(name, settings)
    if rc:
        sys.stdout.write(buf_out.getvalue()[-8000:])
        sys.stderr.write(buf_err.getvalue()[-8000:])
    else:
        print(f"DAG cdc_{name}: success")
    return rc


def conformance_dags() -> Dags:
    """The DAG helpers of this module as :class:`cdclake_dev.conformance.Dags`."""
    from cdclake_dev.conformance import Dags

    return Dags(
        run_table=lambda name, settings, conf: run_table_dag(name, settings, conf=conf),
        run_group=run_group_dag,
        ensure_db=ensure_airflow_db,
        cause=failure_cause,
    )


def cmd_conformance(args: argparse.Namespace) -> int:
    from cdclake_dev import conformance

    return conformance.run_command(args, conformance_dags(), lambda line: print(line, flush=True))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cdclake",
        description="Batch CDC lakehouse: Debezium events in Kafka -> Airflow + PySpark -> Iceberg. "
        "What a data engineer does by hand on the local stack; `cdclake COMMAND --help` for a command's options.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    _add_stack_commands(sub)
    _add_chain_commands(sub)
    _add_table_commands(sub)
    _add_inspect_commands(sub)
    _add_airflow_commands(sub)
    _add_demo_commands(sub)
    return parser


def _add_stack_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``stack`` and ``engine``: the local stack's Kafka broker and Spark Connect engine."""
    p = sub.add_parser("stack", help="start, stop or check the local stack (Kafka broker, Spark Connect engine)")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.set_defaults(func=cmd_stack)

    p = sub.add_parser("engine", help="start, stop or check the shared Spark Connect server (the apply engine)")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.set_defaults(func=cmd_engine)


def _add_chain_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``chain`` and ``conformance``: the real source chain (MariaDB, Debezium) and its matrix."""
    p = sub.add_parser("chain", help="start, stop or check the real source chain (Kafka, MariaDB, Debezium)")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--no-schemas", action="store_true", help="JsonConverter schemas.enable=false")
    p.add_argument("--snapshot-mode", default="initial", help="Debezium snapshot.mode (initial)")
    p.add_argument(
        "--registry", action="store_true", help="start: also the schema registry (Apicurio, 127.0.0.1:18081)"
    )
    p.add_argument(
        "--avro",
        action="store_true",
        help="start: also the Avro connector (include/stack/debezium/inventory-connector-avro.json) writing "
        "<prefix>_avro.* through the schema registry (started too); every start registers it again",
    )
    p.add_argument(
        "--flattened",
        action="store_true",
        help="start: also the connector with Debezium's ExtractNewRecordState transform "
        "(include/stack/debezium/inventory-connector-flat.json) writing flattened records to "
        "<prefix>_flat.* (tables read them with flattened: {})",
    )
    p.add_argument(
        "--no-transaction-metadata",
        action="store_true",
        help="start: the connectors write no transaction metadata (provide.transaction.metadata=false; "
        "by default they write <prefix>.transaction, which tables under transactions: whole read)",
    )
    p.add_argument(
        "--avro-tables",
        metavar="LIST",
        help=r"with --avro: the Avro connector's table.include.list, e.g. inventory.orders (default inventory\..*)",
    )
    p.set_defaults(func=cmd_chain)

    p = sub.add_parser(
        "conformance",
        help="one seeded history on the real chain across option cells (JSON, Avro, schema source, group, "
        "history): the matrix phase x cell -> equal / differing rows / quarantined (make conformance)",
    )
    from cdclake_dev.conformance import build_parser as conformance_parser

    conformance_parser(p)
    p.set_defaults(func=cmd_conformance)


def _add_table_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the commands acting on tables: ``load``, ``run``, ``maintain``, ``reconcile``,
    ``quarantine``, ``upgrade``."""
    p = sub.add_parser("load", help="produce a captured Debezium event file into a table's topic")
    p.add_argument("file", help="JSON lines (or concatenated JSON) of Debezium record values")
    p.add_argument("--table", required=True, help="table name in the table config")
    p.add_argument("--partitions", type=int, default=3, help="partitions if the topic is created (3)")
    p.set_defaults(func=cmd_load)

    p = sub.add_parser("run", help="run a table's DAG once (airflow dags test)")
    p.add_argument("table", help="table name in the table config")
    p.add_argument(
        "--replay-from-offsets", metavar="JSON", help='manual replay from these offsets, e.g. \'{"0": 120, "1": 98}\''
    )
    p.add_argument(
        "--replay-from-timestamp", metavar="ISO", help="manual replay from the first records at or after this time"
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("maintain", help="run cdc_maintenance once (airflow dags test): compaction, snapshot expiry")
    p.add_argument("tables", nargs="*", metavar="TABLE", help="table names in the table config (default: all)")
    p.add_argument("--actions", metavar="A,B", help="comma-separated maintenance actions (default: all)")
    p.add_argument("--dry-run", action="store_true", help="report what would be done; commit nothing")
    p.set_defaults(func=cmd_maintain)

    p = sub.add_parser("reconcile", help="compare a table with its source table (local stack); repair it")
    p.add_argument("table", help="table name in the table config")
    p.add_argument("--mode", choices=["report", "repair"], default="report", help="report (default) or repair")
    p.add_argument("--chunk-rows", type=int, default=10_000, help="rows per chunk (10000)")
    p.set_defaults(func=cmd_reconcile)

    p = sub.add_parser("quarantine", help="list or release the records a table could not apply")
    p.add_argument("action", choices=["list", "release"])
    p.add_argument("table", help="table name in the table config")
    p.add_argument("--partition", type=int, help="release: Kafka partition of the bad record")
    p.add_argument("--offset", type=int, help="release: Kafka offset of the bad record")
    p.set_defaults(func=cmd_quarantine)

    p = sub.add_parser(
        "upgrade",
        help="upgrade a table's Iceberg format version in place (v2 -> v3: deletes become deletion vectors); never down",
    )
    p.add_argument("table", help="table name in the table config")
    p.add_argument(
        "--format-version",
        type=int,
        choices=[2, 3],
        help="the version to upgrade to (default: the table's format_version in the table config)",
    )
    p.set_defaults(func=cmd_upgrade)


def _add_inspect_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the commands that look at tables and topics: ``show``, ``status``, ``discover``."""
    p = sub.add_parser("show", help="print an Iceberg table: schema, snapshot summary, rows")
    p.add_argument("table", help="table name in the table config")
    p.add_argument("--limit", type=int, default=100, help="rows to print (100)")
    p.add_argument("--metadata", action="store_true", help="include the _cdc_* metadata columns")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser(
        "status",
        help="per table: lag (events, time), last commit, events in 24 h, open quarantine, schema, reconcile",
    )
    p.add_argument("tables", nargs="*", metavar="TABLE", help="table names in the table config (default: all)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON (a list, one object per table)")
    p.add_argument(
        "--freshness-minutes",
        type=int,
        metavar="N",
        help="judge each table fresh when caught up or its newest applied event is at most N minutes old "
        "(default: each table's freshness_minutes in the table config)",
    )
    p.add_argument("--name", metavar="TEXT", help="only the tables whose name holds TEXT (case-insensitive)")
    p.add_argument("--state", choices=["behind", "fresh", "unjudged"], help="only the tables in this freshness state")
    p.add_argument("--page", type=int, default=1, help="the page to print (tables behind their target first)")
    p.add_argument("--page-size", type=int, default=50, metavar="N", help="tables per page (default 50)")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser(
        "discover", help="list the topics the table config's discover patterns take (dry run); --write registers them"
    )
    p.add_argument("--write", action="store_true", help="add the new topics to the discovery registry")
    p.add_argument("--json", action="store_true", help="print the findings as JSON (a list, one object per topic)")
    p.set_defaults(func=cmd_discover)


def _add_airflow_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``ui`` and ``airflow``: the local Airflow UI and the airflow CLI with the stack's environment."""
    p = sub.add_parser(
        "ui",
        help="start, stop or check the Airflow UI on http://127.0.0.1:8080 (Airflow's processes, loopback only)",
    )
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--port", type=int, default=UI_PORT, help=f"the api-server's port on 127.0.0.1 ({UI_PORT})")
    p.set_defaults(func=cmd_ui)

    p = sub.add_parser(
        "airflow",
        help="the airflow CLI with the local stack's environment",
        description="e.g. `cdclake airflow dags list`; the UI is `cdclake ui start`",
    )
    p.add_argument("airflow_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_airflow)


def _add_demo_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``production`` and ``demo``: the production topology's demo and the local demo."""
    p = sub.add_parser(
        "production",
        help="the production topology on this machine: PostgreSQL, REST catalog, S3, Spark cluster, Kafka (SASL), "
        "MariaDB + Debezium, Airflow's processes",
    )
    p.add_argument("action", choices=["demo", "stop"], help="demo: bring it up, run the workload, check; stop")
    p.add_argument("--state-dir", default=str(PROJECT_ROOT / ".stack-production"), help="its files (.stack-production)")
    p.add_argument("--keep", action="store_true", help="demo: leave it running afterwards")
    p.set_defaults(func=cmd_production)

    p = sub.add_parser("demo", help="load the fixture files, run both DAGs, show both tables")
    p.add_argument("--fixtures", default=str(DEFAULT_FIXTURES), help="the Debezium fixtures folder")
    p.add_argument("--partitions", type=int, default=3, help="partitions of the demo topics (3)")
    p.add_argument("--quiet", action="store_true", help="print DAG logs only when a run fails")
    p.add_argument(
        "--avro",
        action="store_true",
        help="instead: the real chain (MariaDB, Debezium writing Avro, a schema registry), writes to a demo "
        "table, its DAG, the Iceberg table",
    )
    p.set_defaults(func=cmd_demo)


def main(argv: list[str] | None = None) -> int:
    import logging

    from cdclake.io.kafka_logging import LIBRDKAFKA_LOGGER

    # librdkafka's own log (a line per failed connection attempt) stays out of the commands'
    # output: what went wrong reaches the command as an exception or a status
    librdkafka = logging.getLogger(LIBRDKAFKA_LOGGER)
    librdkafka.addHandler(logging.NullHandler())
    librdkafka.propagate = False
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CdcLakeError as e:  # says what is wrong and the remedy: its message, not a traceback
        print(f"cdclake {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
