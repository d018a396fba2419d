"""The real source chain on one machine: MariaDB -> Debezium MariaDB connector (Kafka Connect
standalone) -> the local Kafka broker.

* **MariaDB** from Debian's packages (``mariadbd``), its data directory under
  ``<state_dir>/mariadb``, on ``127.0.0.1:<mariadb_port>``, with the binlog settings Debezium needs
  (Debezium MariaDB connector docs, "Setting up MariaDB"): ``server_id``, ``log_bin``,
  ``binlog_format=ROW``, ``binlog_row_image=FULL``, no binlog compression. The database
  ``inventory`` holds the signal table ``debezium_signal (id, type, data)``; the user ``debezium``
  has the grants the connector documents.
* **Kafka Connect standalone** from the jars in ``.jars/kafka``, with the connector plugin
  unpacked in ``.jars/connect-plugins``, running ``include/stack/debezium/inventory-connector.json``
  (the same file ``docker-compose.yaml`` mounts); its ``${env:...}`` placeholders are filled from
  :func:`connector_env`. Offsets are kept in ``<state_dir>/connect/offsets``.

Both run as :class:`~cdclake_dev.process.Daemon` s. Starting and stopping are idempotent and say
what they did.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from cdclake.io.source_db import SourceDatabase
from cdclake.settings import PROJECT_ROOT, Settings, jars_dir
from cdclake_dev.process import LOOPBACK, Daemon, port_open
from cdclake_dev.stack import kafka_classpath
from cdclake_dev.system import java_executable

if TYPE_CHECKING:
    from pymysql.connections import Connection

CONNECTOR_CONFIG = PROJECT_ROOT / "include" / "stack" / "debezium" / "inventory-connector.json"
DB_USER = "debezium"
DB_PASSWORD = "dbz"
SERVER_ID = 223344
SIGNAL_TABLE = "inventory.debezium_signal"

_INIT_SQL = f"""
CREATE DATABASE IF NOT EXISTS inventory;
CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{DB_PASSWORD}';
CREATE USER IF NOT EXISTS '{DB_USER}'@'localhost' IDENTIFIED BY '{DB_PASSWORD}';
GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, BINLOG MONITOR, LOCK TABLES
  ON *.* TO '{DB_USER}'@'127.0.0.1', '{DB_USER}'@'localhost';
CREATE TABLE IF NOT EXISTS inventory.debezium_signal (
  id VARCHAR(64) PRIMARY KEY,
  type VARCHAR(32) NOT NULL,
  data VARCHAR(2048) NULL
);
GRANT INSERT, UPDATE, DELETE ON inventory.debezium_signal TO '{DB_USER}'@'127.0.0.1', '{DB_USER}'@'localhost';
FLUSH PRIVILEGES;
"""


def _mariadb_dir(settings: Settings) -> Path:
    return settings.state_dir / "mariadb"


def _connect_dir(settings: Settings) -> Path:
    return settings.state_dir / "connect"


def _mariadb(settings: Settings) -> Daemon:
    """``mariadbd``: it writes the same pid file itself; its own log is ``error.log``, where its
    output goes too."""
    base = _mariadb_dir(settings)
    return Daemon("MariaDB", base / "mariadbd.pid", base / "error.log")


def _connect(settings: Settings) -> Daemon:
    """The Connect worker: output ``connect.out`` (its log4j log is ``connect.log``)."""
    base = _connect_dir(settings)
    return Daemon("Kafka Connect", base / "connect.pid", base / "connect.out")


def _stop(daemon: Daemon, *, hard: bool = False, timeout_s: float = 60.0) -> str:
    pid = daemon.stop(hard=hard, timeout_s=timeout_s)
    if pid is None:
        return f"{daemon.name} not running"
    return f"{daemon.name} {'killed (SIGKILL)' if hard else 'stopped'} (pid {pid})"


def local_source(
    settings: Settings, *, user: str = "root", password: str = "", database: str | None = None
) -> SourceDatabase:
    """The local MariaDB as a :class:`~cdclake.io.source_db.SourceDatabase`."""
    return SourceDatabase("127.0.0.1", settings.mariadb_port, user, password, database)


def mariadb_connect(
    settings: Settings, *, user: str = "root", password: str = "", database: str | None = None
) -> Connection:
    """A PyMySQL connection to the local MariaDB (autocommit on)."""
    return local_source(settings, user=user, password=password, database=database).connect()


def start_mariadb(settings: Settings, *, cdc_password: str = DB_PASSWORD, timeout_s: float = 60.0) -> str:
    """Start the local MariaDB (initializing its data directory on first start) and make sure the
    ``inventory`` database, the ``debezium`` user (password ``cdc_password``) and the signal table
    exist.

    Raises:
        FileNotFoundError: MariaDB is not installed (``make setup-chain`` installs it).
        RuntimeError: the server exited or did not listen within ``timeout_s`` seconds (it is
            stopped; the message carries its error log).
    """
    mariadbd = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
    if not Path(mariadbd).exists():
        raise FileNotFoundError("mariadbd not found: run `make setup-chain` (Debian package mariadb-server)")
    base = _mariadb_dir(settings)
    datadir = base / "data"
    server = _mariadb(settings)
    pid = server.pid
    if pid is None:
        base.mkdir(parents=True, exist_ok=True)
        if not (datadir / "mysql").exists():
            subprocess.run(
                [
                    "mariadb-install-db",
                    "--no-defaults",
                    f"--datadir={datadir}",
                    "--user=root",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                ],
                check=True,
                capture_output=True,
            )
        (base / "binlog").mkdir(exist_ok=True)
        pid = server.start(
            [
                mariadbd,
                "--no-defaults",
                f"--datadir={datadir}",
                "--user=root",
                f"--port={settings.mariadb_port}",
                f"--bind-address={LOOPBACK}",
                f"--socket={base / 'mariadbd.sock'}",
                f"--pid-file={server.pid_file}",
                f"--log-error={server.log_file}",
                f"--server-id={SERVER_ID}",
                f"--log-bin={base / 'binlog' / 'mysql-bin'}",
                "--binlog-format=ROW",
                "--binlog-row-image=FULL",
                "--log-bin-compress=OFF",
                "--binlog-expire-logs-seconds=604800",
                "--skip-name-resolve",
                "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_general_ci",
            ],
            ready=lambda: port_open(LOOPBACK, settings.mariadb_port),
            timeout_s=timeout_s,
            poll_s=0.3,
        )
        report = f"MariaDB started on 127.0.0.1:{settings.mariadb_port} (pid {pid}, data {datadir})"
    else:
        report = f"MariaDB already running on 127.0.0.1:{settings.mariadb_port} (pid {pid})"
    for _ in range(50):
        try:
            conn = mariadb_connect(settings)
            break
        except Exception:  # noqa: BLE001 - the server accepts TCP before it accepts logins
            time.sleep(0.2)
    else:
        conn = mariadb_connect(settings)
    with conn, conn.cursor() as cur:
        for statement in filter(str.strip, _INIT_SQL.split(";")):
            cur.execute(statement)
        if cdc_password != DB_PASSWORD:
            for host in ("127.0.0.1", "localhost"):
                cur.execute(f"ALTER USER '{DB_USER}'@'{host}' IDENTIFIED BY %s", (cdc_password,))
    return report


def stop_mariadb(settings: Settings) -> str:
    """Stop the local MariaDB (SIGTERM: a clean shutdown; SIGKILL after 60 s)."""
    return _stop(_mariadb(settings))


def connector_env(
    settings: Settings, *, schemas_enable: bool = True, snapshot_mode: str = "initial", db_password: str = DB_PASSWORD
) -> dict[str, str]:
    """Values of the ``${env:...}`` placeholders of the connector config, for the local chain
    (``db_password``: the ``debezium`` user's, as :func:`start_mariadb` set it)."""
    return {
        "CDC_CONNECTOR_CLASS": "io.debezium.connector.mariadb.MariaDbConnector",
        "CDC_DB_HOST": "127.0.0.1",
        "CDC_DB_PORT": str(settings.mariadb_port),
        "CDC_DB_USER": DB_USER,
        "CDC_DB_PASSWORD": db_password,
        "CDC_TOPIC_PREFIX": settings.topic_prefix,
        "CDC_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "CDC_SCHEMAS_ENABLE": "true" if schemas_enable else "false",
        "CDC_SNAPSHOT_MODE": snapshot_mode,
    }


_WORKER = """\
# Generated by cdclake_dev.chain: Kafka Connect standalone worker of the local chain.
bootstrap.servers={bootstrap}
listeners=http://127.0.0.1:{port}
plugin.path={plugins}
offset.storage.file.filename={offsets}
offset.flush.interval.ms={flush_ms}
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
config.providers=env
config.providers.env.class=org.apache.kafka.common.config.provider.EnvVarConfigProvider
"""


def start_connect(
    settings: Settings,
    *,
    schemas_enable: bool = True,
    snapshot_mode: str = "initial",
    timeout_s: float = 120.0,
    offset_flush_interval_ms: int = 60_000,
    db_password: str = DB_PASSWORD,
) -> str:
    """Start Kafka Connect standalone with the Debezium MariaDB connector unless it runs.

    ``offset_flush_interval_ms`` is the worker's ``offset.flush.interval.ms`` (how often it saves
    the connector's offsets to ``<state>/connect/offsets``); ``db_password`` reaches the connector
    through the worker's environment (``${env:CDC_DB_PASSWORD}``), never a file or command line.

    Raises:
        FileNotFoundError: the connector plugin was not fetched (``make setup-chain``).
        RuntimeError: the worker exited or did not listen within ``timeout_s`` seconds (it is
            stopped; the message carries its output).
    """
    plugins = jars_dir("connect-plugins")
    if not (plugins / "debezium-connector-mariadb").is_dir():
        raise FileNotFoundError(f"no Debezium plugin in {plugins}: run `make setup-chain` first")
    base = _connect_dir(settings)
    worker_process = _connect(settings)
    pid = worker_process.pid
    if pid is not None:
        return f"Kafka Connect already running on 127.0.0.1:{settings.connect_port} (pid {pid})"
    base.mkdir(parents=True, exist_ok=True)
    from cdclake.io.kafka import KafkaClients, ensure_topic

    # the Kafka signal channel reads partition 0 of a one-partition topic (Debezium docs)
    ensure_topic(KafkaClients.from_bootstrap(settings.kafka_bootstrap), settings.signal_topic, 1)
    worker = base / "worker.properties"
    worker.write_text(
        _WORKER.format(
            bootstrap=settings.kafka_bootstrap,
            port=settings.connect_port,
            plugins=plugins,
            offsets=base / "offsets",
            flush_ms=offset_flush_interval_ms,
        )
    )
    log = base / "connect.log"
    log4j = base / "log4j2.yaml"
    log4j.write_text(
        "Configuration:\n  Appenders:\n    File:\n      name: file\n"
        f'      fileName: "{log}"\n      PatternLayout:\n        pattern: "[%d] %p %m (%c)%n"\n'
        "  Loggers:\n    Root:\n      level: INFO\n      AppenderRef:\n        - ref: file\n"
    )
    env = dict(os.environ)
    env.update(
        connector_env(settings, schemas_enable=schemas_enable, snapshot_mode=snapshot_mode, db_password=db_password)
    )
    pid = worker_process.start(
        [
            java_executable(),
            "-Xms256m",
            "-Xmx1g",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            kafka_classpath(),
            "org.apache.kafka.connect.cli.ConnectStandalone",
            str(worker),
            str(CONNECTOR_CONFIG),
        ],
        env=env,
        ready=lambda: port_open(LOOPBACK, settings.connect_port),
        timeout_s=timeout_s,
        poll_s=0.3,
    )
    return (
        f"Kafka Connect started on 127.0.0.1:{settings.connect_port} (pid {pid}) with "
        f"{CONNECTOR_CONFIG.name}, topic prefix {settings.topic_prefix!r}"
    )


def connector_status(settings: Settings) -> dict:
    """The connector's status from the Connect REST API (``GET /connectors/<name>/status``)."""
    import json
    import urllib.request

    name = json.loads(CONNECTOR_CONFIG.read_text())["name"]
    with urllib.request.urlopen(
        f"http://127.0.0.1:{settings.connect_port}/connectors/{name}/status", timeout=10
    ) as resp:
        return json.loads(resp.read())


def connect_offsets_file(settings: Settings) -> Path:
    """The Connect worker's offsets file (deleting it while Connect is stopped makes the connector
    start over: a new initial snapshot)."""
    return _connect_dir(settings) / "offsets"


def stop_connect(settings: Settings, *, hard: bool = False) -> str:
    """Stop the Connect worker; ``hard=True`` kills it with SIGKILL (a crash)."""
    return _stop(_connect(settings), hard=hard)
