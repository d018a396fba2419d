"""Finding a Java of at least a version (``cdclake_dev.system.java_at_least``, Trino's Java 24+):
the override, ``JAVA_HOME``, ``PATH``, the alternatives and ``/usr/lib/jvm``, on fake Java homes
(a ``release`` file, or a ``bin/java`` that prints a version as ``java -version`` does)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake.errors import ConfigError
from cdclake_dev import system
from cdclake_dev.system import TRINO_JAVA_HOME, JavaNotFoundError, java_at_least, java_version


def fake_home(root: Path, name: str, version: str, *, release: bool = True) -> Path:
    """A Java home ``root/name`` of ``version``: a ``release`` file, or else a ``bin/java`` script
    printing the version on stderr."""
    home = root / name
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2026-01-20' >&2\n")
    java.chmod(0o755)
    if release:
        (home / "release").write_text(f'IMPLEMENTOR="Test"\nJAVA_VERSION="{version}"\n')
    return home


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine with Java 17 on PATH and as JAVA_HOME, Java 25 only under its JVM folder."""
    jvm = tmp_path / "jvm"
    old = fake_home(jvm, "java-17-openjdk-amd64", "17.0.15")
    fake_home(jvm, "temurin-25-jdk-amd64", "25.0.3", release=False)
    monkeypatch.setattr(system, "JVM_DIR", jvm)
    monkeypatch.setattr(system, "_alternatives", lambda: [old / "bin" / "java"])
    monkeypatch.setenv("PATH", str(old / "bin"))
    monkeypatch.setenv("JAVA_HOME", str(old))
    monkeypatch.delenv(TRINO_JAVA_HOME, raising=False)
    return jvm


def test_the_version_comes_from_the_release_file_or_java_version(machine: Path):
    assert java_version(machine / "java-17-openjdk-amd64" / "bin" / "java") == 17
    assert java_version(machine / "temurin-25-jdk-amd64" / "bin" / "java") == 25  # no release file
    assert java_version(machine / "nothing" / "bin" / "java") is None


def test_an_old_java_home_is_passed_over_for_a_newer_java_of_the_jvm_folder(machine: Path):
    assert java_at_least(24) == str(machine / "temurin-25-jdk-amd64" / "bin" / "java")
    assert java_at_least(17) == str(machine / "java-17-openjdk-amd64" / "bin" / "java")  # JAVA_HOME first


def test_the_override_wins_and_is_never_passed_over(machine: Path, monkeypatch: pytest.MonkeyPatch):
    other = fake_home(machine.parent / "opt", "jdk-26", "26")
    monkeypatch.setenv(TRINO_JAVA_HOME, str(other))
    assert java_at_least(24) == str(other / "bin" / "java")
    monkeypatch.setenv(TRINO_JAVA_HOME, str(machine / "java-17-openjdk-amd64"))
    with pytest.raises(JavaNotFoundError, match=f"{TRINO_JAVA_HOME}=.* holds Java 17"):
        java_at_least(24)


def test_no_java_new_enough_names_the_variable_and_what_was_found(machine: Path):
    with pytest.raises(JavaNotFoundError) as raised:
        java_at_least(30)
    assert isinstance(raised.value, ConfigError) and isinstance(raised.value, FileNotFoundError)
    message = str(raised.value)
    assert TRINO_JAVA_HOME in message and "(Java 17)" in message and "(Java 25)" in message
