"""The apply path's benchmark (issue 6): throughput, cost growth and overhead, against baselines
measured in the same run on the same machine.

    make bench                                   # = .venv/bin/python bench/run.py --size full
    .venv/bin/python bench/run.py --size tiny    # seconds-scale smoke size
    .venv/bin/python bench/run.py --size medium --reps 3

It starts a Kafka broker of its own (free loopback port, state in a temporary folder unless
``--state-dir``), generates the workload (``bench/workload.py``) into a 3-partition topic, writes
the starting Iceberg tables, then measures one stage after another:

1. ``read_parse``: Spark reads the offset range and parses every event (the floor);
2. ``append``: the same plus an append of every parsed event to an Iceberg table;
3. ``apply``: the apply job (``apply_range``: order, reduce, merge, commit with offsets) into a
   copy of the starting table;
4. ``peer``: pyiceberg's ``Table.upsert`` of the already reduced final rows (plus a delete of the
   deleted keys) into a copy of the same starting table;
5. ``growth``: the apply of one fixed batch into a table of ``--base-rows`` and of
   ``--big-rows`` rows;
6. ``overhead``: ``airflow dags test`` of the table DAG with no new events and with one new event,
   beside a trivial one-task DAG (Airflow's floor) run the same way.

With ``--stages transactions`` only the whole-transactions stages run (issue 28): the main workload
with every event in a Debezium source transaction of 1 to :data:`TRANSACTION_EVENTS` events (its
``transaction`` block) and the transaction topic's ``BEGIN``/``END`` records, applied by
``apply`` as ``transactions: ignore`` does (the range as planned) and by ``apply_whole`` as
``transactions: whole`` does (the ``END`` records read, the batch checked whole and cut), each
into a copy of the starting table, in alternating order; the ratio ``apply_whole/apply`` is the
cost of the cut (target <= 1.1).

With ``--stages side_tables`` only the side tables' stages run (issue 32): the main workload's first
event is applied into a copy of the starting table with ``change_feed: {}`` and ``history: {}`` on
(``start``: its change feed created, its history seeded with one version per row; not measured,
the seed being a table's one-off), then the other events by ``apply`` (neither option),
``apply_change_feed`` (``change_feed: {}``: the change rows written to ``<table>__changes``) and
``apply_history`` (``history: {}``: the versions written to ``<table>__history``, SCD type 2),
each into a copy of ``start`` and of its side tables, in rotating order; the ratios
``apply_change_feed/apply`` and ``apply_history/apply`` are the options' costs (target <= 1.3
each). Besides each table against the source, the change feed's rows of the run and the history's
versions are checked against the workload (:func:`check_change_feed`, :func:`check_history`).
Both ``--stages transactions`` and ``side_tables`` run each apply in a process of its own, whatever
``--one-process``.

With ``--stages avro`` only issue 27's figures are measured (:func:`measure_avro`): the main
workload in JSON and in Avro, read+parse and apply of each through ``spark-submit``, and the Avro
apply on the shared engine (a Spark Connect server the run starts, warmed by one apply first), as
the table DAG's ``apply`` task runs it by default.

With ``--stages flattened`` only issue 55's figures are measured (:func:`measure_flattened`): the
main workload as Debezium envelopes (``json_with_schema``) and flattened (a second topic, same keys
and partitions, each event as Debezium's ``ExtractNewRecordState`` transform writes it with
``add.fields`` :data:`~cdclake.model.flattened.TRANSFORM_FIELDS` and rewritten deletes:
:class:`lake.FlattenEncoder`), read+parse and apply of each through ``spark-submit`` (the
flattened ones with the table config's ``flattened: {}``), and the ratios flattened/envelope.

Stages 1-3 also run on the same events in Avro (``avro_read_parse``, ``avro_append``,
``avro_apply``): a second topic, same keys and partitions, each value the Confluent wire format of
the Avro writer schema a Kafka Connect Avro converter makes of the events' Connect schema,
registered in a schema registry the bench starts (Apicurio, :mod:`cdclake_dev.parts.registry`;
with ``--external-broker`` the one of ``CDCLAKE_SCHEMA_REGISTRY_URL`` when set). The peer's input
is the reduced rows, the same for both formats. At ``--one-process 1`` (the tiny size, the smoke
test's) every Spark stage runs in one ``spark-submit``, one after another (a stage's wall seconds
are then that process's session start plus its own job seconds), and the Avro append is not
measured.

Otherwise every measured step is a process of its own (Spark stages through ``spark-submit`` with the
table DAG's settings); its wall time and the peak RSS of its whole process tree (sampled every
0.1 s with psutil) are recorded. Results: ``<out>/bench-<size>-<time>.json`` and ``.md``; the
ratios against the targets are printed. After ``apply`` and ``peer`` the tables are compared with
the source state the events were generated from; a mismatch fails the run (exit code 1).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import workload as wl
from cdclake.model.flattened import TRANSFORM_FIELDS
from cdclake.settings import Settings
from harness import (
    BENCH_DIR,
    BROKER,
    ENGINE,
    REGISTRY,
    BenchRun,
    add_run_options,
    add_size_options,
    bench_parser,
    checks_line,
    checks_ok,
    child_env,
    resolve_size,
    spark_profile,
    spark_submit,
    stack_settings,
    start_parts,
    stop_parts,
    summary_head,
)
from lake import (
    AvroEncoder,
    FlattenEncoder,
    Loaded,
    check_one_event,
    check_table,
    copy_table,
    create_base_table,
    expected_rows,
    kafka_clients,
    load_transactions,
    load_workload,
    load_workload_avro,
    produce,
)
from measure import Measured, measure, ratio, summarize

SIZES: dict[str, dict[str, int]] = {
    "tiny": {
        "events": 2_000,
        "keys": 500,
        "base_rows": 1_000,
        "big_rows": 5_000,
        "growth_events": 400,
        "growth_keys": 100,
        "reps": 1,
        "one_process": 1,
    },
    "medium": {
        "events": 200_000,
        "keys": 40_000,
        "base_rows": 1_000_000,
        "big_rows": 10_000_000,
        "growth_events": 100_000,
        "growth_keys": 20_000,
        "reps": 3,
        "one_process": 0,
    },
    "full": {
        "events": 1_000_000,
        "keys": 200_000,
        "base_rows": 1_000_000,
        "big_rows": 10_000_000,
        "growth_events": 100_000,
        "growth_keys": 20_000,
        "reps": 3,
        "one_process": 0,
    },
}
"""Presets of ``--size``; ``full`` is issue 6's workload."""

TARGETS = {
    "apply/append": 2.0,
    "apply/read_parse": 3.0,
    "apply/peer": 1.0,
    "growth big/base": 1.5,
    "dag no-new/trivial": 1.5,
    "avro apply/read_parse": 2.0,
    "avro apply/append": 2.0,
    "avro apply s per 1M events": 25.0,
}
APPLY_PEAK_RSS_TARGET = 4 * 1024**3
FLATTENED_TARGET = 1.0
"""``flattened/envelope`` of read+parse and of apply at most (job seconds): flattened records are
smaller, so no slower (issue 55 expects them faster)."""
TRANSACTION_EVENTS = 10
"""The largest source transaction of ``--stages transactions``' workload (events; issue 28: 1-10)."""
WHOLE_TRANSACTIONS_TARGET = 1.1
"""``apply_whole/apply`` at most: the cut costs at most 10 % (issue 28)."""
SIDE_TABLES_TARGET = 1.3
"""``apply_change_feed/apply`` and ``apply_history/apply`` at most: each option costs at most 30 %
(issue 32)."""
SIDE_TABLE_OPTIONS = {"apply": [], "apply_change_feed": ["--change-feed"], "apply_history": ["--history"]}
"""The stages of ``--stages side_tables``: their options of ``bench/spark_stage.py``'s ``apply``."""


# --- the peer's input ----------------------------------------------------------------------------


def peer_input(loaded: Loaded, arrow_schema, decimal: bool, work: Path) -> tuple[Path, Path]:  # noqa: ANN001
    """The peer's easier input: the final row of every touched, present key (Parquet) and the
    ids whose final event is a delete (JSON)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = [f["field"] for f in wl.row_fields(decimal)]
    present = sorted(i for i, r in loaded.state.rows.items() if r is not None)
    records = list(expected_rows(loaded, present, decimal, columns).values())
    upserts, deletes = work / "peer-upserts.parquet", work / "peer-deletes.json"
    pq.write_table(pa.Table.from_pylist(records, schema=arrow_schema), upserts)
    deletes.write_text(json.dumps(sorted(i for i, r in loaded.state.rows.items() if r is None)))
    return upserts, deletes


# --- the overhead stage: DAG runs -------------------------------------------------------------------


def dag_run_main(args: argparse.Namespace) -> int:
    """``run.py _dag``: one ``airflow dags test`` run, of the table DAG through
    ``cdclake_dev.cli.run_table_dag`` or of the trivial DAG the same way (bench dags folder)."""
    from cdclake_dev.airflow_env import airflow_env
    from cdclake_dev.cli import run_table_dag

    settings = Settings.from_env()
    if args.table:
        return run_table_dag(args.table, settings)
    env = airflow_env(settings)
    env["AIRFLOW__CORE__DAGS_FOLDER"] = str(BENCH_DIR / "dags")
    airflow = str(Path(sys.executable).parent / "airflow")
    proc = subprocess.run([airflow, "dags", "test", "bench_trivial"], env=env, capture_output=True, text=True)
    sys.stdout.write(proc.stdout[-20000:])
    sys.stderr.write(proc.stderr[-20000:])
    ok = proc.returncode == 0 and "state=success" in (proc.stdout + proc.stderr).replace(" ", "")
    return 0 if ok else (proc.returncode or 1)


# --- the run ------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    from cdclake.io.catalog import load_catalog

    p = resolve_size(args, SIZES)
    bench = BenchRun.begin(args, f"bench-{args.size}", "cdclake-bench-")
    # the schema registry serves the Avro stages only (all of them, or --stages avro)
    needs_registry = args.stages in ("all", "avro")
    parts = () if args.external_broker else ((BROKER, REGISTRY) if needs_registry else (BROKER,))
    settings = Settings.from_env() if args.external_broker else stack_settings(bench.work, parts)
    if needs_registry and not settings.schema_registry_url:  # an external broker without one: its own
        parts = (REGISTRY,)
        settings = settings.model_copy(update={"schema_registry_url": REGISTRY.free_port_setting()})
    settings = settings.model_copy(update={"tables_config": bench.work / "tables.yaml"})
    decimal = wl.decimal_supported()
    info = bench.info(
        size=args.size,
        params=vars(p),
        decimal_column="decimal(10,2)"
        if decimal
        else "binary: cdclake does not map org.apache.kafka.connect.data.Decimal yet; same base64 bytes on the wire",
        spark_master=settings.spark_master,
    )
    print(
        f"cdclake benchmark, size {args.size}: {p.events} events over {p.keys} keys into {p.base_rows} rows; "
        f"growth {p.growth_events} events into {p.base_rows} and {p.big_rows} rows; {p.reps} repetition(s); "
        f"work dir {bench.work}",
        flush=True,
    )
    try:
        start_parts(settings, parts)
        ctx = Context(bench, settings, load_catalog(settings), f"bench_{bench.tag}", p, decimal, child_env(settings))
        ctx.catalog.create_namespace_if_not_exists(ctx.ns)
        if args.stages != "all":
            measure_run, stage_ratios, summary = OPTION_STAGES[args.stages]
            stages, checks, info["setup"] = measure_run(ctx)
            result = {**info, "stages": stages, "ratios": stage_ratios(stages), "checks": checks}
        else:
            main_load, avro_load, growth, info["setup"] = load(ctx)
            stages, checks = measure_stages(ctx, main_load, avro_load, growth)
            overhead_stages, overhead_checks = measure_overhead(ctx, main_load)
            stages.update(overhead_stages)
            checks.update(overhead_checks)
            result, summary = {**info, "stages": stages, "ratios": ratios(stages), "checks": checks}, markdown
    finally:
        stop_parts(settings, parts)  # before finish, which removes a temporary work folder with their pid files
    bench.finish(result, summary)
    return 0 if checks_ok(checks, "CORRECTNESS CHECK FAILED") else 1


@dataclass(frozen=True)
class Context:
    """What every stage of one run works with."""

    bench: BenchRun
    settings: Settings
    catalog: Any
    ns: str
    """The run's namespace: its tables."""
    p: argparse.Namespace
    """The sizes (:func:`harness.resolve_size`)."""
    decimal: bool
    """Whether the ``price`` column is ``decimal(10,2)`` (:func:`workload.decimal_supported`)."""
    env: dict[str, str]
    """The measured processes' environment (:func:`harness.child_env`)."""

    def measure(self, label: str, cmd: list[str]) -> Measured:
        """``cmd`` measured (:func:`measure.measure`), its log in the run's logs."""
        return measure(label, cmd, self.env, self.bench.logs)

    def clone(self, source: str, target: str) -> None:
        """Table ``target`` of the run's namespace as a zero-copy clone of ``source``."""
        copy_table(self.catalog, f"{self.ns}.{source}", f"{self.ns}.{target}")

    def check(self, table: str, loaded: Loaded) -> dict[str, Any]:
        """Table ``table`` against the source ``loaded`` left (:func:`lake.check_table`)."""
        return check_table(self.catalog, f"{self.ns}.{table}", loaded, self.p.base_rows, self.decimal)


def load(ctx: Context) -> tuple[Loaded, Loaded, Loaded, dict[str, Any]]:
    """The main workload (in JSON and in Avro) and the growth workload into their topics, and the
    starting tables ``base`` and ``big``. Returns the three workloads and the setup's figures."""
    p, tag = ctx.p, ctx.bench.tag
    print("generating and loading the workload ...", flush=True)
    main_spec = wl.WorkloadSpec(events=p.events, keys=p.keys, existing_rows=p.base_rows, new_id_start=p.big_rows)
    encoder = AvroEncoder(ctx.settings.schema_registry_url, f"bench.{tag}.orders_avro-value", ctx.decimal)
    main, avro = load_workload_avro(
        ctx.settings, f"bench.{tag}.orders", main_spec, ctx.decimal, f"bench.{tag}.orders_avro", encoder
    )
    growth_spec = wl.WorkloadSpec(
        events=p.growth_events, keys=p.growth_keys, existing_rows=p.base_rows, new_id_start=p.big_rows, seed=7
    )
    growth = load_workload(ctx.settings, f"bench.{tag}.orders_growth", growth_spec, ctx.decimal)
    setup: dict[str, Any] = {}
    for name, loaded in (("workload", main), ("avro_workload", avro), ("growth_workload", growth)):
        setup[name] = {
            "topic": loaded.topic,
            "events": loaded.events,
            "bytes": loaded.bytes,
            "mean_event_bytes": round(loaded.bytes / loaded.events),
            "ops": dict(loaded.state.ops),
            "multi_row_binlog_events": loaded.state.multi_row_events,
            "keys_touched": len(loaded.state.rows),
            "load_s": round(loaded.load_s, 1),
        }
    setup["avro_workload"] |= {"schema_id": encoder.schema_id, "encode_s": round(encoder.seconds, 1)}
    print(
        f"  loaded {main.events} + {growth.events} events ({main.bytes / 2**20:.0f} MiB + "
        f"{growth.bytes / 2**20:.0f} MiB) in {main.load_s + growth.load_s:.0f} s; in Avro {avro.bytes / 2**20:.0f} "
        f"MiB in {avro.load_s:.0f} s ({encoder.seconds:.0f} s encoding)",
        flush=True,
    )
    print("writing the starting tables ...", flush=True)
    for table, rows in (("base", p.base_rows), ("big", p.big_rows)):
        setup[f"{table}_table_s"] = round(create_base_table(ctx.catalog, f"{ctx.ns}.{table}", rows, ctx.decimal), 1)
    return main, avro, growth, setup


JSON = "json_with_schema"


@dataclass(frozen=True)
class Step:
    """One Spark stage of :func:`measure_stages`: stage ``kind`` on workload ``loaded`` (values in
    ``fmt``) into ``table``; its figures go to ``runs[key]``."""

    rep: int
    key: str
    kind: str
    loaded: Loaded
    table: str
    fmt: str = JSON
    count_after: bool = False


def measure_stages(ctx: Context, main: Loaded, avro: Loaded, growth: Loaded) -> tuple[dict[str, Any], dict[str, Any]]:
    """Stages 1 to 5, ``p.reps`` times each, and stages 1 to 3 on the Avro workload ``avro``.
    Returns the stages' figures and the checks of the tables they wrote against the source."""
    from cdclake.io.catalog import create_cdc_table
    from cdclake.model.types import columns_from_connect

    p, logs = ctx.p, ctx.bench.logs
    arrow_schema = ctx.catalog.load_table(f"{ctx.ns}.base").schema().as_arrow()
    upserts, deletes = peer_input(main, arrow_schema, ctx.decimal, ctx.bench.work)
    event_log = logs / "spark-events"
    event_log.mkdir(exist_ok=True)
    runs: dict[str, list[Measured]] = {
        name: [] for name in ("read_parse", "append", "apply", "peer", "growth_base", "growth_big")
    } | {f"avro_{n}": [] for n in AVRO_STAGES}

    def run_steps(steps: list[Step]) -> None:
        """``steps`` in a process each, or (``p.one_process``) all in one process: each stage's
        wall seconds are then the session start plus its own job seconds."""
        for group in [steps] if p.one_process else [[step] for step in steps]:
            first, label = group[0], f"{group[0].key}_r{group[0].rep}"
            args = [first.kind, "--range", first.loaded.range_json, "--namespace", ctx.ns, "--table", first.table]
            args += ["--format", first.fmt]
            for step in group[1:]:
                args += ["--then", step.kind, step.fmt, step.loaded.range_json, step.table]
            args += [a for step in group if step.count_after for a in ("--count-after", step.table)]
            m = ctx.measure(
                label, spark_submit(ctx.settings, BENCH_DIR / "spark_stage.py", args, f"bench-{label}", event_log)
            )
            profile = spark_profile(event_log, logs / f"{label}-plans.txt")
            results = m.result.get("stages") or [{} for _ in group]
            for step, stage_result in zip(group, results, strict=True):
                result = stage_result | {"slowest_queries": profile}
                if step.count_after:
                    result["rows_after"] = m.result["rows_after"][step.table]
                if len(group) == 1:
                    wall, spark_s = m.wall_s, m.spark_s
                else:  # no JVM of its own
                    wall, spark_s = m.result["session_s"] + result["job_s"], None
                    result["shared_process"] = True
                runs[step.key].append(
                    Measured(f"{step.key}_r{step.rep}", wall, m.peak_rss, m.returncode, spark_s, result, m.load_avg)
                )

    def measure_peer(rep: int) -> None:
        peer = [sys.executable, str(BENCH_DIR / "peer_upsert.py"), "--table", f"{ctx.ns}.peer_r{rep}"]
        runs["peer"].append(ctx.measure(f"peer_r{rep}", [*peer, "--upserts", str(upserts), "--deletes", str(deletes)]))

    columns = columns_from_connect({"fields": wl.row_fields(ctx.decimal)})
    pending: list[Step] = []
    for rep in range(1, p.reps + 1):
        print(f"repetition {rep}/{p.reps}", flush=True)
        for prefix in ("", "avro_"):
            create_cdc_table(ctx.catalog, f"{ctx.ns}.{prefix}append_r{rep}", columns, ("id",))
            ctx.clone("base", f"{prefix}apply_r{rep}")
        ctx.clone("base", f"peer_r{rep}")
        for which, base in (("growth_base", "base"), ("growth_big", "big")):
            ctx.clone(base, f"{which}_r{rep}")
        for kind in AVRO_STAGES:
            table = "base" if kind == "read_parse" else f"{kind}_r{rep}"
            pending.append(Step(rep, kind, kind, main, table))
            # one process (the smoke size): the Avro append is not measured, the read+parse covers its parse
            if not (p.one_process and kind == "append"):
                pending.append(
                    Step(rep, f"avro_{kind}", kind, avro, table if kind == "read_parse" else f"avro_{table}", "avro")
                )
        pending += [
            Step(rep, which, "apply", growth, f"{which}_r{rep}", count_after=rep == 1)
            for which in ("growth_base", "growth_big")
        ]
        if not p.one_process:
            run_steps(pending)
            pending = []
            measure_peer(rep)
    if pending:
        run_steps(pending)
        for rep in range(1, p.reps + 1):
            measure_peer(rep)
    checks: dict[str, Any] = {
        "apply": ctx.check("apply_r1", main),
        "peer": ctx.check("peer_r1", main),
        "avro_apply": ctx.check("avro_apply_r1", avro),
    }
    print(
        f"  check apply: {checks['apply']['ok']}, avro apply: {checks['avro_apply']['ok']}, "
        f"peer: {checks['peer']['ok']}",
        flush=True,
    )
    # the growth batch deletes and updates only ids below base_rows (rows of both tables) and
    # inserts ids from big_rows up (rows of neither)
    final = growth.state.rows
    net = sum(1 for i, r in final.items() if r is not None and i >= p.big_rows) - sum(
        1 for i, r in final.items() if r is None and i < p.base_rows
    )
    for which, rows in (("growth_base", p.base_rows), ("growth_big", p.big_rows)):
        got = runs[which][0].result.get("rows_after")
        checks[which] = {"rows": got, "expected_rows": rows + net, "ok": got == rows + net}

    main_stages = ("read_parse", "append", "apply", "peer", *(f"avro_{n}" for n in AVRO_STAGES))
    stages = {name: summarize(runs[name], p.events) for name in main_stages if runs[name]}
    stages["growth_base"] = summarize(runs["growth_base"], p.growth_events) | {"table_rows": p.base_rows}
    stages["growth_big"] = summarize(runs["growth_big"], p.growth_events) | {"table_rows": p.big_rows}
    return stages, checks


AVRO_STAGES = ("read_parse", "append", "apply")
"""The stages also measured on the Avro workload (``avro_<stage>``)."""


def measure_overhead(ctx: Context, main: Loaded) -> tuple[dict[str, Any], dict[str, Any]]:
    """Stage 6, the DAG runs (``run.py _dag``), ``p.reps`` times each. Returns their figures and
    the checks that they did what they should."""
    import yaml

    from cdclake.model.layout import TOMBSTONES_SUFFIX
    from cdclake_dev.cli import ensure_airflow_db

    print("overhead: DAG runs (airflow dags test) ...", flush=True)
    reps = ctx.p.reps
    entry = {"name": "bench_orders", "topic": main.topic, "namespace": ctx.ns, "table": "orders", "primary_key": ["id"]}
    ctx.settings.tables_config.write_text(
        yaml.safe_dump({"defaults": {"schedule": None, "retries": 0, "tags": ["bench"]}, "tables": [entry]})
    )
    ctx.clone("apply_r1", "orders")
    ctx.clone(f"apply_r1{TOMBSTONES_SUFFIX}", f"orders{TOMBSTONES_SUFFIX}")
    ensure_airflow_db(ctx.settings)
    trivial = [sys.executable, str(BENCH_DIR / "run.py"), "_dag", "--trivial"]
    table_dag = [sys.executable, str(BENCH_DIR / "run.py"), "_dag", "--table", "bench_orders"]
    table = ctx.catalog.load_table(f"{ctx.ns}.orders")
    before = table.current_snapshot().snapshot_id
    dag_runs: dict[str, list[Measured]] = {"trivial": [], "no_new": [], "one_event": []}
    if reps > 1:  # first runs after a migration pay for cold caches: not measured
        ctx.measure("warmup_trivial", trivial)
        ctx.measure("warmup_no_new", table_dag)
    for rep in range(1, reps + 1):
        dag_runs["trivial"].append(ctx.measure(f"dag_trivial_r{rep}", trivial))
        dag_runs["no_new"].append(ctx.measure(f"dag_no_new_r{rep}", table_dag))
    no_new_ok = table.refresh().current_snapshot().snapshot_id == before
    one_ok = True
    for rep in range(1, reps + 1):
        ev = wl.update_event(main.state, rep, ctx.decimal)
        produce(kafka_clients(ctx.settings), main.topic, [ev], create=False)
        dag_runs["one_event"].append(ctx.measure(f"dag_one_event_r{rep}", table_dag))
        one_ok = check_one_event(ctx.catalog, f"{ctx.ns}.orders", ev) and one_ok
    checks = {
        "dag_no_new": {
            "ok": no_new_ok and all(m.spark_s is None for m in dag_runs["no_new"]),
            "snapshot_unchanged": no_new_ok,
            "spark_started": any(m.spark_s is not None for m in dag_runs["no_new"]),
        },
        "dag_one_event": {"ok": one_ok},
    }
    stages = {f"dag_{name}": summarize(ms, None) for name, ms in dag_runs.items()}
    stages["dag_one_event"]["spark_s"] = round(statistics.median(m.spark_s or 0 for m in dag_runs["one_event"]), 3)
    return stages, checks


def load_with_base(ctx: Context, transaction_events: int = 0) -> tuple[Loaded, dict[str, Any]]:
    """The main workload into its topic (``transaction_events``: its
    :attr:`~workload.WorkloadSpec.transaction_events`) and the starting table ``base``. Returns
    the workload and the setup's figures (``events``, ``bytes``, seconds ``load_s`` and
    ``base_table_s``)."""
    p, tag = ctx.p, ctx.bench.tag
    print(
        f"generating and loading the workload{' in source transactions' if transaction_events else ''} ...", flush=True
    )
    spec = wl.WorkloadSpec(
        events=p.events,
        keys=p.keys,
        existing_rows=p.base_rows,
        new_id_start=p.big_rows,
        transaction_events=transaction_events,
    )
    loaded = load_workload(ctx.settings, f"bench.{tag}.orders", spec, ctx.decimal)
    setup = {
        "events": loaded.events,
        "bytes": loaded.bytes,
        "load_s": round(loaded.load_s, 1),
        "base_table_s": round(create_base_table(ctx.catalog, f"{ctx.ns}.base", p.base_rows, ctx.decimal), 1),
    }
    return loaded, setup


def apply_stage(
    ctx: Context, label: str, table: str, range_json: str, options: list[str], stage: str = "apply"
) -> Measured:
    """``bench/spark_stage.py``'s ``stage`` (``apply``) of the range ``range_json`` into ``table``
    with ``options`` (its further arguments) in a process of its own, measured: its result is the
    stage's (``job_s``, the apply's result) and ``slowest_queries`` (:func:`harness.spark_profile`)."""
    event_log = ctx.bench.logs / "spark-events"
    event_log.mkdir(exist_ok=True)
    args = [stage, "--range", range_json, "--namespace", ctx.ns, "--table", table, *options]
    m = ctx.measure(label, spark_submit(ctx.settings, BENCH_DIR / "spark_stage.py", args, f"bench-{label}", event_log))
    profile = spark_profile(event_log, ctx.bench.logs / f"{label}-plans.txt")
    return replace(m, result=(m.result.get("stages") or [{}])[0] | {"slowest_queries": profile})


def measure_options(
    ctx: Context, range_json: str, options: dict[str, list[str]], start: str = "base", side_tables: tuple[str, ...] = ()
) -> dict[str, list[Measured]]:
    """The apply of the range ``range_json`` under each of ``options`` (stage -> its
    :func:`apply_stage` options), ``p.reps`` times each, each run into its own copy
    ``<stage>_r<rep>`` of table ``start`` (and of its side tables, the suffixes ``side_tables``),
    in rotating order: repetition ``r`` starts at stage ``(r - 1) % len(options)``. Returns each
    stage's runs."""
    keys = list(options)
    runs: dict[str, list[Measured]] = {key: [] for key in keys}
    for rep in range(1, ctx.p.reps + 1):
        first = (rep - 1) % len(keys)
        for key in keys[first:] + keys[:first]:
            table = f"{key}_r{rep}"
            for suffix in ("", *side_tables):
                ctx.clone(f"{start}{suffix}", f"{table}{suffix}")
            runs[key].append(apply_stage(ctx, table, table, range_json, options[key]))
    return runs


def measure_whole_transactions(ctx: Context) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The ``--stages transactions`` run (module docstring): ``apply`` and ``apply_whole``,
    ``p.reps`` times each. Returns the stages' figures, the checks of their tables against the
    source, and the setup's figures."""
    loaded, setup = load_with_base(ctx, TRANSACTION_EVENTS)
    transactions, transactions_s = load_transactions(ctx.settings, loaded, f"{ctx.bench.tag}.orders")
    setup |= {"transactions": len(loaded.state.transactions), "load_s": round(loaded.load_s + transactions_s, 1)}
    print(
        f"  {loaded.events} events in {setup['transactions']} transactions, loaded in {setup['load_s']} s", flush=True
    )
    runs = measure_options(ctx, loaded.range_json, {"apply": [], "apply_whole": ["--transactions", transactions]})
    checks = {key: ctx.check(f"{key}_r1", loaded) for key in runs}
    print(f"  check apply: {checks['apply']['ok']}, apply_whole: {checks['apply_whole']['ok']}", flush=True)
    return {key: summarize(ms, ctx.p.events) for key, ms in runs.items()}, checks, setup


def measure_side_tables(ctx: Context) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The ``--stages side_tables`` run (module docstring): ``start`` (the first event, both
    options on), then ``apply``, ``apply_change_feed`` and ``apply_history`` of the other events,
    ``p.reps`` times each. Returns the stages' figures, the checks of their tables against the
    source and of the side tables they wrote against the workload, and the setup's figures
    (``start``: the start's seconds and its side tables' rows)."""
    from cdclake.model.changes import CHANGES_SUFFIX
    from cdclake.model.history import HISTORY_SUFFIX

    loaded, setup = load_with_base(ctx)
    print(f"  {loaded.events} events, loaded in {setup['load_s']} s", flush=True)
    first, rest = first_event_split(loaded)
    print("the start: the first event, the change feed and the history on (the history's seed) ...", flush=True)
    ctx.clone("base", "start")
    m = apply_stage(ctx, "start", "start", first, ["--change-feed", "--history"])
    setup["start"] = {
        "wall_s": round(m.wall_s, 1),
        "job_s": round(m.result["job_s"], 1),
        "changes_rows": table_rows(ctx.catalog.load_table(f"{ctx.ns}.start{CHANGES_SUFFIX}")),
        "history_rows": table_rows(ctx.catalog.load_table(f"{ctx.ns}.start{HISTORY_SUFFIX}")),
    }
    runs = measure_options(ctx, rest, SIDE_TABLE_OPTIONS, "start", (CHANGES_SUFFIX, HISTORY_SUFFIX))
    checks = {key: ctx.check(f"{key}_r1", loaded) for key in runs}
    checks["change_feed"] = check_change_feed(ctx, "apply_change_feed_r1", loaded)
    checks["history"] = check_history(ctx, "apply_history_r1", loaded)
    print("  checks: " + ", ".join(f"{key} {c['ok']}" for key, c in checks.items()), flush=True)
    return {key: summarize(ms, loaded.events - 1) for key, ms in runs.items()}, checks, setup


def first_event_split(loaded: Loaded) -> tuple[str, str]:
    """The offset ranges (JSON) of ``loaded``'s first event and of every other event."""
    from cdclake.model.offsets import OffsetRange

    whole = OffsetRange.from_json(loaded.range_json)
    partition, offset = loaded.coords[0]
    if offset != whole.start[partition]:
        raise RuntimeError(f"the first event is at offset {offset} of partition {partition}, not at its start")
    cut = whole.start | {partition: offset + 1}
    first = whole.model_copy(update={"end": cut})
    return first.to_json(), whole.model_copy(update={"start": cut}).to_json()


def table_rows(table: Any) -> int:
    """Rows of a pyiceberg table (a scan of its first column: deletes applied)."""
    return table.scan(selected_fields=(table.schema().fields[0].name,)).to_arrow().num_rows


def check_change_feed(ctx: Context, table: str, loaded: Loaded) -> dict[str, Any]:
    """The change rows the apply of every event but the first wrote to table ``table``'s change
    feed (its run id ``bench-<table>``, ``bench/spark_stage.py``'s), against the workload: one row
    per key; an upsert row (``c``, ``u``) for exactly the keys whose last event is one of the
    run's and an upsert; a delete row for exactly the keys whose last event is one of the run's
    and a delete and that table ``start`` held (not a key the run inserted and deleted: the
    ``MERGE`` changed no row of it); as many rows as the table's commit says
    (``cdc.changes-rows``). Which key ``start`` held is told by ``start``'s own change feed: the
    first event's one row."""
    import pyarrow.compute as pc
    from pyiceberg.expressions import EqualTo

    from cdclake.model.changes import CHANGES_SUFFIX, RUN_ID_COLUMN
    from cdclake.model.layout import SummaryKeys

    identifier = f"{ctx.ns}.{table}"
    rows = (
        ctx.catalog.load_table(identifier + CHANGES_SUFFIX)
        .scan(row_filter=EqualTo(RUN_ID_COLUMN, f"bench-{table}"), selected_fields=("id", "_cdc_op"))
        .to_arrow()
    )
    deletes = pc.equal(rows["_cdc_op"], "d")
    got_upserts = sorted(rows.filter(pc.invert(deletes))["id"].to_pylist())
    got_deletes = sorted(rows.filter(deletes)["id"].to_pylist())
    start = ctx.catalog.load_table(f"{ctx.ns}.start{CHANGES_SUFFIX}").scan(selected_fields=("id", "_cdc_op"))
    [first] = start.to_arrow().to_pylist()  # the first event's key: held by start unless a delete

    def held(i: int) -> bool:
        return first["_cdc_op"] != "d" if i == first["id"] else i < ctx.p.base_rows

    state = loaded.state
    in_run = [i for i, index in state.written_by.items() if index > 0]
    upserted = sorted(i for i in in_run if state.rows[i] is not None)
    deleted = sorted(i for i in in_run if state.rows[i] is None and held(i))
    summary = ctx.catalog.load_table(identifier).current_snapshot().summary
    committed = summary.get(SummaryKeys.CHANGES_ROWS) if summary is not None else None
    problems = []
    if len(set(got_upserts) | set(got_deletes)) != rows.num_rows:
        problems.append("a key has more than one row")
    for kind, got, want in (("upsert", got_upserts, upserted), ("delete", got_deletes, deleted)):
        if got != want:
            wrong = sorted(set(got) ^ set(want))
            problems.append(f"{kind} rows of {len(got)} keys, expected {len(want)}; keys differing: {wrong[:5]}")
    if committed is None or int(committed) != rows.num_rows:
        problems.append(f"the table's commit says {committed} change rows, the feed holds {rows.num_rows}")
    return {
        "table": identifier + CHANGES_SUFFIX,
        "rows": rows.num_rows,
        "upsert_rows": len(got_upserts),
        "delete_rows": len(got_deletes),
        "ok": rows.num_rows > 0 and not problems,
        "problems": problems,
    }


def check_history(ctx: Context, table: str, loaded: Loaded) -> dict[str, Any]:
    """Table ``table``'s history against the workload and the table: one seed version per row of
    the starting table, one event version per event (no event is a repeat, every one supersedes
    its key's versions), and the current versions that are not deletes are the table's rows, one
    per id."""
    import numpy as np
    import pyarrow.compute as pc

    from cdclake.model.history import CHANGE_COLUMN, HISTORY_SUFFIX, IS_CURRENT_COLUMN, IS_DELETED_COLUMN

    identifier = f"{ctx.ns}.{table}"
    versions = (
        ctx.catalog.load_table(identifier + HISTORY_SUFFIX)
        .scan(selected_fields=("id", IS_CURRENT_COLUMN, IS_DELETED_COLUMN, CHANGE_COLUMN))
        .to_arrow()
    )
    current = versions.filter(pc.and_(versions[IS_CURRENT_COLUMN], pc.invert(versions[IS_DELETED_COLUMN])))
    current_ids = np.sort(current["id"].to_numpy())
    ids = np.sort(ctx.catalog.load_table(identifier).scan(selected_fields=("id",)).to_arrow()["id"].to_numpy())
    kinds = {c["values"]: c["counts"] for c in pc.value_counts(versions[CHANGE_COLUMN]).to_pylist()}
    expected = {"seed": ctx.p.base_rows, "event": loaded.events}
    problems = []
    if kinds != expected:
        problems.append(f"versions {kinds}, expected {expected}")
    if not np.array_equal(current_ids, ids):
        problems.append(
            f"current versions of {len(current_ids)} ids ({len(np.unique(current_ids))} distinct), the table holds "
            f"{len(ids)} rows; {len(np.setdiff1d(ids, current_ids))} ids without a current version"
        )
    return {
        "table": identifier + HISTORY_SUFFIX,
        "versions": versions.num_rows,
        "by_change": kinds,
        "current_rows": len(current_ids),
        "table_rows": len(ids),
        "ok": not problems,
        "problems": problems,
    }


def cost_ratios(stages: dict[str, Any], target: float) -> dict[str, Any]:
    """``<stage>/apply`` of every stage but ``apply`` (medians of wall and of job seconds) against
    ``target`` (on the job seconds: the JVM's start is no option's cost)."""
    out = {}
    for key in stages:
        if key == "apply":
            continue
        job = ratio(stages[key].get("job_s"), stages["apply"].get("job_s"))
        out[f"{key}/apply"] = {
            "wall": ratio(stages[key]["wall_s"], stages["apply"]["wall_s"]),
            "job": job,
            "target": target,
            "met": job is not None and job <= target,
        }
    return out


def stage_table(result: dict[str, Any], names: dict[str, str], rate: str) -> list[str]:
    """The Markdown table of the stages ``names`` (key -> label) of ``result``: medians of wall and
    job seconds, events per second (of the ``rate``: ``job`` or ``wall`` seconds), peak RSS."""
    lines = [
        "",
        f"| stage | wall s (median) | job s (median) | events/s ({rate}) | peak RSS MiB (tree) |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, label in names.items():
        s = result["stages"][key]
        per_s = s.get("events_per_s_job" if rate == "job" else "events_per_s", 0)
        lines.append(f"| {label} | {s['wall_s']} | {s.get('job_s', '')} | {per_s:,.0f} | {s['peak_rss_mib']:,.0f} |")
    return lines


def markdown_options(
    result: dict[str, Any], title: str, workload: str, names: dict[str, str], notes: tuple[str, ...] = ()
) -> str:
    """The summary of an options run (``--stages transactions``, ``side_tables``): the sentence
    ``workload``, the stages ``names`` (key -> label) in a table, each ratio in a sentence, the
    paragraphs ``notes``, the checks."""
    lines = [
        *summary_head(f"cdclake benchmark: {title}, size {result['size']}", result),
        workload,
        *stage_table(result, names, "job"),
    ]
    for name, r in result["ratios"].items():
        lines += [
            "",
            f"{name}: {r['wall']} (wall), {r['job']} (job only); target <= {r['target']} (job): "
            f"{'met' if r['met'] else '**not met**'}.",
        ]
    for note in notes:
        lines += ["", note]
    lines += ["", checks_line(result["checks"]), ""]
    return "\n".join(lines)


def markdown_transactions(result: dict[str, Any]) -> str:
    p, setup = result["params"], result["setup"]
    workload = (
        f"Workload: {setup['events']:,} events in {setup['transactions']:,} source transactions of 1-"
        f"{TRANSACTION_EVENTS} events over {p['keys']:,} keys into a table of {p['base_rows']:,} rows; "
        f"median of {p['reps']} run(s), alternating order."
    )
    names = {"apply": "apply, transactions: ignore", "apply_whole": "apply, transactions: whole"}
    return markdown_options(result, "whole transactions", workload, names)


def markdown_side_tables(result: dict[str, Any]) -> str:
    p, setup = result["params"], result["setup"]
    start = setup["start"]
    workload = (
        f"Workload: {setup['events'] - 1:,} events over {p['keys']:,} keys into a table of {p['base_rows']:,} rows "
        f"and its side tables, after the first event applied with both options on (not measured: "
        f"{start['wall_s']} s, {start['job_s']} s of job; the history seeded, {start['history_rows']:,} versions; "
        f"{start['changes_rows']:,} change row(s)); median of {p['reps']} run(s), rotating order."
    )
    names = {
        "apply": "apply, neither option",
        "apply_change_feed": "apply, change_feed: {}",
        "apply_history": "apply, history: {}",
    }
    checks = result["checks"]
    feed, history = checks["change_feed"], checks["history"]
    side = (
        f"The side tables the runs wrote (first repetition): the change feed's {feed['rows']:,} rows of the run "
        f"({feed['upsert_rows']:,} upserts, {feed['delete_rows']:,} deletes); the history's {history['versions']:,} "
        f"versions ({', '.join(f'{n:,} {k}' for k, n in history['by_change'].items())}), "
        f"{history['current_rows']:,} current and not deleted for the table's {history['table_rows']:,} rows."
    )
    return markdown_options(result, "side tables", workload, names, (side,))


AVRO_KEYS = {
    "read_parse": "1. read+parse, JSON (spark-submit)",
    "apply": "3. apply, JSON (spark-submit)",
    "avro_read_parse": "1. read+parse, Avro (spark-submit)",
    "avro_apply": "3. apply, Avro (spark-submit)",
    "avro_apply_engine": "3. apply, Avro, on the shared engine (warm)",
}
"""The stages of ``--stages avro`` and their labels."""


def measure_avro(ctx: Context) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The ``--stages avro`` run (issue 27's figures without the other stages): the main workload
    in JSON and in Avro (:func:`load`'s, without the growth workload and its big table), read and
    parsed, and applied, each through ``spark-submit`` (a process and JVM of its own), ``p.reps``
    times; then the Avro apply on the shared engine, a Spark Connect server as the table DAG's
    ``apply`` task uses it by default (``CDCLAKE_ENGINE=connect``): warmed by one apply of the
    same range into another copy of the table (a long-running server has compiled the code of the
    applies it runs), then ``p.reps`` applies, each a client process of its own
    (``bench/engine_bench.py _apply``: the task's ``apply_plan`` in a Connect session), measured
    from its start. Returns the stages, the checks of the first repetition's tables and the setup."""
    from cdclake.model.config import TableConfig
    from cdclake.model.offsets import OffsetRange
    from cdclake.model.plan import RunPlan
    from cdclake_dev.engine import engine_token, engine_url
    from engine_bench import CONNECT_URL_ENV, connect_apply_cmd

    p, tag = ctx.p, ctx.bench.tag
    print("generating and loading the workload in JSON and in Avro ...", flush=True)
    spec = wl.WorkloadSpec(events=p.events, keys=p.keys, existing_rows=p.base_rows, new_id_start=p.big_rows)
    encoder = AvroEncoder(ctx.settings.schema_registry_url, f"bench.{tag}.orders_avro-value", ctx.decimal)
    main, avro = load_workload_avro(
        ctx.settings, f"bench.{tag}.orders", spec, ctx.decimal, f"bench.{tag}.orders_avro", encoder
    )
    setup: dict[str, Any] = {
        "events": main.events,
        "json_mean_event_bytes": round(main.bytes / main.events),
        "avro_mean_event_bytes": round(avro.bytes / avro.events),
        "load_s": round(main.load_s + avro.load_s, 1),
        "base_table_s": round(create_base_table(ctx.catalog, f"{ctx.ns}.base", p.base_rows, ctx.decimal), 1),
    }
    runs: dict[str, list[Measured]] = {key: [] for key in AVRO_KEYS}
    for rep in range(1, p.reps + 1):
        print(f"repetition {rep}/{p.reps}", flush=True)
        for key, fmt, loaded in (
            ("read_parse", JSON, main),
            ("apply", JSON, main),
            ("avro_read_parse", "avro", avro),
            ("avro_apply", "avro", avro),
        ):
            stage = key.removeprefix("avro_")
            table = "base" if stage == "read_parse" else f"{key}_r{rep}"
            if stage == "apply":
                ctx.clone("base", table)
            runs[key].append(apply_stage(ctx, f"{key}_r{rep}", table, loaded.range_json, ["--format", fmt], stage))

    engine = ctx.settings.model_copy(update={"spark_connect_port": int(ENGINE.free_port_setting())})
    env = child_env(engine)
    setup["engine_start_s"] = start_parts(engine, (ENGINE,))
    try:
        env[CONNECT_URL_ENV] = f"{engine_url(engine)}/;token={engine_token(engine)}"

        def engine_apply(table: str) -> Measured:
            ctx.clone("base", table)
            entry = {"name": table, "topic": avro.topic, "namespace": ctx.ns, "table": table}
            cfg = TableConfig.model_validate({**entry, "primary_key": ["id"], "value_format": "avro"})
            plan = RunPlan(table=cfg, run_id=f"bench-{table}", range=OffsetRange.from_json(avro.range_json))
            return measure(table, connect_apply_cmd(plan.to_json()), env, ctx.bench.logs)

        warmup = engine_apply("avro_engine_warmup")
        setup["engine_warmup"] = {"wall_s": round(warmup.wall_s, 2), "job_s": warmup.result.get("job_s")}
        for rep in range(1, p.reps + 1):
            runs["avro_apply_engine"].append(engine_apply(f"avro_apply_engine_r{rep}"))
    finally:
        stop_parts(engine, (ENGINE,))
    checks = {
        "apply": ctx.check("apply_r1", main),
        "avro_apply": ctx.check("avro_apply_r1", avro),
        "avro_apply_engine": ctx.check("avro_apply_engine_r1", avro),
    }
    print("  checks: " + ", ".join(f"{k} {c['ok']}" for k, c in checks.items()), flush=True)
    return {key: summarize(ms, p.events) for key, ms in runs.items()}, checks, setup


def avro_ratios(stages: dict[str, Any]) -> dict[str, Any]:
    """Issue 27's targets on ``--stages avro``'s stages (medians of wall seconds): apply over
    read+parse in Avro (both ``spark-submit``), and seconds per 1,000,000 Avro events applied
    through ``spark-submit`` and on the warm engine; JSON's apply over read+parse beside."""
    out = {}
    for name, (a, b) in {
        "avro apply/read_parse": ("avro_apply", "avro_read_parse"),
        "apply/read_parse": ("apply", "read_parse"),
    }.items():
        value = ratio(stages[a]["wall_s"], stages[b]["wall_s"])
        target = TARGETS[name]
        out[name] = {
            "wall": value,
            "job": ratio(stages[a].get("job_s"), stages[b].get("job_s")),
            "target": target,
            "met": value is not None and value <= target,
        }
    for name, key in (
        ("avro apply s per 1M events", "avro_apply"),
        ("avro apply s per 1M events, engine", "avro_apply_engine"),
    ):
        per_1m = stages[key]["wall_s"] * 1_000_000 / stages[key]["events"]
        target = TARGETS["avro apply s per 1M events"]
        out[name] = {"wall": round(per_1m, 3), "target": target, "met": per_1m <= target}
    return out


def markdown_avro(result: dict[str, Any]) -> str:
    p, setup = result["params"], result["setup"]
    warm = setup["engine_warmup"]
    workload = (
        f"Workload: {setup['events']:,} events over {p['keys']:,} keys into a table of {p['base_rows']:,} rows, "
        f"in JSON ({setup['json_mean_event_bytes']:,} bytes an event) and in Avro ({setup['avro_mean_event_bytes']:,}); "
        f"median of {p['reps']} run(s). The engine: started in {setup['engine_start_s']} s, warmed by one Avro apply "
        f"of the same range into another copy ({warm['wall_s']} s wall, {warm['job_s']} s of apply)."
    )
    lines = [
        *summary_head(f"cdclake benchmark: Avro beside JSON, size {result['size']}", result),
        workload,
        *stage_table(result, AVRO_KEYS, "wall"),
    ]
    lines += ["", "| ratio | measured (wall) | job only | target | met |", "|---|---:|---:|---:|---|"]
    for name, r in result["ratios"].items():
        lines.append(
            f"| {name} | {r['wall']} | {r.get('job') if r.get('job') is not None else ''} | <= {r['target']} | "
            f"{'yes' if r['met'] else '**no**'} |"
        )
    lines += [
        "",
        "The engine's peak RSS is its client's (the server's memory is not sampled here: `make bench-engine`).",
        "",
        checks_line(result["checks"]),
        "",
    ]
    return "\n".join(lines)


FLATTENED_KEYS = {
    "read_parse": "1. read+parse, envelopes (spark-submit)",
    "apply": "3. apply, envelopes (spark-submit)",
    "flattened_read_parse": "1. read+parse, flattened (spark-submit)",
    "flattened_apply": "3. apply, flattened (spark-submit)",
}
"""The stages of ``--stages flattened`` and their labels."""
FLATTENED = "flattened"
"""``bench/spark_stage.py``'s ``--format`` of flattened records (``json_with_schema``, ``flattened: {}``)."""


def measure_flattened(ctx: Context) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The ``--stages flattened`` run (issue 55's figures): the main workload as Debezium envelopes
    and flattened (:class:`lake.FlattenEncoder`: ``ExtractNewRecordState`` with ``add.fields``
    :data:`~cdclake.model.flattened.TRANSFORM_FIELDS`, rewritten deletes), same keys, each to a
    topic of its own; then read+parse and apply of each through ``spark-submit`` (a process and
    JVM of its own), ``p.reps`` times, the two formats in alternating order (repetition 1
    envelopes first). Returns the stages, the checks of the first repetition's tables against the
    source and the setup (``envelope_mean_event_bytes``, ``flattened_mean_event_bytes``)."""
    p, tag = ctx.p, ctx.bench.tag
    print("generating and loading the workload as envelopes and flattened ...", flush=True)
    spec = wl.WorkloadSpec(events=p.events, keys=p.keys, existing_rows=p.base_rows, new_id_start=p.big_rows)
    encoder = FlattenEncoder(ctx.decimal)
    main, flat = load_workload_avro(
        ctx.settings, f"bench.{tag}.orders", spec, ctx.decimal, f"bench.{tag}.orders_flat", encoder
    )
    setup: dict[str, Any] = {
        "events": main.events,
        "ops": dict(main.state.ops),
        "envelope_mean_event_bytes": round(main.bytes / main.events),
        "flattened_mean_event_bytes": round(flat.bytes / flat.events),
        "add_fields": TRANSFORM_FIELDS,
        "load_s": round(main.load_s + flat.load_s, 1),
        "flatten_s": round(encoder.seconds, 1),
        "base_table_s": round(create_base_table(ctx.catalog, f"{ctx.ns}.base", p.base_rows, ctx.decimal), 1),
    }
    print(
        f"  loaded {main.events} events: {main.bytes / 2**20:.1f} MiB as envelopes "
        f"({setup['envelope_mean_event_bytes']:,} bytes an event), {flat.bytes / 2**20:.1f} MiB flattened "
        f"({setup['flattened_mean_event_bytes']:,}; {encoder.seconds:.0f} s flattening)",
        flush=True,
    )
    runs: dict[str, list[Measured]] = {key: [] for key in FLATTENED_KEYS}
    formats = [("", JSON, main), ("flattened_", FLATTENED, flat)]
    for rep in range(1, p.reps + 1):
        print(f"repetition {rep}/{p.reps}", flush=True)
        for prefix, fmt, loaded in formats if rep % 2 else formats[::-1]:
            for stage in ("read_parse", "apply"):
                key = f"{prefix}{stage}"
                table = "base" if stage == "read_parse" else f"{key}_r{rep}"
                if stage == "apply":
                    ctx.clone("base", table)
                runs[key].append(apply_stage(ctx, f"{key}_r{rep}", table, loaded.range_json, ["--format", fmt], stage))
    checks = {"apply": ctx.check("apply_r1", main), "flattened_apply": ctx.check("flattened_apply_r1", flat)}
    print("  checks: " + ", ".join(f"{k} {c['ok']}" for k, c in checks.items()), flush=True)
    return {key: summarize(ms, p.events) for key, ms in runs.items()}, checks, setup


def flattened_ratios(stages: dict[str, Any]) -> dict[str, Any]:
    """``flattened/envelope`` of read+parse and of apply (medians of wall and of job seconds)
    against :data:`FLATTENED_TARGET` (on the job seconds: the JVM's start is no format's cost)."""
    out = {}
    for stage in ("read_parse", "apply"):
        a, b = stages[f"flattened_{stage}"], stages[stage]
        job = ratio(a.get("job_s"), b.get("job_s"))
        out[f"flattened/envelope {stage}"] = {
            "wall": ratio(a["wall_s"], b["wall_s"]),
            "job": job,
            "target": FLATTENED_TARGET,
            "met": job is not None and job <= FLATTENED_TARGET,
        }
    return out


def markdown_flattened(result: dict[str, Any]) -> str:
    p, setup = result["params"], result["setup"]
    workload = (
        f"Workload: {setup['events']:,} events over {p['keys']:,} keys into a table of {p['base_rows']:,} rows, "
        f"as Debezium envelopes (`json_with_schema`, {setup['envelope_mean_event_bytes']:,} bytes an event) and "
        f"flattened by `ExtractNewRecordState` (`add.fields={setup['add_fields']}`, deletes rewritten; "
        f"{setup['flattened_mean_event_bytes']:,} bytes an event); median of {p['reps']} run(s), alternating order."
    )
    lines = [
        *summary_head(f"cdclake benchmark: flattened events beside envelopes, size {result['size']}", result),
        workload,
        *stage_table(result, FLATTENED_KEYS, "wall"),
        "",
        "| ratio | measured (wall) | job only | target (job) | met |",
        "|---|---:|---:|---:|---|",
    ]
    for name, r in result["ratios"].items():
        lines.append(
            f"| {name} | {r['wall']} | {r['job'] if r['job'] is not None else ''} | <= {r['target']} | "
            f"{'yes' if r['met'] else '**no**'} |"
        )
    lines += ["", checks_line(result["checks"]), ""]
    return "\n".join(lines)


OPTION_STAGES = {
    "transactions": (
        measure_whole_transactions,
        partial(cost_ratios, target=WHOLE_TRANSACTIONS_TARGET),
        markdown_transactions,
    ),
    "side_tables": (measure_side_tables, partial(cost_ratios, target=SIDE_TABLES_TARGET), markdown_side_tables),
    "avro": (measure_avro, avro_ratios, markdown_avro),
    "flattened": (measure_flattened, flattened_ratios, markdown_flattened),
}
"""The runs of ``--stages`` other than ``all``: what measures them, their ratios against their
targets, the summary's writer."""


def ratios(stages: dict[str, Any]) -> dict[str, Any]:
    """Each target ratio (medians of wall seconds), whether it is met, and the job-only ratio."""

    pairs = {
        "apply/append": ("apply", "append"),
        "apply/read_parse": ("apply", "read_parse"),
        "apply/peer": ("apply", "peer"),
        "growth big/base": ("growth_big", "growth_base"),
        "dag no-new/trivial": ("dag_no_new", "dag_trivial"),
        "avro apply/read_parse": ("avro_apply", "avro_read_parse"),
        "avro apply/append": ("avro_apply", "avro_append"),
    }
    out = {}
    for name, (a, b) in pairs.items():
        if a not in stages or b not in stages:  # the Avro append at --one-process 1
            continue
        value = ratio(stages[a]["wall_s"], stages[b]["wall_s"])
        out[name] = {
            "wall": value,
            "job": ratio(stages[a].get("job_s"), stages[b].get("job_s")),
            "target": TARGETS[name],
            "met": value is not None and value <= TARGETS[name],
        }
    per_1m = stages["avro_apply"]["wall_s"] * 1_000_000 / stages["avro_apply"]["events"]
    out["avro apply s per 1M events"] = {
        "wall": round(per_1m, 3),
        "target": TARGETS["avro apply s per 1M events"],
        "met": per_1m <= TARGETS["avro apply s per 1M events"],
    }
    peak = stages["apply"]["peak_rss_mib"]
    out["apply peak RSS GiB"] = {
        "wall": round(peak / 1024, 2),
        "target": 4.0,
        "met": peak * 2**20 <= APPLY_PEAK_RSS_TARGET,
    }
    return out


def markdown(result: dict[str, Any]) -> str:
    p = result["params"]
    lines = [
        *summary_head(f"cdclake benchmark: size {result['size']}", result, f"Spark `{result['spark_master']}`"),
        f"Workload: {p['events']:,} events over {p['keys']:,} keys into a table of {p['base_rows']:,} rows; growth batch "
        f"{p['growth_events']:,} events into {p['base_rows']:,} and {p['big_rows']:,} rows; median of {p['reps']} run(s). "
        f"Decimal column: {result['decimal_column']}.",
        "",
        "| stage | wall s (median) | job s (median) | events/s (wall) | peak RSS MiB (tree) |",
        "|---|---:|---:|---:|---:|",
    ]
    names = {
        "read_parse": "1. read+parse (floor)",
        "append": "2. append (write floor)",
        "apply": "3. apply (ours)",
        "avro_read_parse": "1. read+parse (floor), Avro",
        "avro_append": "2. append (write floor), Avro",
        "avro_apply": "3. apply (ours), Avro",
        "peer": "4. peer: pyiceberg upsert of reduced rows",
        "growth_base": f"5. growth: apply into {p['base_rows']:,} rows",
        "growth_big": f"5. growth: apply into {p['big_rows']:,} rows",
        "dag_trivial": "6. trivial one-task DAG run",
        "dag_no_new": "6. table DAG run, no new events",
        "dag_one_event": "6. table DAG run, one event",
    }
    for key, label in names.items():
        s = result["stages"].get(key)
        if not s:
            continue
        eps = f"{s['events_per_s']:,.0f}" if "events_per_s" in s else ""
        job = s["job_s"] if s.get("job_s") is not None else (f"spark {s['spark_s']}" if s.get("spark_s") else "")
        lines.append(f"| {label} | {s['wall_s']} | {job} | {eps} | {s['peak_rss_mib']:,.0f} |")
    setup = result.get("setup", {})
    if "avro_workload" in setup:
        json_w, avro_w = setup["workload"], setup["avro_workload"]
        prepass = [r["result"].get("prepass_s") for r in result["stages"]["avro_read_parse"]["runs"]]
        lines += [
            "",
            f"Avro: {avro_w['mean_event_bytes']:,} bytes an event ({json_w['mean_event_bytes']:,} in JSON); "
            f"the schema-id pass of the Avro read+parse (in its job seconds): "
            f"{', '.join(f'{x:.1f}' for x in prepass if x is not None)} s; Avro stages in "
            f"{'one process with every stage (no Avro append)' if p.get('one_process') else 'processes of their own'}.",
        ]
    lines += ["", "| ratio | measured (wall) | job only | target | met |", "|---|---:|---:|---:|---|"]
    for name, r in result["ratios"].items():
        lines.append(
            f"| {name} | {r['wall']} | {r.get('job') if r.get('job') is not None else ''} | <= {r['target']} | "
            f"{'yes' if r['met'] else '**no**'} |"
        )
    lines += ["", checks_line(result["checks"]), ""]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = bench_parser("bench/run.py", __doc__)
    add_size_options(
        parser,
        SIZES,
        "full",
        "preset (full: issue 6's workload)",
        {
            "events": "events of the main workload",
            "keys": "keys the main workload touches",
            "base_rows": "rows of the starting table",
            "big_rows": "rows of the big table of the growth stage",
            "growth_events": "events of the growth batch",
            "growth_keys": "keys of the growth batch",
            "reps": "repetitions of each measurement (median)",
            "one_process": "1: every Spark stage in one process (no Avro append); 0: each stage in a process of its own",
        },
    )
    parser.add_argument(
        "--stages",
        choices=("all", *OPTION_STAGES),
        default="all",
        help="all: stages 1-6; transactions: only the whole-transactions stages (apply beside apply_whole); "
        "side_tables: only the side tables' stages (apply beside apply_change_feed and apply_history); "
        "avro: read+parse and apply in JSON and in Avro, and the Avro apply on the warm shared engine; "
        "flattened: read+parse and apply of Debezium envelopes and of the same events flattened "
        "(ExtractNewRecordState)",
    )
    add_run_options(parser, external_broker=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_dag"]:
        dag_parser = argparse.ArgumentParser(prog="bench/run.py _dag")
        dag_parser.add_argument("--table")
        dag_parser.add_argument("--trivial", action="store_true")
        return dag_run_main(dag_parser.parse_args(argv[1:]))
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
