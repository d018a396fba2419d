"""``cdclake``: what a data engineer does by hand on the local stack.

cdclake stack start|stop|status     the local stack: Kafka broker (KRaft) and Spark Connect engine
cdclake engine start|stop|status    the shared Spark Connect server the apply tasks use
cdclake chain start|stop|status     the real source chain: Kafka + MariaDB + Kafka Connect/Debezium
cdclake chain start --registry      ... and the schema registry Avro connectors write to
cdclake load FILE --table NAME      put a captured Debezium event file into the table's topic
cdclake run NAME                    run the table's DAG once (airflow dags test)
cdclake run NAME --replay-from-offsets '{"0": 120}'   a manual replay (also from the UI form)
cdclake quarantine list|release NAME  records the table's runs could not apply
cdclake show NAME                   the Iceberg table: schema, rows, snapshot summary
cdclake status [--json] [NAME ...]  per table: lag, last commit, events 24 h, quarantine, reconcile
cdclake maintain [NAME ...] [--dry-run]  run cdc_maintenance once: compaction, snapshot expiry
cdclake airflow ARGS...             the airflow CLI with the local stack's environment
cdclake demo                        load the bundled fixtures, run both DAGs, show the tables
cdclake demo --avro                 the real chain with Avro and a schema registry, end to end
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

from cdclake.settings import APPLY_POOL, APPLY_POOL_DESCRIPTION, PROJECT_ROOT, Settings
from cdclake_dev import engine
from cdclake_dev.views import format_status_table, show_table

DEMO_FILES = {
    "inventory_products": Path("flink/debezium-data-schema-include.txt"),
    "inventory_customers": Path("risingwave/debezium_log.1"),
}
"""Captured Debezium files the demo replays, relative to the fixtures folder."""

DEFAULT_FIXTURES = PROJECT_ROOT / "examples" / "debezium"
"""The captured Debezium files copied into the repository (``examples/debezium/README.md``)."""


def _settings() -> Settings:
    return Settings.from_env()


def cmd_stack(args: argparse.Namespace) -> int:
    from cdclake_dev import stack

    settings = _settings()
    with_engine = settings.engine == "connect"
    if args.action == "start":
        print(stack.start_broker(settings))
        if with_engine:
            print(engine.start_engine(settings))
    elif args.action == "stop":
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
        print(
            source_chain.start_connect(settings, schemas_enable=not args.no_schemas, snapshot_mode=args.snapshot_mode)
        )
        print(
            f"MariaDB: mariadb -h 127.0.0.1 -P {settings.mariadb_port} -u root inventory; "
            f"Debezium topics: {settings.topic_prefix}.inventory.<table>, schema changes: "
            f"{settings.topic_prefix}, notifications: {settings.topic_prefix}.notifications"
        )
        if args.registry:
            registry = source_chain.local_registry(settings)
            registry.start()
            print(
                f"Apicurio Registry on {registry.url} (storage {registry.dir / 'data'}); "
                f"for value_format: avro tables: export CDCLAKE_SCHEMA_REGISTRY_URL={registry.ccompat_url}"
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
            status = source_chain.connector_status(settings)
            print(
                f"connector {status['name']}: {status['connector']['state']}, tasks "
                f"{[t['state'] for t in status['tasks']]}"
            )
        except OSError as e:
            print(f"Kafka Connect not answering on port {settings.connect_port}: {e}")
            return 3
    return 0


def cmd_load(args: argparse.Namespace) -> int:
    from cdclake.io.events import load_events
    from cdclake.io.kafka import KafkaClients
    from cdclake.model.config import load_tables

    settings = _settings()
    cfg = load_tables(settings.tables_config).get(args.table)
    counts = load_events(Path(args.file), cfg, KafkaClients.from_settings(settings), partitions=args.partitions)
    total = sum(counts.values())
    print(
        f"loaded {total} event(s) from {args.file} into {cfg.topic!r}: "
        + ", ".join(f"partition {p}: {n}" for p, n in sorted(counts.items()))
    )
    return 0


def run_airflow(argv: list[str], settings: Settings | None = None, **kwargs: Any) -> subprocess.CompletedProcess:
    """Run the ``airflow`` CLI of this virtual environment with the local stack's environment."""
    from cdclake_dev.airflow_env import airflow_env

    settings = settings or _settings()
    settings.airflow_home.mkdir(parents=True, exist_ok=True)
    airflow = str(Path(sys.executable).parent / "airflow")
    return subprocess.run([airflow, *argv], env=airflow_env(settings), **kwargs)


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
    import json

    from cdclake.model.config import load_tables

    settings = settings or _settings()
    cfg = load_tables(settings.tables_config).get(name)
    ensure_airflow_db(settings)
    if (cfg.engine or settings.engine) == "connect":
        engine.start_engine(settings)  # quick when it runs
    argv = ["dags", "test", cfg.dag_id] + (["--conf", json.dumps(conf)] if conf else [])
    proc = run_airflow(argv, settings, capture_output=True, text=True)
    sys.stdout.write(proc.stdout[-20000:])
    sys.stderr.write(proc.stderr[-20000:])
    ok = proc.returncode == 0 and "state=success" in (proc.stdout + proc.stderr).replace(" ", "")
    if not ok:
        print(f"DAG {cfg.dag_id} did not succeed (exit code {proc.returncode})", file=sys.stderr)
        return proc.returncode or 1
    return 0


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
    import json

    from cdclake.model.config import load_tables
    from cdclake.model.maintenance import check_actions
    from cdclake.model.selection import select_tables

    settings = settings or _settings()
    select_tables(load_tables(settings.tables_config).tables, tables)  # unknown names: ConfigError
    chosen = list(check_actions(actions)) if actions else []
    ensure_airflow_db(settings)
    if settings.engine == "connect":
        engine.start_engine(settings)  # quick when it runs
    conf = {"tables": tables, "actions": chosen, "dry_run": dry_run}
    proc = run_airflow(
        ["dags", "test", "cdc_maintenance", "--conf", json.dumps(conf)], settings, capture_output=True, text=True
    )
    sys.stdout.write(proc.stdout[-20000:])
    sys.stderr.write(proc.stderr[-20000:])
    if proc.returncode != 0 or "state=success" not in (proc.stdout + proc.stderr).replace(" ", ""):
        print(f"cdc_maintenance did not succeed (exit code {proc.returncode})", file=sys.stderr)
        return proc.returncode or 1
    return 0


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
    from cdclake.io.catalog import committed_offsets, load_catalog, load_table_or_none
    from cdclake.io.kafka import KafkaClients
    from cdclake.model.config import load_tables
    from cdclake.model.snapshot import caught_up
    from cdclake.pipeline.reconcile import ReconcileParams, reconcile_table
    from cdclake_dev.chain import local_source

    settings = _settings()
    cfg = load_tables(settings.tables_config).get(args.table)
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
    return 1 if result.differences else 0


def cmd_quarantine(args: argparse.Namespace) -> int:
    from cdclake.io.catalog import load_catalog, load_table_or_none
    from cdclake.io.maintenance import release_quarantined
    from cdclake.model.config import load_tables
    from cdclake.model.layout import QUARANTINE_SUFFIX, side_table

    settings = _settings()
    cfg = load_tables(settings.tables_config).get(args.table)
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


def cmd_show(args: argparse.Namespace) -> int:
    sys.stdout.write(show_table(args.table, limit=args.limit, metadata_columns=args.metadata))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Print the status figures of the configured tables (all, or those named)."""
    import json

    from cdclake.errors import ConfigError
    from cdclake.io.catalog import load_catalog
    from cdclake.io.kafka import KafkaClients
    from cdclake.model.config import load_tables
    from cdclake.model.selection import select_tables
    from cdclake.pipeline.status import status_of_tables

    settings = _settings()
    try:
        tables = select_tables(load_tables(settings.tables_config).tables, args.tables)
    except ConfigError as e:
        print(f"cdclake status: {e}", file=sys.stderr)
        return 2
    statuses = status_of_tables(
        load_catalog(settings),
        KafkaClients.from_settings(settings),
        tables,
        freshness_minutes=args.freshness_minutes,
    )
    if args.json:
        print(json.dumps([s.model_dump(mode="json") for s in statuses], indent=2))
    else:
        with_fresh = args.freshness_minutes is not None or any(t.freshness_minutes for t in tables)
        sys.stdout.write(format_status_table(statuses, with_fresh=with_fresh))
    return 0


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
    tables = load_tables(settings.tables_config)
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

        for cfg in load_tables(settings.tables_config).tables:
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cdclake",
        description="Batch CDC lakehouse: Debezium events in Kafka -> Airflow + PySpark -> Iceberg.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("stack", help="start, stop or check the local stack (Kafka broker, Spark Connect engine)")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.set_defaults(func=cmd_stack)

    p = sub.add_parser("engine", help="start, stop or check the shared Spark Connect server (the apply engine)")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.set_defaults(func=cmd_engine)

    p = sub.add_parser("chain", help="start, stop or check the real source chain (Kafka, MariaDB, Debezium)")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--no-schemas", action="store_true", help="JsonConverter schemas.enable=false")
    p.add_argument("--snapshot-mode", default="initial", help="Debezium snapshot.mode (initial)")
    p.add_argument(
        "--registry", action="store_true", help="start: also the schema registry (Apicurio, 127.0.0.1:18081)"
    )
    p.set_defaults(func=cmd_chain)

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
    p.set_defaults(func=cmd_status)

    p = sub.add_parser(
        "airflow",
        help="the airflow CLI with the local stack's environment",
        description="e.g. `cdclake airflow standalone` for the UI",
    )
    p.add_argument("airflow_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_airflow)

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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
