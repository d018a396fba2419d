"""The plan of one table run: what ``plan`` decides, ``schema_sync`` may cap, ``apply`` applies
and ``publish`` reports.

One typed, versioned model crosses every hop (Airflow XCom as JSON, the ``spark-submit`` command
line, the Spark driver): nothing re-reads the table config or rebuilds the plan by hand. A plan
of another :data:`PLAN_VERSION` is refused with a clear error (a task of an older deployment
handing its XCom to a newer one, or the reverse).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from cdclake.errors import ConfigError
from cdclake.model.config import TableConfig
from cdclake.model.offsets import OffsetRange, Offsets

PLAN_VERSION = 1
"""The version of :class:`RunPlan` this code writes and reads."""


class TransactionRange(BaseModel):
    """Where the run reads the ``END`` records of the transactions its batch may hold
    (:mod:`cdclake.model.transactions`).

    Attributes:
        topic: the connector's transaction topic (the worker's topic creation settings give it
            its partitions; records are keyed by transaction id).
        start: per partition, the first offset to read: the first record stamped a minute before
            the batch's first records (an ``END`` follows its transaction's events).
        end: per partition, the topic's high watermark, read after the data topic's.
        read_to_end: the data topic's partitions whose range ends at their high watermark.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    start: Offsets
    end: Offsets
    read_to_end: tuple[int, ...] = ()


class RunPlan(BaseModel):
    """One run of one table.

    Attributes:
        version: :data:`PLAN_VERSION`.
        table: the table's config, as the DAG was built with it.
        run_id: the Airflow run id (recorded in the commit's snapshot summary).
        range: the Kafka offset range to apply (``schema_sync`` may cap it before a barrier).
        replay: a manual replay (start offsets given by the operator, below the committed ones).
        committed: the table's committed offsets when the run was planned (``None``: never).
        schema_changes_applied: descriptions of the schema changes schema sync applied.
        capped_before: the barrier schema change the range was capped before, if any.
        barrier_position: that change's position (:meth:`BinlogPosition.to_text`): a range the
            apply reads further (a source transaction applied whole) still stops each partition
            before its first event at or after it, whose events may be of the new schema.
        barrier_cut: the partitions whose range ends at their first event at or after
            ``barrier_position``: read up to it, though their last event read is lower (a group
            member's commit is then at a source position up to the change).
        accept_source_change: the operator accepts a new binlog history (another server, a
            ``RESET MASTER``) from the range's start: the run drops the table's source identity,
            positions, floors and tombstones and demotes its rows below the new history
            (``docs/operations.md``, "A new binlog history").
        transactions: where the apply reads the transactions' ``END`` records to commit whole
            source transactions only; ``None``: the range is applied as planned.
        topic_id: Kafka's id of the topic when the run was planned (recorded with the offsets);
            ``None`` when the broker gives none.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    table: TableConfig
    run_id: str
    range: OffsetRange
    replay: bool = False
    committed: Offsets | None = None
    schema_changes_applied: tuple[str, ...] = ()
    capped_before: str | None = None
    barrier_position: str | None = None
    barrier_cut: tuple[int, ...] = ()
    accept_source_change: bool = False
    transactions: TransactionRange | None = None
    topic_id: str | None = None

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> RunPlan:
        """Parse a plan.

        Raises:
            ConfigError: not a plan of this version (names what is wrong).
        """
        try:
            return cls.model_validate_json(text)
        except ValidationError as e:
            raise ConfigError(f"not a cdclake run plan of version {PLAN_VERSION}:\n{e}") from e
