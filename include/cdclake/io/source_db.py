"""The source database (MySQL/MariaDB): the one place a connection to it is opened.

Used for Debezium's signal table (snapshot signals) and for reconcile's reads of the source
table (:mod:`cdclake.model.reconcile`). Credentials come from the caller (the
Airflow connection ``cdc_source_db``, resolved when the task runs), never from settings.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pymysql.connections import Connection

from cdclake.model.reconcile import (
    Chunk,
    CompareColumn,
    Digest,
    KeyTuple,
    SourceColumn,
    canonical_sql,
    key_order_sql,
    pyformat,
    quote,
    range_sql,
    row_hash_sql,
)
from cdclake.model.snapshot import Signal
from cdclake.model.source_flavour import (
    ServerVersion,
    binary_log_status_statement,
    position_from_binary_log_status,
    snapshot_position_from_status,
)
from cdclake.model.source_health import EVENTS_READ, EmittedPoint, ServerBinlog, count_transactions

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


# --- reconcile: the source side (cdclake.model.reconcile) -----------------------------------------


@dataclass(frozen=True)
class SourceRead:
    """What one consistent read of the source saw.

    Attributes:
        binlog_file_seq, binlog_pos: the read's binlog coordinates: the position of its consistent
            snapshot (:func:`consistent_read`).
        gtid_pos: ``BINLOG_GTID_POS`` of those coordinates (MariaDB); Oracle MySQL's executed GTID
            set; ``""`` when unknown.
    """

    binlog_file_seq: int
    binlog_pos: int
    gtid_pos: str


def source_columns(db: SourceDatabase, database: str, table: str) -> list[SourceColumn]:
    """The table's columns from ``information_schema.COLUMNS``, in table order.

    Raises:
        ValueError: the table does not exist.
    """
    with db.connect() as connection, connection.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        rows = cur.fetchall()
    if not rows:
        raise ValueError(f"source table {database}.{table} does not exist")
    return [SourceColumn(str(r[0]), str(r[1]).lower(), str(r[2]).lower()) for r in rows]


@contextmanager
def consistent_read(db: SourceDatabase) -> Iterator[tuple[Any, SourceRead]]:
    """A cursor inside ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` (session time zone UTC), with
    the snapshot's binlog position, read as the server's flavour allows
    (:mod:`cdclake.model.source_flavour`: MariaDB and Percona from ``Binlog_snapshot_*``, Oracle MySQL
    under a brief ``FLUSH TABLES WITH READ LOCK``); the transaction ends on exit.

    Raises:
        ValueError: an Oracle MySQL server whose binary log is off.
        pymysql.err.OperationalError: an Oracle MySQL user without the ``RELOAD`` privilege the lock
            needs.
    """
    from cdclake.model.position import split_binlog_file

    with db.connect() as connection, connection.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute("SELECT VERSION(), @@version_comment")
        version, comment = cur.fetchone() or ("", "")
        server = ServerVersion.parse(str(version), str(comment or ""))
        if server.flavour == "mysql":
            file, pos, gtid_pos = _mysql_consistent_snapshot(cur, server)
        else:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            try:
                cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
                file, pos = snapshot_position_from_status(cur.fetchall()) or ("", 0)
                gtid_pos = ""
                if file and server.flavour == "mariadb":
                    cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))
                    gtid_pos = str((cur.fetchone() or ("",))[0] or "")
            except BaseException:
                cur.execute("COMMIT")
                raise
        try:
            _, seq = split_binlog_file(file) if file else ("", 0)
            yield cur, SourceRead(seq, pos, gtid_pos)
        finally:
            cur.execute("COMMIT")


def _mysql_consistent_snapshot(cur: Any, server: ServerVersion) -> tuple[str, int, str]:
    """Start the consistent snapshot of an Oracle MySQL server at a known binary log position:
    under ``FLUSH TABLES WITH READ LOCK``, as ``mysqldump --single-transaction --source-data`` does
    (:mod:`cdclake.model.source_flavour`). Returns ``(file, position, executed GTID set)``; the
    transaction is open."""
    cur.execute("FLUSH TABLES WITH READ LOCK")
    try:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        cur.execute(binary_log_status_statement(server))
        columns = [d[0] for d in cur.description or ()]
        row = cur.fetchone()
    except BaseException:
        cur.execute("UNLOCK TABLES")
        raise
    cur.execute("UNLOCK TABLES")  # the transaction keeps its snapshot
    try:
        return position_from_binary_log_status(columns, row)
    except ValueError:
        cur.execute("COMMIT")
        raise


@dataclass(frozen=True)
class ComparedTable:
    """The source table reconcile compares, and which of its rows.

    Attributes:
        database: the source database.
        table: the source table.
        key: its primary-key columns, in key order.
        columns: the columns compared.
        where: ``(SQL condition with %s marks, its parameters)`` on the rows (a key range);
            ``("1=1", [])``: every row.
    """

    database: str
    table: str
    key: Sequence[CompareColumn]
    columns: Sequence[CompareColumn]
    where: tuple[str, list[Any]] = ("1=1", [])

    @property
    def target(self) -> str:
        """```database`.`table``` for a PyMySQL statement (``%`` doubled)."""
        return pyformat(f"{quote(self.database)}.{quote(self.table)}")


def chunk_bounds(db: SourceDatabase, source: ComparedTable, chunk_rows: int) -> list[Chunk]:
    """Cut the table's primary-key order every ``chunk_rows`` keys (keyset pagination: each step
    reads ``chunk_rows`` index entries), within ``source.where``."""
    key, where, target = source.key, source.where, source.target
    order = ", ".join(key_order_sql(key))
    names = pyformat(", ".join(quote(c.name) for c in key))
    chunks: list[Chunk] = []
    lower: KeyTuple | None = None
    with db.connect() as connection, connection.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        while True:
            clause, params = range_sql(key, lower, None)
            cur.execute(
                f"SELECT {names} FROM {target} WHERE {clause} AND ({where[0]}) ORDER BY {order} "
                f"LIMIT 1 OFFSET {int(chunk_rows) - 1}",
                [*params, *where[1]],
            )
            row = cur.fetchone()
            if row is None:
                chunks.append(Chunk(len(chunks), lower, None))
                return chunks
            upper = tuple(row)
            chunks.append(Chunk(len(chunks), lower, upper))
            lower = upper


def chunk_digests(
    db: SourceDatabase, source: ComparedTable, chunks: Sequence[Chunk]
) -> list[tuple[Digest, SourceRead]]:
    """Each chunk's digest, each in a consistent read of its own (the rows of one chunk are locked
    by nothing and read at one position)."""
    out = []
    for chunk in chunks:
        clause, params = range_sql(source.key, chunk.lower, chunk.upper)
        with consistent_read(db) as (cur, read):
            cur.execute(
                f"SELECT COUNT(*), COALESCE(BIT_XOR({pyformat(row_hash_sql(source.columns))}), 0) "
                f"FROM {source.target} WHERE {clause} AND ({source.where[0]})",
                [*params, *source.where[1]],
            )
            count, xor = cur.fetchone()
        out.append((Digest(int(count), int(xor)), read))
    return out


def chunk_rows(
    db: SourceDatabase, source: ComparedTable, chunks: Sequence[Chunk]
) -> tuple[dict[KeyTuple, tuple[list[str | None], list[Any]]], SourceRead]:
    """The rows of ``chunks`` in one consistent read: ``{key: (canonical texts, raw values)}`` (raw
    values for the floating-point comparison) and the read's position."""
    key, columns, where = source.key, source.columns, source.where
    texts = pyformat(", ".join(canonical_sql(c) for c in columns))
    raws = pyformat(", ".join(quote(c.name) for c in columns))
    keys = pyformat(", ".join(quote(c.name) for c in key))
    rows: dict[KeyTuple, tuple[list[str | None], list[Any]]] = {}
    n = len(columns)
    with consistent_read(db) as (cur, read):
        for chunk in chunks:
            clause, params = range_sql(key, chunk.lower, chunk.upper)
            cur.execute(
                f"SELECT {keys}, {texts}, {raws} FROM {source.target} WHERE {clause} AND ({where[0]})",
                [*params, *where[1]],
            )
            for r in cur.fetchall():
                k = tuple(r[: len(key)])
                vals = list(r[len(key) :])
                rows[k] = ([None if v is None else _text(v) for v in vals[:n]], vals[n:])
    return rows, read


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def send_marker(db: SourceDatabase, signal_table: str, marker_id: str) -> None:
    """Insert a Debezium ``log`` signal (the connector only logs its message) into the signal
    table: its change event on the signal table's topic shows that the connector has read the
    binlog past everything committed before it."""
    send_source_signal(db, signal_table, Signal(marker_id, "log", {"message": f"cdclake reconcile marker {marker_id}"}))


# --- the source leg of the status (cdclake.model.source_health) -----------------------------------


@dataclass(frozen=True)
class BinlogRead:
    """What :func:`read_binlog` found.

    Attributes:
        server: the server's binlog position and files.
        transactions: per emitted point (the caller's keys): ``(transactions started after it,
            whether more events followed than were read)``, or why they are unknown (a sentence).
    """

    server: ServerBinlog
    transactions: dict[str, tuple[int, bool] | str]


def read_binlog(db: SourceDatabase, points: dict[str, EmittedPoint], *, events: int = EVENTS_READ) -> BinlogRead:
    """The server's binary log position (:func:`~cdclake.model.source_flavour.binary_log_status_statement`,
    ``SHOW BINARY LOGS``, ``@@server_id``, MariaDB's ``@@gtid_binlog_pos``), and for each of
    ``points`` the transactions that started after it (``SHOW BINLOG EVENTS IN <file> FROM <pos>
    LIMIT <events>``, over the following files while none is found), in one connection. The user
    needs ``BINLOG MONITOR`` (MariaDB) or ``REPLICATION CLIENT`` and ``REPLICATION SLAVE`` (MySQL).

    Raises:
        pymysql.err.MySQLError: the server does not answer, or refuses the status statements.
        ValueError: its binary log is off.
    """
    import pymysql

    with db.connect() as connection, connection.cursor() as cur:
        cur.execute("SELECT VERSION(), @@version_comment, @@server_id")
        version, comment, server_id = cur.fetchone() or ("", "", 0)
        server = ServerVersion.parse(str(version), str(comment or ""))
        cur.execute(binary_log_status_statement(server))
        columns = [d[0] for d in cur.description or ()]
        file, pos, gtids = position_from_binary_log_status(columns, cur.fetchone())
        if server.flavour == "mariadb":
            cur.execute("SELECT @@gtid_binlog_pos")
            gtids = str((cur.fetchone() or ("",))[0] or "")
        cur.execute("SHOW BINARY LOGS")
        sizes = {str(r[0]): int(r[1]) for r in cur.fetchall()}
        binlog = ServerBinlog(
            server=server.describe(),
            server_id=int(server_id or 0),
            file=file,
            pos=pos,
            gtid_position=gtids,
            sizes=sizes,
        )
        found: dict[str, tuple[int, bool] | str] = {}
        for key, point in points.items():
            try:
                found[key] = _transactions_after(cur, binlog, point, events)
            except pymysql.err.MySQLError as e:
                found[key] = (
                    f"SHOW BINLOG EVENTS failed ({e.args[-1] if e.args else e}): the transactions after the emitted position are unknown"
                )
        return BinlogRead(binlog, found)


def _transactions_after(cur: Any, server: ServerBinlog, point: EmittedPoint, limit: int) -> tuple[int, bool]:
    """``(transactions started after point, capped)``: the events of ``point``'s file from it,
    then of each later file (``SHOW BINARY LOGS`` order) until a transaction is found or
    ``limit`` events were read."""
    first = point.file(server.width)
    if first == server.file and point.pos >= server.pos:
        return 0, False  # where the server writes next: nothing after it
    files = [first, *sorted(f for f in server.sizes if f.startswith(server.basename + ".") and f > first)]
    read = count = 0
    for file in files:
        start = point.pos if file == first else 4  # a binlog's first event is at 4
        cur.execute("SHOW BINLOG EVENTS IN %s FROM %s LIMIT %s", (file, start, limit - read))
        rows = cur.fetchall()
        read += len(rows)
        events = ((int(r[1]), str(r[2])) for r in rows)
        count += count_transactions(events, start, including=file != first or not point.emitted_at_pos)
        if count or read >= limit:
            break
    return count, read >= limit
