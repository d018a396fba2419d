"""The Airflow hook of cdclake's tasks: the Airflow connections they use, resolved when a task
runs (never at DAG-parse time), and the clients built from them; the one place they are built.

:class:`CdcLakeHook` owns the Kafka connection (``kafka_default``), the Iceberg catalog
(``iceberg_catalog`` merged into ``CDCLAKE_*``), the Spark Connect engine
(``spark_connect_default``), the source database (``cdc_source_db``), the schema registry of
Avro topics (``schema_registry``, optional) and Kafka Connect's REST API (``kafka_connect``,
optional), the ids of
:class:`cdclake.settings.ConnectionIds`; each client is built on first use, once per hook.

Every credential a task uses comes from here: the Kafka client config (SASL/SSL included), the
Iceberg catalog's properties (JDBC password, S3 keys, REST token), the source database's login,
the Spark Connect token, the schema registry's basic auth or bearer token, Kafka Connect's basic
auth and client certificate. Airflow masks the connections' passwords and sensitive extra keys in task
logs; this project never logs them nor passes them on a command line: the Spark Connect URL (its
token) goes only to the session, and an error names the server without it
(:func:`cdclake.spark.session.connect_session`); a ``spark-submit`` job gets the catalog, Kafka and
schema registry config in a private file (:mod:`cdclake_airflow.spark_submit`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from cdclake.settings import ConnectionIds, Settings

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

    from cdclake.io.connect import KafkaConnect
    from cdclake.io.kafka import KafkaClients
    from cdclake.io.registry import SchemaRegistry
    from cdclake.io.source_db import SourceDatabase
    from cdclake.pipeline.sources import SourceProbe


class CdcLakeHook(BaseHook):
    """The connections of cdclake's tasks (see the module docstring); a table run passes its
    members to :func:`cdclake.runner.run_once`.

    Args:
        kafka_conn_id: the Kafka connection (its ``extra`` is the librdkafka client config, as
            the Apache Kafka provider defines the connection).
        catalog_conn_id: the optional Iceberg catalog connection (its ``extra`` holds the
            catalog's properties).
        spark_connect_conn_id: the Spark Connect server's connection (host, port, token).
        source_db_conn_id: the source database's MySQL connection (host, port, login, password,
            schema).
        schema_registry_conn_id: the optional schema registry connection
            (:attr:`cdclake.settings.ConnectionIds.SCHEMA_REGISTRY`).
        kafka_connect_conn_id: the optional Kafka Connect connection
            (:attr:`cdclake.settings.ConnectionIds.KAFKA_CONNECT`).
    """

    def __init__(
        self,
        *,
        kafka_conn_id: str = ConnectionIds.KAFKA,
        catalog_conn_id: str = ConnectionIds.ICEBERG_CATALOG,
        spark_connect_conn_id: str = ConnectionIds.SPARK_CONNECT,
        source_db_conn_id: str = ConnectionIds.SOURCE_DB,
        schema_registry_conn_id: str = ConnectionIds.SCHEMA_REGISTRY,
        kafka_connect_conn_id: str = ConnectionIds.KAFKA_CONNECT,
    ) -> None:
        super().__init__()
        self.kafka_conn_id = kafka_conn_id
        self.catalog_conn_id = catalog_conn_id
        self.spark_connect_conn_id = spark_connect_conn_id
        self.source_db_conn_id = source_db_conn_id
        self.schema_registry_conn_id = schema_registry_conn_id
        self.kafka_connect_conn_id = kafka_connect_conn_id

    def kafka_config(self) -> dict[str, Any]:
        """The librdkafka client config of connection ``kafka_conn_id``: its whole ``extra``
        (security settings included)."""
        return dict(self.get_connection(self.kafka_conn_id).extra_dejson)

    def catalog_properties(self) -> dict[str, Any] | None:
        """The Iceberg catalog properties of connection ``catalog_conn_id`` (its ``extra``), or
        ``None`` when no such connection is defined (the embedded default: the catalog is the
        environment's)."""
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            conn = self.get_connection(self.catalog_conn_id)
        except AirflowNotFoundException:
            return None
        return dict(conn.extra_dejson)

    def schema_registry_config(self) -> dict[str, Any] | None:
        """The ``SchemaRegistryClient`` config of connection ``schema_registry_conn_id``, or
        without it the ``url`` of ``CDCLAKE_SCHEMA_REGISTRY_URL`` (:attr:`settings`); ``None``
        when neither is set.

        ``url`` from the connection's ``host`` (a whole base URL is taken as it is; a bare host
        name gets the scheme of the connection's type, ``https`` or else ``http``, as Airflow parses
        ``https://user:pw@host/path`` URIs, or of its ``schema`` when that is ``http``/``https``,
        then its ``port`` and its ``schema`` as the path), ``basic.auth.user.info`` from
        ``login``/``password``, and the ``extra`` keys (``bearer.auth.token``,
        ``ssl.ca.location``, ...).

        Raises:
            ConfigError: credentials on a connection whose URL is plain ``http`` to a host other
                than the loopback (they would cross the network in clear text).
        """
        from airflow.sdk.exceptions import AirflowNotFoundException

        from cdclake.errors import ConfigError

        try:
            conn = self.get_connection(self.schema_registry_conn_id)
        except AirflowNotFoundException:
            url = self.settings.schema_registry_url
            return {"url": url} if url else None  # the local stack's: no credentials
        url = _http_url(conn)
        config: dict[str, Any] = {"url": url, **conn.extra_dejson}
        if conn.login:
            config["basic.auth.user.info"] = f"{conn.login}:{conn.password or ''}"
        secret = conn.login or any("auth" in key for key in conn.extra_dejson)
        host = url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
        if secret and url.startswith("http://") and host not in ("127.0.0.1", "localhost", "[::1]"):
            raise ConfigError(
                f"Airflow connection {self.schema_registry_conn_id!r} sends registry credentials over plain "
                f"http to {host}: use an https URL (connection type https, or the whole URL as its host)"
            )
        return config

    @cached_property
    def kafka_connect(self) -> KafkaConnect | None:
        """Kafka Connect's REST API of connection ``kafka_connect_conn_id``: its URL as
        :meth:`schema_registry_config` builds one (a whole base URL as the host, or host, port and
        ``http``/``https``), ``login``/``password`` its basic auth, ``extra`` ``verify``, ``cert``,
        ``key``, ``timeout`` (:func:`cdclake.io.connect.connect_from_connection`). Without the
        connection, ``CDCLAKE_CONNECT_URL``'s; ``None`` when neither is set (no connector is
        watched).

        Raises:
            ConfigError: the connection has no host, an unknown or malformed ``extra`` key, or a
                login over plain ``http`` to a host other than the loopback.
        """
        from airflow.sdk.exceptions import AirflowNotFoundException

        from cdclake.errors import ConfigError
        from cdclake.io.connect import connect_from_connection, connect_from_settings

        try:
            conn = self.get_connection(self.kafka_connect_conn_id)
        except AirflowNotFoundException:
            return connect_from_settings(self.settings)
        url = _http_url(conn)
        where = f"Airflow connection {self.kafka_connect_conn_id!r}"
        if not url:
            raise ConfigError(f"{where} has no host: Kafka Connect's REST API URL, e.g. https://connect:8083")
        host = url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
        if conn.login and url.startswith("http://") and host not in ("127.0.0.1", "localhost", "[::1]"):
            raise ConfigError(
                f"{where} sends Kafka Connect credentials over plain http to {host}: use an https URL "
                "(schema https, or the whole URL as its host)"
            )
        try:
            return connect_from_connection(url, conn.login, conn.password, conn.extra_dejson)
        except ValueError as e:
            raise ConfigError(f"{where}: {e}") from e

    def source_probe(self) -> SourceProbe | None:
        """What the status asks about the sources (:mod:`cdclake.pipeline.sources`): Kafka Connect
        (:attr:`kafka_connect`) and the source database (connection ``source_db_conn_id``, when
        defined); ``None`` when no Kafka Connect is configured (the sources are not asked)."""
        from airflow.sdk.exceptions import AirflowNotFoundException

        from cdclake.pipeline.sources import SourceProbe

        connect = self.kafka_connect
        if connect is None:
            return None
        try:
            db = self.source_database()
        except AirflowNotFoundException:
            db = None
        return SourceProbe(connect, db, f"Airflow connection {self.source_db_conn_id}")

    @cached_property
    def schema_registry(self) -> SchemaRegistry | None:
        """The schema registry of connection ``schema_registry_conn_id``; without the connection,
        ``CDCLAKE_SCHEMA_REGISTRY_URL``'s (:attr:`settings`); ``None`` when neither is set.

        Raises:
            ConfigError: the connection has no host, or a key ``SchemaRegistryClient`` refuses.
        """
        from cdclake.io.registry import SchemaRegistry, registry_from_settings

        config = self.schema_registry_config()
        if config is None:
            return None
        if config == {"url": self.settings.schema_registry_url}:
            return registry_from_settings(self.settings)
        return SchemaRegistry(config, origin=f"Airflow connection {self.schema_registry_conn_id!r}")

    @cached_property
    def settings(self) -> Settings:
        """The settings a task runs with: ``CDCLAKE_*`` (:meth:`Settings.from_env`) with the
        catalog of connection ``catalog_conn_id`` when it is defined
        (:meth:`Settings.with_catalog`).

        Raises:
            ValueError: an unknown ``CDCLAKE_*`` variable, or a malformed catalog property.
        """
        settings = Settings.from_env()
        props = self.catalog_properties()
        return settings if props is None else settings.with_catalog(props)

    @cached_property
    def catalog(self) -> Catalog:
        """The pyiceberg catalog of :attr:`settings`."""
        from cdclake.io.catalog import load_catalog

        return load_catalog(self.settings)

    @cached_property
    def kafka(self) -> KafkaClients:
        """The Kafka clients of connection ``kafka_conn_id`` (:meth:`kafka_config`), with the
        :attr:`schema_registry`.

        Raises:
            ConfigError: the connection has no ``bootstrap.servers`` in its extra, or the schema
                registry's config is refused.
        """
        from cdclake.io.kafka import KafkaClients

        return KafkaClients(self.kafka_config(), self.schema_registry)

    def source_database(self) -> SourceDatabase:
        """The source database of connection ``source_db_conn_id`` (its host, port, login,
        password and schema; unset: ``127.0.0.1``, 3306, ``root``, no password, no database)."""
        from cdclake.io.source_db import SourceDatabase

        conn = self.get_connection(self.source_db_conn_id)
        return SourceDatabase(
            conn.host or "127.0.0.1",
            int(conn.port or 3306),
            conn.login or "root",
            conn.password or "",
            conn.schema or None,
        )

    @contextmanager
    def spark_session(self) -> Iterator[SparkSession]:
        """A new session of the Spark Connect server of connection ``spark_connect_conn_id`` (its
        URL as the Spark provider's ``SparkConnectHook`` builds it), with the catalog of
        :attr:`settings` registered; stopped when the ``with`` block ends.

        Raises:
            EngineUnavailableError: the server does not accept connections.
        """
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        from cdclake.spark.session import connect_session

        url = SparkConnectHook(self.spark_connect_conn_id).get_connection_url()
        spark = connect_session(url, settings=self.settings, conn_id=self.spark_connect_conn_id)
        try:
            yield spark
        finally:
            spark.stop()


def _http_url(conn: Any) -> str:
    """The base URL of an HTTP connection: its ``host`` when that is a whole URL; else a bare
    host name with the scheme of the connection's type (``https``, else ``http``, as Airflow parses
    ``https://user:pw@host/path`` URIs) or of its ``schema`` when that is ``http``/``https``, then
    its ``port`` and its ``schema`` as the path; ``""`` without a host."""
    url = conn.host or ""
    if url and "://" not in url:
        path = conn.schema or ""
        scheme = "https" if conn.conn_type == "https" else "http"
        if path in ("http", "https"):  # the HTTP connection form's "Schema" field
            scheme, path = path, ""
        url = f"{scheme}://{url}" + (f":{conn.port}" if conn.port else "") + (f"/{path.lstrip('/')}" if path else "")
    return url
