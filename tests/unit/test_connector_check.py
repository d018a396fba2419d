"""Unit tests for :mod:`cdclake.model.connector_check`: events whose Connect schema shows another
Debezium handling mode than the table's columns were made for."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cdclake.model.config_blocks import ConnectorModes
from cdclake.model.connector_check import mode_contradictions
from cdclake.model.envelope import KafkaCoordinates
from cdclake.model.mysql_types import column_type
from cdclake.model.types import ColumnSpec

DECIMAL = "org.apache.kafka.connect.data.Decimal"


def _table(type_name: str, modes: ConnectorModes, length: int | None = None, scale: int | None = None) -> ColumnSpec:
    """The column schema sync makes of a ``tableChanges`` column under ``modes``."""
    iceberg, encoding = column_type({"name": "c", "typeName": type_name, "length": length, "scale": scale}, modes)
    return ColumnSpec("c", iceberg, False, encoding)


def _schema(**fields: dict) -> dict:
    return {
        "type": "struct",
        "field": "after",
        "fields": [{"field": n, "optional": True, **f} for n, f in fields.items()],
    }


def _decimal(precision: int, scale: int) -> dict:
    return {
        "type": "bytes",
        "name": DECIMAL,
        "parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)},
    }


DEFAULT = ConnectorModes()


def _at(*schemas: dict) -> list[tuple[KafkaCoordinates, dict]]:
    """The row schemas as samples of partition 0 offsets 10, 11, ..."""
    return [(KafkaCoordinates("dbz.shop.t", 0, 10 + i), s) for i, s in enumerate(schemas)]


@pytest.mark.parametrize(
    ("table", "event", "setting", "shown"),
    [
        (_table("DECIMAL", DEFAULT, 10, 2), {"type": "double"}, "decimal.handling.mode", "double"),
        (_table("DECIMAL", DEFAULT, 10, 2), {"type": "string"}, "decimal.handling.mode", "string"),
        (_table("BIGINT UNSIGNED", DEFAULT), {"type": "int64"}, "bigint.unsigned.handling.mode", "long"),
        (
            _table("BIGINT UNSIGNED", ConnectorModes(bigint_unsigned_handling_mode="long")),
            _decimal(20, 0),
            "bigint.unsigned.handling.mode",
            "precise",
        ),
        (
            _table("DECIMAL", ConnectorModes(decimal_handling_mode="double"), 10, 2),
            _decimal(10, 2),
            "decimal.handling.mode",
            "precise",
        ),
        (_table("VARBINARY", DEFAULT, 16), {"type": "string"}, "binary.handling.mode", "base64 or hex"),
        (
            _table("BLOB", ConnectorModes(binary_handling_mode="hex")),
            {"type": "bytes"},
            "binary.handling.mode",
            "bytes",
        ),
        (
            _table("DATETIME", DEFAULT, 6),
            {"type": "int64", "name": "io.debezium.time.Timestamp"},
            "time.precision.mode",
            "adaptive",
        ),
        (
            _table("TIME", ConnectorModes(time_precision_mode="connect")),
            {"type": "int64", "name": "io.debezium.time.MicroTime"},
            "time.precision.mode",
            "adaptive_time_microseconds",
        ),
    ],
)
def test_events_in_another_mode_than_the_table_are_named_with_the_setting(table, event, setting, shown):
    (found,) = mode_contradictions([table], _at(_schema(c=event)), DEFAULT)
    assert (found.column, found.setting, found.events, found.table_encoding) == ("c", setting, shown, table.encoding)
    line = found.describe()
    assert line.startswith(
        f"topic 'dbz.shop.t' partition 0 offset 10: column 'c': the events are {found.event_encoding} ({setting}={shown}) but the table's column"
    )
    assert f"table config connector: {setting.replace('.', '_')}: " in line


def test_events_in_the_tables_modes_and_ordinary_type_changes_are_not_contradictions():
    made = {"c": ("DECIMAL", 10, 2), "u": ("BIGINT UNSIGNED", None, None), "i": ("INT", None, None)}
    made |= {"v": ("VARCHAR", 20, None), "d": ("DATETIME", 6, None)}
    columns = [replace(_table(t, DEFAULT, length, scale), name=n) for n, (t, length, scale) in made.items()]
    same = _schema(
        c=_decimal(10, 2),
        u=_decimal(20, 0),
        i={"type": "int32"},
        v={"type": "string"},
        d={"type": "int64", "name": "io.debezium.time.MicroTimestamp"},
    )
    assert mode_contradictions(columns, _at(same), DEFAULT) == ()
    # an INT widened to BIGINT, a DECIMAL(10,2) to DECIMAL(12,2), a VARCHAR to an ENUM: schema changes, not modes
    widened = _schema(c=_decimal(12, 2), i={"type": "int64"}, v={"type": "string", "name": "io.debezium.data.Enum"})
    assert mode_contradictions(columns, _at(widened), DEFAULT) == ()


def test_each_column_is_named_once_with_the_first_sample_that_shows_it():
    table = [_table("DECIMAL", DEFAULT, 10, 2)]
    found = mode_contradictions(
        table, _at(_schema(c=_decimal(10, 2)), _schema(c={"type": "double"}), _schema(c={"type": "double"})), DEFAULT
    )
    assert [(f.column, f.where.partition, f.where.offset) for f in found] == [("c", 0, 11)]
