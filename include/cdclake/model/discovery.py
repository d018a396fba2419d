"""Discovery: Debezium data topics found by pattern instead of one table-config entry each.

A pattern of the table config's ``discover`` list (:class:`DiscoverPattern`) names a set of
source tables by their data topics, ``<topic.prefix>.<database>.<table>``; every topic it matches
becomes a table of the config with no more lines (:func:`cdclake.model.config.load_tables`). What
Kafka says about a topic (that it exists, its primary key) is found by the ``cdc_discovery`` DAG
and ``cdclake discover --write`` (:mod:`cdclake.pipeline.discovery`) and kept in the **registry**
(:func:`read_registry`, :func:`write_registry`), a JSON file the DAG files read without calling
Kafka::

    {"format": 1, "tables": {"mariadb.inventory.orders": {"primary_key": ["id"], "registered_at_ms": 1764045600000}}}

``primary_key`` is ``[]`` for a source table without one: its table is a changelog table. Entries
are only ever added: a topic that disappears (a dropped source table) keeps its entry, hence its
DAG, as a configured table keeps its entry.

Include and exclude lists are regular expressions matched against the whole name (Python's
``re.fullmatch``), as Debezium's MySQL connector matches ``database.include.list`` and
``table.include.list`` (the table lists against ``<database>.<table>``).
"""

from __future__ import annotations

import json
import os
import re
import string
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cdclake.errors import ConfigError, SchemaError

REGISTRY_FORMAT = 1
"""The registry file's ``format``; another value is refused (:func:`read_registry`)."""

TEMPLATE_FIELDS = frozenset({"prefix", "database", "table"})
"""The fields a naming rule may use: the topic's ``<topic.prefix>``, ``<database>`` and ``<table>``."""

_NOT_NAME = re.compile(r"[^a-z0-9_]")
_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")


def _compiled(patterns: tuple[str, ...], key: str) -> tuple[str, ...]:
    for p in patterns:
        try:
            re.compile(p)
        except re.error as e:
            raise ValueError(f"{key}: {p!r} is not a regular expression ({e})") from e
    return patterns


class DiscoverPattern(BaseModel):
    """One ``discover`` entry: which data topics become tables, how they are named, and the
    per-table settings they get (``defaults``, over the file's ``defaults``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic_prefix: str | None = None
    """The connector's ``topic.prefix``: only topics ``<topic_prefix>.<database>.<table>`` match
    (needed when the prefix itself holds dots)."""
    topics: str | None = None
    """A regular expression the whole topic name must match. Without ``topic_prefix``, the topic's
    prefix is what precedes its last two dot-separated parts."""
    databases: tuple[str, ...] = ()
    """Regular expressions; the source database must match one (empty: every database)."""
    exclude_databases: tuple[str, ...] = ()
    """Regular expressions; a source database matching one is excluded."""
    tables: tuple[str, ...] = ()
    """Regular expressions over ``<database>.<table>``; the table must match one (empty: all)."""
    exclude_tables: tuple[str, ...] = ()
    """Regular expressions over ``<database>.<table>``; a table matching one is excluded."""
    name: str = "{database}_{table}"
    """The table's name (its DAG id is ``cdc_<name>``): lower-cased, every character outside
    ``[a-z0-9_]`` replaced by ``_``."""
    namespace: str = "{database}"
    """The Iceberg namespace; characters outside ``[A-Za-z0-9_]`` replaced by ``_``."""
    table: str = "{table}"
    """The Iceberg table name; characters outside ``[A-Za-z0-9_]`` replaced by ``_``."""
    defaults: dict[str, Any] = Field(default_factory=dict)
    """Per-table settings of the matched tables (any key of the file's ``defaults``), over them."""

    @field_validator("topics")
    @classmethod
    def _topics(cls, v: str | None) -> str | None:
        return v if v is None else _compiled((v,), "topics")[0]

    @field_validator("databases", "exclude_databases", "tables", "exclude_tables")
    @classmethod
    def _lists(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return _compiled(v, "an include or exclude list")

    @field_validator("name", "namespace", "table")
    @classmethod
    def _template(cls, v: str) -> str:
        try:
            used = {f for _, f, _, _ in string.Formatter().parse(v) if f is not None}
        except ValueError as e:
            raise ValueError(f"naming rule {v!r}: {e}") from e
        if not used <= TEMPLATE_FIELDS:
            raise ValueError(
                f"naming rule {v!r} uses {sorted(used - TEMPLATE_FIELDS)}; known: {sorted(TEMPLATE_FIELDS)}"
            )
        return v

    @model_validator(mode="after")
    def _scope(self) -> DiscoverPattern:
        if self.topic_prefix is None and self.topics is None:
            raise ValueError("a discover pattern needs topic_prefix or topics (or both)")
        return self

    def match(self, topic: str) -> Candidate | Excluded | None:
        """Whether the pattern takes ``topic``.

        Returns:
            The :class:`Candidate`; an :class:`Excluded` (a topic of the pattern's scope that an
            include or exclude list keeps out, with the reason); ``None`` for a topic outside its
            scope (another prefix, no match of ``topics``, not ``<prefix>.<database>.<table>``).
        """
        if self.topic_prefix is not None:
            if not topic.startswith(self.topic_prefix + "."):
                return None
            prefix, rest = self.topic_prefix, topic[len(self.topic_prefix) + 1 :].split(".")
        else:
            *head, db, tb = topic.split(".")
            prefix, rest = ".".join(head), [db, tb]
        if len(rest) != 2 or not prefix or not all(rest):
            return None
        if self.topics is not None and not re.fullmatch(self.topics, topic):
            return None
        database, table = rest
        qualified = f"{database}.{table}"
        if self.databases and not any(re.fullmatch(p, database) for p in self.databases):
            return Excluded(topic, f"database {database!r} is in no pattern of databases {list(self.databases)}")
        for p in self.exclude_databases:
            if re.fullmatch(p, database):
                return Excluded(topic, f"database {database!r} matches exclude_databases {p!r}")
        if self.tables and not any(re.fullmatch(p, qualified) for p in self.tables):
            return Excluded(topic, f"table {qualified!r} is in no pattern of tables {list(self.tables)}")
        for p in self.exclude_tables:
            if re.fullmatch(p, qualified):
                return Excluded(topic, f"table {qualified!r} matches exclude_tables {p!r}")
        fields = {"prefix": prefix, "database": database, "table": table}
        return Candidate(
            topic=topic,
            name=_NOT_NAME.sub("_", self.name.format(**fields).lower()),
            namespace=_identifier(self.namespace.format(**fields)),
            table=_identifier(self.table.format(**fields)),
        )


def _identifier(text: str) -> str:
    ident = _NOT_IDENT.sub("_", text)
    return "_" + ident if not ident or ident[0].isdigit() else ident


@dataclass(frozen=True)
class Candidate:
    """A topic a pattern takes, with the names its rules give (``name``, Iceberg ``namespace`` and
    ``table``)."""

    topic: str
    name: str
    namespace: str
    table: str


@dataclass(frozen=True)
class Excluded:
    """A topic in a pattern's scope that its include or exclude lists keep out, and why."""

    topic: str
    reason: str


def first_match(patterns: tuple[DiscoverPattern, ...], topic: str) -> tuple[int, Candidate | Excluded] | None:
    """The first pattern (index, outcome) whose scope holds ``topic``; ``None``: no pattern's.

    A topic excluded by a pattern may be taken by a later one (each pattern's lists are its own):
    the first :class:`Candidate` wins, else the first :class:`Excluded` is returned.
    """
    excluded: tuple[int, Candidate | Excluded] | None = None
    for i, pattern in enumerate(patterns):
        found = pattern.match(topic)
        if isinstance(found, Candidate):
            return i, found
        if found is not None and excluded is None:
            excluded = i, found
    return excluded


def key_columns(key: bytes | None, lookup: Callable[[int], dict[str, Any]] | None) -> tuple[str, ...]:
    """The primary-key columns a Debezium record key names, in key order.

    Debezium's key is a struct of the table's primary-key columns (or of its
    ``message.key.columns``), and no key at all for a table without one ("Change event keys"
    in the Debezium MySQL connector docs). Read as its converter wrote it: ``JsonConverter``
    with schemas (``{"schema": {"type": "struct", "fields": [...]}, "payload": {...}}``: the
    fields' order), without schemas (the object's keys, in order), or an Avro key in the
    Confluent wire format (the writer schema's record fields, from ``lookup``).

    Args:
        key: the record key bytes, ``None`` when the record has none.
        lookup: the schema registry's writer schema of a schema id (needed for an Avro key).

    Returns:
        The column names; ``()`` for a record without a key (a table without a primary key).

    Raises:
        SchemaError: a key that is none of these shapes.
        ConfigError: an Avro key without a schema registry.
    """
    from cdclake.model.avro import is_framed, split_wire

    if key is None:
        return ()
    if is_framed(key):
        if lookup is None:
            raise ConfigError("the record key is Avro (Confluent wire format) and no schema registry is configured")
        writer = lookup(split_wire(key)[0])
        return tuple(str(f["name"]) for f in writer.get("fields", ()))
    try:
        doc = json.loads(key)
    except ValueError as e:
        raise SchemaError(f"the record key is neither JSON nor Avro in the Confluent wire format: {e}") from e
    if isinstance(doc, dict) and isinstance(doc.get("schema"), dict) and "payload" in doc:
        fields = doc["schema"].get("fields")
        if isinstance(fields, list) and all(isinstance(f, dict) and "field" in f for f in fields):
            return tuple(str(f["field"]) for f in fields)
    if isinstance(doc, dict) and doc:
        return tuple(str(k) for k in doc)
    raise SchemaError(f"the record key {key[:200]!r} is not a Debezium key (a struct of the key columns)")


def _registry_entries(path: Path) -> dict[str, dict[str, Any]]:
    """The registry's ``tables`` as stored; ``{}`` when the file does not exist.

    Raises:
        ConfigError: the file is not a registry of :data:`REGISTRY_FORMAT` (names the file).
    """
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as e:
        raise ConfigError(f"discovery registry {path} is not JSON: {e}") from e
    if not isinstance(doc, dict) or doc.get("format") != REGISTRY_FORMAT or not isinstance(doc.get("tables"), dict):
        raise ConfigError(f"discovery registry {path} is not a registry of format {REGISTRY_FORMAT}")
    tables: dict[str, dict[str, Any]] = doc["tables"]
    for topic, entry in tables.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("primary_key"), list):
            raise ConfigError(f"discovery registry {path}: the entry of topic {topic!r} has no primary_key list")
    return tables


def read_registry(path: Path) -> dict[str, tuple[str, ...]]:
    """The registered topics: ``{topic: primary-key columns}`` (``()``: no primary key); ``{}``
    when the file does not exist yet (no discovery ran).

    Raises:
        ConfigError: the file is not a registry of :data:`REGISTRY_FORMAT` (names the file).
    """
    return {topic: tuple(str(c) for c in e["primary_key"]) for topic, e in _registry_entries(path).items()}


def write_registry(path: Path, added: Mapping[str, tuple[str, ...]], *, now_ms: int) -> None:
    """Add ``added`` (``{topic: primary-key columns}``) to the registry at ``path``, atomically: the
    new file is written beside it and renamed over it, so that a DAG file never reads half of one.
    Entries already registered are kept as they are.

    Raises:
        ConfigError: the existing file is not a registry (:func:`read_registry`).
    """
    entries = _registry_entries(path)
    for topic, pk in added.items():
        entries.setdefault(topic, {"primary_key": list(pk), "registered_at_ms": now_ms})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp's 0600 would hide it from other users' dag-processors
            json.dump({"format": REGISTRY_FORMAT, "tables": dict(sorted(entries.items()))}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
