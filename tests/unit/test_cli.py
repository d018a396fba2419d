"""The ``cdclake`` command line without services: its help, the errors of ``cdclake load`` (every
event is checked before Kafka is asked), ``cdclake show`` on a local pyiceberg catalog, the cause
line of a failed run, and the local Airflow UI's processes (loopback, no log servers). The commands
against a real broker and with none: tests/integration/test_status.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from cdclake.settings import Settings
from cdclake_dev.airflow_env import airflow_parallelism, ensure_password, ui_env, ui_processes
from cdclake_dev.cli import build_parser, failure_cause, main
from cdclake_dev.process import free_port
from cdclake_dev.task_logs import LOG_FILENAME_TEMPLATE, task_log_sections, write_task_logs
from cdclake_dev.views import show_table
from tests.conftest import make_table


@pytest.fixture
def local(tmp_path, monkeypatch) -> tuple[Settings, object]:
    """Settings of a state dir of its own with a one-table config (``json_with_schema``, key
    ``id``), and that table; Kafka at a port nothing listens on."""
    table = make_table(columns={"id": "long", "qty": "long", "v": "string"})
    config = tmp_path / "tables.yaml"
    keys = ("name", "topic", "namespace", "table", "primary_key", "value_format", "columns")
    config.write_text(yaml.safe_dump({"tables": [table.model_dump(mode="json", include={*keys})]}))
    env = {
        "CDCLAKE_STATE_DIR": str(tmp_path / "state"),
        "CDCLAKE_TABLES_CONFIG": str(config),
        "CDCLAKE_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return Settings.from_env(env), table


def test_help_lists_every_command_once():
    parser = build_parser()
    text = parser.format_help()
    commands = list(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    assert {"load", "run", "show", "status", "reconcile", "production", "ui", "airflow"} <= set(commands)
    for command in commands:
        assert len(re.findall(rf"^\s+{command}(\s|$)", text, flags=re.MULTILINE)) == 1, command
    assert "{" not in text  # no list of the commands in braces besides the entries


def test_load_names_the_file_and_line_of_a_bad_event_without_a_traceback(local, tmp_path, capsys):
    _, table = local
    good = {"schema": None, "payload": {"op": "c", "after": {"id": 1}, "source": {"file": "b.1", "pos": 4}}}
    bad = tmp_path / "events.json"
    bad.write_text(json.dumps(good) + "\n\n" + json.dumps({"payload": {"after": {"id": 2}}}, indent=2) + "\n")
    assert main(["load", str(bad), "--table", table.name]) == 2
    err = capsys.readouterr().err
    assert err == f"cdclake load: bad record at {bad}, line 3: envelope has no 'op'\n"

    bad.write_text(json.dumps(good) + "\n{not json\n")
    assert main(["load", str(bad), "--table", table.name]) == 2
    assert capsys.readouterr().err.startswith(f"cdclake load: {bad}, line 2: not JSON")


def test_load_with_no_broker_says_so_at_once_with_the_remedy(local, tmp_path, capsys):
    settings, table = local  # Kafka at a port nothing listens on
    events = tmp_path / "events.json"
    events.write_text(json.dumps({"payload": {"op": "c", "after": {"id": 1}, "source": {"file": "b.1", "pos": 4}}}))
    assert main(["load", str(events), "--table", table.name]) == 3
    err = capsys.readouterr().err
    # every broker down ends the wait at once (the 30 s metadata timeout would say "transport failure")
    assert err.startswith(f"cdclake load: Kafka at {settings.kafka_bootstrap} did not answer: every broker")
    assert err.rstrip().endswith("`make stack-start` (or point CDCLAKE_KAFKA_BOOTSTRAP at a running one)")
    assert err.count("\n") == 1 and "rdkafka" not in err


def test_show_keeps_integer_columns_integers(local):
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from cdclake.io.catalog import load_catalog

    settings, table = local
    catalog = load_catalog(settings)
    catalog.create_namespace_if_not_exists(table.namespace)
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "qty", LongType(), required=False),
        NestedField(3, "v", StringType(), required=False),
    )
    iceberg = catalog.create_table(table.identifier, schema)
    iceberg.append(
        pa.table(
            {"id": [1, 2], "qty": [7, None], "v": ["a", "b"]},
            schema=pa.schema([("id", pa.int64()), ("qty", pa.int64()), ("v", pa.string())]),
        )
    )
    text = show_table(table.name, limit=10, metadata_columns=True, settings=settings)
    rows = text.splitlines()[-2:]
    assert rows[0].split() == ["1", "7", "a"]  # not 7.0: pandas makes an integer column with a null float
    assert rows[1].split() == ["2", "None", "b"]


AIRFLOW_FAILED_RUN = """\
2026-11-25T00:59:03.828785Z [info     ] ::endgroup::                   [task] loc=task_runner.py:2232
2026-11-25T00:59:03.829743Z [error    ] Task failed with exception     [task] loc=task_runner.py:1676
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/airflow/sdk/execution_time/task_runner.py", line 1579, in _run_task
    result = _execute_task(context=context, ti=ti, log=log)
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/tmp/dags/boom.py", line 8, in explode
    raise ValueError("topic 'x' partition 7 does not exist: the topic has partitions [0, 1, 2]")
ValueError: topic 'x' partition 7 does not exist: the topic has partitions [0, 1, 2]
2026-11-25T00:59:03.831401Z [info     ] ::group::Post Execute          [task] loc=task_runner.py:1677
2026-11-25T00:59:03.862661Z [info     ] DagRun Finished: dag_id=boom, state=failed, run_type=manual
"""
"""The end of a real ``airflow dags test`` of a task that raised (Airflow 3.3.2; paths shortened)."""


def test_the_cause_of_a_failed_run_is_the_exception_line_of_its_last_traceback():
    assert failure_cause(AIRFLOW_FAILED_RUN) == (
        "ValueError: topic 'x' partition 7 does not exist: the topic has partitions [0, 1, 2]"
    )
    two_lines = AIRFLOW_FAILED_RUN.replace("[0, 1, 2]\n2026", "[0, 1, 2]\nReplay from offsets 0..2.\n2026", 1)
    assert failure_cause(two_lines).splitlines()[-1] == "Replay from offsets 0..2."
    assert failure_cause("state=failed, no traceback\n") is None


DAGS_TEST_OUTPUT = """\
2026-11-25T04:20:17.798660Z [info     ] Created dag run.               [airflow.models.dagrun] dagrun=<DagRun cdc_t @ 2026-11-25 04:20:17.481367+00:00: manual__2026-11-25T04:20:17.723554+00:00, state:running, queued_at: None. run_type: manual>
2026-11-25T04:20:17.811267Z [info     ] [DAG TEST] starting task_id=apply map_index=-1 [airflow.sdk.definitions.dag] loc=dag.py:1501
2026-11-25T04:20:17.811605Z [info     ] [DAG TEST] running task <TaskInstance: cdc_t.apply manual__2026-11-25T04:20:17.723554+00:00 [TaskInstanceState.SCHEDULED] ti_id=01a2> [airflow.sdk.definitions.dag] loc=dag.py:1504
2026-11-25T04:20:22.049309Z [error    ] Task failed with exception     [task] loc=task_runner.py:1676
2026-11-25T04:20:22.063741Z [info     ] Task instance state updated    [airflow.api_fastapi.execution_api.routes.task_instances] new_state=up_for_retry rows_affected=1
2026-11-25T04:20:22.083154Z [info     ] [DAG TEST] end task task_id=apply map_index=-1 [airflow.sdk.definitions.dag] loc=dag.py:1563
2026-11-25T04:20:23.084655Z [warning  ] No tasks to run. unrunnable tasks: {<TaskInstance: cdc_t.apply>} [airflow.sdk.definitions.dag]
2026-11-25T04:20:24.811267Z [info     ] [DAG TEST] starting task_id=apply map_index=-1 [airflow.sdk.definitions.dag] loc=dag.py:1501
2026-11-25T04:20:24.811605Z [info     ] [DAG TEST] running task <TaskInstance: cdc_t.apply manual__2026-11-25T04:20:17.723554+00:00 [TaskInstanceState.SCHEDULED] ti_id=01a2> [airflow.sdk.definitions.dag] loc=dag.py:1504
2026-11-25T04:20:25.049309Z [info     ] run of table t.t: committed; replay no [cdclake_airflow.table_dag] loc=table_dag.py:267
2026-11-25T04:20:25.063741Z [info     ] Task instance state updated    [airflow.api_fastapi.execution_api.routes.task_instances] new_state=success rows_affected=1
2026-11-25T04:20:25.083154Z [info     ] [DAG TEST] end task task_id=apply map_index=-1 [airflow.sdk.definitions.dag] loc=dag.py:1563
2026-11-25T04:20:25.083154Z [info     ] [DAG TEST] starting task_id=wait map_index=0 [airflow.sdk.definitions.dag] loc=dag.py:1501
2026-11-25T04:20:25.163741Z [info     ] Task instance state updated    [airflow.api_fastapi.execution_api.routes.task_instances] new_state=up_for_reschedule rows_affected=1
2026-11-25T04:20:25.183154Z [info     ] [DAG TEST] end task task_id=wait map_index=0 [airflow.sdk.definitions.dag] loc=dag.py:1563
2026-11-25T04:20:30.083154Z [info     ] [DAG TEST] starting task_id=wait map_index=0 [airflow.sdk.definitions.dag] loc=dag.py:1501
2026-11-25T04:20:30.163741Z [info     ] Task instance state updated    [airflow.api_fastapi.execution_api.routes.task_instances] new_state=success rows_affected=1
2026-11-25T04:20:30.183154Z [info     ] [DAG TEST] end task task_id=wait map_index=0 [airflow.sdk.definitions.dag] loc=dag.py:1563
2026-11-25T04:20:30.185277Z [info     ] DagRun Finished: dag_id=cdc_t, run_id=manual__2026-11-25T04:20:17.723554+00:00
"""
"""The frame of an ``airflow dags test`` output (Airflow 3.3.2; lines shortened): a task failed
once and retried, a mapped sensor poked twice in reschedule mode."""


def test_a_dags_test_run_leaves_a_task_log_file_per_try_where_airflow_reads_it(tmp_path):
    run = "manual__2026-11-25T04:20:17.723554+00:00"
    tries = [(t.task_id, t.map_index, t.try_number, len(t.lines)) for t in task_log_sections(DAGS_TEST_OUTPUT, "cdc_t")]
    assert tries == [("apply", -1, 1, 5), ("apply", -1, 2, 5), ("wait", 0, 1, 3), ("wait", 0, 1, 3)]
    assert task_log_sections(DAGS_TEST_OUTPUT, "other") == []
    written = write_task_logs(DAGS_TEST_OUTPUT, "cdc_t", tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in written] == [
        f"dag_id=cdc_t/run_id={run}/task_id=apply/attempt=1.log",
        f"dag_id=cdc_t/run_id={run}/task_id=apply/attempt=2.log",
        f"dag_id=cdc_t/run_id={run}/task_id=wait/map_index=0/attempt=1.log",
    ]
    second = written[1].read_text().splitlines()
    assert "[DAG TEST] starting task_id=apply" in second[0] and "run of table t.t: committed" in second[2]
    assert len(written[2].read_text().splitlines()) == 6  # both pokes of the one try
    # Airflow is told the file names the files are written by
    assert (
        ui_env(Settings.from_env({"CDCLAKE_STATE_DIR": str(tmp_path)}))["AIRFLOW__LOGGING__LOG_FILENAME_TEMPLATE"]
        == LOG_FILENAME_TEMPLATE
    )


def test_the_local_ui_listens_on_loopback_only_with_a_login_and_sized_parallelism(local):
    settings, _ = local
    airflow = ui_processes(settings)
    assert airflow.base == "http://127.0.0.1:8080"
    api = airflow.command("api-server")
    assert api[api.index("--host") + 1] == "127.0.0.1"
    # Airflow's log servers listen on every interface: the UI runs none (the api-server reads the files)
    assert "--skip-serve-logs" in airflow.command("scheduler") and "--skip-serve-logs" in airflow.command("triggerer")
    env = ui_env(settings)
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] == "False"
    assert env["AIRFLOW__CORE__PARALLELISM"] == str(airflow_parallelism(settings))
    # the applies, and a task per core or the reconcile tasks and one more, whichever is more
    assert airflow_parallelism(settings, cpus=8) == settings.apply_pool_slots + 8
    assert airflow_parallelism(settings, cpus=2) == settings.apply_pool_slots + settings.reconcile_tasks + 1
    assert {d.pid_file.parent for d in airflow.procs.values()} == {Path(settings.airflow_home) / "ui"}
    assert ui_processes(settings, 18080).base == "http://127.0.0.1:18080"  # cdclake ui start --port


def test_the_local_ui_password_is_generated_once_into_its_private_file(local):
    settings, _ = local
    path = ensure_password(settings)
    password = json.loads(path.read_text())["admin"]
    assert len(password) >= 16 and oct(path.stat().st_mode & 0o777) == "0o600"
    assert ensure_password(settings) == path and json.loads(path.read_text())["admin"] == password  # kept
    # the api-server reads that file: it finds the user's password and generates (and prints) none
    assert ui_env(settings)["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] == str(path)


# --- errors of the project's own: one line, exit code 2 ------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "{typo}"],
        ["show", "{typo}"],
        ["quarantine", "list", "{typo}"],
        ["load", "{events}", "--table", "{typo}"],
    ],
)
def test_a_table_not_in_the_config_is_one_line_with_the_near_name_and_exit_code_2(local, tmp_path, capsys, argv):
    settings, table = local
    typo = table.name[:-1]  # a letter left out
    events = tmp_path / "events.json"
    events.write_text(json.dumps({"payload": {"op": "c", "after": {"id": 1}, "source": {"file": "b.1", "pos": 4}}}))
    assert main([a.format(typo=typo, events=events) for a in argv]) == 2
    assert capsys.readouterr().err == (
        f"cdclake {argv[0]}: no table {typo!r} in {settings.tables_config}; did you mean {table.name!r}? "
        f"configured: {table.name}\n"
    )
    assert main(["show", "nosuch"]) == 2
    assert capsys.readouterr().err == (
        f"cdclake show: no table 'nosuch' in {settings.tables_config}; configured: {table.name}\n"
    )


def test_a_missing_topic_is_one_line_and_a_crash_keeps_its_traceback(local, monkeypatch, capsys):
    from cdclake.errors import TopicNotFoundError

    _, table = local
    message = "Kafka topic 'cdc.inventory.productz' does not exist on b:9092; did you mean 'cdc.inventory.products'?"

    def missing(*args, **kwargs):
        raise TopicNotFoundError(message)

    monkeypatch.setattr("cdclake_dev.cli.show_table", missing)
    assert main(["show", table.name]) == 2
    assert capsys.readouterr().err == f"cdclake show: {message}\n"

    def crash(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr("cdclake_dev.cli.show_table", crash)
    with pytest.raises(RuntimeError, match="a bug"):  # not an error of the project's: a crash, with its traceback
        main(["show", table.name])


@pytest.fixture
def stack_calls(local, monkeypatch) -> list[str]:
    """The broker and engine starts and stops ``cdclake stack start`` asks for (none really runs);
    the broker's ports free (its controller's too), the engine ``connect``."""
    calls: list[str] = []
    monkeypatch.setenv("CDCLAKE_KAFKA_BOOTSTRAP", f"127.0.0.1:{free_port(span=2)}")
    monkeypatch.setenv("CDCLAKE_SPARK_CONNECT_PORT", str(free_port()))
    monkeypatch.setenv("CDCLAKE_ENGINE", "connect")
    monkeypatch.setattr("cdclake_dev.stack.start_broker", lambda settings: calls.append("start broker") or "started")
    monkeypatch.setattr("cdclake_dev.stack.stop_broker", lambda settings: calls.append("stop broker") or "stopped")
    monkeypatch.setattr("cdclake_dev.engine.start_engine", lambda settings: calls.append("start engine") or "started")
    return calls


def test_stack_start_with_a_port_taken_says_which_and_the_remedy_and_starts_nothing(stack_calls, capsys):
    import os
    import socket

    settings = Settings.from_env()
    controller = int(settings.kafka_bootstrap.rpartition(":")[2]) + 1
    with socket.socket() as engine_port, socket.socket() as controller_port:
        engine_port.bind(("127.0.0.1", settings.spark_connect_port))
        engine_port.listen()  # something serves on the engine's port
        controller_port.bind(("127.0.0.1", controller))  # bound, not listening: taken all the same
        assert main(["stack", "start"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"cdclake stack: the Kafka broker's controller port {controller} is taken by a process")
    engine = f"the Spark Connect engine's port {settings.spark_connect_port} is taken by a process this stack did not "
    assert f"{engine}start (" in err and f", pid {os.getpid()}): stop it" in err  # the holder: this test
    assert "set CDCLAKE_SPARK_CONNECT_PORT to a free port" in err and err.endswith("; nothing was started\n")
    assert stack_calls == []  # checked before anything starts: no broker left running


def test_stack_start_stops_the_broker_it_started_when_the_engine_does_not_start(stack_calls, monkeypatch):
    def engine_fails(settings):
        stack_calls.append("start engine")
        raise RuntimeError("Spark Connect server exited")

    monkeypatch.setattr("cdclake_dev.engine.start_engine", engine_fails)
    with pytest.raises(RuntimeError, match="exited"):
        main(["stack", "start"])
    assert stack_calls == ["start broker", "start engine", "stop broker"]  # nothing left half-started
