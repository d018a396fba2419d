"""The maintenance benchmark (``bench/maintenance_bench.py``, ``make bench-maintenance``) at a tiny
size, so that it cannot rot: a few apply runs on the tests' own broker and catalog, then
maintenance; its result file has the documented shape, maintenance folded the deletes in and left
the content and the offsets as they were. No timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_crash import job_env

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHECKS = {
    "apply_runs",
    "rows_match_source",
    "content_unchanged",
    "lookups_unchanged",
    "offsets_unchanged",
    "maintenance_actions",
}


def test_bench_maintenance_tiny_folds_deletes_and_keeps_the_content(stack_settings, kafka, tmp_path):
    env = job_env(stack_settings, PYTHONPATH=os.pathsep.join([str(ROOT / "include"), str(ROOT / "plugins")]))
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "maintenance_bench.py"),
            "--base-rows",
            "2000",
            "--runs",
            "2",
            "--changes-per-run",
            "40",
            "--count-reps",
            "1",
            "--lookup-keys",
            "2",
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
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]

    [json_file] = out.glob("maintenance-*.json")
    result = json.loads(json_file.read_text())
    assert {"cpu", "cores", "memory_gib", "load_avg_at_start", "load_avg_at_end"} <= set(result["machine"])
    assert set(result["checks"]) == CHECKS
    assert all(c["ok"] for c in result["checks"].values()), result["checks"]

    runs = result["phases"]["apply_runs"]["runs"]
    assert len(runs) == 2 and all(r["status"] == "committed" and r["planned_events"] == 40 for r in runs)
    before, after = result["phases"]["before"], result["phases"]["after"]
    # the runs left merge-on-read deletes and small files; maintenance compacted them into one file
    # (the newest run's delete files may stay when rewrite_position_delete_files commits nothing:
    # the compacted file then gets their sequence number) and expired the older snapshots
    assert before["delete_files"] > 0 and after["delete_files"] <= before["delete_files"]
    assert before["data_files"] > 1 and after["data_files"] == 1
    assert before["count"] == after["count"] == result["checks"]["rows_match_source"]["expected"]
    assert before["metadata_bytes"] > 0 and after["metadata_bytes"] > 0
    for m in (before, after):
        assert m["count_s"] > 0 and m["lookup_s"] > 0 and m["lookup_pyiceberg_s"] > 0

    maintenance = result["phases"]["maintenance"]
    [expire] = [
        r for r in maintenance["reports"] if r["action"] == "expire_snapshots" and r["table"] == result["table"]
    ]
    assert expire["figures"]["expired_snapshots"] > 0
    assert set(maintenance["seconds_per_action"]) == {
        "remove_stale_run_branches",
        "expire_tombstones",
        "expire_changes",
        "rewrite_position_delete_files",
        "rewrite_data_files",
        "rewrite_manifests",
        "expire_snapshots",
        "remove_orphan_files",
    }

    headline = json.loads(proc.stdout.strip().splitlines()[-1])
    assert headline["checks_ok"] is True and headline["runs"] == 2
    assert headline["delete_files_before"] == before["delete_files"]
    assert headline["data_files_after"] == after["data_files"] == 1
    markdown = json_file.with_suffix(".md").read_text()
    assert "| data files (current snapshot) |" in markdown and "| rewrite_data_files |" in markdown
