"""The pipeline's Kafka clients against SASL_PLAINTEXT with SCRAM-SHA-512: a broker of this module's
own (state dir and ports of its own, not the suite's broker) serving a SASL/SCRAM listener
(:class:`cdclake_dev.stack.SaslListener`); confluent-kafka clients and Spark's Kafka source read
and write through it with the credentials of one client config (:class:`KafkaClients`)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException

from cdclake.io.kafka import KafkaClients, ensure_topic, produce, read_partition, topic_watermarks
from cdclake.settings import Settings
from cdclake_dev import stack
from cdclake_dev.process import free_port

pytestmark = pytest.mark.integration

USER = "cdclake-pipeline"
PASSWORD = 'S3cr"et\\pa ss=word,'  # a quote, a backslash, a space, '=' and ',': every escape on the way
"""The SCRAM user's password: the characters that need escaping in a JAAS config and in SCRAM."""

WRONG_FAIL_S = 10.0
"""A wrong password must fail well before the clients' 30 s timeout."""


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory):
    """A broker with a SASL/SCRAM listener; yields ``(settings, listener, seconds the start took)``
    and stops it at the end of the module."""
    state = tmp_path_factory.mktemp("sasl-stack")
    settings = Settings.from_env(
        {"CDCLAKE_STATE_DIR": str(state), "CDCLAKE_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port(2)}"}
    )
    port = int(settings.kafka_bootstrap.rpartition(":")[2])
    sasl_port = free_port()
    while sasl_port in (port, port + 1):
        sasl_port = free_port()
    listener = stack.SaslListener(sasl_port, {USER: PASSWORD, "reader": "another-Secret"})
    started = time.monotonic()
    report = stack.start_broker(settings, sasl=listener)
    took = time.monotonic() - started
    print(f"\nstart with SASL: {took:.1f} s: {report}")
    assert "started" in report and f"SASL_PLAINTEXT SCRAM-SHA-512 on 127.0.0.1:{sasl_port}" in report, report
    assert PASSWORD not in report and "another-Secret" not in report
    yield settings, listener, took
    stack.stop_broker(settings)


def _clients(listener: stack.SaslListener, user: str = USER, password: str = PASSWORD) -> KafkaClients:
    return KafkaClients(
        {
            "bootstrap.servers": f"127.0.0.1:{listener.port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password,
        }
    )


def _values(kafka: KafkaClients, topic: str) -> list[bytes]:
    marks = topic_watermarks(kafka, topic)
    return [m.value() for m in read_partition(kafka, topic, 0, marks.low[0], marks.high[0])]


@pytest.fixture(scope="module")
def sasl_topic(sasl_broker) -> tuple[str, list[bytes]]:
    """A topic written through the SASL listener: ``(topic, values in offset order)``."""
    _, listener, _ = sasl_broker
    kafka = _clients(listener)
    topic = f"sasl.{uuid.uuid4().hex[:8]}.events"
    ensure_topic(kafka, topic, 1)
    values = [f'{{"id": {i}}}'.encode() for i in range(200)]
    produce(kafka, topic, iter((str(i).encode(), v, None) for i, v in enumerate(values)))
    return topic, values


def test_listener_never_shows_passwords(sasl_broker):
    settings, listener, _ = sasl_broker
    assert PASSWORD not in repr(listener) and USER in repr(listener)
    assert PASSWORD not in str(listener)
    props = (settings.kafka_dir / "server.properties").read_text()
    assert f"SASL_PLAINTEXT://127.0.0.1:{listener.port}" in props
    assert "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config" in props
    # neither the broker's settings nor its logs, nor its data (the credentials are salted) hold a password
    for path in settings.kafka_dir.rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            assert PASSWORD.encode() not in content and b"another-Secret" not in content, path


def test_clients_create_produce_and_read_over_sasl(sasl_broker):
    _, listener, _ = sasl_broker
    kafka = _clients(listener)
    topic = f"sasl.{uuid.uuid4().hex[:8]}.roundtrip"

    assert ensure_topic(kafka, topic, 2) is True
    assert ensure_topic(kafka, topic, 2) is False
    records = [(f"k{i}".encode(), f"v{i}".encode(), [("h", f"{i}")]) for i in range(100)]
    positions = produce(kafka, topic, iter(records))

    marks = topic_watermarks(kafka, topic)
    assert sorted(marks.high) == [0, 1] and sum(marks.high.values()) == 100 and marks.low == {0: 0, 1: 0}
    read = {
        m.key(): (m.value(), m.headers())
        for p in (0, 1)
        for m in read_partition(kafka, topic, p, marks.low[p], marks.high[p])
    }
    assert read == {k: (v, [("h", h.encode())]) for k, v, [(_, h)] in records}
    assert len({pos for pos in positions}) == 100

    # the second user reads too
    assert sum(topic_watermarks(_clients(listener, "reader", "another-Secret"), topic).high.values()) == 100


@pytest.mark.parametrize("user, password", [(USER, "wrong"), ("nobody", PASSWORD)], ids=["password", "user"])
def test_wrong_credentials_fail_fast_with_an_authentication_error(sasl_broker, sasl_topic, user, password):
    _, listener, _ = sasl_broker
    topic, _ = sasl_topic
    bad = _clients(listener, user, password)

    calls = {
        "topic_watermarks": lambda: topic_watermarks(bad, topic),
        "ensure_topic": lambda: ensure_topic(bad, "sasl.never.created", 1),
        "produce": lambda: produce(bad, topic, iter([(b"k", b"never", None)])),
        "read_partition": lambda: list(read_partition(bad, topic, 0, 0, 1)),
    }
    for name, call in calls.items():
        started = time.monotonic()
        with pytest.raises(KafkaException) as caught:
            call()
        took = time.monotonic() - started
        error = caught.value.args[0]
        assert error.code() == KafkaError._AUTHENTICATION, f"{name}: {error}"
        assert "Authentication failed" in error.str() and password not in error.str(), f"{name}: {error}"
        assert took < WRONG_FAIL_S, f"{name} took {took:.1f} s"
        print(f"{name} with a wrong {user!r}/password: {took:.1f} s: {error.str()[:160]}")
    # nothing was written with the wrong credentials
    good = _clients(listener)
    assert topic_watermarks(good, topic).high == {0: len(sasl_topic[1])}


def test_spark_kafka_source_reads_over_sasl(sasl_broker, sasl_topic, spark):
    _, listener, _ = sasl_broker
    topic, values = sasl_topic
    opts = _clients(listener).spark_options()
    assert opts["kafka.security.protocol"] == "SASL_PLAINTEXT"
    assert opts["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert "ScramLoginModule required" in opts["kafka.sasl.jaas.config"]

    df = spark.read.format("kafka").options(**opts).option("subscribe", topic).option("startingOffsets", "earliest")
    rows = df.load().select("offset", "value").collect()
    assert len(rows) == len(values)
    assert [bytes(r["value"]) for r in sorted(rows, key=lambda r: r["offset"])] == values


def test_listener_settings_are_checked(sasl_broker):
    settings, listener, _ = sasl_broker
    with pytest.raises(ValueError, match="only SCRAM-SHA-256 and SCRAM-SHA-512"):
        stack.SaslListener(1, {USER: PASSWORD}, "PLAIN")
    with pytest.raises(ValueError, match="at least one user"):
        stack.SaslListener(1, {})
    with pytest.raises(ValueError, match="a name and a password"):
        stack.SaslListener(1, {USER: ""})
    assert stack.SaslListener(1, {USER: PASSWORD}, "scram-sha-256").mechanism == "SCRAM-SHA-256"
    port = int(settings.kafka_bootstrap.rpartition(":")[2])
    with pytest.raises(ValueError, match="controller"):
        stack.start_broker(settings, sasl=stack.SaslListener(port + 1, {USER: PASSWORD}))
    # the running broker serves no SASL listener on another port: it says so at once
    with pytest.raises(RuntimeError, match="runs without a SASL listener"):
        stack.start_broker(settings, sasl=stack.SaslListener(free_port(), {USER: PASSWORD}))


def test_restart_with_the_same_users_still_authenticates(sasl_broker, sasl_topic):
    settings, listener, _ = sasl_broker
    topic, values = sasl_topic

    # running: the users are ensured again, nothing restarts
    report = stack.start_broker(settings, sasl=listener)
    assert report.startswith("Kafka broker already running") and "SASL_PLAINTEXT" in report, report

    stack.stop_broker(settings)
    started = time.monotonic()
    report = stack.start_broker(settings, sasl=listener)
    print(f"\nrestart with SASL: {time.monotonic() - started:.1f} s: {report}")
    assert "started" in report and PASSWORD not in report, report
    kafka = _clients(listener)
    assert _values(kafka, topic) == values
    assert topic_watermarks(_clients(listener, "reader", "another-Secret"), topic).high == {0: len(values)}
