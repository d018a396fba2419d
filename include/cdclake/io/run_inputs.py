"""What one try of an apply run reads before it computes (step 1 of :mod:`cdclake.spark.apply`):
the table with its write ref and metadata columns, its ancestry read once, the committed state and
the start check computed from them, and the table's source columns. The Spark steps of the run
compute from these (:class:`~cdclake.spark.context.ApplyContext`) and read the catalog again only
to commit."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdclake.io.catalog import check_ordering, load_table_or_none
from cdclake.io.refs import ancestry, ensure_write_ref
from cdclake.io.schema_evolution import ensure_columns, source_columns
from cdclake.model.decision import applied_already
from cdclake.model.format_version import version_note
from cdclake.model.layout import METADATA_COLUMNS
from cdclake.model.run_state import committed_state_of

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from cdclake.model.config import TableConfig
    from cdclake.model.outcome import ApplyResult
    from cdclake.model.plan import RunPlan
    from cdclake.model.run_state import CommittedState
    from cdclake.model.types import ColumnSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunInputs:
    """One try's inputs, read once at its start (:func:`read_run_inputs`).

    Attributes:
        plan: the run plan (table config, range, run id, replay); a range cut to whole source
            transactions is a copy with the cut plan (:meth:`cdclake.spark.context.ApplyContext.with_plan`).
        catalog: the pyiceberg catalog, loaded once.
        table: the Iceberg table as loaded at the start of the try (or evolved by it).
        state: what the table's newest CDC commit recorded.
        columns: the table's source columns with their encodings, in order.
    """

    plan: RunPlan
    catalog: Catalog
    table: Table
    state: CommittedState
    columns: tuple[ColumnSpec, ...]

    @property
    def cfg(self) -> TableConfig:
        return self.plan.table


def read_run_inputs(catalog: Catalog, plan: RunPlan) -> RunInputs | ApplyResult | None:
    """The plan's table read for one try: its write ref fitted to its group
    (:func:`~cdclake.io.refs.ensure_write_ref`), the metadata columns it lacks added, its ancestry
    read once, its ordering recorded or checked (:func:`~cdclake.io.catalog.check_ordering`), and
    the start check (:func:`~cdclake.model.decision.applied_already`).

    Returns:
        The inputs; the result to return when the range is applied already; ``None`` when the table
        does not exist (the run creates it from its events, then reads it again).

    Raises:
        ConcurrentRunError: another run committed since this one was planned.
        ConfigError: the table's positions are in another ordering than the config's.
        SchemaError: a column has no recorded encoding (the table was not created by cdclake).
    """
    cfg = plan.table
    table = load_table_or_none(catalog, cfg.identifier)
    if table is None:
        return None
    table = ensure_columns(ensure_write_ref(table, cfg.group), METADATA_COLUMNS)
    history = tuple(ancestry(table))
    columns = source_columns(table)
    state = committed_state_of(history[0][0] if history else None, (s for _, _, s in history), cfg.topic)
    done = applied_already(state, plan, history)
    if done is not None:
        return done
    check_ordering(table, cfg.ordering, has_commits=state.offsets is not None)
    note = version_note(cfg.name, cfg.identifier, table.format_version, cfg.format_version)
    if note is not None:
        log.warning(note)
    return RunInputs(plan, catalog, table, state, columns)
