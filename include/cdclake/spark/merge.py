"""Merges with ``DataFrame.mergeInto`` (Spark 4; classic and Spark Connect sessions alike): the
source DataFrame under one alias, the target named by its table name, rows matched by key."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cdclake.spark.flat import all_of
from cdclake.spark.names import qualified, quote_identifier

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.merge import MergeIntoWriter

SOURCE_ALIAS = "cdc-source"
"""The alias of a merge's source DataFrame (``mergeInto`` names the target by its table name).
The hyphen keeps it apart from every target: table names are plain identifiers
(:class:`~cdclake.model.config.TableConfig`), run branches are ``branch_cdc-run-<id>``."""

SOURCE = quote_identifier(SOURCE_ALIAS)
"""The quoted qualifier of the source's columns (:func:`cdclake.spark.names.qualified`)."""


def source_column(column: str) -> Column:
    """``column`` of the merge's source."""
    from pyspark.sql import functions as F

    return F.col(qualified(SOURCE, column))


def merge_into(source: DataFrame, target: str, keys: Sequence[str]) -> MergeIntoWriter:
    """The merge of ``source`` into ``target`` (a name :func:`~cdclake.spark.names.quote_identifier`
    made), a target row matching the source row of equal ``keys``; the caller adds the actions
    and calls ``merge()``.

    Raises:
        ValueError: no key.
    """
    from pyspark.sql import functions as F

    if not keys:
        raise ValueError(f"a merge into {target} needs at least one key column")
    on = all_of([F.col(qualified(target, k)) == source_column(k) for k in keys])
    return source.alias(SOURCE_ALIAS).mergeInto(target, on)
