"""The Iceberg format version of a CDC table and its side tables, and the rules of an in-place
upgrade (pure: no pyiceberg, no Spark).

A table is created with its config's ``format_version`` (2 or 3, :class:`~cdclake.model.config.TableDefaults`).
On format v3, Iceberg's Spark runtime writes the merge-on-read deletes of a run's ``MERGE`` as
deletion vectors (one Puffin bitmap per data file, file format ``PUFFIN``) instead of
position-delete files. What holds v3 back, with the pinned pyiceberg (0.12), and so what the rules
below follow:

* pyiceberg serializes no v3 table metadata (``TableMetadataV3.model_dump_json`` raises
  ``NotImplementedError``, apache/iceberg-python#1551). In a SQL (JDBC) catalog pyiceberg writes
  the metadata file of every commit itself, so every commit cdclake makes through it (the run's
  fast-forward of ``main``, table properties, schema updates) fails on a v3 table: v3 needs the
  REST catalog, whose server writes the metadata (:func:`check_catalog`).
* pyiceberg writes no v3 manifests (``Cannot write manifest for table version: 3``), so it can
  write no rows into a v3 table, on any catalog. The side tables (tombstones, quarantine, change
  feed, history) get rows from pyiceberg (tombstone expiry, quarantine release, change-feed
  retention, reconcile's repairs): they stay at :data:`SIDE_TABLE_FORMAT_VERSION` whatever the
  table's version. The table itself gets rows only from Spark (the empty commit of a run that
  changed no row included: :func:`cdclake.spark.commit.empty_commit`).
* pyiceberg's ``Transaction.upgrade_table_version`` refuses 3; the REST catalog's server applies
  the same update (``upgrade-format-version``) when it is sent as it is
  (:func:`cdclake.io.catalog.upgrade_format_version`).
"""

from __future__ import annotations

from typing import Final, Literal

from cdclake.errors import FormatVersionError

FormatVersion = Literal[2, 3]
"""The format versions a CDC table can be created with."""

FORMAT_VERSION_PROPERTY: Final = "format-version"
"""Iceberg's table property naming the format version on creation (and, in Spark's ``ALTER TABLE
... SET TBLPROPERTIES``, the version to upgrade to)."""

DEFAULT_FORMAT_VERSION: Final = 2
"""The project default of ``format_version`` (the table config's ``defaults`` may change it)."""

SIDE_TABLE_FORMAT_VERSION: Final = 2
"""The format version of every side table, whatever its table's (see the module docstring)."""

V3_CATALOG_TYPES: Final = frozenset({"rest"})
"""The catalog types (``CDCLAKE_CATALOG_TYPE``, the connection's ``type``) in which cdclake can keep
a v3 table: those whose server writes the table metadata."""

PYICEBERG_V3_METADATA_ISSUE: Final = "apache/iceberg-python#1551"
"""The upstream issue of pyiceberg's missing v3 metadata writer."""

UPGRADE_SECTION: Final = 'docs/operations.md, "Upgrading a table to format v3"'


def check_catalog(identifier: str, format_version: int, catalog_type: str) -> None:
    """Check that a catalog of ``catalog_type`` can hold ``identifier`` at ``format_version``.

    Args:
        identifier: ``namespace.table``, for the message.
        format_version: the version the table is to be created with or upgraded to (1-3).
        catalog_type: the catalog's type, ``sql`` or ``rest`` (:attr:`cdclake.settings.Settings.catalog_type`).

    Raises:
        FormatVersionError: ``format_version`` 3 (or more) in a catalog not of :data:`V3_CATALOG_TYPES`.
    """
    if format_version >= 3 and catalog_type not in V3_CATALOG_TYPES:
        raise FormatVersionError(
            f"table {identifier}: format_version {format_version} needs the REST catalog, and this catalog is "
            f"{catalog_type!r}: pyiceberg, which commits the runs' refs, properties and schema changes, cannot "
            f"write v{format_version} table metadata into a {catalog_type} catalog ({PYICEBERG_V3_METADATA_ISSUE}). "
            f"Nothing was created or changed. Keep format_version 2 for this catalog, or move the tables to a REST "
            f"catalog ({UPGRADE_SECTION})"
        )


def upgrade_needed(identifier: str, current: int, target: int) -> bool:
    """Whether ``identifier``, at format version ``current``, needs an upgrade to ``target``.

    Returns:
        ``True`` when ``target`` is above ``current``, ``False`` when they are equal (nothing to do).

    Raises:
        FormatVersionError: ``target`` below ``current`` (Iceberg downgrades no table) or not a
            version this project writes (2 or 3).
    """
    if target not in (2, 3):
        raise FormatVersionError(f"table {identifier}: format version {target} is not one of 2, 3")
    if target < current:
        raise FormatVersionError(
            f"table {identifier} is format v{current}: it cannot be downgraded to v{target} (Iceberg upgrades a "
            f"table's format version in place, never back). Nothing was changed. A table at v{target} again needs a "
            f"new table: re-snapshot the source into one created with format_version: {target}"
        )
    return target > current


def version_note(name: str, identifier: str, table_version: int, configured: int) -> str | None:
    """What a run says when the table's format version is not the one its config names, or
    ``None`` when they agree. A table keeps the version it was created with: the config's
    ``format_version`` decides the version of new tables only.

    Args:
        name: the table's name in the table config (what ``cdclake upgrade`` takes).
        identifier: its ``namespace.table``.
        table_version: the table's format version now.
        configured: its config's ``format_version``.
    """
    if table_version == configured:
        return None
    if table_version < configured:
        return (
            f"table {identifier} is format v{table_version} and its config names format_version {configured}: the "
            f"config applies to new tables only; `cdclake upgrade {name}` upgrades this "
            f"one in place ({UPGRADE_SECTION})"
        )
    return (
        f"table {identifier} is format v{table_version} and its config names format_version {configured}: a "
        f"table is never downgraded, it stays v{table_version}"
    )
