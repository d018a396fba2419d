"""The schema registry of Avro topics: the one place a registry client is built
(:class:`SchemaRegistry`, over confluent-kafka's ``SchemaRegistryClient``).

Any registry serving Confluent's REST API works: Confluent Schema Registry, Apicurio Registry
through its ``ccompat`` API (base URL ``http://<host>:<port>/apis/ccompat/v7``), Redpanda,
Karapace. cdclake only reads writer schemas by id (``GET /schemas/ids/<id>``), the id each
Confluent-framed record names (:func:`cdclake.model.avro.split_wire`); ids are immutable, so
each is fetched once per process.

The config is ``SchemaRegistryClient``'s (``url``, ``basic.auth.user.info``,
``bearer.auth.token``, ``ssl.ca.location``, ``timeout``, ``max.retries``, ...): the Airflow
connection ``schema_registry`` (:class:`cdclake.settings.ConnectionIds`) is turned into it by the
hook, ``CDCLAKE_SCHEMA_REGISTRY_URL`` gives the ``url`` alone. Credentials are never logged nor
put in a message (:meth:`SchemaRegistry.describe`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from cdclake.errors import ConfigError, SchemaError, SchemaRegistryUnavailableError, UnknownSchemaIdError

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from cdclake.settings import Settings

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0
"""Seconds one HTTP request to the registry may take (``timeout``, unless the config sets it;
``SchemaRegistryClient`` waits forever by default). The client retries a request that fails
``max.retries`` times (3 by default) with a jittered backoff before it gives up."""

SCHEMA_NOT_FOUND = 40403
"""Confluent's error code of "Schema not found" (HTTP 404), which Apicurio's ``ccompat`` API and
Karapace also send; a 404 without it is a wrong URL, not an unknown id."""

_REFUSED = (401, 403)
"""HTTP statuses of credentials refused (missing, wrong, or not allowed to read schemas)."""


class SchemaRegistry:
    """Writer schemas by id from a Confluent-compatible schema registry, cached for the process.

    Args:
        config: ``SchemaRegistryClient``'s config; ``url`` is required (several, comma-separated,
            are tried in turn). Values are passed as given, plus ``timeout`` :data:`TIMEOUT_S`
            when absent.
        origin: where the config comes from, for messages (an Airflow connection id, an
            environment variable).

    Raises:
        ConfigError: no ``url``, or a config ``SchemaRegistryClient`` refuses (an unknown key,
            a malformed ``basic.auth.user.info``); the message names ``origin`` and the keys,
            never their values.
    """

    def __init__(self, config: Mapping[str, Any], origin: str = "the schema registry config") -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self._origin = origin
        url = config.get("url")
        if not url or not isinstance(url, str):
            raise ConfigError(f"schema registry config of {origin} has no 'url' (keys: {sorted(config)})")
        self._url = url
        try:
            self._client: SchemaRegistryClient = SchemaRegistryClient({"timeout": TIMEOUT_S, **config})
        except (ValueError, TypeError) as e:
            # the client's messages name keys and types, and a malformed URL, shown without user info
            reason = str(e)
            for u in url.split(","):
                reason = reason.replace(u.strip(), _without_userinfo(u.strip()))
            raise ConfigError(f"schema registry config of {origin} ({self.describe()}) is refused: {reason}") from e
        self._schemas: dict[int, dict[str, Any]] = {}

    def describe(self) -> str:
        """The registry's URL(s) without user info (``user:password@``), for messages."""
        return ",".join(_without_userinfo(u.strip()) for u in self._url.split(","))

    def writer_schema(self, schema_id: int) -> dict[str, Any]:
        """The writer schema of ``schema_id``: the Avro schema as parsed JSON (a record, with
        Kafka Connect's ``connect.*`` attributes as the converter wrote them).

        Raises:
            UnknownSchemaIdError: the registry has no schema of this id (404, error code
                :data:`SCHEMA_NOT_FOUND`).
            SchemaRegistryUnavailableError: the registry does not answer (connection refused, DNS,
                timeout after the client's retries), answers 5xx or 429, answers what is not a
                registry's JSON, or refuses the credentials (401, 403): a retry may succeed.
            ConfigError: any other HTTP error (a 404 without error code 40403 is a URL that is not
                a registry's API base, e.g. Apicurio without ``/apis/ccompat/v7``).
            SchemaError: the schema is not an Avro record schema (a Protobuf or JSON Schema id).
        """
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return cached
        # the HTTP library the client uses (httpx2 when installed, else httpx): its transport errors
        from confluent_kafka.schema_registry.common._httpx_compat import httpx
        from confluent_kafka.schema_registry.error import OAuthTokenError, SchemaRegistryError

        where = f"schema registry {self.describe()} ({self._origin})"
        try:
            schema = self._client.get_schema(schema_id)
        except SchemaRegistryError as e:
            status, code = e.http_status_code, e.error_code
            if status == 404 and code == SCHEMA_NOT_FOUND:
                raise UnknownSchemaIdError(schema_id, where) from e
            if status in _REFUSED:
                raise SchemaRegistryUnavailableError(
                    f"{where} refused the credentials (HTTP {status}) reading schema id {schema_id}: check the "
                    f"login/password or bearer token of {self._origin}"
                ) from e
            if status >= 500 or status == 429:  # 429: rate limited
                raise SchemaRegistryUnavailableError(
                    f"{where} failed reading schema id {schema_id} (HTTP {status}, error code {code}): "
                    f"{e.error_message}; the task's retry tries again"
                ) from e
            raise ConfigError(
                f"{where} answered HTTP {status} (error code {code}) reading schema id {schema_id}: "
                f"{e.error_message}. Is the URL the registry's Confluent-compatible API base (for Apicurio "
                "http://<host>:<port>/apis/ccompat/v7)?"
            ) from e
        except OAuthTokenError as e:
            raise SchemaRegistryUnavailableError(
                f"{where} gave no OAuth token (HTTP {e.status_code}) reading schema id {schema_id}: check the "
                f"bearer settings of {self._origin}"
            ) from e
        except httpx.TransportError as e:
            raise SchemaRegistryUnavailableError(
                f"{where} does not answer reading schema id {schema_id} ({type(e).__name__}: {e}); "
                "the task's retry tries again"
            ) from e
        except ValueError as e:  # not the registry's JSON (a proxy's HTML page): nothing said about the id
            raise SchemaRegistryUnavailableError(
                f"{where} answered reading schema id {schema_id} with something that is not a registry's answer "
                f"({type(e).__name__}: {e}); the task's retry tries again"
            ) from e
        if (schema.schema_type or "AVRO") != "AVRO":
            raise SchemaError(f"schema id {schema_id} of {where} is a {schema.schema_type} schema, not Avro")
        parsed = json.loads(schema.schema_str or "null")
        if not isinstance(parsed, dict) or parsed.get("type") != "record":
            raise SchemaError(f"schema id {schema_id} of {where} is not an Avro record schema: {parsed!r:.200}")
        log.info("schema id %d read from %s", schema_id, self.describe())
        self._schemas[schema_id] = parsed
        return parsed


def registry_from_settings(settings: Settings) -> SchemaRegistry | None:
    """The registry of ``CDCLAKE_SCHEMA_REGISTRY_URL`` (the CLI's, the local stack's, a job's without
    an Airflow connection), or ``None`` when it is not set."""
    url = settings.schema_registry_url
    return SchemaRegistry({"url": url}, origin="CDCLAKE_SCHEMA_REGISTRY_URL") if url else None


def _without_userinfo(url: str) -> str:
    """``url`` without the ``user:password@`` part of its authority."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
