"""The production parts on one machine: each a launcher that starts it on loopback, says when it is
ready and stops it again, with every file under a folder its caller passes.

* :class:`Postgres`: Debian's PostgreSQL (the newest ``/usr/lib/postgresql/<major>``), the JDBC
  catalog's and Airflow's metadata database; SCRAM passwords, ``fsync=off``.
* :class:`S3Proxy`: s3proxy 4.1 (``.jars/s3proxy``), the S3 API over a local folder
  (``filesystem-nio2``); one bucket is one sub-folder of :attr:`S3Proxy.data_dir`.
* :class:`RestCatalogServer`: Iceberg's REST catalog server (``.jars/rest-catalog``, the
  ``RESTCatalogServer`` test fixture of Iceberg 1.11) over a ``JdbcCatalog`` in PostgreSQL, its
  data and metadata files written through ``S3FileIO``.
* :class:`SparkStandalone`: a Spark standalone master and one worker from the pip ``pyspark``
  package.
* :class:`AirflowProcesses`: Airflow 3's ``scheduler``, ``dag-processor``, ``triggerer`` and
  ``api-server`` as processes of their own, driven through the REST API.

Every process runs in a session (process group) of its own and ``stop()`` ends the whole group:
SIGTERM, then SIGKILL after the timeout. The JVM parts and PostgreSQL keep a pid file in their
folder, so a second launcher on the same folder finds them running (``start()`` returns at once)
and can stop them. Secrets (passwords, the S3 secret key) reach the processes through files of
mode 0600 or their environment, never their command line, and are not logged.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from cdclake.local.stack import java_executable, port_open, read_pid, terminate, write_private
from cdclake.settings import jars_dir

if TYPE_CHECKING:
    from pyarrow.fs import S3FileSystem

logger = logging.getLogger(__name__)

HOST = "127.0.0.1"
"""The address every part listens on."""

_LOG_TAIL_CHARS = 3000


# --- process helpers ---------------------------------------------------------------------------------


def _log_tail(log_file: Path) -> str:
    try:
        return log_file.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
    except FileNotFoundError:
        return "(no log)"


def _spawn(argv: Sequence[str], *, env: Mapping[str, str], log_file: Path, cwd: Path | None = None) -> subprocess.Popen:
    """``argv`` in a session of its own, stdout and stderr appended to ``log_file`` (mode 0600)."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as out:
        return subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
        )


def _stop_group(pid: int, *, timeout_s: float) -> None:
    """End process group ``pid`` (a session leader we started): SIGTERM to the whole group, wait up
    to ``timeout_s`` seconds for the leader (:func:`~cdclake.local.stack.terminate`, which SIGKILLs
    it after that), then SIGKILL whatever is left of the group."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        terminate(pid, timeout_s=timeout_s)
    except ProcessLookupError:
        pass  # the leader was gone (and reaped) before terminate signalled it
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _stop_pid_file(pid_file: Path, what: str, *, timeout_s: float) -> None:
    pid = read_pid(pid_file)
    if pid is None:
        logger.info("%s not running", what)
    else:
        t0 = time.monotonic()
        _stop_group(pid, timeout_s=timeout_s)
        logger.info("%s stopped (pid %d) in %.1f s", what, pid, time.monotonic() - t0)
    pid_file.unlink(missing_ok=True)


def _wait_ready(
    what: str,
    proc: subprocess.Popen,
    ready: Callable[[], bool],
    log_file: Path,
    *,
    timeout_s: float,
    pid_file: Path | None = None,
) -> None:
    """Poll ``ready()`` until it is true. When ``proc`` exits or ``timeout_s`` seconds pass
    first, stop ``proc``'s group, remove ``pid_file`` and raise.

    Raises:
        RuntimeError: ``proc`` exited, or was not ready in time (the message carries the log's tail).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            problem = f"exited with code {proc.returncode}"
            break
        if ready():
            return
        time.sleep(0.2)
    else:
        problem = f"was not ready within {timeout_s:.0f} s"
    _stop_group(proc.pid, timeout_s=10.0)
    if pid_file is not None:
        pid_file.unlink(missing_ok=True)
    raise RuntimeError(f"{what} {problem}; {log_file}:\n{_log_tail(log_file)}")


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, http.client.HTTPException):  # URLError is an OSError
        return False


def _check_port_free(port: int, what: str) -> None:
    if port_open(HOST, port):
        raise RuntimeError(f"{what}: {HOST}:{port} is already in use by a process this launcher did not start")


def _check_port(port: int, name: str = "port") -> None:
    if not 0 < port < 65536:
        raise ValueError(f"{name} must be a TCP port (1..65535), got {port!r}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _single_jar(profile: str, pattern: str) -> Path:
    found = sorted(jars_dir(profile).glob(pattern))
    if not found:
        raise FileNotFoundError(f"no {pattern} in {jars_dir(profile)}: run `make setup` first")
    return found[-1]


# --- PostgreSQL -----------------------------------------------------------------------------------------


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
        _check_port(port)
        self.dir = Path(dir).resolve()
        self.port = port
        self.data_dir = self.dir / "data"
        self.log_file = self.dir / "server.log"
        self._password_file = self.dir / "superuser.password"

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

    def _postmaster_line(self, index: int) -> int | None:
        """Line ``index`` of ``postmaster.pid`` as a number (0: the postmaster's pid, 3: its
        port), if readable."""
        try:
            return int((self.data_dir / "postmaster.pid").read_text().splitlines()[index])
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
                "\n# cdclake.local.parts.Postgres: the port and addresses of this start\ninclude = 'cdclake.conf'\n"
            )

    def _write_conf(self) -> None:
        conf = self.data_dir / "cdclake.conf"
        conf.write_text(
            "# written by cdclake.local.parts.Postgres at every start\n"
            f"port = {self.port}\n"
            f"listen_addresses = '{HOST}'\n"
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
            running_port = self._postmaster_line(3)
            if running_port not in (None, self.port):
                raise RuntimeError(
                    f"PostgreSQL in {self.data_dir} already runs on port {running_port}, not {self.port}"
                )
            logger.info("PostgreSQL already running on %s:%d (%s)", HOST, self.port, self.data_dir)
            return time.monotonic() - t0
        _check_port_free(self.port, "PostgreSQL")
        self._prepare_dir()
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        self._write_conf()
        proc = self._pg_ctl("-l", str(self.log_file), "-w", "-t", str(int(timeout_s)), "start", check=False)
        if proc.returncode != 0:
            raise RuntimeError(
                f"PostgreSQL did not start on {HOST}:{self.port} (pg_ctl exit {proc.returncode}); "
                f"{self.log_file}:\n{_log_tail(self.log_file)}"
            )
        took = time.monotonic() - t0
        logger.info("PostgreSQL started on %s:%d in %.1f s (%s)", HOST, self.port, took, self.data_dir)
        return took

    def stop(self, *, timeout_s: float = 60.0) -> None:
        """Stop the server (``pg_ctl stop -m fast``; its process group is killed when that fails or
        takes longer than ``timeout_s`` seconds). The cluster stays in ``dir``."""
        if not self.running():
            logger.info("PostgreSQL in %s not running", self.data_dir)
            return
        pid = self._postmaster_line(0)
        proc = self._pg_ctl("-m", "fast", "-w", "-t", str(int(timeout_s)), "stop", check=False)
        if proc.returncode != 0 and pid is not None:
            logger.warning("pg_ctl stop failed (%s): killing the postmaster's group %d", proc.stderr.strip(), pid)
            _stop_group(pid, timeout_s=5.0)
        logger.info("PostgreSQL on %s:%d stopped", HOST, self.port)

    # --- databases

    def _superuser_password(self) -> str:
        return self._password_file.read_text().strip()

    def url(self, db: str, user: str, password: str) -> str:
        """The SQLAlchemy URL ``postgresql+psycopg2://<user>:<password>@127.0.0.1:<port>/<db>``
        (user and password percent-encoded)."""
        return f"postgresql+psycopg2://{quote(user, safe='')}:{quote(password, safe='')}@{HOST}:{self.port}/{quote(db, safe='')}"

    def jdbc_uri(self, db: str) -> str:
        """The JDBC URI ``jdbc:postgresql://127.0.0.1:<port>/<db>`` (credentials go separately)."""
        return f"jdbc:postgresql://{HOST}:{self.port}/{quote(db, safe='')}"

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
            host=HOST,
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
        logger.info("PostgreSQL database %s (owner %s) ready on %s:%d", name, user, HOST, self.port)
        return self.url(name, user, password)


# --- s3proxy --------------------------------------------------------------------------------------------


def _java_property(value: str) -> str:
    """``value`` escaped for a Java ``.properties`` file (backslashes, line breaks, leading blanks)."""
    escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return "\\" + escaped if escaped[:1] in (" ", "\t") else escaped


class S3Proxy:
    """s3proxy serving the S3 API on ``http://127.0.0.1:<port>`` over the folder
    ``<dir>/data`` (backend ``filesystem-nio2``: a bucket is a folder, an object a file below it).

    Requests are authenticated (AWS signature V2 or V4) with ``access_key``/``secret_key``, which
    are written to ``<dir>/s3proxy.properties`` (mode 0600) only. Log: ``<dir>/s3proxy.log``.

    Args:
        dir: the folder of its files (created when missing).
        port: the TCP port on 127.0.0.1.
        access_key: the S3 access key id clients sign with.
        secret_key: the S3 secret access key.

    Raises:
        ValueError: ``port`` is not a TCP port, or an empty key.
    """

    REGION = "us-east-1"
    """The region clients sign for (s3proxy accepts any; pyarrow and S3FileIO need one)."""

    def __init__(self, dir: Path, port: int, access_key: str, secret_key: str) -> None:
        _check_port(port)
        if not access_key or not secret_key:
            raise ValueError("s3proxy needs a non-empty access key and secret key")
        self.dir = Path(dir).resolve()
        self.port = port
        self.access_key = access_key
        self._secret_key = secret_key
        self.data_dir = self.dir / "data"
        self.log_file = self.dir / "s3proxy.log"
        self._pid_file = self.dir / "s3proxy.pid"

    def __repr__(self) -> str:
        return f"S3Proxy(dir={str(self.dir)!r}, port={self.port}, access_key={self.access_key!r})"

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``: the endpoint override of S3 clients (path-style addressing)."""
        return f"http://{HOST}:{self.port}"

    def running(self) -> bool:
        """Whether the s3proxy of ``dir`` runs and accepts connections."""
        return read_pid(self._pid_file) is not None and port_open(HOST, self.port)

    def start(self, *, timeout_s: float = 60.0) -> float:
        """Start s3proxy unless it runs; returns when its port accepts connections.

        Returns:
            Seconds spent (about 0 when it was already running).

        Raises:
            FileNotFoundError: no s3proxy jar in ``.jars/s3proxy`` (``make setup``) or no ``java``.
            RuntimeError: the port is taken by another process, or s3proxy exited or did not
                listen within ``timeout_s`` seconds (the message carries its log's tail).
        """
        t0 = time.monotonic()
        if self.running():
            logger.info("s3proxy already running on %s", self.endpoint)
            return time.monotonic() - t0
        jar = _single_jar("s3proxy", "s3proxy-*-jar-with-dependencies.jar")
        _check_port_free(self.port, "s3proxy")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        props = self.dir / "s3proxy.properties"
        write_private(
            props,
            "".join(
                f"{key}={_java_property(value)}\n"
                for key, value in (
                    ("s3proxy.endpoint", self.endpoint),
                    ("s3proxy.authorization", "aws-v2-or-v4"),
                    ("s3proxy.identity", self.access_key),
                    ("s3proxy.credential", self._secret_key),
                    ("jclouds.provider", "filesystem-nio2"),
                    ("jclouds.filesystem.basedir", str(self.data_dir)),
                )
            ),
        )
        argv = [java_executable(), "-Xms64m", "-Xmx512m", "-jar", str(jar), "--properties", str(props)]
        proc = _spawn(argv, env=os.environ, log_file=self.log_file, cwd=self.dir)
        self._pid_file.write_text(str(proc.pid))
        _wait_ready(
            "s3proxy",
            proc,
            lambda: port_open(HOST, self.port),
            self.log_file,
            timeout_s=timeout_s,
            pid_file=self._pid_file,
        )
        took = time.monotonic() - t0
        logger.info("s3proxy started on %s in %.1f s (pid %d, data %s)", self.endpoint, took, proc.pid, self.data_dir)
        return took

    def stop(self, *, timeout_s: float = 30.0) -> None:
        """Stop the s3proxy of ``dir`` (its process group). Its data stay."""
        _stop_pid_file(self._pid_file, "s3proxy", timeout_s=timeout_s)

    def filesystem(self, *, secret_key: str | None = None, allow_bucket_creation: bool = False) -> S3FileSystem:
        """A pyarrow ``S3FileSystem`` of this endpoint (path-style, region ``us-east-1``), signing
        with this proxy's keys (``secret_key``: another secret, e.g. to check a wrong one fails)."""
        from pyarrow.fs import S3FileSystem

        return S3FileSystem(
            access_key=self.access_key,
            secret_key=self._secret_key if secret_key is None else secret_key,
            endpoint_override=self.endpoint,
            scheme="http",
            region=self.REGION,
            force_virtual_addressing=False,
            allow_bucket_creation=allow_bucket_creation,
        )

    def ensure_bucket(self, name: str) -> None:
        """Create bucket ``name`` unless it exists (the folder ``<data_dir>/<name>``).

        Raises:
            ValueError: ``name`` is not a valid S3 bucket name (3-63 of ``a-z0-9.-``).
            OSError: s3proxy refused the request.
        """
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", name):
            raise ValueError(f"{name!r} is not an S3 bucket name (3-63 characters of a-z, 0-9, '.', '-')")
        from pyarrow.fs import FileType

        fs = self.filesystem(allow_bucket_creation=True)
        if fs.get_file_info(name).type != FileType.Directory:
            fs.create_dir(name)
            logger.info("s3proxy bucket %s created", name)


# --- Iceberg REST catalog server ----------------------------------------------------------------------

_ENV_PREFIX = "CATALOG_"


def _decode_catalog_env(name: str) -> str:
    """The catalog property of environment variable ``name``, as Iceberg 1.11's
    ``RCKUtils.environmentCatalogConfig`` reads it: the first ``CATALOG_`` dropped, then every
    ``__`` -> ``-``, then every ``_`` -> ``.``, lower-cased."""
    return name.replace(_ENV_PREFIX, "", 1).replace("__", "-").replace("_", ".").lower()


def catalog_env(properties: Mapping[str, str]) -> dict[str, str]:
    """The environment variables that give the REST catalog server ``properties``: each key
    ``k`` as ``CATALOG_`` + ``k`` with ``-`` -> ``__`` and ``.`` -> ``_``, upper-cased
    (``s3.access-key-id`` -> ``CATALOG_S3_ACCESS__KEY__ID``; the inverse of Iceberg's
    ``RCKUtils.environmentCatalogConfig``, which every start of ``RESTCatalogServer`` applies).

    Raises:
        ValueError: a key the mapping cannot express (upper case, ``_``, or ``.`` right before ``-``).
    """
    env: dict[str, str] = {}
    for key, value in properties.items():
        name = _ENV_PREFIX + key.replace("-", "__").replace(".", "_").upper()
        if _decode_catalog_env(name) != key:
            raise ValueError(f"catalog property {key!r} cannot be passed as a CATALOG_ environment variable")
        env[name] = value
    return env


_LAUNCHER_CLASS = "CdclakeRestCatalogServer"
_LAUNCHER_SOURCE = """\
import java.lang.reflect.Constructor;
import java.lang.reflect.Method;
import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.eclipse.jetty.compression.gzip.GzipCompression;
import org.eclipse.jetty.compression.server.CompressionHandler;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

/**
 * Iceberg 1.11's RESTCatalogServer.start(), its HTTP connector bound to one address (args: host
 * port): RESTCatalogServer itself listens on every interface. The backend catalog is built by its
 * own (package-private) initializeBackendCatalog() from the CATALOG_* environment.
 */
public final class CdclakeRestCatalogServer {
  public static void main(String[] args) throws Exception {
    Class<?> serverClass = Class.forName("org.apache.iceberg.rest.RESTCatalogServer");
    Constructor<?> newServer = serverClass.getDeclaredConstructor();
    newServer.setAccessible(true);
    Method initialize = serverClass.getDeclaredMethod("initializeBackendCatalog");
    initialize.setAccessible(true);
    Object context = initialize.invoke(newServer.newInstance());
    Constructor<?> newAdapter =
        Class.forName("org.apache.iceberg.rest.RESTServerCatalogAdapter")
            .getDeclaredConstructor(
                Class.forName("org.apache.iceberg.rest.RESTCatalogServer$CatalogContext"));
    newAdapter.setAccessible(true);
    RESTCatalogAdapter adapter = (RESTCatalogAdapter) newAdapter.newInstance(context);

    ServletContextHandler handler = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    handler.addServlet(new ServletHolder(new RESTCatalogServlet(adapter)), "/*");
    CompressionHandler compression = new CompressionHandler();
    compression.putCompression(new GzipCompression());
    handler.insertHandler(compression);

    Server http = new Server();
    ServerConnector connector = new ServerConnector(http);
    connector.setHost(args[0]);
    connector.setPort(Integer.parseInt(args[1]));
    http.addConnector(connector);
    http.setHandler(handler);
    http.start();
    http.join();
  }
}
"""


def _javac() -> str:
    beside_java = Path(java_executable()).resolve().parent / "javac"
    found = str(beside_java) if beside_java.exists() else shutil.which("javac")
    if not found:
        raise FileNotFoundError(
            "javac not found (next to java or on PATH): the REST catalog server is started through a small "
            "launcher, compiled once, that binds it to 127.0.0.1; install a JDK 17 (openjdk-17-jdk-headless)"
        )
    return found


class RestCatalogServer:
    """Iceberg's REST catalog server on ``http://127.0.0.1:<port>``: the ``RESTCatalogServer``
    test fixture of Iceberg 1.11 (``.jars/rest-catalog``) over a ``JdbcCatalog`` (``jdbc_uri``,
    schema version V1, the layout pyiceberg's ``SqlCatalog`` reads and writes), data and
    metadata files under ``warehouse`` through ``S3FileIO`` (path-style requests to
    ``s3_endpoint``). No authentication: anyone who reaches the port can change the catalog.

    Every setting reaches the server as a ``CATALOG_*`` environment variable (:func:`catalog_env`;
    the server's own ``CATALOG_*`` mapping), never on its command line; the server's line that logs
    all catalog properties (secrets included) is silenced. It is started through a small launcher
    (compiled once with ``javac`` into ``<dir>/launcher``) that binds it to 127.0.0.1, which
    ``RESTCatalogServer`` itself cannot. Log: ``<dir>/server.log``.

    Args:
        dir: the folder of its files (created when missing).
        port: the TCP port on 127.0.0.1.
        jdbc_uri: the backend catalog's database, e.g. ``jdbc:postgresql://127.0.0.1:5432/iceberg``
            (:meth:`Postgres.jdbc_uri`); ``jdbc:sqlite:<file>`` works too.
        jdbc_user: the database user.
        jdbc_password: its password.
        warehouse: where new tables go, e.g. ``s3://lake/``.
        s3_endpoint: the S3 endpoint, e.g. :attr:`S3Proxy.endpoint`.
        s3_access_key: the S3 access key id.
        s3_secret_key: the S3 secret access key.
        region: the region S3 requests are signed for.
        catalog_name: the backend ``JdbcCatalog``'s name (its rows' ``catalog_name``; a pyiceberg
            ``SqlCatalog`` or Spark ``JdbcCatalog`` of the same name sees the same tables).

    Raises:
        ValueError: ``port`` is not a TCP port, or an empty setting.
    """

    IO_IMPL = "org.apache.iceberg.aws.s3.S3FileIO"

    def __init__(
        self,
        dir: Path,
        port: int,
        *,
        jdbc_uri: str,
        jdbc_user: str,
        jdbc_password: str,
        warehouse: str,
        s3_endpoint: str,
        s3_access_key: str,
        s3_secret_key: str,
        region: str = "us-east-1",
        catalog_name: str = "rest_backend",
    ) -> None:
        _check_port(port)
        required = {
            "jdbc_uri": jdbc_uri,
            "jdbc_user": jdbc_user,
            "jdbc_password": jdbc_password,
            "warehouse": warehouse,
            "s3_endpoint": s3_endpoint,
            "s3_access_key": s3_access_key,
            "s3_secret_key": s3_secret_key,
            "region": region,
            "catalog_name": catalog_name,
        }
        empty = sorted(k for k, v in required.items() if not v)
        if empty:
            raise ValueError(f"RestCatalogServer settings must be non-empty: {', '.join(empty)}")
        if not jdbc_uri.startswith("jdbc:"):
            raise ValueError(f"jdbc_uri must be a JDBC URI (jdbc:...), got {jdbc_uri!r}")
        self.dir = Path(dir).resolve()
        self.port = port
        self.warehouse = warehouse
        self.log_file = self.dir / "server.log"
        self._pid_file = self.dir / "server.pid"
        self._properties = {
            "catalog.name": catalog_name,
            "uri": jdbc_uri,
            "jdbc.user": jdbc_user,
            "jdbc.password": jdbc_password,
            "jdbc.schema-version": "V1",
            "warehouse": warehouse,
            "io-impl": self.IO_IMPL,
            "s3.endpoint": s3_endpoint,
            "s3.path-style-access": "true",
            "s3.access-key-id": s3_access_key,
            "s3.secret-access-key": s3_secret_key,
            "client.region": region,
            "rest.port": str(port),
        }

    def __repr__(self) -> str:
        return f"RestCatalogServer(dir={str(self.dir)!r}, port={self.port}, warehouse={self.warehouse!r})"

    @property
    def uri(self) -> str:
        """``http://127.0.0.1:<port>``: the ``uri`` of a REST catalog client."""
        return f"http://{HOST}:{self.port}"

    def running(self) -> bool:
        """Whether the server of ``dir`` runs and answers ``GET /v1/config``."""
        return read_pid(self._pid_file) is not None and _http_ok(f"{self.uri}/v1/config")

    def _launcher(self, classpath: str) -> Path:
        """The folder of the compiled launcher class (compiled when missing or changed)."""
        out = self.dir / "launcher"
        source = out / f"{_LAUNCHER_CLASS}.java"
        stamp = out / "source.sha256"
        digest = hashlib.sha256(_LAUNCHER_SOURCE.encode()).hexdigest()
        if (out / f"{_LAUNCHER_CLASS}.class").exists() and stamp.exists() and stamp.read_text() == digest:
            return out
        out.mkdir(parents=True, exist_ok=True)
        source.write_text(_LAUNCHER_SOURCE)
        proc = subprocess.run(
            [_javac(), "-nowarn", "-cp", classpath, "-d", str(out), str(source)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise RuntimeError(f"compiling the REST catalog server launcher failed:\n{proc.stderr[-3000:]}")
        stamp.write_text(digest)
        return out

    def start(self, *, timeout_s: float = 120.0) -> float:
        """Start the server unless it runs; returns when ``GET /v1/config`` answers 200 (the
        backend catalog is built, its tables created in the database on first start, before the
        port opens).

        Returns:
            Seconds spent (about 0 when it was already running; the first start also compiles
            the launcher, about 1-2 s).

        Raises:
            FileNotFoundError: no jars in ``.jars/rest-catalog`` (``make setup``), no ``java`` or
                no ``javac``.
            RuntimeError: the port is taken by another process, or the server exited (e.g. the
                database refused the user) or did not answer within ``timeout_s`` seconds (the
                message carries its log's tail).
        """
        t0 = time.monotonic()
        if self.running():
            logger.info("REST catalog server already running on %s", self.uri)
            return time.monotonic() - t0
        _single_jar("rest-catalog", "iceberg-open-api-*-test-fixtures.jar")
        _check_port_free(self.port, "REST catalog server")
        self.dir.mkdir(parents=True, exist_ok=True)
        jars = str(jars_dir("rest-catalog") / "*")
        launcher = self._launcher(jars)
        env = {k: v for k, v in os.environ.items() if not k.startswith(_ENV_PREFIX)}
        env.update(catalog_env(self._properties))
        argv = [
            java_executable(),
            "-Xms128m",
            "-Xmx1g",
            # its INFO line "Creating ... catalog with properties" prints every setting, secrets too
            "-Dorg.slf4j.simpleLogger.log.org.apache.iceberg.rest.RESTCatalogServer=warn",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss.SSS",
            f"-Djava.io.tmpdir={self.dir}",
            "-cp",
            os.pathsep.join([str(launcher), jars]),
            _LAUNCHER_CLASS,
            HOST,
            str(self.port),
        ]
        proc = _spawn(argv, env=env, log_file=self.log_file, cwd=self.dir)
        self._pid_file.write_text(str(proc.pid))
        _wait_ready(
            "REST catalog server",
            proc,
            lambda: _http_ok(f"{self.uri}/v1/config"),
            self.log_file,
            timeout_s=timeout_s,
            pid_file=self._pid_file,
        )
        took = time.monotonic() - t0
        logger.info("REST catalog server started on %s in %.1f s (pid %d)", self.uri, took, proc.pid)
        return took

    def stop(self, *, timeout_s: float = 30.0) -> None:
        """Stop the server of ``dir`` (its process group). The catalog stays in its database."""
        _stop_pid_file(self._pid_file, "REST catalog server", timeout_s=timeout_s)


# --- Spark standalone -----------------------------------------------------------------------------------


class SparkStandalone:
    """A Spark standalone cluster on loopback: a master on ``spark://127.0.0.1:<master_port>``
    (web UI on ``webui_port``) and one worker with ``worker_cores`` cores and ``worker_memory``
    for executors, both from the pip ``pyspark`` package (``spark-class`` in this interpreter's
    ``bin``).

    Under ``dir``: ``master.log``, ``worker.log``, the worker's ``work`` folder (applications'
    executor files), ``local`` (shuffle and spill files), ``logs`` (``SPARK_LOG_DIR``) and an
    empty ``conf`` (``SPARK_CONF_DIR``, so no ``spark-env.sh`` of the package applies); nothing is
    written into the package. Python applications run in client mode only (standalone refuses
    cluster mode for them); set ``spark.cores.max`` or the first application takes every core.

    Args:
        dir: the folder of its files (created when missing).
        master_port: the master's RPC port on 127.0.0.1.
        worker_cores: cores the worker offers (>= 1).
        worker_memory: memory the worker offers, a JVM size such as ``1g`` or ``512m``.
        webui_port: the master's web UI port; default: a free port when first started (kept in
            ``<dir>/master-webui.port``).

    Raises:
        ValueError: a port that is not a TCP port, ``worker_cores`` < 1, or ``worker_memory`` not
            a size like ``1g``.
    """

    def __init__(
        self,
        dir: Path,
        master_port: int,
        worker_cores: int = 1,
        worker_memory: str = "1g",
        *,
        webui_port: int | None = None,
    ) -> None:
        _check_port(master_port, "master_port")
        if webui_port is not None:
            _check_port(webui_port, "webui_port")
        if worker_cores < 1:
            raise ValueError(f"worker_cores must be >= 1, got {worker_cores!r}")
        if not re.fullmatch(r"[1-9][0-9]*[kmgt]", worker_memory.lower()):
            raise ValueError(f"worker_memory must be a size like '1g' or '512m', got {worker_memory!r}")
        self.dir = Path(dir).resolve()
        self.master_port = master_port
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self._webui_port = webui_port
        self._master_pid = self.dir / "master.pid"
        self._worker_pid = self.dir / "worker.pid"
        self._webui_port_file = self.dir / "master-webui.port"

    def __repr__(self) -> str:
        return f"SparkStandalone(dir={str(self.dir)!r}, master_url={self.master_url!r})"

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<master_port>``: the ``--master`` of applications."""
        return f"spark://{HOST}:{self.master_port}"

    @property
    def webui_port(self) -> int:
        """The master's web UI port (chosen on first start when not given).

        Raises:
            RuntimeError: not given and the master was never started.
        """
        if self._webui_port is None:
            try:
                self._webui_port = int(self._webui_port_file.read_text())
            except (FileNotFoundError, ValueError):
                raise RuntimeError("the master's web UI port is chosen at its start: start() first") from None
        return self._webui_port

    @property
    def webui_url(self) -> str:
        """``http://127.0.0.1:<webui_port>``."""
        return f"http://{HOST}:{self.webui_port}"

    def status(self) -> dict[str, Any]:
        """The master's state as its web UI gives it (``GET /json/``): ``workers`` (each with
        ``id``, ``host``, ``port``, ``cores``, ``memory`` in MiB, ``state`` such as ``ALIVE``),
        ``aliveworkers``, ``cores``, ``activeapps``, ``status`` (``ALIVE``), ...

        Raises:
            OSError: the master's web UI does not answer.
        """
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=5) as response:
            status: dict[str, Any] = json.load(response)
        return status

    def alive_workers(self) -> list[dict[str, Any]]:
        """The workers the master lists as ``ALIVE`` (none when the master does not answer)."""
        try:
            return [w for w in self.status().get("workers", []) if w.get("state") == "ALIVE"]
        except (OSError, ValueError, RuntimeError):
            return []

    def running(self) -> bool:
        """Whether master and worker of ``dir`` run and the worker is registered ``ALIVE``."""
        return (
            read_pid(self._master_pid) is not None
            and read_pid(self._worker_pid) is not None
            and bool(self.alive_workers())
        )

    def _env(self) -> dict[str, str]:
        for sub in ("work", "local", "logs", "conf"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        venv_bin = os.path.dirname(sys.executable)
        env = dict(os.environ)
        env.update(
            {
                # the pip package's scripts find SPARK_HOME through the python3 on PATH
                "PATH": venv_bin + os.pathsep + env.get("PATH", ""),
                "PYSPARK_PYTHON": sys.executable,
                "SPARK_LOCAL_IP": HOST,  # the web UIs bind to it
                "SPARK_LOG_DIR": str(self.dir / "logs"),
                "SPARK_LOCAL_DIRS": str(self.dir / "local"),
                "SPARK_CONF_DIR": str(self.dir / "conf"),
                # no REST submission server (it would take the fixed port 6066): applications
                # connect to the master's RPC port
                "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            }
        )
        return env

    def start(self, *, timeout_s: float = 120.0) -> float:
        """Start the master and the worker unless they run; returns when the master lists the
        worker ``ALIVE``.

        Returns:
            Seconds spent (about 0 when both were already running).

        Raises:
            FileNotFoundError: no ``spark-class`` next to this Python interpreter (``pyspark``
                not installed).
            RuntimeError: a port is taken by another process, or master or worker exited or the
                worker was not registered within ``timeout_s`` seconds (the message carries the
                log's tail).
        """
        t0 = time.monotonic()
        if self.running():
            logger.info("Spark standalone already running at %s", self.master_url)
            return time.monotonic() - t0
        spark_class = Path(sys.executable).parent / "spark-class"
        if not spark_class.exists():
            raise FileNotFoundError(f"{spark_class} not found: install pyspark in this environment (`make setup`)")
        env = self._env()
        deadline = time.monotonic() + timeout_s
        if read_pid(self._master_pid) is None:
            _check_port_free(self.master_port, "Spark master")
            if self._webui_port is None:
                self._webui_port = _free_port()
            _check_port_free(self.webui_port, "Spark master web UI")
            self._webui_port_file.write_text(str(self.webui_port))
            argv = [str(spark_class), "org.apache.spark.deploy.master.Master"]
            argv += ["--host", HOST, "--port", str(self.master_port), "--webui-port", str(self.webui_port)]
            master = _spawn(argv, env=env, log_file=self.dir / "master.log", cwd=self.dir)
            self._master_pid.write_text(str(master.pid))
            _wait_ready(
                "Spark master",
                master,
                lambda: _http_ok(f"{self.webui_url}/json/"),
                self.dir / "master.log",
                timeout_s=max(deadline - time.monotonic(), 1.0),
                pid_file=self._master_pid,
            )
        if read_pid(self._worker_pid) is None:
            argv = [str(spark_class), "org.apache.spark.deploy.worker.Worker"]
            argv += ["--host", HOST, "--webui-port", "0", "--cores", str(self.worker_cores)]
            argv += ["--memory", self.worker_memory, "--work-dir", str(self.dir / "work"), self.master_url]
            worker = _spawn(argv, env=env, log_file=self.dir / "worker.log", cwd=self.dir)
            self._worker_pid.write_text(str(worker.pid))
            _wait_ready(
                "Spark worker",
                worker,
                lambda: bool(self.alive_workers()),
                self.dir / "worker.log",
                timeout_s=max(deadline - time.monotonic(), 1.0),
                pid_file=self._worker_pid,
            )
        took = time.monotonic() - t0
        logger.info("Spark standalone started at %s in %.1f s (web UI %s)", self.master_url, took, self.webui_url)
        return took

    def stop(self, *, timeout_s: float = 30.0) -> None:
        """Stop the worker (and the executors it runs), then the master."""
        _stop_pid_file(self._worker_pid, "Spark worker", timeout_s=timeout_s)
        _stop_pid_file(self._master_pid, "Spark master", timeout_s=timeout_s)


# --- Airflow: separate processes, driven through the REST API ------------------------------------------

TERMINAL_RUN_STATES = frozenset({"success", "failed"})
"""The states a DAG run ends in."""


class AirflowProcesses:
    """Airflow 3 as production runs it: ``scheduler``, ``dag-processor``, ``triggerer`` and
    ``api-server`` (on ``127.0.0.1:<port>``) as processes of their own, each in a session of its
    own, sharing one execution API URL and JWT secret; driven through the REST API
    (``/api/v2``), authenticated by a token from ``GET /auth/token``.

    ``env`` is the processes' whole environment: it must set ``AIRFLOW_HOME`` and should set
    ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` (PostgreSQL, e.g. :meth:`Postgres.ensure_database`:
    SQLite locks up under concurrent runs), ``AIRFLOW__CORE__DAGS_FOLDER`` and
    ``AIRFLOW__LOGGING__BASE_LOG_FOLDER``. Added to it: the execution API URL and the API's host
    and port (always); a random JWT secret and API secret key, free loopback ports for the worker's
    and triggerer's log servers (unless ``env`` sets them); and, unless ``env`` sets them, the
    settings for driving it from a test or benchmark: LocalExecutor, every user an admin
    (``SIMPLE_AUTH_MANAGER_ALL_ADMINS``, which :meth:`get` and :meth:`trigger` rely on), DAGs
    unpaused at creation, DAG files parsed every 5 s. Logs: ``<logs_dir>/airflow-<component>.log``.

    Args:
        env: the processes' environment (see above).
        logs_dir: the folder of the processes' logs (created when missing).
        port: the api-server's TCP port on 127.0.0.1.
        cwd: the processes' working folder (default: this process's).

    Raises:
        ValueError: ``env`` has no ``AIRFLOW_HOME``, or ``port`` is not a TCP port.
    """

    COMPONENTS = ("scheduler", "dag-processor", "triggerer", "api-server")

    def __init__(self, env: Mapping[str, str], logs_dir: Path, port: int, *, cwd: Path | None = None) -> None:
        _check_port(port)
        if not env.get("AIRFLOW_HOME"):
            raise ValueError("env must set AIRFLOW_HOME (else Airflow writes to ~/airflow)")
        import requests

        self.port = port
        self.base = f"http://{HOST}:{port}"
        self.logs = Path(logs_dir)
        self.cwd = cwd
        self.env = dict(env)
        self.env.update(
            {
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base}/execution/",
                "AIRFLOW__API__HOST": HOST,
                "AIRFLOW__API__PORT": str(port),
            }
        )
        defaults = {
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(_free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(_free_port()),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
        }
        for key, value in defaults.items():
            self.env.setdefault(key, value)
        self.procs: dict[str, subprocess.Popen] = {}
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

    def start(self, timeout_s: float = 300.0) -> float:
        """Start the four processes (those not running) and wait until the API answers
        ``GET /api/v2/monitor/health``. Returns seconds.

        Raises:
            RuntimeError: a process exited, or the API did not answer within ``timeout_s`` seconds.
        """
        t0 = time.monotonic()
        if self.procs and all(p.poll() is None for p in self.procs.values()) and self._healthy():
            logger.info("Airflow already running on %s", self.base)
            return time.monotonic() - t0
        self.logs.mkdir(parents=True, exist_ok=True)
        for name in self.COMPONENTS:
            if name in self.procs and self.procs[name].poll() is None:
                continue
            args = [self._airflow(), name]
            if name == "api-server":
                args += ["--port", str(self.port), "--host", HOST]
            self.procs[name] = _spawn(args, env=self.env, log_file=self.logs / f"airflow-{name}.log", cwd=self.cwd)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._check_alive()
            if self._healthy():
                took = time.monotonic() - t0
                logger.info("Airflow started on %s in %.1f s", self.base, took)
                return took
            time.sleep(1.0)
        raise RuntimeError(f"the Airflow API did not answer on {self.base} within {timeout_s:.0f} s")

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"airflow {name} exited ({proc.returncode}); log {self.logs}/airflow-{name}.log")

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM every process's group at once, then wait up to ``timeout_s`` seconds each
        before SIGKILL."""
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for name, proc in self.procs.items():
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                logger.warning("airflow %s did not stop within %.0f s: killed", name, timeout_s)
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the process and whatever is left of its group
            except ProcessLookupError:
                pass
            proc.wait()
        self.procs.clear()

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

    def task_log_tail(self, dag_id: str, run_id: str) -> str:
        """The last 12,000 characters of the run's task log files (the last 3,000 of each)."""
        base = Path(self.env.get("AIRFLOW__LOGGING__BASE_LOG_FOLDER") or Path(self.env["AIRFLOW_HOME"]) / "logs")
        out = []
        for path in sorted(base.glob(f"dag_id={dag_id}/run_id={run_id}/**/*.log")):
            out.append(f"--- {path}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)[-12000:]
