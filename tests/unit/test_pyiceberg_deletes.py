"""pyiceberg's own deletes from a merge-on-read CDC table (a repair's rows, a history's ended
versions) leave no warning in the task logs: the copy-on-write rewrite pyiceberg does instead is
what they want (:data:`cdclake.io.catalog._COPY_ON_WRITE_WARNING`). On a SQLite SQL catalog in a
temporary folder (pyiceberg only)."""

from __future__ import annotations

import warnings

from cdclake.io.catalog import _COPY_ON_WRITE_WARNING, load_catalog
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
