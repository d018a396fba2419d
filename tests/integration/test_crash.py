"""Exactly once under crashes: the real spark-submit job is killed with SIGKILL before and after
its commit, then retried; the table ends exactly as after an uninterrupted run.

The kill point is reached through the job's documented debugging pause (``CDCLAKE_APPLY_PAUSE_AT``,
``docs/operations.md``): the job writes a marker file and sleeps at that commit boundary, and the
test kills the whole process group. The pause only waits; the crash itself is a real ``kill -9``
of the JVM and Python processes. The job is given only the run plan: it reads no table config."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cdclake.io.catalog import load_catalog
from cdclake.io.events import load_events
from cdclake.io.maintenance import remove_stale_run_branches
from cdclake.io.refs import committed_offsets
from cdclake.model.offsets import OffsetRange
from cdclake.settings import PROJECT_ROOT, spark_jars
from cdclake.spark.commit import PAUSE_ENV
from cdclake.spark.session import spark_conf
from tests.conftest import apply_offsets, make_table, plan_offsets
from tests.integration.test_apply import CUSTOMER_COLUMNS, CUSTOMERS_FINAL, table_rows

pytestmark = pytest.mark.integration


def submit_command(settings, plan_json: str) -> list[str]:
    cmd = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master",
        settings.spark_master,
        "--jars",
        ",".join(str(j) for j in spark_jars()),
        "--driver-memory",
        "1g",
    ]
    for k, v in spark_conf(settings).items():
        cmd += ["--conf", f"{k}={v}"]
    return cmd + [
        str(PROJECT_ROOT / "spark_jobs" / "apply_cdc.py"),
        "--plan",
        plan_json,
    ]


def job_env(settings, **extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDCLAKE_")}
    env.update(
        {
            "CDCLAKE_STATE_DIR": str(settings.state_dir),
            "CDCLAKE_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "CDCLAKE_CATALOG_URI": settings.catalog_uri,
            "CDCLAKE_WAREHOUSE": settings.warehouse,
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
            "PYSPARK_PYTHON": sys.executable,
        }
    )
    env.update(extra)
    return env


@pytest.mark.parametrize("point", ["before_fast_forward", "after_commit"])
def test_job_killed_at_commit_then_retried_gives_the_uninterrupted_table(
    spark, kafka, stack_settings, fixtures_dir, tmp_path, point
):
    cfg = make_table(value_format="json", columns=CUSTOMER_COLUMNS)
    load_events(fixtures_dir / "risingwave/debezium_log_no_schema_field.1", cfg, kafka, partitions=1)
    # a first run commits offsets 0..4, so that the killed run commits on top of a snapshot
    apply_offsets(spark, stack_settings, cfg, OffsetRange(topic=cfg.topic, start={0: 0}, end={0: 4}), "first")
    planned = plan_offsets(stack_settings, cfg, "scheduled__crash")
    assert planned.range.start == {0: 4}
    plan_json = planned.to_json()
    marker = tmp_path / "paused"
    log = tmp_path / "attempt-1.log"

    with open(log, "wb") as out:  # a file, not a pipe: a full pipe would block the job
        job = subprocess.Popen(
            submit_command(stack_settings, plan_json),
            env=job_env(stack_settings, **{PAUSE_ENV: f"{point}@{marker}"}),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 600
    while not marker.exists():
        assert job.poll() is None, log.read_text(errors="replace")[-4000:]
        assert time.monotonic() < deadline, (
            "the job never reached the kill point:\n" + log.read_text(errors="replace")[-4000:]
        )
        time.sleep(0.5)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)
    assert job.returncode == -signal.SIGKILL

    catalog = load_catalog(stack_settings)
    table = catalog.load_table(cfg.identifier)
    if point == "before_fast_forward":
        assert committed_offsets(table, cfg.topic) == {0: 4}  # main never saw the killed run's data
        branches = [name for name in table.refs() if name != "main"]
        assert branches, "the killed job's branch should be left behind"
    else:
        assert committed_offsets(table, cfg.topic) == planned.range.end

    # the Airflow retry: the same task, the same plan
    retry = subprocess.run(
        submit_command(stack_settings, plan_json),
        env=job_env(stack_settings),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert retry.returncode == 0, retry.stdout[-4000:] + retry.stderr[-4000:]
    result = json.loads(
        next(line for line in retry.stdout.splitlines() if line.startswith("CDC_APPLY_RESULT "))[
            len("CDC_APPLY_RESULT ") :
        ]
    )
    assert result["status"] == ("committed" if point == "before_fast_forward" else "already_applied")

    table = table.refresh()
    assert committed_offsets(table, cfg.topic) == planned.range.end
    assert table.scan().to_arrow().num_rows == len(CUSTOMERS_FINAL)  # no duplicate row
    assert table_rows(stack_settings, cfg, CUSTOMER_COLUMNS) == CUSTOMERS_FINAL
    if point == "before_fast_forward":
        assert remove_stale_run_branches(catalog, cfg.identifier, older_than_ms=0, now_ms=10**13) == branches
        assert set(table.refresh().refs()) == {"main"}


def test_a_killed_tries_history_written_after_its_retrys_is_discarded(
    spark, kafka, stack_settings, fixtures_dir, tmp_path
):
    """History after a SIGKILL (issue 52, 12): a task killed in Airflow while its engine goes on
    may write the table's history after the retry read it. The history's statements go to a branch
    fast-forwarded to ``main`` only while ``main`` is where the try read it: here the first try is
    held with its versions on its branch while the retry commits, then let go; its fast-forward is
    refused and every version is in the history once."""
    from cdclake.model.history import HISTORY_SUFFIX, VALID_FROM_POSITION_COLUMN
    from cdclake.model.layout import side_table
    from cdclake.spark.apply import apply_range

    cfg = make_table(value_format="json", columns=CUSTOMER_COLUMNS, history={})
    load_events(fixtures_dir / "risingwave/debezium_log_no_schema_field.1", cfg, kafka, partitions=1)
    apply_offsets(spark, stack_settings, cfg, OffsetRange(topic=cfg.topic, start={0: 0}, end={0: 4}), "first")
    planned = plan_offsets(stack_settings, cfg, "scheduled__history")
    marker = tmp_path / "paused"
    log = tmp_path / "attempt-1.log"
    with open(log, "wb") as out:
        job = subprocess.Popen(
            submit_command(stack_settings, planned.to_json()),
            env=job_env(stack_settings, **{PAUSE_ENV: f"history_before_fast_forward@{marker}"}),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 600
        while not marker.exists():
            assert job.poll() is None, log.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, "the job never paused:\n" + log.read_text(errors="replace")[-4000:]
            time.sleep(0.5)
        catalog = load_catalog(stack_settings)
        history = catalog.load_table(side_table(cfg.identifier, HISTORY_SUFFIX))
        assert [b for b in history.refs() if b != "main"], "the first try's versions wait on its branch"
        # the retry, while the first try still holds its versions: it commits the history and the table
        assert apply_range(spark, stack_settings, planned).status == "committed"
        marker.unlink()  # the first try goes on: its history's fast-forward is refused
        job.wait(600)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    text = log.read_text(errors="replace")
    assert job.returncode != 0 and "another try of this run wrote it" in text, text[-4000:]
    rows = history.refresh().scan().to_arrow().to_pylist()
    versions = [
        (r["id"], r[VALID_FROM_POSITION_COLUMN]["pos"] if r[VALID_FROM_POSITION_COLUMN] else None) for r in rows
    ]
    assert len(versions) == len(set(versions)), "a version is in the history twice"
    assert set(history.refresh().refs()) == {"main"}
    assert table_rows(stack_settings, cfg, CUSTOMER_COLUMNS) == CUSTOMERS_FINAL
