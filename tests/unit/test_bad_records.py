"""Unit tests for :mod:`cdclake.model.bad_records`: a run's bad records grouped by cause (the
variable parts of their errors left out) and the error of a run above its tolerance."""

from __future__ import annotations

import re

import pytest

from cdclake.errors import QuarantineToleranceError
from cdclake.model.bad_records import (
    HELD_BACK,
    MAX_CAUSES,
    NewQuarantine,
    QuarantineCause,
    cause_of,
    column_of,
    tolerance_error,
)
from cdclake.model.config import TableConfig
from cdclake.model.offsets import OffsetRange
from cdclake.model.plan import RunPlan

CFG = TableConfig(name="orders", topic="p.shop.orders", namespace="shop", table="orders", primary_key=("id",))


@pytest.mark.parametrize(
    ("errors", "cause"),
    [
        (
            [
                "column 'price' (after image): value \"abc\" (Connect string in the event's schema) does not fit "
                "the table's decimal(10,2) (encoding Decimal(10,2))",
                "column 'price' (after image): value \"x (y)\" (Connect string in the event's schema) does not fit "
                "the table's decimal(10,2) (encoding Decimal(10,2))",
            ],
            "column 'price' (after image): value ... (Connect string in the event's schema) does not fit the "
            "table's decimal(10,2) (encoding Decimal(10,2))",
        ),
        (
            [
                "column 'n': value 12 does not fit date (encoding int32)",
                "column 'n': value -3 does not fit date (encoding int32)",
            ],
            "column 'n': value ... does not fit date (encoding int32)",
        ),
        (
            [
                "column 'n': value -1 is BIGINT UNSIGNED 18446744073709551615 wrapped past 2^63-1 by the connector's",
                "column 'n': value -7 is BIGINT UNSIGNED 18446744073709551609 wrapped past 2^63-1 by the connector's",
            ],
            "column 'n': value ... is BIGINT UNSIGNED ... wrapped past 2^63-1 by the connector's",
        ),
        (
            [
                "source has no binlog position (file '', pos 0): use",
                "source has no binlog position (file 'x', pos 12): use",
            ],
            "source has no binlog position (file '...', pos ...): use",
        ),
        (
            [
                "held back behind the quarantined record at offset 41 of the same key",
                "held back behind the quarantined record at offset 7 of the same key",
            ],
            HELD_BACK,
        ),
        (
            [
                "value is not in the Confluent wire format (magic byte 0, a 4-byte schema id, the Avro datum): 7 "
                "bytes long, first byte 0x7B",
                "value is not in the Confluent wire format (magic byte 0, a 4-byte schema id, the Avro datum): 123 "
                "bytes long, first byte 0x01",
            ],
            "value is not in the Confluent wire format (magic byte 0, a 4-byte schema id, the Avro datum): ... "
            "bytes long, first byte 0x...",
        ),
        (["value is not JSON"], "value is not JSON"),
        (["schema id 7 is not in the schema registry"], "schema id 7 is not in the schema registry"),
    ],
)
def test_errors_of_one_cause_differ_only_in_their_variable_parts(errors, cause):
    assert {cause_of(e) for e in errors} == {cause}


def test_the_column_an_error_names():
    assert column_of("column 'price' (after image): value 1 (JSON int) does not fit") == "price"
    assert column_of("schema id 3: column 'qty' is string in the writer schema") == "qty"
    assert column_of("primary key column 'id' is null") == "id"
    assert column_of("value is not JSON") is None


def _plan() -> RunPlan:
    return RunPlan(
        table=CFG, run_id="scheduled__1", range=OffsetRange(topic=CFG.topic, start={0: 0, 1: 5}, end={0: 10, 1: 5})
    )


def test_the_error_of_a_run_above_its_tolerance_names_each_cause_once_with_its_count_and_remedy():
    found = NewQuarantine(
        bad=453,
        held=2,
        causes=(
            QuarantineCause(
                "column 'price': value ... does not fit decimal(10,2) (encoding Decimal)",
                450,
                "price",
                None,
                False,
                0,
                3,
            ),
            QuarantineCause("value is not JSON", 3, None, None, False, 0, 1),
            QuarantineCause(HELD_BACK, 2, None, None, True, 0, 9),
        ),
    )
    error = tolerance_error(_plan(), found, 77)
    assert isinstance(error, QuarantineToleranceError)
    text = str(error)
    assert text.startswith(
        "table shop.orders: this run quarantined 453 bad record(s) of topic 'p.shop.orders' (partition 0 offsets "
        "[0, 10)), more than bad_records_tolerance 0, and held back 2 record(s) of their keys; by cause:\n"
        "  450 bad record(s) (column 'price'): column 'price': value ... does not fit decimal(10,2) (encoding Decimal) "
        "(first: partition 0 offset 3)\n    remedy: the values of column 'price' do not fit the table's type"
    )
    assert (
        "  3 bad record(s): value is not JSON (first: partition 0 offset 1)\n    remedy: the topic holds values" in text
    )
    assert f"  2 held back record(s): {HELD_BACK} (first: partition 0 offset 9)" in text
    assert len(re.findall(r"\n  [0-9]", text)) == 3  # one line per cause, not per record
    assert "snapshot 77" in text and "cdclake quarantine list orders" in text and "bad_records_tolerance" in text


def test_causes_beyond_the_listed_ones_are_counted_together():
    causes = tuple(QuarantineCause(f"cause {i}", 2, None, 5, False, 0, i) for i in range(MAX_CAUSES + 1))
    text = str(tolerance_error(_plan(), NewQuarantine(bad=2 * (MAX_CAUSES + 3), causes=causes), 1))
    assert f"  2 bad record(s) (schema id 5): cause {MAX_CAUSES - 1} " in text
    assert f"cause {MAX_CAUSES} " not in text
    assert "  6 more record(s) of other causes" in text
