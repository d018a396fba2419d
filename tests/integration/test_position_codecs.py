"""The Spark codec of positions (:mod:`cdclake.spark.positions`) agrees with the model's order
(:class:`cdclake.model.position.BinlogPosition`) and GTID rules, for both orderings, on rows with
NULLs, the NO_GTID and DEMOTED sentinels and binlog file numbers past 999999: the struct columns,
their SQL text, the literals and ``position_of``. Needs a SparkSession; the pyiceberg codec's
agreement is in tests/unit/test_position_codecs.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdclake.model.position import ORDERINGS, BinlogPosition, gtid_source, parse_mariadb_gtid
from cdclake.spark.names import quote_identifier
from cdclake.spark.positions import (
    gtid_domain,
    gtid_sequence,
    position_column,
    position_literal,
    position_literal_sql,
    position_of,
    position_sql,
)
from cdclake.spark.positions import gtid_source as gtid_source_column
from tests.position_strategies import near, positions, rows

pytestmark = pytest.mark.integration

ROWS_DDL = (
    "_cdc_snapshot boolean, _cdc_binlog_file_seq bigint, _cdc_binlog_pos bigint, _cdc_binlog_row int, "
    "_cdc_gtid_seq bigint, i int"
)
CASES = [(ordering, change) for ordering in ORDERINGS for change in (False, True)]


@pytest.mark.parametrize(("ordering", "change"), CASES)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_spark_position_order_is_the_model_order(spark, ordering, change, data):
    from pyspark.sql import functions as F

    rows_ = data.draw(st.lists(rows(), min_size=1, max_size=10))
    readings = [BinlogPosition.from_row(r, ordering, change=change) for r in rows_]
    literals = data.draw(st.lists(positions() | st.sampled_from(readings).flatmap(near), min_size=1, max_size=4))
    df = spark.createDataFrame([{**r, "i": i} for i, r in enumerate(rows_)], ROWS_DDL)
    if change:  # a tombstone table has no _cdc_snapshot
        df = df.drop("_cdc_snapshot")
    t = quote_identifier("t")
    own = position_column(ordering, t, change=change)
    sql = F.expr(position_sql(ordering, t, change=change))
    left = df.alias("t").select("i", own.alias("p"), sql.alias("q"))
    right = df.alias("u").select(F.col("i").alias("j"), position_column(ordering, "`u`", change=change).alias("o"))
    checks = [F.col("p") == F.col("q")]
    for k, position in enumerate(literals):
        checks += [
            (F.col("p") < position_literal(position)).alias(f"lt{k}"),
            (F.col("p") == position_literal(position)).alias(f"eq{k}"),
            (F.col("q") < F.expr(position_literal_sql(position))).alias(f"sql_lt{k}"),
        ]
    got = left.join(right).select("i", "j", "p", (F.col("p") < F.col("o")).alias("lt_row"), *checks).collect()

    for r in got:
        reading, other = readings[r["i"]], readings[r["j"]]
        assert position_of(r["p"]) == reading
        assert r["lt_row"] == (reading < other)
        for k, position in enumerate(literals):
            assert (r[f"lt{k}"], r[f"eq{k}"], r[f"sql_lt{k}"]) == (
                reading < position,
                reading == position,
                reading < position,
            )


def test_position_literals_past_999999_compare_as_integers(spark):
    big, small = BinlogPosition(1_000_000, 4, 0, 1), BinlogPosition(999_999, 900, 0, 1)
    row = (
        spark.range(1)
        .select((position_literal(small) < position_literal(big)).alias("lt"), position_literal(big).alias("p"))
        .collect()[0]
    )
    assert row["lt"] and position_of(row["p"]) == big


GTIDS = st.one_of(
    st.none(),
    st.just(""),
    st.builds(lambda d, s, n: f"{d}-{s}-{n}", *[st.integers(0, 2**40)] * 3),
    st.builds(lambda u, n: f"{u}:{n}", st.uuids().map(str), st.integers(1, 2**40)),
    st.builds(lambda u, a, b: f"{u}:{a}-{b}", st.uuids().map(str), st.integers(1, 99), st.integers(100, 999)),
    st.text(alphabet="0123456789-: ab", max_size=12),
).flatmap(lambda g: st.just(g) if g is None else st.sampled_from([g, f" {g}", f"{g}  ", f" {g} "]))
"""``source.gtid`` values: MariaDB and MySQL GTIDs (interval sets too), with spaces around them,
and malformed text."""


@settings(max_examples=10, deadline=None)
@given(gtids=st.lists(GTIDS, min_size=1, max_size=40))
def test_spark_gtid_rules_are_the_model_rules(spark, gtids):
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(i, g) for i, g in enumerate(gtids)], "i int, gtid string")
    gtid = F.col("gtid")
    got = df.select(
        "i",
        gtid_source_column(gtid).alias("source"),
        gtid_domain(gtid).alias("domain"),
        gtid_sequence(gtid).alias("sequence"),
    ).collect()

    for r in got:
        g = gtids[r["i"]]
        parsed = parse_mariadb_gtid(g) if g is not None else None
        assert r["source"] == gtid_source(g), g
        assert (r["domain"], r["sequence"]) == ((parsed[0], parsed[2]) if parsed else (None, None)), g
