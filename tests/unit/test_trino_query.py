"""``TrinoServer.query`` runs again a query the coordinator cannot schedule yet.

The fault is injected with a fake DBAPI connection: ``NO_NODES_AVAILABLE`` comes from a race of the
coordinator's node manager (it reads node announcements every 5 s) that a test cannot bring about
on demand. No server is started.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from trino.exceptions import TrinoQueryError

from cdclake_dev.trino import TrinoServer


def _error(name: str) -> TrinoQueryError:
    return TrinoQueryError({"errorName": name, "message": f"{name} for the test", "errorType": "INTERNAL_ERROR"})


class _Cursor:
    def __init__(self, outcome: Exception | list[list[Any]]) -> None:
        self._outcome = outcome

    def execute(self, sql: str) -> None:
        if isinstance(self._outcome, Exception):
            raise self._outcome

    def fetchall(self) -> list[list[Any]]:
        assert isinstance(self._outcome, list)
        return self._outcome


class _Connection:
    def __init__(self, outcome: Exception | list[list[Any]], closed: list[bool]) -> None:
        self._outcome = outcome
        self._closed = closed

    def cursor(self) -> _Cursor:
        return _Cursor(self._outcome)

    def close(self) -> None:
        self._closed.append(True)


def _server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcomes: list[Exception | list[list[Any]]]
) -> tuple[TrinoServer, list[bool]]:
    server = TrinoServer(
        tmp_path,
        28475,
        rest_uri="http://127.0.0.1:1/",
        s3_endpoint="http://127.0.0.1:2",
        s3_access_key="access",
        s3_secret_key="secret",
        region="us-east-1",
    )
    closed: list[bool] = []
    pending = list(outcomes)
    monkeypatch.setattr(server, "connect", lambda **_: _Connection(pending.pop(0), closed))
    return server, closed


def test_a_query_no_node_can_run_yet_is_run_again_until_it_returns_rows(tmp_path, monkeypatch):
    server, closed = _server(
        tmp_path, monkeypatch, [_error("NO_NODES_AVAILABLE"), _error("NO_NODES_AVAILABLE"), [[1, "a"]]]
    )
    assert server.query("SELECT id, v FROM t") == [(1, "a")]
    assert len(closed) == 3


def test_another_query_error_is_raised_at_once(tmp_path, monkeypatch):
    server, closed = _server(tmp_path, monkeypatch, [_error("TABLE_NOT_FOUND"), [[1, "a"]]])
    with pytest.raises(TrinoQueryError) as raised:
        server.query("SELECT id, v FROM t")
    assert raised.value.error_name == "TABLE_NOT_FOUND"
    assert len(closed) == 1


def test_no_nodes_past_the_timeout_is_raised(tmp_path, monkeypatch):
    server, _ = _server(tmp_path, monkeypatch, [_error("NO_NODES_AVAILABLE")] * 5)
    with pytest.raises(TrinoQueryError) as raised:
        server.query("SELECT 1", timeout_s=0)
    assert raised.value.error_name == "NO_NODES_AVAILABLE"
