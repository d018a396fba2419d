"""Iceberg's refusal of a commit because another commit moved the table, however Spark, Spark
Connect or pyiceberg wrap it (:func:`cdclake.errors.lost_commit_race`): the apply turns it into
ConcurrentRunError, maintenance retries it."""

from __future__ import annotations

from pyiceberg.exceptions import CommitFailedException

from cdclake.errors import lost_commit_race


def test_lost_races_are_recognised_through_every_wrapper():
    """Iceberg's refusals as each client reports them (texts as Spark 4 and pyiceberg give them)."""
    py4j = (
        "An error occurred while calling o412.sql.\n: org.apache.iceberg.exceptions.CommitFailedException: "
        "Table metadata refresh is required\n\tat org.apache.iceberg.jdbc.JdbcTableOperations.doCommit"
    )
    assert lost_commit_race(RuntimeError(py4j))
    assert lost_commit_race(CommitFailedException("Table has been updated by another process: tests.t"))
    assert lost_commit_race(ValueError("Cannot fast-forward: main is not an ancestor of cdc-run-1"))
    try:
        try:
            raise CommitFailedException("Requirement failed: branch main was created concurrently")
        except CommitFailedException as e:
            raise RuntimeError("the write failed") from e
    except RuntimeError as wrapped:
        assert lost_commit_race(wrapped)
    unknown = "org.apache.iceberg.exceptions.CommitStateUnknownException: ... Cause: CommitFailedException"
    assert not lost_commit_race(RuntimeError(unknown))
    assert not lost_commit_race(RuntimeError("Cannot write incompatible data"))


def test_lost_commit_race_recognizes_the_wrapped_iceberg_errors():
    assert lost_commit_race(CommitFailedException("branch main has changed"))
    assert lost_commit_race(RuntimeError(": org.apache.iceberg.exceptions.ValidationException: Cannot commit"))
    try:
        try:
            raise RuntimeError("org.apache.iceberg.exceptions.CommitFailedException: stale")
        except RuntimeError as inner:
            raise ValueError("job aborted") from inner
    except ValueError as outer:
        assert lost_commit_race(outer)
    assert not lost_commit_race(RuntimeError("org.apache.iceberg.exceptions.CommitStateUnknownException: ?"))
    assert not lost_commit_race(ValueError("Cannot remove orphan files with an interval less than 24 hours"))
