"""Soak under faults (``make soak``): the production topology under a seeded DML/DDL workload and
seeded faults for a set time; then everything catches up and every table is compared with its
source.

The topology of :mod:`cdclake_dev.production` (PostgreSQL, the Iceberg REST catalog, S3, Spark
standalone with the Connect server, SASL Kafka, MariaDB + Debezium, Airflow's four processes on the
LocalExecutor) on free loopback ports runs ``SOAK_TABLES`` tables (default 20; composite key,
keyless, wide, keyed in turn: :mod:`soak_tables`), each with its DAG every minute, while a seeded
workload commits multi-table transactions and now and then a DDL (an added column, a widened type)
for ``SOAK_MINUTES`` (default 60), and the fault injector (:mod:`soak_faults`) kills, pauses and
restarts the parts at seeded moments (``SOAK_SEED``). Then the workload and the faults stop, every
part is started again if down, Debezium's topics settle, and every table's runs apply to the
topic's end (bounded); ``cdc_reconcile`` runs in report mode, and each table is compared directly
with ``SELECT *`` of its source. The result (``bench/results/soak-<time>.json`` and ``.md``):
rows lost, stale (deleted at the source, still in the lake), duplicated and wrong per table, the
project's reconcile per table, faults by kind with their moments, runs, failed tries and their
first error lines, unrecovered runs, the longest time a table stayed behind its freshness target,
the RSS of the Spark Connect server and the Airflow scheduler over time and its growth over the
last half. Exit status 1 on any of :func:`failures` (a row lost, stale, duplicated or wrong, a run
Airflow's retries did not recover, an error the docs do not explain, ...; docs/benchmarks.md,
"Soak under faults").

    .venv/bin/python bench/soak.py --minutes 10 --tables 6 --seed 7
    make soak-short   # 2 minutes, 3 tables, eight faults of eight kinds
"""

from __future__ import annotations

import json
import logging
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdclake_dev import engine, production_demo
from cdclake_dev.production import Ports, Topology
from harness import BenchRun, add_run_options, bench_parser, summary_head
from soak_faults import FAULTS, FaultContext, FaultInjector
from soak_tables import SoakTable, Workload, compare_table, soak_tables, write_tables_config
from soak_watch import Watcher, jvm_heap_dump, runs_and_tries

log = logging.getLogger("soak")

DAILY_DAGS = ("cdc_reconcile", "cdc_maintenance")


@dataclass(frozen=True)
class SoakConfig:
    """One soak's figures.

    Attributes:
        minutes: how long the workload and the faults run.
        tables: how many tables (:func:`soak_tables.soak_tables`).
        seed: the workload's and the faults' random seed.
        faults: how many faults (default: 0.6 per minute, at least one of each kind).
        kinds: the fault kinds (default: all of :data:`soak_faults.FAULTS`).
        initial_rows: rows per table before the workload.
        pause_s: pause between two transactions of the workload.
        ddl_interval_s: seconds between two DDL statements.
        task_timeout_minutes: the tables' task timeout (the engine pause outlasts it).
        freshness_minutes: the tables' freshness target.
        catch_up_minutes: how long the end waits for every table to apply to its topic's end.
        retries: the tables' task retries (the first 10 s after the failure, doubling): enough that
            a run's last try starts after the last fault, else a run whose every try met a fault
            fails and counts as unrecovered (0.6 faults a minute and the default 3 retries: the
            last try starts 70 s after the first).
        heap_dump: a folder where the engine's heap is dumped when the load stops (HPROF, some
            hundred MiB; kept outside the work folder, which the end deletes).
    """

    minutes: float = 60.0
    tables: int = 20
    seed: int = 1
    faults: int | None = None
    kinds: tuple[str, ...] = tuple(FAULTS)
    initial_rows: int = 200
    pause_s: float = 0.2
    ddl_interval_s: float = 60.0
    task_timeout_minutes: int = 3
    freshness_minutes: int = 5
    catch_up_minutes: float = 20.0
    retries: int = 3
    heap_dump: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def fault_count(self) -> int:
        return self.faults if self.faults is not None else max(len(self.kinds), round(0.6 * self.minutes))


def prepare(topology: Topology, cfg: SoakConfig) -> tuple[list[SoakTable], Any, Workload]:
    """Start the topology's parts and the connector (idempotent), create the source tables, write
    their table config, start Airflow on it (stopping an Airflow already running on another
    config) and unpause the tables' DAGs. Returns the tables, Airflow and the workload."""
    for line in topology.start_parts():
        log.info(line)
    log.info(topology.start_connector())
    tables = soak_tables(cfg.tables)
    topology.tables_config = write_tables_config(
        topology.state_dir / "soak-tables.yaml",
        tables,
        topology.settings,
        task_timeout_minutes=cfg.task_timeout_minutes,
        freshness_minutes=cfg.freshness_minutes,
        retries=cfg.retries,
    )
    workload = Workload(topology.settings, tables, cfg.seed, pause_s=cfg.pause_s, ddl_interval_s=cfg.ddl_interval_s)
    workload.create(cfg.initial_rows)
    if topology.airflow is not None:
        topology.airflow.stop()
        topology.airflow = None
    airflow = topology.start_airflow()
    dag_ids = {t.dag_id for t in tables}
    airflow.wait_dags(dag_ids | set(DAILY_DAGS), timeout_s=600, unpaused=False)
    for dag_id in sorted(dag_ids):
        airflow.set_paused(dag_id, False)
    log.info("%d tables, their DAGs unpaused (every minute)", len(tables))
    return tables, airflow, workload


def catch_up(topology: Topology, airflow: Any, timeout_s: float) -> float:
    """Start every part that is down, wait until Debezium's topics settle and every table has
    applied its topic to the end. Returns seconds.

    Raises:
        RuntimeError: not caught up within ``timeout_s`` seconds (names the tables behind).
    """
    t0 = time.monotonic()
    topology.start_parts()
    topology.start_connector()
    airflow.start()
    production_demo.wait_published(topology.settings, topology, timeout_s=timeout_s)
    done: dict[str, bool] = {}
    while time.monotonic() - t0 < timeout_s:
        try:
            done = production_demo.caught_up_tables(topology)
        except Exception as e:  # a part still starting: asked again
            log.info("catch-up check: %s", e)
        if done and all(done.values()):
            return time.monotonic() - t0
        time.sleep(5.0)
    raise RuntimeError(f"not caught up within {timeout_s:.0f} s: {sorted(n for n, ok in done.items() if not ok)}")


FINAL_RECONCILE_S = 2400
"""How long the end waits for its ``cdc_reconcile`` run (seconds); a run that takes longer (it
waits behind a run the faults triggered: the DAG runs one at a time) is recorded, and the rest
of the end (the direct compare, the report) goes on."""


def final_reconcile(topology: Topology, airflow: Any, tables: list[SoakTable]) -> dict[str, Any]:
    """Run ``cdc_reconcile`` (report mode) and read each upsert table's newest summary; ``state``
    is the run's, or ``not finished within <n> s`` (:data:`FINAL_RECONCILE_S`)."""
    from cdclake.io.catalog import load_catalog
    from cdclake.pipeline.status import last_reconciles

    run_id = f"soak_final_{time.strftime('%Y%m%dT%H%M%S')}"
    started_ms = int(time.time() * 1000)
    # the runs of the load (its daily run over every table, the faults' runs) end with the load:
    # the DAG runs one run at a time, and the eighth soak's daily run, started at the first minutes
    # and slowed by every fault, would have held the final run past FINAL_RECONCILE_S
    stopped = airflow.fail_unfinished_runs("cdc_reconcile")
    if stopped:
        log.info("cdc_reconcile runs of the load marked failed before the final run: %s", ", ".join(stopped))
    airflow.set_paused("cdc_reconcile", False)
    # tables that did not catch up make its catch-up wait: bounded, so that the report is written
    airflow.trigger("cdc_reconcile", run_id, {"mode": "report", "catch_up_timeout_minutes": 5})
    try:
        state = airflow.wait_run("cdc_reconcile", run_id, timeout_s=FINAL_RECONCILE_S, poll_s=3.0)["state"]
    except RuntimeError as e:  # recorded: the soak's figures are written whatever the reconcile did
        log.warning("final reconcile: %s", e)
        state = f"not finished within {FINAL_RECONCILE_S} s"
    summaries = last_reconciles(
        load_catalog(topology.task_settings()), int(time.time() * 1000), [t.identifier for t in tables]
    )
    out: dict[str, Any] = {"state": state, "tables": {}, "load_runs_stopped": stopped}
    for t in tables:
        s = summaries.get(t.identifier)
        if t.changelog:
            out["tables"][t.name] = "not reconciled (write_mode: changelog)"
        elif s is None or s.reconciled_at_ms < started_ms:
            out["tables"][t.name] = "no result of the final run"
        else:
            out["tables"][t.name] = {
                k: getattr(s, k)
                for k in ("source_rows", "lake_rows", "only_in_source", "only_in_lake", "differing", "unsettled")
            }
    return out


def run_soak(topology: Topology, cfg: SoakConfig) -> dict[str, Any]:
    """The soak on ``topology`` (started or not; an Airflow it runs is restarted on the soak's
    table config): the result (module docstring; ``failures``: :func:`failures`, ``ok``: none)."""
    tables, airflow, workload = prepare(topology, cfg)
    rng = random.Random(cfg.seed)
    ctx = FaultContext(
        topology,
        airflow,
        rng,
        [t.dag_id for t in tables],
        cfg.task_timeout_minutes * 60.0,
        reconciled=[t.name for t in tables if not t.changelog],
    )
    injector = FaultInjector(ctx, list(cfg.kinds), cfg.fault_count, cfg.minutes * 60)
    watcher = Watcher(topology, airflow, cfg.freshness_minutes, injector.busy)
    start = time.time()
    workload.start()
    watcher.start()
    injector.start()
    log.info("soak: %.1f min, %d faults of %s", cfg.minutes, cfg.fault_count, sorted(cfg.kinds))
    time.sleep(cfg.minutes * 60)
    workload.stop()
    injector.stop()
    end = time.time()
    if cfg.heap_dump is not None:  # the engine as the load left it (docs/benchmarks.md, the engine's heap)
        dumped = jvm_heap_dump(engine.engine_status(topology.settings).pid, cfg.heap_dump / "engine-end-of-load.hprof")
        log.info("the engine's heap at the end of the load: %s", dumped or "not dumped")
    log.info("workload and faults stopped: catching up")
    caught_up_error = None
    try:
        caught_up_s: float | None = catch_up(topology, airflow, cfg.catch_up_minutes * 60)
    except RuntimeError as e:
        caught_up_s, caught_up_error = None, str(e)
    watcher.stop()
    reconcile = final_reconcile(topology, airflow, tables)
    per_table: dict[str, Any] = {}
    for t in tables:
        try:
            per_table[t.name] = {"kind": t.kind, **compare_table(topology.settings, topology.task_settings(), t)}
        except Exception as e:  # a table that cannot be read counts as wrong
            per_table[t.name] = {"kind": t.kind, "error": f"{type(e).__name__}: {e}"[:500], "wrong": 1}
        per_table[t.name]["reconcile"] = reconcile["tables"][t.name]
    totals = {k: sum(int(v.get(k) or 0) for v in per_table.values()) for k in ("lost", "stale", "duplicated", "wrong")}
    airflow_figures = runs_and_tries(
        airflow, {t.dag_id for t in tables} | set(DAILY_DAGS), topology.state_dir / "airflow" / "logs"
    )
    table_failed_runs = [r for r in airflow_figures["failed_runs"] if r["dag_id"] not in DAILY_DAGS]
    result = {
        "config": {k: v for k, v in vars(cfg).items() if k != "extra"} | {"fault_count": cfg.fault_count},
        "duration_s": round(end - start),
        "caught_up_after_s": None if caught_up_s is None else round(caught_up_s),
        "caught_up_error": caught_up_error,
        "totals": totals,
        "tables": per_table,
        "reconcile_state": reconcile["state"],
        "reconcile_runs_of_the_load_stopped": reconcile["load_runs_stopped"],
        "faults": [r.as_dict() for r in injector.records],
        "faults_by_kind": dict(Counter(r.kind for r in injector.records)),
        "fault_errors": [r.as_dict() for r in injector.records if r.error],
        "restarted_by_watcher": watcher.restarts,
        "workload": dict(workload.counts) | {"ddl": workload.ddl, "errors": workload.errors[:20]},
        "airflow": airflow_figures,
        "unrecovered_table_runs": table_failed_runs,
        "lag": watcher.lag_figures(),
        "memory": watcher.memory_figures(start, end),
        "sample_errors": dict(watcher.sample_errors),
    }
    result["failures"] = failures(result)
    result["ok"] = not result["failures"]
    log.info(
        "soak result: %s", json.dumps({k: v for k, v in result.items() if k not in ("faults", "workload")}, default=str)
    )
    return result


def failures(result: dict[str, Any]) -> list[str]:
    """What makes a soak fail, one line each; empty when it passed.

    A soak fails when the tables did not catch up after the load (with the catch-up's error, every
    failed try and its error, the faults' own errors, what the watcher restarted and its sampled
    errors), when a row is lost, stale, duplicated or wrong, when ``cdc_reconcile`` did not succeed
    or reported a keyed table different, when a fault could not be injected, when a table DAG run
    ended failed (Airflow's retries did not recover it), when a failed try's error is one neither
    docs/errors.md nor docs/operations.md explains, or when the workload ran no DDL or no
    transaction.

    Args:
        result: :func:`run_soak`'s result (its ``failures`` and ``ok`` keys are not read).
    """
    out: list[str] = []
    if result["caught_up_after_s"] is None:
        out.append("not caught up: " + _why_behind(result))
    if any(result["totals"].values()):
        out.append(f"rows lost, stale, duplicated or wrong: {result['totals']}")
    if result["reconcile_state"] != "success":
        out.append(f"cdc_reconcile ended {result['reconcile_state']}")
    for name, table in result["tables"].items():
        reconciled = table.get("reconcile") or {}
        if table["kind"] != "keyless" and any(
            reconciled.get(k) for k in ("only_in_source", "only_in_lake", "differing")
        ):
            out.append(f"{name}: reconcile reported {reconciled}")
    out += [f"fault error: {f}" for f in result["fault_errors"]]
    unrecovered = {(r["dag_id"], r["run_id"]) for r in result["unrecovered_table_runs"]}
    out += [
        f"unrecovered: {t['dag_id']} {t['run_id']} {t['task_id']} try {t['try']}: {str(t['error'])[:300]}"
        for t in result["airflow"]["failed_try_list"]
        if (t["dag_id"], t["run_id"]) in unrecovered
    ]
    out += [f"unexplained failed-try error: {e}" for e in result["airflow"]["unexplained_errors"]]
    if not (result["workload"].get("ddl") and result["workload"].get("transactions")):
        out.append(f"the workload ran no DDL or no transaction: {result['workload']}")
    return out


def _why_behind(result: dict[str, Any]) -> str:
    """What a soak that did not catch up left to read: the catch-up's error, the tries that failed
    and their errors, the faults' own errors, what the watcher restarted and its sampled errors."""
    lines = [str(result["caught_up_error"])]
    lines += [
        f"{t['dag_id']} {t['run_id']} {t['task_id']} try {t['try']}: {str(t['error'])[:300]}"
        for t in result["airflow"]["failed_try_list"]
    ]
    lines.append(f"restarted by the watcher: {result['restarted_by_watcher']}")
    lines.append(f"sampled errors: {result['sample_errors']}")
    return "\n".join(lines)


def markdown(result: dict[str, Any]) -> str:
    """The report's summary (Markdown)."""
    s = result["soak"]
    lines = summary_head("Soak under faults", result)
    c = s["config"]
    lines += [
        f"{c['tables']} tables, {s['duration_s'] / 60:.1f} min of load (seed {c['seed']}), "
        f"{len(s['faults'])} faults of {len(s['faults_by_kind'])} kinds; caught up "
        + (
            f"{s['caught_up_after_s']} s after the end."
            if s["caught_up_after_s"] is not None
            else f"NOT: {s['caught_up_error']}"
        ),
        "",
        ("**Passed.**" if not s["failures"] else "**Failed:**\n\n" + "\n".join(f"- {f}" for f in s["failures"])),
        "",
        f"**Rows lost {s['totals']['lost']}, stale {s['totals']['stale']}, duplicated {s['totals']['duplicated']}, "
        f"wrong {s['totals']['wrong']}**; final reconcile run: {s['reconcile_state']} (runs of the load marked "
        f"failed before it: {', '.join(s.get('reconcile_runs_of_the_load_stopped') or []) or 'none'}).",
        "",
        "| table | kind | source rows | lake rows | lost | stale | dup | wrong | reconcile | max lag s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, t in s["tables"].items():
        r = t["reconcile"]
        rec = r if isinstance(r, str) else f"{r['only_in_source']}/{r['only_in_lake']}/{r['differing']} (src/lake/diff)"
        lag = s["lag"]["tables"].get(name, {}).get("max_lag_s")
        lines.append(
            f"| {name} | {t['kind']} | {t.get('source_rows')} | {t.get('lake_rows')} | {t.get('lost')} | "
            f"{t.get('stale')} | {t.get('duplicated')} | {t.get('wrong')} | {rec} | {lag} |"
        )
    a = s["airflow"]
    w = s["workload"]
    lines += [
        "",
        "Faults by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(s["faults_by_kind"].items())) + ".",
        f"Faults that failed themselves: {len(s['fault_errors'])}; parts found down and restarted by the watcher: "
        f"{len(s['restarted_by_watcher'])}.",
        f"Workload: {w.get('transactions', 0)} transactions, {w.get('inserted', 0)} inserts, {w.get('updated', 0)} "
        f"updates, {w.get('deleted', 0)} deletes, {len(w.get('ddl', []))} DDL.",
        f"Airflow: {a['runs']} runs, {a['failed_tries']} failed tries, {len(s['unrecovered_table_runs'])} table "
        f"runs not recovered by retries; longest behind the freshness target ({s['lag']['target_s']:.0f} s): "
        f"{s['lag']['longest_behind_target_s']:.0f} s ({s['lag']['longest_behind_table']}).",
        "",
        f"Failed tries whose error neither docs/errors.md nor docs/operations.md explains: {len(a['unexplained_errors'])}.",
        "",
        "| failed tries | first error line | explained in docs/errors.md or docs/operations.md |",
        "|---|---|---|",
        *[
            f"| {n} | {line.replace('|', '/')} | {(a['explained_by'].get(line) or 'NOT EXPLAINED').replace('|', '/')} |"
            for line, n in a["failed_try_errors"].items()
        ],
        "",
        "| process | samples | peak MiB | pids | growth over the last half | last pid seen before half-time |",
        "|---|---|---|---|---|---|",
        *[
            f"| {p} | {m['samples']} | {m['peak_mib']} | {m['pids']} | {m['growth_last_half_pct']} % "
            f"| {m.get('running_before_half_s')} s |"
            for p, m in s["memory"].items()
        ],
        "",
        "The engine's live heap, each sample (minutes since the start, pid, MiB): "
        + (
            ", ".join(
                f"{t} {pid} {mib}" for t, pid, mib in s["memory"].get("spark-connect live heap", {}).get("series", [])
            )
            or "none"
        ),
        "",
        *_class_growth_lines(s["memory"].get("spark-connect live heap", {}).get("classes")),
    ]
    return "\n".join(lines)


def _class_growth_lines(classes: dict[str, Any] | None) -> list[str]:
    """The report's table of the classes that grew most in the last engine process (the watcher's
    class histograms; nothing when it kept fewer than two)."""
    if not classes:
        return []
    return [
        f"What grew most in the last engine process, minute {classes['from_min']} to {classes['to_min']} "
        "(`jcmd GC.class_histogram`, live objects):",
        "",
        "| class | instances | MiB before | MiB after | grew MiB |",
        "|---|---|---:|---:|---:|",
        *[
            f"| `{r['class']}` | {r['instances'][0]} -> {r['instances'][1]} | {r['mib_before']} | {r['mib_after']} "
            f"| {r['grew_mib']} |"
            for r in classes["grew"]
        ],
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("soak.py", __doc__)
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", 60)))
    parser.add_argument("--tables", type=int, default=int(os.environ.get("SOAK_TABLES", 20)))
    parser.add_argument("--seed", type=int, default=int(os.environ.get("SOAK_SEED", 1)))
    parser.add_argument("--faults", type=int, help="how many faults (default: 0.6 a minute, at least one per kind)")
    parser.add_argument(
        "--retries", type=int, default=SoakConfig.retries, help="the tables' task retries (10 s, doubling)"
    )
    parser.add_argument(
        "--initial-rows", type=int, default=SoakConfig.initial_rows, help="rows per table before the workload"
    )
    parser.add_argument(
        "--ddl-interval", type=float, default=SoakConfig.ddl_interval_s, help="seconds between two DDL statements"
    )
    parser.add_argument("--kinds", help=f"comma-separated fault kinds (default: all: {','.join(FAULTS)})")
    parser.add_argument(
        "--heap-dump",
        type=Path,
        default=os.environ.get("SOAK_HEAP_DUMP") or None,
        help="a folder for the engine's heap dump when the load stops",
    )
    add_run_options(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cfg = SoakConfig(
        minutes=args.minutes,
        tables=args.tables,
        seed=args.seed,
        faults=args.faults,
        retries=args.retries,
        initial_rows=args.initial_rows,
        ddl_interval_s=args.ddl_interval,
        kinds=tuple(args.kinds.split(",")) if args.kinds else tuple(FAULTS),
        heap_dump=args.heap_dump,
    )
    run = BenchRun.begin(args, "soak", "cdclake-soak-")
    run.work.chmod(0o755)  # PostgreSQL runs as the `postgres` user when this runs as root
    topology = Topology(run.work, Ports.free())
    try:
        soak = run_soak(topology, cfg)
    finally:
        topology.stop()
    run.finish(run.info(soak=soak), markdown)
    for line in soak["failures"]:
        log.error("soak failed: %s", line)
    return 0 if soak["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
