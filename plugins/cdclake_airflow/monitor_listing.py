"""The CDC monitor page's list of many tables (:mod:`cdclake_airflow.monitor`): one page of rows,
filtered by name and freshness state, those behind their freshness target first
(:func:`cdclake.model.listing.page_of`), under a summary of every table. Standard library only
at import, as the page's module."""

import html
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

PAGE_SIZE = 50
"""Tables per page unless ``?page_size=`` says otherwise (at most :data:`MAX_PAGE_SIZE`)."""
MAX_PAGE_SIZE = 1000


def html_text(value: object) -> str:
    """``value`` as HTML text (``&``, ``<``, ``>`` and quotes escaped): safe in an element or an
    attribute of the page."""
    return html.escape(str(value), quote=True)


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


def listing_html(payload: Mapping[str, Any]) -> str:
    """The summary (tables per state, the names of those behind their target), the filter form
    (name, state) and the page links of :func:`paged_payload`'s ``listing``; ``""`` without it."""
    listing = payload.get("listing")
    if not listing:
        return ""
    counts, behind = listing["counts"], listing["behind"]
    names = ", ".join(
        f'<a href="?name={quote(n)}" class="behind-table">{html_text(n)}</a>' for n in behind[:BEHIND_NAMES_SHOWN]
    )
    more = (
        f' and <a href="?state=behind">{len(behind) - BEHIND_NAMES_SHOWN} more</a>'
        if len(behind) > BEHIND_NAMES_SHOWN
        else ""
    )
    summary = (
        f'<div class="summary" id="summary">{plural(listing["total"], "table")}: '
        f"<b>{html_text(counts['behind'])} behind their freshness target</b>{': ' + names + more if behind else ''}; "
        f"{html_text(counts['fresh'])} fresh; {html_text(counts['unjudged'])} not judged</div>"
    )
    options = "".join(
        f'<option value="{s}"{" selected" if listing["state"] == s else ""}>{s}</option>'
        for s in ("", "behind", "fresh", "unjudged")
    )
    form = (
        '<form class="filters" method="get">'
        f'<input name="name" placeholder="table name contains" value="{html_text(listing["name"] or "")}">'
        f'<select name="state">{options}</select>'
        f'<input type="hidden" name="page_size" value="{html_text(listing["page_size"])}">'
        '<button type="submit">filter</button></form>'
    )
    query = {k: listing[k] for k in ("name", "state") if listing[k]}
    if listing["page_size"] != PAGE_SIZE:
        query["page_size"] = listing["page_size"]

    def link(page: int, text: str) -> str:
        href = "?" + "&".join(f"{k}={quote(str(v))}" for k, v in {**query, "page": page}.items())
        return f'<a class="page-link" href="{html_text(href)}">{text}</a>'

    page, pages = listing["page"], listing["pages"]
    nav = (
        f'<div class="pages" id="pages">{link(page - 1, "&larr; previous") if page > 1 else ""} '
        f"page {page} of {pages} ({plural(listing['matched'], 'table')} match) "
        f"{link(page + 1, 'next &rarr;') if page < pages else ''}</div>"
    )
    return summary + form + nav
