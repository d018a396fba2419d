"""The source database (MySQL/MariaDB): the one place a connection to it is opened.

Used for Debezium's signal table (snapshot signals). Credentials come from the caller (the
Airflow connection ``cdc_source_db``, resolved when the task runs), never from settings.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pymysql.connections import Connection

from cdclake.model.snapshot import Signal

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceDatabase:
    """Where the source database is and who connects (an Airflow MySQL connection's fields)."""

    host: str
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)
    database: str | None = None

    def connect(self) -> Connection:
        """A PyMySQL connection (autocommit, ``utf8mb4``)."""
        import pymysql

        return pymysql.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            database=self.database,
            autocommit=True,
            charset="utf8mb4",
        )


def send_source_signal(db: SourceDatabase, signal_table: str, signal: Signal) -> bool:
    """Insert ``signal`` into the connector's signal table with bound parameters (``INSERT
    IGNORE``: a signal id that is already there is not sent again).

    Args:
        signal_table: ``db.table`` of the connector's ``signal.data.collection``.

    Returns:
        Whether a row was inserted.

    Raises:
        ValueError: ``signal_table`` is not ``database.table``.
    """
    database, _, table = signal_table.partition(".")
    if not database or not table or "`" in signal_table:
        raise ValueError(f"signal table must be 'database.table', got {signal_table!r}")
    with db.connect() as connection:
        with connection.cursor() as cur:
            inserted = cur.execute(
                f"INSERT IGNORE INTO `{database}`.`{table}` (id, type, data) VALUES (%s, %s, %s)",
                (signal.id, signal.type, signal.data_json),
            )
        connection.commit()
    log.info(
        "signal %s %s %s into %s: %s",
        signal.id,
        signal.type,
        signal.data_json,
        signal_table,
        "inserted" if inserted else "already there (a retry): not sent again",
    )
    return bool(inserted)
