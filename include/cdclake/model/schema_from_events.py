"""Schema evolution from the events (pure): for tables without a schema-change topic
(``schema_changes.source``), the rules of :mod:`cdclake.model.schema_diff` applied to the row schemas
the events carry.

The row schemas (:func:`plan_from_events`): new columns added, types promoted, a type the
table's column holds (an event from before a promotion) left as it is, a column absent from the
events kept (a row schema cannot tell a drop from a rename), other type changes to
``incompatible``. The table config's ``columns`` are applied the same way. A new column whose field
carries a default gives it to the rows from before the column (:attr:`ChangePlan.defaults`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cdclake.errors import SchemaChangeError
from cdclake.model.config_blocks import SchemaChangePolicy
from cdclake.model.defaults import ColumnDefault
from cdclake.model.envelope import KafkaCoordinates
from cdclake.model.event_defaults import connect_default
from cdclake.model.schema_diff import ChangePlan, PlanDraft, SourceSchema, is_promotion
from cdclake.model.types import ColumnSpec


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
    draft = PlanDraft.of(ChangePlan(None), current)
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
    draft: PlanDraft,
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


def _plan_optional_columns(draft: PlanDraft, obs: ObservedSchema, current: SourceSchema) -> None:
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
