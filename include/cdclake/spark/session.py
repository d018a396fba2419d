"""The Spark sessions of the apply: the one place their settings are decided and sessions built.

* ``connect`` engine (the default): the table DAG's ``apply`` task opens a session of the
  long-running Spark Connect server with :func:`connect_session`; the server was started with
  :func:`spark_conf` (:mod:`cdclake_dev.engine`).
* ``submit`` engine: ``spark-submit`` runs get :func:`spark_conf` on the command line, and their
  driver (``spark_jobs/``) opens its session with :func:`submit_session`.
* Tests, the CLI and benchmarks build an in-process local session with :func:`build_session`.

Every session also gets :data:`SESSION_CONF` as its own settings when it is built, whatever the
defaults of the server or ``spark-submit`` command it runs on: a Spark Connect server started by
someone else (without :func:`spark_conf`) must not change what a run decodes.

The Iceberg catalog, credentials included, is not part of :func:`spark_conf`: each session gets it
at run time from :func:`set_catalog` (the task resolved it from its Airflow connection), so no
credential is on a command line, in a server's start-up settings, or in a DAG.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from cdclake.errors import EngineUnavailableError
from cdclake.settings import ConnectionIds, Settings, spark_jars

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdclake.io.kafka import KafkaClients

log = logging.getLogger(__name__)

LOCAL_RELATION_CACHE_THRESHOLD = "spark.sql.session.localRelationCacheThreshold"
"""Spark Connect's setting (bytes): a ``createDataFrame`` of local data at least this large is
uploaded to the server as cached artifacts (blocks of the server's block manager), smaller ones
travel in the plan."""

DATAFRAME_DEBUGGING = "spark.python.sql.dataFrameDebugging.enabled"
"""PySpark's static setting: the Python call site of each DataFrame call in the query context of
errors (a client reads it once per process, from its first active session's server)."""

SESSION_CONF = {
    # Debezium's DATETIME values are wall-clock values without a zone and TIMESTAMP values are
    # instants (cdclake.spark.decode reads neither through the session zone); any other cast or
    # literal of a timestamp in the session's SQL is read in UTC
    "spark.sql.session.timeZone": "UTC",
    # a local relation (cdclake.spark.read.read_local: up to 1,000 records, some MB of Debezium's
    # JSON) goes in the plan, not to the server's block manager as a cached artifact: Spark 4.1's
    # server keeps a closed session's cached local relations in its block manager (the heap dump of
    # the eleventh soak: 104 blocks of 52 closed sessions, 150 MiB of the engine's 206 MiB of byte
    # arrays; docs/benchmarks.md). 64 MiB: Spark 3.5's default; a relation above it is still cached
    LOCAL_RELATION_CACHE_THRESHOLD: str(64 * 2**20),
    # the parse's cache (cdclake.spark.batch) uncompressed: compressing it looks for repeats in each
    # column, value by value, and finds few (most of its bytes are the row image, kept as one struct
    # whatever this setting): 1,000,000 Avro events cached in 8.5-9.6 s instead of 10.5-10.8 s, in
    # 122 MiB instead of 113 (bench/HISTORY.md)
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
}
"""Settings of the session itself (not of the server), set on every session this module builds."""


def spark_conf(settings: Settings) -> dict[str, str]:
    """Spark settings every apply job runs with: the Iceberg SQL extensions, UTC session time
    zone, small shuffles, Spark's log level ``settings.spark_log_level``, and the redaction of
    credential-like settings in Spark's logs, UI and event logs (:data:`REDACTION_REGEX`). No
    catalog (see :func:`set_catalog`)."""
    conf = {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.redaction.regex": REDACTION_REGEX,
    }
    conf.update(SESSION_CONF)
    conf.update(
        {
            "spark.sql.shuffle.partitions": "8",
            "spark.sql.adaptive.enabled": "true",
            "spark.ui.showConsoleProgress": "false",
            # a static setting (the server's, read by its clients): PySpark's DataFrame debugging
            # records the Python call site of every DataFrame call for its error contexts, and over
            # Connect it tries `import IPython` each time, a failed import that searches the whole
            # sys.path (a table run's 540 DataFrame calls: 0.15 s of a 3.2 s run, cProfile of 20
            # runs in one session); cdclake's errors name the table, topic and offsets instead
            DATAFRAME_DEBUGGING: "false",
            # Spark >= 3.5: the level from SparkContext start-up on (log4j's INFO before it)
            "spark.log.level": settings.spark_log_level,
            "spark.driver.extraJavaOptions": f"{JIT_OPTIONS} {DRIVER_GC_OPTIONS}",
            "spark.executor.extraJavaOptions": JIT_OPTIONS,
        }
    )
    return conf


JIT_OPTIONS = "-XX:-DontCompileHugeMethods"
"""The JVM options of Spark's driver and executors: HotSpot leaves a method of more than 8,000
bytes of bytecode to the interpreter (``DontCompileHugeMethods``, on by default), and the code
Spark generates for a parse stage of a table of a dozen columns (the projections of the envelope,
its decoding and its checks, fused into one method) is larger. Measured on 1,000,000 Avro events
(bench, bench/HISTORY.md): the parse took 18.7 s interpreted, 7.6 s compiled."""


DRIVER_GC_OPTIONS = "-XX:+UseParallelGC"
"""The driver JVM's garbage collector: the parallel (throughput) collector instead of G1, the
default. A local master's driver runs the tasks too, on as many cores as the machine has, and G1's
concurrent marking and write barriers take their share of them; a batch job wants throughput, and
pauses cost it nothing. Measured on 1,000,000 Avro events, the warm apply of one
``spark-submit`` alternating the two (bench/HISTORY.md, "Avro on 2026-11-30, second sitting"):
18.2-19.0 s of job with it against 19.5-21.2 s with G1. Executors (a cluster's, whose heaps are
large) keep their JVM's default."""


REDACTION_REGEX = (
    "(?i)secret|password|passwd|token|access[.-]?key|credential|jaas|connection[.-]?string|sas[.-]|"
    r"\.header\.|authorization|private[.-]?key|keystore[.-]key|key[.-]?material|signature"
)
"""``spark.redaction.regex``: Spark's default (``secret|password|token|access[.]key``) plus the
Iceberg and Kafka names of credentials: ``s3.secret-access-key``, ``s3.access-key-id``,
``s3.session-token``, ``credential``, ``sasl.jaas.config``, Azure's ``adls.connection-string.<account>``
and ``adls.sas-token.<account>``, the REST catalog's ``header.<name>`` (``header.Authorization``,
``header.X-Api-Key``), GCS's ``gcs.oauth2.token``, private keys (Iceberg catalog properties:
Iceberg docs, "Configuration", "FileIO"; Kafka: "Security"). Settings whose name or value matches
are shown as ``*********``."""


def _set_session_conf(spark: SparkSession) -> None:
    """Set :data:`SESSION_CONF` on ``spark``'s own settings (a Connect session's are its own)."""
    for key, value in SESSION_CONF.items():
        spark.conf.set(key, value)


def set_catalog(spark: SparkSession, settings: Settings) -> None:
    """Register the Iceberg catalog ``settings.catalog_name`` in ``spark``'s session
    (:meth:`~cdclake.settings.Settings.spark_catalog_conf`, credentials included), before the
    session first uses it. Works on a classic session and on a Spark Connect session (each
    Connect session has its own settings, so another run never sees these)."""
    for key, value in settings.spark_catalog_conf().items():
        spark.conf.set(key, value)


def build_session(settings: Settings, app_name: str = "cdclake") -> SparkSession:
    """A local SparkSession (``settings.spark_master``) with the project's jars,
    :func:`spark_conf` and the catalog (:meth:`~cdclake.settings.Settings.spark_catalog_conf`).

    Raises:
        FileNotFoundError: the jars were not fetched yet (run ``make setup``).
    """
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(settings.spark_master)
        .appName(app_name)
        .config("spark.jars", ",".join(str(j) for j in spark_jars()))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
    )
    for key, value in {**spark_conf(settings), **settings.spark_catalog_conf()}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


@contextmanager
def submit_session(settings: Settings, app_name: str) -> Iterator[SparkSession]:
    """The session of a ``spark-submit`` driver (``spark_jobs/``): ``getOrCreate`` with the
    settings ``spark-submit`` passed (:func:`spark_conf`) and application name ``app_name``,
    :data:`SESSION_CONF` set and the catalog of ``settings`` registered (:func:`set_catalog`);
    stopped when the ``with`` block ends."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(app_name).getOrCreate()
    try:
        _set_session_conf(spark)
        set_catalog(spark, settings)
        yield spark
    finally:
        spark.stop()


def _public_url(url: str) -> str:
    """``url`` without its parameters (``token=`` is a credential)."""
    return url.split("/;", 1)[0]


ENGINE_WAIT_S = 60.0
"""How long :func:`connect_session` waits for a server that does not accept connections before it
fails the task (seconds): a restarted server (a deploy, a crash its supervisor restarts) takes
10-20 s to listen again, and a try that fails at once meets it down again on its Airflow retries
when restarts come close together (the soak's, bench/HISTORY.md). Within Airflow's retries
(several minutes) and below a task's ``execution_timeout``."""

ENGINE_POLL_S = 2.0
"""How often :func:`wait_for_engine` tries to connect (seconds)."""

CONNECT_RETRIES = 5
"""Retries of a Spark Connect call that found no server (backoff from 50 ms, x4 each, at most 5 s:
about 9 s in all) before the call fails; the task's clean-up calls then fail as quickly."""


def wait_for_engine(host: str, port: int, *, wait_s: float = ENGINE_WAIT_S, timeout_s: float = 5.0) -> None:
    """Return once ``host:port`` accepts a TCP connection; try every :data:`ENGINE_POLL_S` seconds
    for up to ``wait_s`` seconds (each try gives up after ``timeout_s``), saying once at warning that
    it waits.

    Raises:
        OSError: the last try's error, when nothing accepted connections within ``wait_s`` seconds.
    """
    from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

    warned = False

    def say(_: object) -> None:
        nonlocal warned
        if not warned:
            log.warning("nothing accepts connections at %s:%d yet; waiting up to %.0f s", host, port, wait_s)
            warned = True

    for attempt in Retrying(
        retry=retry_if_exception_type(OSError),
        stop=stop_after_delay(wait_s),
        wait=wait_fixed(ENGINE_POLL_S),
        before_sleep=say,
        reraise=True,
    ):
        with attempt, socket.create_connection((host, port), timeout=timeout_s):
            pass
    if warned:
        log.info("%s:%d accepts connections", host, port)


def connect_session(
    url: str,
    *,
    settings: Settings | None = None,
    conn_id: str | None = None,
    timeout_s: float = 5.0,
    wait_s: float = ENGINE_WAIT_S,
) -> SparkSession:
    """A new session of the Spark Connect server at ``url`` (``sc://host:port/;token=...``, as
    the Spark provider's ``SparkConnectHook.get_connection_url`` builds it); the caller stops it,
    also when the run fails (``try``/``finally``, as :meth:`cdclake_airflow.hooks.CdcLakeHook.spark_session`
    does): a process that ends with the session open hangs in its exit when the server died,
    because pyspark releases a ``localCheckpoint``'s server-side relation from ``__del__``, and at
    the interpreter's final garbage collection that gRPC call never returns.
    The session gets :data:`SESSION_CONF` (its server's defaults may differ); with ``settings``,
    their catalog (:func:`set_catalog`).

    Every call makes a new server-side session (``create``, never a cached one), so settings set
    on it (the snapshot summary properties of :mod:`cdclake.spark.commit`) are never seen by
    another run's session.

    A server that does not accept connections yet (restarting) is waited for, up to ``wait_s``
    seconds (:func:`wait_for_engine`).

    Raises:
        EngineUnavailableError: nothing accepted connections at the server's host and port within
            ``wait_s`` seconds (named without the token, with ``conn_id``).
    """
    from pyspark.sql import SparkSession

    parts = urlsplit(url.replace("sc://", "http://", 1))
    host, port = parts.hostname or "localhost", parts.port or 15002
    try:
        wait_for_engine(host, port, wait_s=wait_s, timeout_s=timeout_s)
    except OSError as e:
        via = f" (Airflow connection {conn_id!r})" if conn_id else ""
        raise EngineUnavailableError(
            f"the Spark Connect server {_public_url(url)}{via} does not accept connections (waited "
            f"{wait_s:.0f} s): {e}. Nothing was "
            "applied. Start it (`cdclake engine start` on the local stack) or point the connection at a "
            "running one; the task's retry runs the same plan."
        ) from e
    from pyspark.sql.connect.client.retries import DefaultPolicy

    session = SparkSession.builder.remote(url).create()
    # Spark's default retries a lost server for at least 10 minutes; a task should fail within
    # seconds instead (its Airflow retry runs the same plan on a restarted server)
    session.client.set_retry_policies([DefaultPolicy(max_retries=CONNECT_RETRIES, max_backoff=5_000)])
    _set_session_conf(session)
    if settings is not None:
        set_catalog(session, settings)
    return session


def job_connections(
    path: str | None, settings: Settings, bootstrap_servers: str | None = None
) -> tuple[Settings, KafkaClients]:
    """The settings and Kafka clients of a ``spark-submit`` job (``spark_jobs/``).

    Args:
        path: the ``--connections-file`` the task wrote (JSON ``{"catalog": <Iceberg catalog
            properties> | null, "kafka": <librdkafka client config>, "schema_registry":
            <SchemaRegistryClient config> | null}``, mode 0600; see
            :mod:`cdclake_airflow.spark_submit`), or ``None`` outside Airflow.
        settings: the job's ``CDCLAKE_*`` settings.
        bootstrap_servers: without ``path``: the plaintext cluster's ``bootstrap.servers``
            (default ``settings.kafka_bootstrap``).

    Returns:
        ``settings`` with the file's catalog (:meth:`~cdclake.settings.Settings.with_catalog`),
        and the clients of the file's Kafka config with its schema registry (without one in the
        file or without ``path``: ``CDCLAKE_SCHEMA_REGISTRY_URL``'s, if set).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ConfigError: the Kafka config has no ``bootstrap.servers``.
    """
    import json

    from cdclake.io.kafka import KafkaClients
    from cdclake.io.registry import SchemaRegistry, registry_from_settings

    if path is None:
        registry = registry_from_settings(settings)
        return settings, KafkaClients.from_bootstrap(bootstrap_servers or settings.kafka_bootstrap, registry)
    with open(path) as f:
        doc = json.load(f)
    catalog = doc.get("catalog")
    registry_config = doc.get("schema_registry")
    registry = (
        registry_from_settings(settings)
        if registry_config is None
        else SchemaRegistry(registry_config, origin=f"Airflow connection {ConnectionIds.SCHEMA_REGISTRY!r}")
    )
    kafka = KafkaClients(doc["kafka"], registry)
    return (settings if catalog is None else settings.with_catalog(catalog)), kafka


def unpersist_quietly(df: DataFrame) -> None:
    """Release ``df``'s cache (``unpersist``, not blocking) in a clean-up path; a failure (its
    server died or cannot be reached) is logged as a warning, not raised: raised from a ``finally``
    block it would replace the error that ended the run (a dead server's MERGE failure would read
    as a failed ``unpersist``), and a dead server's caches died with it."""
    try:
        df.unpersist()
    except Exception as e:  # noqa: BLE001 - clean-up: the run's own outcome or error stands
        log.warning("could not release a cached batch (it is released with its server): %s", e)
