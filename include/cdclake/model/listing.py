"""One page of a long list of tables (``cdclake status``, the CDC monitor page): filtered by name
and freshness state, the tables behind their freshness target first, and a summary of the whole.

Pure: the rows are whatever the caller shows (:class:`~cdclake.model.status.TableStatus`, the
monitor's JSON rows), read through two accessors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

FreshState = Literal["behind", "fresh", "unjudged"]
"""A table's state by its ``fresh`` figure: ``behind`` (``False``: behind its freshness target, or
its runs are failing), ``fresh`` (``True``), ``unjudged`` (``None``: no target, or no figures)."""

FRESH_STATES: tuple[FreshState, ...] = ("behind", "fresh", "unjudged")

DEFAULT_PAGE_SIZE = 50
"""Rows per page unless asked otherwise."""

_T = TypeVar("_T")


def fresh_state(fresh: bool | None) -> FreshState:
    """The :data:`FreshState` of a ``fresh`` figure."""
    return "unjudged" if fresh is None else "fresh" if fresh else "behind"


@dataclass(frozen=True)
class Page(Generic[_T]):
    """One page of the rows that pass the filters.

    Attributes:
        rows: this page's rows: behind their target first, then in the given order.
        page: the page number (from 1; clamped to the last page).
        pages: how many pages the matching rows fill (at least 1).
        matched: rows that pass the filters.
        total: rows before filtering.
        counts: rows per :data:`FreshState`, of all ``total`` rows (the summary).
        behind: the names of every row behind its target, in the given order (the summary).
    """

    rows: list[_T]
    page: int
    pages: int
    matched: int
    total: int
    counts: dict[FreshState, int]
    behind: list[str]


def page_of(
    rows: Sequence[_T],
    *,
    name_of: Callable[[_T], str],
    fresh_of: Callable[[_T], bool | None],
    name: str | None = None,
    state: FreshState | None = None,
    page: int = 1,
    page_size: int = DEFAULT_PAGE_SIZE,
) -> Page[_T]:
    """Filter, order and cut ``rows``.

    Args:
        rows: every row, in the table config's order.
        name_of: a row's table name.
        fresh_of: a row's ``fresh`` figure.
        name: keep the rows whose name holds this text (case-insensitive); ``None``: all.
        state: keep the rows in this state; ``None``: all.
        page: the page to return (from 1).
        page_size: rows per page (at least 1).

    Raises:
        ValueError: ``page`` or ``page_size`` below 1, or an unknown ``state`` (names the value).
    """
    if page < 1 or page_size < 1:
        raise ValueError(f"page {page} and page size {page_size} must be at least 1")
    if state is not None and state not in FRESH_STATES:
        raise ValueError(f"state {state!r}: one of {list(FRESH_STATES)}")
    states = [fresh_state(fresh_of(r)) for r in rows]
    counts: dict[FreshState, int] = {s: states.count(s) for s in FRESH_STATES}
    needle = (name or "").lower()
    kept = [(s, r) for s, r in zip(states, rows, strict=True) if needle in name_of(r).lower() and state in (None, s)]
    kept.sort(key=lambda sr: sr[0] != "behind")  # stable: the given order within each group
    pages = max(1, -(-len(kept) // page_size))
    page = min(page, pages)
    return Page(
        rows=[r for _, r in kept[(page - 1) * page_size : page * page_size]],
        page=page,
        pages=pages,
        matched=len(kept),
        total=len(rows),
        counts=counts,
        behind=[name_of(r) for s, r in zip(states, rows, strict=True) if s == "behind"],
    )
