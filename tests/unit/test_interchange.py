"""Which writer encodings a table column takes (:mod:`cdclake.model.interchange`): the families of
the type map are taken both ways, temporal units only from coarser to finer, and what would change
a value is refused."""

from __future__ import annotations

import itertools

import pytest

from cdclake.model.interchange import DAY_ENCODINGS, TEXT_ENCODINGS, TIME_UNITS, TIMESTAMP_UNITS, conversion
from cdclake.model.schema_diff import same_json_values
from cdclake.model.types import (
    _SEMANTIC,
    CONNECT_PRIMITIVES,
    SPATIAL_ENCODINGS,
    UNSIGNED_INT64,
    decimal_encoding,
    iceberg_type_of_encoding,
)

ALL_ENCODINGS = sorted(
    {*CONNECT_PRIMITIVES, *_SEMANTIC, UNSIGNED_INT64, decimal_encoding(10, 2), decimal_encoding(12, 2)}
    | {decimal_encoding(10, 3), decimal_encoding(60, 2)}
)
"""Every encoding of the type map (two decimals of one scale, one of another, one wider than Iceberg's)."""


@pytest.mark.parametrize("family", [TEXT_ENCODINGS, DAY_ENCODINGS, SPATIAL_ENCODINGS])
def test_a_family_of_one_meaning_is_taken_both_ways_unchanged(family):
    for writer, table in itertools.permutations(sorted(family), 2):
        assert conversion(writer, table) is not None, (writer, table)
        assert conversion(writer, table).factor == 1
        assert same_json_values(writer, table)


def test_mariadb_json_as_plain_text_after_a_snapshot_is_taken():
    # the binlog's CREATE TABLE says JSON (io.debezium.data.Json); a snapshot reads LONGTEXT (string)
    assert conversion("string", "io.debezium.data.Json") is not None
    assert conversion("io.debezium.data.Json", "string") is not None


@pytest.mark.parametrize("units", [TIMESTAMP_UNITS, TIME_UNITS])
def test_temporal_units_are_scaled_from_coarser_to_finer_only(units):
    for writer, table in itertools.permutations(units, 2):
        found = conversion(writer, table)
        if units[writer] <= units[table]:
            assert found is not None and found.factor == 10 ** (units[table] - units[writer]), (writer, table)
        else:
            assert found is None, (writer, table)  # digits the table's encoding cannot hold


@pytest.mark.parametrize(
    ("writer", "table"),
    [
        ("io.debezium.data.Bits", "bytes"),  # BIT(n) bytes are reordered, a BINARY's are not
        ("bytes", "io.debezium.data.Bits"),
        ("double", decimal_encoding(10, 2)),  # decimal.handling.mode=double: rounded
        ("string", decimal_encoding(10, 2)),  # decimal.handling.mode=string: text
        (decimal_encoding(10, 3), decimal_encoding(10, 2)),  # another scale
        (decimal_encoding(12, 2), decimal_encoding(10, 2)),  # more digits
        ("string", "io.debezium.time.ZonedTimestamp"),
        ("int64", "int32"),
        ("double", "float"),
        ("boolean", "int16"),
        ("io.debezium.time.Date", "io.debezium.time.Timestamp"),
    ],
)
def test_what_would_change_a_value_is_refused(writer, table):
    assert conversion(writer, table) is None


def test_every_pair_taken_lands_in_the_same_or_a_promoted_iceberg_type():
    """Generated from the type map: a pair the table takes never changes the Iceberg type other
    than by Iceberg's own promotions (int -> long, float -> double, decimal precision up) or a
    decimal into the exact text of a DECIMAL wider than Iceberg's."""
    promotions = {("int", "long"), ("float", "double")}
    taken = 0
    for writer, table in itertools.product(ALL_ENCODINGS, repeat=2):
        if conversion(writer, table) is None:
            continue
        taken += 1
        w, t = iceberg_type_of_encoding(writer), iceberg_type_of_encoding(table)
        same_kind = w.split("(")[0] == t.split("(")[0] or (w.startswith("decimal(") and t == "string")
        assert w == t or (w, t) in promotions or same_kind, (writer, table, w, t)
    assert taken > len(ALL_ENCODINGS)  # more than the identities
