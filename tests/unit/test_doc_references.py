"""The code and the docs cite sections of the runbook (``docs/operations.md``) and of the errors'
reference (``docs/errors.md``) as ``docs/<page>.md, "<heading>"`` (or ``[<page>.md](<page>.md),
"<heading>"``), and link them as ``<page>.md#<anchor>``: every such section exists on that page.
A cited heading may be the start of one (``"A new binlog history"``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("errors", "operations")
CITATION = re.compile(r"""\b(errors|operations)\.md`{0,2}(?:\]\([^)]*\))?,\s+["']([^"']+)["']""")
LINK = re.compile(r"\]\((?:docs/)?(errors|operations)\.md#([^)\s]+)\)")


def _headings(page: str) -> list[str]:
    out, fence = [], False
    for line in (ROOT / "docs" / f"{page}.md").read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and (m := re.match(r"#{1,6} (.+)", line)):
            out.append(m.group(1).strip())
    return out


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading (as ``cdclake_airflow.monitor.heading_id`` makes it)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _flat(text: str) -> str:
    """``text`` with Python's implicit string concatenation and line breaks joined, so that a
    citation split over lines reads as one."""
    text = re.sub(r"""["']\s*\n\s*f?["']""", "", text)
    return re.sub(r"\s*\n\s*(?:#\s*)?", " ", text).replace('\\"', '"')


def _citing_files() -> list[Path]:
    out = [ROOT / "README.md"]
    for folder in ("include", "plugins", "dags", "bench", "tests", "docs"):
        out += [
            p
            for p in sorted((ROOT / folder).rglob("*"))
            if p.is_file()
            and p.suffix in {".py", ".md", ".html", ".yaml"}
            and "results" not in p.parts
            and p.name != "HISTORY.md"  # the dated sittings cite the pages as they were then
        ]
    return out


def test_every_cited_section_of_the_runbook_and_the_errors_reference_exists():
    headings = {page: _headings(page) for page in PAGES}
    assert "ConfigError" in headings["errors"] and "Other failures" in headings["errors"]
    assert "ConfigError" not in headings["operations"] and "Running a table" in headings["operations"]
    cited, missing = 0, []
    for path in _citing_files():
        text = _flat(path.read_text())
        for m in CITATION.finditer(text):
            page, heading = m.group(1), " ".join(m.group(2).split())
            cited += 1
            if not any(h == heading or h.startswith(heading) for h in headings[page]):
                missing.append(f"{path.relative_to(ROOT)}: {page}.md, {heading!r}")
    assert cited > 100 and missing == []


def test_every_link_to_a_section_of_the_runbook_or_the_errors_reference_resolves():
    anchors = {page: {_anchor(h) for h in _headings(page)} for page in PAGES}
    linked, missing = 0, []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for m in LINK.finditer(path.read_text()):
            linked += 1
            if m.group(2) not in anchors[m.group(1)]:
                missing.append(f"{path.relative_to(ROOT)}: {m.group(1)}.md#{m.group(2)}")
    assert linked > 0 and missing == []
