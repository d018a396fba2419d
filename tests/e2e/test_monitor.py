"""The "CDC tables" page of the Airflow UI (plugin ``plugins/cdclake_monitor_plugin.py``) in a real
browser: a table applied by its DAG with events left unapplied, a real ``airflow api-server`` with
the simple auth manager (login on), and Debian's Chromium driven by Playwright.

What a user sees is asserted against what is stored: the lag equals the records left in the
topic, the last DAG run's state is the run's, the per-hour plot and the counts by op are those of
the applied events, and the JSON endpoint answers the same figures. Without a login the page
sends the browser to the login page and the JSON endpoint answers 401. A second table whose run
quarantined every record shows its failure (state, failed tries, error) until a run succeeds. The
tables' DAGs are paused (on creation): the page says so and links each table to its DAG, its asset
(whose page shows what it is) and its last task log; the UI's Docs menu opens the project's docs.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import requests
import yaml

from cdclake.io.catalog import load_catalog
from cdclake.io.events import load_events, read_event_file
from cdclake.io.kafka import ensure_topic
from cdclake.model.config import load_tables
from cdclake.model.replay import OFFSETS_ALLOWED, TIMESTAMP_ALLOWED
from cdclake.pipeline.status import status_of_tables
from cdclake.settings import PROJECT_ROOT
from cdclake_dev.airflow_env import airflow_env
from cdclake_dev.cli import ensure_airflow_db, run_table_dag
from cdclake_dev.process import free_port

pytestmark = pytest.mark.e2e

TABLE = "ui_products"
STUCK = "ui_stuck"
"""A table whose only records are malformed: its run quarantines them all and fails."""
APPLIED = 12
"""Events of the products capture applied by the DAG run; the rest stay in the topic."""
USER, ROLE = "admin", "admin"


def _chromium() -> str:
    path = os.environ.get("CDCLAKE_TEST_CHROMIUM") or shutil.which("chromium")
    if not path:
        pytest.fail("no chromium on PATH: `make setup` installs Debian's chromium (include/scripts/setup.sh)")
    return path


@pytest.fixture(scope="module")
def applied(stack_settings, kafka, fixtures_dir, tmp_path_factory):
    """The table ``ui_products``: the first 12 events of the products capture applied by a run of
    its DAG, the rest produced after it. Returns ``(config, unapplied count, ops of the applied)``."""
    stack_settings.tables_config.write_text(
        yaml.safe_dump(
            {
                "defaults": {"schedule": None, "retries": 0, "tags": ["test"]},
                "tables": [
                    {
                        "name": TABLE,
                        "topic": "ui.inventory.products",
                        "namespace": "ui",
                        "table": "products",
                        "primary_key": ["id"],
                        "freshness_minutes": 60,
                        # its capture has no transaction metadata: under whole, a warning row
                        "transactions": "ignore",
                    },
                    {
                        "name": STUCK,
                        "topic": "ui.inventory.stuck",
                        "namespace": "ui",
                        "table": "stuck",
                        "primary_key": ["id"],
                        "value_format": "json",
                        "columns": {"id": "int", "v": "string"},
                        "freshness_minutes": 60,
                        # a retry would find nothing to do and succeed: the error is not retried
                        "retries": 1,
                        "retry_delay_s": 1,
                    },
                ],
            }
        )
    )
    ensure_airflow_db(stack_settings)
    cfg = load_tables(stack_settings.tables_config).get(TABLE)
    values = read_event_file(fixtures_dir / "flink/debezium-data-schema-include.txt")
    tmp = tmp_path_factory.mktemp("monitor")
    (tmp / "first.jsonl").write_bytes(b"\n".join(values[:APPLIED]))
    (tmp / "rest.jsonl").write_bytes(b"\n".join(values[APPLIED:]))
    load_events(tmp / "first.jsonl", cfg, kafka, partitions=3)
    assert run_table_dag(TABLE, stack_settings) == 0
    load_events(tmp / "rest.jsonl", cfg, kafka, partitions=3)
    ops = Counter(json.loads(v)["payload"]["op"] for v in values[:APPLIED])
    ensure_topic(kafka, "ui.inventory.stuck", 1)
    producer = kafka.producer()
    for value in (b"not json", b'{"op": "c"}'):
        producer.produce("ui.inventory.stuck", key=b'{"id": 1}', value=value, partition=0)
    producer.flush(30)
    assert run_table_dag(STUCK, stack_settings) != 0
    return cfg, len(values) - APPLIED, dict(ops)


@pytest.fixture(scope="module")
def api_server(stack_settings, applied, tmp_path_factory):
    """A real ``airflow api-server`` (simple auth manager, login on) with the test stack's Airflow
    environment on a free loopback port; yields ``(base URL, password of admin)``; stopped at the
    end of the module."""
    home = tmp_path_factory.mktemp("api-server")
    password = secrets.token_urlsafe(12)
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({USER: password}))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = airflow_env(stack_settings)
    env.update(
        {
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__BASE_URL": base,
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:{ROLE}",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        }
    )
    log_path = home / "api-server.log"
    airflow = str(Path(sys.executable).parent / "airflow")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [airflow, "api-server", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=PROJECT_ROOT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"airflow api-server exited ({proc.returncode}):\n{log_path.read_text()[-5000:]}")
            try:
                if requests.get(f"{base}/api/v2/monitor/health", timeout=5).status_code == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"airflow api-server did not answer within 120 s:\n{log_path.read_text()[-5000:]}")
            time.sleep(0.5)
        yield base, password
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=_chromium(), headless=True)
        yield chromium
        chromium.close()


def _signed_in(browser, base: str, password: str):
    """A browser context signed in as ``admin`` through the simple auth manager's login page."""
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base}/cdc/")
    page.get_by_label("Username").fill(USER)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}/cdc/", timeout=30_000)
    page.close()
    return context


def test_without_login_the_page_and_its_json_are_refused(api_server, browser):
    base, _ = api_server
    r = requests.get(f"{base}/cdc/api/tables", timeout=30)
    assert r.status_code == 401
    assert TABLE not in r.text
    r = requests.get(f"{base}/cdc/", timeout=30, allow_redirects=False)
    assert r.status_code == 303 and "/auth/login" in r.headers["location"]
    r = requests.get(f"{base}/cdc/api/tables", headers={"Authorization": "Bearer not-a-token"}, timeout=30)
    assert r.status_code in (401, 403)

    page = browser.new_context().new_page()
    page.goto(f"{base}/cdc/")
    page.get_by_role("button", name="Sign in").wait_for()
    assert "/auth/login" in page.url
    assert page.locator("#cdc-tables").count() == 0
    page.context.close()


def test_the_page_shows_what_is_stored(api_server, browser, applied, stack_settings):
    base, password = api_server
    cfg, unapplied, ops = applied
    snapshot_id = load_catalog(stack_settings).load_table(cfg.identifier).current_snapshot().snapshot_id

    context = _signed_in(browser, base, password)
    page = context.new_page()
    page.goto(f"{base}/cdc/")

    row = page.locator(f'tr.table-row[data-table="{TABLE}"]')
    row.wait_for()
    assert row.locator("td.table .name").inner_text() == TABLE
    assert cfg.identifier in row.locator("td.table").inner_text()
    assert row.locator("td.table .name a").get_attribute("href") == f"../dags/cdc_{TABLE}"
    assert row.locator("td.table .dag-state").inner_text() == "paused"  # paused on creation
    assert row.locator("td.lag-events").inner_text() == str(unapplied)
    assert row.locator("td.last-run a.state").inner_text() == "success"
    assert row.locator("td.last-run a.task-log").get_attribute("href").endswith("/tasks/apply")
    assert row.locator("td.last-commit .snapshot-id").inner_text() == str(snapshot_id)
    assert row.locator("td.fresh").inner_text() == "late"  # events wait, and the fixture's source time is old
    assert row.locator("td.quarantine").inner_text() == "0"
    # the plot: 24 bars, the applied events in the newest hour, drawn
    bars = row.locator("td.hourly svg rect.bar")
    assert bars.count() == 24
    drawn = [
        (int(bars.nth(i).get_attribute("data-events")), float(bars.nth(i).get_attribute("height"))) for i in range(24)
    ]
    assert sum(n for n, _ in drawn) == APPLIED
    assert drawn[-1][0] == APPLIED and drawn[-1][1] > 0
    assert all(h == 0 for n, h in drawn if n == 0)
    seen_ops = {op.get_attribute("data-op"): int(op.inner_text().split()[-1]) for op in row.locator("td.ops .op").all()}
    assert seen_ops == ops
    # a table without problems has no problems row
    assert page.locator(f'tr.problems[data-table="{TABLE}"]').count() == 0
    assert "t truncate" in page.locator("#legend").inner_text()  # what c/u/d/r/t mean

    # the JSON endpoint, with the browser's login cookie: the same figures
    r = context.request.get(f"{base}/cdc/api/tables")
    assert r.status == 200
    (table,) = [t for t in r.json()["tables"] if t["name"] == TABLE]
    assert table["lag_events"] == unapplied
    assert table["last_commit"]["snapshot_id"] == str(snapshot_id)  # 64-bit ids are strings in JSON
    assert table["last_run"]["state"] == "success"
    assert table["last_run"]["end_date_iso"].endswith("Z") and table["checked_at_iso"].endswith("Z")  # ISO 8601
    assert table["activity_24h"]["ops"] == ops
    assert table["events_per_hour"] == [n for n, _ in drawn]
    assert table["open_quarantine"] == 0 and table["fresh"] is False and table["problems"] == []
    assert r.json()["kafka"] == "Airflow connection kafka_default"
    assert table["paused"] is True and table["log_task_id"] == "apply"
    assert table["asset_uri"] == "iceberg://lake/ui/products" and table["asset_id"] is not None

    # the table whose every record was quarantined: its run failed once, not retried, and says why
    stuck = page.locator(f'tr.table-row[data-table="{STUCK}"]')
    assert stuck.locator("td.fresh").inner_text() == "failing"
    assert stuck.locator("td.last-run a.state").inner_text() == "failed"
    assert stuck.locator("td.quarantine").inner_text() == "2"
    problem = page.locator(f'tr.problems[data-table="{STUCK}"]').inner_text()
    assert "its DAG's runs are failing: 1 failed try since the first" in problem
    assert (
        "QuarantinedBatchError: topic 'ui.inventory.stuck' (partition 0 offsets [0, 2)): all 2 record(s) of this "
        "run were quarantined" in problem
    )
    (failing,) = [t for t in r.json()["tables"] if t["name"] == STUCK]
    assert failing["run_failure"]["state"] == "failing" and failing["run_failure"]["failed_tries"] == 1
    assert (failing["run_failure"]["task_id"], failing["run_failure"]["try_number"]) == ("apply", 1)
    assert failing["fresh"] is False and failing["lag_events"] == 0  # caught up, but stuck: not fresh

    # the nav entry of the Airflow UI opens the page in the UI's frame
    page.goto(f"{base}/")
    page.get_by_role("link", name="CDC tables").first.click()
    page.wait_for_url("**/plugin/cdc-tables", timeout=30_000)
    framed = page.frame_locator("iframe[title='CDC tables']").locator(
        f'tr.table-row[data-table="{TABLE}"] td.lag-events'
    )
    assert framed.inner_text(timeout=30_000) == str(unapplied)

    # the filter's inputs are labelled
    page.goto(f"{base}/cdc/")
    assert page.get_by_label("Table name contains").count() == 1 and page.get_by_label("State").count() == 1
    # the table's asset page (linked from the row) shows what the asset is and how to schedule on it
    page.locator(f'tr.table-row[data-table="{TABLE}"] td.table .asset a').click()
    page.wait_for_url(f"**/assets/{table['asset_id']}", timeout=30_000)
    page.get_by_text("Additional Data").wait_for(timeout=30_000)
    assert page.get_by_text("Iceberg table ui.products (catalog lake)").count() >= 1
    assert page.get_by_text("schedule=[Asset.ref(uri='iceberg://lake/ui/products')]").count() >= 1
    # the Docs menu opens the project's docs, served by the plugin, in the UI's frame
    page.goto(f"{base}/")
    page.get_by_role("button", name="Docs", exact=True).click()
    page.get_by_text("cdclake docs", exact=True).click()
    page.wait_for_url("**/plugin/cdclake-docs", timeout=30_000)
    docs = page.frame_locator("iframe[title='cdclake docs']")
    assert docs.locator("h1").first.inner_text(timeout=30_000).startswith("cdclake")
    docs.locator('a[href="docs/operations.md"]').first.click()
    assert docs.locator("h2#running-a-table").inner_text(timeout=30_000) == "Running a table"
    context.close()


def test_the_next_run_that_succeeds_clears_the_failure(applied, stack_settings, kafka):
    good = {
        "before": None,
        "after": {"id": 2, "v": "b"},
        "op": "c",
        "ts_ms": 1_700_000_000_000,
        "source": {"connector": "mariadb", "server_id": 1, "file": "mysql-bin.000001", "pos": 4, "row": 0},
    }
    producer = kafka.producer()
    producer.produce("ui.inventory.stuck", key=b'{"id": 2}', value=json.dumps(good).encode(), partition=0)
    producer.flush(30)
    assert run_table_dag(STUCK, stack_settings) == 0
    cfg = load_tables(stack_settings.tables_config).get(STUCK)
    (st,) = status_of_tables(load_catalog(stack_settings), kafka, [cfg])
    assert (st.run_failure, st.fresh, st.open_quarantine, st.lag_events) == (None, True, 2, 0)
    assert st.problems == []


REFUSED_IN_THE_FORM = [
    ("replay_from_offsets", '{"0": -1}'),  # a negative offset
    ("replay_from_offsets", '{"0": 1.5}'),  # not an integer
    ("replay_from_offsets", '{"0": 12'),  # not JSON
    ("replay_from_timestamp", "20/11/2026 08:00"),  # not ISO 8601
    ("replay_from_timestamp", "2999-01-01T00:00:00Z"),  # still to come
]


SAID_IN_THE_FORM = {
    "replay_from_offsets": f"replay_from_offsets must be {OFFSETS_ALLOWED}; got",
    "replay_from_timestamp": "replay_from_timestamp",
}
"""How the form's message goes on after ``Invalid input for param <name>: ``: the run's own line."""


def test_the_trigger_form_refuses_bad_replays_and_a_run_given_both_starts_fails_at_once(
    api_server, browser, applied, stack_settings, kafka, capsys
):
    """The trigger form of ``cdc_ui_stuck`` (paused; 1 retry): each malformed replay start is
    refused in the form, naming its Param, and no run exists; a good one is accepted as typed; a run
    given both starts (which no single Param can refuse) fails at its first try, not retried, naming
    both Params, and the table's record of failed tries says so."""
    base, password = api_server
    dag_id = f"cdc_{STUCK}"
    context = _signed_in(browser, base, password)
    page = context.new_page()

    def trigger(values: dict[str, str]):
        page.goto(f"{base}/dags/{dag_id}")
        page.get_by_role("button", name="Trigger").first.click()
        dialog = page.get_by_role("dialog").last
        # the recovery switch is in its own section, collapsed
        assert not dialog.locator("#element_accept_source_change").is_visible()
        for name, value in values.items():
            dialog.locator(f"#element_{name}").fill(value)
            assert dialog.locator(f"#element_{name}").input_value() == value  # kept as typed
        dialog.get_by_text(f"Unpause {dag_id} on trigger").click()  # unchecked: the run waits, queued
        assert not dialog.get_by_label(f"Unpause {dag_id} on trigger").is_checked()
        with page.expect_response(
            lambda r: r.url.endswith(f"/dags/{dag_id}/dagRuns") and r.request.method == "POST"
        ) as r:
            dialog.get_by_role("button", name="Trigger").click()
        return dialog, r.value.status, r.value.json()  # read before the page moves on

    def runs() -> int:
        return context.request.get(f"{base}/api/v2/dags/{dag_id}/dagRuns").json()["total_entries"]

    before = runs()
    for name, value in REFUSED_IN_THE_FORM:
        dialog, status, _ = trigger({name: value})
        assert status == 400
        shown = dialog.get_by_text(f"Invalid input for param {name}")
        shown.wait_for()
        # the form says what the Param allows in one line of words: no regular expression, no
        # dump of the Param's JSON schema and value (jsonschema's "Failed validating ... On instance")
        text = shown.inner_text()
        assert f"Invalid input for param {name}: {SAID_IN_THE_FORM[name]}" in text, text
        assert "[0-9]" not in text and "\\d" not in text
        assert "Failed validating" not in text and "On instance" not in text, text
        if value.startswith("2999"):
            assert "is in the future" in text
        elif name == "replay_from_timestamp":
            assert TIMESTAMP_ALLOWED in text
    assert runs() == before

    _, status, good = trigger({"replay_from_offsets": '{"0": 0}'})
    assert status == 200 and good["state"] == "queued"  # behind the paused DAG
    assert good["conf"]["replay_from_offsets"] == '{"0": 0}'
    _, status, both = trigger({"replay_from_offsets": '{"0": 0}', "replay_from_timestamp": "2026-11-20T08:00:00Z"})
    assert status == 200
    for run in (good, both):  # no scheduler runs them; the conf is run below with `airflow dags test`
        assert context.request.delete(f"{base}/api/v2/dags/{dag_id}/dagRuns/{run['dag_run_id']}").ok
    context.close()

    cfg = load_tables(stack_settings.tables_config).get(STUCK)
    (before,) = status_of_tables(load_catalog(stack_settings), kafka, [cfg])
    capsys.readouterr()
    assert run_table_dag(STUCK, stack_settings, conf=both["conf"]) != 0
    printed = capsys.readouterr()
    assert "replay_from_offsets and replay_from_timestamp: give one of them" in printed.out
    # the task fails with AirflowFailException carrying that line, without the traceback of where
    # the run found the value (cdclake.model.replay)
    output = printed.out + printed.err
    assert "AirflowFailException: replay_from_offsets and replay_from_timestamp: give one of them" in output
    assert "cdclake/model/replay.py" not in output and "During handling of the above exception" not in output
    (st,) = status_of_tables(load_catalog(stack_settings), kafka, [cfg])
    failure, tried_before = st.run_failure, before.run_failure.failed_tries if before.run_failure else 0
    assert (failure.state, failure.task_id, failure.try_number) == ("failing", "apply", 1)
    assert failure.failed_tries == tried_before + 1  # one try: not retried
    assert failure.error.startswith("TriggerParamError: replay_from_offsets and replay_from_timestamp")


def test_a_run_of_cdclake_run_has_its_task_log_in_the_ui(api_server, applied, stack_settings):
    """The run of ``cdc_ui_products`` the fixture made with ``cdclake run``'s code path (``airflow
    dags test``, as ``make demo`` runs each table) has its task log where the UI reads it: the
    REST API's log endpoint (what the UI's log view calls) answers the task's lines, its summary
    line among them."""
    base, password = api_server
    token = requests.post(f"{base}/auth/token", json={"username": USER, "password": password}, timeout=30)
    headers = {"Authorization": f"Bearer {token.json()['access_token']}", "Accept": "application/json"}
    runs = requests.get(f"{base}/api/v2/dags/cdc_{TABLE}/dagRuns", headers=headers, timeout=30).json()["dag_runs"]
    (run,) = [r for r in runs if r["state"] == "success"]
    r = requests.get(
        f"{base}/api/v2/dags/cdc_{TABLE}/dagRuns/{run['dag_run_id']}/taskInstances/apply/logs/1",
        headers=headers,
        timeout=60,
    )
    assert r.status_code == 200
    events = [line["event"] for line in r.json()["content"]]
    assert not any("not found" in e.lower() for e in events), events[:5]
    (summary,) = [e for e in events if "run of table ui.products: committed; replay no" in e]
    assert f"{APPLIED} event(s)" in summary


def test_cdclake_ui_start_serves_on_loopback_only_keeps_the_password_out_of_logs_and_stops_clean(
    applied, stack_settings
):
    """``cdclake ui start --port P`` (``make airflow-ui``) on the tests' Airflow home: Airflow's
    processes listen on 127.0.0.1 only (the api-server on P, no log server), the UI answers and its
    login takes the password of the password file, no other file under the Airflow home holds that
    password (the api-server prints a password it generates itself), and ``cdclake ui stop``
    (``make airflow-stop``) leaves none of the processes behind."""
    import psutil

    from cdclake_dev.airflow_env import password_file, ui_processes

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CDCLAKE_", "AIRFLOW"))}
    env.update(stack_settings.to_env())
    cdclake = str(Path(sys.executable).parent / "cdclake")

    def ui(action: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [cdclake, "ui", action, "--port", str(port)], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True
        )

    started = ui("start")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        pids = [d.pid for d in ui_processes(stack_settings, port).procs.values()]
        assert None not in pids
        procs = [p for pid in pids for p in (psutil.Process(pid), *psutil.Process(pid).children(recursive=True))]
        listening = {
            (c.laddr.ip, c.laddr.port)
            for p in procs
            for c in p.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN
        }
        assert ("127.0.0.1", port) in listening and {ip for ip, _ in listening} == {"127.0.0.1"}, listening
        base = f"http://127.0.0.1:{port}"
        assert "Airflow" in requests.get(f"{base}/", timeout=30).text
        password = json.loads(password_file(stack_settings).read_text())[USER]
        login = requests.post(f"{base}/auth/token", json={"username": USER, "password": password}, timeout=30)
        assert login.status_code in (200, 201) and login.json()["access_token"]
        holding = [
            str(f)
            for f in stack_settings.airflow_home.rglob("*")
            if f.is_file() and f != password_file(stack_settings) and password.encode() in f.read_bytes()
        ]
        assert holding == []
        assert oct(password_file(stack_settings).stat().st_mode & 0o777) == "0o600"
    finally:
        stopped = ui("stop")
    assert stopped.returncode == 0 and "Airflow UI stopped" in stopped.stdout
    assert [p.pid for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    assert ui("status").returncode == 3
