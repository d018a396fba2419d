"""The source leg of a table's chain (pure): the Debezium connector's state in Kafka Connect, how
far it is behind its source's binary log, and what the status says of both (docs/operations.md,
"Sources: the connector and the binlog").

* **The connector** (:class:`ConnectorHealth`), from Kafka Connect's REST API
  (``GET /connectors/<name>/status``, :mod:`cdclake.io.connect`): it runs only when the connector
  and every one of its tasks are ``RUNNING``; otherwise its state is the worst of them
  (:data:`STATE_ORDER`), with a failed task's first trace line and root cause, and the remedy (the
  ``curl`` of the REST API). Kafka Connect that does not answer is the state ``unreachable``; a
  name it does not know, ``missing``. Kafka Connect's status carries no time: when the connector
  stopped emitting is told by the source time of the newest position it emitted.
* **The binlog lag** (:class:`SourceLag`): the source server's binary log position (``SHOW BINLOG
  STATUS``/``SHOW BINARY LOG STATUS``, :func:`cdclake.model.source_flavour.binary_log_status_statement`)
  against the newest position Debezium is known to have emitted (:class:`EmittedPoint`): the
  connector's committed source offset (``GET /connectors/<name>/offsets``) or the greatest
  position a table of the source applied (``cdc.high-position``), whichever is further. Debezium's
  offset is the restart position of the transaction it emitted last, and a change event's
  ``source.pos`` is its row event's, so a caught-up connector is still a few bytes before the
  server's position: it is behind only when a **transaction started after** that point (a
  ``Gtid``/``Anonymous_Gtid`` event of ``SHOW BINLOG EVENTS`` from it, :func:`count_transactions`).
  Then its lag in time is now minus the emitted position's source time: an upper bound, as the
  lake's own lag (the first transaction it has not emitted may be younger).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict

from cdclake.model.position import split_binlog_file
from cdclake.model.status import MAX_ERROR_CHARS, TableSource, _Figures, format_duration

ConnectorState = Literal["RUNNING", "FAILED", "PAUSED", "STOPPED", "UNASSIGNED", "RESTARTING", "missing", "unreachable"]
"""A connector's state as the status tells it (:attr:`ConnectorHealth.state`)."""

STATE_ORDER: tuple[ConnectorState, ...] = (
    "unreachable",
    "missing",
    "FAILED",
    "STOPPED",
    "PAUSED",
    "UNASSIGNED",
    "RESTARTING",
    "RUNNING",
)
"""Worst first: a connector's state is the worst of its own and its tasks'."""

TRANSACTION_START_EVENTS = frozenset({"Gtid", "Anonymous_Gtid"})
"""The ``Event_type`` of ``SHOW BINLOG EVENTS`` that starts a transaction: MariaDB (10.0+) writes a
``Gtid`` event before every transaction and DDL, MySQL (5.7+) a ``Gtid`` or ``Anonymous_Gtid`` one."""

EVENTS_READ = 2000
"""How many binlog events after the emitted position one status call reads at most (``SHOW
BINLOG EVENTS ... LIMIT``): past it, the transactions counted are a lower bound."""

UNPARSEABLE_DDL = "DDL statement couldn't be parsed"
"""What Debezium's schema history says of a DDL statement its parser cannot read."""


def trace_summary(trace: str | None) -> tuple[str | None, str | None]:
    """``(first line, root cause)`` of a Java stack trace (a failed task's ``trace``): its first
    line, and the message of its innermost ``Caused by:`` that carries one (``None`` when it is
    the first line, or there is none); each at most :data:`MAX_ERROR_CHARS` characters."""
    if not trace or not trace.strip():
        return None, None
    lines = trace.strip().splitlines()
    first = lines[0].strip()
    cause = None
    for line in lines:
        text = line.strip()
        if text.startswith("Caused by: ") and ": " in text[len("Caused by: ") :]:
            cause = text[len("Caused by: ") :]
    if cause == first:
        cause = None
    return _cut(first), _cut(cause)


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_ERROR_CHARS:
        return text
    return text[: MAX_ERROR_CHARS - 3] + "..."


class TaskHealth(BaseModel):
    """One task of a connector, as Kafka Connect reports it.

    Attributes:
        id: the task's number.
        state: ``RUNNING``, ``FAILED``, ``PAUSED``, ``UNASSIGNED``, ``RESTARTING``, ``STOPPED``.
        worker_id: the worker it runs on.
        trace_line: a failed task's first trace line (:func:`trace_summary`).
        cause: its root cause (the innermost ``Caused by:`` with a message).
    """

    model_config = ConfigDict(frozen=True)

    id: int
    state: str
    worker_id: str | None = None
    trace_line: str | None = None
    cause: str | None = None


class ConnectorHealth(BaseModel):
    """A Debezium connector's state in Kafka Connect.

    Attributes:
        name: the connector; ``None`` when not known (Kafka Connect did not answer, and the
            table config names none).
        url: Kafka Connect's REST API base URL (never with credentials).
        state: the worst of the connector's and its tasks' states (:data:`STATE_ORDER`); a
            connector that runs no task is ``UNASSIGNED``; ``missing``, ``unreachable``.
        connector_state: the connector's own state, as Kafka Connect says it.
        tasks: its tasks.
        connector_trace_line, connector_cause: a failed connector's trace (:func:`trace_summary`).
        error: why Kafka Connect's answer is missing (``unreachable``: the error).
    """

    model_config = ConfigDict(frozen=True)

    name: str | None
    url: str
    state: ConnectorState
    connector_state: str | None = None
    tasks: tuple[TaskHealth, ...] = ()
    connector_trace_line: str | None = None
    connector_cause: str | None = None
    error: str | None = None

    @classmethod
    def from_status(cls, url: str, body: Mapping[str, Any]) -> ConnectorHealth:
        """From the answer of ``GET /connectors/<name>/status`` (``{"name", "connector": {"state",
        "worker_id", "trace"?}, "tasks": [{"id", "state", "worker_id", "trace"?}]}``)."""
        connector = body.get("connector") or {}
        tasks = []
        for task in body.get("tasks") or []:
            line, cause = trace_summary(task.get("trace"))
            tasks.append(
                TaskHealth(
                    id=int(task.get("id", 0)),
                    state=str(task.get("state")),
                    worker_id=task.get("worker_id"),
                    trace_line=line,
                    cause=cause,
                )
            )
        own = str(connector.get("state") or "UNASSIGNED")
        states = [own, *(t.state for t in tasks)] + ([] if tasks else ["UNASSIGNED"])
        line, cause = trace_summary(connector.get("trace"))
        return cls(
            name=str(body.get("name")),
            url=url,
            state=worst(states),
            connector_state=own,
            tasks=tuple(sorted(tasks, key=lambda t: t.id)),
            connector_trace_line=line,
            connector_cause=cause,
        )

    @classmethod
    def unreachable(cls, url: str, error: str, name: str | None = None) -> ConnectorHealth:
        return cls(name=name, url=url, state="unreachable", error=error)

    @classmethod
    def missing(cls, url: str, name: str) -> ConnectorHealth:
        return cls(name=name, url=url, state="missing", error=f"Kafka Connect at {url} has no connector {name!r}")

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"

    def reason(self) -> str | None:
        """Why it does not run, one line (``None`` while it runs): the first failed task's first
        trace line and root cause, or the states, or Kafka Connect's error."""
        if self.running:
            return None
        if self.state == "unreachable":
            return f"Kafka Connect at {self.url} did not answer: {self.error}"
        if self.state == "missing":
            return self.error
        failed = [t for t in self.tasks if t.state == "FAILED"]
        if self.connector_state == "FAILED":
            return _failure("the connector FAILED", self.connector_trace_line, self.connector_cause)
        if failed:
            return _failure(f"task {failed[0].id} FAILED", failed[0].trace_line, failed[0].cause)
        if not self.tasks:
            return f"the connector is {self.connector_state} with no task running"
        states = ", ".join(f"task {t.id} {t.state}" for t in self.tasks)
        return f"the connector is {self.connector_state}, {states}"

    def unparseable_ddl(self) -> bool:
        """Whether it failed on a DDL statement Debezium's parser cannot read (a restart reads it
        again and fails again)."""
        causes = [self.connector_cause, self.connector_trace_line]
        causes += [c for t in self.tasks for c in (t.cause, t.trace_line)]
        return any(c is not None and UNPARSEABLE_DDL in c for c in causes)

    def remedy(self) -> str | None:
        """What to do, one line, ``None`` while it runs: the ``curl`` of Kafka Connect's REST API
        that restarts the failed tasks, resumes a paused connector, or lists the connectors."""
        if self.running:
            return None
        if self.state == "unreachable":
            return (
                f"start Kafka Connect, or point the Airflow connection kafka_connect (CDCLAKE_CONNECT_URL for "
                f"the CLI) at it; check: curl '{self.url}/connectors'"
            )
        base = f"{self.url}/connectors/{quote(self.name or '', safe='')}"
        if self.state == "missing":
            return f"create the connector, or set connector.name in the table config to one of: curl '{self.url}/connectors'"
        if self.state == "FAILED":
            restart = f"curl -X POST '{base}/restart?includeTasks=true&onlyFailed=true'"
            if self.unparseable_ddl():
                return (
                    "Debezium cannot parse a DDL statement of the binlog and a restart reads it again: "
                    'see docs/operations.md, "A connector that failed"; then ' + restart
                )
            return f"fix the cause, then {restart}"
        if self.state in ("PAUSED", "STOPPED"):
            return f"curl -X PUT '{base}/resume'"
        return f"wait for Kafka Connect to start its tasks, or check its workers: curl '{base}/status'"


def _failure(what: str, line: str | None, cause: str | None) -> str:
    text = f"{what}: {line or 'no trace'}"
    return f"{text}; cause: {cause}" if cause else text


def worst(states: Iterable[str]) -> ConnectorState:
    """The worst of Kafka Connect states (:data:`STATE_ORDER`; an unknown one counts as
    ``UNASSIGNED``)."""
    rank: dict[str, int] = {s: i for i, s in enumerate(STATE_ORDER)}
    found = [rank.get(s, rank["UNASSIGNED"]) for s in states]
    return STATE_ORDER[min(found)] if found else "UNASSIGNED"


# --- the binlog lag -------------------------------------------------------------------------------


class EmittedPoint(BaseModel):
    """A binlog position Debezium is known to have emitted.

    Attributes:
        basename: the binlog file's basename (``mysql-bin``).
        file_seq: its sequence number (``mysql-bin.000003`` -> 3).
        pos: the byte position (a binlog event's start).
        ts_ms: the source time of the event there, epoch ms (``None``: unknown).
        origin: ``connector_offsets`` (the connector's committed source offset) or ``lake`` (the
            greatest position a table of the source applied).
        server_id: the server id the position belongs to, when known (a check that the source
            database measured is the connector's server).
        emitted_at_pos: the event at ``pos`` was emitted (a change event's own position; an
            offset that skips events or rows of the transaction starting there); ``False``: ``pos``
            is where the connector reads next (an offset without events or rows to skip: the
            transaction starting there is not emitted yet).
    """

    model_config = ConfigDict(frozen=True)

    basename: str
    file_seq: int
    pos: int
    ts_ms: int | None = None
    origin: Literal["connector_offsets", "lake"] = "connector_offsets"
    server_id: int | None = None
    emitted_at_pos: bool = True

    @classmethod
    def from_offset(cls, offset: Mapping[str, Any]) -> EmittedPoint | None:
        """From a MySQL/MariaDB connector's source offset (``{"file", "pos", "ts_sec", "gtids",
        "event"?, "row"?, "server_id"?}``; ``None`` without ``file`` and ``pos``). Debezium's
        ``pos`` is where it restarts: the start of the transaction it is in, ``event`` events and
        ``row`` rows of which it emitted; without them (a transaction's end, a snapshot's
        position) nothing at ``pos`` is emitted yet."""
        file, pos = offset.get("file"), offset.get("pos")
        if not isinstance(file, str) or not file or not isinstance(pos, int):
            return None
        try:
            basename, seq = split_binlog_file(file)
        except ValueError:
            return None
        ts = offset.get("ts_sec")
        server = offset.get("server_id")
        return cls(
            basename=basename,
            file_seq=seq,
            pos=pos,
            ts_ms=int(ts) * 1000 if isinstance(ts, int) and ts > 0 else None,
            origin="connector_offsets",
            server_id=server if isinstance(server, int) and server > 0 else None,
            emitted_at_pos=bool(offset.get("event") or offset.get("row")),
        )

    def file(self, width: int) -> str:
        """The binlog file name, its number zero-padded to ``width`` digits (the server's)."""
        return f"{self.basename}.{self.file_seq:0{width}d}"


def newest_emitted(points: Iterable[EmittedPoint | None]) -> EmittedPoint | None:
    """The furthest of ``points`` (by file, then position); ``None`` when there is none."""
    known = [p for p in points if p is not None]
    return max(known, key=lambda p: (p.file_seq, p.pos)) if known else None


class ServerBinlog(BaseModel):
    """The source server's binary log, as one status call read it
    (:func:`cdclake.io.source_db.read_binlog`).

    Attributes:
        server: the server's flavour and version (``mariadb 10.11.19``).
        server_id: ``@@server_id``.
        file: its current binlog file.
        pos: its current position in it (the end of the last event written).
        gtid_position: MariaDB's ``@@gtid_binlog_pos``, MySQL's ``Executed_Gtid_Set``, or ``""``.
        sizes: ``SHOW BINARY LOGS``: each binlog file's size, bytes.
    """

    model_config = ConfigDict(frozen=True)

    server: str
    server_id: int
    file: str
    pos: int
    gtid_position: str = ""
    sizes: dict[str, int] = {}

    @property
    def basename(self) -> str:
        return split_binlog_file(self.file)[0]

    @property
    def file_seq(self) -> int:
        return split_binlog_file(self.file)[1]

    @property
    def width(self) -> int:
        """How many digits its files' numbers have."""
        return len(self.file.rsplit(".", 1)[-1])


def binlog_bytes(point: EmittedPoint, server: ServerBinlog) -> int | None:
    """Binlog bytes from ``point`` to the server's position: within one file the difference; over
    files the rest of ``point``'s file, the files between and the server's position in its file
    (their sizes from ``SHOW BINARY LOGS``); ``None`` when a size is not known or ``point`` is past
    the server (another server, a reset binlog)."""
    if point.file_seq == server.file_seq:
        return server.pos - point.pos if server.pos >= point.pos else None
    if point.file_seq > server.file_seq:
        return None
    sizes = {split_binlog_file(f)[1]: size for f, size in server.sizes.items() if f.startswith(point.basename + ".")}
    between = range(point.file_seq + 1, server.file_seq)
    if point.file_seq not in sizes or any(seq not in sizes for seq in between):
        return None
    return sizes[point.file_seq] - point.pos + sum(sizes[seq] for seq in between) + server.pos


def count_transactions(events: Iterable[tuple[int, str]], after_pos: int, *, including: bool = False) -> int:
    """Transactions starting after ``after_pos`` (or at it, ``including``) among ``(Pos,
    Event_type)`` rows of ``SHOW BINLOG EVENTS`` of one file (:data:`TRANSACTION_START_EVENTS`)."""
    return sum(
        1
        for pos, kind in events
        if (pos >= after_pos if including else pos > after_pos) and kind in TRANSACTION_START_EVENTS
    )


def foreign_point(point: EmittedPoint, server: ServerBinlog) -> str | None:
    """Why ``point`` is not of ``server``'s binlog (another basename, another server id, past its
    position), or ``None`` when it may be."""
    if point.basename != server.basename:
        return f"its binlog is {point.basename}.*, the source database's {server.basename}.*"
    if point.server_id is not None and point.server_id != server.server_id:
        return f"its events come from server id {point.server_id}, the source database is server id {server.server_id}"
    if (point.file_seq, point.pos) > (server.file_seq, server.pos):
        return (
            f"its position {point.file(server.width)}:{point.pos} is past the source database's {server.file}:{server.pos} "
            "(another server, or a reset binlog)"
        )
    return None


class SourceLag(_Figures):
    """How far a connector is behind its source's binary log (module docstring).

    Attributes:
        server_file, server_pos: the source server's current binlog position.
        emitted_file, emitted_pos: the newest position the connector is known to have emitted.
        emitted_from: where that position comes from: ``connector_offsets`` or ``lake``.
        emitted_ts_ms: its source time, epoch ms (also ``emitted_ts_iso`` in JSON); ``None``: unknown.
        bytes: binlog bytes between both (:func:`binlog_bytes`); ``None``: unknown.
        transactions: source transactions started after the emitted position (any table's);
            ``None``: unknown (``SHOW BINLOG EVENTS`` refused).
        transactions_capped: more events followed than one call reads (:data:`EVENTS_READ`):
            ``transactions`` is a lower bound.
        lag_ms: 0 when ``transactions`` is 0; else now minus ``emitted_ts_ms`` (an upper bound);
            ``None`` when either is unknown.
    """

    _epoch_fields = ("emitted_ts_ms",)

    server_file: str
    server_pos: int
    emitted_file: str
    emitted_pos: int
    emitted_from: Literal["connector_offsets", "lake"]
    emitted_ts_ms: int | None = None
    bytes: int | None = None
    transactions: int | None = None
    transactions_capped: bool = False
    lag_ms: int | None = None

    @classmethod
    def measure(
        cls, now_ms: int, server: ServerBinlog, point: EmittedPoint, transactions: int | None, capped: bool = False
    ) -> SourceLag:
        """The lag of a connector whose newest emitted position is ``point``, after which
        ``transactions`` transactions started (``None``: unknown)."""
        if transactions is None:
            lag = None
        elif transactions == 0:
            lag = 0
        else:
            lag = None if point.ts_ms is None else max(now_ms - point.ts_ms, 0)
        return cls(
            server_file=server.file,
            server_pos=server.pos,
            emitted_file=point.file(server.width),
            emitted_pos=point.pos,
            emitted_from=point.origin,
            emitted_ts_ms=point.ts_ms,
            bytes=binlog_bytes(point, server),
            transactions=transactions,
            transactions_capped=capped,
            lag_ms=lag,
        )

    def describe(self) -> str:
        """``binlog caught up (...)`` or ``binlog: N transactions (B bytes) behind, ...``."""
        where = f"emitted {self.emitted_file}:{self.emitted_pos}, source at {self.server_file}:{self.server_pos}"
        size = "unknown bytes" if self.bytes is None else f"{self.bytes} bytes"
        if self.transactions is None:
            return f"binlog: {size} from the newest position emitted, transactions unknown ({where})"
        if self.transactions == 0:
            return f"binlog caught up ({where})"
        n = f"{'at least ' if self.transactions_capped else ''}{self.transactions}"
        plural = "" if self.transactions == 1 and not self.transactions_capped else "s"
        return (
            f"binlog: {n} transaction{plural} ({size}) behind, up to {format_duration(self.lag_ms)} "
            f"(the newest event emitted is that old; {where})"
        )


class SourceStatus(_Figures):
    """One source: a Debezium connector, the tables it feeds, and how far it is behind its server.

    Attributes:
        name: the connector's name, or ``topic prefix <p>`` when not known (Kafka Connect did not
            answer).
        connector: its state in Kafka Connect.
        tables: the names of the configured tables it feeds, in config order.
        lag: how far it is behind the source database's binlog; ``None`` when not measured.
        problems: why the lag is not measured (no source database, another server, a refused
            statement), one sentence each.
        checked_at_ms: when, epoch ms (also ``checked_at_iso`` in JSON).
    """

    _epoch_fields = ("checked_at_ms",)

    name: str
    connector: ConnectorHealth
    tables: list[str]
    lag: SourceLag | None = None
    problems: list[str] = []
    checked_at_ms: int

    def table_view(self) -> TableSource:
        """The source as each of its tables carries it (:class:`~cdclake.model.status.TableSource`)."""
        lag = self.lag
        return TableSource(
            name=self.name,
            state=self.connector.state,
            running=self.connector.running,
            reason=self.connector.reason(),
            remedy=self.connector.remedy(),
            lag_ms=None if lag is None else lag.lag_ms,
            lag_bytes=None if lag is None else lag.bytes,
            lag_transactions=None if lag is None else lag.transactions,
        )

    def lines(self) -> list[str]:
        """What ``cdclake status`` prints of it, first line ``source <name> (...): <state>``."""
        c = self.connector
        where = f"Kafka Connect at {c.url}" if c.name is None or c.name == self.name else f"connector {c.name}"
        tables = f"{len(self.tables)} table{'' if len(self.tables) == 1 else 's'}"
        head = f"source {self.name} ({where}; {tables}): {c.state}"
        reason = c.reason()
        if reason is not None and c.state != "unreachable":
            head += f": {reason}"
        elif reason is not None:
            head += f": {c.error}"
        lines = [head]
        if self.lag is not None:
            lines.append(f"  {self.lag.describe()}")
            if not c.running and self.lag.emitted_ts_ms is not None:
                lines.append(
                    f"  the newest event it emitted: source time "
                    f"{format_duration(self.checked_at_ms - self.lag.emitted_ts_ms)} ago"
                )
        lines.extend(f"  {p}" for p in self.problems)
        remedy = c.remedy()
        if remedy is not None:
            lines.append(f"  remedy: {remedy}")
        return lines


def prefix_of(topic: str) -> str:
    """A Debezium data topic's prefix (``<topic.prefix>.<database>.<table>`` -> ``<topic.prefix>``)."""
    return topic.rsplit(".", 2)[0]


def connector_of(
    topic: str,
    named: str | None,
    prefixes: Mapping[str, Iterable[str | None]],
    topics: Mapping[str, Sequence[str]],
) -> str | None:
    """The connector feeding ``topic``: ``named`` (the table config's ``connector.name``) when
    given; else the first connector (by name) one of whose topic prefixes is the topic's
    (``prefixes``: each connector's ``topic.prefix`` of its config, unless a ``${...}``
    placeholder, and the ``server`` of its source offsets' partitions, which Debezium names by
    the resolved ``topic.prefix``); else the first whose written topics (``topics``, Kafka
    Connect's topic tracking) hold ``topic``; ``None`` when none does."""
    if named is not None:
        return named
    prefix = prefix_of(topic)
    for name in sorted(prefixes):
        if any(v is not None and not _PLACEHOLDER.search(v) and v == prefix for v in prefixes[name]):
            return name
    for name in sorted(topics):
        if topic in topics[name]:
            return name
    return None


def emitted_of(offsets: Iterable[Mapping[str, Any]]) -> EmittedPoint | None:
    """The furthest binlog position of a connector's source offsets (``GET
    /connectors/<name>/offsets``' ``offsets``: ``[{"partition": {"server": <topic.prefix>},
    "offset": {...}}]``); ``None`` when none is a binlog position."""
    return newest_emitted(EmittedPoint.from_offset(o.get("offset") or {}) for o in offsets)


def offset_prefixes(offsets: Iterable[Mapping[str, Any]]) -> list[str]:
    """The topic prefixes a connector's source offsets name: the ``server`` of each partition
    (Debezium's MySQL and MariaDB connectors' partition is ``{"server": <topic.prefix>}``)."""
    found = [(o.get("partition") or {}).get("server") for o in offsets]
    return [str(f) for f in found if isinstance(f, str) and f]


_PLACEHOLDER = re.compile(r"\$\{[^}]*\}")
"""A Kafka Connect config provider reference (``${env:CDC_TOPIC_PREFIX}``): the REST API shows a
connector's config unresolved."""
