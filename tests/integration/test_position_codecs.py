"""The Spark codec of positions (:mod:`cdclake.spark.positions`) agrees with the model's order
(:class:`cdclake.model.position.BinlogPosition`, :func:`~cdclake.model.position.supersedes`) and
GTID rules, for every ordering, on rows with NULLs, the NO_GTID and DEMOTED sentinels, binlog file
numbers past 999999 and ties at one position: the struct columns, their SQL text, the literals and
``position_of``; and the batch's reduction (:func:`cdclake.spark.reduce.reduce_latest`) is the
model's :func:`~cdclake.model.position.batch_pick`. Needs a SparkSession; the pyiceberg codec's
agreement is in tests/unit/test_position_codecs.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdclake.model.position import (
    ORDERINGS,
    BinlogPosition,
    EventPlace,
    batch_pick,
    gtid_source,
    parse_mariadb_gtid,
    supersedes,
)
from cdclake.spark.names import quote_identifier
from cdclake.spark.positions import (
    gtid_domain,
    gtid_sequence,
    position_column,
    position_literal,
    position_literal_sql,
    position_of,
    position_sql,
    supersedes_column,
)
from cdclake.spark.positions import gtid_source as gtid_source_column
from cdclake.spark.reduce import TIED, reduce_latest
from tests.position_strategies import near, positions, rows

pytestmark = pytest.mark.integration

ROWS_DDL = (
    "_cdc_snapshot boolean, _cdc_binlog_file_seq bigint, _cdc_binlog_pos bigint, _cdc_binlog_row int, "
    "_cdc_gtid_seq bigint, _cdc_kafka_partition int, _cdc_kafka_offset bigint, i int"
)
CASES = [(o, change) for o in ORDERINGS for change in (False, True) if o != "kafka" or not change]
"""Under ordering kafka a tombstone's position is a row's (no column is read): one case."""


@pytest.mark.parametrize(("ordering", "change"), CASES)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_spark_position_order_is_the_model_order(spark, ordering, change, data):
    """Also ``supersedes_column`` (a row of ``t`` replacing one of ``u``) against the model's
    :func:`~cdclake.model.position.supersedes`, ties at one position included."""
    from pyspark.sql import functions as F

    rows_ = data.draw(st.lists(rows(), min_size=1, max_size=8))
    # rows at the position of another, at another partition or offset: the ties supersedes breaks
    rows_ += data.draw(st.lists(st.tuples(st.sampled_from(rows_), rows()), max_size=3).map(_twins))
    readings = [BinlogPosition.from_row(r, ordering, change=change) for r in rows_]
    places = [EventPlace.from_row(r, ordering, change=change) for r in rows_]
    literals = data.draw(st.lists(positions() | st.sampled_from(readings).flatmap(near), min_size=1, max_size=4))
    df = spark.createDataFrame([{**r, "i": i} for i, r in enumerate(rows_)], ROWS_DDL)
    if change:  # a tombstone table has no _cdc_snapshot
        df = df.drop("_cdc_snapshot")
    t, u = quote_identifier("t"), quote_identifier("u")
    own = position_column(ordering, t, change=change)
    sql = F.expr(position_sql(ordering, t, change=change))
    checks = [F.col("p") == F.col("q")]
    for k, position in enumerate(literals):
        checks += [
            (F.col("p") < position_literal(position)).alias(f"lt{k}"),
            (F.col("p") == position_literal(position)).alias(f"eq{k}"),
            (F.col("q") < F.expr(position_literal_sql(position))).alias(f"sql_lt{k}"),
        ]
    pairs = (
        df.alias("t")
        .join(df.alias("u"))
        .select(
            F.col("t.i").alias("i"),
            F.col("u.i").alias("j"),
            own.alias("p"),
            sql.alias("q"),
            (own < position_column(ordering, u, change=change)).alias("lt_row"),
            supersedes_column(ordering, t, u, event_change=change, stored_change=change).alias("supersedes"),
        )
    )
    got = pairs.select("i", "j", "p", "lt_row", "supersedes", *checks).collect()

    for r in got:
        reading, other = readings[r["i"]], readings[r["j"]]
        assert position_of(r["p"]) == reading
        assert r["lt_row"] == (reading < other)
        assert r["supersedes"] == supersedes(places[r["i"]], places[r["j"]], ordering)
        for k, position in enumerate(literals):
            assert (r[f"lt{k}"], r[f"eq{k}"], r[f"sql_lt{k}"]) == (
                reading < position,
                reading == position,
                reading < position,
            )


def _twins(pairs: list[tuple[dict, dict]]) -> list[dict]:
    """Each first row with the Kafka partition and offset of the second."""
    return [{**row, **{c: other[c] for c in ("_cdc_kafka_partition", "_cdc_kafka_offset")}} for row, other in pairs]


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


EVENTS_DDL = (
    "image struct<id:int,v:string>, _cdc_op string, _cdc_snapshot boolean, _cdc_binlog_file_seq bigint, "
    "_cdc_binlog_pos bigint, _cdc_binlog_row int, _cdc_gtid_seq bigint, _cdc_kafka_partition int, "
    "_cdc_kafka_offset bigint"
)


@st.composite
def batches(draw: st.DrawFn) -> list[dict]:
    """Events of a few keys crowded on few positions, partitions and contents, so that ties, ties
    across partitions and equal contents are common; offsets are unique within a partition."""
    n = draw(st.integers(1, 12))
    offsets = draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n, unique=True))
    return [
        {
            "image": {"id": draw(st.integers(1, 3)), "v": draw(st.sampled_from(["a", "b"]))},
            "_cdc_op": draw(st.sampled_from(["u", "d"])),
            "_cdc_snapshot": False,
            "_cdc_binlog_file_seq": 3,
            "_cdc_binlog_pos": draw(st.sampled_from([100, 200])),
            "_cdc_binlog_row": 0,
            "_cdc_gtid_seq": None,
            "_cdc_kafka_partition": draw(st.integers(0, 1)),
            "_cdc_kafka_offset": offset,
        }
        for offset in offsets
    ]


@pytest.mark.parametrize("ordering", ["binlog", "kafka"])
@settings(max_examples=8, deadline=None)
@given(events=batches())
def test_spark_reduce_is_the_model_batch_pick(spark, ordering, events):
    from pyspark.sql import functions as F

    picks = {}
    for key in {e["image"]["id"] for e in events}:
        mine = [e for e in events if e["image"]["id"] == key]
        pick = batch_pick([(EventPlace.from_row(e, ordering), (e["_cdc_op"], e["image"]["v"])) for e in mine])
        picks[key] = (mine[pick.latest]["_cdc_kafka_offset"], pick.tied, pick.unordered is not None)
    df = spark.createDataFrame(events, EVENTS_DDL).withColumn("position", position_column(ordering))
    reduced = reduce_latest(df, ("id",), ordering).select(F.col("image.id").alias("id"), "_cdc_kafka_offset", TIED)

    if any(unordered for _, _, unordered in picks.values()):
        with pytest.raises(Exception, match="without an order"):
            reduced.collect()
        return
    got = {r["id"]: (r["_cdc_kafka_offset"], r[TIED], False) for r in reduced.collect()}
    assert got == picks
