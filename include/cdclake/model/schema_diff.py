"""The schema diff: one source schema change -> what it does to the Iceberg schema (pure).

The changes of one table (:mod:`cdclake.model.schema_changes`) are taken in binlog order, each
change's columns are mapped to Iceberg (:mod:`cdclake.model.mysql_types`) and diffed against the
table's schema here; :mod:`cdclake.pipeline.schema_sync` commits the result with pyiceberg in ONE
transaction with the table property ``cdc.schema-change-position`` (the last change applied), so
a re-run applies nothing twice. Rules (Iceberg spec, "Schema evolution"):

=================================  ==============================================================
source change                      Iceberg
=================================  ==============================================================
new column                         optional column at its position (``move_after``)
int->long, float->double,          type promotion (``update_column``)
decimal(P,S)->decimal(P',S), P'>P
NOT NULL -> NULL                   ``make_column_optional``
rename (from the DDL, :mod:`cdclake.model.ddl`)  ``rename_column`` (the field id is kept)
dropped column                     kept, optional, null from then on (``dropped_columns: keep``)
                                   or deleted (``dropped_columns: delete``)
primary key                        ``set_identifier_fields``
any other type change              ``incompatible: fail``: :class:`~cdclake.errors.SchemaChangeError` naming the
                                   DDL, its position and the column, nothing committed;
                                   ``incompatible: new_column``: the old column is renamed to
                                   ``<column>__<file seq>_<pos>`` (its values kept) and the
                                   column is added with the new type
CREATE, table not in Iceberg       the table is created (:func:`cdclake.io.catalog.create_cdc_table`)
CREATE, table in Iceberg           diffed like an ALTER (a re-snapshot of the connector)
DROP / RENAME of the table         :class:`~cdclake.errors.SchemaChangeError` (stop; see below), except a DROP in
                                   the connector's snapshot (it rebuilds its schema history) and
                                   a DROP before the Iceberg table exists
=================================  ==============================================================

**Without a schema-change topic** (``schema_changes.source``), the same rules are applied to the row
schemas the events carry (:func:`plan_from_events`): new columns added, types promoted, a type the
table's column holds (an event from before a promotion) left as it is, a column absent from the
events kept (a row schema cannot tell a drop from a rename), other type changes to
``incompatible``. The table config's ``columns`` are applied the same way. A new column whose field
carries a default gives it to the rows from before the column (:attr:`ChangePlan.defaults`).

**Table rename and drop stop the table.** The data topic is named after the source table: after
a rename its events go to another topic, and a dropped table (maybe re-created with other
columns) has nothing left to mirror. The error names the DDL and its position; the remedy is an
operator's decision (point a new table config at the new topic and re-snapshot, or drop or
archive the Iceberg table).

**Barrier** (:func:`cut_before`). Rows produced before a change must be written under the
old schema. A change is *additive* when rows written before it decode the same way afterwards
(new optional columns, promotions whose JSON encoding is unchanged, NOT NULL -> NULL, kept
drops); it is applied before the batch even if older rows are in the batch (they have null in
the new column, exactly as if applied in order). Any other change (rename, deleted column,
column renamed aside, primary key, encoding change) is a *barrier*: when the planned batch holds
events before it, the batch is capped, per partition, before the first event at or after the
change; the change is applied by the next run, before the rest of the events. An event before it
may also still be on its way to a partition the batch has read to its end (partitions are applied
at different paces): the change then also waits until every partition has *settled* past the
schema-change record's time, by the rule of full snapshots
(:func:`cdclake.model.convergence.unsettled_partitions`), the batch capped at the change
meanwhile.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cdclake.errors import DdlParseError, SchemaChangeError, SchemaError
from cdclake.model.config import TableConfig
from cdclake.model.config_blocks import ConnectorModes, SchemaChangePolicy
from cdclake.model.ddl import ColumnRename, ddl_effects
from cdclake.model.defaults import ColumnDefault
from cdclake.model.envelope import KafkaCoordinates
from cdclake.model.event_defaults import connect_default
from cdclake.model.interchange import DAY_ENCODINGS, TEXT_ENCODINGS
from cdclake.model.mysql_types import column_type
from cdclake.model.offsets import OffsetRange
from cdclake.model.position import BinlogPosition
from cdclake.model.schema_changes import SchemaChange, split_table_id
from cdclake.model.types import (
    SPATIAL_ENCODINGS,
    UNSIGNED_INT64,
    ColumnSpec,
    parse_decimal_encoding,
    parse_decimal_type,
)


@dataclass(frozen=True)
class SourceSchema:
    """The source columns of an Iceberg CDC table (metadata columns left out), in order."""

    columns: tuple[ColumnSpec, ...]
    identifier: tuple[str, ...]

    def get(self, name: str) -> ColumnSpec | None:
        return next((c for c in self.columns if c.name == name), None)


def is_promotion(old: str, new: str) -> bool:
    """Whether Iceberg can change a column from type ``old`` to ``new`` (spec, "Schema evolution":
    int->long, float->double, decimal(P,S)->decimal(P',S) with P' >= P)."""
    if old == new or (old, new) in (("int", "long"), ("float", "double")):
        return True
    a, b = parse_decimal_type(old), parse_decimal_type(new)
    return a is not None and b is not None and a[1] == b[1] and b[0] >= a[0]


_JSON_FAMILIES = (
    {"int8", "int16", "int32", "int64", UNSIGNED_INT64},
    {"float", "double"},
    TEXT_ENCODINGS,
    DAY_ENCODINGS,
    SPATIAL_ENCODINGS,
)


def same_column(name: str, names: Iterable[str]) -> str | None:
    """The one of ``names`` that is column ``name`` in MySQL, whose column names are
    case-insensitive (MySQL 8.4 manual, "Identifier Case Sensitivity"): ``name`` itself if
    present, else the only name equal to it ignoring case; ``None`` when there is none (or several
    that differ only in case, which MySQL cannot have)."""
    names = list(names)
    if name in names:
        return name
    found = [n for n in names if n.casefold() == name.casefold()]
    return found[0] if len(found) == 1 else None


def same_json_values(old: str, new: str) -> bool:
    """Whether values written under encoding ``old`` decode the same under ``new`` (decimals:
    the same scale, whatever the precision; text of any text encoding, such as MariaDB's JSON
    described as ``io.debezium.data.Json`` by the binlog and as ``string`` by a snapshot:
    :mod:`cdclake.model.interchange`)."""
    a, b = parse_decimal_encoding(old), parse_decimal_encoding(new)
    if a is not None and b is not None:
        return a[1] == b[1]
    return old == new or any(old in f and new in f for f in _JSON_FAMILIES)


@dataclass
class ChangePlan:
    """What one schema change does to the Iceberg table (see the module table).

    ``renames`` run first (in their own schema update), then the rest; names in ``adds``,
    ``promotions``, ``optional`` and ``deletes`` are the names after the renames.
    """

    change: SchemaChange | None
    """The schema change planned; ``None`` for a plan made from the events' own schemas
    (:func:`plan_from_events`)."""
    renames: list[tuple[str, str]] = field(default_factory=list)
    adds: list[tuple[ColumnSpec, str | None]] = field(default_factory=list)
    """``(column, the column it goes after or None for first)``; always optional."""
    promotions: list[tuple[str, str]] = field(default_factory=list)
    optional: list[str] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    identifier: tuple[str, ...] | None = None
    barrier_reasons: list[str] = field(default_factory=list)
    after: SourceSchema | None = None
    encodings: dict[str, str] = field(default_factory=dict)
    defaults: dict[str, ColumnDefault] = field(default_factory=dict)
    """A plan from the events (:func:`plan_from_events`): of the columns it adds, those whose field
    carries a default, with what the rows written before the column existed read in it."""

    @property
    def is_barrier(self) -> bool:
        return bool(self.barrier_reasons)

    @property
    def is_empty(self) -> bool:
        return not (
            self.renames or self.adds or self.promotions or self.optional or self.deletes or self.identifier is not None
        )


def aside_name(column: str, change: SchemaChange) -> str:
    """Name an incompatibly changed column's old version is renamed to (``new_column`` policy):
    ``<column>__<binlog file seq>_<pos>``; deterministic, so a re-run names it the same."""
    return f"{column}__{change.position.file_seq}_{change.position.pos}"


@dataclass(frozen=True)
class _Draft:
    """A plan being made and the table's columns as it leaves them so far.

    Attributes:
        plan: the plan, its lists filled as the columns are diffed.
        columns: column name -> its spec after the plan so far.
        order: the column names, in table order.
        encodings: column name -> its encoding, in the order the columns came (:func:`plan_change`'s
            ``plan.encodings``).
    """

    plan: ChangePlan
    columns: dict[str, ColumnSpec]
    order: list[str]
    encodings: dict[str, str]

    @classmethod
    def of(cls, plan: ChangePlan, current: SourceSchema) -> _Draft:
        """A draft of ``plan`` starting from the table's columns ``current``."""
        return cls(
            plan,
            {c.name: c for c in current.columns},
            [c.name for c in current.columns],
            {c.name: c.encoding for c in current.columns},
        )

    def rename(self, old: str, new: str) -> None:
        """Plan renaming column ``old`` to ``new``; it keeps its place and its encoding."""
        self.plan.renames.append((old, new))
        col = self.columns.pop(old)
        self.columns[new] = replace(col, name=new)
        self.order[self.order.index(old)] = new
        self.encodings[new] = self.encodings.pop(old)

    def add(self, spec: ColumnSpec, previous: str | None) -> None:
        """Plan adding column ``spec`` after column ``previous`` (first when ``None``)."""
        self.plan.adds.append((spec, previous))
        self.columns[spec.name] = spec
        self.order.insert(self.order.index(previous) + 1 if previous else 0, spec.name)
        self.encodings[spec.name] = spec.encoding


def plan_change(
    current: SourceSchema,
    change: SchemaChange,
    *,
    table_id: str,
    policy: SchemaChangePolicy,
    modes: ConnectorModes,
    changelog: bool = False,
) -> ChangePlan:
    """Diff one ``CREATE``/``ALTER`` change against ``current`` (pure; nothing is written).

    Raises:
        SchemaChangeError: an incompatible type change under ``incompatible: fail``; the DDL
            cannot be read; a new column would have to be an identifier field.
    """
    draft = _Draft.of(ChangePlan(change), current)
    _plan_ddl_renames(draft, change, table_id=table_id)

    wanted = [c["name"] for c in change.columns]
    mapped = {c["name"]: (*column_type(c, modes), bool(c.get("optional", True))) for c in change.columns}
    if not mapped:
        raise SchemaChangeError(f"{change.describe()}: the change lists no columns")

    previous: str | None = None
    for col_name in wanted:
        _plan_column(draft, change, col_name, mapped[col_name], previous, policy=policy, changelog=changelog)
        previous = col_name

    _plan_absent_columns(draft, set(mapped), policy)
    if not changelog:
        _plan_primary_key(draft, change, current)
    plan = draft.plan
    plan.after = SourceSchema(
        tuple(draft.columns[n] for n in draft.order),
        plan.identifier if plan.identifier is not None else current.identifier,
    )
    plan.encodings = draft.encodings
    return plan


def _ddl_column_renames(change: SchemaChange, columns: Collection[str]) -> tuple[ColumnRename, ...]:
    """The column renames of ``change``'s DDL; none when the DDL cannot be read but the change
    adds no column to ``columns`` or drops none from them.

    Raises:
        SchemaChangeError: the DDL cannot be read and columns both disappear and appear.
    """
    try:
        return ddl_effects(change.ddl).column_renames
    except DdlParseError as e:
        # the DDL only matters for renames: a change that drops no column and adds none cannot
        # hide one (the columns themselves come from tableChanges); otherwise refuse to guess
        gone = set(columns) - {c["name"] for c in change.columns}
        new = {c["name"] for c in change.columns} - set(columns)
        if gone and new:
            raise SchemaChangeError(
                f"{change.describe()}: {e}; columns {sorted(gone)} disappeared and {sorted(new)} "
                "appeared, and without the DDL a rename cannot be told from a drop and an add"
            ) from e
        return ()


def _plan_ddl_renames(draft: _Draft, change: SchemaChange, *, table_id: str) -> None:
    """Plan the renames of table ``table_id``'s columns that ``change``'s DDL makes (barriers).

    Raises:
        SchemaChangeError: from :func:`_ddl_column_renames`.
    """
    db, name = split_table_id(table_id)
    renames = _ddl_column_renames(change, draft.columns)
    shown = [c["name"] for c in change.columns]
    for r in renames:
        if not r.table.matches(db, name, default_db=change.database):
            continue
        # MySQL column names are case-insensitive (MySQL 8.4 manual, "Identifier Case
        # Sensitivity"): RENAME COLUMN EMAIL TO x renames the column email
        old_name = same_column(r.old, draft.columns)
        new_name = same_column(r.new, shown) or r.new
        taken = same_column(new_name, draft.columns)
        if old_name is not None and (taken is None or taken == old_name) and new_name != old_name:
            draft.rename(old_name, new_name)
            draft.plan.barrier_reasons.append(f"column {old_name!r} renamed to {new_name!r}")


def _plan_column(
    draft: _Draft,
    change: SchemaChange,
    col_name: str,
    mapped: tuple[str, str, bool],
    previous: str | None,
    *,
    policy: SchemaChangePolicy,
    changelog: bool,
) -> None:
    """Plan column ``col_name`` as ``change`` lists it, ``mapped`` ``(Iceberg type, encoding,
    optional)``, after column ``previous``: added, promoted, made optional, or renamed aside and added.

    Raises:
        SchemaChangeError: its type cannot be promoted, under ``incompatible: fail``.
    """
    plan = draft.plan
    iceberg_type, encoding, optional = mapped
    existing = draft.columns.get(col_name)
    if existing is not None and not is_promotion(existing.iceberg_type, iceberg_type):
        where = (
            f"{change.describe()}: column {col_name!r} changes type from "
            f"{existing.iceberg_type} to {iceberg_type}, which Iceberg cannot promote"
        )
        if policy.incompatible == "fail":
            raise SchemaChangeError(
                f"{where}. Nothing was applied and the table's offsets did not move. Set "
                "schema_changes.incompatible: new_column to keep the old column renamed aside, "
                "or migrate the table by hand."
            )
        draft.rename(col_name, aside_name(col_name, change))
        plan.barrier_reasons.append(f"column {col_name!r} renamed aside (incompatible type)")
        existing = None
    if existing is None:
        draft.add(ColumnSpec(col_name, iceberg_type, False, encoding), previous)
        return
    if existing.iceberg_type != iceberg_type:
        plan.promotions.append((col_name, iceberg_type))
    if not same_json_values(existing.encoding, encoding):
        plan.barrier_reasons.append(f"column {col_name!r} encoding {existing.encoding or '?'} -> {encoding}")
    if existing.required and (optional or changelog):
        plan.optional.append(col_name)
    draft.columns[col_name] = replace(
        existing, iceberg_type=iceberg_type, encoding=encoding, required=existing.required and not optional
    )
    draft.encodings[col_name] = encoding


def _plan_absent_columns(draft: _Draft, listed: set[str], policy: SchemaChangePolicy) -> None:
    """Plan the table's columns the change does not list (not in ``listed``): deleted (a
    barrier) under ``dropped_columns: delete``, else kept and made optional."""
    plan = draft.plan
    for col_name in [n for n in draft.order if n not in listed]:
        if policy.dropped_columns == "delete":
            plan.deletes.append(col_name)
            plan.barrier_reasons.append(f"column {col_name!r} deleted")
            draft.columns.pop(col_name)
            draft.order.remove(col_name)
            draft.encodings.pop(col_name, None)
        elif draft.columns[col_name].required:
            plan.optional.append(col_name)
            draft.columns[col_name] = replace(draft.columns[col_name], required=False)


def _plan_primary_key(draft: _Draft, change: SchemaChange, current: SourceSchema) -> None:
    """Plan new identifier fields (a barrier) when ``change``'s primary key is not ``current``'s.

    Raises:
        SchemaChangeError: a column of the new key is optional in Iceberg.
    """
    identifier = tuple(sorted(change.primary_key))
    if identifier and identifier != current.identifier:
        not_required = [c for c in identifier if not draft.columns[c].required]
        if not_required:
            raise SchemaChangeError(
                f"{change.describe()}: the primary key becomes {list(change.primary_key)} but "
                f"column(s) {not_required} are optional in Iceberg (new or once nullable), and "
                "identifier fields must be required. Re-create the table (snapshot bootstrap)."
            )
        draft.plan.identifier = identifier
        draft.plan.barrier_reasons.append(f"primary key -> {list(change.primary_key)}")


@dataclass(frozen=True)
class ObservedSchema:
    """The row columns an event's own schema shows (its Connect row schema, or an Avro writer
    schema read as one: :func:`cdclake.model.avro.connect_schema`), mapped by
    :func:`cdclake.model.types.columns_from_connect`; or the table config's ``columns``.

    Attributes:
        columns: the columns, in source order.
        where: the event that shows them; ``None`` for the table config's ``columns``.
        schema_id: the Avro writer schema's id in the schema registry, for events in Avro.
        defaults: column -> the default its field carries (names as in ``columns``).
    """

    columns: tuple[ColumnSpec, ...]
    where: KafkaCoordinates | None = None
    schema_id: int | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The Connect-encoded ``default`` of each column whose field carries a non-null one
    (:func:`cdclake.model.event_defaults.connect_defaults`)."""

    def describe(self) -> str:
        if self.where is None:
            return "the table config's columns"
        of_id = f" (writer schema id {self.schema_id})" if self.schema_id is not None else ""
        return f"the event at {self.where}{of_id}"


def _holds(existing: ColumnSpec, shown: ColumnSpec) -> bool:
    """Whether a column of type ``existing`` holds every value of one typed ``shown``: the same
    type, or a type ``shown`` promotes to (an event from before a promotion, or a narrowing)."""
    return is_promotion(shown.iceberg_type, existing.iceberg_type)


def fits_table(current: SourceSchema, observed: ObservedSchema) -> bool:
    """Whether the table takes events of the ``observed`` schema as it is: it has each of their
    columns with a type that holds its values, optional where the events' column is, and each of
    its columns the events lack is optional (it reads null in their rows)."""
    shown = {c.name for c in observed.columns}
    for c in observed.columns:
        existing = current.get(c.name)
        if existing is None or not _holds(existing, c):
            return False
        if existing.required and not c.required and c.name not in current.identifier:
            return False
    return all(not c.required or c.name in shown or c.name in current.identifier for c in current.columns)


def _incompatible(existing: ColumnSpec, shown: ColumnSpec) -> bool:
    """A column of the table cannot take events typed ``shown``: its type neither holds their
    values nor can be promoted to theirs (Iceberg spec, "Schema evolution")."""
    return not _holds(existing, shown) and not is_promotion(existing.iceberg_type, shown.iceberg_type)


def incompatible_columns(current: SourceSchema, observed: ObservedSchema) -> list[str]:
    """The columns of ``observed`` that the table's same-named column cannot take (:func:`_incompatible`)."""
    return [c.name for c in observed.columns if (e := current.get(c.name)) is not None and _incompatible(e, c)]


def plan_from_events(
    current: SourceSchema, observed: list[ObservedSchema], *, table: str, policy: SchemaChangePolicy
) -> ChangePlan:
    """The schema update that makes the table take every ``observed`` schema (pure), for tables
    without a schema-change topic (``schema_changes.source``): the rules of :func:`plan_change`
    on a row schema instead of a DDL's ``tableChanges``.

    A column the table lacks is added, optional, after the column before it in the schema that
    shows it; a type Iceberg promotes the column's to (int->long, float->double, a decimal's
    precision up at the same scale) is promoted, and the column takes the events' encoding; a
    column typed so that the table's type holds its values (an event from before a promotion)
    changes nothing; a required column that the events make optional or lack becomes optional.
    A column absent from the events is kept: a row schema cannot tell a dropped column from a
    renamed one (``dropped_columns`` applies to schema sync only). Any other type change goes to
    ``policy.incompatible``: ``fail`` raises, ``new_column`` renames the old column aside to
    ``<column>__<partition>_<offset>`` (the Kafka coordinates of the first event showing the new
    type) and adds the column with its new type. The table config's ``columns`` are only ever
    added or promoted.

    An added column whose field carries a default in the events' schemas gets it in
    ``plan.defaults`` (:func:`_added_defaults`): at the source, the rows that existed before the
    ``ADD COLUMN`` read it, and no event says so (:mod:`cdclake.model.defaults`). The apply fills it
    into the rows written by events from before the column (:mod:`cdclake.spark.evolve`).

    Args:
        current: the table's source columns and identifier fields.
        observed: the schemas, in the order they were met (the first event showing a change
            is named by errors and aside names).
        table: the Iceberg table's identifier (for errors).
        policy: the table's ``schema_changes``.

    Raises:
        SchemaChangeError: an incompatible type change under ``incompatible: fail``, of a primary
            key column, or in the table config's ``columns``; names the event's topic, partition
            and offset (or the table config), the column, the old and the new type.
    """
    draft = _Draft.of(ChangePlan(None), current)
    met = _MetColumns()
    for obs in observed:
        previous: str | None = None
        for shown in obs.columns:
            _plan_shown_column(draft, met, obs, shown, previous, current=current, table=table, policy=policy)
            previous = shown.name
        if obs.where is not None:
            _plan_optional_columns(draft, obs, current)
    plan = draft.plan
    plan.after = SourceSchema(tuple(draft.columns[n] for n in draft.order), current.identifier)
    plan.encodings = {n: draft.columns[n].encoding for n in draft.order}
    plan.defaults = _added_defaults(plan, met.defaults, skip=met.from_config | {old for old, _ in plan.renames})
    return plan


@dataclass(frozen=True)
class _MetColumns:
    """The columns a plan from the events adds, as the schemas are met.

    Attributes:
        added: the names of the columns the plan adds.
        from_config: of those, the ones added by the table config's ``columns``.
        defaults: added column -> ``(default, encoding, schema)`` of each event schema showing it,
            in the order met (:func:`_added_defaults`).
    """

    added: set[str] = field(default_factory=set)
    from_config: set[str] = field(default_factory=set)
    defaults: dict[str, list[tuple[Any, str, ObservedSchema]]] = field(default_factory=dict)


def _plan_shown_column(
    draft: _Draft,
    met: _MetColumns,
    obs: ObservedSchema,
    shown: ColumnSpec,
    previous: str | None,
    *,
    current: SourceSchema,
    table: str,
    policy: SchemaChangePolicy,
) -> None:
    """Plan column ``shown`` of schema ``obs``, after column ``previous``: added, promoted, or
    renamed aside and added (see :func:`plan_from_events`).

    Raises:
        SchemaChangeError: as :func:`plan_from_events`.
    """
    plan = draft.plan
    existing = draft.columns.get(shown.name)
    if existing is not None and _incompatible(existing, shown):
        aside = _aside_of_event(existing, obs, shown, current=current, table=table, policy=policy, met=met)
        draft.rename(shown.name, aside)
        existing = None
    if existing is None:
        spec = replace(shown, required=False)
        draft.add(spec, previous)
        met.added.add(spec.name)
        if obs.where is None:
            met.from_config.add(spec.name)
    elif not _holds(existing, shown):
        promoted = replace(existing, iceberg_type=shown.iceberg_type, encoding=shown.encoding)
        if shown.name in met.added:  # added by this plan: added with the wider type
            plan.adds = [((promoted, after) if spec.name == shown.name else (spec, after)) for spec, after in plan.adds]
        else:
            plan.promotions = [p for p in plan.promotions if p[0] != shown.name]
            plan.promotions.append((shown.name, shown.iceberg_type))
        draft.columns[shown.name] = promoted
        draft.encodings[shown.name] = promoted.encoding
    if shown.name in met.added and obs.where is not None:
        met.defaults.setdefault(shown.name, []).append((obs.defaults.get(shown.name), shown.encoding, obs))


def _aside_of_event(
    existing: ColumnSpec,
    obs: ObservedSchema,
    shown: ColumnSpec,
    *,
    current: SourceSchema,
    table: str,
    policy: SchemaChangePolicy,
    met: _MetColumns,
) -> str:
    """The name column ``existing``, which cannot take ``shown``'s type, is renamed aside to:
    ``<column>__<partition>_<offset>`` of the event ``obs``.

    Raises:
        SchemaChangeError: ``obs`` is the table config's ``columns``; ``incompatible: fail``; the
            column is a primary key column or one the plan only adds.
    """
    where = (
        f"table {table}: {obs.describe()} changes column {shown.name!r} from {existing.iceberg_type} to "
        f"{shown.iceberg_type} (encoding {shown.encoding}), which Iceberg cannot promote"
    )
    if obs.where is None:
        raise SchemaChangeError(f"{where}. Nothing was applied; correct the table config's columns.")
    if policy.incompatible == "fail" or shown.name in current.identifier or shown.name in met.added:
        # a key column cannot be set aside, nor a column this plan only adds
        raise SchemaChangeError(
            f"{where}. Nothing was committed and the table's offsets did not move. Set "
            "schema_changes.incompatible: new_column to keep the old column renamed aside, "
            "or migrate the table by hand."
        )
    return f"{shown.name}__{obs.where.partition}_{obs.where.offset}"


def _plan_optional_columns(draft: _Draft, obs: ObservedSchema, current: SourceSchema) -> None:
    """Plan making optional each required column (not an identifier field) that the events of
    schema ``obs`` make optional or lack."""
    shown_required = {c.name: c.required for c in obs.columns}
    for name in draft.order:
        if draft.columns[name].required and name not in current.identifier and not shown_required.get(name, False):
            draft.plan.optional.append(name)
            draft.columns[name] = replace(draft.columns[name], required=False)


def _added_defaults(
    plan: ChangePlan, met: Mapping[str, list[tuple[Any, str, ObservedSchema]]], *, skip: set[str]
) -> dict[str, ColumnDefault]:
    """Of the columns ``plan`` adds, what the rows written before each existed read in it: the
    default its field carries in the schemas of the events that show it
    (:func:`cdclake.model.event_defaults.connect_default`), ``met`` in the order they were met.

    None for a column without a default (or a null one: NULL, as the source reads it), added by
    the table config's ``columns``, or set aside by an incompatible type (``skip``: the source
    converted its values, it filled no default). Schemas that disagree on the default (an
    ``ALTER ... SET DEFAULT`` after the ``ADD COLUMN``) leave it unknown: which came first is not
    in the schemas."""
    out: dict[str, ColumnDefault] = {}
    for spec, _ in plan.adds:
        seen = met.get(spec.name)
        if not seen or spec.name in skip:
            continue
        shown = sorted({json.dumps(value, sort_keys=True) for value, _, _ in seen})
        value, encoding, first = seen[0]
        if len(shown) > 1:
            out[spec.name] = ColumnDefault(
                spec.name,
                None,
                False,
                f"the events' schemas show different defaults for it ({', '.join(shown)}; null: none), first "
                f"{first.describe()}: the one of its ADD COLUMN is not known",
            )
        elif value is not None:
            out[spec.name] = connect_default(value, spec, encoding=encoding, shown_by=first.describe())
    return out


def cut_at(
    positions: list[tuple[int, int, BinlogPosition]], barrier: BinlogPosition, offset_range: OffsetRange
) -> dict[int, int]:
    """End offsets that stop each partition before its first event at or after ``barrier``."""
    first_after: dict[int, int] = {}
    for partition, offset, position in positions:
        if position >= barrier and offset < first_after.get(partition, offset_range.end[partition]):
            first_after[partition] = offset
    return {p: first_after.get(p, offset_range.end[p]) for p in offset_range.end}


def cut_before(
    positions: list[tuple[int, int, BinlogPosition]], barrier: BinlogPosition, offset_range: OffsetRange
) -> dict[int, int] | None:
    """End offsets that stop each partition before its first event at or after ``barrier``, or
    ``None`` when no event of the range comes before it (in its partition's order)."""
    end = cut_at(positions, barrier, offset_range)
    before = any(offset < end[partition] and position < barrier for partition, offset, position in positions)
    return end if before else None


def check_primary_key(identifier_fields: tuple[str, ...] | None, cfg: TableConfig) -> None:
    """Refuse a table whose Iceberg identifier fields (the source's primary key, kept by schema
    sync) are not the table config's ``primary_key``.

    Args:
        identifier_fields: the Iceberg table's identifier field names; ``None`` when the table
            does not exist yet.

    Raises:
        SchemaError: the two differ (names both and the remedy).
    """
    if identifier_fields is None or cfg.write_mode == "changelog":
        return
    identifier = tuple(sorted(identifier_fields))
    if identifier and identifier != tuple(sorted(cfg.primary_key)):
        raise SchemaError(
            f"table {cfg.identifier}: the source table's primary key is {list(identifier)} "
            f"(Iceberg identifier fields) but the table config says primary_key "
            f"{list(cfg.primary_key)}; set primary_key to the source's key (in key order) and "
            "re-run. Nothing more is applied until they agree."
        )
