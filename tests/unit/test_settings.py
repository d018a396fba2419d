"""Unit tests for :mod:`cdclake.settings`: ``CDCLAKE_*`` environment and catalog URIs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdclake import settings as settings_module
from cdclake.settings import Settings

PROJECT = Path(__file__).resolve().parents[2]


def with_uri(uri: str, **env: str) -> Settings:
    return Settings.from_env({"CDCLAKE_CATALOG_URI": uri, **env})


def test_project_root_is_the_repository():
    assert settings_module.PROJECT_ROOT == PROJECT


def test_from_env_empty_uses_defaults_under_project_stack():
    s = Settings.from_env({})
    state = (PROJECT / ".stack").resolve()
    assert s.state_dir == state
    assert s.kafka_bootstrap == "127.0.0.1:19092"
    assert s.catalog_name == "lake"
    assert s.catalog_uri == f"sqlite:///{state}/iceberg/catalog.db"
    assert s.warehouse == f"file://{state}/iceberg/warehouse"
    assert s.tables_config == PROJECT / "include" / "tables.yaml"
    assert s.spark_master == "local[2]"
    assert s.kafka_dir == state / "kafka"
    assert s.airflow_home == state / "airflow"


def test_from_env_reads_every_known_variable(tmp_path):
    s = Settings.from_env(
        {
            "CDCLAKE_STATE_DIR": str(tmp_path),
            "CDCLAKE_KAFKA_BOOTSTRAP": "broker:9092",
            "CDCLAKE_CATALOG_NAME": "prod",
            "CDCLAKE_CATALOG_URI": "sqlite:////data/cat.db",
            "CDCLAKE_WAREHOUSE": "s3://bucket/wh",
            "CDCLAKE_TABLES_CONFIG": "/etc/cdclake/tables.yaml",
            "CDCLAKE_SPARK_MASTER": "spark://m:7077",
        }
    )
    assert s.state_dir == tmp_path.resolve()
    assert s.kafka_bootstrap == "broker:9092"
    assert s.catalog_name == "prod"
    assert s.catalog_uri == "sqlite:////data/cat.db"
    assert s.warehouse == "s3://bucket/wh"
    assert s.tables_config == Path("/etc/cdclake/tables.yaml")
    assert s.spark_master == "spark://m:7077"


def test_state_dir_moves_default_catalog_and_warehouse(tmp_path):
    s = Settings.from_env({"CDCLAKE_STATE_DIR": str(tmp_path)})
    root = tmp_path.resolve()
    assert s.catalog_uri == f"sqlite:///{root}/iceberg/catalog.db"
    assert s.warehouse == (root / "iceberg" / "warehouse").as_uri()
    assert s.jdbc_catalog_uri == f"jdbc:sqlite:{root}/iceberg/catalog.db"


def test_relative_state_dir_is_resolved_against_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = Settings.from_env({"CDCLAKE_STATE_DIR": "rel/state"})
    assert s.state_dir == (tmp_path / "rel" / "state").resolve()
    assert s.state_dir.is_absolute()


def test_unknown_cdclake_variable_raises_naming_it():
    with pytest.raises(ValueError) as excinfo:
        Settings.from_env({"CDCLAKE_CATALOG_URL": "sqlite:////x.db"})
    msg = str(excinfo.value)
    assert "CDCLAKE_CATALOG_URL" in msg
    assert "CDCLAKE_CATALOG_URI" in msg  # the known names are listed


def test_variables_without_prefix_are_ignored():
    s = Settings.from_env({"HOME": "/root", "CDCLAKE": "x", "KAFKA_BOOTSTRAP": "elsewhere:1"})
    assert s.kafka_bootstrap == "127.0.0.1:19092"


def test_from_env_none_reads_os_environ(monkeypatch):
    for name in [k for k in os.environ if k.startswith("CDCLAKE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("CDCLAKE_KAFKA_BOOTSTRAP", "from-os:9092")
    assert Settings.from_env().kafka_bootstrap == "from-os:9092"
    monkeypatch.setenv("CDCLAKE_BOGUS", "1")
    with pytest.raises(ValueError, match="CDCLAKE_BOGUS"):
        Settings.from_env()


def test_settings_are_frozen():
    s = Settings.from_env({})
    with pytest.raises(ValueError):
        s.catalog_name = "other"  # type: ignore[misc]


# --- JDBC catalog URI ---------------------------------------------------------------------------


def test_jdbc_uri_for_absolute_sqlite_path():
    assert with_uri("sqlite:////abs/x.db").jdbc_catalog_uri == "jdbc:sqlite:/abs/x.db"


def test_jdbc_uri_for_postgresql_drops_credentials():
    s = with_uri("postgresql://cat_user:s3cret@db.example:5432/catalog")
    assert s.jdbc_catalog_uri == "jdbc:postgresql://db.example:5432/catalog"


def test_jdbc_uri_for_postgresql_psycopg2_driver():
    s = with_uri("postgresql+psycopg2://u:p@host:5432/db")
    assert s.jdbc_catalog_uri == "jdbc:postgresql://host:5432/db"


def test_jdbc_uri_for_postgresql_without_credentials():
    assert with_uri("postgresql://host:5432/db").jdbc_catalog_uri == "jdbc:postgresql://host:5432/db"


@pytest.mark.parametrize("uri", ["mysql://u:p@host/db", "postgres://u:p@host/db", "jdbc:sqlite:/x.db", "/abs/x.db"])
def test_unsupported_catalog_uri_raises(uri):
    with pytest.raises(ValueError, match="only sqlite:/// and postgresql:// are supported"):
        _ = with_uri(uri).jdbc_catalog_uri


# --- Spark catalog conf -------------------------------------------------------------------------


def test_spark_catalog_conf_for_postgresql_passes_user_and_password():
    conf = with_uri("postgresql://cat_user:s3cret@db.example:5432/catalog").spark_catalog_conf()
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.lake.catalog-impl"] == "org.apache.iceberg.jdbc.JdbcCatalog"
    assert conf["spark.sql.catalog.lake.uri"] == "jdbc:postgresql://db.example:5432/catalog"
    assert conf["spark.sql.catalog.lake.jdbc.user"] == "cat_user"
    assert conf["spark.sql.catalog.lake.jdbc.password"] == "s3cret"
    assert conf["spark.sql.catalog.lake.jdbc.schema-version"] == "V0"
    assert "s3cret" not in conf["spark.sql.catalog.lake.uri"]


def test_spark_catalog_conf_decodes_percent_encoded_credentials():
    # SQLAlchemy (and so pyiceberg's SqlCatalog) requires special characters in credentials to be
    # percent-encoded and decodes them; Spark's JDBC catalog must get the same decoded values.
    s = with_uri("postgresql://cat%40user:p%40ss%3Aw0rd@db.example:5432/catalog")
    conf = s.spark_catalog_conf()
    assert conf["spark.sql.catalog.lake.jdbc.user"] == "cat@user"
    assert conf["spark.sql.catalog.lake.jdbc.password"] == "p@ss:w0rd"


def test_spark_catalog_conf_for_sqlite_has_no_credentials(tmp_path):
    s = Settings.from_env({"CDCLAKE_STATE_DIR": str(tmp_path), "CDCLAKE_CATALOG_NAME": "c1"})
    conf = s.spark_catalog_conf()
    root = tmp_path.resolve()
    assert conf["spark.sql.catalog.c1.uri"] == f"jdbc:sqlite:{root}/iceberg/catalog.db"
    assert conf["spark.sql.catalog.c1.warehouse"] == (root / "iceberg" / "warehouse").as_uri()
    assert not [k for k in conf if k.endswith((".jdbc.user", ".jdbc.password"))]


def test_spark_conf_has_the_extensions_and_redaction_but_no_catalog():
    from cdclake.spark.session import spark_conf

    conf = spark_conf(with_uri("postgresql://cat_user:s3cret@db.example:5432/catalog"))
    assert conf["spark.sql.extensions"] == "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
    assert not [k for k in conf if k.startswith("spark.sql.catalog.")]
    assert "s3cret" not in repr(conf)
    import re

    redact = re.compile(conf["spark.redaction.regex"])
    for key in (
        "spark.sql.catalog.lake.jdbc.password",
        "spark.sql.catalog.lake.s3.secret-access-key",
        "spark.sql.catalog.lake.s3.access-key-id",
        "spark.sql.catalog.lake.token",
        "spark.sql.catalog.lake.credential",
        "kafka.sasl.jaas.config",
        "spark.sql.catalog.lake.adls.connection-string.myaccount",
        "spark.sql.catalog.lake.adls.sas-token.myaccount",
        "spark.sql.catalog.lake.header.Authorization",
        "spark.sql.catalog.lake.header.X-Api-Key",
        "spark.sql.catalog.lake.s3.session-token",
        "spark.sql.catalog.lake.gcs.oauth2.token",
        "kafka.ssl.keystore.key",  # PEM private key material, no 'password' in the name
    ):
        assert redact.search(key), key
    for key in (
        "spark.sql.catalog.lake.uri",
        "spark.sql.catalog.lake.warehouse",
        "spark.sql.catalog.lake.s3.endpoint",
        "spark.sql.catalog.lake.io-impl",
        "spark.sql.catalog.lake.jdbc.user",
        "spark.sql.shuffle.partitions",
    ):
        assert not redact.search(key), key


# --- the catalog of an Airflow connection (Settings.with_catalog) -------------------------------

S3_PROPS = {
    "s3.endpoint": "http://127.0.0.1:9000",
    "s3.access-key-id": "AKID",
    "s3.secret-access-key": "very-secret",
    "s3.path-style-access": True,
    "client.region": "us-east-1",
}


def test_a_rest_catalog_connection_reaches_spark_and_pyiceberg_in_their_own_names():
    s = Settings.from_env({}).with_catalog(
        {"type": "rest", "uri": "http://127.0.0.1:8181", "warehouse": "s3://lake/", **S3_PROPS}
    )
    assert (s.catalog_type, s.catalog_uri, s.warehouse) == ("rest", "http://127.0.0.1:8181", "s3://lake/")
    conf = s.spark_catalog_conf()
    assert conf["spark.sql.catalog.lake.type"] == "rest"
    assert conf["spark.sql.catalog.lake.uri"] == "http://127.0.0.1:8181"
    assert conf["spark.sql.catalog.lake.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf["spark.sql.catalog.lake.s3.path-style-access"] == "true"
    assert conf["spark.sql.catalog.lake.client.region"] == "us-east-1"
    assert conf["spark.sql.catalog.lake.s3.secret-access-key"] == "very-secret"
    assert "spark.sql.catalog.lake.catalog-impl" not in conf
    props = s.pyiceberg_catalog_properties()
    assert props["type"] == "rest" and props["uri"] == "http://127.0.0.1:8181"
    assert props["s3.region"] == "us-east-1" and props["s3.force-virtual-addressing"] == "false"
    assert "s3.path-style-access" not in props and "client.region" not in props
    with pytest.raises(ValueError, match="REST catalog has no JDBC URL"):
        _ = s.jdbc_catalog_uri


def test_a_jdbc_catalog_connection_gives_its_credentials_to_both_and_never_prints_them():
    s = Settings.from_env({}).with_catalog(
        {
            "type": "jdbc",
            "uri": "postgresql+psycopg2://db.example:5432/iceberg",
            "warehouse": "s3://lake/",
            "jdbc.user": "iceberg",
            "jdbc.password": "p@ss:word",
            **S3_PROPS,
        }
    )
    assert s.catalog_type == "sql"
    conf = s.spark_catalog_conf()
    assert conf["spark.sql.catalog.lake.uri"] == "jdbc:postgresql://db.example:5432/iceberg"
    assert conf["spark.sql.catalog.lake.jdbc.password"] == "p@ss:word"
    props = s.pyiceberg_catalog_properties()
    assert props["uri"] == "postgresql+psycopg2://iceberg:p%40ss%3Aword@db.example:5432/iceberg"
    assert not [k for k in props if k.startswith("jdbc.")]
    for shown in (repr(s), str(s), s.model_dump_json()):
        assert "p@ss:word" not in shown and "very-secret" not in shown


def test_a_catalog_connection_with_an_unknown_type_or_a_nested_value_is_refused():
    with pytest.raises(ValueError, match="catalog type 'hive'"):
        Settings.from_env({}).with_catalog({"type": "hive"})
    with pytest.raises(ValueError, match="catalog property 's3'"):
        Settings.from_env({}).with_catalog({"s3": {"endpoint": "x"}})


def test_spark_log_level_defaults_to_warn_and_reaches_the_spark_conf():
    from cdclake.spark.session import spark_conf

    assert Settings.from_env({}).spark_log_level == "WARN"
    chatty = Settings.from_env({"CDCLAKE_SPARK_LOG_LEVEL": "info"})
    assert spark_conf(chatty)["spark.log.level"] == "INFO"
    with pytest.raises(ValueError, match="spark_log_level"):
        Settings.from_env({"CDCLAKE_SPARK_LOG_LEVEL": "LOUD"})


def test_to_env_round_trips_through_from_env_and_carries_every_field(tmp_path):
    s = Settings.from_env(
        {
            "CDCLAKE_STATE_DIR": str(tmp_path),
            "CDCLAKE_KAFKA_BOOTSTRAP": "broker:9092",
            "CDCLAKE_CATALOG_NAME": "prod",
            "CDCLAKE_CATALOG_TYPE": "rest",
            "CDCLAKE_CATALOG_URI": "http://catalog:8181",
            "CDCLAKE_WAREHOUSE": "s3://bucket/wh",
            "CDCLAKE_TABLES_CONFIG": "/etc/cdclake/tables.yaml",
            "CDCLAKE_SPARK_MASTER": "spark://m:7077",
            "CDCLAKE_MARIADB_PORT": "3307",
            "CDCLAKE_CONNECT_PORT": "8084",
            "CDCLAKE_TOPIC_PREFIX": "shop",
            "CDCLAKE_SIGNAL_CHANNEL": "kafka",
            "CDCLAKE_SIGNAL_TABLE": "shop.signals",
            "CDCLAKE_ENGINE": "submit",
            "CDCLAKE_SPARK_CONNECT_PORT": "15003",
            "CDCLAKE_ENGINE_MEMORY": "8g",
            "CDCLAKE_SPARK_LOG_LEVEL": "info",
            "CDCLAKE_APPLY_POOL_SLOTS": "3",
        }
    )
    env = s.to_env()
    assert Settings.from_env(env) == s
    # a default is written too: the child resolves nothing of its own
    assert Settings.from_env({}).to_env()["CDCLAKE_ENGINE"] == "connect"
    assert env["CDCLAKE_SPARK_LOG_LEVEL"] == "INFO" and env["CDCLAKE_MARIADB_PORT"] == "3307"
    assert {k.removeprefix("CDCLAKE_").lower() for k in env} == set(Settings.model_fields) - {"catalog_properties"}


def test_to_env_never_carries_the_catalog_connections_credentials():
    s = Settings.from_env({}).with_catalog({"jdbc.user": "iceberg", "jdbc.password": "p@ss:word", **S3_PROPS})
    env = s.to_env()
    assert Settings.from_env(env) == s.model_copy(update={"catalog_properties": {}})
    assert not [v for v in env.values() if "p@ss:word" in v or "very-secret" in v]
