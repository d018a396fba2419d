"""pyiceberg's own deletes from a merge-on-read CDC table (a repair's rows, a history's ended
versions) leave no warning in the task logs: the copy-on-write rewrite pyiceberg does instead is
what they want (:data:`cdclake.io.catalog._COPY_ON_WRITE_WARNING`); nor does an old metadata file
that is gone before pyiceberg deletes it (:data:`cdclake.io.catalog._METADATA_DELETE_WARNING`). On a
SQLite SQL catalog in a temporary folder (pyiceberg only)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

from cdclake.io.catalog import _COPY_ON_WRITE_WARNING, _METADATA_DELETE_WARNING, load_catalog
from cdclake.model.layout import TABLE_PROPERTIES
from cdclake.settings import Settings


def test_a_pyiceberg_delete_from_a_merge_on_read_table_warns_nothing_and_deletes(tmp_path):
    import pyarrow as pa
    from pyiceberg.expressions import EqualTo
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # before load_catalog: the test must see the warning if it is not filtered
        catalog = load_catalog(Settings.from_env({"CDCLAKE_STATE_DIR": str(tmp_path)}))
        catalog.create_namespace("ns")
        table = catalog.create_table(
            "ns.t", Schema(NestedField(1, "id", LongType(), required=False)), properties=dict(TABLE_PROPERTIES)
        )
        assert table.properties["write.delete.mode"] == "merge-on-read"
        table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
        table.delete(EqualTo("id", 2))

    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 3]
    assert [str(w.message) for w in caught if _COPY_ON_WRITE_WARNING in str(w.message)] == []


def test_an_old_metadata_file_already_deleted_is_not_a_warning(tmp_path, caplog):
    """What a REST catalog server does on every commit once the metadata log is full (it deletes the
    dropped file itself; pyiceberg's delete then finds nothing), made real here by deleting the file
    before pyiceberg's commit drops it from the log."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    catalog = load_catalog(Settings.from_env({"CDCLAKE_STATE_DIR": str(tmp_path)}))
    catalog.create_namespace("ns")
    properties = {**TABLE_PROPERTIES, "write.metadata.previous-versions-max": "1"}
    table = catalog.create_table(
        "ns.t", Schema(NestedField(1, "id", LongType(), required=False)), properties=properties
    )
    with table.transaction() as tx:
        tx.set_properties({"k": "1"})
    (oldest,) = [entry.metadata_file for entry in table.metadata.metadata_log]
    Path(oldest.removeprefix("file://")).unlink()  # gone before the next commit drops it from the log

    caplog.set_level(logging.INFO)
    with table.transaction() as tx:
        tx.set_properties({"k": "2"})

    assert oldest not in [entry.metadata_file for entry in table.metadata.metadata_log]
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith(_METADATA_DELETE_WARNING)] == []
