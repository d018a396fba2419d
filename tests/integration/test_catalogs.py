"""The apply on each production catalog, compared with the embedded SQLite one: the JDBC catalog
in PostgreSQL and Iceberg's REST catalog server (its own JDBC catalog in PostgreSQL), both with
their warehouse on S3 (s3proxy). Each catalog is what a task gets from the Airflow connection
``iceberg_catalog`` (:meth:`Settings.with_catalog`), registered on the tests' one SparkSession
with :func:`cdclake.spark.session.set_catalog`, as the apply task does on its session. Real Kafka
events; a fresh topic and table per test and catalog."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import ensure_topic
from cdclake.io.refs import committed_offsets
from cdclake.model.layout import (
    QUARANTINE_SUFFIX,
    RUN_BRANCH_PREFIX,
    TOMBSTONES_SUFFIX,
    SummaryKeys,
    column_encodings,
    column_encodings_property,
    side_table,
)
from cdclake.settings import Settings
from cdclake.spark import commit as commit_module
from cdclake.spark.session import set_catalog
from cdclake_dev.parts.postgres import Postgres
from cdclake_dev.parts.rest_catalog import RestCatalogServer
from cdclake_dev.parts.s3 import S3Proxy
from cdclake_dev.process import free_port
from tests.conftest import apply_offsets, make_table, plan_offsets
from tests.integration.test_apply import produce_raw
from tests.integration.test_contract import ev, key
from tests.processes import group_alive, pid_in
from tests.unit.test_multi_commit import check_group_published_by_pointer, check_tags_move_on_every_table_or_none

pytestmark = pytest.mark.integration

ACCESS_KEY = "cdclake-catalogs"
BUCKET = "lake"
REGION = "us-east-1"
COLUMNS = {"id": "int", "v": "string"}


@dataclass
class Parts:
    postgres: Postgres
    s3: S3Proxy
    rest: RestCatalogServer
    secret_key: str
    jdbc_user: str
    jdbc_password: str
    rest_password: str


@dataclass
class Lake:
    """One catalog under test: its settings; the database that holds its rows (SQLAlchemy URL) and
    their ``catalog_name`` there; on S3, the folder s3proxy keeps its bucket in."""

    kind: str
    settings: Settings
    catalog_db: str
    catalog_db_name: str
    bucket_dir: Path | None

    @property
    def catalog_name(self) -> str:
        return self.settings.catalog_name


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Parts]:
    """PostgreSQL (databases ``iceberg``, the JDBC catalog, and ``rest_catalog``, the REST
    server's backend), s3proxy with bucket ``lake`` and the REST catalog server (warehouse
    ``s3://lake/rest/``); all stopped at the end and their process groups checked gone."""
    # PostgreSQL runs as the postgres user when root: a folder it can reach (pytest's is 0700)
    pg_dir = Path(tempfile.mkdtemp(prefix="cdclake-test-catalogs-pg-"))
    work = tmp_path_factory.mktemp("catalogs")
    secret_key = uuid.uuid4().hex
    postgres = Postgres(pg_dir, free_port())
    s3 = S3Proxy(work / "s3", free_port(), ACCESS_KEY, secret_key)
    rest: RestCatalogServer | None = None
    pgids: list[int] = []
    try:
        postgres.start()
        pgids.append(pid_in(postgres.data_dir / "postmaster.pid"))
        jdbc_password = uuid.uuid4().hex
        postgres.ensure_database("iceberg", "iceberg", jdbc_password)
        rest_password = uuid.uuid4().hex
        postgres.ensure_database("rest_catalog", "rest_catalog", rest_password)
        s3.start()
        pgids.append(pid_in(s3.dir / "s3proxy.pid"))
        s3.ensure_bucket(BUCKET)
        rest = RestCatalogServer(
            work / "rest",
            free_port(),
            jdbc_uri=postgres.jdbc_uri("rest_catalog"),
            jdbc_user="rest_catalog",
            jdbc_password=rest_password,
            warehouse=f"s3://{BUCKET}/rest/",
            s3_endpoint=s3.endpoint,
            s3_access_key=ACCESS_KEY,
            s3_secret_key=secret_key,
            region=REGION,
        )
        rest.start()
        pgids.append(pid_in(rest.dir / "server.pid"))
        yield Parts(postgres, s3, rest, secret_key, "iceberg", jdbc_password, rest_password)
    finally:
        if rest is not None:
            rest.stop()
        s3.stop()
        postgres.stop()
        shutil.rmtree(pg_dir, ignore_errors=True)
    assert not [g for g in pgids if group_alive(g)], "processes of the parts outlived stop()"


def _s3_properties(parts: Parts) -> dict[str, object]:
    return {
        "s3.endpoint": parts.s3.endpoint,
        "s3.access-key-id": ACCESS_KEY,
        "s3.secret-access-key": parts.secret_key,
        "s3.path-style-access": True,
        "client.region": REGION,
    }


@pytest.fixture(scope="module", params=["sqlite", "jdbc", "rest"])
def lake(request: pytest.FixtureRequest, stack_settings: Settings, spark) -> Iterator[Lake]:
    """The suite's SQLite catalog (the reference), then the PostgreSQL JDBC catalog and the REST
    catalog, each registered on the shared SparkSession the way an apply task registers its own."""
    if request.param == "sqlite":
        yield Lake("sqlite", stack_settings, stack_settings.catalog_uri, stack_settings.catalog_name, None)
        return
    parts: Parts = request.getfixturevalue("parts")
    if request.param == "jdbc":
        settings = stack_settings.model_copy(update={"catalog_name": "pg_lake"}).with_catalog(
            {
                "type": "jdbc",
                "uri": f"postgresql+psycopg2://127.0.0.1:{parts.postgres.port}/iceberg",
                "jdbc.user": parts.jdbc_user,
                "jdbc.password": parts.jdbc_password,
                "warehouse": f"s3://{BUCKET}/pg/",
                **_s3_properties(parts),
            }
        )
        catalog_db = settings.pyiceberg_catalog_properties()["uri"]
        catalog_db_name = settings.catalog_name
    else:
        settings = stack_settings.model_copy(update={"catalog_name": "rest_lake"}).with_catalog(
            {"type": "rest", "uri": parts.rest.uri, "warehouse": parts.rest.warehouse, **_s3_properties(parts)}
        )
        # the REST server's own JdbcCatalog (RestCatalogServer's default backend name)
        catalog_db = parts.postgres.url("rest_catalog", "rest_catalog", parts.rest_password)
        catalog_db_name = "rest_backend"
    set_catalog(spark, settings)
    yield Lake(request.param, settings, catalog_db, catalog_db_name, parts.s3.data_dir / BUCKET)
    # its settings (credentials included) leave the shared session with the catalog's servers
    for name in settings.spark_catalog_conf():
        spark.conf.unset(name)


# --- helpers ------------------------------------------------------------------------------------------


def new_table(kafka, **overrides):
    cfg = make_table(value_format="json", columns=COLUMNS, **overrides)
    ensure_topic(kafka, cfg.topic, 1)
    return cfg


def run(spark, lake: Lake, cfg, run_id: str):
    """Plan and apply the table's next range, as the plan and apply tasks do; ``(range, result)``."""
    planned = plan_offsets(lake.settings, cfg, run_id)
    return planned.range, apply_offsets(spark, lake.settings, cfg, planned.range, run_id)


def iceberg_rows(lake: Lake, identifier: str, columns: tuple[str, ...] = ("id", "v")) -> set[tuple]:
    arrow = load_catalog(lake.settings).load_table(identifier).scan().to_arrow()
    return {tuple(r[c] for c in columns) for r in arrow.to_pylist()}


def spark_rows(spark, lake: Lake, identifier: str, columns: tuple[str, ...] = ("id", "v")) -> set[tuple]:
    return {tuple(r) for r in spark.table(f"{lake.catalog_name}.{identifier}").select(*columns).collect()}


def catalog_rows(lake: Lake, identifier: str) -> list[tuple[str, str]]:
    """``(catalog_name, metadata_location)`` of the table's rows in the catalog's database."""
    import sqlalchemy

    namespace, name = identifier.rsplit(".", 1)
    engine = sqlalchemy.create_engine(lake.catalog_db)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sqlalchemy.text(
                    "select catalog_name, metadata_location from iceberg_tables "
                    "where table_namespace = :namespace and table_name = :name"
                ),
                {"namespace": namespace, "name": name},
            ).all()
    finally:
        engine.dispose()
    return [tuple(r) for r in rows]


def _table_files(table) -> set[str]:
    """Every file of ``table``'s metadata tree: metadata JSON, manifest lists, manifests, data and
    delete files of every snapshot."""
    io = table.io
    files = {table.metadata_location}
    for snapshot in table.snapshots():
        files.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            files.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                files.add(entry.data_file.file_path)
    return files


def _local_path(uri: str) -> str:
    """The path of a ``file:`` URI (Java writes ``file:/x``, Python ``file:///x``)."""
    return "/" + uri.removeprefix("file:").lstrip("/")


def assert_files_in_warehouse(lake: Lake, identifier: str, stack_settings: Settings) -> None:
    """The table's files are where the catalog's warehouse is: on S3, objects of s3proxy's bucket
    folder (and nothing of the table on the local stack's folder); else under the local
    warehouse."""
    table = load_catalog(lake.settings).load_table(identifier)
    files = _table_files(table)
    if lake.bucket_dir is None:
        warehouse = Path(_local_path(stack_settings.warehouse))
        for f in files:
            assert f.startswith("file:") and Path(_local_path(f)).is_relative_to(warehouse), f
            assert Path(_local_path(f)).is_file(), f
        return
    prefix = f"s3://{BUCKET}/"
    assert table.location().startswith(lake.settings.warehouse.rstrip("/") + "/"), table.location()
    for f in files:
        assert f.startswith(prefix), f
        assert (lake.bucket_dir / f.removeprefix(prefix)).is_file(), f"{f} is not in {lake.bucket_dir}"
    name = identifier.rsplit(".", 1)[1]
    assert not [p for p in stack_settings.state_dir.rglob(f"*{name}*")], "a file of the table on the local disk"


# --- the tests ------------------------------------------------------------------------------------------


def test_a_run_commits_once_on_a_branch_fast_forwarded_into_main(spark, kafka, stack_settings, lake, monkeypatch):
    cfg = new_table(kafka)
    produce_raw(kafka, cfg.topic, [(key(1), ev("c", 1, "a", 100)), (key(2), ev("c", 2, "b", 110))])
    _, first = run(spark, lake, cfg, "run-1")
    assert first.status == "committed"  # creates the table: its first commit creates main
    catalog = load_catalog(lake.settings)
    before = catalog.load_table(cfg.identifier)
    base = before.current_snapshot().snapshot_id
    # an operator's retention setting of main, which the fast-forward keeps
    before.manage_snapshots().create_branch(base, "main", min_snapshots_to_keep=7).commit()
    n_snapshots = len(before.snapshots())

    seen: dict[str, object] = {}
    real_pause = commit_module.debug_pause

    def spy(point: str, detail: object) -> None:
        if point == "before_fast_forward":
            # what the catalog holds between the MERGE into the run branch and the fast-forward
            table = load_catalog(lake.settings).load_table(cfg.identifier)
            seen["branch"] = detail
            seen["refs"] = {name: ref.snapshot_id for name, ref in table.refs().items()}
        real_pause(point, detail)

    monkeypatch.setattr(commit_module, "debug_pause", spy)
    produce_raw(
        kafka,
        cfg.topic,
        [
            (key(1), ev("u", 1, "a2", 200)),
            (key(2), ev("d", 2, "b", 210)),
            (key(3), ev("c", 3, "c", 220)),
            (key(4), ev("r", 4, "d", 230, snapshot="incremental")),
        ],
    )
    offset_range, result = run(spark, lake, cfg, "run-2")
    assert result.status == "committed"
    assert result.ops == {"c": 1, "u": 1, "d": 1, "r": 1}
    expected = {(1, "a2"), (3, "c"), (4, "d")}
    assert iceberg_rows(lake, cfg.identifier) == expected
    assert spark_rows(spark, lake, cfg.identifier) == expected

    table = catalog.load_table(cfg.identifier)
    current = table.current_snapshot()
    assert current.snapshot_id == result.snapshot_id
    assert len(table.snapshots()) == n_snapshots + 1  # one commit
    assert committed_offsets(table, cfg.topic) == offset_range.end == {0: 6}
    summary = current.summary
    assert summary[SummaryKeys.RUN_ID] == "run-2"
    assert json.loads(summary[SummaryKeys.END_OFFSETS]) == {"0": 6}
    assert json.loads(summary[SummaryKeys.START_OFFSETS]) == {"0": 2}
    # the MERGE went to a run branch while main stayed at the base; main was then fast-forwarded
    # to the branch's snapshot and the branch dropped (one catalog commit), main's retention kept
    branch = seen["branch"]
    assert isinstance(branch, str) and branch.startswith(RUN_BRANCH_PREFIX)
    assert seen["refs"] == {"main": base, branch: current.snapshot_id}
    assert current.parent_snapshot_id == base
    assert set(table.refs()) == {"main"}
    assert table.refs()["main"].min_snapshots_to_keep == 7
    # the catalog's row (SQLite; PostgreSQL; the REST server's PostgreSQL) points at the metadata
    # of that fast-forward
    assert catalog_rows(lake, cfg.identifier) == [(lake.catalog_db_name, table.metadata_location)]
    assert_files_in_warehouse(lake, cfg.identifier, stack_settings)


def test_deletes_leave_tombstones_that_discard_a_replayed_older_event(spark, kafka, stack_settings, lake):
    cfg = new_table(kafka)
    produce_raw(kafka, cfg.topic, [(key(1), ev("c", 1, "a", 100)), (key(2), ev("c", 2, "b", 110))])
    run(spark, lake, cfg, "run-1")
    produce_raw(kafka, cfg.topic, [(key(1), ev("d", 1, "a", 200))])
    run(spark, lake, cfg, "run-2")
    tombstones = side_table(cfg.identifier, TOMBSTONES_SUFFIX)
    assert iceberg_rows(lake, tombstones, ("id", "_cdc_binlog_pos")) == {(1, 200)}
    assert spark_rows(spark, lake, tombstones, ("id", "_cdc_binlog_pos")) == {(1, 200)}
    # the connector re-emits the create (and an update) of key 1 from before its delete
    produce_raw(kafka, cfg.topic, [(key(1), ev("c", 1, "a", 100)), (key(1), ev("u", 1, "a2", 150))])
    offset_range, result = run(spark, lake, cfg, "run-3")
    assert result.status == "committed"
    assert iceberg_rows(lake, cfg.identifier) == {(2, "b")}
    assert spark_rows(spark, lake, cfg.identifier) == {(2, "b")}
    assert committed_offsets(load_catalog(lake.settings).load_table(cfg.identifier), cfg.topic) == offset_range.end
    assert_files_in_warehouse(lake, tombstones, stack_settings)


def test_a_bad_record_is_quarantined_and_the_run_commits(spark, kafka, stack_settings, lake):
    cfg = new_table(kafka, bad_records_tolerance="all")  # the quarantine on each catalog, not its alert
    bad = b'{"op": "c", "after": {"id": 3, "v": "lost"}'  # truncated JSON
    produce_raw(
        kafka,
        cfg.topic,
        [(key(1), ev("c", 1, "a", 100)), (key(3), bad), (key(2), ev("c", 2, "b", 300))],
    )
    offset_range, result = run(spark, lake, cfg, "run-q")
    assert result.status == "committed" and result.quarantined == 1
    assert iceberg_rows(lake, cfg.identifier) == {(1, "a"), (2, "b")}
    table = load_catalog(lake.settings).load_table(cfg.identifier)
    assert committed_offsets(table, cfg.topic) == offset_range.end == {0: 3}
    assert table.current_snapshot().summary[SummaryKeys.QUARANTINED] == "1"
    quarantine = side_table(cfg.identifier, QUARANTINE_SUFFIX)
    entries = load_catalog(lake.settings).load_table(quarantine).scan().to_arrow().to_pylist()
    assert [
        (e["topic"], e["partition"], e["offset"], e["error"], e["value"], e["run_id"], e["status"]) for e in entries
    ] == [(cfg.topic, 0, 1, "value is not JSON", bad, "run-q", "open")]
    assert spark_rows(spark, lake, quarantine, ("topic", "partition", "offset")) == {(cfg.topic, 0, 1)}
    assert_files_in_warehouse(lake, quarantine, stack_settings)


def test_a_column_added_to_the_table_is_applied_and_read_alike_by_pyiceberg_and_spark(
    spark, kafka, stack_settings, lake
):
    from pyiceberg.types import StringType

    cfg = new_table(kafka)
    produce_raw(kafka, cfg.topic, [(key(1), ev("c", 1, "a", 100))])
    run(spark, lake, cfg, "run-1")
    # the source gained column w (ALTER TABLE t ADD COLUMN w VARCHAR(8)): the table gets it as
    # schema sync gives it (cdclake.pipeline.schema_sync), before the events carrying it apply: after
    # its source predecessor, its encoding recorded in the same commit
    catalog = load_catalog(lake.settings)
    table = catalog.load_table(cfg.identifier)
    with table.transaction() as txn:
        with txn.update_schema() as update:
            update.add_column("w", StringType())
            update.move_after("w", "v")
        txn.set_properties(column_encodings_property({**column_encodings(table.properties), "w": "string"}))
    assert spark.table(f"{lake.catalog_name}.{cfg.identifier}").columns[:3] == ["id", "v", "w"]

    def with_w(op: str, k: int, v: str, w: str, pos: int) -> bytes:
        doc = json.loads(ev(op, k, v, pos))
        for image in ("before", "after"):
            if doc[image] is not None:
                doc[image]["w"] = w
        return json.dumps(doc).encode()

    produce_raw(kafka, cfg.topic, [(key(1), with_w("u", 1, "a2", "x", 200)), (key(2), with_w("c", 2, "b", "y", 210))])
    _, result = run(spark, lake, cfg, "run-2")
    assert result.status == "committed"
    expected = {(1, "a2", "x"), (2, "b", "y")}
    assert iceberg_rows(lake, cfg.identifier, ("id", "v", "w")) == expected
    assert spark_rows(spark, lake, cfg.identifier, ("id", "v", "w")) == expected
    assert_files_in_warehouse(lake, cfg.identifier, stack_settings)


def test_a_group_tag_moves_on_every_table_or_on_none(lake):
    """:func:`cdclake.io.multi_commit.move_refs` on each catalog (the REST server's
    ``POST /v1/transactions/commit``, the JDBC catalog's rows in PostgreSQL): see
    :func:`tests.unit.test_multi_commit.check_tags_move_on_every_table_or_none`."""
    check_tags_move_on_every_table_or_none(load_catalog(lake.settings), sql=lake.kind != "rest")


def test_a_group_published_by_pointer_moves_one_table_per_commit(lake):
    """``CDCLAKE_GROUP_COMMIT=pointer``, the fallback for a catalog without a multi-table commit,
    with single-table commits on the REST catalog and PostgreSQL:
    :func:`tests.unit.test_multi_commit.check_group_published_by_pointer`."""
    check_group_published_by_pointer(load_catalog(lake.settings))
