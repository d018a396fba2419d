"""Refs (tags, branches) of several tables moved in one catalog commit (:func:`move_refs`): all of
them or none.

Each table's change asserts the ref's current snapshot (the Iceberg REST spec's requirement
``assert-ref-snapshot-id``) and sets it (``set-snapshot-ref``), with table properties set in the
same change. Two catalogs can commit several tables at once:

* The REST catalog: ``POST /v1/{prefix}/transactions/commit`` with a ``CommitTransactionRequest``
  (``table-changes``, each an ``UpdateTableRequest``; Iceberg REST spec, "commitTransaction"),
  sent on the pyiceberg catalog's own HTTP session (its credentials and token refresh). The
  server checks every requirement before it commits any table; how atomically it then commits
  them is the server's (Iceberg's reference ``RESTCatalogServer`` commits the tables one after the
  other once all requirements hold).
* The SQL catalog (pyiceberg's ``SqlCatalog``: SQLite, PostgreSQL; the same ``iceberg_tables``
  rows as Iceberg's ``JdbcCatalog``): each table's new metadata file is written by pyiceberg's own
  update machinery (requirements checked against the table as loaded), then every table's
  ``metadata_location`` row moves in one database transaction, each ``WHERE metadata_location``
  is still the one loaded; a row not updated (another commit landed in between) rolls back all.
  The metadata files of a rolled-back commit are left unreferenced (Iceberg's orphan-file
  removal takes them).

:func:`commit_refs` moves the refs of one table in a single-table commit, on any catalog: a group
published by pointer (:mod:`cdclake.pipeline.groups`) uses it where the catalog has no multi-table
commit.

pyiceberg 0.12 has no multi-table commit of its own; the SQL side uses its catalog's staging
(``_update_and_stage_table``, ``_write_metadata``) and table model (``IcebergTables``) as its
``commit_table`` does, so a pyiceberg upgrade must keep them (``requirements.txt`` pins it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdclake.errors import ConfigError, MultiTableCommitError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import CommitTableRequest, Table

log = logging.getLogger(__name__)

TRANSACTIONS_COMMIT = "transactions/commit"
"""The REST catalog's multi-table commit endpoint, under ``/v1/{prefix}/``."""


@dataclass(frozen=True)
class RefUpdate:
    """One ref of a table moved by a multi-table commit.

    Attributes:
        ref: the tag or branch.
        expected: its snapshot id as the caller read it; ``None``: it must not exist.
        snapshot_id: where it moves (a branch is set, not fast-forwarded: the caller chose a
            snapshot of its lineage).
        branch: a branch (``main`` too: its current snapshot moves); else a tag.
    """

    ref: str
    expected: int | None
    snapshot_id: int
    branch: bool = False


@dataclass(frozen=True)
class RefMove:
    """One table's part of a multi-table commit.

    Attributes:
        identifier: ``namespace.table``.
        refs: the refs to move.
        properties: table properties set in the same commit.
        removed: refs removed in the same commit (no requirement: one already gone is no error of
            the commit's).
    """

    identifier: str
    refs: tuple[RefUpdate, ...]
    properties: Mapping[str, str] = field(default_factory=dict)
    removed: tuple[str, ...] = ()


@dataclass(frozen=True)
class StagedTable:
    """A table's new metadata file, written and not yet the table's (SQL catalog).

    Attributes:
        identifier: ``namespace.table``.
        old_location: the metadata file the table pointed at when loaded.
        new_location: the new metadata file.
    """

    identifier: str
    old_location: str
    new_location: str


def move_refs(catalog: Catalog, moves: Sequence[RefMove]) -> None:
    """Move the refs of ``moves`` in one catalog commit: every one, or none.

    Raises:
        MultiTableCommitError: a ref is not at its ``expected`` snapshot, a table changed between
            its load and the commit, or the REST catalog failed (the message says when the outcome
            is unknown); nothing moved otherwise.
        ConfigError: the catalog is neither a REST nor a SQL catalog (no multi-table commit), or
            its REST server does not have the endpoint.
        NoSuchTableError: a table does not exist (pyiceberg's).
    """
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.catalog.sql import SqlCatalog

    if not moves:
        return
    if isinstance(catalog, RestCatalog):
        _commit_rest(catalog, [_request(m) for m in moves])
    elif isinstance(catalog, SqlCatalog):
        swap_sql(catalog, stage_sql(catalog, moves))
    else:
        raise ConfigError(
            f"catalog {catalog.name!r} ({type(catalog).__name__}) has no multi-table commit: a table group needs "
            "the REST catalog or the JDBC (SQL) catalog, or to be published by pointer: CDCLAKE_GROUP_COMMIT=pointer"
        )
    log.info("moved %s", ", ".join(f"{m.identifier} {r.ref} -> {r.snapshot_id}" for m in moves for r in m.refs))


def _request(move: RefMove) -> CommitTableRequest:
    """The table's ``UpdateTableRequest``: assert each ref, set it, set the properties (the REST
    spec's JSON, validated by pyiceberg's models)."""
    from pyiceberg.table import CommitTableRequest

    namespace, name = move.identifier.rsplit(".", 1)
    updates: list[dict[str, object]] = [
        {
            "action": "set-snapshot-ref",
            "ref-name": r.ref,
            "type": "branch" if r.branch else "tag",
            "snapshot-id": r.snapshot_id,
        }
        for r in move.refs
    ]
    if move.properties:
        updates.append({"action": "set-properties", "updates": dict(move.properties)})
    updates.extend({"action": "remove-snapshot-ref", "ref-name": ref} for ref in move.removed)
    return CommitTableRequest.model_validate(
        {
            "identifier": {"namespace": namespace.split("."), "name": name},
            "requirements": [
                {"type": "assert-ref-snapshot-id", "ref": r.ref, "snapshot-id": r.expected} for r in move.refs
            ],
            "updates": updates,
        }
    )


def commit_refs(catalog: Catalog, move: RefMove, table: Table | None = None) -> None:
    """Move the refs of one table in one single-table commit, on any catalog (pyiceberg's
    ``commit_table``, with the requirements and updates of a :class:`RefMove`). ``table``: the
    table as the caller loaded it (loaded here when ``None``); the requirements are checked against
    the catalog's current metadata, not against it.

    Raises:
        MultiTableCommitError: a ref is not at its ``expected`` snapshot, or the table changed
            between its load and the commit; nothing moved.
        NoSuchTableError: the table does not exist (pyiceberg's).
    """
    from pyiceberg.exceptions import CommitFailedException

    request = _request(move)
    try:
        catalog.commit_table(
            table if table is not None else catalog.load_table(move.identifier),
            tuple(request.requirements),
            tuple(request.updates),
        )
    except CommitFailedException as e:
        raise MultiTableCommitError(f"table {move.identifier}: refused, nothing moved: {e}") from e
    log.info("moved %s", ", ".join(f"{move.identifier} {r.ref} -> {r.snapshot_id}" for r in move.refs) or "nothing")


def _commit_rest(catalog: RestCatalog, changes: Sequence[CommitTableRequest]) -> None:
    """``POST /v1/{prefix}/transactions/commit`` on the catalog's session (HTTP 204 on success)."""
    body = '{"table-changes": [' + ", ".join(c.model_dump_json() for c in changes) + "]}"
    url = catalog.url(TRANSACTIONS_COMMIT, prefixed=True)
    response = catalog._session.post(url, data=body.encode(), headers={"Content-Type": "application/json"})
    if response.ok:
        return
    where = f"REST catalog {catalog.name!r}: POST {url}"
    if response.status_code in (404, 405, 501) and "NoSuchTable" not in response.text:
        raise ConfigError(
            f"{where}: HTTP {response.status_code}: the server has no multi-table commit; publish table groups by "
            'pointer instead: CDCLAKE_GROUP_COMMIT=pointer (docs/architecture.md, "Table groups")'
        )
    if response.status_code == 409 or response.status_code < 500:
        raise MultiTableCommitError(f"{where}: refused, nothing moved: HTTP {response.status_code} {response.text}")
    raise MultiTableCommitError(
        f"{where}: HTTP {response.status_code} {response.text}: the outcome is unknown (the tags may have moved); "
        "the next publish reads them again"
    )


def stage_sql(catalog: SqlCatalog, moves: Sequence[RefMove]) -> list[StagedTable]:
    """Write each table's new metadata file (requirements checked against the table as loaded);
    no table points at them yet (:func:`swap_sql`).

    Raises:
        MultiTableCommitError: a ref is not at its ``expected`` snapshot.
    """
    from pyiceberg.exceptions import CommitFailedException

    staged = []
    for move in moves:
        table = catalog.load_table(move.identifier)
        request = _request(move)
        try:
            new = catalog._update_and_stage_table(table, table.name(), request.requirements, request.updates)
        except CommitFailedException as e:
            raise MultiTableCommitError(f"table {move.identifier}: {e}; nothing moved") from e
        catalog._write_metadata(new.metadata, new.io, new.metadata_location)
        staged.append(StagedTable(move.identifier, table.metadata_location, new.metadata_location))
    return staged


def swap_sql(catalog: SqlCatalog, staged: Sequence[StagedTable]) -> None:
    """Point every table at its staged metadata file in one database transaction, each only if it
    still points at the file it was staged from; otherwise roll back all.

    Raises:
        MultiTableCommitError: a table's metadata pointer moved since it was staged; nothing moved.
        ConfigError: a database driver that does not report updated rows.
    """
    from pyiceberg.catalog.sql import IcebergTables
    from sqlalchemy import update
    from sqlalchemy.orm import Session

    if not catalog.engine.dialect.supports_sane_rowcount:
        raise ConfigError(f"catalog {catalog.name!r}: its database driver does not report updated rows")
    with Session(catalog.engine) as session, session.begin():
        for s in staged:
            namespace, name = s.identifier.rsplit(".", 1)
            result = session.execute(
                update(IcebergTables)
                .where(
                    IcebergTables.catalog_name == catalog.name,
                    IcebergTables.table_namespace == namespace,
                    IcebergTables.table_name == name,
                    IcebergTables.metadata_location == s.old_location,
                )
                .values(metadata_location=s.new_location, previous_metadata_location=s.old_location)
            )
            if result.rowcount != 1:  # type: ignore[attr-defined]
                # leaving the block with the error rolls back the rows updated before
                raise MultiTableCommitError(f"table {s.identifier} was committed to since it was read; nothing moved")
