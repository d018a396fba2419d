"""Whole source transactions on a real broker, Spark and catalog (:mod:`cdclake.spark.transactions`):
a run commits whole transactions only, one whose ``END`` is not in the transaction topic yet waits
with everything after it (the records left counted in the commit and in the status), and one larger
than ``max_events_per_run`` is applied whole; without transaction metadata a table applies as
under ``transactions: ignore`` and says so."""

from __future__ import annotations

import json
import logging
import uuid

import pytest

from cdclake.errors import TransactionTooLargeError
from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import KafkaClients, ensure_topic
from cdclake.io.refs import committed_offsets, head_snapshot
from cdclake.model.layout import SummaryKeys
from cdclake.pipeline.status import table_status
from cdclake.spark.apply import apply_range
from tests.conftest import make_table, plan_offsets

pytestmark = pytest.mark.integration


class Source:
    """Debezium's records of ``d.accounts`` (payload-only JSON, two partitions by key) and of its
    transaction topic ``<prefix>.transaction``."""

    def __init__(self, kafka: KafkaClients, prefix: str, *, transaction_topic: bool = True) -> None:
        self.kafka, self.prefix = kafka, prefix
        self.topic, self.transactions = f"{prefix}.d.accounts", f"{prefix}.transaction"
        ensure_topic(kafka, self.topic, 2)
        if transaction_topic:
            ensure_topic(kafka, self.transactions, 1)
        self.pos, self.txn = 1000, 0

    def transaction(
        self, changes: list[tuple[int, int]], *, end: bool = True, metadata: bool = True, extra: dict | None = None
    ) -> str:
        """One source transaction setting ``balance`` of each ``(id, balance)``; its END unless
        ``end`` is false (written later with :meth:`end`); without ``metadata``, as a connector
        without ``provide.transaction.metadata`` writes it: no BEGIN/END, no ``transaction`` block.
        ``extra``: more columns of each row's after-image."""
        return self.over_tables({"accounts": changes}, end=end, metadata=metadata, extra=extra)

    def over_tables(
        self,
        changes: dict[str, list[tuple[int, int]]],
        *,
        end: bool = True,
        metadata: bool = True,
        extra: dict | None = None,
    ) -> str:
        """One source transaction over tables of ``d`` (topics ``<prefix>.d.<table>``, made
        beforehand), ``{table: [(id, balance)]}`` in that order; see :meth:`transaction`."""
        txn, producer = f"0-1-{self.txn}", self.kafka.producer()
        self.txn += 1
        if metadata:
            producer.produce(self.transactions, value=json.dumps({"status": "BEGIN", "id": txn}).encode(), partition=0)
        for table, rows in changes.items():
            self._produce(producer, txn, table, rows, metadata, extra or {})
        producer.flush(30)
        if end and metadata:
            self.end(txn, {t: len(rows) for t, rows in changes.items()})
        return txn

    def _produce(
        self, producer, txn: str, table: str, changes: list[tuple[int, int]], metadata: bool, extra: dict
    ) -> None:
        for order, (key, balance) in enumerate(changes, start=1):
            value = {
                "before": None,
                "after": {"id": key, "balance": balance, **extra},
                "op": "c",
                "ts_ms": 1_700_000_000_000,
                "source": {
                    "connector": "mariadb",
                    "server_id": 1,
                    "file": "mysql-bin.000001",
                    "pos": self.pos,
                    "row": 0,
                    "snapshot": "false",
                    "ts_ms": 1_700_000_000_000,
                    "db": "d",
                    "table": table,
                },
                "transaction": {"id": txn, "total_order": order, "data_collection_order": order} if metadata else None,
            }
            self.pos += 100
            key_bytes = json.dumps({"id": key}).encode()
            topic = f"{self.prefix}.d.{table}"
            producer.produce(topic, key=key_bytes, value=json.dumps(value).encode(), partition=key % 2)

    def truncate(self) -> str:
        """A ``TRUNCATE TABLE d.accounts`` as Debezium's MariaDB connector (3.5.0.Final) writes it
        with transaction metadata: a ``BEGIN``, the ``t`` event (no key) carrying the transaction's
        id, and no ``END``."""
        txn, producer = f"0-1-{self.txn}", self.kafka.producer()
        self.txn += 1
        producer.produce(self.transactions, value=json.dumps({"status": "BEGIN", "id": txn}).encode(), partition=0)
        source = {"connector": "mariadb", "server_id": 1, "file": "mysql-bin.000001", "pos": self.pos, "row": 0}
        source |= {"snapshot": "false", "ts_ms": 1_700_000_000_000, "db": "d", "table": "accounts"}
        value = {"before": None, "after": None, "op": "t", "ts_ms": 1_700_000_000_000, "source": source}
        value["transaction"] = {"id": txn, "total_order": 1, "data_collection_order": 1}
        self.pos += 100
        producer.produce(self.topic, value=json.dumps(value).encode(), partition=0)
        producer.flush(30)
        return txn

    def end(self, txn: str, events: int | dict[str, int]) -> None:
        """The END of ``txn``: its events of ``d.accounts``, or per table."""
        counts = {"accounts": events} if isinstance(events, int) else events
        value = {
            "status": "END",
            "id": txn,
            "event_count": sum(counts.values()),
            "data_collections": [{"data_collection": f"d.{t}", "event_count": n} for t, n in counts.items()],
        }
        producer = self.kafka.producer()
        producer.produce(self.transactions, value=json.dumps(value).encode(), partition=0)
        producer.flush(30)


def test_a_commit_holds_whole_transactions_and_a_large_one_is_applied_whole(spark, kafka, stack_settings):
    source = Source(KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap), f"tx{uuid.uuid4().hex[:8]}")
    cfg = make_table(topic=source.topic, value_format="json", columns={"id": "int", "balance": "long"})

    plans = {}

    def run(run_id: str, cap: int = 100, limit: int = 2_000_000):
        capped = cfg.model_copy(update={"max_events_per_run": cap, "max_transaction_events": limit})
        plans[run_id] = plan_offsets(stack_settings, capped, run_id)
        assert plans[run_id].transactions is not None and plans[run_id].transactions.topic == source.transactions
        return apply_range(spark, stack_settings, plans[run_id])

    def balances() -> dict[int, int]:
        rows = load_catalog(stack_settings).load_table(cfg.identifier).scan().to_arrow().to_pylist()
        return {r["id"]: r["balance"] for r in rows}

    def summary() -> dict[str, str]:
        snap = load_catalog(stack_settings).load_table(cfg.identifier).current_snapshot()
        return dict(snap.summary.additional_properties)

    def status():
        return table_status(load_catalog(stack_settings), source.kafka, cfg)

    source.transaction([(1, 100), (2, 100)])  # opening balances: 200 in all
    moved = source.transaction([(1, 70), (2, 130)])  # 30 from 1 to 2
    late = source.transaction([(1, 50), (3, 20)], end=False)  # 20 from 1 to the new 3, END not yet written
    first = run("r1")
    assert first.status == "committed"
    assert balances() == {1: 70, 2: 130}  # the first two, whole; the third waits
    assert json.loads(summary()[SummaryKeys.LAST_TRANSACTION])["id"] == moved
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert sum(committed_offsets(table, cfg.topic).values()) == 4
    # the run says what it applied and what it left: the two records of the third wait
    assert (first.applied_end, first.waiting_events) == (committed_offsets(table, cfg.topic), 2)
    assert json.loads(summary()[SummaryKeys.TRANSACTION_WAIT]) == {"events": 2, "transaction": late}
    assert status().transactions.model_dump() == {
        "last_id": moved,
        "last_position": json.loads(summary()[SummaryKeys.LAST_TRANSACTION])["position"],
        "waiting_events": 2,
        "waiting_for": late,
        "without_metadata": 0,
    }
    # a retry of the task (its plan as the submit engine's XCom holds it, uncut) finds its commit
    retry = apply_range(spark, stack_settings, plans["r1"])
    assert (retry.status, retry.waiting_events) == ("already_applied", 2)
    # the next run holds the third only: nothing to apply, its records wait, and the status says so
    waited = run("r1b")
    assert (waited.status, waited.waiting_events) == ("waiting", 2)
    assert (status().transactions.waiting_events, status().transactions.waiting_for) == (2, late)

    source.end(late, 2)
    assert run("r2").status == "committed"
    assert balances() == {1: 50, 2: 130, 3: 20}
    assert json.loads(summary()[SummaryKeys.LAST_TRANSACTION])["id"] == late
    assert SummaryKeys.TRANSACTION_WAIT not in summary()
    after = status()
    assert (after.transactions.last_id, after.transactions.waiting_events, after.warnings) == (late, 0, [])

    # six events of one transaction, over a run's cap of four (two per partition): applied whole
    big = source.transaction([(k, 10 * k) for k in (1, 2, 3, 4, 5, 6)])
    assert run("r3", cap=4).status == "committed"
    assert balances() == {k: 10 * k for k in range(1, 7)}
    assert json.loads(summary()[SummaryKeys.LAST_TRANSACTION])["id"] == big
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert sum(committed_offsets(table, cfg.topic).values()) == 12

    # one over max_transaction_events: the table stops naming it, nothing applied; raised, it applies
    huge = source.transaction([(k, 100 * k) for k in (1, 2, 3, 4, 5, 6)])
    with pytest.raises(TransactionTooLargeError, match=rf"transaction '{huge}' needs a run of more than 5 records"):
        run("r4", cap=4, limit=5)
    assert balances() == {k: 10 * k for k in range(1, 7)}
    assert run("r5", cap=4, limit=12).status == "committed"
    assert balances() == {k: 100 * k for k in range(1, 7)}


def test_a_truncate_whose_transaction_never_ends_is_applied_with_what_follows(spark, kafka, stack_settings):
    """Debezium (MariaDB, 3.5.0.Final) writes no ``END`` for a ``TRUNCATE``'s transaction; the
    truncate commits alone in the source (an implicit commit), so the run applies it and the whole
    transactions after it instead of waiting for good."""
    source = Source(KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap), f"tt{uuid.uuid4().hex[:8]}")
    cfg = make_table(topic=source.topic, value_format="json", columns={"id": "int", "balance": "long"})
    source.transaction([(1, 100), (2, 100)])
    source.truncate()
    after = source.transaction([(3, 30), (4, 40)])
    result = apply_range(spark, stack_settings, plan_offsets(stack_settings, cfg, "r1"))
    assert (result.status, result.waiting_events) == ("committed", 0)
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert {r["id"]: r["balance"] for r in table.scan().to_arrow().to_pylist()} == {3: 30, 4: 40}
    summary = dict(table.current_snapshot().summary.additional_properties)
    assert json.loads(summary[SummaryKeys.LAST_TRANSACTION])["id"] == after
    assert SummaryKeys.TRANSACTION_WAIT not in summary


def test_a_transaction_applied_whole_past_the_cap_stops_before_the_barrier_change(spark, kafka, stack_settings):
    """A run capped before a barrier change (a RENAME COLUMN: ``capped_before`` and its position in
    the plan, as schema sync sets them) whose transaction is larger than the run's cap reads further
    to apply it whole, but never past the change: the events after it carry the renamed column
    (issue 51: a group member's run failed with ``SchemaError`` on the new name)."""
    from cdclake.model.position import BinlogPosition

    source = Source(KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap), f"tb{uuid.uuid4().hex[:8]}")
    cfg = make_table(
        topic=source.topic, value_format="json", columns={"id": "int", "balance": "long"}, max_events_per_run=2
    )
    source.transaction([(1, 10), (2, 20), (3, 30), (4, 40)])
    barrier = BinlogPosition(1, source.pos, 0, 1)
    source.pos += 100
    source.transaction([(6, 60), (7, 70)], extra={"label": "after the rename"})
    plan = plan_offsets(stack_settings, cfg, "r1")
    assert plan.range.event_count == 2  # the cap, one record per partition
    capped = plan.model_copy(
        update={"capped_before": "RENAME COLUMN note TO label", "barrier_position": barrier.to_text()}
    )
    result = apply_range(spark, stack_settings, capped)
    assert result.status == "committed"
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert {r["id"]: r["balance"] for r in table.scan().to_arrow().to_pylist()} == {1: 10, 2: 20, 3: 30, 4: 40}
    assert committed_offsets(table, cfg.topic) == {0: 2, 1: 2}


@pytest.mark.parametrize("transaction_topic", [False, True], ids=["no-transaction-topic", "events-without-block"])
def test_without_transaction_metadata_a_table_applies_as_today_and_says_so(
    spark, stack_settings, caplog, transaction_topic
):
    """An older connector, or one without ``provide.transaction.metadata``: no transaction topic
    (the planner says so), or one whose events carry no ``transaction`` block (the apply says so).
    Either way the batch is applied as planned, one warning of the run names the setting, and the
    status warns."""
    kafka = KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap)
    source = Source(kafka, f"nt{uuid.uuid4().hex[:8]}", transaction_topic=transaction_topic)
    cfg = make_table(topic=source.topic, value_format="json", columns={"id": "int", "balance": "long"})
    source.transaction([(1, 100), (2, 100)], metadata=False)
    source.transaction([(1, 70), (2, 130)], metadata=False)
    with caplog.at_level(logging.WARNING):
        plan = plan_offsets(stack_settings, cfg, "r1")
        result = apply_range(spark, stack_settings, plan)
    assert (plan.transactions is None) is not transaction_topic
    assert (result.status, result.events, result.waiting_events) == ("committed", 4, 0)
    rows = load_catalog(stack_settings).load_table(cfg.identifier).scan().to_arrow().to_pylist()
    assert {r["id"]: r["balance"] for r in rows} == {1: 70, 2: 130}
    said = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "transactions: whole" in r.getMessage()
    ]
    assert len(said) == 1 and cfg.identifier in said[0] and "provide.transaction.metadata" in said[0]
    st = table_status(load_catalog(stack_settings), kafka, cfg)
    assert st.transactions is not None and st.transactions.without_metadata == 4
    (warning,) = st.warnings
    assert "4 change event(s) without Debezium transaction metadata" in warning


def test_a_group_is_published_where_both_tables_show_the_source_at_one_transaction(spark, kafka, stack_settings):
    """Two tables of a group, applied by their own runs to their stage branches; transactions over
    one or both. Each commit records the transaction-topic positions at which it equals its source
    table, and the group's ``main`` and tag move to the greatest position both share: a reader of
    ``main`` sees money moved between the tables whole, or not at all; a quiet member keeps up through the ``END`` records written
    since its last commit (docs/architecture.md, "Table groups")."""
    from cdclake.pipeline.groups import publish_group

    kafka = KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap)
    source = Source(kafka, f"tg{uuid.uuid4().hex[:8]}")
    ensure_topic(kafka, f"{source.prefix}.d.ledger", 2)
    columns = {"id": "int", "balance": "long"}
    accounts = make_table(topic=source.topic, value_format="json", columns=columns, group="g")
    ledger = make_table(topic=f"{source.prefix}.d.ledger", value_format="json", columns=columns, group="g")
    catalog = load_catalog(stack_settings)

    def run(cfg, run_id: str) -> dict | None:
        assert apply_range(spark, stack_settings, plan_offsets(stack_settings, cfg, run_id)).status == "committed"
        snap = head_snapshot(load_catalog(stack_settings).load_table(cfg.identifier))  # the stage branch's
        text = snap.summary.additional_properties.get(SummaryKeys.TRANSACTION_INTERVAL)
        return None if text is None else json.loads(text)

    def tagged(cfg) -> dict[int, int]:
        """What a reader of the table's ``main`` sees: the group's published state, at the tag."""
        table = load_catalog(stack_settings).load_table(cfg.identifier)
        assert table.current_snapshot().snapshot_id == table.refs()["cdc_group_g"].snapshot_id
        rows = table.scan().to_arrow().to_pylist()
        return {r["id"]: r["balance"] for r in rows}

    # transaction-topic offsets: BEGIN and END of each transaction, from 0
    source.over_tables({"accounts": [(1, 100), (2, 100)], "ledger": [(1, 0)]})  # END at 1
    source.over_tables({"accounts": [(1, 70), (2, 130)]})  # END at 3
    source.over_tables({"ledger": [(1, 30)]})  # END at 5
    last = source.over_tables({"accounts": [(1, 50), (3, 20)], "ledger": [(1, 50)]}, end=False)  # BEGIN at 6
    tx = source.transactions
    assert run(accounts, "a1") == {"topic": tx, "from": 3, "to": 5}  # t4 waits for its END
    assert run(ledger, "l1") == {"topic": tx, "from": 5, "to": 5}
    done = publish_group(catalog, "g", [accounts, ledger], 1000, kafka)
    assert (done.position, done.moved) == (5, True)
    assert (tagged(accounts), tagged(ledger)) == ({1: 70, 2: 130}, {1: 30})

    source.end(last, {"accounts": 2, "ledger": 1})  # END at 7
    assert run(accounts, "a2") == {"topic": tx, "from": 7, "to": 7}
    # accounts holds t4 and ledger not yet: no position both show beyond 5
    assert publish_group(catalog, "g", [accounts, ledger], 2000, kafka).reason == "no position beyond 5 yet"
    assert (tagged(accounts), tagged(ledger)) == ({1: 70, 2: 130}, {1: 30})
    assert run(ledger, "l2") == {"topic": tx, "from": 7, "to": 7}
    assert publish_group(catalog, "g", [accounts, ledger], 3000, kafka).position == 7
    assert (tagged(accounts), tagged(ledger)) == ({1: 50, 2: 130, 3: 20}, {1: 50})

    # ledger moves on, accounts is quiet: its newest commit holds until a transaction touches it
    source.over_tables({"ledger": [(1, 60)]})  # END at 9
    assert run(ledger, "l3") == {"topic": tx, "from": 9, "to": 9}
    assert publish_group(catalog, "g", [accounts, ledger], 4000, None).reason == "no position beyond 7 yet"
    assert publish_group(catalog, "g", [accounts, ledger], 4000, kafka).position == 9
    assert (tagged(accounts), tagged(ledger)) == ({1: 50, 2: 130, 3: 20}, {1: 60})


def test_a_replay_of_a_groups_members_that_reads_every_partition_to_its_end_is_published(spark, kafka, stack_settings):
    """A manual replay from offset 0 of both members of a group, each read to the end of every
    partition: each commit equals its source table at its last transaction, so the group is
    published there; it used to wait for the next source change (conformance, replay phase of
    ``json/group+whole``: the phase's changes never reached ``main``)."""
    from cdclake.pipeline.groups import publish_group

    kafka = KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap)
    source = Source(kafka, f"tr{uuid.uuid4().hex[:8]}")
    ensure_topic(kafka, f"{source.prefix}.d.ledger", 2)
    columns = {"id": "int", "balance": "long"}
    accounts = make_table(topic=source.topic, value_format="json", columns=columns, group="g")
    ledger = make_table(topic=f"{source.prefix}.d.ledger", value_format="json", columns=columns, group="g")
    catalog = load_catalog(stack_settings)
    source.over_tables({"accounts": [(1, 100), (2, 100)], "ledger": [(1, 0)]})  # END at 1
    for cfg in (accounts, ledger):
        assert apply_range(spark, stack_settings, plan_offsets(stack_settings, cfg, "r1")).status == "committed"
    assert publish_group(catalog, "g", [accounts, ledger], 1000, kafka).position == 1
    source.over_tables({"accounts": [(1, 60), (2, 140)], "ledger": [(1, 40)]})  # END at 3
    for cfg in (accounts, ledger):
        plan = plan_offsets(stack_settings, cfg, "replay", replay_from_offsets={0: 0, 1: 0})
        assert plan.replay and apply_range(spark, stack_settings, plan).status == "committed"
    assert publish_group(catalog, "g", [accounts, ledger], 2000, kafka).position == 3
    rows = load_catalog(stack_settings).load_table(accounts.identifier).scan().to_arrow().to_pylist()
    assert {r["id"]: r["balance"] for r in rows} == {1: 60, 2: 140}


def test_capped_runs_of_a_groups_members_meet_at_its_target_so_main_moves_every_round(spark, kafka, stack_settings):
    """Issue 51, item 7: money moved between the two tables of a group in transactions of 2 to 6
    events, caught up by runs capped at 5 and 7 events (``max_events_per_run``) over two partitions,
    so that the members' runs would end at different transactions. Each publish sets the group's
    next target (the greatest transaction-topic position every member's next run reaches); each
    member's run stops there (or reads on to reach it), so after every round of runs (each member
    once, then the publish) the group's ``main`` moves, to a state that keeps the money of both
    tables, and ends equal to the source (docs/architecture.md, "Table groups")."""
    import random

    from cdclake.model.groups import GroupTarget
    from cdclake.model.layout import GROUP_TARGET_PROPERTY
    from cdclake.pipeline.groups import publish_group

    kafka = KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap)
    source = Source(kafka, f"gt{uuid.uuid4().hex[:8]}")
    ensure_topic(kafka, f"{source.prefix}.d.ledger", 2)
    columns = {"id": "int", "balance": "long"}
    caps = {"accounts": 5, "ledger": 7}
    cfgs = {
        name: make_table(
            topic=f"{source.prefix}.d.{name}",
            value_format="json",
            columns=columns,
            group="g",
            max_events_per_run=cap,
        )
        for name, cap in caps.items()
    }
    members = list(cfgs.values())
    catalog = load_catalog(stack_settings)
    rng = random.Random(51)
    books = {name: dict.fromkeys(range(1, 5), 100) for name in caps}
    total = sum(sum(b.values()) for b in books.values())
    source.over_tables({name: list(b.items()) for name, b in books.items()})  # opening balances
    for _ in range(8):
        changes: dict[str, list[tuple[int, int]]] = {}
        if rng.random() < 0.7:  # 1 to 3 legs from accounts of one table to accounts of the other
            src, dst = rng.sample(list(caps), 2)
            for _ in range(rng.randint(1, 3)):
                amount, a, b = rng.randint(1, 9), rng.randint(1, 4), rng.randint(1, 4)
                books[src][a] -= amount
                books[dst][b] += amount
                changes.setdefault(src, []).append((a, books[src][a]))
                changes.setdefault(dst, []).append((b, books[dst][b]))
        else:  # within one table
            table = rng.choice(list(caps))
            a, b = rng.sample(range(1, 5), 2)
            amount = rng.randint(1, 9)
            books[table][a] -= amount
            books[table][b] += amount
            changes[table] = [(a, books[table][a]), (b, books[table][b])]
        source.over_tables(changes)
    assert sum(sum(b.values()) for b in books.values()) == total

    def main_of(cfg) -> dict[int, int]:
        table = load_catalog(stack_settings).load_table(cfg.identifier)
        tag = table.refs().get("cdc_group_g")
        current = table.current_snapshot()
        assert (None if current is None else current.snapshot_id) == (None if tag is None else tag.snapshot_id)
        return {r["id"]: r["balance"] for r in table.scan().to_arrow().to_pylist()} if current else {}

    worked, moved, positions, behind = [], [], [], []
    for n in range(30):
        committed = 0
        for name, cfg in cfgs.items():
            plan = plan_offsets(stack_settings, cfg, f"{name}-{n}")
            if not plan.range.is_empty:
                committed += apply_range(spark, stack_settings, plan).status == "committed"
        done = publish_group(catalog, "g", members, 1000 + n, kafka)
        shown = [main_of(cfg) for cfg in members]
        if any(shown):  # never a transfer half applied: the money of both tables is whole
            assert sum(sum(s.values()) for s in shown) == total, (n, done, shown)
        if done.moved:
            moved.append(n)
            positions.append(done.position)
        heads = [head_snapshot(load_catalog(stack_settings).load_table(c.identifier)) for c in members]
        stage = [h.summary.additional_properties.get(SummaryKeys.TRANSACTION_INTERVAL) if h else None for h in heads]
        print(f"round {n}: {committed} commit(s), stage {stage}, published {done.position}, target {done.target}")
        if not committed:
            break
        worked.append(n)
        # where the slowest member's stage branch is (its newest commit's position) is published
        starts = [json.loads(s)["from"] for s in stage if s]
        if len(starts) < len(members) or done.position is None or min(starts) > done.position:
            behind.append(n)
    else:
        raise AssertionError("not caught up in 30 rounds")
    # every round of runs from the second on moved main (the first runs had no target yet), to
    # the slowest member's newest commit at least
    assert len(worked) >= 4, worked
    assert [n for n in worked[1:] if n not in moved] == [], (worked, moved, positions)
    assert [n for n in worked[1:] if n in behind] == [], (worked, positions, behind)
    assert positions == sorted(positions)
    assert [main_of(cfg) for cfg in members] == [books[name] for name in cfgs]
    properties = load_catalog(stack_settings).load_table(members[0].identifier).properties
    target = GroupTarget.from_text(properties.get(GROUP_TARGET_PROPERTY))
    assert target is not None and target.group == "g"
