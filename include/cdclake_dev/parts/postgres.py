"""PostgreSQL: Debian's server (the newest ``/usr/lib/postgresql/<major>``), the JDBC catalog's and
Airflow's metadata database; SCRAM passwords, ``fsync=off``."""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

from cdclake_dev.process import LOOPBACK, Daemon, check_port, check_port_free
from cdclake_dev.system import write_private

logger = logging.getLogger(__name__)


def postgres_bin_dir() -> Path:
    """The ``bin`` folder of the newest Debian PostgreSQL (``/usr/lib/postgresql/<major>/bin``).

    Raises:
        FileNotFoundError: no ``/usr/lib/postgresql/*/bin/initdb`` (install Debian's ``postgresql``
            package, as ``make setup`` does).
    """
    found = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    versioned = [(int(p.parent.name), p) for p in found if p.parent.name.isdigit()]
    if not versioned:
        raise FileNotFoundError(
            "PostgreSQL not found: no /usr/lib/postgresql/<major>/bin/initdb; install Debian's `postgresql` "
            "package (`make setup` does)"
        )
    return max(versioned)[1]


class Postgres:
    """A PostgreSQL server on ``127.0.0.1:<port>`` with its cluster in ``<dir>/data``.

    The superuser ``postgres`` gets a random password (``<dir>/superuser.password``, mode 0600); the
    server authenticates every TCP connection with SCRAM-SHA-256 and has no Unix socket. It runs
    with ``fsync=off`` (a crash of the machine can lose committed transactions: fine for tests and
    benchmarks, not for data that must survive). ``initdb`` refuses root: as root, the server runs
    as the ``postgres`` user (``runuser``) and ``dir`` is handed to that user, so every parent of
    ``dir`` must be searchable by it (``tempfile.mkdtemp()`` under ``/tmp`` is; pytest's
    ``tmp_path`` is not). Its server log is ``<dir>/server.log``.

    Args:
        dir: the folder of the cluster (created when missing).
        port: the TCP port on 127.0.0.1.

    Raises:
        ValueError: ``port`` is not a TCP port.
    """

    SUPERUSER = "postgres"

    def __init__(self, dir: Path, port: int) -> None:
        check_port(port)
        self.dir = Path(dir).resolve()
        self.port = port
        self.data_dir = self.dir / "data"
        self.log_file = self.dir / "server.log"
        self._password_file = self.dir / "superuser.password"
        # pg_ctl starts and stops the server (its own wait and shutdown modes); this is for the
        # postmaster's group when pg_ctl cannot stop it (SIGINT: PostgreSQL's fast shutdown)
        self._postmaster = Daemon(
            "PostgreSQL", self.data_dir / "postmaster.pid", self.log_file, stop_signal=signal.SIGINT
        )

    def __repr__(self) -> str:
        return f"Postgres(dir={str(self.dir)!r}, port={self.port})"

    # --- running commands as the cluster's owner

    @staticmethod
    def _as_root() -> bool:
        return os.geteuid() == 0

    def _owner_argv(self, argv: Sequence[str]) -> list[str]:
        return ["runuser", "-u", self.SUPERUSER, "--", *argv] if self._as_root() else list(argv)

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(self._owner_argv(argv), capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
            )
        return proc

    def _pg_ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run(str(postgres_bin_dir() / "pg_ctl"), "-D", str(self.data_dir), *args, check=check)

    def _prepare_dir(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        if not self._as_root():
            return
        shutil.chown(self.dir, self.SUPERUSER, self.SUPERUSER)
        if self._run("test", "-w", str(self.dir), "-a", "-x", str(self.dir), check=False).returncode != 0:
            raise PermissionError(
                f"{self.dir} is not reachable by the `{self.SUPERUSER}` user, which runs PostgreSQL (initdb "
                "refuses root): every parent folder must be searchable by others; use e.g. tempfile.mkdtemp()"
            )

    # --- lifecycle

    def running(self) -> bool:
        """Whether the cluster's server runs (``pg_ctl status``)."""
        if not (self.data_dir / "PG_VERSION").exists():
            return False
        return self._pg_ctl("status", check=False).returncode == 0

    def _running_port(self) -> int | None:
        """The port on line 4 of ``postmaster.pid``, if readable."""
        try:
            return int((self.data_dir / "postmaster.pid").read_text().splitlines()[3])
        except (OSError, IndexError, ValueError):
            return None

    def _initdb(self) -> None:
        password = secrets.token_urlsafe(24)
        write_private(self._password_file, password)
        if self._as_root():
            shutil.chown(self._password_file, self.SUPERUSER, self.SUPERUSER)
        self._run(
            str(postgres_bin_dir() / "initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            self.SUPERUSER,
            f"--pwfile={self._password_file}",
            "--auth=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write(
                "\n# cdclake_dev.parts.postgres.Postgres: the port and addresses of this start\ninclude = 'cdclake.conf'\n"
            )

    def _write_conf(self) -> None:
        conf = self.data_dir / "cdclake.conf"
        conf.write_text(
            "# written by cdclake_dev.parts.postgres.Postgres at every start\n"
            f"port = {self.port}\n"
            f"listen_addresses = '{LOOPBACK}'\n"
            "unix_socket_directories = ''\n"
            "fsync = off\n"
            "max_connections = 300\n"
        )
        if self._as_root():
            shutil.chown(conf, self.SUPERUSER, self.SUPERUSER)

    def start(self, *, timeout_s: float = 60.0) -> float:
        """Start the server, creating the cluster on first start (``initdb``).

        Returns:
            Seconds spent (about 0 when it was already running).

        Raises:
            FileNotFoundError: PostgreSQL is not installed (:func:`postgres_bin_dir`).
            PermissionError: as root, ``dir`` is not reachable by the ``postgres`` user.
            RuntimeError: ``initdb`` or ``pg_ctl start`` failed, the port is taken by another
                process, or the running server listens on another port.
        """
        t0 = time.monotonic()
        if self.running():
            running_port = self._running_port()
            if running_port not in (None, self.port):
                raise RuntimeError(
                    f"PostgreSQL in {self.data_dir} already runs on port {running_port}, not {self.port}"
                )
            logger.info("PostgreSQL already running on %s:%d (%s)", LOOPBACK, self.port, self.data_dir)
            return time.monotonic() - t0
        check_port_free(self.port, "PostgreSQL")
        self._prepare_dir()
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        self._write_conf()
        proc = self._pg_ctl("-l", str(self.log_file), "-w", "-t", str(int(timeout_s)), "start", check=False)
        if proc.returncode != 0:
            raise RuntimeError(
                f"PostgreSQL did not start on {LOOPBACK}:{self.port} (pg_ctl exit {proc.returncode}); "
                f"{self.log_file}:\n{self._postmaster.log_tail()}"
            )
        took = time.monotonic() - t0
        logger.info("PostgreSQL started on %s:%d in %.1f s (%s)", LOOPBACK, self.port, took, self.data_dir)
        return took

    def stop(self, *, timeout_s: float = 60.0) -> None:
        """Stop the server (``pg_ctl stop -m fast``; its process group is killed when that fails or
        takes longer than ``timeout_s`` seconds). The cluster stays in ``dir``."""
        if not self.running():
            logger.info("PostgreSQL in %s not running", self.data_dir)
            return
        proc = self._pg_ctl("-m", "fast", "-w", "-t", str(int(timeout_s)), "stop", check=False)
        if proc.returncode != 0 and self._postmaster.running():
            logger.warning("pg_ctl stop failed (%s): stopping the postmaster's group", proc.stderr.strip())
            self._postmaster.stop(timeout_s=5.0)
        logger.info("PostgreSQL on %s:%d stopped", LOOPBACK, self.port)

    # --- databases

    def _superuser_password(self) -> str:
        return self._password_file.read_text().strip()

    def url(self, db: str, user: str, password: str) -> str:
        """The SQLAlchemy URL ``postgresql+psycopg2://<user>:<password>@127.0.0.1:<port>/<db>``
        (user and password percent-encoded)."""
        return f"postgresql+psycopg2://{quote(user, safe='')}:{quote(password, safe='')}@{LOOPBACK}:{self.port}/{quote(db, safe='')}"

    def jdbc_uri(self, db: str) -> str:
        """The JDBC URI ``jdbc:postgresql://127.0.0.1:<port>/<db>`` (credentials go separately)."""
        return f"jdbc:postgresql://{LOOPBACK}:{self.port}/{quote(db, safe='')}"

    def ensure_database(self, name: str, user: str, password: str) -> str:
        """Make login role ``user`` with ``password`` (set again when the role exists) and database
        ``name`` owned by it (created when missing); idempotent.

        Returns:
            The database's SQLAlchemy URL (:meth:`url`).

        Raises:
            ValueError: an empty name, user or password.
            psycopg2.Error: the server refused a statement.
        """
        if not name or not user or not password:
            raise ValueError(f"database name, user and password must be non-empty (name={name!r}, user={user!r})")
        import psycopg2
        from psycopg2 import sql

        conn = psycopg2.connect(
            host=LOOPBACK,
            port=self.port,
            dbname="postgres",
            user=self.SUPERUSER,
            password=self._superuser_password(),
            connect_timeout=10,
        )
        try:
            conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (user,))
                verb = "ALTER" if cur.fetchone() else "CREATE"
                cur.execute(
                    sql.SQL(verb + " ROLE {} WITH LOGIN PASSWORD {}").format(
                        sql.Identifier(user), sql.Literal(password)
                    )
                )
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone() is None:
                    cur.execute(
                        sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(user))
                    )
        finally:
            conn.close()
        logger.info("PostgreSQL database %s (owner %s) ready on %s:%d", name, user, LOOPBACK, self.port)
        return self.url(name, user, password)
