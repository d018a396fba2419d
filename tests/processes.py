"""Process checks shared by the tests that start the production parts (tests/integration/
test_parts.py, test_catalogs.py): read a part's pid file, and tell whether its process group is
gone after ``stop()``."""

from __future__ import annotations

from pathlib import Path


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still runs (zombies count as gone)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields after "(comm)": state ppid pgrp
            return True
    return False


def pid_in(path: Path) -> int:
    """The pid on the first line of the pid file ``path``."""
    return int(path.read_text().splitlines()[0])
