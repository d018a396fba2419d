"""What the parts take from this machine: the Java runtime, the jars ``make setup`` fetched, and
files only their owner may read."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from cdclake.settings import jars_dir


def java_executable() -> str:
    """``$JAVA_HOME/bin/java`` when it exists, else ``java`` on ``PATH``.

    Raises:
        FileNotFoundError: neither exists.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise FileNotFoundError("java not found: install a Java 17 runtime or set JAVA_HOME")
    return found


def single_jar(profile: str, pattern: str) -> Path:
    """The last (by name) jar matching ``pattern`` in ``.jars/<profile>``.

    Raises:
        FileNotFoundError: none (run ``make setup``).
    """
    found = sorted(jars_dir(profile).glob(pattern))
    if not found:
        raise FileNotFoundError(f"no {pattern} in {jars_dir(profile)}: run `make setup` first")
    return found[-1]


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (mode 0600, also when it existed;
    the folder is created when missing): credentials, tokens, settings that hold them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
