"""The Kafka client configs :class:`cdclake.io.kafka.KafkaClients` builds (no broker)."""

from __future__ import annotations

import pytest

from cdclake.errors import ConfigError
from cdclake.io.kafka import ISOLATION_LEVEL, KafkaClients


def test_spark_and_librdkafka_readers_read_committed_records_only():
    kafka = KafkaClients({"bootstrap.servers": "127.0.0.1:1", "isolation.level": "read_committed"})
    assert ISOLATION_LEVEL == "read_committed"
    assert kafka.spark_options()["kafka.isolation.level"] == ISOLATION_LEVEL
    assert KafkaClients.from_bootstrap("127.0.0.1:1").spark_options()["kafka.isolation.level"] == ISOLATION_LEVEL


def test_a_connection_reading_uncommitted_records_is_refused_naming_the_property():
    with pytest.raises(ConfigError, match="isolation.level='read_uncommitted'"):
        KafkaClients({"bootstrap.servers": "127.0.0.1:1", "isolation.level": "read_uncommitted"})


def test_the_schema_registry_reaches_the_kafka_clients_of_the_cli_and_of_a_submit_job(tmp_path):
    """``CDCLAKE_SCHEMA_REGISTRY_URL`` gives the CLI's clients a registry, none without it; a
    ``spark-submit`` job takes the registry of its private connections file (the Airflow
    connection's config, credentials included) over the variable, and names it without them."""
    import json

    from cdclake.settings import Settings
    from cdclake.spark.session import job_connections

    plain = Settings.from_env({"CDCLAKE_STATE_DIR": str(tmp_path)})
    assert KafkaClients.from_settings(plain).schema_registry is None
    assert KafkaClients.from_settings(plain).schema_lookup is None
    url = "http://127.0.0.1:1/apis/ccompat/v7"
    with_url = Settings.from_env({"CDCLAKE_STATE_DIR": str(tmp_path), "CDCLAKE_SCHEMA_REGISTRY_URL": url})
    assert Settings.from_env(with_url.to_env()) == with_url
    assert KafkaClients.from_settings(with_url).schema_registry.describe() == url
    assert job_connections(None, with_url)[1].schema_registry.describe() == url

    path = tmp_path / "connections.json"
    registry = {"url": "https://registry.internal/apis/ccompat/v7", "basic.auth.user.info": "reader:s3cret"}
    path.write_text(
        json.dumps({"catalog": None, "kafka": {"bootstrap.servers": "b:9092"}, "schema_registry": registry})
    )
    _, kafka = job_connections(str(path), with_url)
    assert kafka.schema_registry.describe() == "https://registry.internal/apis/ccompat/v7"
    path.write_text(json.dumps({"catalog": None, "kafka": {"bootstrap.servers": "b:9092"}, "schema_registry": None}))
    assert job_connections(str(path), plain)[1].schema_registry is None


@pytest.mark.parametrize(
    ("uri", "url"),
    [
        # Airflow parses the scheme of a URI as the connection type and its path as the schema
        ("https://u:p@reg.example.com:8443/apis/ccompat/v7", "https://reg.example.com:8443/apis/ccompat/v7"),
        ("http://127.0.0.1:18081/apis/ccompat/v7", "http://127.0.0.1:18081/apis/ccompat/v7"),
    ],
)
def test_the_registry_connection_keeps_its_scheme_and_path(monkeypatch, uri, url):
    from cdclake_airflow.hooks import CdcLakeHook

    monkeypatch.setenv("AIRFLOW_CONN_SCHEMA_REGISTRY", uri)
    config = CdcLakeHook().schema_registry_config()
    assert config is not None and config["url"] == url
    assert config.get("basic.auth.user.info") == ("u:p" if "u:p@" in uri else None)


def test_registry_credentials_over_plain_http_to_another_host_are_refused(monkeypatch):
    from cdclake.errors import ConfigError
    from cdclake_airflow.hooks import CdcLakeHook

    monkeypatch.setenv("AIRFLOW_CONN_SCHEMA_REGISTRY", "http://u:secret@reg.example.com/apis/ccompat/v7")
    with pytest.raises(ConfigError, match="plain http to reg.example.com") as caught:
        CdcLakeHook().schema_registry_config()
    assert "secret" not in str(caught.value)
