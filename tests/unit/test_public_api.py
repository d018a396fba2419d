"""The package's public surface (``cdclake.__all__``): every name resolves to the object of its
home module, ``import cdclake`` imports no engine (DAG files import it when they are parsed), and
the package ships its type hints (``py.typed``, PEP 561)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import cdclake
from cdclake.settings import PROJECT_ROOT


def test_every_public_name_is_its_home_modules_object():
    from cdclake import errors, runner, settings
    from cdclake.model import config
    from cdclake.pipeline import reconcile

    homes = {errors, runner, settings, config, reconcile}
    for name in cdclake.__all__:
        value = getattr(cdclake, name)
        assert any(getattr(home, name, None) is value for home in homes), name
    with pytest.raises(AttributeError, match="no attribute 'apply_range'"):
        _ = cdclake.apply_range


def test_importing_the_package_and_its_config_imports_no_engine():
    code = (
        "import sys, cdclake, cdclake.model.config; "
        "print(sorted(m for m in ('pyspark', 'confluent_kafka', 'pyiceberg') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(PROJECT_ROOT / "include")},
    ).stdout
    assert out.strip() == "[]"


def test_the_package_ships_its_type_hints():
    assert (PROJECT_ROOT / "include" / "cdclake" / "py.typed").is_file()
    assert 'cdclake = ["py.typed"]' in (PROJECT_ROOT / "pyproject.toml").read_text()
