"""Shared DAGs, the pure part (:mod:`cdclake.model.shared`): who is a member, how the members are
cut into tasks, and what members must agree on; and the error a task with failed tables raises."""

from __future__ import annotations

import pytest

from cdclake.errors import ConfigError, SharedTablesError, TopicNotFoundError
from cdclake.model.config import TablesFile
from cdclake.model.shared import SHARED_SETTINGS, shared_dags, shared_mismatch, task_tables
from tests.conftest import make_table


def _members(n: int, per_task: int, **over: object) -> list:
    return [make_table(name=f"m{i:02d}", shared_dag="s", tables_per_task=per_task, **over) for i in range(n)]


def test_members_are_cut_into_tasks_in_name_order() -> None:
    members = list(reversed(_members(5, 2)))
    assert [[t.name for t in chunk] for chunk in task_tables(members)] == [["m00", "m01"], ["m02", "m03"], ["m04"]]
    assert task_tables([]) == []
    assert [len(c) for c in task_tables(_members(100, 50))] == [50, 50]


def test_tables_without_a_shared_dag_are_in_none() -> None:
    alone = make_table(name="alone")
    dags = shared_dags([alone, *_members(3, 2)])
    assert list(dags) == ["s"] and [t.name for t in dags["s"]] == ["m00", "m01", "m02"]
    assert alone.scheduled_dag_id == "cdc_alone" and dags["s"][0].scheduled_dag_id == "cdc_shared_s"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("schedule", "@hourly"),
        ("tables_per_task", 7),
        ("retries", 0),
        ("retry_delay_s", 5),
        ("task_timeout_minutes", 9),
    ],
)
def test_members_must_agree_on_each_setting_of_the_dag_and_its_tasks(key: str, value: object) -> None:
    assert key in SHARED_SETTINGS
    first, other = make_table(name="a", shared_dag="s"), make_table(name="b", shared_dag="s", **{key: value})
    why = shared_mismatch(other, first)
    assert why is not None and f"table 'b' has {key} {value!r} but table 'a'" in why and "cdc_shared_s" in why
    assert shared_mismatch(first, None) is None
    with pytest.raises(ConfigError, match=key):
        shared_dags([first, other])
    # a setting outside the DAG's (the owner, the value format) may differ
    assert shared_mismatch(make_table(name="c", shared_dag="s", owner="team-b"), first) is None


def test_a_shared_dag_name_is_a_plain_name() -> None:
    entry = {"name": "a", "topic": "p.d.a", "namespace": "n", "table": "a", "primary_key": ["id"]}
    with pytest.raises(ValueError, match="shared_dag"):
        TablesFile.model_validate({"tables": [{**entry, "shared_dag": "Has-Dash"}]})
    with pytest.raises(ValueError, match="tables_per_task"):
        TablesFile.model_validate({"tables": [{**entry, "shared_dag": "s", "tables_per_task": 0}]})


def test_the_error_of_a_task_names_each_failed_table_and_its_error() -> None:
    error = SharedTablesError(
        {"orders": TopicNotFoundError("Kafka topic 'x' does not exist on b:9092\nmore"), "items": RuntimeError()}
    )
    assert str(error) == (
        "2 table(s) of the task failed (the others were applied): "
        "orders: TopicNotFoundError: Kafka topic 'x' does not exist on b:9092; items: RuntimeError: "
    )
    assert set(error.errors) == {"orders", "items"}
