"""s3proxy 4.1 (``.jars/s3proxy``): the S3 API over a local folder (``filesystem-nio2``); one
bucket is one sub-folder of :attr:`S3Proxy.data_dir`."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from cdclake_dev.process import LOOPBACK, Daemon, check_port, check_port_free, port_open
from cdclake_dev.system import java_executable, single_jar, write_private

if TYPE_CHECKING:
    from pyarrow.fs import S3FileSystem

logger = logging.getLogger(__name__)


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
        check_port(port)
        if not access_key or not secret_key:
            raise ValueError("s3proxy needs a non-empty access key and secret key")
        self.dir = Path(dir).resolve()
        self.port = port
        self.access_key = access_key
        self._secret_key = secret_key
        self.data_dir = self.dir / "data"
        self.log_file = self.dir / "s3proxy.log"
        self._process = Daemon("s3proxy", self.dir / "s3proxy.pid", self.log_file)

    def __repr__(self) -> str:
        return f"S3Proxy(dir={str(self.dir)!r}, port={self.port}, access_key={self.access_key!r})"

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``: the endpoint override of S3 clients (path-style addressing)."""
        return f"http://{LOOPBACK}:{self.port}"

    def running(self) -> bool:
        """Whether the s3proxy of ``dir`` runs and accepts connections."""
        return self._process.running() and port_open(LOOPBACK, self.port)

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
        jar = single_jar("s3proxy", "s3proxy-*-jar-with-dependencies.jar")
        check_port_free(self.port, "s3proxy")
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
        pid = self._process.start(argv, ready=lambda: port_open(LOOPBACK, self.port), timeout_s=timeout_s, cwd=self.dir)
        took = time.monotonic() - t0
        logger.info("s3proxy started on %s in %.1f s (pid %d, data %s)", self.endpoint, took, pid, self.data_dir)
        return took

    def stop(self, *, timeout_s: float = 30.0) -> None:
        """Stop the s3proxy of ``dir`` (its process group). Its data stay."""
        self._process.stop(timeout_s=timeout_s)

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
