"""The production topology on one machine: every part a deployment runs, started for real.

``make demo-production`` (``cdclake production demo``, :mod:`cdclake_dev.production_demo`) and
``tests/production/test_topology.py`` start it; ``docker-compose.yaml`` describes the same services
(:data:`SERVICES`, checked by ``tests/test_compose.py``):

=====================  ==============================================================  ========
service                what runs (launcher)                                            port
=====================  ==============================================================  ========
``postgres``           PostgreSQL: Airflow's metadata DB and the catalog's database    5432
                       (:class:`~cdclake_dev.parts.postgres.Postgres`)
``s3``                 the S3 API over a folder, s3proxy                               9000
                       (:class:`~cdclake_dev.parts.s3.S3Proxy`)
``iceberg-rest``       Iceberg REST catalog over the JDBC catalog in ``postgres``,     8181
                       warehouse ``s3://warehouse/``
                       (:class:`~cdclake_dev.parts.rest_catalog.RestCatalogServer`)
``kafka``              KRaft broker: SCRAM-SHA-512 (SASL_PLAINTEXT) for the pipeline   9094
                       on 9094, PLAINTEXT for Kafka Connect on 9092
                       (:func:`cdclake_dev.stack.start_broker`)
``mariadb``            the source database (binlog ROW/FULL)                           3306
``connect``            Kafka Connect + Debezium MariaDB connector                      8083
``schema-registry``    Apicurio Registry (Confluent-compatible API), the schemas of    8085
                       Avro connectors; no authentication, on 127.0.0.1 only
                       (:class:`~cdclake_dev.parts.registry.SchemaRegistry`)
``spark-master``       Spark standalone master and a worker                            7077
                       (:class:`~cdclake_dev.parts.spark_cluster.SparkStandalone`)
``spark-connect``      the shared engine: Spark Connect server on that master, token   15002
                       authentication, no catalog (each session gets its own)
``airflow-*``          api-server, scheduler, dag-processor, triggerer; LocalExecutor  8080
=====================  ==============================================================  ========

On this machine each port is the one above plus :data:`PORT_OFFSET` (the tests use free ports).
Every credential is generated at the first start into ``<state>/secrets.json`` (mode 0600) and
reaches Airflow as connections of its local-filesystem secrets backend
(``<state>/airflow/connections.json``, mode 0600; :meth:`Topology.connections`); Airflow's own
metadata DB URL is read with ``sql_alchemy_conn_cmd`` from a 0600 file. The DAGs, the
``CDCLAKE_*`` variables and every command line hold none.
"""

from __future__ import annotations

import json
import os
import secrets as _secrets
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cdclake.settings import APPLY_POOL, APPLY_POOL_DESCRIPTION, PROJECT_ROOT, ConnectionIds, Settings
from cdclake_dev import chain, engine, stack
from cdclake_dev.airflow_env import airflow_env
from cdclake_dev.parts.airflow import AirflowProcesses
from cdclake_dev.parts.postgres import Postgres
from cdclake_dev.parts.registry import SchemaRegistry
from cdclake_dev.parts.rest_catalog import RestCatalogServer
from cdclake_dev.parts.s3 import S3Proxy
from cdclake_dev.parts.spark_cluster import SparkStandalone
from cdclake_dev.process import free_port
from cdclake_dev.system import write_private

TABLES_CONFIG = PROJECT_ROOT / "include" / "stack" / "production" / "tables.yaml"
"""The topology's table config (docker-compose.yaml mounts the same file)."""

PORT_OFFSET = 20000
"""Local port = service port + this (``make demo-production``), so that the topology runs beside
the embedded stack and services a machine may already run (PostgreSQL on 5432, ...)."""

BUCKET = "warehouse"
WAREHOUSE = f"s3://{BUCKET}/"
REGION = "us-east-1"
KAFKA_USER = "cdclake"
SASL_MECHANISM = "SCRAM-SHA-512"
SPARK_DEFAULTS = PROJECT_ROOT / "include" / "stack" / "production" / "spark-conf" / "spark-defaults.conf"
"""Spark settings of every application on the cluster (cores, executor memory, event logs);
docker-compose.yaml's ``SPARK_CONF_DIR`` is its folder."""


@dataclass(frozen=True)
class Service:
    """One service of the topology, as docker-compose.yaml names it."""

    name: str
    port: int
    """The port it serves in docker-compose.yaml (on this machine: plus the offset)."""


SERVICES: tuple[Service, ...] = (
    Service("postgres", 5432),
    Service("s3", 9000),
    Service("iceberg-rest", 8181),
    Service("kafka", 9094),
    Service("mariadb", 3306),
    Service("connect", 8083),
    Service("schema-registry", 8085),
    Service("spark-master", 7077),
    Service("spark-connect", 15002),
    Service("airflow-api-server", 8080),
)
"""The services with a port; the Airflow scheduler, dag-processor and triggerer have none."""


@dataclass(frozen=True)
class Ports:
    """The topology's ports on 127.0.0.1."""

    postgres: int
    s3: int
    rest_catalog: int
    kafka: int
    """PLAINTEXT listener (Kafka Connect, the broker itself); the controller listens on +1."""
    kafka_sasl: int
    mariadb: int
    kafka_connect: int
    schema_registry: int
    spark_master: int
    spark_connect: int
    airflow_api: int

    @classmethod
    def with_offset(cls, offset: int = PORT_OFFSET) -> Ports:
        """Each :data:`SERVICES` port plus ``offset``."""
        by = {s.name: s.port + offset for s in SERVICES}
        return cls(
            postgres=by["postgres"],
            s3=by["s3"],
            rest_catalog=by["iceberg-rest"],
            kafka=9092 + offset,
            kafka_sasl=by["kafka"],
            mariadb=by["mariadb"],
            kafka_connect=by["connect"],
            schema_registry=by["schema-registry"],
            spark_master=by["spark-master"],
            spark_connect=by["spark-connect"],
            airflow_api=by["airflow-api-server"],
        )

    @classmethod
    def free(cls) -> Ports:
        """Free loopback ports (:func:`~cdclake_dev.process.free_port`; Kafka's listener and its
        controller's two in a row), for a topology beside others (tests, the soak)."""
        return cls(
            postgres=free_port(),
            s3=free_port(),
            rest_catalog=free_port(),
            kafka=free_port(2),
            kafka_sasl=free_port(),
            mariadb=free_port(),
            kafka_connect=free_port(),
            schema_registry=free_port(),
            spark_master=free_port(),
            spark_connect=free_port(),
            airflow_api=free_port(),
        )


_SECRET_NAMES = ("airflow_db", "iceberg_db", "s3_access_key", "s3_secret_key", "kafka", "source_db")
"""The generated credentials; the Spark Connect token is the engine's (:func:`cdclake_dev.engine.engine_token`)."""


class Topology:
    """The production topology under ``state_dir`` on ``ports`` (see the module docstring).

    ``state_dir`` must be searchable by the ``postgres`` user when running as root (PostgreSQL
    runs as that user): a folder under ``/tmp`` or the project folder is.
    """

    def __init__(self, state_dir: Path, ports: Ports | None = None, *, tables_config: Path = TABLES_CONFIG) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.ports = ports or Ports.with_offset()
        self.tables_config = tables_config
        self.airflow: AirflowProcesses | None = None

    # --- secrets and settings ---------------------------------------------------------------

    @property
    def secrets(self) -> dict[str, str]:
        """The topology's credentials, generated at the first call (``<state>/secrets.json``,
        mode 0600)."""
        path = self.state_dir / "secrets.json"
        values: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
        missing = [name for name in _SECRET_NAMES if name not in values]
        if missing:  # the first start, or a state made by an older version
            for name in missing:
                values[name] = _secrets.token_urlsafe(24)
                if name == "s3_access_key":
                    values[name] = "AK" + _secrets.token_hex(9).upper()
            write_private(path, json.dumps(values, indent=2))
        return values

    def environ(self) -> dict[str, str]:
        """The ``CDCLAKE_*`` variables of the topology (no credential among them)."""
        p = self.ports
        return {
            "CDCLAKE_STATE_DIR": str(self.state_dir),
            # the pipeline's clients use the SASL listener through the kafka_default connection;
            # this is where the broker answers for Kafka Connect and the launchers
            "CDCLAKE_KAFKA_BOOTSTRAP": f"127.0.0.1:{p.kafka}",
            "CDCLAKE_CATALOG_NAME": "lake",
            "CDCLAKE_CATALOG_TYPE": "rest",
            "CDCLAKE_CATALOG_URI": f"http://127.0.0.1:{p.rest_catalog}",
            "CDCLAKE_WAREHOUSE": WAREHOUSE,
            "CDCLAKE_TABLES_CONFIG": str(self.tables_config),
            "CDCLAKE_SPARK_MASTER": f"spark://127.0.0.1:{p.spark_master}",
            "CDCLAKE_MARIADB_PORT": str(p.mariadb),
            "CDCLAKE_CONNECT_PORT": str(p.kafka_connect),
            "CDCLAKE_SPARK_CONNECT_PORT": str(p.spark_connect),
            "CDCLAKE_ENGINE": "connect",
            "CDCLAKE_ENGINE_MEMORY": "2g",
            "CDCLAKE_APPLY_POOL_SLOTS": "2",
        }

    @property
    def registry_url(self) -> str:
        """The schema registry's Confluent-compatible API (the ``schema_registry`` connection's host)."""
        return self._registry().ccompat_url

    @property
    def settings(self) -> Settings:
        """The topology's settings without credentials (what a task starts from)."""
        return Settings.from_env(self.environ())

    def catalog_properties(self) -> dict[str, Any]:
        """The ``iceberg_catalog`` connection's extra: the REST catalog and its S3 warehouse."""
        s = self.secrets
        return {
            "type": "rest",
            "uri": f"http://127.0.0.1:{self.ports.rest_catalog}",
            "warehouse": WAREHOUSE,
            "s3.endpoint": f"http://127.0.0.1:{self.ports.s3}",
            "s3.access-key-id": s["s3_access_key"],
            "s3.secret-access-key": s["s3_secret_key"],
            "s3.path-style-access": True,
            "client.region": REGION,
        }

    def task_settings(self) -> Settings:
        """The settings a task runs with (:attr:`cdclake_airflow.hooks.CdcLakeHook.settings`)."""
        return self.settings.with_catalog(self.catalog_properties())

    def kafka_config(self) -> dict[str, Any]:
        """The ``kafka_default`` connection's extra: SCRAM over the SASL listener."""
        return {
            "bootstrap.servers": f"127.0.0.1:{self.ports.kafka_sasl}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": SASL_MECHANISM,
            "sasl.username": KAFKA_USER,
            "sasl.password": self.secrets["kafka"],
        }

    def connections(self) -> dict[str, dict[str, Any]]:
        """Every Airflow connection of the DAGs (:class:`~cdclake.settings.ConnectionIds`), as
        Airflow's local-filesystem secrets backend reads them."""
        p = self.ports
        return {
            ConnectionIds.KAFKA: {"conn_type": "kafka", "extra": self.kafka_config()},
            ConnectionIds.KAFKA_NOTIFICATIONS: {
                "conn_type": "kafka",
                "extra": {
                    **self.kafka_config(),
                    "group.id": "cdclake-bootstrap",
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                },
            },
            ConnectionIds.ICEBERG_CATALOG: {"conn_type": "generic", "extra": self.catalog_properties()},
            ConnectionIds.SPARK_CONNECT: {
                "conn_type": "spark_connect",
                "host": "localhost",
                "port": p.spark_connect,
                "password": engine.engine_token(self.settings),
            },
            ConnectionIds.SPARK: {"conn_type": "spark", "host": f"spark://127.0.0.1:{p.spark_master}"},
            ConnectionIds.SOURCE_DB: {
                "conn_type": "mysql",
                "host": "127.0.0.1",
                "port": p.mariadb,
                "login": chain.DB_USER,
                "password": self.secrets["source_db"],
            },
            ConnectionIds.SCHEMA_REGISTRY: {"conn_type": "http", "host": self.registry_url},
        }

    # --- files ------------------------------------------------------------------------------

    @property
    def event_log_dir(self) -> Path:
        """Spark's event logs of the Connect server and of every ``spark-submit`` job."""
        return self.state_dir / "spark-events"

    @property
    def spark_conf_dir(self) -> Path:
        """``SPARK_CONF_DIR`` of the Airflow processes: ``spark-defaults.conf`` of the
        ``spark-submit`` jobs (event logs, cores, loopback driver address)."""
        return self.state_dir / "spark-conf"

    def cluster_conf(self) -> dict[str, str]:
        """Spark settings of every application on the cluster (no credential):
        :data:`SPARK_DEFAULTS`, plus this machine's driver address and event log folder."""
        conf = {}
        for line in SPARK_DEFAULTS.read_text().splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                key, _, value = line.strip().partition(" ")
                conf[key] = value.strip()
        conf.update(
            {
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.eventLog.dir": self.event_log_dir.as_uri(),
            }
        )
        return conf

    def _write_files(self) -> None:
        self.event_log_dir.mkdir(parents=True, exist_ok=True)
        self.spark_conf_dir.mkdir(parents=True, exist_ok=True)
        (self.spark_conf_dir / "spark-defaults.conf").write_text(
            "# Generated by cdclake_dev.production: every spark-submit job of the topology\n"
            + "".join(f"{k} {v}\n" for k, v in sorted(self.cluster_conf().items()))
        )
        home = self.state_dir / "airflow"
        home.mkdir(parents=True, exist_ok=True)
        write_private(home / "connections.json", json.dumps(self.connections(), indent=2))

    def airflow_environ(self) -> dict[str, str]:
        """The Airflow processes' environment: the topology's ``CDCLAKE_*``, PostgreSQL metadata
        DB (``sql_alchemy_conn_cmd``), the local-filesystem secrets backend, LocalExecutor."""
        home = self.state_dir / "airflow"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("CDCLAKE_", "AIRFLOW"))}
        env = airflow_env(self.settings, base)
        for key in [k for k in env if k.startswith("AIRFLOW_CONN_")]:
            del env[key]  # the secrets backend holds them
        del env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        env.update(self.environ())
        env.update(
            {
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD": f"cat {home / 'metadata-db.url'}",
                "AIRFLOW__SECRETS__BACKEND": "airflow.secrets.local_filesystem.LocalFilesystemBackend",
                "AIRFLOW__SECRETS__BACKEND_KWARGS": json.dumps(
                    {"connections_file_path": str(home / "connections.json")}
                ),
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": "8",
                # the workload unpauses each DAG when its tables can be run (run_workload)
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
                "SPARK_CONF_DIR": str(self.spark_conf_dir),
            }
        )
        return env

    # --- the parts ----------------------------------------------------------------------------

    def _postgres(self) -> Postgres:
        return Postgres(self.state_dir / "postgres", self.ports.postgres)

    def _s3(self) -> S3Proxy:
        s = self.secrets
        return S3Proxy(self.state_dir / "s3", self.ports.s3, s["s3_access_key"], s["s3_secret_key"])

    def _rest(self, pg: Postgres) -> RestCatalogServer:
        s = self.secrets
        return RestCatalogServer(
            self.state_dir / "iceberg-rest",
            self.ports.rest_catalog,
            jdbc_uri=pg.jdbc_uri("iceberg"),
            jdbc_user="iceberg",
            jdbc_password=s["iceberg_db"],
            warehouse=WAREHOUSE,
            s3_endpoint=f"http://127.0.0.1:{self.ports.s3}",
            s3_access_key=s["s3_access_key"],
            s3_secret_key=s["s3_secret_key"],
            region=REGION,
        )

    def _spark(self) -> SparkStandalone:
        return SparkStandalone(self.state_dir / "spark", self.ports.spark_master, worker_cores=2, worker_memory="2g")

    def _registry(self) -> SchemaRegistry:
        # H2 in a file: the jar of .jars/registry has no other database driver (docker-compose's
        # image keeps the schemas in PostgreSQL)
        return SchemaRegistry(self.state_dir / "registry", self.ports.schema_registry, persistent=True)

    def _sasl(self) -> stack.SaslListener:
        return stack.SaslListener(self.ports.kafka_sasl, {KAFKA_USER: self.secrets["kafka"]}, SASL_MECHANISM)

    def start_parts(self) -> list[str]:
        """Start every part but Kafka Connect and Airflow (idempotent): PostgreSQL with the
        ``airflow`` and ``iceberg`` databases, s3proxy with the bucket, the REST catalog, Kafka,
        MariaDB, the schema registry, the Spark master and worker, the Connect server. Returns one
        line per part."""
        self._write_files()
        s = self.secrets
        out = []
        pg = self._postgres()
        pg.start()
        airflow_url = pg.ensure_database("airflow", "airflow", s["airflow_db"])
        write_private(self.state_dir / "airflow" / "metadata-db.url", airflow_url)
        pg.ensure_database("iceberg", "iceberg", s["iceberg_db"])
        out.append(f"PostgreSQL on 127.0.0.1:{self.ports.postgres} (databases airflow, iceberg)")
        s3 = self._s3()
        s3.start()
        s3.ensure_bucket(BUCKET)
        out.append(f"S3 (s3proxy) on {s3.endpoint}, bucket {BUCKET}")
        rest = self._rest(pg)
        rest.start()
        out.append(f"Iceberg REST catalog on {rest.uri} (JDBC catalog in PostgreSQL, warehouse {WAREHOUSE})")
        out.append(stack.start_broker(self.settings, sasl=self._sasl()))
        out.append(chain.start_mariadb(self.settings, cdc_password=s["source_db"]))
        registry = self._registry()
        registry.start()
        out.append(f"Apicurio Registry on {registry.url} (Confluent-compatible API {registry.ccompat_url})")
        spark = self._spark()
        spark.start()
        out.append(f"Spark master {spark.master_url} with a worker ({spark.worker_cores} cores)")
        out.append(engine.start_engine(self.settings, register_catalog=False, extra_conf=self.cluster_conf()))
        return out

    def start_connector(self) -> str:
        """Start Kafka Connect with the Debezium connector (its initial snapshot begins)."""
        return chain.start_connect(self.settings, offset_flush_interval_ms=1000, db_password=self.secrets["source_db"])

    def start_airflow(self, timeout_s: float = 300.0) -> AirflowProcesses:
        """Migrate the metadata DB, set the pool ``cdc_apply``, start the four processes."""
        self._write_files()
        airflow = AirflowProcesses(
            self.airflow_environ(), self.state_dir / "airflow", self.ports.airflow_api, cwd=PROJECT_ROOT
        )
        airflow.migrate(pools={APPLY_POOL: (self.settings.apply_pool_slots, APPLY_POOL_DESCRIPTION)})
        airflow.start(timeout_s=timeout_s)
        self.airflow = airflow
        return airflow

    def stop(self) -> list[str]:
        """Stop every part this topology started (Airflow first, PostgreSQL last)."""
        out = []
        if self.airflow is not None:
            self.airflow.stop()
            self.airflow = None
            out.append("Airflow stopped")
        out.append(chain.stop_connect(self.settings))
        out.append(engine.stop_engine(self.settings))
        for part in (self._spark(), self._registry(), self._rest(self._postgres()), self._s3()):
            part.stop()
            out.append(f"{type(part).__name__} stopped")
        out.append(chain.stop_mariadb(self.settings))
        out.append(stack.stop_broker(self.settings))
        self._postgres().stop()
        out.append("PostgreSQL stopped")
        return out

    def describe(self) -> dict[str, Any]:
        """Where each part answers (no credential)."""
        return {"state_dir": str(self.state_dir), "ports": asdict(self.ports), "settings": self.environ()}
