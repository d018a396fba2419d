"""How a consistent read of a MySQL-family server learns its binlog position, by flavour and
version (pure: the statements and how their answers are read; :func:`cdclake.io.source_db.consistent_read`
runs them).

* **MariaDB** and **Percona Server** keep the position of a transaction's consistent snapshot in the
  status variables ``Binlog_snapshot_file`` / ``Binlog_snapshot_position`` (MariaDB KB, "Enhancements
  for START TRANSACTION WITH CONSISTENT SNAPSHOT"; Percona Server docs, "Extended SHOW ENGINE INNODB
  STATUS" / "Binlog_snapshot_file"): the read takes its snapshot, then reads them, with no lock.
* **Oracle MySQL** 8.0, 8.4 and 9.x have no such variables (``SHOW STATUS LIKE 'binlog_snapshot_%'``
  answers no row). The read is placed as ``mysqldump --single-transaction --source-data`` places its
  dump: ``FLUSH TABLES WITH READ LOCK``, ``START TRANSACTION WITH CONSISTENT SNAPSHOT``, the binary
  log status, ``UNLOCK TABLES`` (the lock holds commits for the few milliseconds between; the user
  needs the ``RELOAD`` privilege). The status statement is ``SHOW MASTER STATUS`` before 8.2 and
  ``SHOW BINARY LOG STATUS`` from 8.2 (MySQL 8.4 removed the former; MySQL 8.4 manual, "SHOW BINARY
  LOG STATUS Statement"); its ``Executed_Gtid_Set`` is the server's GTID set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Flavour = Literal["mariadb", "percona", "mysql"]


@dataclass(frozen=True)
class ServerVersion:
    """A server's flavour and version, from ``SELECT VERSION(), @@version_comment``.

    Attributes:
        flavour: ``mariadb``, ``percona`` or ``mysql``.
        version: ``(major, minor, patch)``.
    """

    flavour: Flavour
    version: tuple[int, int, int]

    @classmethod
    def parse(cls, version: str, comment: str = "") -> ServerVersion:
        """Read ``VERSION()`` (``10.11.6-MariaDB-0+deb12u1``, ``8.4.3``, ``8.0.36-28``) and
        ``@@version_comment`` (``Percona Server (GPL), Release 28, ...``).

        Raises:
            ValueError: no ``major.minor`` version in ``version``.
        """
        m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
        if m is None:
            raise ValueError(f"server version {version!r} does not start with major.minor")
        numbers = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
        text = f"{version} {comment}".lower()
        flavour: Flavour = "mariadb" if "mariadb" in text else "percona" if "percona" in text else "mysql"
        return cls(flavour, numbers)

    def describe(self) -> str:
        return f"{self.flavour} {'.'.join(map(str, self.version))}"


def snapshot_position_from_status(rows: Sequence[Sequence[object]]) -> tuple[str, int] | None:
    """``(file, position)`` of the consistent snapshot from the rows of ``SHOW STATUS LIKE
    'binlog_snapshot_%'`` (MariaDB, Percona), or ``None`` when the server has no such variables
    (Oracle MySQL) or they are empty (binary log off)."""
    status = {str(k).lower(): str(v) for k, v in rows}
    file = status.get("binlog_snapshot_file", "")
    if not file:
        return None
    return file, int(status.get("binlog_snapshot_position", "0") or 0)


def binary_log_status_statement(server: ServerVersion) -> str:
    """The statement that gives a server's binary log position: Oracle MySQL and Percona
    ``SHOW BINARY LOG STATUS`` from 8.2, ``SHOW MASTER STATUS`` before; MariaDB ``SHOW BINLOG
    STATUS`` from 10.5.2 (MariaDB KB, "SHOW BINLOG STATUS"), ``SHOW MASTER STATUS`` before."""
    if server.flavour == "mariadb":
        return "SHOW BINLOG STATUS" if server.version >= (10, 5, 2) else "SHOW MASTER STATUS"
    return "SHOW BINARY LOG STATUS" if server.version >= (8, 2, 0) else "SHOW MASTER STATUS"


def position_from_binary_log_status(columns: Sequence[str], row: Sequence[object] | None) -> tuple[str, int, str]:
    """``(file, position, executed GTID set)`` from the answer of :func:`binary_log_status_statement`
    (columns ``File``, ``Position``, ``Binlog_Do_DB``, ``Binlog_Ignore_DB``, ``Executed_Gtid_Set``).

    Raises:
        ValueError: no row (the binary log is off): the read has no position.
    """
    if row is None:
        raise ValueError(
            "the server answered no binary log status: its binary log is off (log_bin), so no read has a position"
        )
    named: Mapping[str, object] = {c.lower(): v for c, v in zip(columns, row, strict=False)}
    gtids = str(named.get("executed_gtid_set") or "").replace("\n", "")
    return str(named.get("file") or ""), int(str(named.get("position") or 0)), gtids
