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

**Without a schema-change topic** the same rules are applied to the row schemas the events carry
(:mod:`cdclake.model.schema_from_events`).

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

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace

from cdclake.errors import DdlParseError, SchemaChangeError, SchemaError
from cdclake.model.config import TableConfig
from cdclake.model.config_blocks import ConnectorModes, SchemaChangePolicy
from cdclake.model.ddl import ColumnRename, ddl_effects
from cdclake.model.defaults import ColumnDefault
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
class PlanDraft:
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
    def of(cls, plan: ChangePlan, current: SourceSchema) -> PlanDraft:
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
    draft = PlanDraft.of(ChangePlan(change), current)
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


def _plan_ddl_renames(draft: PlanDraft, change: SchemaChange, *, table_id: str) -> None:
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
    draft: PlanDraft,
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


def _plan_absent_columns(draft: PlanDraft, listed: set[str], policy: SchemaChangePolicy) -> None:
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


def _plan_primary_key(draft: PlanDraft, change: SchemaChange, current: SourceSchema) -> None:
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
