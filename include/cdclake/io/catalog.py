"""The Iceberg side through pyiceberg: the one catalog factory and a CDC table's lifecycle (created,
its ordering recorded, its properties updated, its format version upgraded); :mod:`cdclake.model.layout`
defines the layout. A table's refs and commits are :mod:`cdclake.io.refs`, its schema
:mod:`cdclake.io.schema_evolution`, the tables beside it :mod:`cdclake.io.side_tables`.

pyiceberg's catalog and Spark's read the same catalog (the same JDBC catalog database or the same
REST catalog server) under the same catalog name (:meth:`cdclake.settings.Settings.spark_catalog_conf`),
so both see every commit.
"""

from __future__ import annotations

import itertools
import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from cdclake.errors import ConfigError, SchemaError
from cdclake.io.schema_evolution import iceberg_type
from cdclake.model.format_version import DEFAULT_FORMAT_VERSION, FORMAT_VERSION_PROPERTY, check_catalog
from cdclake.model.layout import METADATA_COLUMNS, ORDERING_PROPERTY, TABLE_PROPERTIES, column_encodings_property
from cdclake.model.types import ColumnSpec, column_doc
from cdclake.settings import Settings

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

#: pyiceberg 0.12 warns on every delete from a merge-on-read table (``write.delete.mode``, set for
#: Spark's ``MERGE``: :data:`cdclake.model.layout.TABLE_PROPERTIES`) that it rewrites the data files
#: instead. That rewrite (copy-on-write) is what the pipeline's own pyiceberg deletes want: expired
#: tombstones and change rows, a repair's rows; the warning would only alarm the task logs.
_COPY_ON_WRITE_WARNING = "Merge on read is not yet supported, falling back to copy-on-write"


#: The start of pyiceberg 0.12's warning when it cannot delete a metadata file that a commit
#: dropped from the table's metadata log (``write.metadata.delete-after-commit.enabled``, set by
#: :data:`cdclake.model.layout.TABLE_PROPERTIES`). A REST catalog server (Iceberg's own, as in the
#: production topology) deletes that file itself on the commit, so pyiceberg's delete after it finds
#: nothing: once the log holds ``write.metadata.previous-versions-max`` entries, every pyiceberg
#: commit (a run's fast-forward of ``main``) warned. A file really left behind is an orphan that
#: ``cdc_maintenance`` removes; the message is kept at DEBUG.
_METADATA_DELETE_WARNING = "Failed to delete metadata file "


class _MetadataDeleteToDebug(logging.Filter):
    """Lowers :data:`_METADATA_DELETE_WARNING` records of the ``pyiceberg.catalog`` logger to DEBUG
    (handlers compare the record's level after the logger's filters)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and record.getMessage().startswith(_METADATA_DELETE_WARNING):
            record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def _quiet_pyiceberg() -> None:
    """The pyiceberg warnings that would only alarm the task logs, filtered once per process."""
    warnings.filterwarnings("ignore", message=_COPY_ON_WRITE_WARNING, category=UserWarning)
    logger = logging.getLogger("pyiceberg.catalog")
    if not any(isinstance(f, _MetadataDeleteToDebug) for f in logger.filters):
        logger.addFilter(_MetadataDeleteToDebug())


def load_catalog(settings: Settings) -> Catalog:
    """The pyiceberg catalog that Spark's Iceberg catalog ``settings.catalog_name`` also uses:
    ``SqlCatalog`` on the same catalog database, or ``RestCatalog`` on the same REST server
    (:meth:`~cdclake.settings.Settings.pyiceberg_catalog_properties`).

    The one place a catalog is built: callers resolve it once per task or run and pass it on.
    """
    from pyiceberg.catalog import load_catalog as pyiceberg_load_catalog

    _quiet_pyiceberg()
    if settings.catalog_type == "sql" and settings.catalog_uri.startswith("sqlite:///"):
        Path(settings.catalog_uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    return pyiceberg_load_catalog(settings.catalog_name, **settings.pyiceberg_catalog_properties())


def load_table_or_none(catalog: Catalog, identifier: str) -> Table | None:
    """The table ``namespace.table``, or ``None`` when it does not exist."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        return None


def check_ordering(table: Table, ordering: str, has_commits: bool) -> None:
    """Record ``ordering`` on a table that has no CDC commit yet; refuse a table whose positions
    are in another ordering (:data:`~cdclake.model.layout.ORDERING_PROPERTY`).

    Raises:
        ConfigError: the table holds positions of another ordering.
    """
    recorded = table.properties.get(ORDERING_PROPERTY)
    if recorded == ordering or (recorded is None and ordering == "binlog" and has_commits):
        return
    if has_commits:
        raise ConfigError(
            f"table {'.'.join(table.name())}: the table config says ordering {ordering!r}, but the table's "
            f"positions are in ordering {recorded or 'binlog'!r}; positions of the two are not comparable. "
            "The ordering is fixed when a table is first applied: set it back, or apply into a new table "
            "(another 'table' name) and bootstrap it."
        )
    with table.transaction() as tx:
        tx.set_properties({ORDERING_PROPERTY: ordering})


PROPERTY_COMMIT_ATTEMPTS = 3
"""How many times :func:`update_table_property` commits when a concurrent commit wins the race."""


def update_table_property(
    catalog: Catalog, identifier: str, key: str, change: Callable[[str | None], str | None]
) -> None:
    """Set the table property ``key`` to ``change(its value now)``; remove it when that is ``None``.
    A metadata-only commit (no snapshot), made only when the value changes, and made again from the
    new metadata when a concurrent commit wins the race. A table that does not exist is left
    alone.

    Raises:
        pyiceberg.exceptions.CommitFailedException: the race was lost
            :data:`PROPERTY_COMMIT_ATTEMPTS` times.
    """
    from pyiceberg.exceptions import CommitFailedException
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

    for attempt in Retrying(
        retry=retry_if_exception_type(CommitFailedException),
        stop=stop_after_attempt(PROPERTY_COMMIT_ATTEMPTS),
        wait=wait_random_exponential(multiplier=0.05, max=1.0),
        reraise=True,
    ):
        with attempt:
            table = load_table_or_none(catalog, identifier)
            if table is None:
                return
            now = table.properties.get(key)
            new = change(now)
            if new == now:
                return
            with table.transaction() as tx:
                if new is None:
                    tx.remove_properties(key)
                else:
                    tx.set_properties({key: new})


def create_cdc_table(
    catalog: Catalog,
    identifier: str,
    columns: list[ColumnSpec],
    primary_key: tuple[str, ...],
    *,
    properties: dict[str, str] | None = None,
    ordering: str = "binlog",
    format_version: int = DEFAULT_FORMAT_VERSION,
) -> Table:
    """Create a CDC table: source columns, then metadata columns; primary key = identifier fields.

    ``properties`` are added to the table's (schema sync records its progress there);
    ``ordering`` is recorded as :data:`~cdclake.model.layout.ORDERING_PROPERTY`; the table is
    created at Iceberg ``format_version`` (2 or 3, :mod:`cdclake.model.format_version`).

    Raises:
        SchemaError: a primary-key column is missing from ``columns``.
        FormatVersionError: ``format_version`` 3 in a catalog that cannot hold a v3 table for
            cdclake (:func:`~cdclake.model.format_version.check_catalog`); nothing is created.
    """
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    names = [c.name for c in columns]
    missing = [c for c in primary_key if c not in names]
    if missing:
        raise SchemaError(f"table {identifier}: primary key column(s) {missing} not in {names}")
    # top-level fields take ids 1..n in order; nested fields (spatial structs) the ids after them
    nested_ids = itertools.count(len(columns) + len(METADATA_COLUMNS) + 1)
    fields = []
    for i, col in enumerate(columns, start=1):
        fields.append(
            NestedField(
                i,
                col.name,
                iceberg_type(col.iceberg_type, nested_ids),
                required=col.required or col.name in primary_key,
                doc=column_doc(col.encoding),
            )
        )
    for j, (name, typ, doc) in enumerate(METADATA_COLUMNS, start=len(columns) + 1):
        fields.append(NestedField(j, name, iceberg_type(typ), required=False, doc=doc))
    ids = [f.field_id for f in fields if f.name in primary_key]
    schema = Schema(*fields, identifier_field_ids=ids)
    check_catalog(identifier, format_version, catalog_type(catalog))
    namespace = identifier.rsplit(".", 1)[0]
    catalog.create_namespace_if_not_exists(namespace)
    table_properties = {
        **TABLE_PROPERTIES,
        FORMAT_VERSION_PROPERTY: str(format_version),
        ORDERING_PROPERTY: ordering,
        **(properties or {}),
    }
    table_properties.update(column_encodings_property({c.name: c.encoding for c in columns}))
    return catalog.create_table(identifier, schema=schema, properties=table_properties)


def catalog_type(catalog: Catalog) -> str:
    """``rest`` for pyiceberg's REST catalog, else ``sql`` (the SQL catalog on a JDBC catalog
    database): the :attr:`~cdclake.settings.Settings.catalog_type` that :func:`load_catalog` built
    ``catalog`` from."""
    from pyiceberg.catalog.rest import RestCatalog

    return "rest" if isinstance(catalog, RestCatalog) else "sql"


def upgrade_format_version(catalog: Catalog, table: Table, format_version: int) -> Table:
    """Upgrade ``table`` in place to Iceberg ``format_version``, a metadata-only commit (no data or
    delete file is rewritten: the files written before keep their format, Spark's later deletes
    are deletion vectors on v3). Returns the table as committed.

    pyiceberg 0.12's ``Transaction.upgrade_table_version`` refuses version 3 on the client; the
    update it would send (``upgrade-format-version``) is sent as it is, with the table's UUID as
    the requirement, and the REST catalog's server applies it.

    Raises:
        FormatVersionError: a catalog that cannot hold ``format_version``
            (:func:`~cdclake.model.format_version.check_catalog`).
        pyiceberg.exceptions.CommitFailedException: the table was replaced meanwhile.
        ValueError: the catalog applied the update itself and refused it (pyiceberg's message).
    """
    from pyiceberg.table.update import AssertTableUUID, UpgradeFormatVersionUpdate

    identifier = ".".join(table.name())
    check_catalog(identifier, format_version, catalog_type(catalog))
    response = catalog.commit_table(
        table,
        (AssertTableUUID(uuid=table.metadata.table_uuid),),
        (UpgradeFormatVersionUpdate.model_validate({"format-version": format_version}),),
    )
    log.info("table %s: format version %d -> %d", identifier, table.format_version, response.metadata.format_version)
    return catalog.load_table(identifier)
