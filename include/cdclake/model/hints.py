"""Near-match hints for names a user typed: ``did you mean 'products'?`` after an unknown table,
topic or config key.

A name is near another when :func:`difflib.get_close_matches` finds them alike and what differs
between them is a typo: once the prefix and the suffix they share are set aside, what is left is
at most 2 characters (a swapped pair, ``tabels``), or at most a third of the typed name's and
either left out (``snapshot_retention`` for ``snapshot_retention_hours``) or alike itself. Names
that share a long prefix (topics ``<prefix>.<database>.<table>``, tables ``<database>_<table>``)
are alike by ratio alone, so ``cdc.inventory.productz`` is near ``cdc.inventory.products`` but
``cdc.inventory.shipments`` is not.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable

CUTOFF = 0.6
"""The least similarity (:meth:`difflib.SequenceMatcher.ratio`, 0..1) of a name suggested."""


def near_match(name: str, known: Iterable[str]) -> str | None:
    """The one of ``known`` nearest ``name`` (see the module), or ``None``; ``name`` itself is
    never suggested."""
    candidates = [k for k in dict.fromkeys(known) if k != name]
    for found in difflib.get_close_matches(name, candidates, n=5, cutoff=CUTOFF):
        if _small_difference(name, found):
            return found
    return None


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'products'?"`` for :func:`near_match`, to end a message with; ``""``
    when nothing of ``known`` is near ``name``."""
    near = near_match(name, known)
    return f"; did you mean {near!r}?" if near is not None else ""


def _small_difference(typed: str, other: str) -> bool:
    prefix = len(os.path.commonprefix([typed, other]))
    suffix = len(os.path.commonprefix([typed[prefix:][::-1], other[prefix:][::-1]]))
    left, right = typed[prefix : len(typed) - suffix], other[prefix : len(other) - suffix]
    if max(len(left), len(right)) <= 2:
        return True
    alike = not left or not right or difflib.SequenceMatcher(None, left, right).ratio() >= 0.5
    return max(len(left), len(right)) <= len(typed) // 3 and alike
