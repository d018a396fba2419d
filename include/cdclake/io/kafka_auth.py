"""The ``error_cb`` of the project's Kafka clients that turns librdkafka's authentication failures
(and, for a report, every broker down) into errors within about a second
(:class:`AuthWatch`), and the waits that use it. Each watch is made by
:meth:`cdclake.io.kafka.KafkaClients.auth_watch`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError, Message
    from confluent_kafka.admin import ClusterMetadata  # type: ignore[attr-defined]

TIMEOUT_S = 30.0
"""Seconds a metadata, watermark or delivery call may take before it fails."""

AUTH_CHECK_S = 1.0
"""A metadata or delivery wait looks for an authentication failure this often (seconds)."""


class AuthWatch:
    """The ``error_cb`` of a client that keeps its SASL authentication failures (and that every
    broker is down: ``_ALL_BROKERS_DOWN``, connections refused or unreachable).

    librdkafka reports a failed authentication only as an error event and keeps retrying: the
    waiting call (metadata, delivery) would end after :data:`TIMEOUT_S` with "Broker transport
    failure" or a delivery timeout, never naming the credentials. Waits that use a watch look
    every :data:`AUTH_CHECK_S` and fail at once with the authentication error (a wait that is
    still unanswered after the broker refused the credentials, during this call).

    ``give_up_when_down``: fail at once on every broker down too, not after :data:`TIMEOUT_S`
    (for a report such as the status, not for a run).
    """

    def __init__(self, bootstrap: str, identity: str, *, give_up_when_down: bool = False) -> None:
        self._bootstrap = bootstrap
        self._identity = identity
        self._give_up_when_down = give_up_when_down
        self.failure: str | None = None
        self.down: str | None = None

    def __call__(self, error: KafkaError) -> None:
        from confluent_kafka import KafkaError

        # "SaslAuthenticateRequest failed: Local: ...": the connection broke during the exchange
        # (a broker restarting, a client closing), not the broker's verdict on the credentials
        if error.code() == KafkaError._AUTHENTICATION and "SaslAuthenticateRequest failed" not in error.str():
            self.failure = error.str()
        elif error.code() == KafkaError._ALL_BROKERS_DOWN:
            self.down = error.str()

    def check(self) -> None:
        """Raise the authentication failure seen, if any.

        Raises:
            confluent_kafka.KafkaException: code ``_AUTHENTICATION``; names the brokers, the
                user and the mechanism (never the password). Code ``_ALL_BROKERS_DOWN`` when
                the watch gives up on brokers that are down.
        """
        from confluent_kafka import KafkaError, KafkaException

        if self.failure is None:
            if self._give_up_when_down and self.down is not None:
                down = f"every broker of {self._bootstrap} refused the connection or is unreachable"
                raise KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN, f"{down} ({self.down})"))
            return
        raise KafkaException(
            KafkaError(
                KafkaError._AUTHENTICATION,
                f"Kafka authentication failed on {self._bootstrap} {self._identity}: {self.failure}; check the "
                "connection's sasl.username and sasl.password",
            )
        )

    def list_topics(self, client: Any, topic: str | None = None) -> ClusterMetadata:
        """``client.list_topics(topic)`` within :data:`TIMEOUT_S` (``client``: built with this
        watch as its ``error_cb``).

        Raises:
            confluent_kafka.KafkaException: the authentication failed (code ``_AUTHENTICATION``),
                or the cluster did not answer in time.
        """
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                return client.list_topics(topic, timeout=max(0.1, min(AUTH_CHECK_S, deadline - time.monotonic())))
            except KafkaException:
                client.poll(0)  # serves the error events: this watch's callback
                self.check()
                if time.monotonic() >= deadline:
                    raise

    def poll(self, consumer: Consumer, timeout_s: float) -> Message | None:
        """``consumer.poll(timeout_s)`` (``consumer``: built with this watch as its ``error_cb``).

        Raises:
            confluent_kafka.KafkaException: the authentication failed (code ``_AUTHENTICATION``).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            msg = consumer.poll(max(0.0, min(AUTH_CHECK_S, deadline - time.monotonic())))
            if msg is not None:
                self.failure = None  # the connection works (again)
                return msg
            self.check()
            if time.monotonic() >= deadline:
                return None
