"""Kafka Connect's REST API: the state, source offsets and topics of the Debezium connectors (the
one client of it; built from the Airflow connection ``kafka_connect`` by
:meth:`cdclake_airflow.hooks.CdcLakeHook.kafka_connect`, or from ``CDCLAKE_CONNECT_URL`` by
:func:`connect_from_settings`).

Read only: ``GET /connectors?expand=status&expand=info`` (every connector's state and config, one
call), ``GET /connectors/<name>/status``, ``GET /connectors/<name>/offsets`` (Kafka Connect 3.5+,
KIP-875) and ``GET /connectors/<name>/topics`` (KIP-558). Of a connector's config only
``topic.prefix`` is kept: the rest (which may hold the database password) is dropped as read,
never logged. Credentials (basic auth, a client certificate) stay in the client (not in its
``repr``); errors name the base URL, which never holds them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from cdclake.model.source_health import ConnectorHealth
from cdclake.settings import Settings

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0
"""Seconds a REST call may take (to connect, then to read) unless the connection says otherwise."""


class ConnectUnreachableError(Exception):
    """Kafka Connect did not answer (or refused the request): its message says why, in one line."""


@dataclass(frozen=True)
class KafkaConnect:
    """Where Kafka Connect's REST API is and how to reach it.

    Attributes:
        url: the base URL (``https://connect:8083``), without credentials.
        username, password: HTTP basic auth; ``None``: none.
        verify: TLS: verify the server's certificate (``True``), against a CA bundle (a path), or
            not (``False``).
        cert: a client certificate: its path, or ``(certificate, key)`` paths.
        timeout_s: seconds a call may take to connect, and again to read.
    """

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    verify: bool | str = True
    cert: str | tuple[str, str] | None = field(default=None, repr=False)
    timeout_s: float = TIMEOUT_S

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", self.url.rstrip("/"))

    def get(self, path: str) -> Any:
        """``GET <url><path>``'s JSON answer.

        Raises:
            ConnectUnreachableError: no answer, or an HTTP error other than 404.
            LookupError: 404 (no such connector).
        """
        import requests

        try:
            resp = requests.get(
                self.url + path,
                auth=(self.username, self.password or "") if self.username else None,
                verify=self.verify,
                cert=self.cert,
                timeout=(self.timeout_s, self.timeout_s),
                headers={"Accept": "application/json"},
            )
        except requests.RequestException as e:
            raise ConnectUnreachableError(_one_line(e)) from None
        if resp.status_code == 404:
            raise LookupError(path)
        if resp.status_code >= 400:
            detail = ""
            try:
                detail = str((resp.json() or {}).get("message") or "")
            except ValueError:
                pass
            raise ConnectUnreachableError(f"HTTP {resp.status_code} {resp.reason}" + (f": {detail}" if detail else ""))
        try:
            return resp.json()
        except ValueError as e:
            raise ConnectUnreachableError(f"an answer that is not JSON: {e}") from None

    def connectors(self) -> dict[str, tuple[ConnectorHealth, str | None]]:
        """Every connector: ``{name: (its state, its config's topic.prefix or None)}`` (one call).

        Raises:
            ConnectUnreachableError: Kafka Connect did not answer.
        """
        try:
            body = self.get("/connectors?expand=status&expand=info")
        except LookupError as e:
            raise ConnectUnreachableError(f"{self.url} has no /connectors (is it Kafka Connect?)") from e
        out: dict[str, tuple[ConnectorHealth, str | None]] = {}
        for name, both in (body or {}).items():
            status = both.get("status") or {"name": name}
            config = (both.get("info") or {}).get("config") or {}
            prefix = config.get("topic.prefix")  # the rest of the config is not kept
            out[name] = (ConnectorHealth.from_status(self.url, {**status, "name": name}), prefix)
        return out

    def status(self, name: str) -> ConnectorHealth:
        """One connector's state; ``missing`` when Kafka Connect has none of that name,
        ``unreachable`` when it does not answer."""
        try:
            return ConnectorHealth.from_status(self.url, self.get(f"/connectors/{quote(name, safe='')}/status"))
        except LookupError:
            return ConnectorHealth.missing(self.url, name)
        except ConnectUnreachableError as e:
            return ConnectorHealth.unreachable(self.url, str(e), name)

    def offsets(self, name: str) -> list[dict[str, Any]]:
        """The connector's committed source offsets (``GET /connectors/<name>/offsets``:
        ``[{"partition": {...}, "offset": {...}}]``); ``[]`` when it has none, or the worker cannot
        tell (Kafka Connect before 3.5, no answer)."""
        try:
            body = self.get(f"/connectors/{quote(name, safe='')}/offsets")
        except (LookupError, ConnectUnreachableError) as e:
            log.info("the source offsets of connector %s are not known: %s", name, e)
            return []
        return [o for o in (body or {}).get("offsets") or [] if isinstance(o, dict)]

    def topics(self, name: str) -> list[str]:
        """The topics the connector wrote since its topics were last reset (``GET
        /connectors/<name>/topics``); ``[]`` when unknown."""
        try:
            body = self.get(f"/connectors/{quote(name, safe='')}/topics")
        except (LookupError, ConnectUnreachableError) as e:
            log.info("the topics of connector %s are not known: %s", name, e)
            return []
        return list(((body or {}).get(name) or {}).get("topics") or [])


def _one_line(error: BaseException) -> str:
    """A requests error as one short line: the innermost OS error's text (``[Errno 111] Connection
    refused``) when there is one, else the error's first line."""
    seen: set[int] = set()
    inner: BaseException | None = error
    found: BaseException | None = None
    while inner is not None and id(inner) not in seen:
        seen.add(id(inner))
        if isinstance(inner, OSError) and not type(inner).__module__.startswith(("requests", "urllib3")):
            found = inner
        args = [a for a in getattr(inner, "args", ()) if isinstance(a, BaseException)]
        inner = args[0] if args else inner.__cause__ or inner.__context__ or getattr(inner, "reason", None)
    text = str(found if found is not None else error).strip().splitlines()
    line = text[0] if text else type(error).__name__
    if "NewConnectionError" in line or "Failed to establish" in line:
        line = line.rsplit(": ", 1)[-1].rstrip("')\"")
    return f"{type(error).__name__}: {line}"


def connect_from_settings(settings: Settings) -> KafkaConnect | None:
    """Kafka Connect of ``CDCLAKE_CONNECT_URL`` (no credentials: the CLI, the local stack);
    ``None`` when it is not set (the connectors are not watched)."""
    return KafkaConnect(settings.connect_url) if settings.connect_url else None


def connect_from_connection(
    url: str, login: str | None, password: str | None, extra: Mapping[str, Any]
) -> KafkaConnect:
    """Kafka Connect of an Airflow HTTP connection's parts: the base ``url``, basic auth, and the
    ``extra`` keys ``verify`` (``false``/``true`` or a CA bundle path), ``cert``/``key``
    (paths), ``timeout`` (seconds).

    Raises:
        ValueError: an ``extra`` key this client does not know, or a malformed value.
    """
    unknown = sorted(set(extra) - {"verify", "cert", "key", "timeout"})
    if unknown:
        raise ValueError(f"unknown extra key(s) {unknown} of the Kafka Connect connection: verify, cert, key, timeout")
    verify: bool | str = True
    raw = extra.get("verify", True)
    if isinstance(raw, bool):
        verify = raw
    elif isinstance(raw, str) and raw.lower() in ("true", "false"):
        verify = raw.lower() == "true"
    elif isinstance(raw, str) and raw:
        verify = raw
    else:
        raise ValueError(f"extra verify: true, false or a CA bundle path, not {raw!r}")
    cert = extra.get("cert")
    key = extra.get("key")
    if key and not cert:
        raise ValueError("extra key (a client key) needs cert (its certificate)")
    try:
        timeout = float(extra.get("timeout", TIMEOUT_S))
    except (TypeError, ValueError):
        raise ValueError(f"extra timeout: seconds, not {extra.get('timeout')!r}") from None
    return KafkaConnect(
        url=url,
        username=login or None,
        password=password or None,
        verify=verify,
        cert=(str(cert), str(key)) if cert and key else (str(cert) if cert else None),
        timeout_s=timeout,
    )
