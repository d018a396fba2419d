"""Freshness and metrics end to end: ``cdc_freshness`` (``airflow dags test``) on two applied
tables, one caught up and one behind its target, with Airflow's StatsD metrics switched on and a
real UDP socket standing in for the StatsD daemon (it only receives); and the table DAG's run
counters through the same path."""

from __future__ import annotations

import json
import socket
import threading

import pytest
import yaml

from cdclake.io.events import load_events, read_event_file
from cdclake.model.config import load_tables
from cdclake_dev.cli import ensure_airflow_db, run_airflow, run_table_dag

pytestmark = pytest.mark.e2e


class StatsdReceiver:
    """Collects StatsD datagrams (``name:value|type[|#tags]``) on a free loopback UDP port."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            self.lines.extend(data.decode().splitlines())

    def values(self, name: str) -> list[float]:
        return [float(line.split(":", 1)[1].split("|")[0]) for line in self.lines if line.split(":", 1)[0] == name]

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture()
def statsd(monkeypatch):
    receiver = StatsdReceiver()
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(receiver.port))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "airflow")
    yield receiver
    receiver.close()


@pytest.fixture(scope="module")
def fresh_tables(stack_settings, kafka):
    stack_settings.tables_config.write_text(
        yaml.safe_dump(
            {
                "defaults": {"schedule": None, "retries": 0, "tags": ["test"], "freshness_minutes": 30},
                "tables": [
                    {
                        "name": f"fresh_{name}",
                        "topic": f"fresh.inventory.{name}",
                        "namespace": "fresh",
                        "table": name,
                        "primary_key": ["id"],
                    }
                    for name in ("current", "behind")
                ],
            }
        )
    )
    ensure_airflow_db(stack_settings)
    return load_tables(stack_settings.tables_config)


def test_a_table_behind_its_target_fails_its_check_and_every_table_reports_metrics(
    fresh_tables, stack_settings, kafka, fixtures_dir, tmp_path, statsd
):
    values = read_event_file(fixtures_dir / "flink/debezium-data-schema-include.txt")
    (tmp_path / "first.jsonl").write_bytes(b"\n".join(values[:12]))
    (tmp_path / "rest.jsonl").write_bytes(b"\n".join(values[12:]))
    current, behind = fresh_tables.get("fresh_current"), fresh_tables.get("fresh_behind")
    load_events(tmp_path / "first.jsonl", current, kafka, partitions=3)
    load_events(tmp_path / "rest.jsonl", current, kafka, partitions=3)
    load_events(tmp_path / "first.jsonl", behind, kafka, partitions=3)
    assert run_table_dag(current.name, stack_settings) == 0
    assert run_table_dag(behind.name, stack_settings) == 0
    # the run counters of the table DAG's apply task
    assert sum(statsd.values("airflow.cdclake.run.events.fresh_current")) == len(values)
    assert sum(statsd.values("airflow.cdclake.run.ops.d.fresh_current")) == 1
    # 4 events wait in the behind table's topic; its newest applied event is years old (the fixture's)
    load_events(tmp_path / "rest.jsonl", behind, kafka, partitions=3)

    proc = run_airflow(["dags", "test", "cdc_freshness"], stack_settings, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert "state=failed" in out.replace(" ", ""), out[-5000:]
    assert "FreshnessError" in out and "table fresh_behind (fresh.behind) is behind its freshness target" in out
    assert "table fresh_current is fresh" in out
    assert statsd.values("airflow.cdclake.lag.events.fresh_behind")[-1] == 4
    assert statsd.values("airflow.cdclake.lag.events.fresh_current")[-1] == 0
    assert statsd.values("airflow.cdclake.lag.seconds.fresh_behind")[-1] > 30 * 60
    assert statsd.values("airflow.cdclake.events_24h.fresh_current")[-1] == len(values)

    # caught up, the check passes again
    assert run_table_dag(behind.name, stack_settings) == 0
    proc = run_airflow(["dags", "test", "cdc_freshness"], stack_settings, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "state=success" in out.replace(" ", ""), out[-5000:]
    assert statsd.values("airflow.cdclake.lag.events.fresh_behind")[-1] == 0


def test_a_committed_run_reports_its_lineage_through_openlineage(
    fresh_tables, stack_settings, kafka, fixtures_dir, tmp_path, monkeypatch
):
    """The OpenLineage provider (installed, off until a transport is configured) with its file
    transport: the apply task's COMPLETE event names the topic as input and the table as output."""
    events = tmp_path / "openlineage.jsonl"
    monkeypatch.setenv(
        "AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps({"type": "file", "log_file_path": str(events), "append": True})
    )
    cfg = fresh_tables.get("fresh_current")
    values = read_event_file(fixtures_dir / "flink/debezium-data-schema-include.txt")
    (tmp_path / "again.jsonl").write_bytes(b"\n".join(values[-2:]))
    load_events(tmp_path / "again.jsonl", cfg, kafka, partitions=3)
    assert run_table_dag(cfg.name, stack_settings) == 0

    emitted = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    complete = [
        e for e in emitted if e.get("eventType") == "COMPLETE" and e.get("job", {}).get("name") == f"{cfg.dag_id}.apply"
    ]
    assert complete, [(e.get("eventType"), e.get("job", {}).get("name")) for e in emitted]
    inputs = {(d["namespace"], d["name"]) for d in complete[-1]["inputs"]}
    outputs = {(d["namespace"], d["name"]) for d in complete[-1]["outputs"]}
    assert any(name == cfg.topic and ns.startswith("kafka://") for ns, name in inputs), inputs
    assert any("fresh" in ns + name and "current" in ns + name for ns, name in outputs), outputs
