"""The format version of a table (:mod:`cdclake.model.format_version`): the config key and its
default, which catalogs can hold v3, the upgrade's rules (never down) and a run's note when the
table and its config disagree. The tables themselves: tests/integration/test_format_version.py."""

from __future__ import annotations

import pytest

from cdclake.errors import ConfigError, FormatVersionError
from cdclake.model.format_version import check_catalog, upgrade_needed, version_note
from cdclake.model.layout import SIDE_TABLE_PROPERTIES, TABLE_PROPERTIES
from tests.unit.test_config import TABLE_A, TABLE_B, config_error, load_text


def test_format_version_defaults_to_2_and_is_taken_from_defaults_or_the_table(tmp_path):
    assert load_text(tmp_path, "tables:\n" + TABLE_A).tables[0].format_version == 2
    products, customers = load_text(
        tmp_path, "defaults:\n  format_version: 3\ntables:\n" + TABLE_A + "    format_version: 2\n" + TABLE_B
    ).tables
    assert (products.format_version, customers.format_version) == (2, 3)
    # the tables' properties before their config's version is set on them: v2, side tables always
    assert TABLE_PROPERTIES["format-version"] == SIDE_TABLE_PROPERTIES["format-version"] == "2"


@pytest.mark.parametrize("value", ["1", "4", "'three'"])
def test_a_format_version_other_than_2_or_3_is_a_config_error_naming_the_key(tmp_path, value):
    message = config_error(tmp_path, "tables:\n" + TABLE_A + f"    format_version: {value}\n")
    assert "format_version" in message


def test_v3_is_refused_outside_the_rest_catalog_naming_the_upstream_issue():
    check_catalog("inventory.products", 2, "sql")
    check_catalog("inventory.products", 3, "rest")
    with pytest.raises(FormatVersionError, match=r"format_version 3 needs the REST catalog.*'sql'.*#1551") as e:
        check_catalog("inventory.products", 3, "sql")
    assert isinstance(e.value, ValueError) and not isinstance(e.value, ConfigError)


def test_an_upgrade_goes_up_only():
    assert upgrade_needed("ns.t", 2, 3) is True
    assert upgrade_needed("ns.t", 3, 3) is False
    assert upgrade_needed("ns.t", 2, 2) is False
    with pytest.raises(FormatVersionError, match="is format v3: it cannot be downgraded to v2"):
        upgrade_needed("ns.t", 3, 2)
    with pytest.raises(FormatVersionError, match="format version 4 is not one of 2, 3"):
        upgrade_needed("ns.t", 3, 4)


def test_a_run_notes_a_table_whose_version_its_config_does_not_name():
    assert version_note("products", "inventory.products", 3, 3) is None
    lower = version_note("products", "inventory.products", 2, 3)
    assert lower is not None and "`cdclake upgrade products`" in lower
    higher = version_note("products", "inventory.products", 3, 2)
    assert higher is not None and "never downgraded" in higher


def test_creating_side_tables_leaves_the_shared_properties_whole(tmp_path):
    """pyiceberg's ``create_table`` pops ``format-version`` from the dict it is given: the shared
    properties are read-only and every table is created from a copy, so the second side table is v2
    too (CI once saw ``SIDE_TABLE_PROPERTIES`` without its version after an integration test)."""
    from pyiceberg.catalog.sql import SqlCatalog

    from cdclake.io.side_tables import ensure_side_table

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/w")
    tables = [ensure_side_table(catalog, f"cdc.side_{i}", [("id", "long", True)]) for i in range(2)]
    assert [t.metadata.format_version for t in tables] == [2, 2]
    assert SIDE_TABLE_PROPERTIES["format-version"] == "2"
    with pytest.raises(TypeError):
        SIDE_TABLE_PROPERTIES["format-version"] = "3"  # type: ignore[index]
