"""The repository stands on its own, and the package layout keeps its rules.

* Nothing in the project reads or cites a file outside the repository (the captured Debezium
  files are copied into ``examples/debezium`` and ``tests/fixtures/debezium``).
* No two modules of ``cdclake`` import each other, directly or through others (the layers
  themselves are checked by import-linter, ``[tool.importlinter]`` in ``pyproject.toml``).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {
    ".git",
    ".venv",
    ".jars",
    ".stack",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    "results",
    "node_modules",
}
# The folder beside the repository that other projects keep their captures in; its name is built
# from parts so that this file does not match itself.
_BESIDE = "sha" + "red"
OUTSIDE = re.compile(
    "|".join(
        [
            re.escape("..") + "/" + _BESIDE,
            '"' + _BESIDE + r'"\s*/',
            _BESIDE + "/fixtures",
            "ARCHITECTURE" + r"\.md",
            "PRODUCTION-" + r"PARTS\.md",
        ]
    )
)


def project_files() -> list[Path]:
    out = []
    for path in ROOT.rglob("*"):
        if any(part in SKIP_DIRS for part in path.relative_to(ROOT).parts) or not path.is_file():
            continue
        if "fixtures" in path.parts or path.parts[-3:-1] == ("examples", "debezium"):
            continue  # copied data, byte for byte
        if path.suffix in {".py", ".md", ".sh", ".toml", ".yaml", ".yml", ".json", ".cfg", ".ini", ".txt", ""}:
            out.append(path)
    return out


def test_nothing_reads_or_cites_files_outside_the_repository():
    files = project_files()
    assert any(f.name == "conftest.py" for f in files) and any(f.name == "Makefile" for f in files)
    hits = []
    for path in files:
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert hits == []


def test_the_captured_debezium_files_are_in_the_repository():
    for folder in (ROOT / "examples" / "debezium", ROOT / "tests" / "fixtures" / "debezium"):
        readme = (folder / "README.md").read_text()
        data = [
            p for p in folder.rglob("*") if p.is_file() and p.name not in ("README.md", "SHA256SUMS", ".gitattributes")
        ]
        assert data, folder
        for path in data:
            assert path.parent.name in readme, f"{path} has no provenance in {folder / 'README.md'}"


def test_no_module_cycles_in_the_package():
    import grimp

    graph = grimp.build_graph("cdclake")
    modules = sorted(graph.modules)
    edges = {m: {i for i in graph.find_modules_directly_imported_by(m) if i.startswith("cdclake")} for m in modules}
    # a package imports its own modules only through its __init__, which here are empty
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n) :] + [n] if n in stack else [m, n])
            elif n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in modules:
        if m not in state:
            visit(m, [m])
    assert len(modules) > 30
    assert cycles == []
