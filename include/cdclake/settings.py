"""Where the local stack lives and how every component reaches it.

One frozen model, read from ``CDCLAKE_*`` environment variables, shared by the CLI, the DAGs, the
Spark job and the tests, so that Airflow, Spark and pyiceberg always point at the same Kafka
broker and the same Iceberg catalog.

Defaults (the embedded stack) keep everything under ``<project>/.stack``:

===============================  ===============================================  =========================
variable                         meaning                                          default
===============================  ===============================================  =========================
``CDCLAKE_STATE_DIR``            root of the local stack's data                   ``<project>/.stack``
``CDCLAKE_KAFKA_BOOTSTRAP``      Kafka ``bootstrap.servers``                      ``127.0.0.1:19092``
``CDCLAKE_CATALOG_NAME``         Iceberg catalog name (Spark and pyiceberg)       ``lake``
``CDCLAKE_CATALOG_TYPE``         ``sql`` (JDBC catalog database) or ``rest``         ``sql``
``CDCLAKE_CATALOG_URI``          ``sql``: SQLAlchemy URI of the catalog database;   ``<state>/iceberg/catalog.db``
                                 ``rest``: the REST catalog's base URL
``CDCLAKE_WAREHOUSE``            warehouse location (URI: ``file://``, ``s3://``)  ``<state>/iceberg/warehouse``
``CDCLAKE_TABLES_CONFIG``        table config file                                ``include/tables.yaml``
``CDCLAKE_DISCOVERY_REGISTRY``   the discovered tables (JSON; written by           ``<state>/discovery/tables.json``
                                 ``cdc_discovery``, read by the DAG files)
``CDCLAKE_SPARK_MASTER``         Spark master for the embedded stack              ``local[2]``
``CDCLAKE_MARIADB_PORT``         loopback port of the local MariaDB               ``13306``
``CDCLAKE_CONNECT_PORT``         REST port of the local Kafka Connect worker      ``18083``
``CDCLAKE_TOPIC_PREFIX``         Debezium ``topic.prefix`` of the local chain     ``mariadb``
``CDCLAKE_SIGNAL_CHANNEL``       bootstrap signals: ``source`` table or ``kafka``  ``source``
``CDCLAKE_SIGNAL_TABLE``         the connector's ``signal.data.collection``       ``inventory.debezium_signal``
``CDCLAKE_ENGINE``               the apply engine: ``connect`` or ``submit``       ``connect``
``CDCLAKE_SPARK_CONNECT_PORT``   loopback port of the local Spark Connect server  ``15002``
``CDCLAKE_ENGINE_MEMORY``        the local Spark Connect server's heap            ``4g``
``CDCLAKE_APPLY_POOL_SLOTS``     applies at once (Airflow pool ``cdc_apply``)      ``2``
``CDCLAKE_RECONCILE_TASKS``      ``cdc_reconcile`` tasks at once (each waits for   ``2``
                                 its table's applies: keep Airflow's parallelism
                                 above this plus the apply pool's slots)
``CDCLAKE_GROUP_COMMIT``         how a table group is published: ``multi_table``  ``multi_table``
                                 (one catalog commit moves ``main`` of every
                                 member) or ``pointer`` (for a REST server
                                 without ``transactions/commit``)
``CDCLAKE_SPARK_LOG_LEVEL``      Spark's log level (``spark.log.level``): INFO     ``WARN``
                                 to see Spark's own chatter in task logs
``CDCLAKE_APPLY_PAUSE_AT``       debugging: pause the apply job at a commit point  unset
``CDCLAKE_SCHEMA_REGISTRY_URL``  the schema registry of ``value_format: avro``    unset
                                 topics (Confluent REST API base URL), when no
                                 Airflow connection ``schema_registry`` exists
``CDCLAKE_CONNECT_URL``          Kafka Connect's REST API, whose Debezium          unset
                                 connectors ``cdclake status`` and the freshness
                                 check watch, when no Airflow connection
                                 ``kafka_connect`` exists (unset: not watched)
===============================  ===============================================  =========================

The Airflow connection ids the DAGs use are constants here (:class:`ConnectionIds`); their
contents (hosts, credentials) are Airflow's, resolved when a task runs. Credentials never come
from these variables: a deployment's catalog credentials (JDBC password, S3 keys, REST token) are
the Airflow connection ``iceberg_catalog``, merged in at task run time with
:meth:`Settings.with_catalog`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""The project folder (``include/cdclake/settings.py`` is two levels below it)."""

_ENV_PREFIX = "CDCLAKE_"
_KNOWN = {
    "STATE_DIR",
    "KAFKA_BOOTSTRAP",
    "CATALOG_NAME",
    "CATALOG_TYPE",
    "CATALOG_URI",
    "WAREHOUSE",
    "TABLES_CONFIG",
    "SPARK_MASTER",
    "MARIADB_PORT",
    "CONNECT_PORT",
    "TOPIC_PREFIX",
    "SIGNAL_CHANNEL",
    "SIGNAL_TABLE",
    "ENGINE",
    "SPARK_CONNECT_PORT",
    "ENGINE_MEMORY",
    "SPARK_LOG_LEVEL",
    "APPLY_POOL_SLOTS",
    "RECONCILE_TASKS",
    "GROUP_COMMIT",
    "APPLY_PAUSE_AT",  # read by the apply job: cdclake.spark.commit.PAUSE_ENV (debugging)
    "SCHEMA_REGISTRY_URL",
    "DISCOVERY_REGISTRY",
    "CONNECT_URL",
}


class ConnectionIds:
    """Airflow connection ids of the DAGs (the local stack defines them in
    :mod:`cdclake_dev.airflow_env`; a deployment creates them in Airflow)."""

    SPARK = "spark_default"
    """type ``spark``: the Spark master of the ``submit`` engine (without it the provider falls
    back to ``--master yarn``)."""
    SPARK_CONNECT = "spark_connect_default"
    """type ``spark_connect``: the Spark Connect server of the ``connect`` engine (host, port,
    token as the password, ``use_ssl`` in the extra), as the Spark provider's
    ``SparkConnectHook`` reads it."""
    KAFKA = "kafka_default"
    """type ``kafka``: the librdkafka client config of the cluster holding the Debezium topics."""
    KAFKA_NOTIFICATIONS = "kafka_notifications"
    """type ``kafka``: the same cluster, for the deferrable wait on Debezium's notification topic."""
    SOURCE_DB = "cdc_source_db"
    """type ``mysql``: the source database, where snapshot signals are inserted."""
    ICEBERG_CATALOG = "iceberg_catalog"
    """type ``generic``, optional: its ``extra`` is the Iceberg catalog's properties in Iceberg's
    own names (``type``, ``uri``, ``warehouse``, ``jdbc.user``, ``jdbc.password``, ``token``,
    ``s3.endpoint``, ``s3.access-key-id``, ``s3.secret-access-key``, ``s3.path-style-access``,
    ``client.region``, ...), merged over ``CDCLAKE_CATALOG_*`` when a task runs
    (:meth:`Settings.with_catalog`). Without it the catalog is the environment's (the embedded
    default, which has no credentials)."""
    SCHEMA_REGISTRY = "schema_registry"
    """type ``http`` or ``generic``, optional: the Confluent-compatible schema registry of
    ``value_format: avro`` topics (:mod:`cdclake.io.registry`). ``host`` is the registry's REST API
    base URL (Apicurio: ``http://<host>:<port>/apis/ccompat/v7``), ``login``/``password`` its basic
    auth; ``extra`` holds further confluent-kafka ``SchemaRegistryClient`` keys as that client names
    them (``ssl.ca.location``, ``timeout``, ``max.retries``; a bearer token:
    ``bearer.auth.credentials.source: STATIC_TOKEN``, ``bearer.auth.token``,
    ``bearer.auth.logical.cluster``). Without it the registry is ``CDCLAKE_SCHEMA_REGISTRY_URL``'s."""
    KAFKA_CONNECT = "kafka_connect"
    """type ``http``, optional: the REST API of the Kafka Connect cluster running the Debezium
    connectors (:mod:`cdclake.io.connect`): ``host`` (a whole base URL, or a host name with
    ``port`` and ``schema`` ``http``/``https``), ``login``/``password`` its basic auth; ``extra``:
    ``verify`` (``false``, or a CA bundle path), ``cert``/``key`` (a client certificate and its key,
    paths), ``timeout`` (seconds). Without it Connect is ``CDCLAKE_CONNECT_URL``'s; with neither,
    no connector is watched."""


APPLY_POOL_DESCRIPTION = "table DAGs' apply tasks: how many run at once on the engine"
APPLY_POOL = "cdc_apply"
"""The Airflow pool of every table's ``apply`` task: its slots are the applies the engine runs at
once (``CDCLAKE_APPLY_POOL_SLOTS`` on the local stack; a deployment sizes it to its engine)."""

APPLY_PRIORITY_WEIGHT = 100
"""The ``priority_weight`` of every ``apply`` task: above the maintenance DAG's tasks (weight 1),
which share :data:`APPLY_POOL`, so that a free slot goes to a table's apply before the next
table's compaction (the 60-minute soak saw a maintenance run's 20 tasks queue ahead of every
table's apply; bench/HISTORY.md, "Soak under faults")."""


class Settings(BaseModel):
    """Locations of the stack's components. Immutable; build with :meth:`from_env`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    state_dir: Path
    kafka_bootstrap: str
    catalog_name: str
    catalog_type: Literal["sql", "rest"] = "sql"
    """``sql``: a JDBC catalog database (pyiceberg ``SqlCatalog``, Iceberg ``JdbcCatalog``; SQLite
    or PostgreSQL); ``rest``: an Iceberg REST catalog (pyiceberg ``RestCatalog``, Spark
    ``type=rest``)."""
    catalog_uri: str
    warehouse: str
    catalog_properties: dict[str, str] = Field(default_factory=dict, repr=False, exclude=True)
    """Further Iceberg catalog properties (credentials, FileIO settings), in Iceberg's names; set
    only by :meth:`with_catalog` from the Airflow connection at task run time. Never printed
    (``repr``) nor dumped."""
    tables_config: Path
    discovery_registry: Path
    """The registry of discovered tables (:mod:`cdclake.model.discovery`): written by the
    ``cdc_discovery`` DAG and ``cdclake discover --write``, read by every DAG file; in a
    deployment of several hosts it must be one file that the dag-processor, the workers and the
    worker running ``cdc_discovery`` all see (docs/operations.md, "Discovery")."""
    spark_master: str
    mariadb_port: int = 13306
    connect_port: int = 18083
    topic_prefix: str = "mariadb"
    signal_channel: Literal["source", "kafka"] = "source"
    signal_table: str = "inventory.debezium_signal"
    engine: Literal["connect", "submit"] = "connect"
    """How the table DAGs' ``apply`` task runs Spark: ``connect``, a session of the long-running
    Spark Connect server (connection :attr:`ConnectionIds.SPARK_CONNECT`); ``submit``,
    ``spark-submit`` of ``spark_jobs/apply_cdc.py`` (connection :attr:`ConnectionIds.SPARK`; YARN,
    Kubernetes, a standalone cluster)."""
    spark_connect_port: int = 15002
    engine_memory: str = "4g"
    spark_log_level: Literal["ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"] = "WARN"
    """Spark's own log level (``spark.log.level``) in the spark-submit jobs, the tests' sessions
    and the Connect server: ``WARN`` keeps Spark's INFO chatter out of the Airflow task logs."""
    apply_pool_slots: int = 2
    reconcile_tasks: int = Field(default=2, ge=1)
    """How many ``cdc_reconcile`` tasks run at once, over all its runs (``max_active_tis_per_dag``).
    A reconcile task holds its executor slot while it waits for its table's applies to catch up, so
    reconcile tasks without a limit (one per table) can fill Airflow's ``parallelism`` and leave no
    slot to the applies they wait for (the second 60-minute soak: 8 of 15 reconcile tasks held a
    LocalExecutor of 8 for their whole catch-up timeout while 40 applies waited)."""
    group_commit: Literal["multi_table", "pointer"] = "multi_table"
    """How a table group is published (docs/architecture.md, "Table groups"): ``multi_table``, one
    catalog commit moves ``main`` and the group's tag of every member (REST ``transactions/commit``,
    one JDBC transaction): every member's ``main`` is at one source transaction boundary at every
    moment; ``pointer``, for a catalog without a multi-table commit: each member is tagged at the
    position first, then each member's ``cdc.group-position`` and ``main`` move one table at a time,
    and a reader who needs the group whole reads each member at the tag of the smallest position
    its members record (:func:`cdclake.pipeline.groups.group_read_tags`)."""
    schema_registry_url: str = ""
    """The schema registry of ``value_format: avro`` topics when no Airflow connection
    :attr:`ConnectionIds.SCHEMA_REGISTRY` exists (the CLI, the local stack): a URL without
    credentials; empty: none."""
    connect_url: str = ""
    """Kafka Connect's REST API (``http://127.0.0.1:18083``) when no Airflow connection
    :attr:`ConnectionIds.KAFKA_CONNECT` exists (the CLI, the local stack): a URL without
    credentials; empty: the connectors are not watched."""

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        """Read the settings from ``CDCLAKE_*`` variables (see the module docstring).

        Raises:
            ValueError: a ``CDCLAKE_*`` variable that this model does not know (a typo would
                otherwise be a silent no-op); ``CDCLAKE_TEST_*`` is reserved for the tests.
        """
        env = dict(os.environ if environ is None else environ)
        unknown = sorted(
            k
            for k in env
            if k.startswith(_ENV_PREFIX)
            and k[len(_ENV_PREFIX) :] not in _KNOWN
            # CDCLAKE_TEST_* belong to the test suite (ports, fault injection), not to the stack
            and not k.startswith(_ENV_PREFIX + "TEST_")
        )
        if unknown:
            raise ValueError(
                f"unknown environment variable(s) {unknown}; known: {sorted(_ENV_PREFIX + k for k in _KNOWN)}"
            )
        state_dir = Path(env.get("CDCLAKE_STATE_DIR", PROJECT_ROOT / ".stack")).resolve()
        return cls.model_validate(
            dict(
                state_dir=state_dir,
                kafka_bootstrap=env.get("CDCLAKE_KAFKA_BOOTSTRAP", "127.0.0.1:19092"),
                catalog_name=env.get("CDCLAKE_CATALOG_NAME", "lake"),
                catalog_type=env.get("CDCLAKE_CATALOG_TYPE", "sql"),
                catalog_uri=env.get("CDCLAKE_CATALOG_URI", f"sqlite:///{state_dir / 'iceberg' / 'catalog.db'}"),
                warehouse=env.get("CDCLAKE_WAREHOUSE", (state_dir / "iceberg" / "warehouse").as_uri()),
                tables_config=Path(env.get("CDCLAKE_TABLES_CONFIG", PROJECT_ROOT / "include" / "tables.yaml")),
                discovery_registry=Path(env.get("CDCLAKE_DISCOVERY_REGISTRY", state_dir / "discovery" / "tables.json")),
                spark_master=env.get("CDCLAKE_SPARK_MASTER", "local[2]"),
                mariadb_port=int(env.get("CDCLAKE_MARIADB_PORT", "13306")),
                connect_port=int(env.get("CDCLAKE_CONNECT_PORT", "18083")),
                topic_prefix=env.get("CDCLAKE_TOPIC_PREFIX", "mariadb"),
                signal_channel=env.get("CDCLAKE_SIGNAL_CHANNEL", "source"),
                signal_table=env.get("CDCLAKE_SIGNAL_TABLE", "inventory.debezium_signal"),
                engine=env.get("CDCLAKE_ENGINE", "connect"),
                spark_connect_port=int(env.get("CDCLAKE_SPARK_CONNECT_PORT", "15002")),
                engine_memory=env.get("CDCLAKE_ENGINE_MEMORY", "4g"),
                spark_log_level=env.get("CDCLAKE_SPARK_LOG_LEVEL", "WARN").upper(),
                apply_pool_slots=int(env.get("CDCLAKE_APPLY_POOL_SLOTS", "2")),
                reconcile_tasks=int(env.get("CDCLAKE_RECONCILE_TASKS", "2")),
                group_commit=env.get("CDCLAKE_GROUP_COMMIT", "multi_table"),
                schema_registry_url=env.get("CDCLAKE_SCHEMA_REGISTRY_URL", ""),
                connect_url=env.get("CDCLAKE_CONNECT_URL", ""),
            )
        )

    def to_env(self) -> dict[str, str]:
        """These settings as the ``CDCLAKE_*`` variables :meth:`from_env` reads back to them, for
        a child process (a CLI run, Airflow's tasks, a benchmark's measured process).

        Every field is written, so that the child resolves nothing of its own. The catalog
        properties of :meth:`with_catalog` (credentials) are not: no variable carries them.

        Returns:
            ``CDCLAKE_<FIELD>`` -> value, e.g. ``CDCLAKE_STATE_DIR`` -> ``/abs/.stack``.
        """
        # field names are the variables' names after the prefix (catalog_properties is excluded
        # from dumps)
        return {_ENV_PREFIX + name.upper(): str(value) for name, value in self.model_dump().items()}

    def with_catalog(self, properties: Mapping[str, object]) -> Settings:
        """These settings with the catalog an Airflow connection's ``extra`` describes
        (:attr:`ConnectionIds.ICEBERG_CATALOG`): ``type``, ``uri`` and ``warehouse`` replace the
        environment's; every other key is an Iceberg catalog property kept in
        :attr:`catalog_properties` (values as strings; booleans as ``true``/``false``).

        Raises:
            ValueError: a ``type`` other than ``sql``, ``jdbc`` or ``rest``; a property that is not
                a string, number or boolean.
        """
        props: dict[str, str] = {}
        for key, value in properties.items():
            if isinstance(value, bool):
                props[key] = "true" if value else "false"
            elif isinstance(value, (str, int, float)):
                props[key] = str(value)
            else:
                raise ValueError(
                    f"catalog property {key!r}: a string, number or boolean is needed, not {type(value).__name__}"
                )
        update: dict[str, object] = {}
        kind = props.pop("type", None)
        if kind is not None:
            if kind not in ("sql", "jdbc", "rest"):
                raise ValueError(f"catalog type {kind!r}: sql (or jdbc) or rest")
            update["catalog_type"] = "rest" if kind == "rest" else "sql"
        for key, field in (("uri", "catalog_uri"), ("warehouse", "warehouse")):
            if key in props:
                update[field] = props.pop(key)
        update["catalog_properties"] = {**self.catalog_properties, **props}
        return self.model_copy(update=update)

    def _jdbc_credentials(self) -> tuple[str | None, str | None]:
        """The catalog database's user and password: ``jdbc.user``/``jdbc.password`` of the
        catalog properties, else the SQLAlchemy URI's (%-escapes decoded, as SQLAlchemy does)."""
        from urllib.parse import unquote, urlsplit

        parts = urlsplit(self.catalog_uri)
        user = self.catalog_properties.get("jdbc.user") or (unquote(parts.username) if parts.username else None)
        password = self.catalog_properties.get("jdbc.password") or (unquote(parts.password) if parts.password else None)
        return user, password

    @property
    def jdbc_catalog_uri(self) -> str:
        """The catalog database as a JDBC URL without credentials, for Spark's ``JdbcCatalog``.

        Raises:
            ValueError: a ``rest`` catalog, or a catalog URI that is neither SQLite nor PostgreSQL.
        """
        uri = self.catalog_uri
        if self.catalog_type == "rest":
            raise ValueError("a REST catalog has no JDBC URL")
        if uri.startswith("sqlite:///"):
            # sqlite:////abs/path.db -> jdbc:sqlite:/abs/path.db
            return "jdbc:sqlite:" + uri[len("sqlite:///") :]
        if uri.startswith(("postgresql://", "postgresql+psycopg2://")):
            rest = uri.split("://", 1)[1]
            if "@" in rest:
                rest = rest.split("@", 1)[1]
            return "jdbc:postgresql://" + rest
        raise ValueError(f"catalog URI {_without_password(uri)!r}: only sqlite:/// and postgresql:// are supported")

    def pyiceberg_catalog_properties(self) -> dict[str, str]:
        """The catalog's properties as pyiceberg's ``load_catalog`` takes them (``type``,
        ``uri`` with the database credentials for ``sql``, ``warehouse``, FileIO settings).

        Iceberg Java names are translated where pyiceberg's differ: ``client.region`` ->
        ``s3.region``; ``s3.path-style-access=true`` -> ``s3.force-virtual-addressing=false``.
        """
        props = {k: v for k, v in self.catalog_properties.items() if not k.startswith("jdbc.")}
        if "client.region" in props:
            props.setdefault("s3.region", props.pop("client.region"))
        if props.pop("s3.path-style-access", "").lower() == "true":
            props.setdefault("s3.force-virtual-addressing", "false")
        props.pop("io-impl", None)  # a Java class: pyiceberg picks its FileIO by the scheme
        uri = self.catalog_uri
        if self.catalog_type == "sql" and uri.startswith("postgresql"):
            from urllib.parse import quote, urlsplit, urlunsplit

            user, password = self._jdbc_credentials()
            parts = urlsplit(uri)
            host = parts.netloc.rsplit("@", 1)[-1]
            if user:
                auth = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
                host = f"{auth}@{host}"
            uri = urlunsplit(parts._replace(netloc=host))
        props.update({"type": self.catalog_type, "uri": uri, "warehouse": self.warehouse})
        return props

    def spark_catalog_conf(self) -> dict[str, str]:
        """Spark settings that register the Iceberg catalog ``catalog_name`` (the one pyiceberg
        loads with :meth:`pyiceberg_catalog_properties`), credentials included: give them to a
        session at run time (:func:`cdclake.spark.session.set_catalog`), never on a command line.
        """
        prefix = f"spark.sql.catalog.{self.catalog_name}"
        conf = {
            prefix: "org.apache.iceberg.spark.SparkCatalog",
            f"{prefix}.warehouse": self.warehouse,
            # pyiceberg commits to the same tables (side tables, offsets-only commits): Spark must
            # load the current metadata on every access, not a cached copy
            f"{prefix}.cache-enabled": "false",
        }
        if self.catalog_type == "rest":
            conf.update({f"{prefix}.type": "rest", f"{prefix}.uri": self.catalog_uri})
        else:
            conf.update(
                {
                    f"{prefix}.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
                    f"{prefix}.uri": self.jdbc_catalog_uri,
                    # V0 reads and writes either layout: pyiceberg 0.12's SqlCatalog creates V1 (with
                    # iceberg_type) on a new database, older ones V0 (tests/integration/test_catalogs.py)
                    f"{prefix}.jdbc.schema-version": "V0",
                }
            )
            user, password = self._jdbc_credentials()
            if user:
                conf[f"{prefix}.jdbc.user"] = user
            if password:
                conf[f"{prefix}.jdbc.password"] = password
        if self.warehouse.startswith(("s3://", "s3a://")):
            conf[f"{prefix}.io-impl"] = "org.apache.iceberg.aws.s3.S3FileIO"
        for key, value in self.catalog_properties.items():
            if key == "s3.region":
                key = "client.region"
            if key == "s3.force-virtual-addressing":
                key, value = "s3.path-style-access", "false" if value.lower() == "true" else "true"
            conf[f"{prefix}.{key}"] = value
        return conf

    @property
    def signal_topic(self) -> str:
        """The connector's ``signal.kafka.topic`` (the Kafka signal channel; one partition)."""
        return f"{self.topic_prefix}.signals"

    @property
    def notification_topic(self) -> str:
        """The connector's ``notification.sink.topic.name``."""
        return f"{self.topic_prefix}.notifications"

    @property
    def kafka_dir(self) -> Path:
        return self.state_dir / "kafka"

    @property
    def airflow_home(self) -> Path:
        return self.state_dir / "airflow"

    @property
    def engine_dir(self) -> Path:
        """The local Spark Connect server's files (pid, log, settings, token)."""
        return self.state_dir / "engine"


def _without_password(uri: str) -> str:
    """``uri`` with the password of its user info replaced by ``***`` (for messages)."""
    import re

    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", uri)


def jars_dir(profile: str) -> Path:
    """Folder of the jars Maven fetched for ``profile`` (``spark`` or ``kafka``)."""
    return PROJECT_ROOT / ".jars" / profile


def spark_jars() -> list[Path]:
    """The jars ``spark-submit --jars`` needs (Iceberg runtime, Kafka source, spark-avro, JDBC drivers).

    Raises:
        FileNotFoundError: the jars were not fetched yet (run ``make setup``).
    """
    jars = sorted(jars_dir("spark").glob("*.jar"))
    if not jars:
        raise FileNotFoundError(f"no jars in {jars_dir('spark')}: run `make setup` first")
    return jars
