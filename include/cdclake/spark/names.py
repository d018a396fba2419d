"""Names in Spark SQL text: the one quoting of identifiers.

Every identifier that goes into a Spark SQL statement or a column reference (a catalog, a
namespace, a table, a branch, a column, an alias) is quoted by :func:`quote_identifier`, so that a
name with a dot, a space or a backtick is read as one name (Spark SQL reference, "Identifiers":
a backtick inside a quoted identifier is written twice).
"""

from __future__ import annotations


def quote_identifier(*parts: str) -> str:
    """The multi-part Spark SQL name of ``parts``: each part in backticks, a backtick inside
    doubled, joined by ``.``.

    >>> quote_identifier("lake", "db", "we`ird")
    '`lake`.`db`.`we``ird`'

    Raises:
        ValueError: no part given.
    """
    if not parts:
        raise ValueError("a name needs at least one part")
    return ".".join("`" + part.replace("`", "``") + "`" for part in parts)


def quote_string(value: str) -> str:
    """``value`` as a Spark SQL string literal: in single quotes, a backslash or single quote inside
    escaped with a backslash (Spark's default, ``spark.sql.parser.escapedStringLiterals=false``).

    >>> quote_string("it's")
    "'it\\\\'s'"
    """
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def qualified(qualifier: str | None, column: str) -> str:
    """The reference to ``column`` of a table or DataFrame alias: ``<qualifier>.<column>``, the
    column quoted; ``qualifier`` is a name :func:`quote_identifier` made, ``None`` for none."""
    name = quote_identifier(column)
    return f"{qualifier}.{name}" if qualifier else name
