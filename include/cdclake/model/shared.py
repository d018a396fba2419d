"""Shared DAGs (pure: no Airflow, Spark, Kafka or pyiceberg): the tables whose config names one
``shared_dag`` are applied on schedule by the DAG ``cdc_shared_<shared_dag>``, several tables per
task in one Spark Connect session, each with its own commit (docs/architecture.md, "Shared DAGs").

A table run's fixed cost is a task (a process, its imports, its connections) and a session; a
fleet of small tables pays it once per task, not once per table. Each table keeps its own commit,
its offsets in it, and so the apply contract and exactly-once of a table DAG's run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from cdclake.errors import ConfigError

SHARED_DAG_NAME = re.compile(r"^[a-z0-9_]+$")
"""A shared DAG's name: its DAG id is ``cdc_shared_<name>``."""
SHARED_DAG_PREFIX = "cdc_shared_"
"""The DAG id of a shared DAG is this and its name."""
SHARED_SETTINGS = ("schedule", "tables_per_task", "retries", "retry_delay_s", "task_timeout_minutes")
"""The table settings the members of a shared DAG must agree on: they are the DAG's and its
tasks' (one schedule, one cut into tasks, one retry policy and timeout per task)."""


class SharedMember(Protocol):
    """What this module reads of a table's config (:class:`cdclake.model.config.TableConfig`)."""

    @property
    def name(self) -> str: ...
    @property
    def shared_dag(self) -> str | None: ...
    @property
    def tables_per_task(self) -> int: ...


M = TypeVar("M", bound=SharedMember)


def shared_mismatch(cfg: SharedMember, first: SharedMember | None) -> str | None:
    """Why table ``cfg`` cannot join its shared DAG whose first member is ``first``: the first
    setting of :data:`SHARED_SETTINGS` where they differ, as a sentence naming both tables and
    values; ``None`` when they agree (or ``first`` is ``None``: ``cfg`` is the first)."""
    if first is None:
        return None
    for key in SHARED_SETTINGS:
        mine, theirs = getattr(cfg, key), getattr(first, key)
        if mine != theirs:
            return (
                f"table {cfg.name!r} has {key} {mine!r} but table {first.name!r} of the same shared DAG "
                f"{SHARED_DAG_PREFIX}{cfg.shared_dag} has {theirs!r}: the members of a shared DAG share "
                f"{', '.join(SHARED_SETTINGS)}"
            )
    return None


def shared_dags(tables: Iterable[M]) -> dict[str, tuple[M, ...]]:
    """The shared DAGs of ``tables`` (their ``shared_dag``), each with its members in name order.

    Raises:
        ConfigError: two members disagree on a setting of :data:`SHARED_SETTINGS` (the message
            names both tables, the setting and both values).
    """
    found: dict[str, list[M]] = {}
    for t in tables:
        if t.shared_dag is None:
            continue
        members = found.setdefault(t.shared_dag, [])
        why = shared_mismatch(t, members[0] if members else None)
        if why is not None:
            raise ConfigError(why)
        members.append(t)
    return {name: tuple(sorted(members, key=lambda m: m.name)) for name, members in found.items()}


def task_tables(members: Sequence[M]) -> list[tuple[M, ...]]:
    """The tables of each task of a shared DAG: ``members`` in name order cut into runs of
    ``tables_per_task`` (the members' common value); the task ``apply_<k>`` applies the ``k``-th.

    A table that joins or leaves moves the cut for the tables after it: harmless, since a table's
    commit, not its task, holds its offsets, and a shared DAG runs once at a time.
    """
    if not members:
        return []
    ordered = sorted(members, key=lambda m: m.name)
    size = ordered[0].tables_per_task
    return [tuple(ordered[i : i + size]) for i in range(0, len(ordered), size)]
