"""Upgrading a CDC table's Iceberg format version in place (``cdclake upgrade``; docs/operations.md,
"Upgrading a table to format v3"). The rules are :mod:`cdclake.model.format_version`'s.

The upgrade is one metadata-only commit to the table: no data or delete file is rewritten, and the
committed offsets and every snapshot stay. Run it between two runs of the table (its DAG paused):
a run that wrote its files before the upgrade and commits after it is not tested. The deletes
Spark writes afterwards are deletion vectors; the position-delete files written before stay until compaction folds them (Spark folds a
data file's older position deletes into the deletion vector it writes for that file). The side
tables stay at :data:`~cdclake.model.format_version.SIDE_TABLE_FORMAT_VERSION`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdclake.errors import FormatVersionError
from cdclake.io.catalog import load_table_or_none, upgrade_format_version
from cdclake.model.changes import CHANGES_SUFFIX
from cdclake.model.config import TableConfig
from cdclake.model.format_version import upgrade_needed
from cdclake.model.history import HISTORY_SUFFIX
from cdclake.model.layout import QUARANTINE_SUFFIX, TOMBSTONES_SUFFIX, side_table

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

log = logging.getLogger(__name__)

SIDE_TABLE_SUFFIXES = (TOMBSTONES_SUFFIX, QUARANTINE_SUFFIX, CHANGES_SUFFIX, HISTORY_SUFFIX)
"""The side tables a CDC table may have."""


@dataclass(frozen=True)
class UpgradeResult:
    """What :func:`upgrade_table` did.

    Attributes:
        identifier: the table's ``namespace.table``.
        before: its format version before.
        after: its format version now (``before`` when nothing was to do).
        side_tables: ``(identifier, format version)`` of each side table that exists, left as it was.
    """

    identifier: str
    before: int
    after: int
    side_tables: tuple[tuple[str, int], ...]

    @property
    def upgraded(self) -> bool:
        return self.after != self.before

    def message(self) -> str:
        """One line per fact: the table's versions, then each side table's."""
        head = (
            f"table {self.identifier}: format v{self.before} -> v{self.after}"
            if self.upgraded
            else f"table {self.identifier}: format v{self.after} already; nothing changed"
        )
        sides = [f"  side table {name}: format v{version}, unchanged" for name, version in self.side_tables]
        return "\n".join([head, *sides])


def upgrade_table(catalog: Catalog, cfg: TableConfig, format_version: int | None = None) -> UpgradeResult:
    """Upgrade ``cfg``'s table in place to ``format_version`` (default: the config's
    ``format_version``); a table at it already is left alone.

    Args:
        catalog: the pyiceberg catalog of the table (:func:`~cdclake.io.catalog.load_catalog`).
        cfg: the table.
        format_version: the version to upgrade to, 2 or 3.

    Returns:
        The versions before and after, and the side tables' (unchanged).

    Raises:
        FormatVersionError: the table does not exist; ``format_version`` is below the table's (no
            downgrade) or not 2 or 3; the catalog cannot hold it (v3 outside the REST catalog).
            Nothing was changed.
        pyiceberg.exceptions.CommitFailedException: the table was dropped and created again meanwhile.
    """
    target = cfg.format_version if format_version is None else format_version
    table = load_table_or_none(catalog, cfg.identifier)
    if table is None:
        raise FormatVersionError(
            f"table {cfg.identifier} does not exist: nothing to upgrade (its first run creates it at its config's "
            f"format_version, now {cfg.format_version})"
        )
    before = table.format_version
    if upgrade_needed(cfg.identifier, before, target):
        table = upgrade_format_version(catalog, table, target)
    sides = []
    for suffix in SIDE_TABLE_SUFFIXES:
        side = load_table_or_none(catalog, side_table(cfg.identifier, suffix))
        if side is not None:
            sides.append((side_table(cfg.identifier, suffix), side.format_version))
    result = UpgradeResult(cfg.identifier, before, table.format_version, tuple(sides))
    log.info("%s", result.message())
    return result
