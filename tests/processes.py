"""Process checks shared by the tests that start the production parts (tests/integration/
test_parts.py, test_catalogs.py): read a part's pid file, and tell whether its process group is
gone after ``stop()``."""

from __future__ import annotations

from pathlib import Path

from cdclake_dev.process import group_alive

__all__ = ["group_alive", "pid_in"]


def pid_in(path: Path) -> int:
    """The pid on the first line of the pid file ``path``."""
    return int(path.read_text().splitlines()[0])
