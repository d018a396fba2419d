"""Unit tests for :mod:`cdclake.model.ddl`: renames and drops from MySQL DDL, over Debezium's own DDL
test corpus (``fixtures/debezium/debezium-ddl``) and the statements schema sync meets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdclake.errors import DdlParseError
from cdclake.model.ddl import (
    ColumnRename,
    DdlEffects,
    TableName,
    TableRename,
    ddl_effects,
    parse_statement,
    split_statements,
    statement_kind,
)

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "debezium" / "debezium-ddl"

NOT_PARSED = {
    # marker in the statement -> why sqlglot 28 (with our extensions) does not parse it; none of
    # these is an ALTER/RENAME/DROP TABLE, so schema sync never needs their structure
    "VALUE (": "INSERT ... VALUE (...): MySQL's synonym of VALUES, unknown to sqlglot",
    "FOREIGN KEY order_customer": "FOREIGN KEY with an index name, unknown to sqlglot",
    "FLOAT UNSIGNED DEFAULT": "FLOAT UNSIGNED followed by a default, unknown to sqlglot",
    "POINT DEFAULT NULL": "spatial column types (POINT, LINESTRING, ...), unknown to sqlglot",
    "LINESTRING": "spatial column types (POINT, LINESTRING, ...), unknown to sqlglot",
    "binary DEFAULT": "the BINARY column attribute (MySQL 5.x), unknown to sqlglot",
    "signed NOT NULL": "the SIGNED attribute, unknown to sqlglot",
    "TINYINT SIGNED": "the SIGNED attribute, unknown to sqlglot",
    "performance_schema\nCREATE": "several statements separated by newlines, not ';' (the file's format)",
    "FLUSH PRIVILEGES\nCREATE": "several statements separated by newlines, not ';' (the file's format)",
    "PARTITION p0 VALUES LESS THAN": "partition definitions, unknown to sqlglot",
    "USING BTREE ON": "CREATE INDEX with USING before ON, unknown to sqlglot",
    "DROP VIEW IF EXISTS view_": "DROP VIEW of several views, unknown to sqlglot",
    "REPAIR TABLE": "table maintenance statement, unknown to sqlglot",
    "SERIAL DEFAULT VALUE": "SERIAL DEFAULT VALUE, unknown to sqlglot",
}

EXPECTED_RENAMES = {
    # statement (whitespace-normalised prefix) -> its effects; every ALTER/RENAME TABLE statement
    # of the corpus that says RENAME or CHANGE is listed here
    "RENAME TABLE blue_table TO red_table,": DdlEffects(
        table_renames=(
            TableRename(TableName(None, "blue_table"), TableName(None, "red_table")),
            TableRename(TableName(None, "orange_table"), TableName(None, "green_table")),
            TableRename(TableName(None, "black_table"), TableName(None, "white_table")),
        )
    ),
    "ALTER TABLE t1 RENAME t4": DdlEffects(table_renames=(TableRename(TableName(None, "t1"), TableName(None, "t4")),)),
    "ALTER TABLE t2 MODIFY a TINYINT NOT NULL, CHANGE b c CHAR(20)": DdlEffects(
        column_renames=(ColumnRename(TableName(None, "t2"), "b", "c"),)
    ),
    "ALTER TABLE t1 CHANGE c1 c1 BLOB": DdlEffects(),
    "ALTER TABLE t1 CHANGE c1 c1 TEXT CHARACTER SET utf8": DdlEffects(),
}


def corpus_statements() -> list[tuple[str, str]]:
    assert CORPUS.is_dir(), f"DDL corpus not found at {CORPUS}"
    out = []
    for path in sorted(CORPUS.iterdir()):
        out.extend((path.name, s) for s in split_statements(path.read_text()))
    return out


def normalised(sql: str) -> str:
    return " ".join(sql.split())


def test_corpus_is_split_into_statements():
    statements = corpus_statements()
    assert len(statements) > 500
    files = {f for f, _ in statements}
    assert len(files) == len(list(CORPUS.iterdir()))


def test_every_corpus_statement_parses_or_is_skipped_with_a_reason():
    used = set()
    for name, sql in corpus_statements():
        try:
            parse_statement(sql)
        except DdlParseError as e:
            markers = [m for m in NOT_PARSED if m in sql]
            assert markers, f"{name}: unexpected parse failure of {normalised(sql)[:200]!r}: {e}"
            assert statement_kind(sql) is None, f"{name}: a table statement must parse: {sql[:200]!r}"
            used.update(markers)
    assert used == set(NOT_PARSED), f"stale skip reasons: {set(NOT_PARSED) - used}"


def test_every_corpus_statement_yields_its_effects():
    for _name, sql in corpus_statements():
        ddl_effects(sql)  # raises DdlParseError for an ALTER/RENAME/DROP TABLE it cannot read


def test_corpus_renames_are_found():
    seen = set()
    for name, sql in corpus_statements():
        kind = statement_kind(sql)
        words = {w.upper().strip(",") for w in sql.split()}
        if kind in ("ALTER TABLE", "RENAME TABLE") and words & {"RENAME", "CHANGE"}:
            key = next((k for k in EXPECTED_RENAMES if normalised(sql).startswith(k)), None)
            assert key is not None, f"{name}: statement with a rename not in the expectations: {sql!r}"
            assert ddl_effects(sql) == EXPECTED_RENAMES[key], sql
            seen.add(key)
    assert seen == set(EXPECTED_RENAMES)


def test_corpus_drops_are_found():
    drops = [ddl_effects(sql) for _, sql in corpus_statements() if statement_kind(sql) == "DROP TABLE"]
    tables = {t for e in drops for t in e.dropped_tables}
    assert {TableName(None, "table_1"), TableName("connector_test_ro", "orders")} <= tables
    assert all(e.dropped_tables for e in drops)


def test_non_table_statements_with_rename_are_not_table_renames():
    for sql in (
        "ALTER EVENT myevent RENAME TO yourevent",
        "ALTER EVENT olddb.myevent RENAME TO newdb.myevent",
        "RENAME USER 'a'@'h' TO 'b'@'h'",
    ):
        assert ddl_effects(sql) == DdlEffects()


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (
            "ALTER TABLE orders RENAME COLUMN qty TO quantity",
            DdlEffects(column_renames=(ColumnRename(TableName(None, "orders"), "qty", "quantity"),)),
        ),
        (
            "ALTER TABLE `inventory`.`orders` RENAME COLUMN `qty` TO `quantity`",
            DdlEffects(column_renames=(ColumnRename(TableName("inventory", "orders"), "qty", "quantity"),)),
        ),
        (
            "ALTER TABLE orders CHANGE qty quantity BIGINT NOT NULL",
            DdlEffects(column_renames=(ColumnRename(TableName(None, "orders"), "qty", "quantity"),)),
        ),
        (
            "ALTER TABLE orders CHANGE COLUMN qty quantity BIGINT NOT NULL DEFAULT 0 AFTER id, ADD COLUMN x INT",
            DdlEffects(column_renames=(ColumnRename(TableName(None, "orders"), "qty", "quantity"),)),
        ),
        ("ALTER TABLE orders CHANGE qty qty BIGINT", DdlEffects()),
        ("ALTER TABLE orders ADD COLUMN x INT FIRST, MODIFY note TEXT, ENGINE=InnoDB", DdlEffects()),
        (
            "ALTER TABLE orders DROP COLUMN note, DROP price, DROP PRIMARY KEY, DROP INDEX i",
            DdlEffects(dropped_columns=((TableName(None, "orders"), "note"), (TableName(None, "orders"), "price"))),
        ),
        (
            "ALTER TABLE orders RENAME TO orders_old",
            DdlEffects(table_renames=(TableRename(TableName(None, "orders"), TableName(None, "orders_old")),)),
        ),
        (
            "ALTER TABLE orders RENAME AS shop.orders_old",
            DdlEffects(table_renames=(TableRename(TableName(None, "orders"), TableName("shop", "orders_old")),)),
        ),
        (
            "RENAME TABLE shop.a TO shop.b, c TO d",
            DdlEffects(
                table_renames=(
                    TableRename(TableName("shop", "a"), TableName("shop", "b")),
                    TableRename(TableName(None, "c"), TableName(None, "d")),
                )
            ),
        ),
        ("DROP TABLE IF EXISTS `inventory`.`orders`", DdlEffects(dropped_tables=(TableName("inventory", "orders"),))),
        ("DROP TEMPORARY TABLE a, b", DdlEffects(dropped_tables=(TableName(None, "a"), TableName(None, "b")))),
        (
            "/* ApplicationName=DBeaver */ ALTER TABLE t RENAME COLUMN a TO b",
            DdlEffects(column_renames=(ColumnRename(TableName(None, "t"), "a", "b"),)),
        ),
        ("CREATE TABLE t (id INT PRIMARY KEY)", DdlEffects()),
        ("SET character_set_server=utf8mb4, collation_server=utf8mb4_general_ci", DdlEffects()),
    ],
)
def test_effects_of_statements(sql, expected):
    assert ddl_effects(sql) == expected


def test_unreadable_table_statement_is_an_error_naming_it():
    with pytest.raises(DdlParseError, match="ALTER TABLE t CHANGE"):
        ddl_effects("ALTER TABLE t CHANGE a")


def test_table_name_matches_with_default_database():
    assert TableName(None, "orders").matches("inventory", "orders", default_db="inventory")
    assert TableName("inventory", "orders").matches("inventory", "orders")
    assert not TableName("other", "orders").matches("inventory", "orders", default_db="inventory")
    assert not TableName(None, "Orders").matches("inventory", "orders", default_db="inventory")


def test_split_statements_respects_strings_and_comments():
    sql = "INSERT INTO t VALUES ('a;b'); -- c; d\nALTER TABLE t ADD x INT;\n\n"
    assert split_statements(sql) == ["INSERT INTO t VALUES ('a;b')", "ALTER TABLE t ADD x INT"]


_T = TableName(None, "t")

VALID_BUT_UNPARSED = [
    # (statement, effects): valid MariaDB 10.11/11 or MySQL 8.4/9 (their manuals' ALTER TABLE
    # syntax) that sqlglot keeps as a command; read word by word (effects_from_tokens)
    ("ALTER TABLE h_other ADD COLUMN c1 INT NULL INVISIBLE", DdlEffects()),
    ("ALTER TABLE t ADD COLUMN (c INT, d INT)", DdlEffects()),
    ("ALTER TABLE t ADD COLUMN p POINT SRID 4326", DdlEffects()),
    ("ALTER TABLE t ADD COLUMN g GEOMETRY NOT NULL SRID 0", DdlEffects()),
    ("ALTER TABLE t ADD COLUMN ip INET6", DdlEffects()),
    ("ALTER TABLE t ADD COLUMN ip4 INET4", DdlEffects()),
    ("ALTER TABLE t MODIFY c INT INVISIBLE", DdlEffects()),
    (
        "ALTER TABLE t ADD COLUMN c1 INT INVISIBLE, RENAME COLUMN a TO b",
        DdlEffects(column_renames=(ColumnRename(_T, "a", "b"),)),
    ),
    (
        "ALTER TABLE t ADD COLUMN ip INET6, CHANGE COLUMN `old` `new` INET6 NOT NULL",
        DdlEffects(column_renames=(ColumnRename(_T, "old", "new"),)),
    ),
    (
        "ALTER TABLE `db`.`t` ADD COLUMN x INT INVISIBLE, DROP COLUMN IF EXISTS y, DROP INDEX ix, DROP PRIMARY KEY",
        DdlEffects(dropped_columns=((TableName("db", "t"), "y"),)),
    ),
    (
        "ALTER TABLE t ADD COLUMN ip INET6, RENAME AS u",
        DdlEffects(table_renames=(TableRename(_T, TableName(None, "u")),)),
    ),
]


@pytest.mark.parametrize(("sql", "expected"), VALID_BUT_UNPARSED)
def test_valid_statements_sqlglot_cannot_parse_are_read_word_by_word(sql, expected):
    with pytest.raises(DdlParseError):
        parse_statement(sql)  # the parser cannot: the words can
    assert ddl_effects(sql) == expected


def test_a_statement_nobody_can_read_stops_only_the_tables_it_names():
    from cdclake.errors import SchemaChangeError
    from cdclake.model.schema_changes import changes_from_record

    def record(ddl: str) -> str:
        source = {"file": "mysql-bin.000003", "pos": 900, "row": 0, "snapshot": "false", "server_id": 1}
        return json.dumps({"source": source, "databaseName": "inventory", "ddl": ddl, "tableChanges": []})

    unreadable = "ALTER TABLE h_other CHANGE a"  # tokenizes, but neither parses nor reads
    assert changes_from_record(record(unreadable), '"inventory"."orders"', 0, 12) == []
    with pytest.raises(SchemaChangeError, match=r"(?s)offset 12: .*may rename table \"inventory\".\"h_other\""):
        changes_from_record(record(unreadable), '"inventory"."h_other"', 0, 12)
    # valid DDL of an unconfigured table that sqlglot cannot parse: no table stops
    for sql, _ in VALID_BUT_UNPARSED:
        assert changes_from_record(record(sql), '"inventory"."orders"', 0, 12) == []
