"""Retry policies of the Kafka and catalog clients (tenacity), built in one place."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def on_retriable_kafka_error(timeout_s: float) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator that calls again, for up to ``timeout_s`` seconds (exponential waits up to 2 s),
    while the call raises a ``KafkaException`` that librdkafka marks retriable (a partition's
    leader moving: ``NOT_LEADER_FOR_PARTITION`` on a topic just created); then the last error is
    raised."""
    from confluent_kafka import KafkaException
    from tenacity import retry, retry_if_exception, stop_after_delay, wait_exponential

    return retry(
        retry=retry_if_exception(lambda e: isinstance(e, KafkaException) and bool(e.args[0].retriable())),
        stop=stop_after_delay(timeout_s),
        wait=wait_exponential(multiplier=0.1, max=2.0),
        reraise=True,
    )
