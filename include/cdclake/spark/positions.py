"""The Spark codec of binlog positions and GTIDs, generated from the model's one definition
(:func:`cdclake.model.position.position_parts`, :data:`~cdclake.model.position.MARIADB_GTID_PATTERN`).

A position is a struct ``(file_seq bigint, pos bigint, row int, change_rank int)`` whose Spark
comparison (field by field) is :class:`~cdclake.model.position.BinlogPosition`'s order. The
SQL-text forms (:func:`position_sql`, :func:`position_literal_sql`) are for the statements that
only exist as SQL text (``UPDATE``, ``DELETE``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cdclake.model.position import (
    GTID_DOMAIN_GROUP,
    GTID_SEQUENCE_GROUP,
    GTID_SERVER_GROUP,
    KAFKA_PARTS,
    MARIADB_GTID_PATTERN,
    MYSQL_GTID_SEPARATOR,
    ORDERINGS,
    BinlogPosition,
    PositionPart,
    position_parts,
    unguarded_across_partitions,
)
from cdclake.spark.names import qualified

if TYPE_CHECKING:
    from pyspark.sql import Column

_SPARK_TYPES = {64: "bigint", 32: "int"}
"""The Spark type of a part of :data:`PositionPart.bits` bits."""


def position_column(ordering: str, qualifier: str | None = None, *, change: bool = False) -> Column:
    """The position of the event that wrote each row, from its metadata columns.

    Args:
        ordering: ``binlog`` or ``gtid`` (:func:`~cdclake.model.position.position_parts`).
        qualifier: the quoted name (:func:`~cdclake.spark.names.quote_identifier`) of the
            DataFrame alias or table the columns are taken from; ``None``: unqualified.
        change: the rows are tombstones (the rank of a change, no ``_cdc_snapshot`` read).

    Returns:
        A struct column comparable with :func:`position_literal` and with other positions.
    """
    from pyspark.sql import functions as F

    return F.struct(*[_part_column(part, qualifier) for part in position_parts(ordering, change=change)])


def _part_column(part: PositionPart, qualifier: str | None) -> Column:
    """The value of ``part`` in each row (:meth:`~cdclake.model.position.PositionPart.read`)."""
    from pyspark.sql import functions as F

    if part.column is None:
        value = F.lit(part.if_null)
    elif part.when_true is not None:
        value = F.when(F.col(qualified(qualifier, part.column)), F.lit(part.when_true)).otherwise(F.lit(part.if_null))
    else:
        value = F.coalesce(F.col(qualified(qualifier, part.column)), F.lit(part.if_null))
    return value.cast(_SPARK_TYPES[part.bits]).alias(part.field)


def place_columns(ordering: str, qualifier: str | None = None, *, change: bool = False) -> list[Column]:
    """The place of the event that wrote each row (:class:`~cdclake.model.position.EventPlace`):
    its position (:func:`position_column`), Kafka partition and offset. Sorting by these columns,
    in this order, is the order of a batch's events of one key. Arguments as :func:`position_column`."""
    return [position_column(ordering, qualifier, change=change), *[_part_column(p, qualifier) for p in KAFKA_PARTS]]


def supersedes_column(
    ordering: str, event: str | None, stored: str, *, event_change: bool = False, stored_change: bool = False
) -> Column:
    """Whether the event of each row of ``event`` replaces the row (or passes the tombstone) of
    ``stored``: :func:`cdclake.model.position.supersedes` over their metadata columns.

    Args:
        ordering: the table's ordering.
        event: the quoted qualifier of the event's columns (``None``: unqualified).
        stored: the quoted qualifier of the stored row's (or tombstone's) columns.
        event_change, stored_change: that side is a tombstone (``change`` of :func:`position_column`).
    """
    from pyspark.sql import functions as F

    new_position, new_partition, new_offset = place_columns(ordering, event, change=event_change)
    old_position, old_partition, old_offset = place_columns(ordering, stored, change=stored_change)
    tie = F.when(new_partition == old_partition, new_offset > old_offset).otherwise(
        F.lit(unguarded_across_partitions(ordering))
    )
    return (new_position > old_position) | ((new_position == old_position) & tie)


def position_literal(position: BinlogPosition) -> Column:
    """``position`` as a struct literal comparable with :func:`position_column`."""
    from pyspark.sql import functions as F

    return F.struct(
        *[F.lit(getattr(position, p.field)).cast(_SPARK_TYPES[p.bits]).alias(p.field) for p in _parts_of_any_ordering()]
    )


def position_of(row: Any) -> BinlogPosition:
    """The :class:`~cdclake.model.position.BinlogPosition` of a collected position struct
    (a Spark ``Row`` of :func:`position_column`'s fields)."""
    return BinlogPosition(*(int(row[p.field]) for p in _parts_of_any_ordering()))


def position_sql(ordering: str, qualifier: str | None = None, *, change: bool = False) -> str:
    """Spark SQL of :func:`position_column` (same arguments), for SQL text."""
    fields = []
    for part in position_parts(ordering, change=change):
        if part.column is None:
            value = str(part.if_null)
        elif part.when_true is not None:
            value = f"CASE WHEN {qualified(qualifier, part.column)} THEN {part.when_true} ELSE {part.if_null} END"
        else:
            value = f"coalesce({qualified(qualifier, part.column)}, {part.if_null})"
        fields.append(f"'{part.field}', CAST({value} AS {_SPARK_TYPES[part.bits]})")
    return f"named_struct({', '.join(fields)})"


def position_literal_sql(position: BinlogPosition) -> str:
    """Spark SQL of :func:`position_literal`, for SQL text."""
    fields = [
        f"'{p.field}', CAST({getattr(position, p.field)} AS {_SPARK_TYPES[p.bits]})" for p in _parts_of_any_ordering()
    ]
    return f"named_struct({', '.join(fields)})"


def _parts_of_any_ordering() -> tuple[PositionPart, ...]:
    """The parts of a position, for their fields and types (the same under every ordering)."""
    return position_parts(ORDERINGS[0])


def gtid_sequence(gtid: Column) -> Column:
    """The sequence number of a MariaDB GTID (``source.gtid``, spaces around it ignored), null
    for anything else: the ``_cdc_gtid_seq`` metadata column
    (:func:`cdclake.model.position.parse_mariadb_gtid`)."""
    from pyspark.sql import functions as F

    return F.regexp_extract(F.trim(gtid), MARIADB_GTID_PATTERN, GTID_SEQUENCE_GROUP).try_cast("bigint")


def gtid_domain(gtid: Column) -> Column:
    """The domain of a MariaDB GTID (``source.gtid``, spaces around it ignored), null for
    anything else (:func:`cdclake.model.position.parse_mariadb_gtid`)."""
    from pyspark.sql import functions as F

    return F.regexp_extract(F.trim(gtid), MARIADB_GTID_PATTERN, GTID_DOMAIN_GROUP).try_cast("bigint")


def gtid_source(gtid: Column) -> Column:
    """The source part of a GTID (``source.gtid``): the rule of
    :func:`cdclake.model.position.gtid_source` as a Spark column."""
    from pyspark.sql import functions as F

    return F.when(gtid.contains(MYSQL_GTID_SEPARATOR), F.trim(F.substring_index(gtid, MYSQL_GTID_SEPARATOR, 1))).when(
        gtid.rlike(MARIADB_GTID_PATTERN),
        F.concat(
            F.regexp_extract(gtid, MARIADB_GTID_PATTERN, GTID_DOMAIN_GROUP),
            F.lit("-"),
            F.regexp_extract(gtid, MARIADB_GTID_PATTERN, GTID_SERVER_GROUP),
        ),
    )
