"""The consistent read's binlog position on Oracle MySQL 8.0, 8.4 and 9.x, against the servers'
recorded answers (``tests/data/mysql``: no MySQL server package is reachable here; the MariaDB path
runs on the real MariaDB server in the end-to-end reconcile tests). A stand-in connection replays
the answers: the one fault that cannot be made real here is the server itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdclake.io.source_db import SourceDatabase, consistent_read
from cdclake.model.source_flavour import ServerVersion, binary_log_status_statement

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "data" / "mysql" / "recorded.json").read_text())


class ServerError(Exception):
    """What PyMySQL raises for an SQL error (``(code, message)``)."""


class RecordedCursor:
    def __init__(self, answers: dict[str, Any], sent: list[str]) -> None:
        self.answers, self.sent = answers, sent
        self.rows: list[tuple] = []
        self.description: list[tuple] | None = None

    def __enter__(self) -> RecordedCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def execute(self, sql: str, args: Any = None) -> None:
        self.sent.append(sql)
        answer = self.answers.get(sql)
        if answer is None:  # SET, START TRANSACTION, FLUSH, UNLOCK, COMMIT: no result set
            self.rows, self.description = [], None
            return
        if "error" in answer:
            raise ServerError(*answer["error"])
        self.rows = [tuple(r) for r in answer["rows"]]
        self.description = [(c, None, None, None, None, None, None) for c in answer["columns"]]

    def fetchone(self) -> tuple | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[tuple]:
        return list(self.rows)


class RecordedServer(SourceDatabase):
    def __init__(self, name: str) -> None:
        super().__init__(host="recorded")
        object.__setattr__(self, "_answers", RECORDED[name])
        object.__setattr__(self, "sent", [])

    def connect(self) -> Any:
        server = self

        class Connection:
            def __enter__(self) -> Connection:
                return self

            def __exit__(self, *exc: object) -> None:
                pass

            def cursor(self) -> RecordedCursor:
                return RecordedCursor(server._answers, server.sent)  # type: ignore[attr-defined]

        return Connection()


@pytest.mark.parametrize(
    ("server", "file_seq", "pos", "gtids"),
    [
        ("mysql-8.0", 42, 1337, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-77,5a9b4e6f-1c2d-11ee-8f4a-0242ac120002:1-3"),
        ("mysql-8.4", 7, 4711, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-1200"),
        ("mysql-9.1", 1000000, 157, ""),
    ],
)
def test_oracle_mysql_reads_its_position_under_a_brief_read_lock(server, file_seq, pos, gtids):
    db = RecordedServer(server)
    with consistent_read(db) as (_, read):
        assert (read.binlog_file_seq, read.binlog_pos, read.gtid_pos) == (file_seq, pos, gtids)
        assert read.binlog_file_seq > 0  # never the 0:0 that made every key "unsettled"
    sent = db.sent
    lock, start, status, unlock = (
        sent.index("FLUSH TABLES WITH READ LOCK"),
        sent.index("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"),
        next(i for i, s in enumerate(sent) if s.endswith("STATUS") and s.startswith("SHOW")),
        sent.index("UNLOCK TABLES"),
    )
    assert lock < start < status < unlock  # the snapshot and the position at one point of the binlog
    assert sent[-1] == "COMMIT"
    assert not any("binlog_snapshot" in s or "BINLOG_GTID_POS" in s for s in sent)  # MariaDB's, not asked


def test_a_mysql_server_without_a_binary_log_is_a_clear_error():
    db = RecordedServer("mysql-8.4-binlog-off")
    with pytest.raises(ValueError, match="binary log is off"):
        with consistent_read(db):
            pass
    assert db.sent[-2:] == ["UNLOCK TABLES", "COMMIT"]


@pytest.mark.parametrize(
    ("version", "comment", "flavour", "statement"),
    [
        ("10.11.6-MariaDB-0+deb12u1", "Debian 12", "mariadb", None),
        ("11.4.2-MariaDB", "mariadb.org binary distribution", "mariadb", None),
        ("8.0.36-28", "Percona Server (GPL), Release 28, Revision 47601f19", "percona", None),
        ("8.0.39", "MySQL Community Server - GPL", "mysql", "SHOW MASTER STATUS"),
        ("8.2.0", "MySQL Community Server - GPL", "mysql", "SHOW BINARY LOG STATUS"),
        ("8.4.3", "MySQL Community Server - GPL", "mysql", "SHOW BINARY LOG STATUS"),
        ("9.1.0-commercial", "MySQL Enterprise Server - Commercial", "mysql", "SHOW BINARY LOG STATUS"),
    ],
)
def test_flavour_and_status_statement_by_version(version, comment, flavour, statement):
    server = ServerVersion.parse(version, comment)
    assert server.flavour == flavour
    if statement is not None:
        assert binary_log_status_statement(server) == statement
