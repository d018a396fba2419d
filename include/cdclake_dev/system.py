"""What the parts take from this machine: the Java runtime (the default one, or one of at least a
given version: :func:`java_at_least`), the jars ``make setup`` fetched, and files only their owner
may read."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from pathlib import Path

from cdclake.errors import ConfigError
from cdclake.settings import jars_dir

logger = logging.getLogger(__name__)

TRINO_JAVA_HOME = "TRINO_JAVA_HOME"
"""The environment variable naming the Java home Trino runs on (it needs Java 24 or newer, the
project's other JVMs Java 17): :func:`java_at_least`'s override."""

JVM_DIR = Path("/usr/lib/jvm")
"""Where Debian (and Ubuntu) install Java runtimes, one folder each: searched by :func:`java_at_least`."""


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


class JavaNotFoundError(ConfigError, FileNotFoundError):
    """No Java runtime of the version a part needs (Trino: 24 or newer) was found; nothing was
    started. The message names the environment variable that points at one (its Java home), the
    places searched and the versions found there. A :class:`~cdclake.errors.ConfigError` (the
    remedy is a setting, or installing a JDK), and a ``FileNotFoundError`` as
    :func:`java_executable`'s."""


def _major(version: str) -> int | None:
    """The feature release of a Java version string: ``25.0.3`` -> 25, ``17`` -> 17, ``25-ea`` ->
    25, ``1.8.0_402`` -> 8; ``None`` when it has no leading number."""
    m = re.match(r"(\d+)(?:\.(\d+))?", version.strip())
    if m is None:
        return None
    first = int(m.group(1))
    return int(m.group(2)) if first == 1 and m.group(2) else first


def java_version(java: Path) -> int | None:
    """The feature release (major version) of the Java runtime whose executable is ``java``: the
    ``JAVA_VERSION`` of the ``release`` file of its home (``<home>/bin/java``, links resolved),
    else what ``java -version`` prints. ``None`` when ``java`` is no file or neither says."""
    try:
        java = java.resolve(strict=True)
    except OSError:
        return None
    if not java.is_file():
        return None
    try:
        release = (java.parent.parent / "release").read_text(errors="replace")
        m = re.search(r'^JAVA_VERSION="([^"]+)"', release, re.MULTILINE)
        if m:
            return _major(m.group(1))
    except OSError:
        pass
    try:
        out = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError) as e:
        logger.debug("%s -version failed: %s", java, e)
        return None
    m = re.search(r'version "([^"]+)"', out.stderr + out.stdout)
    return _major(m.group(1)) if m else None


def _alternatives() -> list[Path]:
    """The ``java`` executables ``update-alternatives --list java`` registers (none when the
    command is missing or fails)."""
    if shutil.which("update-alternatives") is None:
        return []
    try:
        out = subprocess.run(
            ["update-alternatives", "--list", "java"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [Path(line.strip()) for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def java_candidates() -> list[Path]:
    """The ``java`` executables of this machine, in the order :func:`java_at_least` tries them:
    ``$JAVA_HOME/bin/java``, the ``java`` on ``PATH``, each one ``update-alternatives --list java``
    names, then each ``/usr/lib/jvm/*/bin/java`` (:data:`JVM_DIR`, by name); one entry per runtime
    (links resolved), only those that exist."""
    found: list[Path] = []
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        found.append(Path(java_home) / "bin" / "java")
    on_path = shutil.which("java")
    if on_path:
        found.append(Path(on_path))
    found += _alternatives()
    found += sorted(JVM_DIR.glob("*/bin/java"))
    seen: set[Path] = set()
    unique: list[Path] = []
    for java in found:
        try:
            real = java.resolve(strict=True)
        except OSError:
            continue
        if real not in seen:
            seen.add(real)
            unique.append(java)
    return unique


def java_at_least(major: int, *, env_var: str = TRINO_JAVA_HOME, what: str = "Trino") -> str:
    """A ``java`` executable of Java ``major`` or newer, for ``what``.

    The rule: when the environment variable ``env_var`` is set, ``$<env_var>/bin/java``, which must
    be of that version (an override is never passed over); else the first of
    :func:`java_candidates` (``$JAVA_HOME``, ``PATH``, ``update-alternatives --list java``,
    ``/usr/lib/jvm/*/bin/java``) whose version (:func:`java_version`: the home's ``release`` file or
    ``java -version``) is at least ``major``. No path of a version is written anywhere.

    Raises:
        JavaNotFoundError: ``env_var`` names no Java of that version, or none of the candidates is
            (the message lists what was found and says to set ``env_var``).
    """
    override = os.environ.get(env_var)
    if override:
        java = Path(override) / "bin" / "java"
        version = java_version(java)
        if version is None or version < major:
            found = "no Java runtime" if version is None else f"Java {version}"
            raise JavaNotFoundError(
                f"{what} needs Java {major} or newer, and {env_var}={override} holds {found} "
                f"({java}): set {env_var} to the home (the folder of bin/java) of a Java {major}+ runtime"
            )
        return str(java)
    seen: list[str] = []
    for java in java_candidates():
        version = java_version(java)
        if version is not None and version >= major:
            logger.debug("%s runs on %s (Java %d)", what, java, version)
            return str(java)
        seen.append(f"{java} (Java {version})" if version is not None else f"{java} (version unknown)")
    looked = ", ".join(seen) if seen else "none"
    raise JavaNotFoundError(
        f"{what} needs Java {major} or newer; none found among $JAVA_HOME, PATH, `update-alternatives --list java` "
        f"and {JVM_DIR}/*/bin/java (found: {looked}). Install a Java {major}+ JDK, or set {env_var} to the home "
        "(the folder of bin/java) of one"
    )


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
