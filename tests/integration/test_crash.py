"""Exactly once under crashes: the real spark-submit job is killed with SIGKILL before and after
its commit, then retried; the table ends exactly as after an uninterrupted run.

The kill point is reached through the job's fault-injection hook (``CDCLAKE_TEST_PAUSE``): the
job writes a marker file and sleeps at that point, and the test kills the whole process group.
The hook only pauses; the crash itself is a real ``kill -9`` of the JVM and Python processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from cdclake.kafka_io import load_events
from cdclake.lake import committed_offsets, load_catalog, remove_stale_run_branches
from cdclake.planner import plan_next
from cdclake.settings import PROJECT_ROOT, spark_jars
from cdclake.offsets import OffsetRange
from cdclake.spark_apply import FAULT_PAUSE_ENV, apply_range, spark_conf
from tests.conftest import make_table
from tests.integration.test_apply import CUSTOMER_COLUMNS, CUSTOMERS_FINAL, table_rows

pytestmark = pytest.mark.integration


def submit_command(settings, cfg, plan_json: str, run_id: str) -> list[str]:
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", settings.spark_master,
           "--jars", ",".join(str(j) for j in spark_jars()), "--driver-memory", "1g"]
    for k, v in spark_conf(settings).items():
        cmd += ["--conf", f"{k}={v}"]
    return cmd + [str(PROJECT_ROOT / "spark_jobs" / "apply_cdc.py"), "--table", cfg.name,
                  "--plan", plan_json, "--run-id", run_id]


def job_env(settings, tables_yaml: Path, **extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDCLAKE_")}
    env.update({
        "CDCLAKE_STATE_DIR": str(settings.state_dir),
        "CDCLAKE_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "CDCLAKE_CATALOG_URI": settings.catalog_uri,
        "CDCLAKE_WAREHOUSE": settings.warehouse,
        "CDCLAKE_TABLES_CONFIG": str(tables_yaml),
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        "PYSPARK_PYTHON": sys.executable,
    })
    env.update(extra)
    return env


@pytest.mark.parametrize("point", ["before_commit", "after_commit"])
def test_job_killed_at_commit_then_retried_gives_the_uninterrupted_table(spark, kafka, stack_settings, fixtures_dir, tmp_path, point):
    cfg = make_table(value_format="json", columns=CUSTOMER_COLUMNS)
    tables_yaml = tmp_path / "tables.yaml"
    tables_yaml.write_text(yaml.safe_dump({"tables": [json.loads(cfg.model_dump_json(exclude_defaults=True))]}))
    load_events(fixtures_dir / "risingwave/debezium_log_no_schema_field.1", cfg, kafka, partitions=1)
    # a first run commits offsets 0..4, so that the killed run commits on top of a snapshot
    apply_range(spark, stack_settings, cfg, OffsetRange(topic=cfg.topic, start={0: 0}, end={0: 4}), "first")
    planned = plan_next(stack_settings, cfg)
    assert planned.offset_range.start == {0: 4}
    plan_json = json.dumps({"range": json.loads(planned.offset_range.to_json()), "replay": False})
    marker = tmp_path / "paused"
    log = tmp_path / "attempt-1.log"

    with open(log, "wb") as out:  # a file, not a pipe: a full pipe would block the job
        job = subprocess.Popen(
            submit_command(stack_settings, cfg, plan_json, "attempt-1"),
            env=job_env(stack_settings, tables_yaml, **{FAULT_PAUSE_ENV: f"{point}={marker}"}),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    deadline = time.monotonic() + 600
    while not marker.exists():
        assert job.poll() is None, log.read_text(errors="replace")[-4000:]
        assert time.monotonic() < deadline, "the job never reached the kill point:\n" + log.read_text(errors="replace")[-4000:]
        time.sleep(0.5)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)
    assert job.returncode == -signal.SIGKILL

    catalog = load_catalog(stack_settings)
    table = catalog.load_table(cfg.identifier)
    if point == "before_commit":
        assert committed_offsets(table, cfg.topic) == {0: 4}  # main never saw the killed run's data
        branches = [name for name in table.refs() if name != "main"]
        assert branches, "the killed job's branch should be left behind"
    else:
        assert committed_offsets(table, cfg.topic) == planned.offset_range.end

    # the Airflow retry: the same task, the same plan
    retry = subprocess.run(
        submit_command(stack_settings, cfg, plan_json, "attempt-2"),
        env=job_env(stack_settings, tables_yaml), capture_output=True, text=True, timeout=600,
    )
    assert retry.returncode == 0, retry.stdout[-4000:] + retry.stderr[-4000:]
    result = json.loads(next(line for line in retry.stdout.splitlines() if line.startswith("CDC_APPLY_RESULT "))[len("CDC_APPLY_RESULT "):])
    assert result["status"] == ("committed" if point == "before_commit" else "already_applied")

    table = table.refresh()
    assert committed_offsets(table, cfg.topic) == planned.offset_range.end
    assert table.scan().to_arrow().num_rows == len(CUSTOMERS_FINAL)  # no duplicate row
    assert table_rows(stack_settings, cfg, CUSTOMER_COLUMNS) == CUSTOMERS_FINAL
    if point == "before_commit":
        assert remove_stale_run_branches(catalog, cfg.identifier, older_than_ms=0, now_ms=10**13) == branches
        assert set(table.refresh().refs()) == {"main"}
