"""What one apply run did (:class:`ApplyResult`), and the loop over the ranges a run tries
(:class:`Replan`, :func:`replan_until_applied`). Pure: the Spark apply
(:func:`cdclake.spark.apply.apply_range`) produces these; the runner, the Airflow tasks and the CLI
read them without importing Spark.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from cdclake.errors import ReplanLimitError
from cdclake.model.layout import SummaryKeys
from cdclake.model.offsets import decode_offsets
from cdclake.model.plan import RunPlan
from cdclake.model.transactions import TransactionWait

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ApplyResult:
    """What one apply did.

    Attributes:
        status: ``committed``, ``already_applied`` (the table is at the range's end already, or
            the replay's run committed), ``empty`` (the range has no records) or ``waiting`` (the
            range holds no whole source transaction yet: nothing committed).
        snapshot_id: the Iceberg snapshot committed; for ``already_applied``, this run's earlier
            commit, whose figures the other fields then are (``None``: another run's commit).
        events: Kafka records read, tombstones included.
        tombstones: Kafka tombstones (null values) skipped.
        ops: applicable events per Debezium op.
        quarantined: records written to the quarantine table (bad and held back).
        keys_changed: rows in the merge source after reduction (upsert mode).
        connector_contradictions: the Debezium handling modes the events show where the table's
            columns expect others, one line per column (:mod:`cdclake.model.connector_check`;
            the commit's summary key :attr:`~cdclake.model.layout.SummaryKeys.CONNECTOR_CONTRADICTIONS`).
        applied_end: the end offsets of the range committed (the plan's, or cut before a source
            transaction that is not whole); ``None`` when nothing was committed.
        waiting_events: records of the plan's range left for the next run because a source
            transaction in it is not whole (:attr:`~cdclake.model.layout.SummaryKeys.TRANSACTION_WAIT`;
            ``waiting``: the whole range).
    """

    status: str
    snapshot_id: int | None = None
    events: int = 0
    tombstones: int = 0
    ops: dict[str, int] | None = None
    quarantined: int = 0
    keys_changed: int = 0
    connector_contradictions: tuple[str, ...] = ()
    applied_end: dict[int, int] | None = None
    waiting_events: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def of_commit(cls, status: str, snapshot_id: int, summary: Mapping[str, str]) -> ApplyResult:
        """The figures a CDC commit's snapshot summary records (:class:`~cdclake.model.layout.SummaryKeys`):
        what a retry after that commit reports and publishes."""
        wait = TransactionWait.from_text(summary.get(SummaryKeys.TRANSACTION_WAIT))
        return cls(
            status,
            snapshot_id=snapshot_id,
            events=int(summary.get(SummaryKeys.EVENTS, 0)),
            tombstones=int(summary.get(SummaryKeys.TOMBSTONES, 0)),
            ops=json.loads(summary.get(SummaryKeys.OPS, "{}")),
            quarantined=int(summary.get(SummaryKeys.QUARANTINED, 0)),
            keys_changed=int(summary.get(SummaryKeys.KEYS_CHANGED, 0)),
            connector_contradictions=tuple(json.loads(summary.get(SummaryKeys.CONNECTOR_CONTRADICTIONS, "[]"))),
            applied_end=decode_offsets(summary[SummaryKeys.END_OFFSETS]),
            waiting_events=wait.events if wait is not None else 0,
        )


MAX_REPLANS = 16
"""How many times :func:`replan_until_applied` tries another range (:class:`Replan`) in one run before it
gives up (a range extended to a whole source transaction, read further to a group's target, cut
before an incompatible type change: a few at most)."""


@dataclass(frozen=True)
class Replan:
    """Why a run's range changes: one try (:func:`cdclake.spark.apply.apply_once`) found that its
    plan's range is to be applied as another, and applied nothing; the run tries ``plan`` instead.

    Attributes:
        plan: the plan to try: the range extended past the cap to a whole source transaction, read
            further to a table group's target, or cut before an incompatible type change.
        reason: what changes and why, for the run's log (one line).
        cut_incompatible: ``cut_incompatible`` of the next try (:func:`replan_until_applied`); ``False`` for a
            range cut before an incompatible type change.
    """

    plan: RunPlan
    reason: str
    cut_incompatible: bool = True


def replan_until_applied(
    try_once: Callable[[RunPlan, bool], ApplyResult | Replan], plan: RunPlan, cut_incompatible: bool = True
) -> ApplyResult:
    """Try ``plan`` with ``try_once(plan, cut_incompatible)``; while a try returns a :class:`Replan`,
    log its reason and try its plan with its ``cut_incompatible``.

    Returns:
        The first :class:`ApplyResult` a try returns.

    Raises:
        ReplanLimitError: the range changed more than :data:`MAX_REPLANS` times (a bug: each
            replan is a range extended, read further or cut, a few at most); the message names every
            reason. Nothing of the range was committed: a try that returns a replan commits nothing.
        Whatever ``try_once`` raises.
    """
    reasons: list[str] = []
    while True:
        outcome = try_once(plan, cut_incompatible)
        if isinstance(outcome, ApplyResult):
            return outcome
        reasons.append(outcome.reason)
        if len(reasons) > MAX_REPLANS:
            raise ReplanLimitError(
                f"table {plan.table.identifier}: run {plan.run_id} changed its range more than {MAX_REPLANS} times "
                f"without applying it ({'; '.join(reasons)}); nothing of the range was committed. This is a bug "
                "of cdclake: report it with the run's log"
            )
        log.info(
            "table %s: %s; the run tries again with the range ending at %s",
            plan.table.identifier,
            outcome.reason,
            json.dumps(dict(outcome.plan.range.end), sort_keys=True),
        )
        plan, cut_incompatible = outcome.plan, outcome.cut_incompatible
