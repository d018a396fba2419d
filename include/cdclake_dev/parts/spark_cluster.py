"""A Spark standalone cluster on loopback: a master and one worker from the pip ``pyspark``
package."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from cdclake_dev.process import LOOPBACK, Daemon, check_port, check_port_free, free_port, http_ok

logger = logging.getLogger(__name__)


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
        check_port(master_port, "master_port")
        if webui_port is not None:
            check_port(webui_port, "webui_port")
        if worker_cores < 1:
            raise ValueError(f"worker_cores must be >= 1, got {worker_cores!r}")
        if not re.fullmatch(r"[1-9][0-9]*[kmgt]", worker_memory.lower()):
            raise ValueError(f"worker_memory must be a size like '1g' or '512m', got {worker_memory!r}")
        self.dir = Path(dir).resolve()
        self.master_port = master_port
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self._webui_port = webui_port
        self._master = Daemon("Spark master", self.dir / "master.pid", self.dir / "master.log")
        self._worker = Daemon("Spark worker", self.dir / "worker.pid", self.dir / "worker.log")
        self._webui_port_file = self.dir / "master-webui.port"

    def __repr__(self) -> str:
        return f"SparkStandalone(dir={str(self.dir)!r}, master_url={self.master_url!r})"

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<master_port>``: the ``--master`` of applications."""
        return f"spark://{LOOPBACK}:{self.master_port}"

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
        return f"http://{LOOPBACK}:{self.webui_port}"

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
        return self._master.running() and self._worker.running() and bool(self.alive_workers())

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
                "SPARK_LOCAL_IP": LOOPBACK,  # the web UIs bind to it
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
        if not self._master.running():
            check_port_free(self.master_port, "Spark master")
            if self._webui_port is None:
                self._webui_port = free_port()
            check_port_free(self.webui_port, "Spark master web UI")
            self._webui_port_file.write_text(str(self.webui_port))
            argv = [str(spark_class), "org.apache.spark.deploy.master.Master"]
            argv += ["--host", LOOPBACK, "--port", str(self.master_port), "--webui-port", str(self.webui_port)]
            self._master.start(
                argv,
                env=env,
                cwd=self.dir,
                ready=lambda: http_ok(f"{self.webui_url}/json/"),
                timeout_s=max(deadline - time.monotonic(), 1.0),
            )
        if not self._worker.running():
            argv = [str(spark_class), "org.apache.spark.deploy.worker.Worker"]
            argv += ["--host", LOOPBACK, "--webui-port", "0", "--cores", str(self.worker_cores)]
            argv += ["--memory", self.worker_memory, "--work-dir", str(self.dir / "work"), self.master_url]
            self._worker.start(
                argv,
                env=env,
                cwd=self.dir,
                ready=lambda: bool(self.alive_workers()),
                timeout_s=max(deadline - time.monotonic(), 1.0),
            )
        took = time.monotonic() - t0
        logger.info("Spark standalone started at %s in %.1f s (web UI %s)", self.master_url, took, self.webui_url)
        return took

    def stop_worker(self, *, hard: bool = False) -> None:
        """Stop the worker and the executors it runs (``hard``: SIGKILL, a crash); the master
        stays. :meth:`start` starts it again."""
        self._worker.stop(hard=hard)

    def stop(self, *, timeout_s: float = 30.0) -> None:
        """Stop the worker (and the executors it runs), then the master."""
        self._worker.stop(timeout_s=timeout_s)
        self._master.stop(timeout_s=timeout_s)
