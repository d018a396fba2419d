"""The pyiceberg codec of binlog positions: row filters over a table's metadata columns, generated
from the model's one definition (:func:`cdclake.model.position.position_parts`).

pyiceberg has no ``coalesce``, so a part's NULL reading (``if_null``) is written out: each
comparison of a column is ``IsNull(column)`` or'ed in when the NULL reading satisfies it, and
``NotNull(column)`` and'ed in when not. Every comparison is then true or false, never NULL, so a
filter is exactly the set of rows it names both when pyiceberg scans with it and when a delete
keeps the rows outside it (pyiceberg's complementary filter only guards the NULLs of the columns a
filter does not test for NULL).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from functools import reduce
from typing import TYPE_CHECKING, Any

from cdclake.model.position import BinlogPosition, PositionPart, position_parts

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression


def expressions() -> Any:
    """pyiceberg's expressions module, its constructors typed loosely: they are typed as pydantic
    models whose generated signature is not the constructor's (``LessThan("column", 3)`` is
    documented and works)."""
    from pyiceberg import expressions as module

    return module


def _part_is(part: PositionPart, compare: Callable[[int, int], bool], value: int) -> BooleanExpression:
    """Rows whose ``part`` reads a value ``v`` with ``compare(v, value)`` (``<`` or ``==``)."""
    e = expressions()
    if part.column is None:
        return e.AlwaysTrue() if compare(part.if_null, value) else e.AlwaysFalse()
    column = part.column
    if part.when_true is not None:
        when_true, otherwise = compare(part.when_true, value), compare(part.if_null, value)
        if when_true and otherwise:
            return e.AlwaysTrue()
        if when_true:
            return e.And(e.NotNull(column), e.EqualTo(column, True))
        if otherwise:
            return e.Or(e.IsNull(column), e.EqualTo(column, False))
        return e.AlwaysFalse()
    test = e.LessThan(column, value) if compare is operator.lt else e.EqualTo(column, value)
    if compare(part.if_null, value):
        return e.Or(e.IsNull(column), test)
    return e.And(e.NotNull(column), test)


def position_below(position: BinlogPosition, ordering: str, *, change: bool = False) -> BooleanExpression:
    """Rows written by an event below ``position`` in ``ordering`` (``change=True``: the rows are
    tombstones), as a pyiceberg row filter: the lexicographic comparison of
    :func:`~cdclake.model.position.position_parts` with ``position``.

    Raises:
        ValueError: an unknown ``ordering``.
    """
    e = expressions()
    parts = position_parts(ordering, change=change)
    terms = []
    for i, part in enumerate(parts):
        # the parts before this one equal position's, this one is below position's
        equal = [_part_is(p, operator.eq, getattr(position, p.field)) for p in parts[:i]]
        terms.append(reduce(e.And, [*equal, _part_is(part, operator.lt, getattr(position, part.field))]))
    return reduce(e.Or, terms)
