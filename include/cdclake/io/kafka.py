"""Kafka I/O with confluent-kafka: every Kafka client of the project is built here, by
:class:`KafkaClients`, from one client config.

The client config is librdkafka's (``bootstrap.servers``, ``security.protocol``,
``sasl.mechanism``, ``sasl.username``, ``sasl.password``, ``ssl.ca.location``, ...): the ``extra``
of an Airflow Kafka connection (the Apache Kafka provider's connection shape) is exactly that, and
the Airflow side hands it over whole, security settings included. :meth:`KafkaClients.spark_options`
translates it for Spark's Kafka source, which runs the Java client.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdclake.errors import CdcLakeError, ConfigError, OffsetsOutOfRangeError, TopicNotFoundError
from cdclake.io.kafka_auth import AUTH_CHECK_S, TIMEOUT_S, AuthWatch
from cdclake.io.kafka_logging import librdkafka_logger
from cdclake.model.hints import did_you_mean

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message, Producer
    from confluent_kafka.admin import AdminClient

    from cdclake.io.registry import SchemaRegistry
    from cdclake.model.avro import SchemaLookup
    from cdclake.settings import Settings

log = logging.getLogger(__name__)


ISOLATION_LEVEL = "read_committed"
"""Kafka's ``isolation.level`` of every reader here, librdkafka's consumers and Spark's Kafka
source alike: records of an aborted transaction (Kafka Connect's exactly-once source support
writes each batch of a connector in a transaction) and transaction markers are never read, and a
partition ends at its last stable offset, the first offset of a transaction still open, which is
also the high watermark a read-committed consumer reports (:func:`topic_watermarks`). librdkafka
reads committed by default, the Java client (Spark) does not; both are told explicitly."""

_CONSUMER_DEFAULTS = {"enable.auto.commit": False, "log_level": 3, "isolation.level": ISOLATION_LEVEL}
"""Our consumers read assigned offset ranges and never commit offsets to Kafka (the table's
Iceberg commit holds them); ``log_level`` 3 keeps librdkafka's notices out of task logs."""

_GROUP_KEYS = frozenset(
    {
        "group.id",
        "auto.offset.reset",
        "enable.auto.commit",
        "enable.partition.eof",
        "session.timeout.ms",
        "isolation.level",
    }
)
"""Consumer settings of a shared connection: each client here sets its own."""

_SPARK_PASS_THROUGH = frozenset(
    {
        "bootstrap.servers",
        "security.protocol",
        "client.id",
        "client.dns.lookup",
        "ssl.endpoint.identification.algorithm",
        "ssl.key.password",
        "request.timeout.ms",
        "socket.connection.setup.timeout.ms",
        "metadata.max.age.ms",
        "reconnect.backoff.ms",
        "reconnect.backoff.max.ms",
        "retry.backoff.ms",
        "sasl.kerberos.service.name",
        "isolation.level",
    }
)
"""librdkafka properties whose Java client property has the same name and meaning."""

_SPARK_NOT_NEEDED = frozenset(
    {
        "group.id",
        "auto.offset.reset",
        "enable.auto.commit",
        "log_level",
        "debug",
        "partitioner",
        "enable.idempotence",
        "linger.ms",
        "acks",
        "enable.partition.eof",
        "session.timeout.ms",
    }
)
"""Consumer-group, producer and logging properties: Spark's Kafka source manages these itself
(it assigns offsets explicitly and never joins a group), so they are not passed on."""


@dataclass(frozen=True)
class Watermarks:
    """Per-partition offsets of a topic: ``low`` (first kept) and ``high`` (the end a reader of
    committed records may read up to: the last stable offset, which is the high watermark, the next
    offset to be written, unless a transaction is open; :data:`ISOLATION_LEVEL`)."""

    low: dict[int, int]
    high: dict[int, int]


class KafkaClients:
    """Builds every Kafka client (consumer, producer, admin, Spark source options) from one
    librdkafka client config.

    Args:
        config: librdkafka properties; ``bootstrap.servers`` is required. Values are passed as
            given (an Airflow Kafka connection's ``extra``).
        schema_registry: the schema registry of the cluster's Avro topics
            (``value_format: avro``), or ``None`` when none is configured; everything that
            reads the topics takes it from here.

    Raises:
        ConfigError: no ``bootstrap.servers``, or an ``isolation.level`` other than
            :data:`ISOLATION_LEVEL`.
    """

    def __init__(self, config: Mapping[str, Any], schema_registry: SchemaRegistry | None = None) -> None:
        if not config.get("bootstrap.servers"):
            raise ConfigError(f"Kafka client config has no 'bootstrap.servers' (keys: {sorted(config)})")
        if config.get("isolation.level", ISOLATION_LEVEL) != ISOLATION_LEVEL:
            raise ConfigError(
                f"Kafka client config has isolation.level={config['isolation.level']!r}: cdclake reads "
                f"{ISOLATION_LEVEL!r} records only (an aborted transaction's records must never be applied); "
                "remove the property from the connection"
            )
        self._config = dict(config)
        self.schema_registry = schema_registry
        self._metadata: tuple[Consumer, AuthWatch] | None = None
        self._metadata_lock = threading.Lock()

    @classmethod
    def from_bootstrap(cls, servers: str, schema_registry: SchemaRegistry | None = None) -> KafkaClients:
        """Clients of a plaintext cluster known only by its ``bootstrap.servers``."""
        return cls({"bootstrap.servers": servers}, schema_registry)

    @classmethod
    def from_settings(cls, settings: Settings) -> KafkaClients:
        """Clients of the settings' plaintext cluster (``CDCLAKE_KAFKA_BOOTSTRAP``) with the schema
        registry of ``CDCLAKE_SCHEMA_REGISTRY_URL``, if set: the CLI's and the local stack's."""
        from cdclake.io.registry import registry_from_settings

        return cls.from_bootstrap(settings.kafka_bootstrap, registry_from_settings(settings))

    @property
    def schema_lookup(self) -> SchemaLookup | None:
        """The writer schema of a schema id from :attr:`schema_registry`
        (:meth:`~cdclake.io.registry.SchemaRegistry.writer_schema`), or ``None`` without a
        registry: the ``schema_lookup`` of :func:`cdclake.model.envelope.parse_value`."""
        return self.schema_registry.writer_schema if self.schema_registry is not None else None

    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers``."""
        return str(self._config["bootstrap.servers"])

    def __repr__(self) -> str:  # never the config: it may hold credentials
        return f"KafkaClients(bootstrap.servers={self.bootstrap!r})"

    def _client_config(self, **overrides: Any) -> dict[str, Any]:
        conf = {k: v for k, v in self._config.items() if k not in _GROUP_KEYS}
        conf.setdefault("log_level", 3)
        conf.setdefault("logger", librdkafka_logger())
        conf.update(overrides)
        return conf

    def consumer(self, group_id: str, **overrides: Any) -> Consumer:
        """A consumer that never commits offsets (reads assigned ranges only; ``overrides``:
        further librdkafka properties)."""
        from confluent_kafka import Consumer

        return Consumer({**self._client_config(), **_CONSUMER_DEFAULTS, "group.id": group_id, **overrides})

    def auth_watch(self, *, give_up_when_down: bool = False) -> AuthWatch:
        """A new :class:`~cdclake.io.kafka_auth.AuthWatch` of these clients' brokers and SASL
        identity (user and mechanism, never the password), to give a client as its ``error_cb``."""
        mechanism = self._config.get("sasl.mechanism") or self._config.get("sasl.mechanisms")
        identity = f"as user {self._config.get('sasl.username')!r} ({mechanism})"
        return AuthWatch(self.bootstrap, identity, give_up_when_down=give_up_when_down)

    @contextmanager
    def metadata_consumer(self) -> Iterator[tuple[Consumer, AuthWatch]]:
        """The consumer of this object's metadata and watermark calls (:func:`topic_watermarks`)
        with its :class:`AuthWatch`, one call at a time. It is built at its first use and kept
        until :meth:`close`, or until a call through it fails (other than with a
        :class:`~cdclake.errors.CdcLakeError`, such as a topic that does not exist): a consumer of its own per call
        connects anew each time (about 50 ms on a local broker; a table run asks 4 times).
        librdkafka reconnects a kept consumer after a broker restart by itself."""
        with self._metadata_lock:
            if self._metadata is None:
                watch = self.auth_watch()
                self._metadata = (self.consumer("cdclake-watermarks", error_cb=watch), watch)
            consumer, watch = self._metadata
            watch.failure = None  # an authentication failure of this call, not of an earlier one
            try:
                yield consumer, watch
            except CdcLakeError:  # an answer (no such topic), not a failure of the consumer
                raise
            except BaseException:
                self._metadata = None
                consumer.close()
                raise

    def close(self) -> None:
        """Close the kept metadata consumer, if any (:meth:`metadata_consumer`); the object
        stays usable."""
        with self._metadata_lock:
            if self._metadata is not None:
                consumer, _ = self._metadata
                self._metadata = None
                consumer.close()

    def producer(self, **overrides: Any) -> Producer:
        """An idempotent producer (``overrides``: further librdkafka producer properties)."""
        from confluent_kafka import Producer

        return Producer(self._client_config(**{"enable.idempotence": True, **overrides}))

    def admin(self, **overrides: Any) -> AdminClient:
        """An admin client (``overrides``: further librdkafka properties)."""
        from confluent_kafka.admin import AdminClient

        return AdminClient(self._client_config(**overrides))

    def spark_options(self) -> dict[str, str]:
        """The config as options of Spark's Kafka source (``kafka.<Java client property>``).

        ``sasl.mechanism(s)`` + ``sasl.username`` / ``sasl.password`` become
        ``kafka.sasl.mechanism`` and a ``kafka.sasl.jaas.config`` (PLAIN or SCRAM login module);
        ``ssl.ca.location`` (a PEM file) becomes a PEM truststore. Group, producer and logging
        properties are left out (:data:`_SPARK_NOT_NEEDED`). ``kafka.isolation.level`` is always
        :data:`ISOLATION_LEVEL` (the Java client's default reads aborted records).

        Raises:
            ConfigError: a property with no Java client equivalent known here (names it).
        """
        opts: dict[str, str] = {}
        unknown = []
        for key, value in self._config.items():
            if key in _SPARK_PASS_THROUGH:
                opts[f"kafka.{key}"] = str(value)
            elif key in ("sasl.mechanism", "sasl.mechanisms"):
                opts["kafka.sasl.mechanism"] = str(value)
            elif key == "ssl.ca.location":
                opts["kafka.ssl.truststore.type"] = "PEM"
                opts["kafka.ssl.truststore.location"] = str(value)
            elif key in ("sasl.username", "sasl.password") or key in _SPARK_NOT_NEEDED:
                continue
            else:
                unknown.append(key)
        if unknown:
            raise ConfigError(
                f"Kafka client properties {sorted(unknown)} have no Spark Kafka source equivalent "
                "known to cdclake; remove them from the connection or add their Java client name"
            )
        if "sasl.username" in self._config:
            mechanism = opts.get("kafka.sasl.mechanism", "PLAIN").upper()
            module = (
                "org.apache.kafka.common.security.plain.PlainLoginModule"
                if mechanism == "PLAIN"
                else "org.apache.kafka.common.security.scram.ScramLoginModule"
            )
            user = _jaas_quoted(str(self._config["sasl.username"]))
            password = _jaas_quoted(str(self._config.get("sasl.password", "")))
            opts["kafka.sasl.jaas.config"] = f"{module} required username={user} password={password};"
        opts["kafka.isolation.level"] = ISOLATION_LEVEL
        return opts


def _jaas_quoted(value: str) -> str:
    """``value`` as a double-quoted JAAS option value: the Java client reads the config with a
    ``StreamTokenizer``, which takes a backslash as an escape, so both ``\\`` and ``"`` are escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def topic_watermarks(kafka: KafkaClients, topic: str, *, suggest: bool = False) -> Watermarks:
    """Low and high watermarks of every partition of ``topic``.

    A partition whose leader moves (a topic just created) is asked again for up to :data:`TIMEOUT_S` s.

    Args:
        suggest: when the topic does not exist, ask for the cluster's topics (one more metadata
            request) and end the error's message with the nearest one (:func:`topic_hint`): for
            a topic a person configured, not one probed for (a transaction topic that may be
            absent), whose absence is no mistake.

    Raises:
        TopicNotFoundError: the topic does not exist; with ``suggest``, ``Kafka topic
            'cdc.inventory.productz' does not exist on <bootstrap>; did you mean
            'cdc.inventory.products'?`` when the cluster has a topic that near.
        confluent_kafka.KafkaException: the broker refused the credentials (code
            ``_AUTHENTICATION``, within about a second), or did not answer (or kept a retriable
            error) within :data:`TIMEOUT_S`.
    """
    from confluent_kafka import TopicPartition

    from cdclake.io.retry import on_retriable_kafka_error

    ask = on_retriable_kafka_error(TIMEOUT_S)
    with kafka.metadata_consumer() as (consumer, watch):
        meta = watch.list_topics(consumer, topic)
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None or not tmeta.partitions:
            hint = _cluster_topic_hint(watch, consumer, topic) if suggest else ""
            raise TopicNotFoundError(f"Kafka topic {topic!r} does not exist on {kafka.bootstrap}{hint}")
        low, high = {}, {}
        for p in sorted(tmeta.partitions):
            low[p], high[p] = ask(consumer.get_watermark_offsets)(TopicPartition(topic, p), timeout=TIMEOUT_S)
        return Watermarks(low, high)


SETTLE_QUIET_S = 1.0
"""How long a topic's high watermarks must hold still for :func:`settled_watermarks` (seconds)."""

SETTLE_MOST_S = 10.0
"""How long :func:`settled_watermarks` waits at most (seconds): a topic with steady traffic never
holds still, and its in-flight records are written well within this."""


def settled_watermarks(
    kafka: KafkaClients, topic: str, *, quiet_s: float = SETTLE_QUIET_S, most_s: float = SETTLE_MOST_S
) -> Watermarks:
    """The watermarks of ``topic`` once its high watermarks have held still for ``quiet_s``
    seconds, or after ``most_s`` seconds (the last read then).

    For a caller that saw a record on one topic or partition and wants the end offsets of the
    records written before it on others: a producer orders records within a partition only, so
    Kafka Connect can deliver a connector's earlier records to other partitions (or topics) after
    a later one, until its in-flight batches are written (seen in the chain's 3-partition topics).

    Raises:
        TopicNotFoundError, confluent_kafka.KafkaException: as :func:`topic_watermarks`.
    """
    deadline = time.monotonic() + most_s
    marks = topic_watermarks(kafka, topic)
    while time.monotonic() < deadline:
        time.sleep(min(quiet_s, max(0.0, deadline - time.monotonic())))
        now = topic_watermarks(kafka, topic)
        if now.high == marks.high:
            return now
        marks = now
    return marks


def topic_hint(topic: str, topics: Iterable[str]) -> str:
    """``"; did you mean 'cdc.inventory.products'?"`` when one of ``topics`` (a cluster's, Kafka's
    internal ``__*`` topics left out) is near ``topic`` (:func:`~cdclake.model.hints.near_match`);
    ``""`` otherwise."""
    return did_you_mean(topic, (t for t in topics if not t.startswith("__")))


def _cluster_topic_hint(watch: AuthWatch, consumer: Consumer, topic: str) -> str:
    """:func:`topic_hint` among the cluster's topics; ``""`` when the cluster does not answer."""
    from confluent_kafka import KafkaException

    try:
        return topic_hint(topic, watch.list_topics(consumer).topics)
    except KafkaException as e:
        log.debug("no topic near %r: the cluster's topics were not listed: %s", topic, e)
        return ""


def topics_watermarks(
    kafka: KafkaClients, topics: Iterable[str], *, give_up_when_down: bool = False
) -> dict[str, Watermarks | None]:
    """Low and high watermarks of every partition of each of ``topics`` (``None``: the topic does
    not exist), through one consumer and one metadata request: what :func:`topic_watermarks`
    gives per topic, for many topics at the cost of one connection. A partition whose leader
    moves (a topic just created, a broker just restarted) is asked again for up to
    :data:`TIMEOUT_S` s, as :func:`topic_watermarks` does.

    Raises:
        confluent_kafka.KafkaException: the cluster did not answer within :data:`TIMEOUT_S`, or
            refused the credentials (code ``_AUTHENTICATION``, within about a second), or, with
            ``give_up_when_down``, every broker is down (``_ALL_BROKERS_DOWN``, about a second).
    """
    from confluent_kafka import TopicPartition

    from cdclake.io.retry import on_retriable_kafka_error

    wanted = list(dict.fromkeys(topics))
    if not wanted:
        return {}
    watch = kafka.auth_watch(give_up_when_down=give_up_when_down)
    consumer = kafka.consumer("cdclake-watermarks", error_cb=watch)
    ask = on_retriable_kafka_error(TIMEOUT_S)
    try:
        meta = watch.list_topics(consumer)
        out: dict[str, Watermarks | None] = {}
        for topic in wanted:
            tmeta = meta.topics.get(topic)
            if tmeta is None or tmeta.error is not None or not tmeta.partitions:
                out[topic] = None
                continue
            low, high = {}, {}
            for p in sorted(tmeta.partitions):
                low[p], high[p] = ask(consumer.get_watermark_offsets)(TopicPartition(topic, p), timeout=TIMEOUT_S)
            out[topic] = Watermarks(low, high)
        return out
    finally:
        consumer.close()


def topic_id(kafka: KafkaClients, topic: str) -> str | None:
    """Kafka's id of ``topic`` (KIP-516: a topic deleted and created again under the same name gets
    a new one), as its text; ``None`` when the broker gives none (brokers before Kafka 2.8).

    Raises:
        TopicNotFoundError: the topic does not exist.
        confluent_kafka.KafkaException: the broker did not answer within :data:`TIMEOUT_S`.
    """
    from confluent_kafka import KafkaError, KafkaException, TopicCollection

    admin = kafka.admin()
    try:
        description = admin.describe_topics(TopicCollection([topic]), request_timeout=TIMEOUT_S)[topic].result(
            TIMEOUT_S
        )
    except KafkaException as e:
        if e.args and getattr(e.args[0], "code", lambda: None)() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise TopicNotFoundError(f"Kafka topic {topic!r} does not exist") from e
        raise
    found = str(description.topic_id) if description.topic_id is not None else ""
    return found if found and found != "AAAAAAAAAAAAAAAAAAAAAA" else None  # the zero id: none given


def topic_exists(kafka: KafkaClients, topic: str) -> bool:
    """Whether ``topic`` exists (with at least one partition)."""
    try:
        topic_watermarks(kafka, topic)
    except TopicNotFoundError:
        return False
    return True


def offsets_for_time(kafka: KafkaClients, topic: str, timestamp_ms: int) -> dict[int, int]:
    """Per partition, the earliest offset whose record timestamp is >= ``timestamp_ms`` (epoch
    ms), or the high watermark where no record is that new (Kafka's ``offsetsForTimes``).

    Raises:
        TopicNotFoundError: the topic does not exist.
    """
    from confluent_kafka import TopicPartition

    marks = topic_watermarks(kafka, topic)
    consumer = kafka.consumer("cdclake-offsets-for-times")
    try:
        found = consumer.offsets_for_times(
            [TopicPartition(topic, p, timestamp_ms) for p in marks.high], timeout=TIMEOUT_S
        )
        return {tp.partition: (tp.offset if tp.offset >= 0 else marks.high[tp.partition]) for tp in found}
    finally:
        consumer.close()


def ensure_topic(kafka: KafkaClients, topic: str, partitions: int, *, give_up_when_down: bool = False) -> bool:
    """Create ``topic`` with ``partitions`` partitions unless it exists. Returns whether created.

    Raises:
        confluent_kafka.KafkaException: the broker refused the credentials (code
            ``_AUTHENTICATION``, within about a second), or did not answer within :data:`TIMEOUT_S`,
            or, with ``give_up_when_down``, every broker is down (``_ALL_BROKERS_DOWN``, about a second).
    """
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # re-exported at run time

    watch = kafka.auth_watch(give_up_when_down=give_up_when_down)
    admin = kafka.admin(error_cb=watch)
    if topic in watch.list_topics(admin).topics:
        return False
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    futures[topic].result(timeout=TIMEOUT_S)
    log.info("created topic %r with %d partition(s)", topic, partitions)
    return True


def read_partition(
    kafka: KafkaClients,
    topic: str,
    partition: int,
    low: int,
    high: int,
    *,
    group_id: str = "cdclake-reader",
    timeout_s: float = TIMEOUT_S,
) -> Iterator[Message]:
    """Yield every record (a confluent-kafka ``Message``) of ``topic``/``partition`` in
    ``[low, high)``, in offset order.

    Offsets missing from the log (compacted away) or never read (transaction markers, records of
    aborted transactions: :data:`ISOLATION_LEVEL`) are skipped, also at the end of the range: the
    read ends at a record at or beyond ``high`` or at the partition's end (its last stable offset)
    at or beyond ``high``.

    ``low`` must still be in the log: the consumer never jumps elsewhere (``auto.offset.reset``
    ``error``). Without it librdkafka's default (``largest``) would move a read whose start
    retention had just deleted to the partition's end, and the range would look read, empty.

    Raises:
        TimeoutError: no record arrived within ``timeout_s`` seconds while offsets below ``high``
            were still unread; names the topic, partition and offset.
        OffsetsOutOfRangeError: ``low`` is no longer in the log (retention deleted it, or the topic
            was recreated); names the topic, partition and offset.
        confluent_kafka.KafkaException: the broker reported an error for the partition, or
            refused the credentials (code ``_AUTHENTICATION``, within about a second).
    """
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    if low >= high:
        return
    watch = kafka.auth_watch()
    # the end-of-partition event tells where the partition ends when the last offsets below
    # ``high`` hold no record to read (a transaction's commit marker, typically)
    consumer = kafka.consumer(group_id, error_cb=watch, **{"enable.partition.eof": True, "auto.offset.reset": "error"})
    try:
        consumer.assign([TopicPartition(topic, partition, low)])
        next_offset = low
        while next_offset < high:
            msg = watch.poll(consumer, timeout_s)
            if msg is None:
                raise TimeoutError(
                    f"topic {topic!r} partition {partition}: no record at offset {next_offset} "
                    f"within {timeout_s:.0f} s (high watermark {high})"
                )
            error, offset = msg.error(), msg.offset() or 0
            if error is not None:
                if error.code() == KafkaError._AUTO_OFFSET_RESET:
                    raise OffsetsOutOfRangeError(
                        f"topic {topic!r} partition {partition}: offset {next_offset} is no longer in Kafka "
                        f"(read from offset {low}; {error.str()}): events were deleted by retention, or the topic "
                        "was recreated, before they were applied. Re-snapshot the table with the snapshot-bootstrap "
                        "DAG, then replay from the snapshot's start."
                    )
                if error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                next_offset = max(next_offset, offset)  # the end: nothing to read below it
                continue
            if offset >= high:
                return
            next_offset = offset + 1
            yield msg
    finally:
        consumer.close()


def oldest_timestamps(kafka: KafkaClients, topic: str, low: dict[int, int], high: dict[int, int]) -> dict[int, int]:
    """The Kafka timestamp (epoch ms) of the first record at or after ``low[p]`` of each partition
    ``p`` of ``low`` that holds one below ``high[p]`` (one record read per partition).

    Raises:
        TimeoutError, confluent_kafka.KafkaException: see :func:`read_partition`.
    """
    found: dict[int, int] = {}
    for p, start in sorted(low.items()):
        for msg in read_partition(kafka, topic, p, start, high[p], group_id="cdclake-oldest-timestamp"):
            found[p] = msg.timestamp()[1]
            break
    return found


def read_topic(kafka: KafkaClients, topic: str, *, group_id: str = "cdclake-reader") -> Iterator[Message] | None:
    """Every record now in ``topic`` (each partition from its low to its high watermark), or
    ``None`` when the topic does not exist."""
    try:
        marks = topic_watermarks(kafka, topic)
    except TopicNotFoundError:
        return None

    def records() -> Iterator[Message]:
        for p in sorted(marks.high):
            yield from read_partition(kafka, topic, p, marks.low[p], marks.high[p], group_id=group_id)

    return records()


def produce(
    kafka: KafkaClients,
    topic: str,
    records: Iterator[tuple[bytes | None, bytes | None, list[tuple[str, str | bytes | None]] | None]],
    **producer_config: Any,
) -> list[tuple[int, int]]:
    """Produce ``(key, value, headers)`` records to ``topic`` and wait for every delivery.

    Returns:
        ``(partition, offset)`` of each record, in the order given.

    Raises:
        RuntimeError: the broker rejected a record, or deliveries did not finish within
            :data:`TIMEOUT_S` (or a millisecond per record, if longer; names the topic and the
            first errors).
        confluent_kafka.KafkaException: the broker refused the credentials (code
            ``_AUTHENTICATION``; raised as soon as seen while records wait).
    """
    watch = kafka.auth_watch()
    producer = kafka.producer(**{"error_cb": watch, **producer_config})
    delivered: dict[int, tuple[int, int]] = {}
    errors: list[str] = []
    count = 0
    for index, (key, value, headers) in enumerate(records):

        def on_delivery(err: Any, msg: Any, index: int = index) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                delivered[index] = (msg.partition(), msg.offset())

        while True:
            try:
                producer.produce(topic, key=key, value=value, headers=headers, on_delivery=on_delivery)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.5)
        producer.poll(0)
        count += 1
    deadline = time.monotonic() + max(TIMEOUT_S, count / 1000)
    while producer.flush(max(0.0, min(AUTH_CHECK_S, deadline - time.monotonic()))):
        watch.check()  # records still queued: fail at once when the credentials were refused
        if time.monotonic() >= deadline:
            break
    if errors or len(delivered) != count:
        raise RuntimeError(f"producing to {topic!r} failed: {errors[:3] or 'delivery timed out'}")
    return [delivered[i] for i in range(count)]
