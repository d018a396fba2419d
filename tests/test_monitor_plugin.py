"""The "CDC tables" plugin without a server: Airflow's plugin loader finds it cheaply, and the page
escapes every value and draws the per-hour plot (the browser test is tests/e2e/test_monitor.py)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap

from cdclake.model.status import Activity, LastCommit, RunFailure, TableStatus
from cdclake.settings import PROJECT_ROOT, Settings
from cdclake_airflow.monitor import format_duration, hourly_svg, render_page, run_problem
from cdclake_dev.airflow_env import airflow_env

HEAVY = ("fastapi", "airflow.api_fastapi.core_api.security", "pyiceberg", "confluent_kafka", "pyspark")


def test_airflow_loads_the_plugin_without_heavy_imports():
    code = """
        import json, sys
        from airflow import plugins_manager
        plugins, errors = plugins_manager._get_plugins()
        mine = [p for p in plugins if p.name == "cdclake_monitor"]
        print(json.dumps({
            "found": len(mine),
            "errors": errors,
            "apps": [{k: v for k, v in a.items() if k != "app"} for p in mine for a in p.fastapi_apps],
            "views": [v for p in mine for v in p.external_views],
            "heavy": [m for m in HEAVY if m in sys.modules],
        }))
    """.replace("HEAVY", repr(HEAVY))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=airflow_env(Settings.from_env()),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["found"] == 1 and result["errors"] == {}
    assert result["apps"] == [{"url_prefix": "/cdc", "name": "CDC tables"}]
    view, docs = result["views"]
    assert view["name"] == "CDC tables" and view["href"] == "cdc/" and view["url_route"] == "cdc-tables"
    assert view["destination"] == "nav" and view["nav_top_level"] is True  # a button of the nav bar
    # the project's docs in the UI's Docs menu, served by the plugin's app
    assert docs == {
        "name": "cdclake docs",
        "href": "cdc/README.md",
        "url_route": "cdclake-docs",
        "destination": "nav",
        "category": "docs",
    }
    assert result["heavy"] == []


def _payload(**fields) -> dict:
    base = {
        "name": "orders",
        "identifier": "shop.orders",
        "topic": "mariadb.shop.orders",
        "checked_at_ms": 1_700_000_000_000,
        "table_exists": True,
        "topic_exists": True,
    }
    status = TableStatus(**{**base, **fields})
    return {
        "checked_at_ms": status.checked_at_ms,
        "kafka": "Airflow connection kafka_default",
        "tables": [{**status.model_dump(mode="json"), "dag_id": "cdc_orders", "last_run": None}],
    }


def test_the_page_escapes_every_value():
    page = render_page(
        _payload(
            topic="t<script>alert(1)</script>",
            problems=['<img src=x onerror="alert(1)">', "offsets & watermarks"],
        )
        | {"kafka": "<b>kafka</b>"}
    )
    assert "<script>alert" not in page and "<img src=x" not in page and "<b>kafka" not in page
    assert "t&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<li>&lt;img src=x onerror=&#34;alert(1)&#34;&gt;</li><li>offsets &amp; watermarks</li>" in page
    assert '<tr class="problems" data-table="orders">' in page


def test_the_page_shows_the_figures():
    page = render_page(
        _payload(
            lag_events=7,
            lag_ms=125_000,
            lag_basis="source_ts",
            last_commit=LastCommit(
                snapshot_id=42, committed_at_ms=1_699_999_940_000, age_ms=60_000, run_id="r1", events=9
            ),
            events_per_hour=[0] * 22 + [3, 9],
            activity_24h=Activity(commits=2, events=12, ops={"u": 4, "c": 7, "d": 1}),
            freshness_minutes=5,
            fresh=True,
            schema_id=3,
            column_count=8,
        )
    )
    assert '<td class="lag-events num">7</td>' in page
    assert '<span class="snapshot-id">42</span>' in page
    assert ">2m05s<" in page and "1m00s ago" in page and ">fresh<" in page
    assert page.index('data-op="c"') < page.index('data-op="u"') < page.index('data-op="d"')
    assert "12 events, 2 commits" in page
    assert '<tr class="problems"' not in page
    assert "<script" not in page  # no JavaScript
    row = page.split('<tr class="table-row"')[1].split("</tr>")[0]
    assert row.count("<td") == page.count("<th>")  # a cell per column


def test_a_table_whose_runs_fail_shows_failing_and_why():
    failure = RunFailure.after(
        None,
        state="failing",
        at_ms=1_699_999_000_000,
        run_id="scheduled__1",
        task_id="apply",
        try_number=1,
        error=ValueError("<b>topic 'x'</b>: all 2 record(s) of this run were quarantined\nThe quarantine ..."),
    )
    problem = failure.describe(1_700_000_000_000)
    page = render_page(_payload(run_failure=failure, freshness_minutes=5, fresh=False, problems=[problem]))
    cell = page.split('<td class="fresh">')[1].split("</td>")[0]
    assert ">failing</span>" in cell and "1 failed try: ValueError: &lt;b&gt;topic" in cell
    assert "<li>its DAG&#39;s runs are failing: 1 failed try since the first, 16m40s ago" in page
    assert "<b>topic" not in page


def test_a_caught_up_table_shows_caught_up_not_the_age_of_its_newest_event():
    day = 86_400_000
    page = render_page(
        _payload(
            lag_events=0,
            caught_up=True,
            last_event_age_ms=2386 * day,
            lag_ms=0,
            lag_basis="caught_up",
            freshness_minutes=5,
            fresh=True,
        )
    )
    cell = page.split('<td class="lag-time">')[1].split("</td>")[0]
    assert ">caught up</span>" in cell and "newest event 2386d00h old" in cell and ">2386d" not in cell


def test_a_replay_is_marked_and_not_counted_as_new_source_activity():
    page = render_page(
        _payload(
            last_commit=LastCommit(
                snapshot_id=2**62 + 1,
                committed_at_ms=1_699_999_940_000,
                age_ms=60_000,
                run_id="r",
                events=9,
                replay=True,
            ),
            activity_24h=Activity(commits=1, events=3, ops={"c": 3}, replays=1, replay_events=9),
            events_per_hour=[0] * 23 + [3],
        )
    )
    commit = page.split('<td class="last-commit">')[1].split("</td>")[0]
    assert ">replay</span>" in commit and f'<span class="snapshot-id">{2**62 + 1}</span>' in commit
    hourly = page.split('<td class="hourly">')[1].split("</td>")[0]
    assert "3 events, 1 commit" in hourly and "1 replay (9 events) not counted" in hourly
    assert 'data-events="3"' in hourly and 'data-events="9"' not in hourly


def test_the_page_has_a_legend_of_the_debezium_ops():
    legend = render_page(_payload()).split('id="legend">')[1].split("</div>")[0]
    for op, name in (("c", "create"), ("u", "update"), ("d", "delete"), ("r", "snapshot read"), ("t", "truncate")):
        assert f"<b>{op}</b> {name}" in legend


def test_a_failed_newest_run_without_a_failure_record_is_a_problem():
    failed = {"run_id": "manual__1", "state": "failed"}
    assert run_problem({"run_failure": None}, failed) == "its DAG's newest run 'manual__1' failed: see its log"
    assert run_problem({"run_failure": {"state": "failing"}}, failed) is None  # the record says more
    assert run_problem({"run_failure": None}, {"run_id": "x", "state": "success"}) is None
    assert run_problem({"run_failure": None}, None) is None


def test_a_warning_shows_in_the_problems_row_and_leaves_the_table_fresh():
    warning = "connector modes contradict (1 column in the last CDC commit, snapshot 42; ...): column '<b>price</b>'"
    page = render_page(_payload(freshness_minutes=5, fresh=True, warnings=[warning]))
    assert '<tr class="problems" data-table="orders">' in page and ">fresh</span>" in page
    assert (
        '<li class="warning">warning: connector modes contradict (1 column in the last CDC commit, snapshot 42; '
        "...): column &#39;&lt;b&gt;price&lt;/b&gt;&#39;</li>" in page
    )


def test_the_page_shows_the_last_whole_transaction_and_the_records_waiting_for_one():
    from cdclake.model.transactions import TransactionStatus

    waiting = TransactionStatus(last_id="0-1-<7>", last_position="1:1200:0:3", waiting_events=3, waiting_for="0-1-8")
    page = render_page(_payload(transactions=waiting))
    cell = page.split('<td class="transactions">')[1].split("</td>")[0]
    assert '<span class="transaction-id" title="its last event at 1:1200:0:3">0-1-&lt;7&gt;</span>' in cell
    assert '<div class="sub waiting" title="for transaction 0-1-8">3 records wait</div>' in cell
    assert "last transaction" in page.split("</thead>")[0]
    none_yet = render_page(_payload(transactions=TransactionStatus()))
    assert '<td class="transactions"><span class="muted">none yet</span></td>' in none_yet
    assert 'title="the table does not commit whole source transactions">-</span>' in render_page(_payload())


def test_hourly_plot_bars_are_proportional_to_the_busiest_hour():
    svg = hourly_svg([0, 1, 50, 100])
    assert svg.count('class="bar"') == 4
    heights = [int(part.split('"')[0]) for part in svg.split('height="')[2:]]  # the first is the svg's
    assert heights == [0, 1, 16, 32]
    assert 'data-events="100"' in svg and "the last hour: 100 events" in svg


def test_format_duration():
    assert [format_duration(ms) for ms in (None, 999, 61_000, 3_780_000, 183_600_000)] == [
        "-",
        "0s",
        "1m01s",
        "1h03m",
        "2d03h",
    ]


def test_a_thousand_tables_page_shows_one_page_behind_their_target_first_and_a_summary():
    from cdclake_airflow.monitor_listing import paged_payload

    def row(i: int) -> dict:
        fresh = False if i in (17, 503, 998) else None if i % 4 == 0 else True
        return {**_payload(name=f"t{i:04d}", fresh=fresh)["tables"][0], "dag_id": f"cdc_t{i:04d}"}

    payload = _payload() | {"tables": [row(i) for i in range(1000)]}
    first = paged_payload(payload)
    assert [r["name"] for r in first["tables"]][:4] == ["t0017", "t0503", "t0998", "t0000"]
    assert len(first["tables"]) == 50
    assert first["listing"] | {"counts": None} == {
        "page": 1,
        "pages": 20,
        "page_size": 50,
        "matched": 1000,
        "total": 1000,
        "name": None,
        "state": None,
        "counts": None,
        "behind": ["t0017", "t0503", "t0998"],
    }
    assert first["listing"]["counts"] == {"behind": 3, "fresh": 747, "unjudged": 250}
    page = render_page(first)
    assert page.count('<tr class="table-row"') == 50
    assert '<div class="summary" id="summary">1000 tables: <b>3 behind their freshness target</b>' in page
    assert '<a href="?name=t0503" class="behind-table">t0503</a>' in page
    assert "page 1 of 20" in page and 'href="?page=2"' in page and "previous" not in page

    by_name = paged_payload(payload, name="T05", page=2, page_size=4)  # t0500..t0599: 100 tables
    # t0503 (behind) heads page 1: t0503, t0500, t0501, t0502
    assert [r["name"] for r in by_name["tables"]] == ["t0504", "t0505", "t0506", "t0507"]
    assert by_name["listing"]["matched"] == 100 and by_name["listing"]["pages"] == 25
    behind = paged_payload(payload, state="behind", page=9)  # past the end: the last page
    assert [r["name"] for r in behind["tables"]] == ["t0017", "t0503", "t0998"] and behind["listing"]["page"] == 1
    assert 'href="?name=T05&amp;page_size=4&amp;page=3"' in render_page(by_name)


def test_the_page_shows_each_table_groups_position_and_its_age():
    from cdclake.model.groups import GroupStatus

    published = GroupStatus("bank", ("accounts", "ledger"), "db1.transaction", 120, 1_700_000_000_000 - 95_000)
    fresh = GroupStatus("<b>shop</b>", ("orders",), "db1.transaction")
    page = render_page(_payload() | {"groups": [dataclasses.asdict(published), dataclasses.asdict(fresh)]})
    items = page.split('<ul id="cdc-groups">')[1].split("</ul>")[0]
    assert items == (
        "<li>group bank (accounts, ledger): tag cdc_group_bank at db1.transaction offset 120, published 95 s ago</li>"
        "<li>group &lt;b&gt;shop&lt;/b&gt; (orders): tag cdc_group_&lt;b&gt;shop&lt;/b&gt; not published yet</li>"
    )
    assert 'id="cdc-groups"' not in render_page(_payload())
    # a group published by pointer (CDCLAKE_GROUP_COMMIT=pointer), a publish half-way: read at the position's tag
    pointer = GroupStatus("bank", ("accounts", "ledger"), "db1.transaction", 120, 1_700_000_000_000 - 5_000)
    pointer = dataclasses.replace(pointer, read_ref="cdc_group_bank-at-120", moving=True)
    page = render_page(_payload() | {"groups": [dataclasses.asdict(pointer)]})
    assert page.split('<ul id="cdc-groups">')[1].split("</ul>")[0] == (
        "<li>group bank (accounts, ledger): tag cdc_group_bank-at-120 at db1.transaction offset 120, published 5 s "
        "ago (members moving to a newer position)</li>"
    )


def test_a_table_of_a_shared_dag_links_its_last_run_to_the_shared_dag():
    payload = _payload()
    run = {"run_id": "scheduled__1", "state": "failed", "end_date_ms": 1_699_999_990_000}
    payload["tables"][0] |= {"scheduled_dag_id": "cdc_shared_shop", "last_run": run}
    page = render_page(payload)
    assert 'href="../dags/cdc_shared_shop/runs/scheduled__1"' in page
    payload["tables"][0] |= {"scheduled_dag_id": "cdc_orders"}
    assert 'href="../dags/cdc_orders/runs/scheduled__1"' in render_page(payload)


def _row_of(page: str) -> str:
    return page.split('<tr class="table-row"')[1].split("</tr>")[0]


def test_a_paused_table_is_said_paused_not_fresh():
    """The DAG that runs a table on schedule is paused: the page says so next to the table, and a
    table within its freshness target is *paused*, not *fresh* (not judged: no run applies new
    events); one past its target stays *late*; an unpaused DAG is *active*."""
    from cdclake_airflow.monitor import judge_paused

    row = _payload(freshness_minutes=5, fresh=True)["tables"][0]
    judge_paused(row, True)
    assert (row["paused"], row["fresh"]) == (True, None)  # not counted fresh by the summary or the filter
    page = render_page(_payload() | {"tables": [row]})
    assert page.split('<td class="fresh">')[1].split("</td>")[0] == (
        '<span class="badge paused" title="its DAG is paused: not judged while no run applies new events">paused</span>'
    )
    assert '<span class="dag-state paused"' in _row_of(page) and ">fresh<" not in _row_of(page)
    late = _payload(freshness_minutes=5, fresh=False)["tables"][0]
    judge_paused(late, True)
    assert late["fresh"] is False and ">late</span>" in render_page(_payload() | {"tables": [late]})
    active = _payload(freshness_minutes=5, fresh=True)["tables"][0]
    judge_paused(active, False)
    page = render_page(_payload() | {"tables": [active]})
    assert active["fresh"] is True and ">fresh</span>" in page and '<span class="dag-state active"' in page
    unknown = _payload()["tables"][0]
    judge_paused(unknown, None)
    assert ">not in Airflow yet</span>" in render_page(_payload() | {"tables": [unknown]})


def test_each_table_links_to_its_dag_its_asset_and_its_last_task_log():
    payload = _payload()
    run = {"run_id": "scheduled__1", "state": "success", "end_date_ms": 1_699_999_990_000}
    payload["tables"][0] |= {
        "scheduled_dag_id": "cdc_orders",
        "last_run": run,
        "log_task_id": "apply",
        "asset_uri": "iceberg://lake/shop/orders",
        "asset_id": 7,
        "paused": False,
    }
    cell = render_page(payload).split('<td class="table">')[1].split("</td>")[0]
    assert '<div class="name"><a href="../dags/cdc_orders" target="_top"' in cell and ">orders</a></div>" in cell
    assert '<a href="../assets/7" target="_top"' in cell and ">iceberg://lake/shop/orders</a>" in cell
    last_run = render_page(payload).split('<td class="last-run">')[1].split("</td>")[0]
    assert '<a class="task-log" href="../dags/cdc_orders/runs/scheduled__1/tasks/apply" target="_top"' in last_run
    payload["tables"][0] |= {"asset_id": None}  # no event yet: Airflow does not know the asset
    assert "iceberg://lake/shop/orders</span>" in render_page(payload)


def test_the_task_whose_log_tells_a_run_follows_the_engine_and_the_shared_dag():
    from cdclake_airflow.monitor import log_task_ids
    from tests.conftest import make_table

    connect, submit = make_table(name="a"), make_table(name="b", engine="submit")
    shared = [make_table(name=n, shared_dag="fleet", tables_per_task=2) for n in ("s1", "s2", "s3")]
    tasks = log_task_ids(Settings.from_env(), [connect, submit, *shared])
    assert tasks == {"a": "apply", "b": "publish", "s1": "apply_0", "s2": "apply_0", "s3": "apply_1"}


def test_the_page_says_what_its_cells_mean_and_labels_its_filter():
    """Cells a data engineer reads without a legend: the columns and whether the schema changed
    (not "schema 0 / 4 columns"), whether a Debezium snapshot is being applied (not "snapshot run
    no"); the filter's inputs are labelled."""
    from cdclake.model.status import SnapshotInProgress
    from cdclake_airflow.monitor_listing import paged_payload

    page = render_page(paged_payload(_payload(schema_id=0, column_count=4)))
    assert page.split('<td class="schema">')[1].startswith("4 columns\n") and "as created (Iceberg schema 0)" in page
    assert (
        '<td class="snapshot-run"><span class="muted" title="no Debezium full snapshot is being applied">none in progress'
        in page
    )
    assert "<th>snapshot run</th>" not in page and ">no</td>" not in page
    assert '<label for="cdc-filter-name">Table name contains</label> <input id="cdc-filter-name" name="name"' in page
    assert '<label for="cdc-filter-state">State</label> <select id="cdc-filter-state" name="state">' in page
    assert '<option value="" selected>any</option>' in page
    snapshot = SnapshotInProgress(position="1:4:0:0", records=1200, end_applied=True)
    page = render_page(_payload(schema_id=3, column_count=5, snapshot_in_progress=snapshot))
    assert "changed since created (Iceberg schema 3)" in page
    assert "being applied</span>" in page and "1200 records so far; its end applied" in page


def test_the_plugin_serves_the_projects_docs_and_nothing_else():
    """The Docs menu's "cdclake docs": README.md and docs/*.md rendered, their relative links
    kept, headings with GitHub's anchors (the docs link ``operations.md#...``), HTML in the
    Markdown escaped; any other path is 404."""
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    from cdclake_airflow.monitor import create_app, doc_file

    app = create_app()
    app.dependency_overrides[get_user] = lambda: object()
    client = TestClient(app)
    readme = client.get("/README.md")
    assert readme.status_code == 200 and 'href="docs/operations.md"' in readme.text
    operations = client.get("/docs/operations.md")
    assert operations.status_code == 200 and '<h2 id="running-a-table">Running a table</h2>' in operations.text
    errors = client.get("/docs/errors.md")
    assert errors.status_code == 200 and '<h2 id="configerror">ConfigError</h2>' in errors.text
    for path in ("/pyproject.md", "/docs/nope.md", "/docs/..%2Fpyproject.md", "/include/tables.md"):
        assert client.get(path).status_code == 404, path
    assert doc_file("README") is not None and doc_file("operations", "docs") is not None
    assert doc_file("../README", "docs") is None and doc_file("pyproject") is None
    assert doc_file("README", "bench") is None


def test_a_document_escapes_the_html_it_holds(tmp_path):
    from cdclake_airflow.monitor import render_doc

    doc = tmp_path / "x.md"
    doc.write_text("# A <b>title</b>\n\n<script>alert(1)</script> [link](javascript:alert(1))\n")
    page = render_doc(doc, "../")
    assert "<script>alert" not in page and "&lt;script&gt;" in page and 'href="javascript' not in page
    assert "<title>A &lt;b&gt;title&lt;/b&gt; - cdclake docs</title>" in page


def test_the_paused_state_and_the_asset_ids_come_from_airflows_db():
    """The DAGs' paused state and the assets' ids (their UI pages), one query each, from Airflow's
    metadata DB (here its two tables in memory): a DAG or an asset Airflow does not know is left out."""
    from airflow.models.asset import AssetModel
    from airflow.models.dag import DagModel
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from cdclake_airflow.monitor import asset_ids, paused_dags

    engine = create_engine("sqlite://")
    DagModel.metadata.create_all(engine, tables=[DagModel.__table__, AssetModel.__table__])
    with Session(engine) as session:
        session.add_all(
            [
                DagModel(dag_id="cdc_a", is_paused=True, bundle_name="dags-folder"),
                DagModel(dag_id="cdc_b", is_paused=False, bundle_name="dags-folder"),
                AssetModel(name="lake.x.a", uri="iceberg://lake/x/a"),
                AssetModel(name="another name", uri="iceberg://lake/x/a"),
            ]
        )
        session.commit()
        assert paused_dags(session, ["cdc_a", "cdc_b", "cdc_new"]) == {"cdc_a": True, "cdc_b": False}
        (asset_id,) = asset_ids(
            session, [("lake.x.a", "iceberg://lake/x/a"), ("lake.x.b", "iceberg://lake/x/b")]
        ).values()
        assert session.get(AssetModel, asset_id).name == "lake.x.a"
        assert paused_dags(session, []) == {} and asset_ids(session, []) == {}
