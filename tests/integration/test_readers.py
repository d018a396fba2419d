"""The reader matrix: tables the pipeline wrote (inserts, updates, deletes, a primary-key change and
an added column, over three runs), at format v2 (position-delete files) and v3 (deletion vectors),
in the REST catalog, read by each engine: Spark SQL, pyiceberg, DuckDB (its ``iceberg``
extension, through the REST catalog) and Trino (its Iceberg connector on the REST catalog, a server
of its own: :mod:`cdclake_dev.trino`). Each reads the rows the events leave, or the test says what
it reads instead and names the upstream issue. docs/guide.md, "Which engines read the tables",
is this matrix."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import ensure_topic
from cdclake.model.config import TableConfig
from cdclake_dev.trino import TrinoServer
from tests.conftest import make_table
from tests.integration.conftest import REST_REGION, RestLake
from tests.integration.test_apply import produce_raw, run_once

pytestmark = pytest.mark.integration

COLUMNS = {"id": "int", "v": "string"}
WIDER = {**COLUMNS, "w": "long"}
"""The source table after ``ALTER TABLE ... ADD COLUMN w BIGINT`` (the config edited to match)."""

FINAL_ROWS = {(1, "a3", 10), (5, "e", 50), (30, "c", None)}
"""``(id, v, w)`` after the three runs of :func:`write_history`."""


def ev(op: str, image: dict, pos: int) -> bytes:
    """A Debezium envelope (``value_format: json``) of ``op`` on ``image`` at binlog position ``pos``."""
    source = {"file": "mysql-bin.000003", "pos": pos, "row": 0, "snapshot": "false", "server_id": 1, "ts_ms": pos}
    payload = {
        "before": image if op in ("u", "d") else None,
        "after": image if op in ("c", "u") else None,
        "op": op,
        "ts_ms": pos,
        "source": source,
    }
    return json.dumps(payload).encode()


def send(kafka, cfg: TableConfig, events: list[tuple[str, dict, int]]) -> None:
    produce_raw(
        kafka, cfg.topic, [(json.dumps({"id": image["id"]}).encode(), ev(op, image, pos)) for op, image, pos in events]
    )


def write_history(spark, kafka, settings, cfg: TableConfig) -> TableConfig:
    """Three runs of the table ``cfg`` (``value_format: json``, :data:`COLUMNS`): inserts; updates,
    a delete and a primary-key change (Debezium's delete of the old key and create of the new one);
    then, the source table having gained column ``w`` (the config's ``columns`` edited, as
    operators do for ``json`` tables), an insert, an update and a delete. Returns the config of
    the last run; the table then holds :data:`FINAL_ROWS`."""
    ensure_topic(kafka, cfg.topic, 1)
    send(kafka, cfg, [("c", {"id": i, "v": v}, 100 + i) for i, v in ((1, "a"), (2, "b"), (3, "c"), (4, "d"))])
    assert run_once(spark, settings, cfg, "run-1")[1].status == "committed"
    send(
        kafka,
        cfg,
        [
            ("u", {"id": 1, "v": "a2"}, 200),
            ("d", {"id": 2, "v": "b"}, 210),
            ("d", {"id": 3, "v": "c"}, 220),  # UPDATE ... SET id = 30 WHERE id = 3: the old key
            ("c", {"id": 30, "v": "c"}, 221),  # and the new one
            ("u", {"id": 4, "v": "d2"}, 230),
        ],
    )
    assert run_once(spark, settings, cfg, "run-2")[1].status == "committed"
    wider = cfg.model_copy(update={"columns": WIDER})
    send(
        kafka,
        wider,
        [
            ("c", {"id": 5, "v": "e", "w": 50}, 300),
            ("u", {"id": 1, "v": "a3", "w": 10}, 310),
            ("d", {"id": 4, "v": "d2"}, 320),
        ],
    )
    assert run_once(spark, settings, wider, "run-3")[1].status == "committed"
    return wider


@dataclass(frozen=True)
class Written:
    """A table :func:`write_history` wrote in the REST catalog."""

    lake: RestLake
    cfg: TableConfig
    format_version: int

    @property
    def spark_name(self) -> str:
        return f"{self.lake.catalog_name}.{self.cfg.identifier}"


@pytest.fixture(scope="module", params=[2, 3], ids=["v2", "v3"])
def written(request: pytest.FixtureRequest, spark, kafka, rest_lake: RestLake) -> Written:
    cfg = make_table(value_format="json", columns=COLUMNS, format_version=request.param)
    cfg = write_history(spark, kafka, rest_lake.settings, cfg)
    return Written(rest_lake, cfg, request.param)


def spark_rows(spark, name: str) -> set[tuple]:
    return {tuple(r) for r in spark.sql(f"SELECT id, v, w FROM {name}").collect()}


def pyiceberg_rows(lake: RestLake, identifier: str) -> set[tuple]:
    arrow = load_catalog(lake.settings).load_table(identifier).scan(selected_fields=("id", "v", "w")).to_arrow()
    return {(r["id"], r["v"], r["w"]) for r in arrow.to_pylist()}


def duckdb_extensions() -> Path:
    """The folder DuckDB loads its extensions from: the ``duckdb-ext-*`` packages' (requirements.txt),
    ``<site-packages>/duckdb_ext/extensions`` (``v<duckdb version>/<platform>/<name>.duckdb_extension``
    below it)."""
    spec = importlib.util.find_spec("duckdb_ext")
    assert spec is not None and spec.submodule_search_locations, "the duckdb-ext-* packages are not installed"
    return Path(next(iter(spec.submodule_search_locations))) / "extensions"


def duckdb_connection(lake: RestLake):
    """A DuckDB connection with the REST catalog attached as ``lake`` (its S3 warehouse through
    ``httpfs``, the keys as a secret), the extensions loaded from :func:`duckdb_extensions` and
    never downloaded."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET extension_directory = ?", [str(duckdb_extensions())])
    con.execute("SET autoinstall_known_extensions = false")
    for extension in ("httpfs", "avro", "iceberg"):
        con.execute(f"LOAD {extension}")
    endpoint = urlsplit(lake.s3_endpoint)
    con.execute(
        "CREATE SECRET lake_s3 (TYPE s3, KEY_ID ?, SECRET ?, ENDPOINT ?, URL_STYLE 'path', USE_SSL false, REGION ?)",
        [lake.access_key, lake.secret_key, endpoint.netloc, REST_REGION],
    )
    con.execute(
        f"ATTACH '{lake.settings.warehouse}' AS lake (TYPE iceberg, ENDPOINT '{lake.rest_uri}', AUTHORIZATION_TYPE 'none')"
    )
    return con


def duckdb_rows(lake: RestLake, identifier: str) -> set[tuple]:
    namespace, table = identifier.split(".")
    con = duckdb_connection(lake)
    try:
        return {tuple(r) for r in con.execute(f'SELECT id, v, w FROM lake."{namespace}"."{table}"').fetchall()}
    finally:
        con.close()


@pytest.fixture(scope="module")
def trino(tmp_path_factory: pytest.TempPathFactory, rest_lake: RestLake) -> Iterator[TrinoServer]:
    """Trino 476 with the catalog ``lake`` on :func:`rest_lake`'s REST catalog and S3 warehouse,
    started by the first test that asks (on Java 24+: ``TRINO_JAVA_HOME``, else the search of
    :func:`cdclake_dev.system.java_at_least`), stopped after this module."""
    from cdclake_dev.process import free_port

    server = TrinoServer(
        tmp_path_factory.mktemp("trino"),
        free_port(),
        rest_uri=rest_lake.rest_uri,
        s3_endpoint=rest_lake.s3_endpoint,
        s3_access_key=rest_lake.access_key,
        s3_secret_key=rest_lake.secret_key,
        region=REST_REGION,
    )
    try:
        server.start()
        yield server
    finally:
        server.stop()


def trino_rows(
    server: TrinoServer, identifier: str, columns: str = "id, v, w", snapshot: int | None = None
) -> set[tuple]:
    """The rows of ``columns`` Trino reads from table ``identifier`` (at ``snapshot``: time travel)."""
    namespace, table = identifier.split(".")
    at = "" if snapshot is None else f" FOR VERSION AS OF {snapshot}"
    return set(server.query(f'SELECT {columns} FROM "{namespace}"."{table}"{at}'))


def test_spark_sql_reads_the_rows_the_events_leave(spark, written: Written):
    assert spark_rows(spark, written.spark_name) == FINAL_ROWS


def test_pyiceberg_reads_what_spark_reads(spark, written: Written):
    assert pyiceberg_rows(written.lake, written.cfg.identifier) == spark_rows(spark, written.spark_name) == FINAL_ROWS


def test_duckdb_reads_what_spark_reads(spark, written: Written):
    assert duckdb_rows(written.lake, written.cfg.identifier) == spark_rows(spark, written.spark_name) == FINAL_ROWS


TRINO_V3_ERROR = ("ICEBERG_BAD_DATA", "Unexpected PUFFIN file format")
"""How Trino 476 fails a read of a v3 table with deletion vectors (error name, message): its Iceberg
connector maps a delete file's format to a reader of its own (ORC, Parquet, Avro) and has none of
Puffin (``IcebergFileFormat.fromIceberg``)."""


def test_trino_reads_what_spark_reads(spark, written: Written, trino: TrinoServer):
    """Trino 476 reads the v2 table. It cannot read the v3 table: the query fails on the deletion
    vectors (:data:`TRINO_V3_ERROR`); it reads the same table as Spark does at the snapshot of the
    first run (inserts only: no delete file yet)."""
    expected = spark_rows(spark, written.spark_name)
    assert expected == FINAL_ROWS
    if written.format_version == 2:
        assert trino_rows(trino, written.cfg.identifier) == expected
        return
    from trino.exceptions import TrinoQueryError

    with pytest.raises(TrinoQueryError) as raised:
        trino_rows(trino, written.cfg.identifier)
    assert (raised.value.error_name, raised.value.message) == TRINO_V3_ERROR
    first = spark.sql(
        f"SELECT snapshot_id FROM {written.spark_name}.snapshots WHERE summary['cdc.run-id'] = 'run-1'"
    ).first()
    assert first is not None
    at_first = trino_rows(trino, written.cfg.identifier, "id, v", first.snapshot_id)
    spark_first = spark.sql(f"SELECT id, v FROM {written.spark_name} VERSION AS OF {first.snapshot_id}").collect()
    assert at_first == {tuple(r) for r in spark_first} == {(1, "a"), (2, "b"), (3, "c"), (4, "d")}


def test_the_deletes_are_position_deletes_on_v2_and_deletion_vectors_on_v3(spark, written: Written):
    """What each reader above had to apply: on v2 Parquet position-delete files, on v3 Puffin
    deletion vectors (content 1: position deletes; never equality deletes, content 2)."""
    deletes = spark.sql(f"SELECT file_format, content FROM {written.spark_name}.delete_files").collect()
    assert deletes, "the runs' updates and deletes left no delete file"
    expected = "PUFFIN" if written.format_version == 3 else "PARQUET"
    assert {(r.file_format, r.content) for r in deletes} == {(expected, 1)}
    table = load_catalog(written.lake.settings).load_table(written.cfg.identifier)
    assert table.format_version == written.format_version
