"""The stale-run-branch rule without a catalog (:mod:`cdclake.model.maintenance`) and the run
branch names it reads (:mod:`cdclake.model.layout`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdclake.model.layout import RUN_BRANCH_PREFIX, run_branch_created_ms, run_branch_name
from cdclake.model.maintenance import RUN_BRANCH_MAX_AGE_MS, RunBranch, run_branch_max_age_ms, stale_run_branch

NOW = 1_800_000_000_000
AGE = RUN_BRANCH_MAX_AGE_MS
HOUR = 3600 * 1000

tokens = st.text(alphabet="0123456789abcdef", min_size=1, max_size=32)
epoch_ms = st.integers(min_value=0, max_value=10**18 - 1)


@given(created_ms=epoch_ms, token=tokens)
def test_a_run_branch_name_gives_back_its_creation_time(created_ms, token):
    name = run_branch_name(created_ms, token)
    assert name.startswith(RUN_BRANCH_PREFIX)
    assert run_branch_created_ms(name) == created_ms


@pytest.mark.parametrize(
    "name",
    [
        "cdc-run-d59a497a6b37",  # a release before creation times
        "cdc-run-000000000000",
        "main",
        "audit-1700000000000-abc",
        "cdc-run-1700000000000-",
        "cdc-run-1700000000000-ABC",
        "cdc-run--1-abc",
        "cdc-run-1700000000000-abc-def",
    ],
)
def test_a_name_without_a_creation_time_gives_none(name):
    assert run_branch_created_ms(name) is None


@pytest.mark.parametrize(("created_ms", "token"), [(-1, "abc"), (NOW, ""), (NOW, "ABC"), (NOW, "a-b"), (NOW, "xyz")])
def test_a_run_branch_name_refuses_what_it_could_not_read_back(created_ms, token):
    with pytest.raises(ValueError, match="run branch"):
        run_branch_name(created_ms, token)


def branch(created_ms: int | None, head_ms: int | None, main_in_lineage: bool) -> RunBranch:
    name = "cdc-run-d59a497a6b37" if created_ms is None else run_branch_name(created_ms, "d59a497a6b37")
    return RunBranch(name=name, head_timestamp_ms=head_ms, main_in_lineage=main_in_lineage)


@given(
    created_ago=st.integers(min_value=-HOUR, max_value=AGE),
    head_ago=st.integers(min_value=0, max_value=10**12),
    main_in_lineage=st.booleans(),
)
def test_a_branch_created_within_the_age_is_never_stale_however_old_its_head(created_ago, head_ago, main_in_lineage):
    """The finding: a new run branch starts at the base snapshot, as old as the table's last commit."""
    young = branch(NOW - created_ago, NOW - head_ago, main_in_lineage)
    assert not stale_run_branch(young, NOW, AGE)


@given(created_ago=st.integers(min_value=AGE + 1, max_value=10**12), main_in_lineage=st.booleans())
def test_a_branch_created_longer_ago_than_the_age_is_stale(created_ago, main_in_lineage):
    assert stale_run_branch(branch(NOW - created_ago, NOW, main_in_lineage), NOW, AGE)


@pytest.mark.parametrize(
    ("head_ago", "main_in_lineage", "stale"),
    [
        (AGE + 1, False, True),  # old, and main moved off it: fast_forward refuses it
        (AGE + 1, True, False),  # old, but main is on its lineage: a run may still fast-forward it
        (AGE, False, False),  # not older than the age
        (None, False, True),  # its head snapshot is gone
    ],
)
def test_a_branch_named_without_a_creation_time_goes_when_old_and_off_mains_lineage(head_ago, main_in_lineage, stale):
    head_ms = None if head_ago is None else NOW - head_ago
    assert stale_run_branch(branch(None, head_ms, main_in_lineage), NOW, AGE) is stale


def test_the_age_exceeds_twice_the_task_timeout():
    assert run_branch_max_age_ms(60) == AGE == 6 * HOUR
    assert run_branch_max_age_ms(180) == AGE
    assert run_branch_max_age_ms(240) == 8 * HOUR
