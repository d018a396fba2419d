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

A second MariaDB can run as a **replica** of the first (:func:`start_mariadb` with ``replica_of``:
the settings of another state directory and port), with ``log_slave_updates``, so its binlog holds
the replicated events with the server id and GTID of the server that originated them; a second
Debezium connector reading it is added to the running Connect worker through its REST API
(:func:`add_connector`).

The worker runs the connector files of :data:`CONNECTOR_FILES` it is started with
(:func:`start_connect` ``connectors``; ``cdclake chain start --avro``), passed to it on its command
line, so every start registers them again (a kill -9 and a start keep them): ``json``,
:data:`CONNECTOR_CONFIG`, and ``avro``, :data:`AVRO_CONNECTOR_CONFIG`, the same source tables as
**Avro** (Apicurio's ``AvroConverter``, Confluent wire format, schemas in a schema registry such as
:class:`~cdclake_dev.parts.registry.SchemaRegistry`) under ``<prefix>_avro``. A connector writing
Avro can also be added to the running worker over its REST API (:func:`add_avro_connector`; a
standalone worker forgets it when it stops). The local chain's registry is :func:`local_registry`
(``cdclake chain start --registry``; ``make demo-avro``, :mod:`cdclake_dev.demo_avro`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cdclake.io.source_db import SourceDatabase
from cdclake.settings import PROJECT_ROOT, Settings, jars_dir
from cdclake_dev.process import LOOPBACK, Daemon, port_open
from cdclake_dev.stack import kafka_classpath
from cdclake_dev.system import java_executable

if TYPE_CHECKING:
    from pymysql.connections import Connection
    from pymysql.cursors import Cursor

    from cdclake.io.kafka import KafkaClients
    from cdclake_dev.parts.registry import SchemaRegistry

CONNECTOR_CONFIG = PROJECT_ROOT / "include" / "stack" / "debezium" / "inventory-connector.json"
"""The JSON connector: every table of ``inventory``, ``JsonConverter`` with schemas, transaction
metadata as ``${env:CDC_TRANSACTION_METADATA}`` says, topic prefix ``${env:CDC_TOPIC_PREFIX}``."""
AVRO_CONNECTOR_CONFIG = CONNECTOR_CONFIG.with_name("inventory-connector-avro.json")
"""The Avro connector: the tables of ``${env:CDC_AVRO_TABLES}`` (:func:`connector_env`: every table
of ``inventory`` unless told), Apicurio's ``AvroConverter`` (:func:`avro_converter_config`'s
settings) writing to ``${env:CDC_REGISTRY_URL}``, transaction metadata as the JSON connector,
topic prefix ``${env:CDC_TOPIC_PREFIX}_avro``, binlog client id 184062."""
FLAT_CONNECTOR_CONFIG = CONNECTOR_CONFIG.with_name("inventory-connector-flat.json")
"""The JSON connector with Debezium's ``ExtractNewRecordState`` transform (flattened records,
:mod:`cdclake.model.flattened`: ``add.fields`` the contract's set, deletes rewritten with
``__deleted``): the tables of ``${env:CDC_FLAT_TABLES}``, topic prefix
``${env:CDC_TOPIC_PREFIX}_flat``, binlog client id 184063."""
AVRO_FLAT_CONNECTOR_CONFIG = CONNECTOR_CONFIG.with_name("inventory-connector-avro-flat.json")
"""The Avro connector with the same transform: the tables of ``${env:CDC_AVRO_FLAT_TABLES}``,
topic prefix ``${env:CDC_TOPIC_PREFIX}_avroflat``, binlog client id 184064."""
CONNECTOR_FILES = {
    "json": CONNECTOR_CONFIG,
    "avro": AVRO_CONNECTOR_CONFIG,
    "json-flat": FLAT_CONNECTOR_CONFIG,
    "avro-flat": AVRO_FLAT_CONNECTOR_CONFIG,
}
"""The connector variants :func:`start_connect` runs, by name."""
PREFIX_SUFFIXES = {"json": "", "avro": "_avro", "json-flat": "_flat", "avro-flat": "_avroflat"}
"""Each connector's topic prefix is the chain's followed by its suffix."""
TABLES_VARIABLES = {"avro": "CDC_AVRO_TABLES", "json-flat": "CDC_FLAT_TABLES", "avro-flat": "CDC_AVRO_FLAT_TABLES"}
"""The ``${env:...}`` placeholder of each connector's ``table.include.list`` (the JSON one reads
every table of ``inventory``)."""
AVRO_PREFIX_SUFFIX = PREFIX_SUFFIXES["avro"]
"""The Avro connector's topic prefix is the chain's followed by this."""
DB_USER = "debezium"
DB_PASSWORD = "dbz"
SERVER_ID = 223344
REPLICA_SERVER_ID = 223345
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


def start_mariadb(
    settings: Settings,
    *,
    cdc_password: str = DB_PASSWORD,
    timeout_s: float = 60.0,
    replica_of: Settings | None = None,
) -> str:
    """Start the local MariaDB (initializing its data directory on first start) and make sure the
    ``inventory`` database, the ``debezium`` user (password ``cdc_password``) and the signal table
    exist.

    With ``replica_of`` (the settings of a running local MariaDB) the server is its replica, with
    server id :data:`REPLICA_SERVER_ID` and ``log_slave_updates`` (MariaDB KB, "Setting Up
    Replication"): its own setup is kept out of its binlog, and it replicates from the primary's
    current GTID position (``MASTER_USE_GTID=slave_pos``), as the ``debezium`` user.

    Raises:
        FileNotFoundError: MariaDB is not installed (``make setup`` installs it).
        RuntimeError: the server exited or did not listen within ``timeout_s`` seconds (it is
            stopped; the message carries its error log).
    """
    mariadbd = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
    if not Path(mariadbd).exists():
        raise FileNotFoundError("mariadbd not found: run `make setup` (Debian package mariadb-server)")
    server = _mariadb(settings)
    pid = server.pid
    if pid is None:
        report = _start_mariadbd(settings, mariadbd, server, timeout_s=timeout_s, replica=replica_of is not None)
    else:
        report = f"MariaDB already running on 127.0.0.1:{settings.mariadb_port} (pid {pid})"
    conn = _mariadb_login(settings)
    with conn, conn.cursor() as cur:
        if replica_of is not None:
            cur.execute("SET SESSION sql_log_bin = 0")  # the replica's binlog holds the primary's events only
        for statement in filter(str.strip, _INIT_SQL.split(";")):
            cur.execute(statement)
        if cdc_password != DB_PASSWORD:
            for host in ("127.0.0.1", "localhost"):
                cur.execute(f"ALTER USER '{DB_USER}'@'{host}' IDENTIFIED BY %s", (cdc_password,))
        if replica_of is not None:
            report += "; " + _replicate(cur, replica_of, cdc_password)
    return report


def _start_mariadbd(settings: Settings, mariadbd: str, server: Daemon, *, timeout_s: float, replica: bool) -> str:
    """Start ``mariadbd`` as ``server`` (its data directory initialized on first start; ``replica``:
    the replica's server id and ``log_slave_updates``); returns the report line."""
    base = _mariadb_dir(settings)
    datadir = base / "data"
    base.mkdir(parents=True, exist_ok=True)
    if not (datadir / "mysql").exists():
        _install_mariadb_datadir(datadir)
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
            f"--server-id={REPLICA_SERVER_ID if replica else SERVER_ID}",
            f"--log-bin={base / 'binlog' / 'mysql-bin'}",
            *(["--log-slave-updates"] if replica else []),
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
    return f"MariaDB started on 127.0.0.1:{settings.mariadb_port} (pid {pid}, data {datadir})"


def _install_mariadb_datadir(datadir: Path) -> None:
    """Initialize a new MariaDB data directory ``datadir`` (``mariadb-install-db``, no test DB)."""
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


def _mariadb_login(settings: Settings) -> Connection:
    """A root connection to the local MariaDB, retried for about 10 s: the server accepts TCP
    before it accepts logins (the last attempt's error propagates)."""
    for _ in range(50):
        try:
            return mariadb_connect(settings)
        except Exception:  # noqa: BLE001 - the server accepts TCP before it accepts logins
            time.sleep(0.2)
    return mariadb_connect(settings)


def _replicate(cur: Cursor, primary: Settings, password: str) -> str:
    """Make the server of ``cur`` a replica of ``primary`` from the primary's current GTID position,
    unless it replicates already."""
    cur.execute("SHOW SLAVE STATUS")
    if cur.fetchone() is not None:
        return "replicating already"
    position = _gtid_binlog_pos(primary)
    cur.execute("SET GLOBAL gtid_slave_pos = %s", (position,))
    cur.execute(
        "CHANGE MASTER TO MASTER_HOST = %s, MASTER_PORT = %s, MASTER_USER = %s, MASTER_PASSWORD = %s, "
        "MASTER_USE_GTID = slave_pos",
        (LOOPBACK, primary.mariadb_port, DB_USER, password),
    )
    cur.execute("START SLAVE")
    return f"replicating 127.0.0.1:{primary.mariadb_port} from GTID position {position!r}"


def _gtid_binlog_pos(settings: Settings) -> str:
    """The GTID position of the local MariaDB's binlog (``@@gtid_binlog_pos``)."""
    with mariadb_connect(settings) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
        (position,) = cur.fetchone()
    return str(position)


def wait_replicated(replica: Settings, primary: Settings, timeout_s: float = 60.0) -> str:
    """Wait until the replica of ``replica`` has applied everything the primary of ``primary`` has
    written so far (MariaDB ``MASTER_GTID_WAIT`` of the primary's ``gtid_binlog_pos``).

    Raises:
        TimeoutError: not within ``timeout_s`` seconds.
    """
    position = _gtid_binlog_pos(primary)
    with mariadb_connect(replica) as conn, conn.cursor() as cur:
        cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (position, timeout_s))
        (outcome,) = cur.fetchone()
    if outcome != 0:
        raise TimeoutError(
            f"the replica on 127.0.0.1:{replica.mariadb_port} did not reach GTID {position!r} within {timeout_s:.0f} s"
        )
    return f"the replica is at GTID {position!r}"


def stop_mariadb(settings: Settings) -> str:
    """Stop the local MariaDB (SIGTERM: a clean shutdown; SIGKILL after 60 s)."""
    return _stop(_mariadb(settings))


def connector_env(
    settings: Settings,
    *,
    schemas_enable: bool = True,
    snapshot_mode: str = "initial",
    db_password: str = DB_PASSWORD,
    registry_url: str | None = None,
    avro_tables: Sequence[str] | None = None,
    transaction_metadata: bool = True,
    tables: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, str]:
    """Values of the ``${env:...}`` placeholders of the connector files (:data:`CONNECTOR_FILES`),
    for the local chain (``db_password``: the ``debezium`` user's, as :func:`start_mariadb` set it).

    Args:
        registry_url: the Avro connector's schema registry, its Confluent-compatible API (Apicurio's
            ``.../apis/ccompat/v7``); default ``settings.schema_registry_url``, else
            :func:`local_registry`'s. The converter is given the same server's v2 API.
        avro_tables: the Avro connector's ``table.include.list`` (``<database>.<table>``, regular
            expressions); default every table of ``inventory``.
        transaction_metadata: ``provide.transaction.metadata`` (``BEGIN``/``END`` records on
            ``<prefix>.transaction``, a ``transaction`` block in each change event), on by default
            since ``transactions: whole`` is the tables' default.
        tables: connector name -> its ``table.include.list`` (:data:`TABLES_VARIABLES`; ``avro``
            as ``avro_tables``); default every table of ``inventory``.
    """
    registry = registry_url or settings.schema_registry_url or f"http://{LOOPBACK}:{REGISTRY_PORT}/apis/ccompat/v7"
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
        "CDC_REGISTRY_URL": registry.partition("/apis/ccompat/")[0] + "/apis/registry/v2",
        **{
            variable: ",".join(chosen)
            if (chosen := {"avro": avro_tables, **(tables or {})}.get(name))
            else r"inventory\..*"
            for name, variable in TABLES_VARIABLES.items()
        },
        "CDC_TRANSACTION_METADATA": "true" if transaction_metadata else "false",
    }


_WORKER = """\
# Generated by cdclake_dev.chain: Kafka Connect standalone worker of the local chain.
bootstrap.servers={bootstrap}
listeners=http://127.0.0.1:{port}
plugin.path={plugins}
plugin.discovery=service_load
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
    connectors: Sequence[str] = ("json",),
    registry_url: str | None = None,
    avro_tables: Sequence[str] | None = None,
    transaction_metadata: bool = True,
    tables: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """Start Kafka Connect standalone with the Debezium MariaDB connectors ``connectors`` (names of
    :data:`CONNECTOR_FILES`) unless it runs. Their files are on the worker's command line: every
    start registers them again, and each resumes from its offsets in ``<state>/connect/offsets``
    (none: a new initial snapshot of its tables).

    ``offset_flush_interval_ms`` is the worker's ``offset.flush.interval.ms`` (how often it saves
    the connectors' offsets); ``db_password`` reaches the connectors through the worker's
    environment (``${env:CDC_DB_PASSWORD}``), never a file or command line; ``registry_url``,
    ``avro_tables``, ``tables`` and ``transaction_metadata`` fill the connectors' placeholders
    (:func:`connector_env`).

    Raises:
        ValueError: a connector name not in :data:`CONNECTOR_FILES`.
        FileNotFoundError: the connector plugin, or its ServiceLoader manifests, were not set up
            (``make setup``).
        RuntimeError: the worker exited or did not listen within ``timeout_s`` seconds (it is
            stopped; the message carries its output).
    """
    files = _connector_files(connectors)
    plugins = _connect_plugin_path()
    base = _connect_dir(settings)
    worker_process = _connect(settings)
    pid = worker_process.pid
    if pid is not None:
        return f"Kafka Connect already running on 127.0.0.1:{settings.connect_port} (pid {pid})"
    base.mkdir(parents=True, exist_ok=True)
    _ensure_signal_topic(settings)
    worker = _write_worker_config(settings, base, plugins, offset_flush_interval_ms)
    log4j = _write_connect_log4j(base)
    env = dict(os.environ)
    env.update(
        connector_env(
            settings,
            schemas_enable=schemas_enable,
            snapshot_mode=snapshot_mode,
            db_password=db_password,
            registry_url=registry_url,
            avro_tables=avro_tables,
            transaction_metadata=transaction_metadata,
            tables=tables,
        )
    )
    pid = _launch_connect_worker(settings, worker_process, worker, log4j, files, env=env, timeout_s=timeout_s)
    return (
        f"Kafka Connect started on 127.0.0.1:{settings.connect_port} (pid {pid}) with "
        f"{', '.join(f.name for f in files)}, topic prefix {settings.topic_prefix!r}"
    )


def _connector_files(connectors: Sequence[str]) -> list[Path]:
    """The files of the connector names ``connectors`` (:data:`CONNECTOR_FILES`), in that order.

    Raises:
        ValueError: no name, or a name not in :data:`CONNECTOR_FILES`.
    """
    unknown = sorted(set(connectors) - set(CONNECTOR_FILES))
    if unknown or not connectors:
        raise ValueError(f"connectors {list(connectors)}: choose from {sorted(CONNECTOR_FILES)}")
    return [CONNECTOR_FILES[name] for name in connectors]


def _connect_plugin_path() -> Path:
    """The worker's ``plugin.path``, ``.jars/connect-plugins``, checked for the Debezium plugin and
    the plugins' ServiceLoader manifests.

    Raises:
        FileNotFoundError: either is missing (``make setup``).
    """
    plugins = jars_dir("connect-plugins")
    if not (plugins / "debezium-connector-mariadb").is_dir():
        raise FileNotFoundError(f"no Debezium plugin in {plugins}: run `make setup` first")
    if not any((plugins / "apicurio-registry-converter").glob("connect-plugin-path-shim-*.jar")):
        # the worker finds plugins by their ServiceLoader manifests only (plugin.discovery)
        raise FileNotFoundError(f"no ServiceLoader manifests for the plugins in {plugins}: run `make setup` first")
    return plugins


def _ensure_signal_topic(settings: Settings) -> None:
    """Create the connectors' Kafka signal topic ``settings.signal_topic`` unless it exists."""
    from cdclake.io.kafka import KafkaClients, ensure_topic

    # the Kafka signal channel reads partition 0 of a one-partition topic (Debezium docs)
    ensure_topic(KafkaClients.from_bootstrap(settings.kafka_bootstrap), settings.signal_topic, 1)


def _write_worker_config(settings: Settings, base: Path, plugins: Path, flush_ms: int) -> Path:
    """Write the worker's ``worker.properties`` (:data:`_WORKER`) into ``base``; returns the file."""
    worker = base / "worker.properties"
    worker.write_text(
        _WORKER.format(
            bootstrap=settings.kafka_bootstrap,
            port=settings.connect_port,
            plugins=plugins,
            offsets=base / "offsets",
            flush_ms=flush_ms,
        )
    )
    return worker


def _write_connect_log4j(base: Path) -> Path:
    """Write the worker's ``log4j2.yaml`` into ``base`` (its log: ``connect.log``); returns the file."""
    log = base / "connect.log"
    log4j = base / "log4j2.yaml"
    log4j.write_text(
        "Configuration:\n  Appenders:\n    File:\n      name: file\n"
        f'      fileName: "{log}"\n      PatternLayout:\n        pattern: "[%d] %p %m (%c)%n"\n'
        "  Loggers:\n    Root:\n      level: INFO\n      AppenderRef:\n        - ref: file\n"
    )
    return log4j


def _launch_connect_worker(
    settings: Settings,
    worker_process: Daemon,
    worker: Path,
    log4j: Path,
    files: Sequence[Path],
    *,
    env: dict[str, str],
    timeout_s: float,
) -> int:
    """Start ``ConnectStandalone`` with ``worker`` and the connector ``files`` as ``worker_process``;
    returns its pid once the REST API lists the connectors (:func:`_connect_ready`)."""
    return worker_process.start(
        [
            java_executable(),
            "-Xms256m",
            "-Xmx1g",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            kafka_classpath(),
            "org.apache.kafka.connect.cli.ConnectStandalone",
            str(worker),
            *map(str, files),
        ],
        env=env,
        ready=lambda: _connect_ready(settings, files),
        timeout_s=timeout_s,
        poll_s=0.3,
    )


def _connect_api(settings: Settings, path: str, method: str = "GET", body: dict | None = None) -> dict | None:
    """One call of the Connect worker's REST API; its JSON answer (``None``: no content)."""
    import json
    import urllib.request

    request = urllib.request.Request(
        f"http://127.0.0.1:{settings.connect_port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        text = resp.read()
    return json.loads(text) if text else None


def connector_name(path: Path) -> str:
    """The ``name`` of a connector file."""
    import json

    return str(json.loads(path.read_text())["name"])


def _connect_ready(settings: Settings, files: Sequence[Path] = (CONNECTOR_CONFIG,)) -> bool:
    """Whether the worker's REST API lists the connectors of ``files``: the port opens before the
    herder runs, and until then ``POST /connectors`` answers 404."""
    import urllib.error

    if not port_open(LOOPBACK, settings.connect_port):
        return False
    try:
        listed = _connect_api(settings, "/connectors")  # a JSON list of names
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False
    return {connector_name(f) for f in files} <= set(listed or ())


def connector_names(settings: Settings) -> list[str]:
    """The connectors the running Connect worker runs (``GET /connectors``)."""
    return sorted(_connect_api(settings, "/connectors") or [])


def connector_status(settings: Settings, name: str | None = None) -> dict:
    """A connector's status from the Connect REST API (``GET /connectors/<name>/status``); by
    default the one of :data:`CONNECTOR_CONFIG`."""
    name = name or connector_name(CONNECTOR_CONFIG)
    return _connect_api(settings, f"/connectors/{name}/status") or {}


def add_connector(settings: Settings, name: str, source: Settings, *, timeout_s: float = 60.0) -> str:
    """Add a Debezium connector named ``name`` to the running Connect worker of ``settings``
    (``POST /connectors``; a standalone worker forgets it when it stops): the config of
    :data:`CONNECTOR_CONFIG` reading the local MariaDB of ``source`` (its port) under
    ``source.topic_prefix``, with its own client server id and schema history topic, and the
    signal table as its only signal channel. Returns once it streams: its initial snapshot's
    last notification (``Initial Snapshot`` ``COMPLETED`` or ``SKIPPED``) is on
    ``<prefix>.notifications``, so later writes reach it as change events, not snapshot reads.

    Raises:
        RuntimeError: the connector did not stream within ``timeout_s`` seconds (names its status).
    """
    from cdclake.io.kafka import KafkaClients

    prefix = source.topic_prefix
    config = _beside_config(prefix, "184055")
    config["database.port"] = str(source.mariadb_port)
    _connect_api(settings, "/connectors", "POST", {"name": name, "config": config})
    kafka = KafkaClients.from_settings(settings)
    _wait_streaming(settings, name, kafka, f"{prefix}.notifications", timeout_s)
    return f"connector {name!r} streams 127.0.0.1:{source.mariadb_port} into {prefix}.*"


def _beside_config(prefix: str, server_id: str) -> dict[str, str]:
    """The config of :data:`CONNECTOR_CONFIG` for a connector beside the first on the same worker:
    topic prefix ``prefix``, binlog client id ``server_id`` (another than the first connector's),
    its own schema history and notification topics, the signal table as its only signal channel."""
    import json

    config: dict[str, str] = json.loads(CONNECTOR_CONFIG.read_text())["config"]
    config.update(
        {
            "database.server.id": server_id,
            "topic.prefix": prefix,
            "schema.history.internal.kafka.topic": f"{prefix}.schema-history",
            "signal.enabled.channels": "source",
            "notification.sink.topic.name": f"{prefix}.notifications",
            "topic.creation.transaction.include": rf"{prefix}\.transaction",
        }
    )
    return config


def _wait_streaming(settings: Settings, name: str, kafka: KafkaClients, topic: str, timeout_s: float) -> None:
    """Wait until connector ``name`` streams: its notification topic ``topic`` (JSON, or Avro read
    through ``kafka``'s schema registry) holds its initial snapshot's last notification
    (``Initial Snapshot`` ``COMPLETED`` or ``SKIPPED``).

    Raises:
        RuntimeError: a task failed, or not within ``timeout_s`` seconds (names its status).
    """
    from cdclake.pipeline.snapshot import read_notifications

    deadline = time.monotonic() + timeout_s
    status: dict = {}
    while time.monotonic() < deadline:
        status = connector_status(settings, name)
        if any(t["state"] == "FAILED" for t in status.get("tasks") or []):
            break
        if any(
            n.aggregate_type == "Initial Snapshot" and n.type in ("COMPLETED", "SKIPPED")
            for n in read_notifications(kafka, topic)
        ):
            return
        time.sleep(0.5)
    raise RuntimeError(f"connector {name!r} did not stream within {timeout_s:.0f} s: {status}")


REGISTRY_PORT = 18081
"""The loopback port of the local chain's schema registry (:func:`local_registry`) unless
``CDCLAKE_SCHEMA_REGISTRY_URL`` names another."""


def local_registry(settings: Settings) -> SchemaRegistry:
    """The local chain's schema registry: Apicurio Registry under ``<state>/registry`` on
    127.0.0.1, its schemas in an H2 file there (the Avro records already in the local broker keep
    their ids across a stop and start), on the port of ``settings.schema_registry_url`` when it is
    set (``CDCLAKE_SCHEMA_REGISTRY_URL``), else :data:`REGISTRY_PORT`."""
    from urllib.parse import urlsplit

    from cdclake_dev.parts.registry import SchemaRegistry

    port = urlsplit(settings.schema_registry_url).port if settings.schema_registry_url else None
    return SchemaRegistry(settings.state_dir / "registry", port or REGISTRY_PORT, persistent=True)


AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"
"""Apicurio's Kafka Connect Avro converter (the plugin folder
``.jars/connect-plugins/apicurio-registry-converter``)."""
AVRO_SERVER_ID = "184056"
"""The binlog client id of :func:`add_avro_connector`'s connector (the JSON connector's is
``184054``, :func:`add_connector`'s ``184055``)."""


def avro_converter_config(registry_url: str) -> dict[str, str]:
    """Connector settings that make keys and values Avro in the Confluent wire format (magic byte
    0, the 4-byte content id, the Avro datum; no id headers) through :data:`AVRO_CONVERTER`, which
    registers each new writer schema in the registry (``auto-register``) under
    ``<topic>-key``/``<topic>-value``.

    Args:
        registry_url: the registry's Confluent-compatible API, Apicurio's
            ``http://<host>:<port>/apis/ccompat/v7``; the converter is given the same server's v2
            API (``.../apis/registry/v2``), its own.

    Raises:
        ValueError: ``registry_url`` is not an Apicurio ``ccompat`` URL.
    """
    base, found, _ = registry_url.partition("/apis/ccompat/")
    if not found:
        raise ValueError(f"{registry_url!r} is not an Apicurio ccompat URL (http://<host>:<port>/apis/ccompat/v7)")
    converter = {
        "apicurio.registry.url": f"{base}/apis/registry/v2",
        "apicurio.registry.auto-register": "true",
        "apicurio.registry.find-latest": "true",
        "apicurio.registry.as-confluent": "true",
        "apicurio.registry.use-id": "contentId",
        "apicurio.registry.headers.enabled": "false",
    }
    config = {}
    for side in ("key", "value"):
        config[f"{side}.converter"] = AVRO_CONVERTER
        config.update({f"{side}.converter.{k}": v for k, v in converter.items()})
    return config


def add_avro_connector(
    settings: Settings,
    registry_url: str,
    tables: Sequence[str],
    *,
    name: str = "avro-connector",
    topic_prefix: str | None = None,
    overrides: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
) -> str:
    """:func:`add_table_connector` writing Avro (:func:`avro_converter_config`) through the
    registry of ``registry_url`` (Apicurio's ``.../apis/ccompat/v7``), under ``topic_prefix``
    (default ``<settings.topic_prefix>_avro``), with the client server id :data:`AVRO_SERVER_ID`
    unless ``overrides`` sets another. Its schema-change topic (``<topic_prefix>``) and
    notifications are Avro too; it streams once its initial snapshot's last notification, decoded
    through the registry, is on ``<topic_prefix>.notifications``.

    Raises:
        ValueError: no table, or ``registry_url`` is not an Apicurio ccompat URL.
        RuntimeError: the connector did not stream within ``timeout_s`` seconds (names its status).
    """
    return add_table_connector(
        settings,
        tables,
        name=name,
        topic_prefix=topic_prefix or f"{settings.topic_prefix}_avro",
        overrides={"database.server.id": AVRO_SERVER_ID, **(overrides or {})},
        registry_url=registry_url,
        timeout_s=timeout_s,
    )


def add_table_connector(
    settings: Settings,
    tables: Sequence[str],
    *,
    name: str,
    topic_prefix: str,
    overrides: Mapping[str, str],
    registry_url: str | None = None,
    timeout_s: float = 60.0,
) -> str:
    """Add another Debezium connector to the running Connect worker of ``settings``, on the same
    MariaDB as the first: the config of :data:`CONNECTOR_CONFIG` for ``tables`` only
    (``table.include.list``), under ``topic_prefix``, with its own schema history topic and
    notification topic and the signal table as its only signal channel; JSON as the first writes,
    or with ``registry_url`` Avro (:func:`avro_converter_config`). One source table then feeds a
    topic ``<prefix>.inventory.<table>`` per connector. A standalone worker forgets the connector
    when it stops; :func:`remove_connector` removes it before.

    Returns once it streams (its initial snapshot's last notification is on
    ``<topic_prefix>.notifications``): the snapshot's reads of ``tables`` are on their topics,
    later writes reach it as change events.

    Args:
        settings: the chain's settings (Connect port, broker).
        tables: ``<database>.<table>`` names, e.g. ``["inventory.orders"]``.
        name: the connector's name.
        topic_prefix: its ``topic.prefix``.
        overrides: connector settings set last; ``database.server.id`` (a binlog client id no
            other connector of the worker uses) is required.
        registry_url: the schema registry's Confluent-compatible API; ``None``: JSON.
        timeout_s: how long to wait for it to stream.

    Raises:
        ValueError: no table, no ``database.server.id`` in ``overrides``, or ``registry_url`` is
            not an Apicurio ccompat URL.
        RuntimeError: the connector did not stream within ``timeout_s`` seconds (names its status).
    """
    from cdclake.io.kafka import KafkaClients
    from cdclake.io.registry import SchemaRegistry

    if not tables:
        raise ValueError(f"connector {name!r} needs at least one table")
    if "database.server.id" not in overrides:
        raise ValueError(f"connector {name!r} needs a database.server.id of its own")
    config = _beside_config(topic_prefix, overrides["database.server.id"])
    registry = None
    if registry_url is not None:
        # JsonConverter settings
        for key in (
            "key.converter.schemas.enable",
            "value.converter.schemas.enable",
            "value.converter.replace.null.with.default",
        ):
            config.pop(key)
        config.update(avro_converter_config(registry_url))
        registry = SchemaRegistry({"url": registry_url}, origin=f"connector {name!r}")
    config.update({"table.include.list": ",".join(tables), **overrides})
    _connect_api(settings, "/connectors", "POST", {"name": name, "config": config})
    kafka = KafkaClients.from_bootstrap(settings.kafka_bootstrap, registry)
    _wait_streaming(settings, name, kafka, f"{topic_prefix}.notifications", timeout_s)
    written = f"as Avro into {topic_prefix}.* (registry {registry_url})" if registry_url else f"into {topic_prefix}.*"
    return f"connector {name!r} streams {', '.join(tables)} {written}"


def remove_connector(settings: Settings, name: str) -> str:
    """Remove connector ``name`` from the running Connect worker (``DELETE /connectors/<name>``),
    if it is there."""
    import urllib.error

    try:
        _connect_api(settings, f"/connectors/{name}", "DELETE")
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
        return f"connector {name!r} not there"
    return f"connector {name!r} removed"


def connect_offsets_file(settings: Settings) -> Path:
    """The Connect worker's offsets file (deleting it while Connect is stopped makes the connector
    start over: a new initial snapshot)."""
    return _connect_dir(settings) / "offsets"


def stop_connect(settings: Settings, *, hard: bool = False) -> str:
    """Stop the Connect worker; ``hard=True`` kills it with SIGKILL (a crash)."""
    return _stop(_connect(settings), hard=hard)
