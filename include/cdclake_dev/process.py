"""The one process supervisor of the local tooling: daemons that outlive the command that started them.

A :class:`Daemon` is one long-running process of a part (the Kafka broker, Kafka Connect, MariaDB,
the Spark Connect server, s3proxy, the REST catalog, a Spark master or worker, an Airflow
component), known by its pid file, so that one ``cdclake`` command starts it and another finds it
running and stops it:

* **start** (:meth:`Daemon.start`): the command runs in a session (process group) of its own,
  stdin closed, stdout and stderr appended to its log file (mode 0600); its pid goes to the pid
  file; then a readiness check (:func:`port_open`, :func:`http_ok`, any callable) is polled until
  it holds. When the process exits or the timeout passes first, its group is stopped, the pid file
  removed, and the error carries the tail of the log.
* **status** (:attr:`Daemon.pid`): the pid on the first line of the pid file (PostgreSQL's
  ``postmaster.pid`` reads too) counts while that process runs; a child of this process that
  exited is reaped (its exit code kept), so a zombie counts as gone.
* **stop** (:meth:`Daemon.stop`, :func:`stop_all`): the daemon's stop signal (SIGTERM unless it
  asks for another) to the whole group, up to a timeout for the leader to exit, then SIGKILL to
  whatever is left of the group; the pid file is removed.

``mirakuru`` was weighed and not taken: its executors own the ``Popen`` of the Python process that
started them and cannot adopt a process from a pid file, which a command line needs.
"""

from __future__ import annotations

import errno
import http.client
import logging
import os
import random
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from cdclake.errors import ConfigError

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
"""The address every part of the local tooling listens on."""

LOG_TAIL_CHARS = 3000
"""How much of a log an error carries."""

GROUP_EXIT_S = 15.0
"""Seconds :func:`stop_all` waits, after its SIGKILL, for every process of a group to be gone."""


# --- ports and readiness checks -------------------------------------------------------------------


def port_open(host: str, port: int) -> bool:
    """Whether ``host:port`` accepts a TCP connection (within 0.5 s)."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def http_ok(url: str) -> bool:
    """Whether ``GET url`` answers 200 within 2 s."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, http.client.HTTPException):  # URLError is an OSError
        return False


FREE_PORT_RANGE = (20000, 32000)
"""Where :func:`free_port` looks: below Linux's default ephemeral range (32768-60999), so that a
port handed out is not taken, before its server binds it, as the source port of some outgoing
connection (a port the OS picks with ``bind(0)`` comes from that range and can be)."""

_handed_out: set[int] = set()


def free_port(span: int = 1) -> int:
    """A TCP port ``P`` on :data:`LOOPBACK` such that ``P .. P+span-1`` can be bound now and were
    not handed out before by this process (a topology's ports are all distinct).

    Args:
        span: how many consecutive ports (a Kafka broker's listener and its controller's: 2).

    Raises:
        RuntimeError: no such ports in :data:`FREE_PORT_RANGE` after 200 tries.
    """
    low, high = FREE_PORT_RANGE
    for _ in range(200):
        first = random.randrange(low, high - span)
        ports = range(first, first + span)
        if not _handed_out.intersection(ports) and all(_bindable(p) for p in ports):
            _handed_out.update(ports)
            return first
    raise RuntimeError(f"no {span} free consecutive port(s) on {LOOPBACK} in {low}..{high}")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def check_port(port: int, name: str = "port") -> None:
    """Raises ValueError unless ``port`` is a TCP port (1..65535); ``name`` is the argument's."""
    if not 0 < port < 65536:
        raise ValueError(f"{name} must be a TCP port (1..65535), got {port!r}")


def check_non_empty(what: str, **settings: str) -> None:
    """Raises ValueError naming every one of ``settings`` that is empty (``what``: the part)."""
    empty = sorted(k for k, v in settings.items() if not v)
    if empty:
        raise ValueError(f"{what} settings must be non-empty: {', '.join(empty)}")


def check_port_free(port: int, what: str) -> None:
    """Raises RuntimeError when a process (one ``what`` did not start) listens on ``127.0.0.1:<port>``."""
    if port_open(LOOPBACK, port):
        raise RuntimeError(f"{what}: {LOOPBACK}:{port} is already in use by a process this launcher did not start")


class PortTakenError(ConfigError, RuntimeError):
    """A port a part of the local stack needs is held by a process the stack did not start; nothing
    was started. The message names the port, its holder when known (:func:`port_holder`) and the
    setting that gives the part another port. A :class:`~cdclake.errors.ConfigError` (the remedy
    is a setting, and the ``cdclake`` command says it in one line), and a ``RuntimeError`` as the
    parts' other start failures."""


def port_taken(port: int, host: str = LOOPBACK) -> bool:
    """Whether a server could not listen on ``host:port`` now: something accepts connections there,
    or has bound it. A port only left in ``TIME_WAIT`` by a server that stopped is free (servers
    bind with ``SO_REUSEADDR``, as this check does); an address this machine does not have is not
    taken."""
    if port_open(host, port):
        return True
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def port_holder(port: int) -> str | None:
    """The process bound to TCP ``port``, as ``java, pid 4242``, when it is cheaply known: psutil
    sees the sockets of this user's processes (Linux; every process as root); ``None`` otherwise."""
    try:
        import psutil  # Airflow's dependency
    except ImportError:
        return None
    try:
        pids = {c.pid for c in psutil.net_connections(kind="tcp") if c.laddr and c.laddr.port == port and c.pid}
        if len(pids) != 1:
            return None
        pid = pids.pop()
        return f"{psutil.Process(pid).name()}, pid {pid}"
    except (psutil.Error, OSError) as e:  # AccessDenied (macOS), the process gone meanwhile
        logger.debug("the holder of port %d is not known: %s", port, e)
        return None


# --- pid files ----------------------------------------------------------------------------------------


def pid_gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a child of this process is reaped, not left a zombie)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    except ChildProcessError:
        pass  # not a child of this process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies count as gone: Linux ``/proc``)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "(comm)": state ppid pgrp
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _pid_number(pid_file: Path) -> int | None:
    """The number on the first line of ``pid_file``, running or not (``None``: no file, no number,
    or 0 and 1, which would signal this process's own group or init)."""
    try:
        pid = int(pid_file.read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    return pid if pid > 1 else None


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to process group ``pgid`` (every daemon leads one: a session of its own). A
    pid that leads no group is left alone: it is not ours (a stale pid file, a recycled pid)."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


# --- daemons --------------------------------------------------------------------------------------


class Daemon:
    """One long-running process of a part, known by its pid file (see the module docstring).

    Args:
        name: what it is, for reports and errors (``"Kafka broker"``).
        pid_file: its pid file; the pid is the first line.
        log_file: where its stdout and stderr go (appended, mode 0600); errors carry its tail.
        stop_signal: the signal that asks it to stop (PostgreSQL's fast shutdown is SIGINT).
    """

    def __init__(
        self, name: str, pid_file: Path, log_file: Path, *, stop_signal: signal.Signals = signal.SIGTERM
    ) -> None:
        self.name = name
        self.pid_file = Path(pid_file)
        self.log_file = Path(log_file)
        self.stop_signal = stop_signal
        self._proc: subprocess.Popen[bytes] | None = None  # when this object started it: its exit code

    def __repr__(self) -> str:
        return f"Daemon({self.name!r}, pid_file={str(self.pid_file)!r})"

    @property
    def pid(self) -> int | None:
        """The pid of the running process; ``None`` when it does not run."""
        pid = _pid_number(self.pid_file)
        return None if pid is None or self._exited(pid) else pid

    def _exited(self, pid: int) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            return self._proc.poll() is not None  # keeps its exit code (exit_code)
        return pid_gone(pid)

    def running(self) -> bool:
        """Whether the process of the pid file runs."""
        return self.pid is not None

    @property
    def exit_code(self) -> int | None:
        """The exit code of the process this object started, once it exited (else ``None``)."""
        return None if self._proc is None else self._proc.poll()

    def log_tail(self) -> str:
        """The last :data:`LOG_TAIL_CHARS` characters of the log (``(no log)`` when there is none)."""
        try:
            return self.log_file.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except FileNotFoundError:
            return "(no log)"

    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> int:
        """Start ``argv`` detached (a session of its own, stdin closed, output appended to the
        log) with ``env`` (default: this process's environment) in ``cwd``; write the pid file.

        Returns:
            The pid (also its process group's id).
        """
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "ab") as out:
            self._proc = subprocess.Popen(
                list(argv),
                env=None if env is None else dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                start_new_session=True,
            )
        self.pid_file.write_text(str(self._proc.pid))
        return self._proc.pid

    def check_alive(self) -> None:
        """Raises RuntimeError (with the log's tail) when the process does not run."""
        if self.running():
            return
        code = self.exit_code
        problem = "is not running" if code is None else f"exited with code {code}"
        raise RuntimeError(f"{self.name} {problem}; {self.log_file}:\n{self.log_tail()}")

    def wait_ready(self, ready: Callable[[], bool], *, timeout_s: float, poll_s: float = 0.2) -> None:
        """Poll ``ready()`` every ``poll_s`` seconds until it holds. When the process exits, or
        ``timeout_s`` seconds pass, or ``ready`` raises, first stop the group and remove the pid
        file, then raise.

        Raises:
            RuntimeError: the process exited, or was not ready in time (the message carries the
                log's tail); or what ``ready`` raised.
        """
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                self.check_alive()
                if ready():
                    return
                if time.monotonic() >= deadline:
                    raise RuntimeError(
                        f"{self.name} was not ready within {timeout_s:.0f} s; {self.log_file}:\n{self.log_tail()}"
                    )
                time.sleep(poll_s)
        except BaseException:
            self.stop(timeout_s=10.0)
            raise

    def start(
        self,
        argv: Sequence[str],
        *,
        ready: Callable[[], bool],
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        poll_s: float = 0.2,
    ) -> int:
        """:meth:`spawn`, then :meth:`wait_ready`. Returns the pid.

        Raises:
            RuntimeError: see :meth:`wait_ready`.
        """
        pid = self.spawn(argv, env=env, cwd=cwd)
        self.wait_ready(ready, timeout_s=timeout_s, poll_s=poll_s)
        return pid

    def stop(self, *, timeout_s: float = 30.0, hard: bool = False) -> int | None:
        """Stop the process group (see :func:`stop_all`). Returns the pid stopped (``None``: it
        did not run)."""
        return stop_all([self], timeout_s=timeout_s, hard=hard)[0]


def stop_all(daemons: Iterable[Daemon], *, timeout_s: float = 30.0, hard: bool = False) -> list[int | None]:
    """Stop several daemons at once: each one's stop signal (SIGKILL when ``hard``) to every group
    first, then up to ``timeout_s`` seconds in all for the leaders to exit, then SIGKILL to whatever
    is left of each group and up to :data:`GROUP_EXIT_S` seconds until no process of it runs; every
    pid file is removed.

    Returns:
        Per daemon, in order, the pid that was stopped (``None``: it did not run).
    """
    daemons = list(daemons)
    pids = [d.pid for d in daemons]
    # a child of ours that already exited still leads the group its own children may be left in
    groups = [pid or (d._proc.pid if d._proc is not None else None) for d, pid in zip(daemons, pids, strict=True)]
    for daemon, pgid in zip(daemons, groups, strict=True):
        if pgid is not None:
            _signal_group(pgid, signal.SIGKILL if hard else daemon.stop_signal)
    t0 = time.monotonic()
    for daemon, pgid, pid in zip(daemons, groups, pids, strict=True):
        if pgid is not None:
            while not daemon._exited(pgid) and time.monotonic() < t0 + timeout_s:
                time.sleep(0.2)
            if not daemon._exited(pgid):
                logger.warning("%s (pid %d) did not stop within %.0f s: killed", daemon.name, pgid, timeout_s)
            _signal_group(pgid, signal.SIGKILL)
            daemon._exited(pgid)  # reaps it when it is a child of this process
            # SIGKILL is delivered, not awaited: a member may run a moment longer (a task's
            # process killed with its supervisor); stopped means none of the group runs
            deadline = time.monotonic() + GROUP_EXIT_S
            while group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.1)
        daemon.pid_file.unlink(missing_ok=True)
        if pid is None:
            logger.info("%s not running", daemon.name)
        else:
            logger.info("%s stopped (pid %d) in %.1f s", daemon.name, pid, time.monotonic() - t0)
    return pids
