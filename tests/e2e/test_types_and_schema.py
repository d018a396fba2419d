"""Every MySQL type and a sequence of ALTERs on the real chain (MariaDB -> Debezium -> Kafka ->
the table DAG, with its schema_sync task -> Iceberg): after catch-up the Iceberg table equals
``SELECT *`` value by value, and the Iceberg schema history shows a rename as a rename."""

from __future__ import annotations

import datetime as dt
import re
import time
from decimal import Decimal

import pytest
import yaml

from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import KafkaClients, topic_watermarks
from cdclake.io.refs import committed_offsets
from cdclake_dev import chain as source_chain
from cdclake_dev.cli import ensure_airflow_db, run_table_dag

pytestmark = pytest.mark.e2e

DDL = """
CREATE TABLE alltypes (
  id INT NOT NULL PRIMARY KEY,
  tiny TINYINT NULL,
  small_u SMALLINT UNSIGNED NULL,
  int_u INT UNSIGNED NULL,
  big BIGINT NULL,
  big_u BIGINT UNSIGNED NULL,
  dec_c DECIMAL(10,2) NULL,
  wide_dec DECIMAL(50,5) NULL,
  flt FLOAT NULL,
  dbl DOUBLE NULL,
  bit1 BIT(1) NULL,
  bit10 BIT(10) NULL,
  flag BOOLEAN NULL,
  ch CHAR(3) NULL,
  vc VARCHAR(20) NULL,
  txt TEXT NULL,
  bin BINARY(4) NULL,
  vbin VARBINARY(10) NULL,
  blb BLOB NULL,
  d DATE NULL,
  t TIME(6) NULL,
  dt0 DATETIME NULL,
  dt3 DATETIME(3) NULL,
  dt6 DATETIME(6) NULL,
  ts TIMESTAMP(6) NULL,
  y YEAR NULL,
  j JSON NULL,
  e ENUM('a','b','c') NULL,
  s SET('x','y','z') NULL,
  pt POINT NULL,
  geo GEOMETRY NULL
)"""

COLUMNS = [
    "id",
    "tiny",
    "small_u",
    "int_u",
    "big",
    "big_u",
    "dec_c",
    "wide_dec",
    "flt",
    "dbl",
    "bit1",
    "bit10",
    "flag",
    "ch",
    "vc",
    "txt",
    "bin",
    "vbin",
    "blb",
    "d",
    "t",
    "dt0",
    "dt3",
    "dt6",
    "ts",
    "y",
    "j",
    "e",
    "s",
    "pt",
    "geo",
]


def insert(
    cur, values: tuple, rename: dict[str, str] | None = None, drop: tuple[str, ...] = (), table: str = "alltypes"
) -> None:
    """INSERT one row given in :data:`COLUMNS` order (spatial values as WKT) into ``table``, under
    its current column names (``rename``: old -> new, ``drop``: columns no longer there)."""
    names, marks, params = [], [], []
    for name, value in zip(COLUMNS, values, strict=False):
        if name in drop:
            continue
        names.append((rename or {}).get(name, name))
        if name == "pt":
            marks.append("ST_GeomFromText(%s, 4326)")
        elif name == "geo":
            marks.append("ST_GeomFromText(%s)")
        else:
            marks.append("%s")
        params.append(value)
    cur.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(marks)})", params)


def row(i: int, *, extreme: bool = False) -> tuple:
    if extreme:
        return (
            i,
            -128,
            65535,
            4294967295,
            -9223372036854775808,
            18446744073709551615,
            Decimal("-99999999.99"),
            Decimal("123456789012345678901234567890123456789012345.12345"),
            -0.25,
            1e308,
            1,
            0b1000000001,
            True,
            "xyz",
            str(i * 7),
            "long text " * 30,
            b"\x00\x01\xfe\xff",
            b"\x00",
            b"\x00" * 300,
            dt.date(1000, 1, 1),
            "-838:59:59",
            dt.datetime(9999, 12, 31, 23, 59, 59),
            dt.datetime(1970, 1, 1, 0, 0, 0, 1000),
            dt.datetime(2038, 1, 19, 3, 14, 7, 999999),
            dt.datetime(2038, 1, 19, 3, 14, 7, 999999),
            2155,
            '{"a": [1, 2, {"b": null}]}',
            "c",
            "x,z",
            "POINT(-71.1043443253471 42.3150676015829)",
            "LINESTRING(0 0, 1 1, 2 5)",
        )
    return (
        i,
        i % 100,
        i,
        i * 1000,
        i * -10_000_000_000,
        i * 3,
        Decimal(i) / 4,
        Decimal(f"{i}.5"),
        1.5,
        i / 3,
        i % 2,
        i % 1024,
        i % 2 == 0,
        "ab",
        str(i),
        f"text {i}",
        b"abcd",
        bytes([i % 256]),
        b"blob" * i,
        dt.date(2026, 11, 21),
        dt.timedelta(hours=i, microseconds=123456),
        dt.datetime(2026, 11, 21, 8, 0, i % 60),
        dt.datetime(2026, 11, 21, 8, 0, 0, 123000),
        dt.datetime(2026, 11, 21, 8, 0, 0, 123456),
        dt.datetime(2026, 11, 21, 8, 0, 0, 654321),
        2000 + i % 100,
        f'{{"i": {i}}}',
        "ab"[i % 2],
        "x,y",
        f"POINT({i} {i + 1})",
        f"POLYGON((0 0, {i} 0, {i} {i}, 0 0))",
    )


def norm_source(name: str, v):  # noqa: ANN001, ANN201 - one comparable value per column
    if v is None:
        return None
    if name == "t":
        return v // dt.timedelta(microseconds=1)
    if name == "bit1":
        return bool(int.from_bytes(v, "big")) if isinstance(v, bytes) else bool(v)
    if name in ("pt", "geo"):
        return (int.from_bytes(v[:4], "little"), bytes(v[4:]))  # MySQL's internal form: SRID + WKB
    if name == "wide_dec":
        return Decimal(v)
    if isinstance(v, bytearray):
        return bytes(v)
    return v


def norm_iceberg(name: str, v):  # noqa: ANN001, ANN201
    if v is None:
        return None
    if name in ("pt", "geo"):
        return (v["srid"] or 0, bytes(v["wkb"]))
    if name == "wide_dec":
        return Decimal(v)
    if name == "ts":
        return v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if name == "bit1":
        return bool(v)
    return v


def source_table(db, table: str = "alltypes") -> tuple[list[str], list[tuple]]:
    with db.cursor() as cur:
        cur.execute(f"SELECT * FROM {table} ORDER BY id")
        names = [d[0] for d in cur.description]
        return names, [tuple(norm_source(n, v) for n, v in zip(names, r, strict=False)) for r in cur.fetchall()]


def iceberg_table(settings, names: list[str], identifier: str = "chain.alltypes") -> list[tuple]:
    rows = load_catalog(settings).load_table(identifier).scan().to_arrow().to_pylist()
    return sorted(tuple(norm_iceberg(n, r[n]) for n in names) for r in rows)


def catch_up(
    settings, cfg_name: str, topic: str, capsys, max_runs: int = 6, identifier: str = "chain.alltypes"
) -> list[str]:
    """Run the table DAG until its committed offsets reach the topic's end; returns the logs."""
    logs = []
    for _ in range(max_runs):
        rc = run_table_dag(cfg_name, settings)
        logs.append(capsys.readouterr().out)
        assert rc == 0, logs[-1][-6000:]
        table = load_catalog(settings).load_table(identifier)
        if (
            committed_offsets(table, topic)
            == topic_watermarks(KafkaClients.from_bootstrap(settings.kafka_bootstrap), topic).high
        ):
            return logs
    raise AssertionError(f"not caught up after {max_runs} runs")


def wait_for(settings, topic: str, count_at_least: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if (
                sum(topic_watermarks(KafkaClients.from_bootstrap(settings.kafka_bootstrap), topic).high.values())
                >= count_at_least
            ):
                return
        except LookupError:
            pass
        time.sleep(1)
    raise AssertionError(f"{topic} has fewer than {count_at_least} records after {timeout_s}s")


def write_config(settings, incompatible: str) -> None:
    settings.tables_config.write_text(
        yaml.safe_dump(
            {
                "defaults": {"schedule": None, "retries": 0},
                "tables": [
                    {
                        "name": "chain_alltypes",
                        "topic": f"{settings.topic_prefix}.inventory.alltypes",
                        "namespace": "chain",
                        "table": "alltypes",
                        "primary_key": ["id"],
                        "schema_changes": {"incompatible": incompatible},
                    }
                ],
            }
        )
    )


def reconciled(
    settings,
    topic,
    capsys,
    name: str = "chain_alltypes",
    identifier: str = "chain.alltypes",
    differing: set[tuple] = frozenset(),
) -> dict[str, str]:
    """Reconcile table ``name`` with its source (cdclake.pipeline.reconcile); asserts that the keys
    ``differing`` differ and nothing else, and returns the columns not compared."""
    from cdclake.model.config import load_tables
    from cdclake.model.snapshot import caught_up
    from cdclake.pipeline.reconcile import ReconcileParams, reconcile_table

    cfg = load_tables(settings.tables_config).get(name)
    result = reconcile_table(
        settings,
        KafkaClients.from_bootstrap(settings.kafka_bootstrap),
        cfg,
        source_chain.local_source(settings, database="inventory"),
        ReconcileParams(chunk_rows=3),
        lambda end: (
            None
            if caught_up(committed_offsets(load_catalog(settings).load_table(identifier), topic), end)
            else catch_up(settings, name, topic, capsys, identifier=identifier)
        ),
    )
    assert result.keys("differing") == differing and result.differences == len(differing), result.summary()
    assert result.chunks >= 3, result.summary() + repr(result.outcomes)
    return result.skipped_columns


def test_every_type_and_alters_converge_to_the_source(chain, stack_settings, tmp_path, capsys):
    settings = stack_settings.model_copy(update={"tables_config": tmp_path / "tables.yaml"})
    topic = f"{settings.topic_prefix}.inventory.alltypes"
    write_config(settings, "fail")
    ensure_airflow_db(settings)
    db = source_chain.mariadb_connect(settings, database="inventory")
    with db.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("DROP TABLE IF EXISTS alltypes")
        cur.execute(DDL)
        insert(cur, row(1, extreme=True))
        for i in range(2, 8):
            insert(cur, row(i))
        cur.execute("UPDATE alltypes SET dec_c = dec_c + 1.01, t = '-00:00:01.5', bit10 = b'1111111111' WHERE id = 3")
        cur.execute("INSERT INTO alltypes (id) VALUES (100)")  # every other column NULL
    wait_for(settings, topic, 9)
    catch_up(settings, "chain_alltypes", topic, capsys)
    names, expected = source_table(db)
    assert iceberg_table(settings, names) == expected
    table = load_catalog(settings).load_table("chain.alltypes")
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert types["wide_dec"] == "string" and types["dec_c"] == "decimal(10, 2)" and types["big_u"] == "decimal(20, 0)"
    assert types["t"] == "long" and types["pt"].startswith("struct<")
    txt_id = table.schema().find_field("txt").field_id
    # reconcile's canonical texts agree on every type (digests in MariaDB and from pyiceberg)
    assert reconciled(settings, topic, capsys) == {}

    # ALTERs mixed with DML: add, widen, rename, drop
    with db.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("ALTER TABLE alltypes ADD COLUMN extra VARCHAR(10) NULL AFTER vc")
        cur.execute("UPDATE alltypes SET extra = CONCAT('e', id) WHERE id <= 3")
        cur.execute("ALTER TABLE alltypes MODIFY small_u INT UNSIGNED NULL")  # int -> long
        cur.execute("UPDATE alltypes SET small_u = 4000000000 WHERE id = 2")
        cur.execute("ALTER TABLE alltypes RENAME COLUMN txt TO body")  # a rename
        cur.execute("UPDATE alltypes SET body = 'renamed' WHERE id = 4")
        cur.execute("ALTER TABLE alltypes CHANGE COLUMN dbl dbl_renamed DOUBLE NULL")  # CHANGE old new
        cur.execute("ALTER TABLE alltypes DROP COLUMN ch")  # kept in Iceberg
        insert(cur, row(8), rename={"txt": "body", "dbl": "dbl_renamed"}, drop=("ch",))
        cur.execute("DELETE FROM alltypes WHERE id = 5")
        # every row (every partition) after the renames: each partition settles past them at once
        cur.execute("UPDATE alltypes SET extra = CONCAT('z', id)")
    wait_for(settings, topic, 9 + 8 + 8)  # 3 + 1 + 1 updates, an insert, a delete and its tombstone, 8 updates
    logs = catch_up(settings, "chain_alltypes", topic, capsys)
    # the renames are barriers: the batch holding events before them is capped there, so catching
    # up takes one run per barrier (the DAG logs say "batch capped before the barrier change")
    assert len(logs) >= 3, f"{len(logs)} run(s): the two renames should each have capped a batch"
    names, expected = source_table(db)
    assert "ch" not in names
    assert iceberg_table(settings, names) == expected
    table = load_catalog(settings).load_table("chain.alltypes")
    assert table.schema().find_field("body").field_id == txt_id, "a rename keeps the field id"
    assert "txt" not in table.schema().column_names and "ch" in table.schema().column_names
    assert str(table.schema().find_field("small_u").field_type) == "long"
    # after renames and a drop: the dropped column, kept in the lake, is not compared
    assert reconciled(settings, topic, capsys) == {"ch": "not in the source table (dropped there)"}
    history = [s.schema_id for s in table.metadata.schemas]
    old = next(s for s in table.metadata.schemas if s.schema_id == history[0])
    assert old.find_field(txt_id).name == "txt"

    # an incompatible change under the default policy stops the table, naming the DDL
    with db.cursor() as cur:
        cur.execute("UPDATE alltypes SET vc = CAST(id * 11 AS CHAR)")
        cur.execute("ALTER TABLE alltypes MODIFY vc INT NULL")
        # every row again, so that the new column holds every row's value under new_column
        cur.execute("UPDATE alltypes SET vc = vc + 1")
        # and a row in the partition that holds no other (key 5's, deleted above), so that every
        # partition settles past the ALTER at once
        cur.execute("INSERT INTO alltypes (id, vc) VALUES (9, 9)")
    wait_for(settings, topic, 9 + 8 + 8 + 8 + 8 + 1)
    for _ in range(3):
        rc = run_table_dag("chain_alltypes", settings)
        out = capsys.readouterr()
        if rc != 0:
            break
    assert rc != 0
    assert "MODIFY vc INT" in out.out + out.err and "'vc'" in out.out + out.err
    # ... and under new_column the old column is renamed aside and a new one added
    write_config(settings, "new_column")
    catch_up(settings, "chain_alltypes", topic, capsys)
    names, expected = source_table(db)
    assert iceberg_table(settings, names) == expected
    table = load_catalog(settings).load_table("chain.alltypes")
    assert str(table.schema().find_field("vc").field_type) == "int"
    assert any(n.startswith("vc__") for n in table.schema().column_names)


def _avro_schema_ids(settings, topic: str, start: dict[int, int] | None, end: dict[int, int]) -> set[int]:
    """The writer schema ids of the Avro values of ``topic`` in ``[start, end)`` (tombstones have none)."""
    from cdclake.io.kafka import read_partition
    from cdclake.model.avro import is_framed, split_wire

    kafka = KafkaClients.from_bootstrap(settings.kafka_bootstrap)
    return {
        split_wire(r.value())[0]
        for p, hi in end.items()
        for r in read_partition(kafka, topic, p, (start or {}).get(p, 0), hi)
        if is_framed(r.value())
    }


def test_every_type_through_avro_equals_json_and_alters_converge(
    chain, stack_settings, schema_registry, tmp_path, capsys
):
    """The all-types table through a second Debezium connector writing Avro (Apicurio's converter,
    Confluent wire format, the registry read through the Airflow connection ``schema_registry``)
    gives the same Iceberg schema and rows as through the JsonConverter connector, equal to the
    source, and reconcile finds no difference. Then ALTERs mid-stream (add, add with defaults, an
    explicit NULL in a column with a default, widen, rename, drop) with no DAG run between them: the
    first batch holds several writer schema ids, and the table converges to the source."""
    settings = stack_settings.model_copy(
        update={"tables_config": tmp_path / "tables.yaml", "schema_registry_url": schema_registry}
    )
    table, avro_prefix = "avtypes", f"{settings.topic_prefix}_avtypes"
    json_topic, avro_topic = f"{settings.topic_prefix}.inventory.{table}", f"{avro_prefix}.inventory.{table}"
    entry = {"namespace": "chain", "primary_key": ["id"], "schema_changes": {"incompatible": "fail"}}
    settings.tables_config.write_text(
        yaml.safe_dump(
            {
                "defaults": {"schedule": None, "retries": 0},
                "tables": [
                    {**entry, "name": "avtypes_json", "topic": json_topic, "table": "avtypes_json"},
                    {
                        **entry,
                        "name": "avtypes_avro",
                        "topic": avro_topic,
                        "table": "avtypes_avro",
                        "value_format": "avro",
                    },
                ],
            }
        )
    )
    ensure_airflow_db(settings)
    db = source_chain.mariadb_connect(settings, database="inventory")
    with db.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS avtypes")
    # its own binlog client id: another Avro connector of the session may still be connected
    print(
        source_chain.add_avro_connector(
            settings,
            schema_registry,
            [f"inventory.{table}"],
            name="avtypes-connector",
            topic_prefix=avro_prefix,
            overrides={"database.server.id": "184057"},
        )
    )
    try:
        with db.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            # created once both connectors stream: both read its columns from the binlog's DDL (a
            # snapshot reads BOOLEAN back as TINYINT(1), an int16, where the DDL parser gives a boolean)
            cur.execute(DDL.replace("CREATE TABLE alltypes", f"CREATE TABLE {table}"))
            insert(cur, row(1, extreme=True), table=table)
            for i in range(2, 8):
                insert(cur, row(i), table=table)
            cur.execute(
                f"UPDATE {table} SET dec_c = dec_c + 1.01, t = '-00:00:01.5', bit10 = b'1111111111' WHERE id = 3"
            )
            cur.execute(f"INSERT INTO {table} (id) VALUES (100)")  # every other column NULL
        wait_for(settings, json_topic, 9)
        wait_for(settings, avro_topic, 9)
        catch_up(settings, "avtypes_json", json_topic, capsys, identifier="chain.avtypes_json")
        catch_up(settings, "avtypes_avro", avro_topic, capsys, identifier="chain.avtypes_avro")
        names, expected = source_table(db, table)
        through_json = iceberg_table(settings, names, "chain.avtypes_json")
        assert through_json == expected
        # value and Python type (True == 1, but a boolean column is not an int one)
        assert [[(type(v), v) for v in r] for r in iceberg_table(settings, names, "chain.avtypes_avro")] == [
            [(type(v), v) for v in r] for r in through_json
        ]
        catalog = load_catalog(settings)
        json_schema, avro_schema = (catalog.load_table(f"chain.avtypes_{f}").schema() for f in ("json", "avro"))
        # the types, without the field ids of struct members (each table numbers its own)
        assert {n: re.sub(r"\d+: ", "", str(avro_schema.find_field(n).field_type)) for n in names} == {
            n: re.sub(r"\d+: ", "", str(json_schema.find_field(n).field_type)) for n in names
        }
        assert reconciled(settings, avro_topic, capsys, "avtypes_avro", "chain.avtypes_avro") == {}

        before = committed_offsets(catalog.load_table("chain.avtypes_avro"), avro_topic)
        with db.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute(f"UPDATE {table} SET vc = 'pre' WHERE id = 6")  # the old writer schema
            cur.execute(f"ALTER TABLE {table} ADD COLUMN extra VARCHAR(10) NULL AFTER vc")
            cur.execute(
                f"ALTER TABLE {table} ADD COLUMN status VARCHAR(8) NOT NULL DEFAULT 'new',"
                " ADD COLUMN label VARCHAR(8) NULL DEFAULT 'dflt'"
            )
            cur.execute(f"UPDATE {table} SET extra = CONCAT('e', id) WHERE id <= 3")
            cur.execute(f"ALTER TABLE {table} MODIFY small_u INT UNSIGNED NULL")  # int -> long
            cur.execute(f"UPDATE {table} SET small_u = 4000000000, label = NULL WHERE id = 2")
            cur.execute(f"ALTER TABLE {table} RENAME COLUMN txt TO body")
            cur.execute(f"UPDATE {table} SET body = 'renamed', status = 'old' WHERE id = 4")
            cur.execute(f"ALTER TABLE {table} DROP COLUMN ch")
            insert(cur, row(8), rename={"txt": "body"}, drop=("ch",), table=table)
            cur.execute(f"DELETE FROM {table} WHERE id = 5")
            cur.execute(f"UPDATE {table} SET extra = CONCAT('z', id)")  # every row, past the rename
        wait_for(settings, avro_topic, 9 + 1 + 3 + 1 + 1 + 1 + 2 + 8)
        rc = run_table_dag("avtypes_avro", settings)
        log = capsys.readouterr().out
        assert rc == 0, log[-6000:]
        first = committed_offsets(load_catalog(settings).load_table("chain.avtypes_avro"), avro_topic)
        ids = _avro_schema_ids(settings, avro_topic, before, first)
        assert len(ids) >= 3, f"the first batch after the ALTERs held writer schema ids {ids}"
        catch_up(settings, "avtypes_avro", avro_topic, capsys, identifier="chain.avtypes_avro")
        names, expected = source_table(db, table)
        assert "ch" not in names and {"body", "extra", "status", "label"} <= set(names)
        # Apicurio's AvroConverter 2.6 writes a nullable column's default for an explicit NULL (its
        # AvroData reads Connect's Struct.get, not getWithoutDefault; Confluent's converter has
        # ignore.default.for.nullables=true, JsonConverter replace.null.with.default=false): the
        # events of row 2 carry label 'dflt', and the lake holds what the events carry
        label = names.index("label")
        assert [r[label] for r in expected if r[0] == 2] == [None]
        converted = [(*r[:label], "dflt", *r[label + 1 :]) if r[0] == 2 else r for r in expected]
        lake_rows = iceberg_table(settings, names, "chain.avtypes_avro")
        assert lake_rows == converted, [
            (r[0], n, a, b)
            for r, e in zip(lake_rows, converted, strict=False)
            for n, a, b in zip(names, r, e, strict=True)
            if a != b
        ]
        lake = load_catalog(settings).load_table("chain.avtypes_avro").schema()
        assert str(lake.find_field("small_u").field_type) == "long" and "txt" not in lake.column_names
        # ... which reconcile finds: that row, and nothing else
        assert reconciled(settings, avro_topic, capsys, "avtypes_avro", "chain.avtypes_avro", differing={(2,)}) == {
            "ch": "not in the source table (dropped there)"
        }
    finally:
        print(source_chain.remove_connector(settings, "avtypes-connector"))
