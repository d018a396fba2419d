"""The warm Airflow server's key and socket (``cdclake_dev.warm_airflow``): one server per Airflow
configuration, whatever the run's ``CDCLAKE_*`` settings and connections; the fork itself runs in
every end-to-end test's ``airflow dags test``."""

from __future__ import annotations

from pathlib import Path

from cdclake_dev import warm_airflow

BASE = {"AIRFLOW_HOME": "/h", "AIRFLOW__CORE__DAGS_FOLDER": "/d", "PATH": "/bin"}


def test_a_server_is_shared_by_runs_whose_settings_and_connections_differ():
    one = warm_airflow.server_key({**BASE, "CDCLAKE_TABLES_CONFIG": "/a.yaml", "AIRFLOW_CONN_KAFKA": "x"})
    other = warm_airflow.server_key({**BASE, "CDCLAKE_TABLES_CONFIG": "/b.yaml", "AIRFLOW_CONN_KAFKA": "y"})
    assert one == other and len(one) == 16


def test_another_airflow_configuration_or_home_gets_a_server_of_its_own():
    key = warm_airflow.server_key(BASE)
    assert warm_airflow.server_key({**BASE, "AIRFLOW__CORE__DAGS_FOLDER": "/examples"}) != key
    assert warm_airflow.server_key({**BASE, "AIRFLOW_HOME": "/other"}) != key


def test_a_socket_path_too_long_for_unix_falls_back_to_the_temp_folder(tmp_path: Path):
    short = warm_airflow._socket_path(tmp_path, BASE)
    assert short.parent == tmp_path and short.suffix == ".sock"
    deep = tmp_path / ("x" * 120)
    long = warm_airflow._socket_path(deep, BASE)
    assert long.parent != deep and len(str(long)) <= 100


def test_use_turns_the_server_on_for_this_process_only(tmp_path: Path):
    before = warm_airflow.enabled()  # the test session's (tests/conftest.py)
    try:
        warm_airflow.use(tmp_path)
        assert warm_airflow.enabled() == tmp_path
        warm_airflow.use(None)
        assert warm_airflow.enabled() is None
    finally:
        warm_airflow.use(before)


CHILD = """
import concurrent.futures, os, sys
from cdclake_dev.warm_airflow import _stop_children
pool = concurrent.futures.ProcessPoolExecutor(max_workers=1)
worker_pid = pool.submit(os.getpid).result()
_stop_children(timeout_s=10)
print(worker_pid)
sys.stdout.flush()
os._exit(0)  # as a warm child ends: no interpreter shutdown to join the pool
"""


def test_a_warm_child_stops_the_process_pool_workers_it_leaves_behind():
    """A forked child ends with ``os._exit``, which skips the shutdown that joins process pools
    (OpenLineage's emitter starts one); ``_stop_children`` ends them first. Run in a process of
    its own: here it would stop the test session's own children."""
    import subprocess
    import sys

    import psutil

    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=True)
    worker = int(out.stdout.split()[-1])
    assert not psutil.pid_exists(worker) or psutil.Process(worker).status() == psutil.STATUS_ZOMBIE
