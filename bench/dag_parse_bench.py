"""DAG file parse time with a fleet of discovered tables: ``dags/cdc_tables.py`` parsed by
Airflow's ``DagBag`` (what the dag-processor runs per file) with ``--tables`` registered topics.

    .venv/bin/python bench/dag_parse_bench.py                 # 1,000 tables, 3 parses
    .venv/bin/python bench/dag_parse_bench.py --tables 200 --reps 1

The table config and the registry are :func:`cdclake_dev.fleet.write_fleet`'s (one ``discover``
pattern; one table in ten without a primary key), in a temporary folder. Each parse is a fresh
Python process; the figure is the file's processing time as the ``DagBag`` reports it
(``dagbag_stats``: importing the file and building its DAGs; Airflow's own import before it is
not counted), median of ``--reps``. Target: ``dag_parse_1000_s`` <= 5 s (issue 29; Airflow's
``dagbag_import_timeout`` defaults to 30 s). Nothing else runs: no broker, no engine.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from cdclake.settings import PROJECT_ROOT, Settings
from cdclake_dev.airflow_env import airflow_env
from cdclake_dev.fleet import write_fleet
from harness import bench_parser

PARSE = """
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder="dags/cdc_tables.py")
print(json.dumps({"dags": len(bag.dags), "errors": len(bag.import_errors),
                  "file_s": sum(s.duration.total_seconds() for s in bag.dagbag_stats)}))
"""

TARGET_S = 5.0


def parse_once(settings: Settings) -> dict[str, float]:
    """One parse of ``dags/cdc_tables.py`` in a fresh process: ``{"dags", "errors", "file_s"}``."""
    proc = subprocess.run(
        [sys.executable, "-c", PARSE],
        env=airflow_env(settings),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = bench_parser("bench/dag_parse_bench.py", __doc__)
    parser.add_argument("--tables", type=int, default=1000, help="registered topics (default 1000)")
    parser.add_argument("--reps", type=int, default=3, help="parses; the figure is their median (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cdclake-dag-parse-") as work:
        config, registry = write_fleet(Path(work), args.tables)
        settings = Settings.from_env(
            {
                "CDCLAKE_STATE_DIR": work,
                "CDCLAKE_TABLES_CONFIG": str(config),
                "CDCLAKE_DISCOVERY_REGISTRY": str(registry),
            }
        )
        runs = [parse_once(settings) for _ in range(args.reps)]
    if any(r["dags"] != args.tables or r["errors"] for r in runs):
        print(f"CHECK FAILED: expected {args.tables} DAGs and no import error, got {runs}")
        return 1
    figure = statistics.median(r["file_s"] for r in runs)
    target = f"; target <= {TARGET_S:.0f} s: {'met' if figure <= TARGET_S else 'MISSED'}" if args.tables == 1000 else ""
    each = ", ".join(f"{r['file_s']:.2f}" for r in runs)
    print(f"dag_parse_{args.tables}_s: {figure:.2f} s (parses: {each}; {args.tables} DAGs built{target})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
