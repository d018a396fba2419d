"""The Iceberg side through pyiceberg: the one catalog factory, CDC tables and side tables, and
the state read back from a table (:mod:`cdclake.model.layout` defines the layout).

pyiceberg's catalog and Spark's read the same catalog (the same JDBC catalog database or the same
REST catalog server) under the same catalog name (:meth:`cdclake.settings.Settings.spark_catalog_conf`),
so both see every commit.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdclake.errors import ConfigError, SchemaError
from cdclake.model.format_version import DEFAULT_FORMAT_VERSION, FORMAT_VERSION_PROPERTY, check_catalog
from cdclake.model.layout import (
    METADATA_COLUMN_NAMES,
    METADATA_COLUMNS,
    ORDERING_PROPERTY,
    SIDE_TABLE_PROPERTIES,
    STAGE_BRANCH,
    TABLE_PROPERTIES,
    WRITE_REF_PROPERTY,
    SummaryKeys,
    column_encodings,
    column_encodings_property,
    is_position_tag,
)
from cdclake.model.offsets import Offsets
from cdclake.model.run_state import CommittedState, committed_state_of
from cdclake.model.schema_diff import ChangePlan, SourceSchema
from cdclake.model.types import ColumnSpec, column_doc, parse_decimal_type
from cdclake.settings import Settings

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot
    from pyiceberg.types import IcebergType

log = logging.getLogger(__name__)


def load_catalog(settings: Settings) -> Catalog:
    """The pyiceberg catalog that Spark's Iceberg catalog ``settings.catalog_name`` also uses:
    ``SqlCatalog`` on the same catalog database, or ``RestCatalog`` on the same REST server
    (:meth:`~cdclake.settings.Settings.pyiceberg_catalog_properties`).

    The one place a catalog is built: callers resolve it once per task or run and pass it on.
    """
    from pyiceberg.catalog import load_catalog as pyiceberg_load_catalog

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


MAIN_BRANCH = "main"
"""pyiceberg's ``pyiceberg.table.refs.MAIN_BRANCH``, named here: importing that module loads
``pyiceberg.table``, which this module leaves to the functions that need it (DAG files import it)."""


def write_ref(table: Table) -> str:
    """The branch the table's runs commit to and plan from: :data:`~cdclake.model.layout.STAGE_BRANCH`
    for a table of a group (its :data:`~cdclake.model.layout.WRITE_REF_PROPERTY`), else ``main``."""
    return table.properties.get(WRITE_REF_PROPERTY, MAIN_BRANCH)


def head_snapshot(table: Table) -> Snapshot | None:
    """The head of :func:`write_ref`: the table's state as its runs left it (``main``'s current
    snapshot but for a table of a group, whose ``main`` moves when the group is published);
    ``None`` before the first commit."""
    ref = write_ref(table)
    return table.current_snapshot() if ref == MAIN_BRANCH else table.snapshot_by_name(ref)


def ensure_write_ref(table: Table, group: str | None) -> Table:
    """Make the table's :func:`write_ref` fit its group: a table that joins a group starts
    :data:`~cdclake.model.layout.STAGE_BRANCH` at ``main``'s current snapshot (a branch left by an
    earlier membership is dropped first) and records it; a table that leaves one moves ``main`` to
    the branch's head and drops it, with the position tags of a group published by pointer
    (:func:`~cdclake.model.layout.position_tag`), in one commit. Returns the table as it is then.

    Raises:
        CommitFailedException: another commit changed the table's refs twice meanwhile (pyiceberg's).
    """
    from pyiceberg.exceptions import CommitFailedException

    want = STAGE_BRANCH if group is not None else None
    for attempt in (1, 2):
        if table.properties.get(WRITE_REF_PROPERTY) == want:
            return table
        try:
            _move_write_ref(table, want, group)
            return table.refresh()
        except CommitFailedException:
            if attempt == 2:
                raise
            table = table.refresh()  # another run of the table did it meanwhile
    raise AssertionError("unreachable")


def _move_write_ref(table: Table, want: str | None, group: str | None) -> None:
    from pyiceberg.table.update.snapshot import ManageSnapshots

    if want is not None:
        if STAGE_BRANCH in table.refs():
            table.manage_snapshots().remove_branch(STAGE_BRANCH).commit()
        main = table.current_snapshot()
        with table.transaction() as tx:
            if main is not None:
                ManageSnapshots(transaction=tx).create_branch(main.snapshot_id, STAGE_BRANCH).commit()
            tx.set_properties({WRITE_REF_PROPERTY: want})
        log.info(
            "table %s joined group %s: its runs commit to branch %s (from snapshot %s); main moves when the "
            "group is published",
            table.name(),
            group,
            STAGE_BRANCH,
            main.snapshot_id if main is not None else None,
        )
        return
    stage = table.snapshot_by_name(STAGE_BRANCH)
    with table.transaction() as tx:
        manage = ManageSnapshots(transaction=tx)
        if stage is not None:
            manage = manage.set_current_snapshot(snapshot_id=stage.snapshot_id).remove_branch(STAGE_BRANCH)
        for ref in [r for r in table.refs() if is_position_tag(r)]:  # a group published by pointer
            manage = manage.remove_tag(ref)
        manage.commit()
        tx.remove_properties(WRITE_REF_PROPERTY)
    log.info(
        "table %s left its group: main moved to the head of branch %s (snapshot %s); its runs commit to main",
        table.name(),
        STAGE_BRANCH,
        stage.snapshot_id if stage is not None else None,
    )


def ancestry(table: Table) -> Iterator[tuple[int, int, Mapping[str, str] | None]]:
    """``(snapshot id, timestamp ms, summary properties or None)`` of the :func:`head_snapshot`
    and its ancestors, newest first (nothing when the table has no snapshot)."""
    # by id: pyiceberg's ancestors_of looks each parent up in the list of snapshots, quadratic in
    # a long history, and a run's retry walks the whole of it (run_commit)
    by_id = {s.snapshot_id: s for s in table.snapshots()}
    snap = head_snapshot(table)
    while snap is not None:
        yield snap.snapshot_id, snap.timestamp_ms, None if snap.summary is None else snap.summary.additional_properties
        snap = by_id.get(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None


def committed_state(table: Table, topic: str) -> CommittedState:
    """The state recorded by the newest CDC commit of ``topic`` in the :func:`head_snapshot`'s
    ancestry (maintenance snapshots, which carry no offsets, are walked past)."""
    current = head_snapshot(table)
    if current is None:
        return CommittedState(None)
    return committed_state_of(current.snapshot_id, (summary for _, _, summary in ancestry(table)), topic)


def run_commit(table: Table, topic: str, run_id: str) -> tuple[int, Mapping[str, str]] | None:
    """``(snapshot id, summary properties)`` of the newest CDC commit of ``topic`` by run
    ``run_id`` (:attr:`~cdclake.model.layout.SummaryKeys.RUN_ID`, the Airflow run id) in the
    :func:`head_snapshot`'s ancestry, or ``None``: how a retry of a run finds the commit it made
    (a commit discarded on a run branch is not in the ancestry; an expired snapshot is not found)."""
    for snapshot_id, _, summary in ancestry(table):
        if (
            summary is not None
            and summary.get(SummaryKeys.RUN_ID) == run_id
            and summary.get(SummaryKeys.TOPIC) == topic
            and SummaryKeys.END_OFFSETS in summary
        ):
            return snapshot_id, summary
    return None


def committed_offsets(table: Table | None, topic: str) -> Offsets | None:
    """End offsets of the newest CDC commit of ``topic`` (``None``: the table does not exist or
    never committed)."""
    return None if table is None else committed_state(table, topic).offsets


def source_schema(table: Table) -> SourceSchema:
    """The source part of ``table``'s current schema (metadata columns left out), with the
    encodings recorded in its properties (``""`` for a column without one)."""
    encodings = column_encodings(table.properties)
    schema = table.schema()
    columns = tuple(
        ColumnSpec(f.name, iceberg_type_name(f.field_type), f.required, encodings.get(f.name, ""))
        for f in schema.fields
        if f.name not in METADATA_COLUMN_NAMES
    )
    return SourceSchema(columns, tuple(sorted(schema.identifier_field_names())))


def identifier_fields(table: Table | None) -> tuple[str, ...] | None:
    """The table's identifier field names (``None`` when the table does not exist)."""
    return None if table is None else tuple(table.schema().identifier_field_names())


def ensure_side_table(
    catalog: Catalog,
    identifier: str,
    columns: list[tuple[str, str, bool]],
    docs: dict[str, str] | None = None,
) -> Table:
    """Create ``identifier`` with ``(name, Iceberg type, required)`` columns unless it exists.

    An existing table follows ``columns``: a column it lacks is added (optional: its rows have
    none), and a required column no longer among ``columns`` becomes optional. So a tombstone table
    follows a primary key changed at the source (``DROP PRIMARY KEY, ADD PRIMARY KEY (id, tenant)``):
    the new key's columns are added, the old key's stop being required, and the tombstones of the
    old key, null in the new columns, match no row of the new one."""
    from pyiceberg.exceptions import TableAlreadyExistsError
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    docs = docs or {}
    existing = load_table_or_none(catalog, identifier)
    if existing is not None:
        table = ensure_columns(existing, [(n, t, docs.get(n, "")) for n, t, _ in columns])
        wanted = {n for n, _, _ in columns}
        stale = [f.name for f in table.schema().fields if f.required and f.name not in wanted]
        if not stale:
            return table
        with table.update_schema() as update:
            for name in stale:
                update.make_column_optional(name)
        log.info("table %s: column(s) %s no longer required", identifier, stale)
        return table.refresh()
    fields = [
        NestedField(i, name, iceberg_type(typ), required=req, doc=docs.get(name))
        for i, (name, typ, req) in enumerate(columns, start=1)
    ]
    catalog.create_namespace_if_not_exists(identifier.rsplit(".", 1)[0])
    try:
        return catalog.create_table(identifier, schema=Schema(*fields), properties=dict(SIDE_TABLE_PROPERTIES))
    except TableAlreadyExistsError:
        return catalog.load_table(identifier)


def image_schema(own: Schema, own_columns: Iterable[tuple[str, str, str]], docs: Mapping[str, str]) -> Schema:
    """The schema of a table of a CDC table's row images (its change feed, its history): the
    columns of the table's schema ``own`` (source and metadata columns, in order, all optional: a
    delete has no after image, a truncate no key; ``docs`` replace a column's doc), then
    ``own_columns`` (``(name, Iceberg type, doc)``, ids after ``own``'s)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    fields = [
        NestedField(f.field_id, f.name, f.field_type, required=False, doc=docs.get(f.name, f.doc)) for f in own.fields
    ]
    ids = itertools.count(own.highest_field_id + 1)
    for name, typ, doc in own_columns:
        field_id = next(ids)
        fields.append(NestedField(field_id, name, iceberg_type(typ, ids), required=False, doc=doc))
    return Schema(*fields)


def ensure_image_table(
    catalog: Catalog,
    identifier: str,
    wanted: Schema,
    properties: Mapping[str, str],
    *,
    day_partition: str | None = None,
) -> tuple[Table, bool]:
    """``identifier`` with the schema ``wanted`` (:func:`image_schema`): created when missing
    (partitioned by day of ``day_partition``, when given), else given the columns ``wanted`` has
    and it lacks and the types ``wanted`` widened (Iceberg's union by name: a column the table
    dropped stays). Returns the table and whether it changed (created or evolved).

    Raises:
        pyiceberg's ValidationError: a column of ``wanted`` has a type the existing column of that
            name cannot be promoted to (a source column renamed aside and added again with an
            incompatible type).
    """
    from pyiceberg.exceptions import TableAlreadyExistsError
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform

    existing = load_table_or_none(catalog, identifier)
    if existing is None:
        spec = UNPARTITIONED_PARTITION_SPEC
        if day_partition is not None:
            source = wanted.find_field(day_partition)
            spec = PartitionSpec(
                PartitionField(source.field_id, 1000, DayTransform(), f"{day_partition}_day"), spec_id=0
            )
        try:
            return catalog.create_table(
                identifier, schema=wanted, partition_spec=spec, properties=dict(properties)
            ), True
        except TableAlreadyExistsError:
            return catalog.load_table(identifier), False
    # by type name: the fields of a struct column have ids of each table's own
    have = {f.name: iceberg_type_name(f.field_type) for f in existing.schema().fields}
    if all(have.get(f.name) == iceberg_type_name(f.field_type) for f in wanted.fields):
        return existing, False
    with existing.update_schema() as update:
        update.union_by_name(wanted)
    return existing.refresh(), True


def ensure_columns(table: Table, columns: Iterable[tuple[str, str, str]]) -> Table:
    """Add the ``(name, Iceberg type, doc)`` columns ``table`` lacks, optional (metadata columns
    added by a later version, such as ``_cdc_gtid_seq``); their value in existing rows is null.
    Returns the table, refreshed when it changed."""
    names = {f.name for f in table.schema().fields}
    missing = [(n, t, d) for n, t, d in columns if n not in names]
    if not missing:
        return table
    with table.update_schema() as update:
        for name, typ, doc in missing:
            update.add_column(name, iceberg_type(typ), doc=doc or None)
    log.info("table %s: added column(s) %s", ".".join(table.name()), [n for n, _, _ in missing])
    return table.refresh()


def evolve_schema(table: Table, plans: Sequence[ChangePlan], properties: Mapping[str, str]) -> Table:
    """Apply the schema ``plans`` in order (:class:`~cdclake.model.schema_diff.ChangePlan`: each
    plan's renames in one schema update, then the rest in another) and set ``properties`` with the
    last plan's column encodings, in ONE Iceberg transaction; returns the table refreshed."""
    # nested field ids (struct<wkb,srid>) are placeholders: add_column assigns fresh ones
    placeholder_ids = itertools.count(1_000_000)
    with table.transaction() as txn:
        for plan in plans:
            if plan.renames:
                with txn.update_schema() as update:
                    for old, new in plan.renames:
                        update.rename_column(old, new)
            if plan.is_empty:
                continue
            with txn.update_schema() as update:
                for spec, after in plan.adds:
                    update.add_column(
                        spec.name,
                        iceberg_type(spec.iceberg_type, placeholder_ids),
                        required=False,
                        doc=column_doc(spec.encoding),
                    )
                    if after is None:
                        update.move_first(spec.name)
                    else:
                        update.move_after(spec.name, after)
                for name, new_type in plan.promotions:
                    update.update_column(name, field_type=iceberg_type(new_type))
                for name in plan.optional:
                    update.make_column_optional(name)
                if plan.identifier is not None:
                    update.set_identifier_fields(*plan.identifier)
                for name in plan.deletes:
                    update.delete_column(name)
        txn.set_properties({**properties, **(column_encodings_property(plans[-1].encodings) if plans else {})})
    return table.refresh()


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

    check_catalog(identifier, format_version, catalog_type(catalog))
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


_STRUCT_TYPE = re.compile(r"^struct<(.*)>$")

_SIMPLE_TYPES = ("boolean", "int", "long", "float", "double", "date", "timestamp", "timestamptz", "string", "binary")


def iceberg_type(name: str, nested_ids: Iterator[int] | None = None) -> IcebergType:
    """The pyiceberg type of an Iceberg type name: a primitive, ``decimal(P,S)``, or
    ``struct<name:primitive,...>`` (optional fields, ids from ``nested_ids``).

    Raises:
        ValueError: an unknown type name, or a struct without ``nested_ids``.
    """
    from pyiceberg import types as t

    struct = _STRUCT_TYPE.match(name)
    if struct is not None:
        if nested_ids is None:
            raise ValueError(f"Iceberg type {name!r} needs ids for its fields")
        members = [m.split(":", 1) for m in struct.group(1).split(",")]
        return t.StructType(
            *[t.NestedField(next(nested_ids), fname, iceberg_type(ftype), required=False) for fname, ftype in members]
        )
    if name in _SIMPLE_TYPES:
        primitive: IcebergType = t.PrimitiveType.model_validate(name)
        return primitive
    dec = parse_decimal_type(name)
    if dec is not None:
        return t.DecimalType(*dec)
    raise ValueError(f"unknown Iceberg type {name!r}")


def iceberg_type_name(field_type: Any) -> str:
    """Inverse of :func:`iceberg_type`: a pyiceberg type as this project names it
    (``decimal(P,S)`` without a space, ``struct<wkb:binary,srid:int>``)."""
    from pyiceberg.types import DecimalType, StructType

    if isinstance(field_type, DecimalType):
        return f"decimal({field_type.precision},{field_type.scale})"
    if isinstance(field_type, StructType):
        return "struct<" + ",".join(f"{f.name}:{iceberg_type_name(f.field_type)}" for f in field_type.fields) + ">"
    return str(field_type)
