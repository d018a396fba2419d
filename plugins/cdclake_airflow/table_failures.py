"""How the tasks of a table DAG fail (:mod:`cdclake_airflow.table_dag`; a shared DAG's tasks alike,
:mod:`cdclake_airflow.shared_dag`): the errors they do not retry (:data:`NOT_RETRIED`,
:func:`retry_args`), a trigger-form Param that does not fit the table (:func:`refused_params`), and
the table's record of failed tries (:func:`record_failure`), which ``cdclake status``, the CDC
monitor and ``cdc_freshness`` show and the next run that succeeds removes (:func:`runs_succeed`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal

from cdclake.errors import (
    QuarantinedBatchError,
    QuarantineToleranceError,
    TransactionTooLargeError,
    TriggerParamError,
)

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from cdclake.model.config import TableConfig

log = logging.getLogger(__name__)


NOT_RETRIED = (QuarantinedBatchError, QuarantineToleranceError, TransactionTooLargeError, TriggerParamError)
"""The errors a table DAG's tasks do not retry, since a retry could change nothing (the retry
policy of :func:`~cdclake_airflow.table_dag.build_table_dag`): a run whose every record was
quarantined, a run that quarantined more bad records than its table tolerates (a retry would find
it committed and succeed, and the task's failure, its alert, would be lost), and a trigger-form
Param that does not fit the table (a user-input error, not a transient one)."""


def retry_args(cfg: TableConfig) -> dict[str, Any]:
    """The retry policy and timeout of a task applying table ``cfg`` (of its DAG, or of its shared
    DAG): ``retries`` tries more after ``retry_delay_s``, doubling up to an hour, except for the
    errors of :data:`NOT_RETRIED`; each try at most ``task_timeout_minutes``."""
    from airflow.sdk import ExceptionRetryPolicy, RetryAction, RetryRule

    return {
        "retry_policy": ExceptionRetryPolicy(
            rules=[RetryRule(exception=list(NOT_RETRIED), action=RetryAction.FAIL, reason="not retried: see the error")]
        ),
        "retries": cfg.retries,
        "retry_delay": timedelta(seconds=cfg.retry_delay_s),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(hours=1),
        "execution_timeout": timedelta(minutes=cfg.task_timeout_minutes),
    }


@contextmanager
def refused_params() -> Iterator[None]:
    """Fail the task on a trigger-form Param that does not fit the table
    (:class:`~cdclake.errors.TriggerParamError`, raised in the ``with`` block): its one line is the
    last the task logs, then ``AirflowFailException`` with the same line fails the task, not retried,
    and without the traceback of where the run found the value (the task log's error block is that
    line; the error is the user's, not the code's). :func:`record_failure` records the
    ``TriggerParamError``.

    Raises:
        AirflowFailException: the ``TriggerParamError``'s message (its ``__context__``).
    """
    from airflow.sdk.exceptions import AirflowFailException

    try:
        yield
    except TriggerParamError as e:
        log.error("%s", e)
        raise AirflowFailException(str(e)) from None


def recorded_error(error: BaseException | None) -> BaseException | None:
    """The error a failed try is recorded with (:func:`record_failure`): a refused trigger-form Param's
    ``TriggerParamError`` for the ``AirflowFailException`` :func:`refused_params` raised in its place,
    else ``error`` itself."""
    context = getattr(error, "__context__", None)
    if isinstance(context, TriggerParamError) and str(error) == str(context):
        return context
    return error


def record_failure(identifier: str, state: Literal["failing", "retrying"], context: Mapping[str, Any]) -> None:
    """The ``on_failure_callback`` (``state`` ``failing``) and ``on_retry_callback``
    (``retrying``) of every task of a table DAG: count the failed try in the table's record of
    failed tries (:class:`~cdclake.model.status.RunFailure`, the table property
    :data:`~cdclake.model.layout.RUN_FAILURE_PROPERTY`), which ``cdclake status``, the CDC monitor
    and ``cdc_freshness`` read. A table that does not exist yet (its first run failed before
    creating it) gets no record: the DAG's own state shows the failure."""
    from cdclake.io.catalog import update_table_property
    from cdclake.model.layout import RUN_FAILURE_PROPERTY
    from cdclake.model.status import RunFailure
    from cdclake_airflow.hooks import CdcLakeHook

    ti = context["ti"]
    ended = getattr(ti, "end_date", None) or datetime.now(timezone.utc)

    def failed(previous: str | None) -> str:
        return RunFailure.after(
            RunFailure.from_property(previous),
            state=state,
            at_ms=int(ended.timestamp() * 1000),
            run_id=str(ti.run_id),
            task_id=str(ti.task_id),
            try_number=int(ti.try_number),
            error=recorded_error(context.get("exception")),
        ).model_dump_json()

    update_table_property(CdcLakeHook().catalog, identifier, RUN_FAILURE_PROPERTY, failed)
    log.info("table %s: failed try recorded (%s)", identifier, state)


def runs_succeed(catalog: Catalog, cfg: TableConfig) -> None:
    """The run succeeded: remove the table's record of failed tries
    (:data:`~cdclake.model.layout.RUN_FAILURE_PROPERTY`), if it has one."""
    from cdclake.io.catalog import update_table_property
    from cdclake.model.layout import RUN_FAILURE_PROPERTY

    update_table_property(catalog, cfg.identifier, RUN_FAILURE_PROPERTY, lambda _: None)
