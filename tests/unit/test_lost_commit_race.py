"""Iceberg's refusal of a commit because another commit moved the table, however Spark, Spark
Connect or pyiceberg wrap it (:func:`cdclake.errors.lost_commit_race`): the apply turns it into
ConcurrentRunError, maintenance retries it."""

from __future__ import annotations

import pytest
from pyiceberg.exceptions import CommitFailedException

from cdclake.errors import lost_commit_race

PY4J = (
    "An error occurred while calling o412.sql.\n: org.apache.iceberg.exceptions.CommitFailedException: "
    "Table metadata refresh is required\n\tat org.apache.iceberg.jdbc.JdbcTableOperations.doCommit"
)


def _raised_from(inner: BaseException, outer: BaseException, *, cause: bool = True) -> BaseException:
    """``outer`` raised from ``inner`` (``raise ... from``), or while handling it (``__context__``)."""
    try:
        try:
            raise inner
        except BaseException as e:
            if cause:
                raise outer from e
            raise outer  # noqa: B904 - the implicit __context__ is what this case is about
    except BaseException as raised:
        return raised
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (RuntimeError(PY4J), True),
        (CommitFailedException("Table has been updated by another process: tests.t"), True),
        (CommitFailedException("branch main has changed"), True),
        (RuntimeError(": org.apache.iceberg.exceptions.ValidationException: Cannot commit"), True),
        (ValueError("Cannot fast-forward: main is not an ancestor of cdc-run-1"), True),
        (
            _raised_from(
                CommitFailedException("Requirement failed: branch main was created concurrently"),
                RuntimeError("the write failed"),
            ),
            True,
        ),
        (
            _raised_from(
                RuntimeError("org.apache.iceberg.exceptions.CommitFailedException: stale"),
                ValueError("job aborted"),
                cause=False,
            ),
            True,
        ),
        (
            RuntimeError("org.apache.iceberg.exceptions.CommitStateUnknownException: ... Cause: CommitFailedException"),
            False,
        ),
        (RuntimeError("org.apache.iceberg.exceptions.CommitStateUnknownException: ?"), False),
        (RuntimeError("Cannot write incompatible data"), False),
        (ValueError("Cannot remove orphan files with an interval less than 24 hours"), False),
    ],
)
def test_lost_races_are_recognised_through_every_wrapper(error: BaseException, lost: bool) -> None:
    """Iceberg's refusals as each client reports them (texts as Spark 4 and pyiceberg give them);
    a commit whose state is unknown may have landed, so it is never a lost race."""
    assert lost_commit_race(error) is lost
