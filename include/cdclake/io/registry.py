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
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from cdclake.errors import ConfigError, SchemaError, SchemaRegistryUnavailableError, UnknownSchemaIdError

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from cdclake.settings import Settings

log = logging.getLogger(__name__)

_T = TypeVar("_T")

TIMEOUT_S = 10.0
"""Seconds one HTTP request to the registry may take (``timeout``, unless the config sets it;
``SchemaRegistryClient`` waits forever by default). The client retries a request that fails
``max.retries`` times (3 by default) with a jittered backoff before it gives up."""

SCHEMA_NOT_FOUND = 40403
"""Confluent's error code of "Schema not found" (HTTP 404), which Apicurio's ``ccompat`` API and
Karapace also send; a 404 without it is a wrong URL, not an unknown id."""

SUBJECT_NOT_FOUND = 40401
"""Confluent's error code of "Subject not found" (HTTP 404), Apicurio's ``ccompat`` API's too."""

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
        schema = self._request(f"reading schema id {schema_id}", lambda: self._client.get_schema(schema_id))
        if isinstance(schema, _NotFound):
            if schema.code == SCHEMA_NOT_FOUND:
                raise UnknownSchemaIdError(schema_id, self._where)
            raise schema.as_config_error()
        parsed = _avro_record(schema.schema_type, schema.schema_str, f"schema id {schema_id} of {self._where}")
        log.info("schema id %d read from %s", schema_id, self.describe())
        self._schemas[schema_id] = parsed
        return parsed

    def subject_schemas(self, subject: str, latest: int) -> dict[int, dict[str, Any]] | None:
        """The writer schemas of the ``latest`` newest versions of ``subject``: schema id ->
        schema, as :meth:`writer_schema` gives it (and cached with it). A version whose schema is
        not an Avro record is left out.

        Debezium's converters register a topic's value schemas under ``<topic>-value`` (Confluent's
        ``TopicNameStrategy``, Apicurio's ``TopicIdStrategy``): the ids a topic's records name
        without reading them (:func:`cdclake.spark.parse_avro.subject_writer_schemas`).

        Returns:
            ``None`` when the registry has no such subject (404, error code
            :data:`SUBJECT_NOT_FOUND`: another naming strategy, or a registry that lists none).

        Raises:
            SchemaRegistryUnavailableError, ConfigError: as :meth:`writer_schema`.
        """
        what = f"listing the versions of subject {subject!r}"
        versions = self._request(what, lambda: self._client.get_versions(subject))
        if isinstance(versions, _NotFound):
            if versions.code == SUBJECT_NOT_FOUND:
                return None
            raise versions.as_config_error()
        out: dict[int, dict[str, Any]] = {}
        for version in sorted(versions)[-latest:] if latest > 0 else ():
            what = f"reading version {version} of subject {subject!r}"
            registered = self._request(what, partial(self._client.get_version, subject, version))
            if isinstance(registered, _NotFound):  # deleted since listed
                continue
            schema_id = registered.schema_id
            if schema_id is None:
                continue
            if schema_id not in self._schemas:
                try:
                    schema = _avro_record(
                        registered.schema.schema_type, registered.schema.schema_str, f"{subject!r} version {version}"
                    )
                except SchemaError:
                    continue
                self._schemas[schema_id] = schema
            out[schema_id] = self._schemas[schema_id]
        return out

    @property
    def _where(self) -> str:
        return f"schema registry {self.describe()} ({self._origin})"

    def _request(self, what: str, call: Callable[[], _T]) -> _T | _NotFound:
        """``call()`` (a request of the client), its errors mapped: a 404 is returned as
        :class:`_NotFound` for the caller to read; the others raise as :meth:`writer_schema` says."""
        # the HTTP library the client uses (httpx2 when installed, else httpx): its transport errors
        from confluent_kafka.schema_registry.common._httpx_compat import httpx
        from confluent_kafka.schema_registry.error import OAuthTokenError, SchemaRegistryError

        where = self._where
        try:
            return call()
        except SchemaRegistryError as e:
            status, code = e.http_status_code, e.error_code
            if status == 404:
                return _NotFound(code, f"{where} answered HTTP 404 (error code {code}) {what}: {e.error_message}")
            if status in _REFUSED:
                raise SchemaRegistryUnavailableError(
                    f"{where} refused the credentials (HTTP {status}) {what}: check the "
                    f"login/password or bearer token of {self._origin}"
                ) from e
            if status >= 500 or status == 429:  # 429: rate limited
                raise SchemaRegistryUnavailableError(
                    f"{where} failed {what} (HTTP {status}, error code {code}): "
                    f"{e.error_message}; the task's retry tries again"
                ) from e
            raise ConfigError(
                f"{where} answered HTTP {status} (error code {code}) {what}: {e.error_message}. {_API_BASE_HINT}"
            ) from e
        except OAuthTokenError as e:
            raise SchemaRegistryUnavailableError(
                f"{where} gave no OAuth token (HTTP {e.status_code}) {what}: check the "
                f"bearer settings of {self._origin}"
            ) from e
        except httpx.TransportError as e:
            raise SchemaRegistryUnavailableError(
                f"{where} does not answer {what} ({type(e).__name__}: {e}); the task's retry tries again"
            ) from e
        except ValueError as e:  # not the registry's JSON (a proxy's HTML page): nothing said about the id
            raise SchemaRegistryUnavailableError(
                f"{where} answered {what} with something that is not a registry's answer "
                f"({type(e).__name__}: {e}); the task's retry tries again"
            ) from e


_API_BASE_HINT = (
    "Is the URL the registry's Confluent-compatible API base (for Apicurio http://<host>:<port>/apis/ccompat/v7)?"
)


class _NotFound:
    """A 404 answer: its Confluent error code and the message of a :class:`ConfigError` when no
    caller expects it (a 404 without a registry's error code is a URL that is no registry's API)."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        self.message = message

    def as_config_error(self) -> ConfigError:
        return ConfigError(f"{self.message}. {_API_BASE_HINT}")


def _avro_record(schema_type: str | None, schema_str: str | None, what: str) -> dict[str, Any]:
    """The parsed Avro record schema of a registry answer.

    Raises:
        SchemaError: a schema of another type (Protobuf, JSON Schema) or an Avro schema that is
            not a record.
    """
    if (schema_type or "AVRO") != "AVRO":
        raise SchemaError(f"{what} is a {schema_type} schema, not Avro")
    parsed = json.loads(schema_str or "null")
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise SchemaError(f"{what} is not an Avro record schema: {parsed!r:.200}")
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
