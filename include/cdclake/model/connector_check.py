"""The events against the table's column encodings: which Debezium connector handling mode the
events show where the table expects another (pure).

A table's columns get their encodings from the table config's ``connector:`` modes (schema sync,
:mod:`cdclake.model.mysql_types`) or from the first events' Connect schema
(:mod:`cdclake.model.types`), and the apply decodes every value by the column's encoding. When the
connector runs with another mode than the table was made for, the values still decode, but wrong:

===================================  ==========================  ===============================================
table column                         events (Connect schema)     what lands
===================================  ==========================  ===============================================
``Decimal(P,S)`` (DECIMAL, BIGINT    ``double``/``float64``      values Debezium rounded to a double
UNSIGNED ``precise``)                (``decimal.handling.mode``
                                     ``double``)
``Decimal(P,S)``                     ``string``                  decimal text decoded as base64: wrong values
                                     (``decimal.handling.mode``  or bad records
                                     ``string``)
``Decimal(P,0)``                     ``int64`` (``bigint.        values above 2^63-1 wrapped to negative numbers
                                     unsigned.handling.mode``
                                     ``long``)
``int64(unsigned)``, ``double``,     ``Decimal`` (``precise``)   base64 bytes that fit no number: bad records
``float``                                                        (or text, in a ``string`` column)
``bytes``                            ``string`` (``binary.       hex text decoded as base64: wrong bytes;
                                     handling.mode`` ``base64``  url-safe base64: bad records
                                     or ``hex``)
``string`` of BINARY (``base64``     ``bytes``                   the base64 text of the bytes, as text
or ``hex`` mode)
a DATETIME or TIME in one unit       the other unit (``time.     values read in the wrong unit (1970 dates,
(ms or us)                           precision.mode``)           durations a thousand times off)
===================================  ==========================  ===============================================

The apply checks the Connect schema of the first and the last record of each run
(:func:`mode_contradictions`), says what it finds once per run in its log, its result and its
commit's summary (:attr:`~cdclake.model.layout.SummaryKeys.CONNECTOR_CONTRADICTIONS`; ``cdclake
status`` and the monitor show the last CDC commit's), naming the record that shows it, and applies
the batch as before: the remedy is the operator's (docs/operations.md, "Events that contradict the
connector modes").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cdclake.errors import SchemaError
from cdclake.model.config_blocks import ConnectorModes
from cdclake.model.envelope import KafkaCoordinates
from cdclake.model.types import UNSIGNED_INT64, ColumnSpec, column_from_connect, parse_decimal_encoding

_DOUBLES = frozenset({"double", "float64", "float", "float32"})
_MILLIS = frozenset(
    {
        "io.debezium.time.Timestamp",
        "org.apache.kafka.connect.data.Timestamp",
        "io.debezium.time.Time",
        "org.apache.kafka.connect.data.Time",
    }
)
_MICROS = frozenset({"io.debezium.time.MicroTimestamp", "io.debezium.time.MicroTime"})


def _is_decimal(encoding: str) -> bool:
    return parse_decimal_encoding(encoding) is not None


@dataclass(frozen=True)
class ModeContradiction:
    """One column whose events show another connector handling mode than its table column.

    Attributes:
        where: the record whose Connect schema shows it (the first sampled that does).
        column: the column.
        setting: the Debezium connector property (``decimal.handling.mode``).
        events: the mode the events show (``double``).
        table_encoding: the column's encoding in the table (:mod:`cdclake.model.types`).
        event_encoding: the encoding the events' Connect schema gives it.
        configured: the table config's ``connector:`` value of the setting.
        effect: what lands.
    """

    where: KafkaCoordinates
    column: str
    setting: str
    events: str
    table_encoding: str
    event_encoding: str
    configured: str
    effect: str

    def describe(self) -> str:
        """One line for the log, the run's result and the commit's summary: the record, the column,
        the mode the events show against the table's, what lands."""
        key = self.setting.replace(".", "_")
        return (
            f"{self.where}: column {self.column!r}: the events are {self.event_encoding} ({self.setting}={self.events}) but the "
            f"table's column is {self.table_encoding} (table config connector: {key}: {self.configured}): "
            f"{self.effect}"
        )


_Rule = tuple[Callable[[str], bool], Callable[[str], bool], str, Callable[[str], str], str]
_RULES: tuple[_Rule, ...] = (
    (_is_decimal, _DOUBLES.__contains__, "decimal.handling.mode", lambda _e: "double", "values rounded to a double"),
    (
        _is_decimal,
        "string".__eq__,
        "decimal.handling.mode",
        lambda _e: "string",
        "decimal text decoded as base64 bytes: wrong values or bad records",
    ),
    (
        _is_decimal,
        "int64".__eq__,
        "bigint.unsigned.handling.mode",
        lambda _e: "long",
        "values above 2^63-1 arrive wrapped to negative numbers and land so",
    ),
    (
        UNSIGNED_INT64.__eq__,
        _is_decimal,
        "bigint.unsigned.handling.mode",
        lambda _e: "precise",
        "the decimal bytes fit no long: bad records",
    ),
    (
        lambda t: t in _DOUBLES or t == "string",
        _is_decimal,
        "decimal.handling.mode",
        lambda _e: "precise",
        "the decimal bytes fit no number (bad records), or land as their base64 text",
    ),
    (
        "bytes".__eq__,
        "string".__eq__,
        "binary.handling.mode",
        lambda _e: "base64 or hex",
        "text decoded as base64: hex text lands as wrong bytes, url-safe base64 as bad records",
    ),
    ("string".__eq__, "bytes".__eq__, "binary.handling.mode", lambda _e: "bytes", "the bytes land as base64 text"),
    (
        _MICROS.__contains__,
        _MILLIS.__contains__,
        "time.precision.mode",
        lambda e: "connect" if e.startswith("org.apache.kafka") else "adaptive",
        "milliseconds read as microseconds",
    ),
    (
        _MILLIS.__contains__,
        _MICROS.__contains__,
        "time.precision.mode",
        lambda _e: "adaptive_time_microseconds",
        "microseconds read as milliseconds",
    ),
)
"""``(table encoding?, event encoding?, setting, the mode the events show, what lands)``: the module table."""


def contradicts_modes(table_encoding: str, event_encoding: str) -> bool:
    """Whether events of ``event_encoding`` in a column of ``table_encoding`` show another connector
    handling mode (the module table): a contradiction this check reports, not a schema change."""
    return any(table_test(table_encoding) and event_test(event_encoding) for table_test, event_test, *_ in _RULES)


def _event_encodings(row_schema: dict[str, Any]) -> dict[str, str]:
    """``{column: encoding}`` of a row schema's fields; fields this version cannot map are left
    out (the apply reports their values, if they do not fit)."""
    encodings = {}
    for field in row_schema.get("fields", ()):
        try:
            spec = column_from_connect(field)
        except SchemaError:
            continue
        encodings[spec.name] = spec.encoding
    return encodings


def mode_contradictions(
    columns: Iterable[ColumnSpec],
    samples: Iterable[tuple[KafkaCoordinates, dict[str, Any]]],
    modes: ConnectorModes,
) -> tuple[ModeContradiction, ...]:
    """The table's columns whose events show another connector handling mode (module table), at
    most one per column (named with the first sample that shows it), in column order.

    Args:
        columns: the table's source columns with their encodings.
        samples: ``(where, row schema)`` of the sampled records: their Kafka coordinates and the
            Connect struct schema of their row image
            (:meth:`~cdclake.model.envelope.ChangeEvent.row_schema`).
        modes: the table config's ``connector:`` modes (named in the description).
    """
    found: dict[str, ModeContradiction] = {}
    table = list(columns)
    for where, row_schema in samples:
        events = _event_encodings(row_schema)
        for column in table:
            event = events.get(column.name)
            if column.name in found or event is None or event == column.encoding:
                continue
            for table_test, event_test, setting, shown, effect in _RULES:
                if table_test(column.encoding) and event_test(event):
                    configured = str(getattr(modes, setting.replace(".", "_")))
                    found[column.name] = ModeContradiction(
                        where, column.name, setting, shown(event), column.encoding, event, configured, effect
                    )
                    break
    return tuple(found[c.name] for c in table if c.name in found)
