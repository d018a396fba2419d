"""The CDC monitor page's list of many tables (:mod:`cdclake_airflow.monitor`): one page of rows,
filtered by name and freshness state, those behind their freshness target first
(:func:`cdclake.model.listing.page_of`), under a summary of every table (the page's template
draws them: ``templates/cdc_tables.html``). Standard library only at import, as the page's module."""

from collections.abc import Mapping
from typing import Any

PAGE_SIZE = 50
"""Tables per page unless ``?page_size=`` says otherwise (at most :data:`MAX_PAGE_SIZE`)."""
MAX_PAGE_SIZE = 1000


def plural(n: Any, word: str) -> str:
    """``"1 table"``, ``"3 tables"``: the count ``n`` (an int or its text) and ``word``."""
    count = int(n)
    return f"{count} {word}{'' if count == 1 else 's'}"


def paged_payload(
    payload: Mapping[str, Any],
    *,
    name: str | None = None,
    state: str | None = None,
    page: int = 1,
    page_size: int = PAGE_SIZE,
) -> dict[str, Any]:
    """:func:`~cdclake_airflow.monitor.tables_payload`'s result cut to one page (:func:`cdclake.model.listing.page_of`):
    ``tables`` holds the rows whose name holds ``name`` and whose state is ``state``, those behind
    their freshness target first, page ``page`` of ``page_size`` rows; ``listing`` tells the page
    (``page``, ``pages``, ``page_size``, ``matched``, ``total``, the filters ``name`` and
    ``state``) and summarizes every table (``counts`` per state, ``behind``: the names of those
    behind their target).

    Raises:
        ValueError: a page or page size below 1, an unknown state.
    """
    from cdclake.model.listing import page_of

    cut = page_of(
        payload["tables"],
        name_of=lambda r: str(r["name"]),
        fresh_of=lambda r: r.get("fresh"),
        name=name,
        state=state,  # type: ignore[arg-type]  # checked by page_of
        page=page,
        page_size=page_size,
    )
    listing = {
        "page": cut.page,
        "pages": cut.pages,
        "page_size": page_size,
        "matched": cut.matched,
        "total": cut.total,
        "name": name,
        "state": state,
        "counts": cut.counts,
        "behind": cut.behind,
    }
    return {**payload, "tables": cut.rows, "listing": listing}


BEHIND_NAMES_SHOWN = 20
"""The summary names at most this many tables behind their target (the filter lists them all)."""
