"""Apicurio Registry 2.6 (``.jars/registry``, a Quarkus application): the schema registry of the
Avro chain, its storage an H2 database inside the process: in memory (every schema is gone when it
stops) or, for the local stack, a file under its folder (the ids survive a restart)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from cdclake_dev.process import LOOPBACK, Daemon, check_port, check_port_free, http_ok
from cdclake_dev.system import java_executable, single_jar

logger = logging.getLogger(__name__)


class SchemaRegistry:
    """Apicurio Registry on ``http://127.0.0.1:<port>``, serving the Confluent-compatible API
    (:attr:`ccompat_url`, what the pipeline's registry client reads) and Apicurio's own v2 API
    (:attr:`v2_url`, what Apicurio's Kafka Connect converters write to). No authentication: anyone
    who reaches the port can register schemas.

    Storage is in memory (the application's default, ``jdbc:h2:mem``): a restart forgets every
    schema and id, so a connector writing through it must be restarted with it. With
    ``persistent`` it is the H2 file ``<dir>/data/registry_db.mv.db`` (``jdbc:h2:file``): the
    schemas and their ids survive a restart, as the Avro records already in Kafka need when the
    local stack is stopped and started again. Quarkus's HTTP
    server binds 127.0.0.1; its management interface (port 9000 on all interfaces when enabled)
    is off. Log: ``<dir>/registry.log``.

    Args:
        dir: the folder of its files (created when missing).
        port: the TCP port on 127.0.0.1.
        persistent: keep the schemas in an H2 file under ``dir`` instead of in memory.

    Raises:
        ValueError: ``port`` is not a TCP port.
    """

    def __init__(self, dir: Path, port: int, *, persistent: bool = False) -> None:
        check_port(port)
        self.dir = Path(dir).resolve()
        self.port = port
        self.persistent = persistent
        self.log_file = self.dir / "registry.log"
        self._process = Daemon("Apicurio Registry", self.dir / "registry.pid", self.log_file)

    def __repr__(self) -> str:
        return f"SchemaRegistry(dir={str(self.dir)!r}, port={self.port}, persistent={self.persistent})"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def ccompat_url(self) -> str:
        """The Confluent Schema Registry compatible API, ``<url>/apis/ccompat/v7``: the
        ``schema.registry.url`` of Confluent clients (``GET /schemas/ids/<id>``)."""
        return f"{self.url}/apis/ccompat/v7"

    @property
    def v2_url(self) -> str:
        """Apicurio's v2 API, ``<url>/apis/registry/v2``: the ``apicurio.registry.url`` of its
        Kafka Connect converters."""
        return f"{self.url}/apis/registry/v2"

    def _ready(self) -> bool:
        return http_ok(f"{self.ccompat_url}/subjects")

    def running(self) -> bool:
        """Whether the registry of ``dir`` runs and answers ``GET /apis/ccompat/v7/subjects``."""
        return self._process.running() and self._ready()

    def start(self, *, timeout_s: float = 90.0) -> float:
        """Start the registry unless it runs; returns when ``GET /apis/ccompat/v7/subjects``
        answers 200 (about 3 s on 2 cores).

        Returns:
            Seconds spent (about 0 when it was already running).

        Raises:
            FileNotFoundError: no runner jar in ``.jars/registry`` (``make setup``), or no ``java``.
            RuntimeError: the port is taken by another process, or the registry exited or did not
                answer within ``timeout_s`` seconds (the message carries its log's tail).
        """
        t0 = time.monotonic()
        if self.running():
            logger.info("Apicurio Registry already running on %s", self.url)
            return time.monotonic() - t0
        jar = single_jar("registry", "apicurio-registry-app-*-runner.jar")
        check_port_free(self.port, "Apicurio Registry")
        self.dir.mkdir(parents=True, exist_ok=True)
        argv = [
            java_executable(),
            "-Xms64m",
            "-Xmx512m",
            f"-Djava.io.tmpdir={self.dir}",
            f"-Dquarkus.http.host={LOOPBACK}",
            f"-Dquarkus.http.port={self.port}",
            "-Dquarkus.management.enabled=false",
            *(
                [f"-Dquarkus.datasource.jdbc.url=jdbc:h2:file:{self.dir / 'data' / 'registry_db'}"]
                if self.persistent
                else []
            ),
            "-jar",
            str(jar),
        ]
        pid = self._process.start(argv, ready=self._ready, timeout_s=timeout_s, cwd=self.dir)
        took = time.monotonic() - t0
        logger.info("Apicurio Registry started on %s in %.1f s (pid %d)", self.url, took, pid)
        return took

    def stop(self, *, timeout_s: float = 30.0) -> int | None:
        """Stop the registry of ``dir`` (its process group); in memory, its schemas are gone with it.

        Returns:
            The pid it had, ``None`` when it was not running.
        """
        return self._process.stop(timeout_s=timeout_s)
