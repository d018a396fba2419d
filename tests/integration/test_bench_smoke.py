"""The benchmark (``bench/run.py``, ``make bench``) at its tiny size, so that it cannot rot: it
runs every stage on the tests' own broker, catalog and schema registry (the Avro read+parse and
apply in the processes of their JSON stages: no JVM start of their own), and its result file has
the documented shape and says both applies, JSON and Avro, produced the source's table. No timing
is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
STAGES = {
    "read_parse",
    "append",
    "apply",
    "peer",
    "growth_base",
    "growth_big",
    "dag_trivial",
    "dag_no_new",
    "dag_one_event",
    "avro_read_parse",
    "avro_apply",
}
RATIOS = {
    "apply/append",
    "apply/read_parse",
    "apply/peer",
    "growth big/base",
    "dag no-new/trivial",
    "apply peak RSS GiB",
    "avro apply/read_parse",
    "avro apply s per 1M events",
}


def test_bench_tiny_measures_every_stage_and_apply_equals_the_source(stack_settings, kafka, schema_registry, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDCLAKE_")}
    env.update(
        {
            "CDCLAKE_STATE_DIR": str(stack_settings.state_dir),
            "CDCLAKE_KAFKA_BOOTSTRAP": stack_settings.kafka_bootstrap,
            "CDCLAKE_CATALOG_URI": stack_settings.catalog_uri,
            "CDCLAKE_WAREHOUSE": stack_settings.warehouse,
            "CDCLAKE_SCHEMA_REGISTRY_URL": schema_registry,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "include"), str(ROOT / "plugins")]),
        }
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "run.py"),
            "--size",
            "tiny",
            "--external-broker",
            "--state-dir",
            str(tmp_path / "work"),
            "--out",
            str(out),
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]

    [json_file] = out.glob("bench-tiny-*.json")
    result = json.loads(json_file.read_text())
    assert {"cpu", "cores", "memory_gib", "load_avg_at_start", "load_avg_at_end"} <= set(result["machine"])
    assert set(result["stages"]) == STAGES
    for name, stage in result["stages"].items():
        assert stage["wall_s"] > 0 and stage["peak_rss_mib"] > 0, name
        assert len(stage["runs"]) == result["params"]["reps"] == 1, name
    for name in ("read_parse", "append", "apply", "peer", "avro_read_parse", "avro_apply"):
        assert result["stages"][name]["events"] == 2_000
        assert result["stages"][name]["events_per_s"] > 0
    assert result["stages"]["apply"]["runs"][0]["result"]["result"]["status"] == "committed"
    # the Avro workload is the same events: the same counts, and (below) the same table
    avro_apply = result["stages"]["avro_apply"]["runs"][0]["result"]["result"]
    assert avro_apply == {
        **result["stages"]["apply"]["runs"][0]["result"]["result"],
        "snapshot_id": avro_apply["snapshot_id"],
    }
    assert result["stages"]["avro_read_parse"]["runs"][0]["result"]["events"] == 2_000
    assert result["setup"]["avro_workload"]["mean_event_bytes"] < result["setup"]["workload"]["mean_event_bytes"]
    assert set(result["ratios"]) == RATIOS
    for ratio in result["ratios"].values():
        assert ratio["wall"] > 0 and isinstance(ratio["met"], bool)

    # the apply's table equals the source the events were generated from, value by value
    checks = result["checks"]
    assert checks["apply"]["ok"], checks["apply"]
    assert checks["apply"]["rows"] == checks["apply"]["expected_rows"]
    assert checks["apply"]["checked_rows"] > 0
    assert checks["avro_apply"]["ok"] and checks["avro_apply"]["checked_rows"] == checks["apply"]["checked_rows"]
    assert all(c["ok"] for c in checks.values()), checks
    # a run with no new events starts no Spark job
    assert checks["dag_no_new"]["spark_started"] is False
    assert result["stages"]["dag_no_new"]["runs"][0]["spark_s"] is None
    assert result["stages"]["dag_one_event"]["runs"][0]["spark_s"] > 0

    markdown = json_file.with_suffix(".md").read_text()
    assert "| 3. apply (ours) |" in markdown and "| apply/append |" in markdown
    assert "| 3. apply (ours), Avro |" in markdown and "| avro apply/read_parse |" in markdown
