"""Airflow 3 as production runs it: ``scheduler``, ``dag-processor``, ``triggerer`` and
``api-server`` as processes of their own, driven through the REST API."""

from __future__ import annotations

import json
import logging
import secrets
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cdclake_dev.process import LOOPBACK, Daemon, check_port, free_port, stop_all
from cdclake_dev.task_logs import error_events

logger = logging.getLogger(__name__)

TERMINAL_RUN_STATES = frozenset({"success", "failed"})
"""The states a DAG run ends in."""


class AirflowProcesses:
    """Airflow 3 as production runs it: ``scheduler``, ``dag-processor``, ``triggerer`` and
    ``api-server`` (on ``127.0.0.1:<port>``) as processes of their own, each in a session of its
    own (a :class:`~cdclake_dev.process.Daemon` each, pid file ``<logs_dir>/airflow-<component>.pid``),
    sharing one execution API URL and JWT secret; driven through the REST API (``/api/v2``),
    authenticated by a token from ``GET /auth/token``.

    ``env`` is the processes' whole environment: it must set ``AIRFLOW_HOME`` and should set
    ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` (PostgreSQL, e.g.
    :meth:`~cdclake_dev.parts.postgres.Postgres.ensure_database`:
    SQLite locks up under concurrent runs), ``AIRFLOW__CORE__DAGS_FOLDER`` and
    ``AIRFLOW__LOGGING__BASE_LOG_FOLDER``. Added to it: the execution API URL and the API's host
    and port (always); a random JWT secret and API secret key, free loopback ports for the worker's
    and triggerer's log servers (unless ``env`` sets them); and, unless ``env`` sets them, the
    settings for driving it from a test or benchmark: LocalExecutor, every user an admin
    (``SIMPLE_AUTH_MANAGER_ALL_ADMINS``, which :meth:`get` and :meth:`trigger` rely on), DAGs
    unpaused at creation, DAG files parsed every 5 s; and the production settings of
    docs/deploying.md ("Airflow settings": heartbeat timeout 90 s, orphaned tries checked every
    60 s). Logs: ``<logs_dir>/airflow-<component>.log``.

    Args:
        env: the processes' environment (see above).
        logs_dir: the folder of the processes' logs (created when missing).
        port: the api-server's TCP port on 127.0.0.1.
        cwd: the processes' working folder (default: this process's).
        serve_logs: the scheduler and the triggerer serve their task logs over HTTP (Airflow's
            log servers listen on every interface, not configurable); ``False``: they do not, and
            the api-server, on the same machine, reads the log files from
            ``AIRFLOW__LOGGING__BASE_LOG_FOLDER`` (a running task's log too).

    Raises:
        ValueError: ``env`` has no ``AIRFLOW_HOME``, or ``port`` is not a TCP port.
    """

    COMPONENTS = ("scheduler", "dag-processor", "triggerer", "api-server")

    def __init__(
        self, env: Mapping[str, str], logs_dir: Path, port: int, *, cwd: Path | None = None, serve_logs: bool = True
    ) -> None:
        check_port(port)
        if not env.get("AIRFLOW_HOME"):
            raise ValueError("env must set AIRFLOW_HOME (else Airflow writes to ~/airflow)")
        import requests

        self.port = port
        self.serve_logs = serve_logs
        self.base = f"http://{LOOPBACK}:{port}"
        self.logs = Path(logs_dir)
        self.cwd = cwd
        self.env = dict(env)
        self.env.update(
            {
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base}/execution/",
                "AIRFLOW__API__LOOPBACK": LOOPBACK,
                "AIRFLOW__API__PORT": str(port),
            }
        )
        defaults = {
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
            # docs/deploying.md, "Airflow settings": a try whose process died with a killed
            # scheduler is failed (and retried) after 90 s, not Airflow's default 300 s
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "90",
            "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "60",
        }
        for key, value in defaults.items():
            self.env.setdefault(key, value)
        self.procs = {
            name: Daemon(f"airflow {name}", self.logs / f"airflow-{name}.pid", self.logs / f"airflow-{name}.log")
            for name in self.COMPONENTS
        }
        self._token: str | None = None
        self.http = requests.Session()

    def __repr__(self) -> str:
        return f"AirflowProcesses(base={self.base!r}, components={sorted(self.procs)})"

    def _airflow(self) -> str:
        return str(Path(sys.executable).parent / "airflow")

    def run_cli(self, *argv: str) -> str:
        """``airflow <argv>`` with the processes' environment; returns its stdout.

        Raises:
            RuntimeError: it failed (the message carries the tail of its output).
        """
        proc = subprocess.run([self._airflow(), *argv], env=self.env, capture_output=True, text=True, cwd=self.cwd)
        if proc.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(argv)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc.stdout

    def migrate(self, pools: Mapping[str, tuple[int, str]] | None = None) -> float:
        """``airflow db migrate``, then ``airflow pools set`` for each of ``pools`` (name ->
        (slots, description)). Returns seconds.

        Raises:
            RuntimeError: a command failed.
        """
        t0 = time.monotonic()
        Path(self.env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
        self.run_cli("db", "migrate")
        for name, (slots, description) in (pools or {}).items():
            self.run_cli("pools", "set", name, str(slots), description)
        return time.monotonic() - t0

    def _healthy(self) -> bool:
        try:
            return bool(self.http.get(f"{self.base}/api/v2/monitor/health", timeout=5).status_code == 200)
        except OSError:
            return False

    def scheduler_healthy(self) -> bool | None:
        """Whether the api-server reports the scheduler ``healthy`` (``GET /api/v2/monitor/health``:
        its last heartbeat is within ``[scheduler] scheduler_health_check_threshold``, 30 s);
        ``None`` when the api-server does not answer. What a liveness probe of the scheduler checks
        (docs/deploying.md, "Airflow settings")."""
        try:
            reply = self.http.get(f"{self.base}/api/v2/monitor/health", timeout=5)
            return bool(reply.json()["scheduler"]["status"] == "healthy") if reply.status_code == 200 else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def start(self, timeout_s: float = 300.0) -> float:
        """Start the four processes (those not running) and wait until the API answers
        ``GET /api/v2/monitor/health``. Returns seconds.

        Raises:
            RuntimeError: a process exited, or the API did not answer within ``timeout_s`` seconds
                (the api-server is stopped; :meth:`stop` stops the others).
        """
        t0 = time.monotonic()
        if all(d.running() for d in self.procs.values()) and self._healthy():
            logger.info("Airflow already running on %s", self.base)
            return time.monotonic() - t0
        for name, daemon in self.procs.items():
            if not daemon.running():
                daemon.spawn(self.command(name), env=self.env, cwd=self.cwd)

        def ready() -> bool:
            self._check_alive()
            return self._healthy()

        self.procs["api-server"].wait_ready(ready, timeout_s=timeout_s, poll_s=1.0)
        took = time.monotonic() - t0
        logger.info("Airflow started on %s in %.1f s", self.base, took)
        return took

    def command(self, name: str) -> list[str]:
        """The command line of component ``name`` (one of :attr:`COMPONENTS`): the api-server on
        ``127.0.0.1:<port>``; the scheduler and triggerer without their log servers unless
        ``serve_logs``."""
        args = [self._airflow(), name]
        if name == "api-server":
            args += ["--port", str(self.port), "--host", LOOPBACK]
        elif name in ("scheduler", "triggerer") and not self.serve_logs:
            args.append("--skip-serve-logs")
        return args

    def _check_alive(self) -> None:
        for daemon in self.procs.values():
            daemon.check_alive()

    def stop(self, timeout_s: float = 60.0) -> list[int | None]:
        """Stop every process's group at once (SIGTERM; SIGKILL after ``timeout_s`` seconds).
        Returns the pid stopped per component (``None``: it did not run)."""
        return stop_all(self.procs.values(), timeout_s=timeout_s)

    def _headers(self) -> dict[str, str]:
        if self._token is None:
            r = self.http.get(f"{self.base}/auth/token", timeout=30)
            r.raise_for_status()
            self._token = r.json()["access_token"]
        return {"Authorization": f"Bearer {self._token}"}

    def get(self, path: str, **params: Any) -> Any:
        """``GET /api/v2/<path>`` as JSON.

        Raises:
            requests.HTTPError: an error status.
        """
        r = self.http.get(f"{self.base}/api/v2/{path}", params=params, headers=self._headers(), timeout=60)
        r.raise_for_status()
        return r.json()

    def get_all(self, path: str, key: str, **params: Any) -> list[dict[str, Any]]:
        """Every item of a paged list (the API pages by at most 100)."""
        items: list[dict[str, Any]] = []
        while True:
            page = self.get(path, limit=100, offset=len(items), **params)
            items += page[key]
            if not page[key] or len(items) >= page["total_entries"]:
                return items

    def fail_unfinished_runs(self, dag_id: str) -> list[str]:
        """Mark every queued or running run of ``dag_id`` failed (``PATCH
        /api/v2/dags/{dag_id}/dagRuns/{run_id}``, as the UI's "Mark as failed": its running tasks
        are stopped). Returns their run ids.

        Raises:
            requests.HTTPError: the API refused it.
        """
        runs = self.get_all(f"dags/{dag_id}/dagRuns", "dag_runs", state=["queued", "running"])
        for run in runs:
            r = self.http.patch(
                f"{self.base}/api/v2/dags/{dag_id}/dagRuns/{run['dag_run_id']}",
                json={"state": "failed"},
                headers=self._headers(),
                timeout=60,
            )
            r.raise_for_status()
        return [str(run["dag_run_id"]) for run in runs]

    def set_paused(self, dag_id: str, paused: bool) -> None:
        """Pause or unpause a DAG (``PATCH /api/v2/dags/{dag_id}``).

        Raises:
            requests.HTTPError: the API refused it.
        """
        r = self.http.patch(
            f"{self.base}/api/v2/dags/{dag_id}", json={"is_paused": paused}, headers=self._headers(), timeout=60
        )
        r.raise_for_status()

    def wait_dags(self, dag_ids: set[str], timeout_s: float = 600.0, *, unpaused: bool = True) -> float:
        """Wait until the dag-processor has serialized every DAG of ``dag_ids`` (``unpaused``:
        and they are unpaused). Returns seconds.

        Raises:
            RuntimeError: an import error, or not within ``timeout_s``.
        """
        t0 = time.monotonic()
        missing = dag_ids
        while time.monotonic() - t0 < timeout_s:
            self._check_alive()
            try:
                errors = self.get("importErrors")
                if errors.get("total_entries"):
                    raise RuntimeError(f"DAG import errors: {json.dumps(errors)[:3000]}")
                dags = self.get_all("dags", "dags")
                ready = {d["dag_id"] for d in dags if not (unpaused and d.get("is_paused"))}
                missing = dag_ids - ready
                if not missing:
                    return time.monotonic() - t0
            except OSError:
                pass
            time.sleep(2.0)
        raise RuntimeError(f"DAGs not ready within {timeout_s:.0f} s: {sorted(missing)[:10]} ...")

    def trigger(self, dag_id: str, run_id: str, conf: dict[str, Any] | None = None) -> float:
        """Trigger a run (``POST /api/v2/dags/{dag_id}/dagRuns``); returns the epoch time just
        before the request.

        Raises:
            RuntimeError: the API refused it.
        """
        import requests

        t = time.time()
        r = requests.post(  # not the shared session: runs are triggered from several threads at once
            f"{self.base}/api/v2/dags/{dag_id}/dagRuns",
            json={"dag_run_id": run_id, "logical_date": None, "conf": conf or {}},
            headers=self._headers(),
            timeout=120,
        )
        if r.status_code >= 300:
            raise RuntimeError(f"trigger {dag_id}: HTTP {r.status_code}: {r.text[:1000]}")
        return t

    def wait_run(self, dag_id: str, run_id: str, timeout_s: float, poll_s: float = 0.2) -> dict[str, Any]:
        """Poll the run until it succeeds or fails; the run (as the API gives it) plus the epoch
        time it was first seen finished (``seen_done``).

        Raises:
            RuntimeError: not finished within ``timeout_s`` seconds, or a process exited.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            run = self.get(f"dags/{dag_id}/dagRuns/{run_id}")
            if run["state"] in TERMINAL_RUN_STATES:
                return {**run, "seen_done": time.time()}
            time.sleep(poll_s)
        self._check_alive()
        raise RuntimeError(f"{dag_id} run {run_id} not finished within {timeout_s:.0f} s")

    def wait_runs(self, prefix: str, count: int, timeout_s: float, poll_s: float = 2.0) -> list[dict[str, Any]]:
        """Poll the runs whose id starts with ``prefix`` until all ``count`` finished; each run
        plus the epoch time its DAG's run was first seen finished (``seen_done``).

        Raises:
            RuntimeError: not all finished within ``timeout_s`` seconds, or a process exited.
        """
        deadline = time.monotonic() + timeout_s
        done_at: dict[str, float] = {}
        runs: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            runs = self.get_all("dags/~/dagRuns", "dag_runs", run_id_prefix_pattern=prefix)
            now = time.time()
            for r in runs:
                if r["state"] in TERMINAL_RUN_STATES:
                    done_at.setdefault(r["dag_id"], now)
            if len(done_at) >= count:
                return [{**r, "seen_done": done_at[r["dag_id"]]} for r in runs]
            time.sleep(poll_s)
        self._check_alive()
        states = [r["state"] for r in runs]
        raise RuntimeError(
            f"{count - len(done_at)} run(s) {prefix}* not finished within {timeout_s:.0f} s: "
            + ", ".join(f"{s} {states.count(s)}" for s in sorted(set(states)))
        )

    def task_instances(self, prefix: str) -> list[dict[str, Any]]:
        """The task instances of every run whose id starts with ``prefix``."""
        return self.get_all("dags/~/dagRuns/~/taskInstances", "task_instances", run_id_prefix_pattern=prefix)

    def task_log_files(self, dag_id: str, run_id: str) -> list[Path]:
        """The run's task log files (every task and try), in path order."""
        base = Path(self.env.get("AIRFLOW__LOGGING__BASE_LOG_FOLDER") or Path(self.env["AIRFLOW_HOME"]) / "logs")
        return sorted(base.glob(f"dag_id={dag_id}/run_id={run_id}/**/*.log"))

    def task_log_tail(self, dag_id: str, run_id: str) -> str:
        """The run's task log files, each as its error events (exception type and message, no
        frames) and its last 1,500 characters; at most the last 12,000 characters in all."""
        out = []
        for path in self.task_log_files(dag_id, run_id):
            text = path.read_text(errors="replace")
            out.append(f"--- {path}\n" + "\n".join(_error_events(text)) + f"\n...\n{text[-1500:]}")
        return "\n".join(out)[-12000:]


def _error_events(log_text: str) -> list[str]:
    """The error events of a task log: event, exception types and messages (no frames)."""
    out = []
    for event in error_events(log_text):
        details = [d for d in event.get("error_detail") or [] if isinstance(d, dict)]
        causes = "; ".join(f"{d.get('exc_type')}: {d.get('exc_value')}" for d in details)
        out.append(f"{event.get('event')} {causes}".strip())
    return out
