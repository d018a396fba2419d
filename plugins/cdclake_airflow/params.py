"""The Params of the trigger forms. What the DAGs over many tables (``cdc_snapshot_bootstrap``,
``cdc_reconcile``, ``cdc_maintenance``, ``cdc_freshness``) share: their DAG settings, the ``tables``
Param of their trigger form and the task that checks it
(:func:`cdclake.model.selection.select_tables`). The replay Params of a table DAG
(:func:`replay_params`) and the formats they are checked by (:func:`register_param_formats`). The
DAG documentation the UI shows, as plain Markdown (:func:`plain_markdown`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from cdclake.model.config import TableConfig

OWNER = "data-platform"
RECOVERY_SECTION = "Recovery (only when an error names it)"
"""The trigger form's section of the recovery switches: collapsed, apart from the everyday Params."""
RUN_TYPES = ("scheduled", "manual", "operator_triggered", "asset_triggered", "asset_materialization")
"""The DAG run types a table DAG allows: every one but Airflow's Backfill (``backfill``), whose runs,
one per logical date of a range, would each apply from the committed offsets, or each replay the
same range again when given a replay start."""
START_DATE = datetime(2026, 1, 1)


def tables_dag(
    dag_id: str,
    description: str,
    doc_md: str | None,
    *,
    schedule: str | None,
    tags: list[str],
    task_defaults: dict[str, Any],
    **dag_args: Any,
) -> DAG:
    """A DAG over many tables: owned by :data:`OWNER`, from :data:`START_DATE` without catch-up,
    one run at a time.

    Args:
        dag_id: the DAG id.
        description: its one-line description in the UI.
        doc_md: its documentation (the DAG module's docstring).
        schedule: its schedule (``None``: triggered only).
        tags: its tags.
        task_defaults: the tasks' ``default_args`` besides the owner (retries, timeouts).
        dag_args: further ``DAG`` arguments (``params``, ``render_template_as_native_obj``).
    """
    from airflow.sdk import DAG

    return DAG(
        dag_id=dag_id,
        description=description,
        schedule=schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args={"owner": OWNER, **task_defaults},
        tags=tags,
        doc_md=plain_markdown(doc_md),
        **dag_args,
    )


_ROLE = re.compile(r":(?:py:)?[a-z]+:`(?P<short>~?)(?:(?P<title>[^`<]+?)\s*<(?P<target>[^`>]+)>|(?P<name>[^`]+))`")
_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)


def plain_markdown(doc: str | None) -> str | None:
    """A module docstring as the plain Markdown of a DAG's ``doc_md`` (Airflow's UI renders Markdown,
    and shows reST as typed): a Sphinx role becomes a code span of what it names
    (``:func:`cdclake.runner.run_once``` -> ```cdclake.runner.run_once```; ``:class:`~a.B``` -> ```B```;
    ``:func:`title <a.b>``` -> ```title```), a reST literal (````x````) a Markdown one (```x```).
    ``None`` stays ``None``."""
    if doc is None:
        return None

    def role(match: re.Match[str]) -> str:
        if match["title"]:
            return f"`{match['title']}`"
        name = match["name"]
        return f"`{name.rsplit('.', 1)[-1] if match['short'] else name}`"

    return _LITERAL.sub(r"`\1`", _ROLE.sub(role, doc))


def tables_param(names: list[str], purpose: str, *, empty_means_all: bool = True) -> Any:
    """The ``tables`` Param: a list of configured table names (a pick list of ``names``).
    ``purpose`` completes "Tables of the table config to ...". Empty means all, unless
    ``empty_means_all`` is false: then the first table is chosen by default."""
    from airflow.sdk import Param

    return Param(
        [] if empty_means_all else names[:1],
        type="array",
        items={"type": "string", "enum": names} if names else {"type": "string"},
        title="Tables",
        description=f"Tables of the table config to {purpose}" + ("; empty: all." if empty_means_all else "."),
        examples=names,
    )


def select_tables_task(tables: list[TableConfig], among: str = "in the table config") -> Any:
    """The task ``select_tables``: the names of the tables a run takes, the ``tables`` Param
    checked against ``tables`` (all of them when it is empty); the tasks per table map over its
    XCom.

    Args:
        tables: the tables the DAG takes.
        among: what ``tables`` are, as the message of an unknown name says it.

    Raises:
        ConfigError: (when the task runs) a name that is not one of ``tables``.
    """
    from airflow.sdk import task

    from cdclake.model.selection import select_tables

    return task(task_id="select_tables")(
        lambda **ctx: [t.name for t in select_tables(tables, ctx["params"]["tables"], among=among)]
    )()


def form_check(param: str) -> Callable[[Any], bool]:
    """The check of replay Param ``param`` (``replay_from_offsets`` or ``replay_from_timestamp``) in
    the trigger form: the run's own rules for that Param alone (:func:`cdclake.model.replay.replay_start`,
    now: a time still to come is refused too), for a value the run would refuse before reading Kafka.
    What needs the topic (its partitions, watermarks, retention) or both Params is the run's.

    Returns:
        The format check: ``True`` for an empty value (and for a replay time that is not text, which
        the schema's ``type`` refuses).

    Raises:
        jsonschema.ValidationError: (from the check) the run's one line naming the Param and what it
            allows. Raised past jsonschema's format machinery on purpose: an error jsonschema makes
            itself prints the Param's whole schema and value after its message, and Airflow's form
            shows that text as it is; this one prints its message alone (``Invalid input for param
            replay_from_offsets: replay_from_offsets must be a JSON object of partition to
            non-negative offset, e.g. {"0": 120, "1": 98}; got '{"0": -1}'``).
    """
    from jsonschema import ValidationError

    from cdclake.errors import TriggerParamError
    from cdclake.model.replay import TIMESTAMP_PARAM, replay_start

    def check(value: Any) -> bool:
        if value is None or value == "" or (param == TIMESTAMP_PARAM and not isinstance(value, str)):
            return True
        try:
            replay_start({param: value}, now_ms=int(datetime.now(timezone.utc).timestamp() * 1000))
        except TriggerParamError as e:
            raise ValidationError(str(e)) from None
        return True

    return check


def register_param_formats() -> None:
    """Give jsonschema the replay Params' formats (:data:`cdclake.model.replay.PARAM_FORMATS`'s
    names, checked by :func:`form_check`), so that every ``FormatChecker()`` checks them: the one
    Airflow validates Params with, in the api-server (the trigger form, the REST API; the plugin's
    ``on_load``), the DAG processor and the tasks (:func:`replay_params`). Idempotent.

    A format, unlike a ``pattern``, lets the check say what the Param allows in words (a
    ``pattern``'s message would be the regular expression). A process that has not registered them
    leaves the values to the run's own check (the same rules, failing the run at once).
    """
    from jsonschema import FormatChecker

    from cdclake.model.replay import OFFSETS_FORMAT, OFFSETS_PARAM, PARAM_FORMATS, TIMESTAMP_FORMAT, TIMESTAMP_PARAM

    params = {OFFSETS_FORMAT: OFFSETS_PARAM, TIMESTAMP_FORMAT: TIMESTAMP_PARAM}  # every one of PARAM_FORMATS
    for name in PARAM_FORMATS:
        param = params[name]
        # no exception is caught as "does not conform": the check's own error is the form's message
        FormatChecker.checkers[name] = (form_check(param), ())


def replay_params(schedule: str | None) -> dict[str, Any]:
    """The trigger form of a table DAG (``schedule``: its schedule, as the form says it): where a
    replay starts (``replay_from_offsets`` or ``replay_from_timestamp``, JSON schema of
    :mod:`cdclake.model.replay`: the form and Airflow's REST API refuse what does not fit), and
    the recovery switch ``accept_source_change`` in the collapsed :data:`RECOVERY_SECTION`. None
    is required: the form left empty is an ordinary run."""
    from airflow.sdk import Param

    from cdclake.model.replay import (
        ACCEPT_PARAM,
        OFFSETS_PARAM,
        OFFSETS_SCHEMA,
        TIMESTAMP_PARAM,
        TIMESTAMP_SCHEMA,
    )

    register_param_formats()
    runs = f"on its schedule ({schedule})" if schedule else "when triggered (it has no schedule)"
    return {
        OFFSETS_PARAM: Param(
            None,
            title="Replay from offsets",
            description=(
                "Replay: this one run starts at these offsets instead of the table's committed offsets and "
                'ends at the topic\'s end. A JSON object of partition to offset, e.g. {"0": 120, "1": 98}; '
                "partitions not named start at their earliest offset. Empty: an ordinary run. Airflow's "
                'Backfill is refused for this DAG (one replay is one triggered run). "Unpause on trigger" '
                f"unpauses the DAG: this run starts, and the table then runs {runs} until paused again; a "
                "run triggered while the DAG stays paused waits, queued, until it is unpaused."
            ),
            **OFFSETS_SCHEMA,
        ),
        TIMESTAMP_PARAM: Param(
            None,
            title="Replay from timestamp",
            description=(
                "Replay: this one run starts at the first records at or after this time (ISO 8601, e.g. "
                "2026-11-20T08:00:00Z; UTC when it names no offset), found with Kafka's offsets-for-times. "
                "Give offsets or a time, not both."
            ),
            **TIMESTAMP_SCHEMA,
        ),
        ACCEPT_PARAM: Param(
            False,
            type=["boolean", "null"],
            title="Accept a new binlog history",
            section=RECOVERY_SECTION,
            description=(
                "Only when a run stopped on a binlog-history change (failover, RESET MASTER) and its "
                "error says so, together with the replay_from_offsets it names: the table drops the "
                "old history's positions and converges at the next full snapshot (docs/operations.md)."
            ),
        ),
    }
