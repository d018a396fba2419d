"""Column expressions of many parts (one per column, schema id or partition), built so that their
nesting does not grow with the number of parts.

Over Spark Connect a plan travels as one protobuf message, and the Python client refuses one
nested deeper than 100 levels (``google.protobuf.message.DecodeError: ... Exceeded
upb_DecodeOptions_MaxDepth``). A ``when``/``otherwise`` chain nests once per part, two levels
each (``Expression``, ``UnresolvedFunction``); a table of some 80 columns was past the limit. The
``CASE`` of :func:`first_of` holds its branches side by side, and :func:`any_of` and
:func:`all_of` nest as a balanced tree (log2 of the parts). The same expressions in a classic
session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column


def first_of(branches: Sequence[tuple[Column, Column]], otherwise: Column | None = None) -> Column:
    """``CASE WHEN c1 THEN v1 WHEN c2 THEN v2 ... ELSE otherwise END``: the value of the first
    branch whose condition holds, else ``otherwise`` (``None``: null), in one ``CASE``. The same
    value as ``when(c1, v1).otherwise(when(c2, v2).otherwise(... otherwise))``."""
    from pyspark.sql import functions as F

    if not branches:
        return otherwise if otherwise is not None else F.lit(None)
    (condition, value), *rest = branches
    out = F.when(condition, value)
    for condition, value in rest:
        out = out.when(condition, value)
    return out.otherwise(otherwise) if otherwise is not None else out


def any_of(conditions: Sequence[Column]) -> Column:
    """``c1 OR c2 OR ...`` (SQL's three-valued logic), nested log2(n) deep; ``false`` for none."""
    from pyspark.sql import functions as F

    if not conditions:
        return F.lit(False)
    return _balanced(list(conditions), lambda a, b: a | b)


def all_of(conditions: Sequence[Column]) -> Column:
    """``c1 AND c2 AND ...`` (SQL's three-valued logic), nested log2(n) deep; ``true`` for none."""
    from pyspark.sql import functions as F

    if not conditions:
        return F.lit(True)
    return _balanced(list(conditions), lambda a, b: a & b)


def _balanced(parts: list[Column], combine: Callable[[Column, Column], Column]) -> Column:
    if len(parts) == 1:
        return parts[0]
    middle = len(parts) // 2
    return combine(_balanced(parts[:middle], combine), _balanced(parts[middle:], combine))
