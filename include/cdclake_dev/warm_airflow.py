"""A warm ``airflow`` CLI for the test suite: ``airflow dags test`` without paying Airflow's start-up
on every run.

Each ``airflow dags test`` process spends about 16 of its 25 CPU seconds (py-spy, on 2 cores)
before the DAG's first task: importing Airflow and the clients its tasks use (9 s), and building
the in-process Execution API (Cadwyn's versioned FastAPI app, 7 s,
``airflow.sdk.execution_time.supervisor.in_process_api_server``). The end-to-end tests run about
fifty of them. A *warm server* does that once: it starts with the environment of the first
command, imports Airflow, builds the app, then forks a child per command. The child takes the
command's environment (the ``CDCLAKE_*`` settings the DAG files read when they are parsed),
working folder and output files, and runs Airflow's own CLI entry point
(``airflow.__main__.main``) with the command's arguments: the same code as the ``airflow``
script, in a process that is already warm.

One server serves one Airflow configuration: the ``AIRFLOW__*`` variables and the interpreter
are its key (Airflow reads its configuration at import), so a command with another gets a server
of its own. A server forks from its only thread (a child of a threaded parent can inherit a held
lock); the parent opens no metadata database connection (each child opens its own). Servers
exit when their socket file goes (:func:`stop_all`), when the process that started them exits,
or after :data:`IDLE_EXIT_S` without a command.

Turned on in a process by :func:`use` (a folder for the servers' sockets and logs), which the
test session calls; otherwise ``airflow dags test`` is the ``airflow`` script, as for
``cdclake run`` and ``make demo``. Not an environment variable: the processes a test starts do
not inherit it, and the DAG files refuse unknown ``CDCLAKE_*`` variables.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_folder: Path | None = None

IDLE_EXIT_S = 1800.0
"""A server exits after this many seconds without a command."""

START_TIMEOUT_S = 180.0
"""How long a client waits for a new server to answer (its imports and the app: ~20 s on 2 busy cores)."""

_WARM_IMPORTS = (
    "airflow.cli.cli_parser",
    "airflow.cli.commands.dag_command",
    "airflow.sdk.execution_time.supervisor",
    "airflow.sdk.execution_time.task_runner",
    "airflow.providers.apache.spark.operators.spark_submit",
    "pyiceberg.catalog",
    "pyiceberg.io.pyarrow",
    "confluent_kafka",
)
"""Modules the server imports before it forks: Airflow's CLI and task runner, and the third-party
clients a table DAG's tasks import (none of the project's own modules: they are imported by each
child, with its environment)."""


def use(folder: Path | None) -> None:
    """Run this process's ``airflow dags test`` commands on warm servers with sockets and logs in
    ``folder`` (``None``: the ``airflow`` script again)."""
    global _folder
    _folder = folder


def enabled() -> Path | None:
    """The folder of this process's warm servers (:func:`use`), else ``None``."""
    return _folder


def server_key(env: dict[str, str]) -> str:
    """The key of the server that may run a command with ``env``: a digest of the interpreter and
    the ``AIRFLOW__*`` variables (16 hex digits)."""
    airflow_vars = sorted((k, v) for k, v in env.items() if k.startswith("AIRFLOW__") or k == "AIRFLOW_HOME")
    return hashlib.sha256(json.dumps([sys.executable, airflow_vars]).encode()).hexdigest()[:16]


def run(
    argv: list[str], env: dict[str, str], folder: Path, *, cwd: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``airflow <argv>`` with ``env`` on the warm server for ``env`` (started when none
    answers), as ``subprocess.run(..., capture_output=True, text=True)`` would.

    Raises:
        TimeoutError: a new server did not answer within :data:`START_TIMEOUT_S`.
    """
    folder.mkdir(parents=True, exist_ok=True)
    sock_path = _socket_path(folder, env)
    conn = _connect(sock_path) or _start(sock_path, env, folder)
    with tempfile.TemporaryDirectory(dir=folder) as out:
        stdout, stderr = Path(out) / "stdout", Path(out) / "stderr"
        request = {"argv": argv, "env": env, "cwd": cwd or os.getcwd(), "stdout": str(stdout), "stderr": str(stderr)}
        with conn:
            conn.sendall(json.dumps(request).encode() + b"\n")
            reply = _read_line(conn)
        returncode = json.loads(reply)["returncode"] if reply else 1
        err = stderr.read_text(errors="replace") if stderr.exists() else ""
        if not reply:
            err += "\ncdclake_dev.warm_airflow: the command's process ended without a reply (killed?)\n"
        out_text = stdout.read_text(errors="replace") if stdout.exists() else ""
    return subprocess.CompletedProcess(["airflow", *argv], returncode, out_text, err)


def stop_all(folder: Path) -> None:
    """Stop every warm server of ``folder``: their sockets removed, each exits within a second."""
    for sock in folder.glob("*.sock"):
        sock.unlink(missing_ok=True)


def _socket_path(folder: Path, env: dict[str, str]) -> Path:
    # a UNIX socket path holds at most 107 bytes: a long folder falls back to the temp folder
    path = folder / f"{server_key(env)}.sock"
    if len(str(path)) > 100:
        path = Path(tempfile.gettempdir()) / f"cdclake-warm-{server_key({**env, 'folder': str(folder)})}.sock"
    return path


def _connect(sock_path: Path) -> socket.socket | None:
    if not sock_path.exists():
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(sock_path))
    except OSError:
        conn.close()
        return None
    return conn


def _start(sock_path: Path, env: dict[str, str], folder: Path) -> socket.socket:
    sock_path.unlink(missing_ok=True)
    logfile = (folder / f"{sock_path.stem}.log").open("ab")
    subprocess.Popen(
        [sys.executable, "-m", "cdclake_dev.warm_airflow", str(sock_path), str(os.getpid())],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=logfile,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    logfile.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        conn = _connect(sock_path)
        if conn is not None:
            return conn
        time.sleep(0.2)
    raise TimeoutError(
        f"the warm Airflow server {sock_path} did not answer within {START_TIMEOUT_S:.0f} s; "
        f"its log: {folder / (sock_path.stem + '.log')}"
    )


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data.strip()


def serve(sock_path: Path, owner_pid: int) -> None:
    """The server: warm up, then fork a child per connection until the socket file is removed,
    ``owner_pid`` exits, or :data:`IDLE_EXIT_S` pass without a command."""
    import importlib
    import threading

    from cdclake_dev.process import pid_gone

    for name in _WARM_IMPORTS:
        importlib.import_module(name)
    from airflow.sdk.execution_time.supervisor import in_process_api_server

    in_process_api_server().app  # noqa: B018 - builds the Cadwyn app once, before the forks
    if threading.active_count() != 1:
        log.warning("warm Airflow server: %d threads before forking", threading.active_count())
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    server.listen(16)
    inode = sock_path.stat().st_ino
    log.info("warm Airflow server %s ready (pid %d)", sock_path, os.getpid())
    selector = selectors.DefaultSelector()
    selector.register(server, selectors.EVENT_READ)
    last = time.monotonic()
    while True:
        if selector.select(timeout=1.0):
            conn, _ = server.accept()
            if os.fork() == 0:
                server.close()
                _child(conn)  # never returns
            conn.close()
            last = time.monotonic()
        _reap()
        gone = not sock_path.exists() or sock_path.stat().st_ino != inode
        if gone or pid_gone(owner_pid) or time.monotonic() - last > IDLE_EXIT_S:
            break
    server.close()
    if not gone:
        sock_path.unlink(missing_ok=True)


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _child(conn: socket.socket) -> None:
    """One command in a forked child: its environment, folder and output files, then Airflow's
    CLI entry point; the exit code is sent back before the child exits."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        request: dict[str, Any] = json.loads(_read_line(conn))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        from airflow import settings

        engine = getattr(settings, "engine", None)
        if engine is not None:  # the parent's pool, if any: never shared with a child
            engine.dispose(close=False)
        sys.argv = ["airflow", *request["argv"]]
        from airflow.__main__ import main

        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            _stop_children()
            conn.sendall(json.dumps({"returncode": code}).encode() + b"\n")
            conn.close()
        finally:
            os._exit(code)


def _stop_children(timeout_s: float = 5.0) -> None:
    """Stop the processes a command left behind before the child ends with ``os._exit``.

    ``os._exit`` skips the interpreter's shutdown, which for the plain ``airflow`` script joins
    ``concurrent.futures`` process pools (OpenLineage's emitter starts one): without this their
    idle workers would outlive the command as orphans. SIGTERM first, SIGKILL after ``timeout_s``.
    """
    import psutil

    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.terminate()
    _, alive = psutil.wait_procs(children, timeout=timeout_s)
    for child in alive:
        with contextlib.suppress(psutil.Error):
            child.kill()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    serve(Path(sys.argv[1]), int(sys.argv[2]))
