"""MySQL/MariaDB DDL statements -> the renames and drops that schema sync needs.

Debezium's schema-change events (``tableChanges``) carry the columns of a table *after* a change,
not what the change was: a renamed column looks like a dropped column plus a new one. The DDL
statement of the event (``ddl``) tells them apart. It is parsed with sqlglot's MySQL dialect,
extended here where sqlglot 28 falls back to an unstructured ``Command``:

* ``ALTER TABLE t CHANGE [COLUMN] old new <column definition> [FIRST | AFTER c]``
* ``RENAME TABLE a TO b [, c TO d ...]``
* ``ALTER TABLE t RENAME [TO | AS] u`` (sqlglot knows only ``RENAME TO``)
* ``ALTER TABLE t DROP c`` (``COLUMN`` omitted; sqlglot needs it)

Syntax sources: MySQL 8.4 reference manual, "ALTER TABLE Statement" and "RENAME TABLE Statement".

A statement whose structure matters for schema sync (``ALTER TABLE``, ``RENAME TABLE``) and that
cannot be parsed raises :class:`DdlParseError`: a rename is never guessed from the column lists.
Other statements (``CREATE``, ``SET``, ``USE``, DML, ...) need no structure and yield no effects.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from cdclake.errors import DdlParseError

log = logging.getLogger(__name__)

__all__ = [
    "ColumnRename",
    "DdlEffects",
    "DdlParseError",
    "TableName",
    "TableRename",
    "ddl_effects",
    "effects_from_tokens",
    "named_tables",
    "parse_statement",
    "split_statements",
    "statement_kind",
]

TABLE_STATEMENTS = ("ALTER TABLE", "RENAME TABLE", "DROP TABLE")
"""The statements whose structure schema sync reads (see :func:`statement_kind`). Every other
statement (``CREATE TABLE`` included: its columns come from ``tableChanges``) has no effect
that a column list cannot show, and is not parsed."""


class ChangeColumn(exp.Expression):
    """``CHANGE [COLUMN] <this> <expression: ColumnDef> [FIRST | AFTER c]`` of ``ALTER TABLE``."""

    arg_types = {"this": True, "expression": True, "position": False}


class RenameTables(exp.Expression):
    """``RENAME TABLE a TO b, c TO d``: ``expressions`` are ``Alter(this=a, actions=[AlterRename(b)])``."""

    arg_types = {"expressions": True}


class DropTables(exp.Expression):
    """``DROP [TEMPORARY] TABLE [IF EXISTS] a [, b ...]``: ``expressions`` are the tables."""

    arg_types = {"expressions": True, "exists": False}


_NON_COLUMN_ADDS = (
    "CONSTRAINT",
    "PRIMARY",
    "UNIQUE",
    "INDEX",
    "KEY",
    "FULLTEXT",
    "SPATIAL",
    "FOREIGN",
    "CHECK",
    "PARTITION",
    "PERIOD",
    "SYSTEM",
)
_NON_COLUMN_DROPS = ("PRIMARY", "FOREIGN", "INDEX", "KEY", "CHECK", "CONSTRAINT", "PARTITION", "SYSTEM", "PERIOD")


def _skip_action(self: MySQL.Parser, first: str) -> exp.Command:
    """Consume an ALTER TABLE action that has no column effect up to the next top-level comma."""
    words = [first]
    depth = 0
    while self._curr and not (depth == 0 and self._curr.token_type == TokenType.COMMA):
        if self._curr.token_type == TokenType.L_PAREN:
            depth += 1
        elif self._curr.token_type == TokenType.R_PAREN:
            depth -= 1
        words.append(self._curr.text)
        self._advance()
    return self.expression(exp.Command, this=first, expression=" ".join(words[1:]))


def _parse_position(self: MySQL.Parser) -> exp.ColumnPosition | None:
    if not self._match_texts(("FIRST", "AFTER")):
        return None
    where = self._prev.text.upper()
    return self.expression(exp.ColumnPosition, position=where, this=self._parse_column() if where == "AFTER" else None)


def _parse_column_definition(self: MySQL.Parser) -> exp.ColumnDef | None:
    start = self._index
    column = self._parse_field_def()
    if not isinstance(column, exp.ColumnDef) or column.args.get("kind") is None:
        self._retreat(start)
        return None
    # NDB column attributes sqlglot does not know: STORAGE {DISK|MEMORY}, COLUMN_FORMAT x
    while self._match_texts(("STORAGE", "COLUMN_FORMAT")):
        self._advance()
    column.set("position", _parse_position(self))
    return column


def _next_word(self: MySQL.Parser) -> str:
    """First word of the current token (sqlglot has multi-word tokens such as ``PRIMARY KEY``)."""
    return self._curr.text.upper().split()[0] if self._curr and self._curr.text.strip() else ""


def _parse_alter_action(self: MySQL.Parser) -> exp.Expression | None:
    """One action of ``ALTER TABLE``; actions with no column effect are kept as commands."""
    if not self._curr:
        return None
    word = self._curr.text.upper()
    self._advance()
    if word == "ADD":
        if self._match(TokenType.COLUMN) or (
            self._curr and _next_word(self) not in _NON_COLUMN_ADDS and self._curr.token_type != TokenType.L_PAREN
        ):
            return _parse_column_definition(self)
        if self._match(TokenType.L_PAREN):
            columns = self._parse_csv(lambda: _parse_column_definition(self))
            if not self._match(TokenType.R_PAREN) or not columns or None in columns:
                return None
            return self.expression(exp.Schema, expressions=columns)
        return _skip_action(self, word)
    if word == "CHANGE":
        self._match(TokenType.COLUMN)
        old = self._parse_field(any_token=True)
        new = _parse_column_definition(self)
        if old is None or new is None:
            return None
        return self.expression(ChangeColumn, this=old, expression=new)
    if word == "MODIFY":
        self._match(TokenType.COLUMN)
        column = _parse_column_definition(self)
        return self.expression(exp.AlterColumn, this=column.this, dtype=column.args["kind"]) if column else None
    if word == "DROP":
        if _next_word(self) in _NON_COLUMN_DROPS:
            return _skip_action(self, word)
        self._match(TokenType.COLUMN)  # MySQL allows DROP <column> without COLUMN
        exists = self._parse_exists()
        column = self._parse_column()
        return self.expression(exp.Drop, this=column, kind="COLUMN", exists=exists) if column else None
    if word == "RENAME":
        if self._match(TokenType.COLUMN):
            old = self._parse_column()
            new = self._match_text_seq("TO") and self._parse_column()
            return self.expression(exp.RenameColumn, this=old, to=new) if old and new else None
        if _next_word(self) in ("INDEX", "KEY"):
            return _skip_action(self, word)
        if not self._match_text_seq("TO"):
            self._match(TokenType.ALIAS)
        return self.expression(exp.AlterRename, this=self._parse_table_parts(schema=True))
    return _skip_action(self, word)


def _parse_alter_table(self: MySQL.Parser) -> exp.Expression:
    index = self._index
    self._match_texts(("ONLINE", "IGNORE"))
    if self._match(TokenType.TABLE):
        exists = self._parse_exists()
        table = self._parse_table_parts(schema=True)
        actions = self._parse_csv(lambda: _parse_alter_action(self)) if self._curr else []
        if table is not None and not self._curr and None not in actions:
            return self.expression(exp.Alter, this=table, kind="TABLE", actions=actions, exists=exists)
    self._retreat(index)
    return self._parse_alter()


def _parse_drop_tables(self: MySQL.Parser) -> exp.Expression:
    index = self._index
    self._match(TokenType.TEMPORARY)
    if self._match(TokenType.TABLE):
        exists = self._parse_exists()
        tables = self._parse_csv(lambda: self._parse_table_parts(schema=True))
        self._match_texts(("RESTRICT", "CASCADE"))
        if not self._curr and tables and None not in tables:
            return self.expression(DropTables, expressions=tables, exists=exists)
    self._retreat(index)
    return self._parse_drop()


def _parse_rename_tables(self: MySQL.Parser) -> RenameTables | exp.Command:
    start = self._prev
    if not self._match(TokenType.TABLE):
        return self._parse_as_command(start)

    def pair() -> exp.Alter | None:
        old = self._parse_table_parts(schema=True)
        new = self._match_text_seq("TO") and self._parse_table_parts(schema=True)
        if old is None or not new:
            return None
        return self.expression(exp.Alter, this=old, kind="TABLE", actions=[exp.AlterRename(this=new)])

    pairs = self._parse_csv(pair)
    if self._curr or not pairs or None in pairs:
        return self._parse_as_command(start)
    return self.expression(RenameTables, expressions=pairs)


class CdcMySQL(MySQL):
    """sqlglot's MySQL dialect, with ``ALTER TABLE`` actions parsed one by one (any mix of
    ``ADD``, ``CHANGE``, ``MODIFY``, ``DROP``, ``RENAME``; other actions kept as commands),
    ``RENAME TABLE`` and multi-table ``DROP TABLE`` (see the module docstring)."""

    class Tokenizer(MySQL.Tokenizer):
        # RENAME starts a statement we parse, not an opaque command
        COMMANDS = MySQL.Tokenizer.COMMANDS - {TokenType.RENAME}

    class Parser(MySQL.Parser):
        STATEMENT_PARSERS = {
            **MySQL.Parser.STATEMENT_PARSERS,
            TokenType.ALTER: _parse_alter_table,
            TokenType.DROP: _parse_drop_tables,
            TokenType.RENAME: _parse_rename_tables,
        }

        def _parse_primary_key(self, wrapped_optional: bool = False, in_props: bool = False) -> exp.Expression:
            # sqlglot 28 reads the token after PRIMARY KEY unguarded; at the end of a statement
            # (``ADD id INT AUTO_INCREMENT PRIMARY KEY``) there is none
            if self._curr is None and not in_props:
                return self.expression(exp.PrimaryKeyColumnConstraint, desc=False)
            return super()._parse_primary_key(wrapped_optional=wrapped_optional, in_props=in_props)


_DIALECT = CdcMySQL()


@dataclass(frozen=True, order=True)
class TableName:
    """A table as a DDL statement names it; ``db`` is ``None`` when the statement does not say."""

    db: str | None
    name: str

    def matches(self, db: str, name: str, *, default_db: str | None = None) -> bool:
        """Whether this names ``db.name``; an unqualified name is in ``default_db`` (the event's
        ``databaseName``). MySQL table names compare case-sensitively on Linux; so do we."""
        return self.name == name and (self.db or default_db) == db


@dataclass(frozen=True)
class ColumnRename:
    table: TableName
    old: str
    new: str


@dataclass(frozen=True)
class TableRename:
    old: TableName
    new: TableName


@dataclass(frozen=True)
class DdlEffects:
    """What one DDL statement does that a column list cannot show.

    Attributes:
        column_renames: ``RENAME COLUMN a TO b`` and ``CHANGE a b ...`` with ``a != b``, in
            statement order.
        dropped_columns: ``(table, column)`` of ``DROP [COLUMN] c``.
        table_renames: ``RENAME TABLE`` pairs and ``ALTER TABLE .. RENAME [TO|AS]``.
        dropped_tables: ``DROP TABLE`` names.
    """

    column_renames: tuple[ColumnRename, ...] = ()
    dropped_columns: tuple[tuple[TableName, str], ...] = ()
    table_renames: tuple[TableRename, ...] = ()
    dropped_tables: tuple[TableName, ...] = ()


def split_statements(sql: str) -> list[str]:
    """Split a script into statements at ``;`` tokens (strings and comments are respected).

    Raises:
        DdlParseError: the script cannot be tokenized (an unterminated string, ...).
    """
    try:
        tokens = _DIALECT.tokenize(sql)
    except TokenError as e:
        raise DdlParseError(f"cannot tokenize the SQL script: {e}") from e
    statements: list[str] = []
    first = last = None
    for token in tokens + [None]:
        if token is None or token.token_type == TokenType.SEMICOLON:
            if first is not None and last is not None:
                statements.append(sql[first.start : last.end + 1])
            first = last = None
            continue
        first = first or token
        last = token
    return statements


def statement_kind(sql: str) -> str | None:
    """``ALTER TABLE``, ``RENAME TABLE`` or ``DROP TABLE`` (with ``ONLINE``/``IGNORE``/
    ``TEMPORARY`` noise words skipped), or ``None`` for any other statement.

    Raises:
        DdlParseError: the statement cannot be tokenized.
    """
    try:
        words = [t.text.upper() for t in _DIALECT.tokenize(sql)[:3]]
    except TokenError as e:
        raise DdlParseError(f"cannot tokenize DDL {sql!r}: {e}") from e
    words = [w for w in words if w not in ("ONLINE", "IGNORE", "TEMPORARY")]
    kind = " ".join(words[:2])
    return kind if kind in TABLE_STATEMENTS else None


def parse_statement(sql: str) -> exp.Expression:
    """Parse one statement with :class:`CdcMySQL`.

    Returns:
        The sqlglot expression; a statement sqlglot has no structure for is an ``exp.Command``.

    Raises:
        DdlParseError: the statement is not valid for the parser, or it is an ``ALTER TABLE`` /
            ``RENAME TABLE`` that parsed only as an unstructured command.
    """
    try:
        # sqlglot logs a warning for every statement it keeps as a Command; we decide below
        logger = logging.getLogger("sqlglot")
        level = logger.level
        logger.setLevel(logging.ERROR)
        try:
            parsed = _DIALECT.parse(sql)
        finally:
            logger.setLevel(level)
    except (ParseError, TokenError) as e:
        raise DdlParseError(f"cannot parse DDL {sql!r}: {e}") from e
    except (AttributeError, IndexError, TypeError) as e:  # sqlglot's own failures on odd input
        raise DdlParseError(f"cannot parse DDL {sql!r}: sqlglot failed with {e!r}") from e
    statements = [p for p in parsed if p is not None and not isinstance(p, exp.Semicolon)]
    if len(statements) != 1:
        raise DdlParseError(f"expected one statement, found {len(statements)} in {sql!r}")
    node = statements[0]
    if isinstance(node, exp.Command) and statement_kind(sql) is not None:
        raise DdlParseError(f"cannot parse the structure of DDL {sql!r} (sqlglot kept it as a command)")
    return node


def _table_name(table: exp.Expression) -> TableName:
    if not isinstance(table, exp.Table):
        raise DdlParseError(f"expected a table name, got {table.sql()!r}")
    return TableName(table.db or None, table.name)


def _column_name(node: exp.Expression) -> str:
    return node.name if isinstance(node, (exp.Column, exp.Identifier)) else node.this.name


def ddl_effects(sql: str) -> DdlEffects:
    """The renames and drops of one DDL statement (see :class:`DdlEffects`).

    Statements other than :data:`TABLE_STATEMENTS` have none and are not parsed.

    Raises:
        DdlParseError: see :func:`parse_statement`.
    """
    if statement_kind(sql) is None:
        return DdlEffects()
    try:
        node = parse_statement(sql)
    except DdlParseError as e:
        effects = effects_from_tokens(sql)
        if effects is None:
            raise
        log.warning("%s; its renames and drops were read from its words instead: %s", e, effects)
        return effects
    renames: list[ColumnRename] = []
    dropped_columns: list[tuple[TableName, str]] = []
    table_renames: list[TableRename] = []
    dropped_tables: list[TableName] = []
    if isinstance(node, RenameTables):
        for alter in node.expressions:
            table_renames.append(TableRename(_table_name(alter.this), _table_name(alter.actions[0].this)))
    elif isinstance(node, DropTables):
        dropped_tables.extend(_table_name(t) for t in node.expressions)
    elif isinstance(node, exp.Alter) and node.args.get("kind") == "TABLE":
        table = _table_name(node.this)
        for action in node.actions:
            if isinstance(action, exp.RenameColumn):
                renames.append(ColumnRename(table, _column_name(action.this), _column_name(action.args["to"])))
            elif isinstance(action, ChangeColumn):
                old, new = _column_name(action.this), action.expression.name
                if old != new:
                    renames.append(ColumnRename(table, old, new))
            elif isinstance(action, exp.Drop) and action.args.get("kind") == "COLUMN":
                dropped_columns.append((table, _column_name(action.this)))
            elif isinstance(action, exp.AlterRename):
                table_renames.append(TableRename(table, _table_name(action.this)))
    return DdlEffects(tuple(renames), tuple(dropped_columns), tuple(table_renames), tuple(dropped_tables))


_Word = tuple[str, bool]
"""A token's text and whether it was a quoted identifier (never a keyword)."""

_NOT_A_COLUMN = frozenset({*_NON_COLUMN_DROPS, "PRIMARY KEY", "UNIQUE", "FULLTEXT", "SPATIAL", "DEFAULT"})


def _words(sql: str) -> list[_Word] | None:
    try:
        tokens = _DIALECT.tokenize(sql)
    except TokenError:
        return None
    return [(t.text, t.token_type == TokenType.IDENTIFIER) for t in tokens if t.token_type != TokenType.SEMICOLON]


def _is(word: _Word | None, *keywords: str) -> bool:
    return word is not None and not word[1] and word[0].upper() in keywords


def _table_at(words: list[_Word], i: int) -> tuple[TableName, int] | None:
    """The (possibly database-qualified) table name starting at ``words[i]`` and the index after it."""
    if i >= len(words):
        return None
    if i + 2 < len(words) and words[i + 1] == (".", False):
        return TableName(words[i][0], words[i + 2][0]), i + 3
    return TableName(None, words[i][0]), i + 1


def _split_top_level(words: list[_Word]) -> list[list[_Word]]:
    """``words`` split at the commas outside parentheses."""
    parts: list[list[_Word]] = [[]]
    depth = 0
    for w in words:
        if not w[1] and w[0] == "(":
            depth += 1
        elif not w[1] and w[0] == ")":
            depth -= 1
        if depth == 0 and w == (",", False):
            parts.append([])
        else:
            parts[-1].append(w)
    return [p for p in parts if p]


def _skip_if_exists(words: list[_Word], i: int) -> int:
    if _is(words[i] if i < len(words) else None, "IF"):
        return i + 2  # IF EXISTS / IF NOT EXISTS: EXISTS, or NOT EXISTS (NOT EXISTS is one more)
    return i


def effects_from_tokens(sql: str) -> DdlEffects | None:
    """The renames and drops of a table statement read from its words, for a statement the
    parser cannot read (a column type or attribute sqlglot does not know: ``INVISIBLE``,
    ``INET6``, ``SRID 4326``, ``ADD COLUMN (c INT, d INT)``; MySQL 8.4 and MariaDB 11 manuals,
    "ALTER TABLE Statement"). Each ``ALTER TABLE`` action (the statement split at its top-level
    commas) is read by its first words only: ``CHANGE [COLUMN] [IF EXISTS] old new``, ``RENAME
    COLUMN old TO new``, ``RENAME [TO|AS] table``, ``DROP [COLUMN] [IF EXISTS] c`` (not an index,
    key, constraint, check, partition or period); every other action (``ADD``, ``MODIFY``, ``ALTER
    COLUMN``, options) renames and drops nothing. ``RENAME TABLE a TO b, ...`` and ``DROP
    [TEMPORARY] TABLE [IF EXISTS] a, ...`` likewise.

    Returns:
        The effects, or ``None`` when the statement cannot be tokenized or read so.
    """
    words = _words(sql)
    if not words:
        return None
    i = 0
    while i < len(words) and _is(words[i], "ALTER", "RENAME", "DROP", "ONLINE", "IGNORE", "TEMPORARY"):
        i += 1
    verb = words[0][0].upper()
    if not _is(words[i] if i < len(words) else None, "TABLE"):
        return None
    i += 1
    try:
        if verb == "ALTER":
            return _alter_from_words(words, i)
        if verb == "RENAME":
            renames = []
            for part in _split_top_level(words[i:]):
                old = _table_at(part, 0)
                if old is None or not _is(part[old[1]] if old[1] < len(part) else None, "TO"):
                    return None
                new = _table_at(part, old[1] + 1)
                if new is None:
                    return None
                renames.append(TableRename(old[0], new[0]))
            return DdlEffects(table_renames=tuple(renames))
        if verb == "DROP":
            i = _skip_if_exists(words, i)
            rest = [w for w in words[i:] if not _is(w, "RESTRICT", "CASCADE")]
            dropped = [t[0] for part in _split_top_level(rest) if (t := _table_at(part, 0)) is not None]
            return DdlEffects(dropped_tables=tuple(dropped))
    except IndexError:
        return None
    return None


def _alter_from_words(words: list[_Word], i: int) -> DdlEffects | None:
    found = _table_at(words, i)
    if found is None:
        return None
    table, i = found
    # MariaDB: WAIT n / NOWAIT before the actions
    if _is(words[i] if i < len(words) else None, "WAIT"):
        i += 2
    elif _is(words[i] if i < len(words) else None, "NOWAIT"):
        i += 1
    renames: list[ColumnRename] = []
    dropped: list[tuple[TableName, str]] = []
    table_renames: list[TableRename] = []
    for action in _split_top_level(words[i:]):
        first = action[0]
        if _is(first, "CHANGE"):
            j = _skip_if_exists(action, 1 + _is(action[1], "COLUMN"))
            old, new = action[j][0], action[j + 1][0]
            if old != new:
                renames.append(ColumnRename(table, old, new))
        elif _is(first, "RENAME"):
            if _is(action[1], "COLUMN"):
                if not _is(action[3], "TO"):
                    return None
                renames.append(ColumnRename(table, action[2][0], action[4][0]))
            elif _is(action[1], "INDEX", "KEY"):
                continue
            else:
                j = 2 if _is(action[1], "TO", "AS") else 1
                new_table = _table_at(action, j)
                if new_table is None:
                    return None
                table_renames.append(TableRename(table, new_table[0]))
        elif _is(first, "DROP"):
            if _is(action[1], *_NOT_A_COLUMN):
                continue
            j = _skip_if_exists(action, 1 + _is(action[1], "COLUMN"))
            dropped.append((table, action[j][0]))
    return DdlEffects(tuple(renames), tuple(dropped), tuple(table_renames))


def named_tables(sql: str) -> tuple[str, ...] | None:
    """The table names (without database, as written) that a table statement's words hold
    anywhere (every identifier, so a superset of the tables it changes), for deciding whether a
    statement nobody can read may concern a table; ``None`` when it cannot be tokenized."""
    words = _words(sql)
    if words is None:
        return None
    return tuple(w for w, quoted in words if quoted or w[:1].isalpha() or w[:1] == "_")
