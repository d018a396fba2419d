"""Trino (``.jars/trino``: the server core of Trino 476 and its Iceberg connector, unpacked by
``make setup``) as a single-node coordinator on loopback, with one Iceberg catalog over an Iceberg
REST catalog whose warehouse is on S3: a reader of the tests' reader matrix
(``tests/integration/test_readers.py``). Trino 476 runs on Java 24 or newer only; that Java is
found by :func:`cdclake_dev.system.java_at_least` (``TRINO_JAVA_HOME`` overrides the search)."""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from cdclake.settings import jars_dir
from cdclake_dev.process import LOOPBACK, Daemon, check_non_empty, check_port, check_port_free
from cdclake_dev.system import TRINO_JAVA_HOME, java_at_least, single_jar, write_private

logger = logging.getLogger(__name__)

TRINO_JAVA = 24
"""The oldest Java Trino 476 starts on (its ``TrinoSystemRequirements``: 24.0.1)."""

_S3_ACCESS_KEY_ENV = "CDCLAKE_TRINO_S3_ACCESS_KEY"
_S3_SECRET_KEY_ENV = "CDCLAKE_TRINO_S3_SECRET_KEY"

JVM_OPTIONS = (
    "-Xms256m",
    "-Xmx1g",
    "-XX:+UseG1GC",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-XX:-OmitStackTraceInFastThrow",
    "-XX:ReservedCodeCacheSize=256M",
    "-XX:PerMethodRecompilationCutoff=10000",
    "-XX:PerBytecodeRecompilationCutoff=10000",
    "-XX:+EnableDynamicAgentLoading",
    "-Djdk.attach.allowAttachSelf=true",
    "-Djdk.nio.maxCachedBufferSize=2000000",
    "-Dfile.encoding=UTF-8",
    # Java 24+ warns of the native access and sun.misc.Unsafe use of Trino's libraries otherwise
    "--enable-native-access=ALL-UNNAMED",
    "--sun-misc-unsafe-memory-access=allow",
)
"""``jvm.config``: Trino's recommended options, with a heap of 1 GiB (a few small tables)."""

LOG_LEVELS = {
    "io.trino": "INFO",
    # its table of every configuration property at start (secret values redacted, key ids not)
    "Bootstrap": "WARN",
}
"""``log.properties``."""


def _properties(values: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


class TrinoServer:
    """Trino on ``http://127.0.0.1:<port>``: one coordinator that is also its only worker, one
    catalog :attr:`catalog` (``connector.name=iceberg``, ``iceberg.catalog.type=rest`` at
    ``rest_uri``, its files read with Trino's native S3 file system from ``s3_endpoint`` with
    path-style requests). Only the Iceberg plugin is loaded. No authentication: anyone who reaches
    the port can query (as any user).

    Files under ``dir``: ``etc/`` (``node.properties``, ``jvm.config``, ``config.properties``,
    ``log.properties``, ``catalog/<catalog>.properties``), ``data/`` (the node's data folder, its
    working directory), ``plugin/iceberg`` (a link to the unpacked plugin), ``trino.pid`` and
    ``trino.log`` (its output). The S3 keys reach the server as environment variables the catalog
    file names (``${ENV:...}``), never its files or command line, and are not logged.

    Args:
        dir: the folder of its files (created when missing).
        port: the TCP port on 127.0.0.1.
        rest_uri: the Iceberg REST catalog, e.g. :attr:`~cdclake_dev.parts.rest_catalog.RestCatalogServer.uri`.
        s3_endpoint: the S3 endpoint of the warehouse, e.g. :attr:`~cdclake_dev.parts.s3.S3Proxy.endpoint`.
        s3_access_key: the S3 access key id.
        s3_secret_key: the S3 secret access key.
        region: the region S3 requests are signed for.
        catalog: the catalog's name in Trino (``SELECT ... FROM <catalog>.<namespace>.<table>``).

    Raises:
        ValueError: ``port`` is not a TCP port, or an empty setting.
    """

    def __init__(
        self,
        dir: Path,
        port: int,
        *,
        rest_uri: str,
        s3_endpoint: str,
        s3_access_key: str,
        s3_secret_key: str,
        region: str = "us-east-1",
        catalog: str = "lake",
    ) -> None:
        check_port(port)
        check_non_empty(
            "TrinoServer",
            rest_uri=rest_uri,
            s3_endpoint=s3_endpoint,
            s3_access_key=s3_access_key,
            s3_secret_key=s3_secret_key,
            region=region,
            catalog=catalog,
        )
        self.dir = Path(dir).resolve()
        self.port = port
        self.rest_uri = rest_uri
        self.s3_endpoint = s3_endpoint
        self.region = region
        self.catalog = catalog
        self._keys = {_S3_ACCESS_KEY_ENV: s3_access_key, _S3_SECRET_KEY_ENV: s3_secret_key}
        self.etc_dir = self.dir / "etc"
        self.data_dir = self.dir / "data"
        self.log_file = self.dir / "trino.log"
        self._process = Daemon("Trino", self.dir / "trino.pid", self.log_file)

    def __repr__(self) -> str:
        return f"TrinoServer(dir={str(self.dir)!r}, port={self.port}, catalog={self.catalog!r})"

    @property
    def uri(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{LOOPBACK}:{self.port}"

    def info(self) -> dict[str, Any] | None:
        """What ``GET /v1/info`` answers (``nodeVersion``, ``starting``, ...); ``None`` when it
        does not answer 200 with JSON within 2 s."""
        try:
            with urllib.request.urlopen(f"{self.uri}/v1/info", timeout=2) as response:
                if response.status != 200:
                    return None
                answer = json.loads(response.read())
        except (OSError, ValueError):  # URLError is an OSError; JSONDecodeError a ValueError
            return None
        return answer if isinstance(answer, dict) else None

    def _started(self) -> bool:
        info = self.info()
        return info is not None and info.get("starting") is False and self._answers_query()

    def _answers_query(self) -> bool:
        """Whether ``SELECT 1`` runs. The coordinator schedules queries on itself once its node
        manager lists itself active, a few seconds after ``GET /v1/info`` says ``starting: false``
        (a query before fails with ``NO_NODES_AVAILABLE``, seen under load in the suite). A scan
        of :attr:`catalog` may lag a few seconds more: :meth:`query` waits it out."""
        from trino.exceptions import Error, HttpError

        try:
            return self.query("SELECT 1", timeout_s=0) == [(1,)]
        except (Error, HttpError, OSError) as e:  # requests' errors are OSErrors
            logger.debug("Trino on %s does not run a query yet: %s", self.uri, e)
            return False

    def running(self) -> bool:
        """Whether the server of ``dir`` runs and answers a query (``GET /v1/info`` says it is no
        longer starting, and ``SELECT 1`` runs)."""
        return self._process.running() and self._started()

    def node_properties(self) -> dict[str, str]:
        """``etc/node.properties``: what the launcher passes as system properties."""
        return {
            "node.environment": "cdclake",
            "node.id": str(uuid.uuid5(uuid.NAMESPACE_URL, self.uri + str(self.dir))),
            "node.data-dir": str(self.data_dir),
            "node.bind-ip": LOOPBACK,
            "node.internal-address": LOOPBACK,
        }

    def config_properties(self) -> dict[str, str]:
        """``etc/config.properties``: a coordinator scheduling on itself, on :attr:`port`."""
        return {
            "coordinator": "true",
            "node-scheduler.include-coordinator": "true",
            "http-server.http.port": str(self.port),
            "http-server.log.enabled": "false",
            "discovery.uri": self.uri,
            "catalog.config-dir": str(self.etc_dir / "catalog"),
            "plugin.dir": str(self.dir / "plugin"),
            "query.max-memory": "512MB",
            "query.max-memory-per-node": "512MB",
        }

    def catalog_properties(self) -> dict[str, str]:
        """``etc/catalog/<catalog>.properties``: the Iceberg connector on the REST catalog, the
        native S3 file system on the endpoint (the keys as ``${ENV:...}`` references)."""
        return {
            "connector.name": "iceberg",
            "iceberg.catalog.type": "rest",
            "iceberg.rest-catalog.uri": self.rest_uri,
            "fs.native-s3.enabled": "true",
            "s3.endpoint": self.s3_endpoint,
            "s3.region": self.region,
            "s3.path-style-access": "true",
            "s3.aws-access-key": f"${{ENV:{_S3_ACCESS_KEY_ENV}}}",
            "s3.aws-secret-key": f"${{ENV:{_S3_SECRET_KEY_ENV}}}",
        }

    def _write_etc(self) -> None:
        self.etc_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.etc_dir / "node.properties").write_text(_properties(self.node_properties()))
        (self.etc_dir / "jvm.config").write_text("".join(f"{o}\n" for o in JVM_OPTIONS))
        (self.etc_dir / "config.properties").write_text(_properties(self.config_properties()))
        (self.etc_dir / "log.properties").write_text(_properties(LOG_LEVELS))
        write_private(self.etc_dir / "catalog" / f"{self.catalog}.properties", _properties(self.catalog_properties()))
        # plugin.dir holds the Iceberg plugin only: the server core's other plugins are not loaded
        plugin = self.dir / "plugin" / "iceberg"
        plugin.parent.mkdir(parents=True, exist_ok=True)
        if plugin.is_symlink() or plugin.exists():
            plugin.unlink()
        plugin.symlink_to(jars_dir("trino") / "plugin" / "iceberg", target_is_directory=True)

    def argv(self, java: str) -> list[str]:
        """What the launcher's ``run`` starts: ``java``, ``jvm.config``'s options, the node
        properties as system properties, the configuration files, the main class of
        ``bin/launcher.properties``."""
        server = jars_dir("trino")
        main_class = "io.trino.server.TrinoServer"
        for line in (server / "bin" / "launcher.properties").read_text().splitlines():
            if line.startswith("main-class="):
                main_class = line.split("=", 1)[1].strip()
        return [
            java,
            *JVM_OPTIONS,
            f"-Djava.io.tmpdir={self.data_dir}",
            *(f"-D{k}={v}" for k, v in self.node_properties().items()),
            f"-Dconfig={self.etc_dir / 'config.properties'}",
            f"-Dlog.levels-file={self.etc_dir / 'log.properties'}",
            "-cp",
            str(server / "lib" / "*"),
            main_class,
        ]

    def start(self, *, timeout_s: float = 240.0) -> float:
        """Start the server unless it runs; returns when ``GET /v1/info`` says ``starting: false``
        (its catalog loaded) and ``SELECT 1`` runs (the coordinator lists itself as a node).

        Returns:
            Seconds spent (about 0 when it was already running).

        Raises:
            FileNotFoundError: no Trino in ``.jars/trino`` (``make setup``).
            JavaNotFoundError: no Java 24 or newer (:func:`~cdclake_dev.system.java_at_least`;
                ``TRINO_JAVA_HOME``).
            RuntimeError: the port is taken by another process, or the server exited or was not
                started within ``timeout_s`` seconds (the message carries its log's tail).
        """
        t0 = time.monotonic()
        if self.running():
            logger.info("Trino already running on %s", self.uri)
            return time.monotonic() - t0
        single_jar("trino/lib", "io.trino_trino-main-*.jar")
        single_jar("trino/plugin/iceberg", "io.trino_trino-iceberg-*.jar")
        java = java_at_least(TRINO_JAVA, env_var=TRINO_JAVA_HOME, what="Trino")
        check_port_free(self.port, "Trino")
        self._write_etc()
        env = {k: v for k, v in os.environ.items() if k not in self._keys}
        env.update(self._keys)
        pid = self._process.start(self.argv(java), env=env, cwd=self.data_dir, ready=self._started, timeout_s=timeout_s)
        took = time.monotonic() - t0
        logger.info("Trino started on %s in %.1f s (pid %d, %s)", self.uri, took, pid, java)
        return took

    def stop(self, *, timeout_s: float = 30.0) -> int | None:
        """Stop the server of ``dir`` (its process group: SIGTERM, then SIGKILL after ``timeout_s``).

        Returns:
            The pid it had, ``None`` when it was not running.
        """
        return self._process.stop(timeout_s=timeout_s)

    def query(self, sql: str, *, user: str = "cdclake", timeout_s: float = 60.0) -> list[tuple[Any, ...]]:
        """The rows ``sql`` returns, run on :attr:`catalog` as ``user``; a query the coordinator
        cannot schedule yet (``NO_NODES_AVAILABLE``) is run again, once a second, for up to
        ``timeout_s`` seconds.

        Why: a node serves a catalog once the coordinator's node manager sees the catalog in the
        node's announcement (``catalogHandleIds``); it reads announcements every 5 s
        (``DiscoveryNodeManager``), so a scan of the catalog can fail with ``NO_NODES_AVAILABLE``
        for a few seconds after ``SELECT 1`` (which needs the system catalog only) runs. Seen
        once in the suite under load.

        Raises:
            trino.exceptions.TrinoQueryError: the query failed (``NO_NODES_AVAILABLE`` after
                ``timeout_s``).
        """
        from tenacity import Retrying, before_sleep_log, retry_if_exception, stop_after_delay, wait_fixed

        def unscheduled(e: BaseException) -> bool:
            return getattr(e, "error_name", None) == "NO_NODES_AVAILABLE"

        for attempt in Retrying(
            retry=retry_if_exception(unscheduled),
            stop=stop_after_delay(timeout_s),
            wait=wait_fixed(1),
            before_sleep=before_sleep_log(logger, logging.INFO),
            reraise=True,
        ):
            with attempt:
                con = self.connect(user=user)
                try:
                    cursor = con.cursor()
                    cursor.execute(sql)
                    return [tuple(r) for r in cursor.fetchall()]
                finally:
                    con.close()
        raise AssertionError("unreachable: Retrying re-raises or returns")  # pragma: no cover

    def connect(self, *, user: str = "cdclake", schema: str | None = None) -> Any:
        """A DBAPI connection (the ``trino`` client) to :attr:`catalog`, as ``user``."""
        import trino.dbapi

        return trino.dbapi.connect(
            host=LOOPBACK, port=self.port, user=user, catalog=self.catalog, schema=schema, http_scheme="http"
        )
