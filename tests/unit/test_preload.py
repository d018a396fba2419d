"""The scheduler's preload of the table runs' modules (:mod:`cdclake_airflow.preload`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cdclake_airflow.preload import forks_tasks, preload


@pytest.mark.parametrize(
    ("argv", "forks"),
    [
        (["/opt/venv/bin/airflow", "scheduler"], True),
        (["airflow", "scheduler", "--pid", "/run/s.pid"], True),
        (["/usr/lib/python3/site-packages/airflow/__main__.py", "scheduler"], True),
        (["airflow", "standalone"], True),
        (["airflow", "celery", "worker"], True),
        (["airflow", "celery", "flower"], False),
        (["airflow", "dag-processor"], False),
        (["airflow", "api-server", "--port", "8080"], False),
        (["airflow", "tasks", "test", "cdc_orders"], False),
        (["/opt/venv/bin/pytest", "scheduler"], False),
        ([], False),
    ],
)
def test_only_the_processes_that_fork_tasks_preload(argv, forks):
    assert forks_tasks(argv) is forks


def test_the_preload_imports_the_modules_in_a_scheduler_only_and_can_be_turned_off(monkeypatch):
    monkeypatch.delenv("CDCLAKE_PRELOAD", raising=False)
    assert preload(["airflow", "dag-processor"], modules=["json"]) == []
    assert preload(["airflow", "scheduler"], modules=["json", "no_such_module_cdclake"]) == ["json"]
    monkeypatch.setenv("CDCLAKE_PRELOAD", "0")
    assert preload(["airflow", "scheduler"], modules=["json"]) == []


def test_the_task_modules_import_without_airflow():
    """Airflow imports its local settings while it starts: the preloaded modules must all import,
    and none may import Airflow (a fresh interpreter, as the scheduler's)."""
    code = (
        "import json, sys\n"
        "from cdclake_airflow.preload import TASK_MODULES, preload\n"
        "done = preload(['airflow', 'scheduler'])\n"
        "print(json.dumps({'done': done, 'all': list(TASK_MODULES), 'airflow': 'airflow' in sys.modules}))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # pytest's pythonpath too
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120, env=env)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["done"] == result["all"] and "pyspark.sql.connect.session" in result["done"]
    assert result["airflow"] is False
