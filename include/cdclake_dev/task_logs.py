"""The task logs of an ``airflow dags test`` run, written where Airflow's UI reads them.

``airflow dags test`` (what ``cdclake run``, ``cdclake maintain`` and ``make demo`` run) runs each
task in its own process (``dag.test()``: no executor, no supervisor), so the task's log goes to the
command's output only and no task log file is written: the UI said "Log file not found on worker"
for those runs. Its output frames each try of a task between ``[DAG TEST] starting task_id=...``
and ``[DAG TEST] end task task_id=...`` (``airflow.sdk.definitions.dag``, Airflow 3.3), and names
the run in ``[DAG TEST] running task <TaskInstance: DAG.TASK RUN_ID ...>``. :func:`task_log_sections`
cuts the output into those tries; :func:`write_task_logs` writes each to the file Airflow's file
task handler reads for it (``[logging] base_log_folder`` / :data:`LOG_FILENAME_TEMPLATE`), as plain
log lines, which Airflow's log reader shows as they are (it parses JSON lines and falls back to
text, taking a line's leading ISO 8601 time as its timestamp).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

LOG_FILENAME_TEMPLATE = (
    "dag_id={{ ti.dag_id }}/run_id={{ ti.run_id }}/task_id={{ ti.task_id }}/"
    "{% if ti.map_index >= 0 %}map_index={{ ti.map_index }}/{% endif %}"
    "attempt={{ try_number|default(ti.try_number) }}.log"
)
"""``[logging] log_filename_template`` of the local Airflow (Airflow 3.3's default, set explicitly
by :func:`cdclake_dev.airflow_env.airflow_env` so that the files written here are where the
api-server looks)."""

_START = re.compile(r"\[DAG TEST\] starting task_id=(?P<task_id>\S+) map_index=(?P<map_index>-?\d+)")
_END = re.compile(r"\[DAG TEST\] end task task_id=(?P<task_id>\S+) map_index=(?P<map_index>-?\d+)")
_NEW_STATE = re.compile(r"\bnew_state=(?P<state>\w+)")


@dataclass(frozen=True)
class TaskLog:
    """One try of a task instance in an ``airflow dags test`` output.

    Attributes:
        dag_id: the DAG.
        run_id: the DAG run.
        task_id: the task.
        map_index: its map index (-1: not mapped).
        try_number: the try (1 for the first).
        lines: the try's log lines, from its ``starting`` line to its ``end task`` line.
    """

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    lines: tuple[str, ...]

    def relative_path(self) -> str:
        """Its log file below ``base_log_folder`` (:data:`LOG_FILENAME_TEMPLATE`)."""
        import jinja2

        ti = SimpleNamespace(dag_id=self.dag_id, run_id=self.run_id, task_id=self.task_id, map_index=self.map_index)
        return jinja2.Template(LOG_FILENAME_TEMPLATE).render(ti=ti, try_number=self.try_number)


def task_log_sections(output: str, dag_id: str) -> list[TaskLog]:
    """The tries of ``dag_id``'s tasks in an ``airflow dags test`` output, in order.

    A task started again is its next try (``dag.test()`` runs a task again after a failed try
    with retries left), unless its previous try ended ``up_for_reschedule`` (a sensor in
    reschedule mode pokes again in the same try; the execution API logs each state it sets as
    ``new_state=...``). A try whose end line is missing (the command was killed) is kept to its
    last line.

    Args:
        output: the command's output (stdout and stderr).
        dag_id: the DAG it ran.

    Returns:
        One :class:`TaskLog` per try; empty when the output names no run.
    """
    running = re.compile(rf"\[DAG TEST\] running task <TaskInstance: {re.escape(dag_id)}\.\S+ (?P<run_id>\S+) ")
    found = running.search(output)
    if found is None:
        return []
    run_id = found["run_id"]
    sections: list[TaskLog] = []
    tries: dict[tuple[str, int], int] = {}
    rescheduled: set[tuple[str, int]] = set()
    current: tuple[str, int] | None = None
    lines: list[str] = []

    def close() -> None:
        assert current is not None
        states = [m["state"] for line in lines for m in _NEW_STATE.finditer(line)]
        if states and states[-1] == "up_for_reschedule":
            rescheduled.add(current)
        sections.append(TaskLog(dag_id, run_id, current[0], current[1], tries[current], tuple(lines)))

    for line in output.splitlines():
        start = _START.search(line)
        if start is not None:
            if current is not None:
                close()
            current = (start["task_id"], int(start["map_index"]))
            if current in rescheduled:
                rescheduled.discard(current)
            else:
                tries[current] = tries.get(current, 0) + 1
            lines = [line]
            continue
        if current is None:
            continue
        lines.append(line)
        end = _END.search(line)
        if end is not None and (end["task_id"], int(end["map_index"])) == current:
            close()
            current = None
    if current is not None:
        close()
    return sections


def write_task_logs(output: str, dag_id: str, base_log_folder: Path) -> list[Path]:
    """Write each try of :func:`task_log_sections` to its log file below ``base_log_folder``
    (created; the pokes of a rescheduled try go to one file). Returns the files written."""
    files: dict[Path, list[str]] = {}
    for section in task_log_sections(output, dag_id):
        files.setdefault(base_log_folder / section.relative_path(), []).extend(section.lines)
    for path, lines in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
    return list(files)


def error_events(log_text: str) -> list[dict[str, Any]]:
    """The ``error`` and ``critical`` events of an Airflow 3 task log (JSON lines), in order; each
    as Airflow wrote it (``event``, and ``error_detail``: a list of ``{exc_type, exc_value,
    frames}``, the exception and its causes). Lines that are not JSON objects are skipped."""
    events = []
    for line in log_text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("level") in ("error", "critical"):
            events.append(event)
    return events
