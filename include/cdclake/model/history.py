"""The SCD type 2 history of a table (``history`` in the table config; pure: no pyiceberg, no Spark).

``<namespace>.<table>__history`` holds one row per *version* of each source row: every event a run
accepts, in position order, not only the last one per key. A version is valid from its event's
source time and position to the next version's of the same key (open while it is the key's
newest). The columns are the table's source columns and metadata columns
(:data:`~cdclake.model.layout.METADATA_COLUMNS`: the event that made the version), then
:data:`HISTORY_COLUMNS`.

**Which events.** Those the current table's rules keep: above the truncate floor the run starts
from and the snapshot floor, and (the guard) superseding (:func:`~cdclake.model.position.supersedes`)
the key's stored row at the run's base snapshot and its delete tombstone, and above every version
of the key the history holds already (strictly: an event re-emitted at a version's position, after
a connector restart, is that version again). Unlike the table, the history keeps the events below the run's own
truncate: they were the source's state until the truncate, where their versions end. Several
events of a key at one position (a compressed transaction) make one version: the last one's
(Kafka offset).

**A new binlog history** (a run that accepts a source change): the versions kept are demoted as
the table's rows are (their metadata columns: file sequence -1, the demoted GTID sequence, Kafka
offset -1; their validity columns keep their positions) before the run adds its versions, so that
the guard compares the new history's events with none of them; the run's retry compares its
events with the versions its earlier try added.

**Deletes and truncates.** A delete closes the key's open version and adds a *deleted* version
(:data:`IS_DELETED_COLUMN` true, the key and NULL elsewhere), open until the key is inserted
again: the history itself then knows the key's newest position. A truncate ends every version
valid across its position (open, or closed above it by a later version when the truncate comes
late from another Kafka partition) at the truncate's time and position; it adds no row.

**Seed.** A history that holds no version yet while the table has rows (``history`` turned on for
an existing table, or its first try failed before any version) first gets one open version per row
of the table at the run's base snapshot (:data:`CHANGE_SEED`): valid from the row's own source time
and position (its metadata columns: the event that wrote it), current, not deleted. The run's
events then apply on top as any run's. A retry finds the seed (a version) there and seeds nothing.
The history knows nothing of a row before the seed's versions, which answer "as of" times from
each row's last change on, not from its creation.

**Repairs.** The lake's own deletes of a key end its open version and add a deleted version,
as a delete event does, marked :data:`CHANGE_REPAIR`: a complete full snapshot's delete of a row
below its position that it did not read (at the snapshot's position, from the source time of its
newest read), and a reconcile repair's delete of a row the source lacks (at the position of the
repair's tombstone, from the time of its consistent read). Each is committed to the history before
the table's commit that deletes the rows, which names it (``cdc.history-snapshot-id``), and takes
only open versions not deleted yet: a retry adds nothing. A column default the lake fills into
the table's rows below an ``ADD COLUMN`` is filled into the versions valid across it (open, or
ended above it by the run's own later events), in place, as into the run's events below it (no
version, ``_cdc_change`` unchanged).

**As of a time.** The source state at source time ``t`` is the versions with
``_cdc_valid_from_ts <= t AND (_cdc_valid_to_ts > t OR _cdc_valid_to_ts IS NULL) AND NOT
_cdc_is_deleted`` (:func:`cdclake.io.history.history_as_of`); by position the same with the
position columns. Versions of one key within one source second share ``ts_ms``'s second where the
connector reports seconds: the earlier ones are then valid for no time and only the position tells
them apart.
"""

from __future__ import annotations

from cdclake.model.position import ORDERINGS, position_parts

HISTORY_SUFFIX = "__history"
"""Suffix of a table's history (:func:`~cdclake.model.layout.side_table`)."""

_PART_TYPES = {64: "long", 32: "int"}

POSITION_TYPE = "struct<" + ",".join(f"{p.field}:{_PART_TYPES[p.bits]}" for p in position_parts(ORDERINGS[0])) + ">"
"""The Iceberg type of a position column: the fields of :class:`~cdclake.model.position.BinlogPosition`
in its order (``file_seq`` is the GTID sequence under ``ordering: gtid``), which Spark compares field
by field."""

(
    VALID_FROM_TS_COLUMN,
    VALID_FROM_POSITION_COLUMN,
    VALID_TO_TS_COLUMN,
    VALID_TO_POSITION_COLUMN,
    IS_CURRENT_COLUMN,
    IS_DELETED_COLUMN,
    RUN_ID_COLUMN,
    CHANGE_COLUMN,
) = (
    "_cdc_valid_from_ts",
    "_cdc_valid_from_position",
    "_cdc_valid_to_ts",
    "_cdc_valid_to_position",
    "_cdc_is_current",
    "_cdc_is_deleted",
    "_cdc_run_id",
    "_cdc_change",
)

CHANGE_EVENT = "event"
""":data:`CHANGE_COLUMN` of a version made by a source event."""

CHANGE_SEED = "seed"
""":data:`CHANGE_COLUMN` of a version the history was seeded with: a row the table held when its
history began ("Seed" above)."""

CHANGE_REPAIR = "repair"
""":data:`CHANGE_COLUMN` of a deleted version the lake's own repair added: a complete full snapshot
that did not read the key, or a reconcile repair that deleted the key the source lacks ("Repairs"
above)."""

HISTORY_COLUMNS: tuple[tuple[str, str, str], ...] = (
    (VALID_FROM_TS_COLUMN, "timestamptz", "source time (source.ts_ms) from which the version is valid"),
    (VALID_FROM_POSITION_COLUMN, POSITION_TYPE, "source position from which the version is valid"),
    (VALID_TO_TS_COLUMN, "timestamptz", "source time of the next version (or delete, truncate); null while open"),
    (VALID_TO_POSITION_COLUMN, POSITION_TYPE, "source position of the next version; null while open"),
    (IS_CURRENT_COLUMN, "boolean", "true for the key's open version"),
    (IS_DELETED_COLUMN, "boolean", "true for a delete: the key is absent from valid_from to valid_to"),
    (RUN_ID_COLUMN, "string", "the run that wrote the version (cdc.run-id of the table's commit)"),
    (
        CHANGE_COLUMN,
        "string",
        "what made the version: 'event' (a source event), 'seed' (a row the table held when its history began), "
        "'repair' (a key the lake deleted: a full snapshot did not read it, or reconcile repaired it)",
    ),
)
"""``(name, Iceberg type, doc)`` of the history's columns after the table's metadata columns."""
