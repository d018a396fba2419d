"""Retry policies of the Kafka and catalog clients (tenacity), built in one place."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def on_retriable_kafka_error(timeout_s: float) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator that calls again, for up to ``timeout_s`` seconds (exponential waits up to 2 s),
    while the call raises a ``KafkaException`` that librdkafka marks retriable, or one of
    :data:`PARTITION_SETTLING` (a topic just created, or a partition's leader moving: the broker's
    metadata shows the topic before every partition has its leader); then the last error is raised."""
    from tenacity import retry, retry_if_exception, stop_after_delay, wait_exponential

    return retry(
        retry=retry_if_exception(_retriable_kafka_error),
        stop=stop_after_delay(timeout_s),
        wait=wait_exponential(multiplier=0.1, max=2.0),
        reraise=True,
    )


PARTITION_SETTLING = frozenset(
    {"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_PARTITION", "LEADER_NOT_AVAILABLE", "NOT_LEADER_FOR_PARTITION"}
)
"""librdkafka error names (``KafkaError.name()``) of a partition still being created or moving to
another leader: retried whether or not librdkafka marks them retriable (a reconcile task failed on
the signal topic its sibling task's marker had just created)."""


def _retriable_kafka_error(e: BaseException) -> bool:
    from confluent_kafka import KafkaError, KafkaException

    if not isinstance(e, KafkaException) or not e.args or not isinstance(e.args[0], KafkaError):
        return False
    error = e.args[0]
    return bool(error.retriable()) or error.name() in PARTITION_SETTLING
