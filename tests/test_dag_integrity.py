"""DAG integrity: every DAG file imports cleanly, one DAG per configured table, DAG parsing
imports no heavy library, and the project's connections resolve to the local stack."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest

from cdclake.model.config import load_tables
from cdclake.settings import PROJECT_ROOT, Settings
from cdclake_dev.airflow_env import airflow_env

HEAVY_MODULES = ("pyspark", "confluent_kafka", "pyiceberg", "pyarrow", "pandas")


def run_python(code: str, tables_config=None, registry=None) -> dict:
    env_over = {"CDCLAKE_TABLES_CONFIG": str(tables_config)} if tables_config else {}
    if registry is not None:
        env_over["CDCLAKE_DISCOVERY_REGISTRY"] = str(registry)
    settings = Settings.from_env(
        {
            **{
                k: v
                for k, v in airflow_env(Settings.from_env()).items()
                if k.startswith("CDCLAKE_") and k not in ("CDCLAKE_TABLES_CONFIG", "CDCLAKE_DISCOVERY_REGISTRY")
            },
            **env_over,
        }
    )
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=airflow_env(settings),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "dag_file",
    [
        "cdc_tables",
        "cdc_snapshot_bootstrap",
        "cdc_reconcile",
        "cdc_maintenance",
        "cdc_freshness",
        "cdc_discovery",
        "cdc_groups",
        "cdc_shared",
    ],
)
def test_dag_file_parses_without_heavy_imports(dag_file):
    result = run_python(
        f"""
        import importlib.util, json, sys
        spec = importlib.util.spec_from_file_location("{dag_file}", "dags/{dag_file}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        heavy = [m for m in {HEAVY_MODULES!r} if m in sys.modules]
        print(json.dumps({{"heavy": heavy}}))
        """
    )
    assert result["heavy"] == []


def test_example_downstream_dag_parses_cheaply_one_per_table_with_a_change_feed_on_its_asset(tmp_path):
    config = tmp_path / "tables.yaml"
    config.write_text(
        "tables:\n"
        "  - {name: fed, topic: p.d.fed, namespace: d, table: fed, primary_key: [id], change_feed: {retention_days: 7}}\n"
        "  - {name: plain, topic: p.d.plain, namespace: d, table: plain, primary_key: [id]}\n"
    )
    result = run_python(
        f"""
        import importlib.util, json, sys
        from airflow.sdk import DAG
        spec = importlib.util.spec_from_file_location("change_counts", "examples/dags/change_counts.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        heavy = [m for m in {HEAVY_MODULES!r} if m in sys.modules]
        dags = {{d.dag_id: {{"tasks": [t.task_id for t in d.tasks], "max_active_runs": d.max_active_runs,
                            "schedule": sorted(a.uri for a in d.timetable.asset_condition.objects),
                            "timeout": [t.execution_timeout is not None for t in d.tasks]}}
                for d in vars(module).values() if isinstance(d, DAG)}}
        print(json.dumps({{"heavy": heavy, "dags": dags}}))
        """,
        tables_config=config,
    )
    assert result == {
        "heavy": [],
        "dags": {
            "example_change_counts_fed": {
                "tasks": ["count_changes"],
                "max_active_runs": 1,
                "schedule": ["iceberg://lake/d/fed"],
                "timeout": [True],
            }
        },
    }


def test_dagbag_has_one_dag_per_configured_table_and_no_import_errors():
    result = run_python(
        """
        import json
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(dag_folder="dags")
        dags = {d: {"tasks": sorted(t.task_id for t in dag.tasks), "max_active_runs": dag.max_active_runs,
                    "tags": sorted(dag.tags), "owner": dag.default_args.get("owner"),
                    "retries": dag.default_args.get("retries"),
                    "backoff": dag.default_args.get("retry_exponential_backoff"),
                    "upstream": {t: sorted(dag.get_task(t).upstream_task_ids) for t in ("schema_sync", "apply") if dag.has_task(t)},
                    "no_timeout": sorted(t.task_id for t in dag.tasks if t.execution_timeout is None),
                    "apply": {"pool": dag.get_task("apply").pool, "type": type(dag.get_task("apply")).__name__,
                              "outlets": [a.uri for a in dag.get_task("apply").outlets],
                              "weight": dag.get_task("apply").priority_weight}
                    if dag.has_task("apply") else None,
                    "maintain": {"pool": dag.get_task("maintain").pool,
                                 "weight": dag.get_task("maintain").priority_weight}
                    if dag.has_task("maintain") else None}
                for d, dag in bag.dags.items()}
        print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": dags}))
        """
    )
    assert result["errors"] == {}
    # every task has an execution_timeout: a hung task fails and is retried instead of holding a slot
    assert {d: v["no_timeout"] for d, v in result["dags"].items() if v["no_timeout"]} == {}
    expected = {t.dag_id for t in load_tables(PROJECT_ROOT / "include" / "tables.yaml").tables}
    assert set(result["dags"]) == expected | {
        "cdc_snapshot_bootstrap",
        "cdc_reconcile",
        "cdc_maintenance",
        "cdc_freshness",
        "cdc_discovery",
    }
    discovery = result["dags"].pop("cdc_discovery")
    assert discovery["tasks"] == ["discover"] and discovery["max_active_runs"] == 1
    freshness = result["dags"].pop("cdc_freshness")
    # include/tables.yaml sets freshness_minutes for every table: one check per table
    assert freshness["tasks"] == ["check_freshness", "status"]
    assert freshness["max_active_runs"] == 1 and "monitoring" in freshness["tags"]
    maintenance = result["dags"].pop("cdc_maintenance")
    assert maintenance["tasks"] == ["maintain", "select_tables"]
    assert maintenance["max_active_runs"] == 1 and "maintenance" in maintenance["tags"]
    assert maintenance["maintain"]["pool"] == "cdc_apply"
    maintain_weight = maintenance["maintain"]["weight"]
    reconcile = result["dags"].pop("cdc_reconcile")
    assert reconcile["tasks"] == ["reconcile", "select_tables"]
    assert reconcile["max_active_runs"] == 1 and "reconcile" in reconcile["tags"]
    bootstrap = result["dags"].pop("cdc_snapshot_bootstrap")
    assert bootstrap["tasks"] == [
        "check_snapshot",
        "ensure_tables",
        "is_execute",
        "prepare",
        "signal",
        "trigger_table_dag",
        "wait_for_snapshot",
        "wait_until_applied",
    ]
    assert bootstrap["max_active_runs"] == 1
    for dag_id, dag in result["dags"].items():
        # the connect engine: one task (plan, schema sync, apply, publish in one process)
        assert dag["tasks"] == ["apply"]
        assert dag["upstream"] == {"apply": []}
        assert dag["max_active_runs"] == 1
        assert "cdc" in dag["tags"]
        assert dag["owner"] == "data-platform"
        assert dag["retries"] >= 1 and dag["backoff"] is True
        # the default engine: a session of the shared Spark Connect server, in the apply pool
        table = dag_id.removeprefix("cdc_").split("_", 1)
        # a free slot of the shared pool goes to an apply before a table's maintenance (the soak)
        assert dag["apply"].pop("weight") > maintain_weight
        assert dag["apply"] == {
            "pool": "cdc_apply",
            "type": "_PythonDecoratedOperator",
            "outlets": [f"iceberg://lake/{table[0]}/{table[1]}"],
        }


def test_the_submit_engine_applies_through_spark_submit_in_the_same_pool(monkeypatch):
    monkeypatch.setenv("CDCLAKE_ENGINE", "submit")
    result = run_python(
        """
        import json
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(dag_folder="dags")
        dag = bag.dags["cdc_inventory_products"]
        from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
        apply = dag.get_task("apply")
        maintain = bag.dags["cdc_maintenance"].get_task("maintain")
        print(json.dumps({"type": type(apply).__name__, "spark_submit": isinstance(apply, SparkSubmitOperator),
                          "catalog_conf": sorted(k for k in apply.conf if k.startswith("spark.sql.catalog")),
                          "args": apply.application_args, "pool": apply.pool, "conn_id": apply._conn_id,
                          "tasks": sorted(t.task_id for t in dag.tasks),
                          "upstream": {t: sorted(dag.get_task(t).upstream_task_ids) for t in ("schema_sync", "apply", "publish")},
                          "maintain": [type(maintain).__name__, maintain.partial_kwargs.get("pool")]}))
        """
    )
    assert result == {
        "type": "CdcSparkSubmitOperator",
        "spark_submit": True,
        # the catalog (and its credentials) reaches the job in the task's private file at run time
        "catalog_conf": [],
        "args": ["--plan", "{{ ti.xcom_pull(task_ids='schema_sync') }}"],
        "pool": "cdc_apply",
        "conn_id": "spark_default",
        "tasks": ["apply", "plan", "publish", "schema_sync"],
        "upstream": {"schema_sync": ["plan"], "apply": ["schema_sync"], "publish": ["apply"]},
        "maintain": ["MappedOperator", "cdc_apply"],
    }


def test_dag_count_follows_the_table_config(tmp_path):
    config = tmp_path / "tables.yaml"
    config.write_text(
        "tables:\n"
        + "".join(
            f"  - {{name: t{i}, topic: p.d.t{i}, namespace: d, table: t{i}, primary_key: [id]}}\n" for i in range(3)
        )
    )
    result = run_python(
        """
        import json
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(dag_folder="dags")
        print(json.dumps(sorted(bag.dags)))
        """,
        tables_config=config,
    )
    assert result == [
        "cdc_discovery",
        "cdc_freshness",
        "cdc_maintenance",
        "cdc_reconcile",
        "cdc_snapshot_bootstrap",
        "cdc_t0",
        "cdc_t1",
        "cdc_t2",
    ]


def test_a_table_group_has_a_dag_scheduled_on_its_members_assets(tmp_path):
    config = tmp_path / "tables.yaml"
    config.write_text(
        "tables:\n"
        + "".join(
            f"  - {{name: t{i}, topic: p.d.t{i}, namespace: grpdag, table: t{i}, primary_key: [id]{g}}}\n"
            for i, g in enumerate([", group: bank", ", group: bank", ""])
        )
    )
    result = run_python(
        """
        import json
        from airflow.dag_processing.dagbag import DagBag
        from airflow.sdk.exceptions import AirflowSkipException
        from cdclake_airflow.group_dag import publish
        bag = DagBag(dag_folder="dags/cdc_groups.py")
        dag = bag.dags["cdc_group_bank"]
        try:
            publish("bank")
            skipped = None
        except AirflowSkipException as e:
            skipped = str(e)
        print(json.dumps({"dags": sorted(bag.dags), "errors": list(bag.import_errors),
                          "tasks": [t.task_id for t in dag.tasks], "max_active_runs": dag.max_active_runs,
                          "assets": sorted(a.uri for a in dag.timetable.asset_condition.objects),
                          "outlets": [o.uri for o in dag.get_task("publish").outlets],
                          "publish": skipped}))
        """,
        tables_config=config,
    )
    assert result == {
        "dags": ["cdc_group_bank"],
        "errors": [],
        "tasks": ["publish"],
        "max_active_runs": 1,
        "assets": ["iceberg://lake/grpdag/t0", "iceberg://lake/grpdag/t1"],
        # downstream DAGs of the group schedule on its asset, emitted when the group moves
        "outlets": ["iceberg://lake/cdc_group_bank"],
        # the task before the members' first runs: nothing to publish, skipped (no asset event)
        "publish": "group bank stays at position None: table grpdag.t0 does not exist yet",
    }


def test_a_shared_dag_applies_its_tables_a_few_per_task_and_their_own_dags_are_unscheduled(tmp_path):
    """Five discovered tables of a pattern with ``shared_dag`` (two per task) and one explicit table
    of their shared DAG: ``cdc_shared_inv`` has three tasks in the apply pool, each emitting its
    tables' assets through an alias; the members' own DAGs stay for manual runs only."""
    from cdclake.model.discovery import write_registry

    config = tmp_path / "tables.yaml"
    config.write_text(
        "defaults: {schedule: '*/5 * * * *'}\n"
        "discover:\n"
        "  - {topic_prefix: shr, namespace: shr, defaults: {shared_dag: inv, tables_per_task: 2}}\n"
        "tables:\n"
        "  - {name: own, topic: p.d.own, namespace: shr, table: own, primary_key: [id]}\n"
        "  - {name: joined, topic: p.d.joined, namespace: shr, table: joined, primary_key: [id],\n"
        "     shared_dag: inv, tables_per_task: 2}\n"
        # a discovered table whose schedule differs from its shared DAG's is left out, not a broken file
        "  - {name: other_schedule, topic: q.d.other, namespace: shr, table: other, primary_key: [id],\n"
        "     shared_dag: odd, tables_per_task: 2, schedule: '@hourly'}\n"
    )
    registry = tmp_path / "discovery.json"
    write_registry(registry, {f"shr.db.t{i}": ("id",) for i in range(4)}, now_ms=0)
    result = run_python(
        """
        import json
        from airflow.dag_processing.dagbag import DagBag
        shared = DagBag(dag_folder="dags/cdc_shared.py")
        own = DagBag(dag_folder="dags/cdc_tables.py")
        dag = shared.dags["cdc_shared_inv"]
        print(json.dumps({
            "shared": sorted(shared.dags), "errors": list(shared.import_errors) + list(own.import_errors),
            "schedule": str(dag.schedule), "max_active_runs": dag.max_active_runs,
            "tasks": {t.task_id: [t.pool, [o.name for o in t.outlets], t.doc_md, t.retries,
                                  t.execution_timeout.total_seconds()] for t in dag.tasks},
            "own": {d: str(own.dags[d].schedule) for d in sorted(own.dags)},
        }))
        """,
        tables_config=config,
        registry=registry,
    )
    assert result["errors"] == []
    assert result["shared"] == ["cdc_shared_inv", "cdc_shared_odd"]
    assert result["schedule"] == "*/5 * * * *" and result["max_active_runs"] == 1
    assert result["tasks"] == {
        "apply_0": ["cdc_apply", ["cdc_shared_inv.apply_0"], "Tables: `db_t0` (shr.t0), `db_t1` (shr.t1)", 3, 3600.0],
        "apply_1": ["cdc_apply", ["cdc_shared_inv.apply_1"], "Tables: `db_t2` (shr.t2), `db_t3` (shr.t3)", 3, 3600.0],
        "apply_2": ["cdc_apply", ["cdc_shared_inv.apply_2"], "Tables: `joined` (shr.joined)", 3, 3600.0],
    }
    # the members' own DAGs: manual runs and replays only; a table of no shared DAG keeps its schedule
    assert result["own"] == {
        "cdc_joined": "None",
        "cdc_other_schedule": "None",
        "cdc_own": "*/5 * * * *",
        **{f"cdc_db_t{i}": "None" for i in range(4)},
    }


def test_the_members_of_a_shared_dag_must_agree_on_its_settings():
    from cdclake.errors import ConfigError
    from cdclake.model.config import TablesFile
    from cdclake.model.shared import shared_dags

    def table(name: str, **over: object) -> dict:
        return {"name": name, "topic": f"p.d.{name}", "namespace": "n", "table": name, "primary_key": ["id"], **over}

    with pytest.raises(ValueError, match="table 'b' has retries 1 but table 'a' of the same shared DAG cdc_shared_s"):
        TablesFile.model_validate({"tables": [table("a", shared_dag="s"), table("b", shared_dag="s", retries=1)]})
    with pytest.raises(ValueError, match="shared_dag needs the connect engine"):
        TablesFile.model_validate({"tables": [table("a", shared_dag="s", engine="submit")]})
    tables = TablesFile.model_validate({"tables": [table("b", shared_dag="s"), table("a", shared_dag="s")]}).tables
    assert [t.name for t in shared_dags(tables)["s"]] == ["a", "b"]
    assert [t.scheduled_dag_id for t in tables] == ["cdc_shared_s", "cdc_shared_s"]
    with pytest.raises(ConfigError, match="tables_per_task"):
        shared_dags([*tables, tables[0].model_copy(update={"name": "c", "tables_per_task": 3})])


def test_spark_default_resolves_to_local_mode_not_yarn():
    result = run_python(
        """
        import json
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
        conn = SparkSubmitHook(conn_id="spark_default")._resolve_connection()
        print(json.dumps({"master": conn["master"]}))
        """
    )
    assert result["master"].startswith("local")


def test_bootstrap_refuses_a_filtered_blocking_snapshot_of_an_authoritative_table():
    """A blocking snapshot carries a full snapshot's markers even with additional-conditions: the
    table would take it as complete and delete the rows the filter left out."""
    import json

    from cdclake.errors import ConfigError
    from cdclake.model.config import TableConfig
    from cdclake_airflow.bootstrap_dag import prepare

    cfg = TableConfig(name="orders", topic="p.inventory.orders", namespace="n", table="orders", primary_key=("id",))
    tables = json.dumps([cfg.model_dump(mode="json")])
    params = {
        "tables": ["orders"],
        "snapshot_type": "blocking",
        "additional_conditions": {"orders": "id > 10"},
        "action": "execute",
    }
    with pytest.raises(ConfigError, match="would look complete"):
        prepare(tables, params=params, run_id="manual__1")
    assert prepare(tables, params={**params, "snapshot_type": "incremental"}, run_id="manual__1")["tables"] == [
        "orders"
    ]
    relaxed = json.dumps([cfg.model_copy(update={"authoritative_snapshots": False}).model_dump(mode="json")])
    assert prepare(relaxed, params=params, run_id="manual__1")["snapshot_type"] == "blocking"


def test_reconcile_selects_configured_tables_only():
    from cdclake.errors import ConfigError
    from cdclake.model.selection import select_tables
    from cdclake_airflow.reconcile_dag import RECONCILED
    from tests.conftest import make_table

    tables = [make_table(name="a"), make_table(name="b")]
    assert [t.name for t in select_tables(tables, [], among=RECONCILED)] == ["a", "b"]
    assert [t.name for t in select_tables(tables, ["b"], among=RECONCILED)] == ["b"]
    with pytest.raises(ConfigError, match=r"\['c'\]"):
        select_tables(tables, ["c"], among=RECONCILED)


def test_a_running_task_builds_only_its_own_table_dag(monkeypatch):
    """Airflow names the DAG of the task it runs in the parsing context: the table DAG file then
    builds that DAG alone, not one per configured table (a task's start-up stays flat in the table
    count)."""
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "cdc_inventory_customers")
    result = run_python(
        """
        import json
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(dag_folder="dags/cdc_tables.py")
        print(json.dumps(sorted(bag.dags)))
        """
    )
    assert result == ["cdc_inventory_customers"]


def test_the_replay_form_refuses_what_its_schema_does_not_allow_and_requires_nothing():
    """The table DAG's trigger form, as Airflow validates it (``Param.resolve``: the form's and the
    REST API's check before a run exists): replay offsets as a JSON object or its text, each a
    non-negative integer; a replay time in ISO 8601; the recovery switch in its own section; none
    required (an empty form is an ordinary run); Airflow's Backfill not allowed."""
    from airflow.sdk.exceptions import ParamValidationError

    from cdclake_airflow.params import RECOVERY_SECTION
    from cdclake_airflow.table_dag import build_table_dag
    from tests.conftest import make_table

    dag = build_table_dag(Settings.from_env(), make_table(schedule="*/15 * * * *"))
    params = {name: dag.params.get_param(name) for name in dag.params}
    assert set(params) == {"replay_from_offsets", "replay_from_timestamp", "accept_source_change"}
    good = {
        "replay_from_offsets": [None, '{"0": 120, "1": 98}', ' { "0" : 0 } ', {"0": 120, "1": 98}],
        "replay_from_timestamp": [None, "2026-11-20T08:00:00Z", "2026-11-20 08:00", "2026-11-20T08:00:00.5+01:00"],
        "accept_source_change": [None, False, True],
    }
    bad = {
        "replay_from_offsets": ['{"0": -1}', '{"0": 1.5}', '{"0": "12"}', "{}", "120", {"0": -1}, {"a": 1}, {}],
        "replay_from_timestamp": ["20/11/2026", "yesterday", "2026-11-20T08:00:00 UTC", 1700000000],
        "accept_source_change": ["yes"],
    }
    for name, values in good.items():
        for value in values:
            assert params[name].resolve(value) == value
    for name, values in bad.items():
        for value in values:
            with pytest.raises(ParamValidationError):
                params[name].resolve(value)
    # nothing is marked required in the form (a type that admits null, or none), and the recovery
    # switch sits in its collapsed section
    for param in params.values():
        types = param.schema.get("type", ["null"])
        assert "null" in types or "anyOf" in param.schema
    assert params["accept_source_change"].schema["section"] == RECOVERY_SECTION
    assert "section" not in params["replay_from_offsets"].schema
    allowed = {t.value for t in dag.allowed_run_types}
    assert "backfill" not in allowed and {"scheduled", "manual", "operator_triggered"} <= allowed


def test_the_replay_form_says_in_one_line_what_a_param_allows():
    """What the trigger form shows for a replay start it refuses, as the api-server checks the
    serialized DAG (``SerializedParamsDict.validate``) and as the SDK does: Airflow's ``Invalid
    input for param <name>: `` and the run's own one line naming what the Param allows, not
    jsonschema's dump of the Param's schema and value; a time still to come is refused in the form
    too."""
    import copy

    from airflow.sdk.exceptions import ParamValidationError
    from airflow.serialization.serialized_objects import DagSerialization

    from cdclake.model.replay import OFFSETS_ALLOWED, TIMESTAMP_ALLOWED
    from cdclake_airflow.table_dag import build_table_dag
    from tests.conftest import make_table

    dag = build_table_dag(Settings.from_env(), make_table(schedule="*/15 * * * *"))
    served = DagSerialization.from_dict(DagSerialization.to_dict(dag))  # what the api-server validates
    refused = {
        ("replay_from_offsets", '{"0": -1'): f"replay_from_offsets must be {OFFSETS_ALLOWED}; got '{{\"0\": -1'",
        ("replay_from_offsets", '{"0": 1.5}'): f"replay_from_offsets must be {OFFSETS_ALLOWED}; got",
        ("replay_from_timestamp", "20/11/2026 08:00"): f"replay_from_timestamp must be {TIMESTAMP_ALLOWED}; got",
        (
            "replay_from_timestamp",
            "2999-01-01T00:00:00Z",
        ): "replay_from_timestamp '2999-01-01T00:00:00Z' is in the future",
    }
    for (name, value), says in refused.items():
        with pytest.raises(ParamValidationError) as server:
            served.params.deep_merge({name: value}).validate()
        sdk_params = copy.deepcopy(dag.params)
        with pytest.raises(ParamValidationError) as sdk:
            sdk_params[name] = value
        for shown in (str(server.value), str(sdk.value)):
            assert shown.startswith(f"Invalid input for param {name}: {says}"), shown
            assert "\n" not in shown and "Failed validating" not in shown and "On instance" not in shown, shown


def test_every_dag_has_plain_markdown_docs_and_every_param_a_title_and_a_description():
    """What the UI shows of each DAG: its docs are Markdown without Sphinx roles or reST literals; a
    table DAG's docs name its asset URI and show a downstream DAG scheduled on it, and its asset's
    ``extra`` (the UI's "Additional Data") says what it is, as the group DAG declares it; every Param
    of every trigger form has a title and a description (what the form shows next to an error)."""
    result = run_python(
        """
        import json
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(dag_folder="dags")
        out = {}
        for dag_id, dag in bag.dags.items():
            outlets = [o for t in dag.tasks for o in t.outlets if hasattr(o, "uri")]
            scheduled = [a for a in getattr(dag.timetable, "asset_condition", None).objects] if hasattr(
                getattr(dag.timetable, "asset_condition", None), "objects") else []
            out[dag_id] = {
                "doc": dag.doc_md,
                "params": {k: {"title": dag.params.get_param(k).schema.get("title"),
                               "description": dag.params.get_param(k).description} for k in dag.params},
                "assets": {o.uri: o.extra for o in outlets + scheduled},
            }
        print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": out}))
        """
    )
    assert result["errors"] == {}
    dags = result["dags"]
    tables = load_tables(PROJECT_ROOT / "include" / "tables.yaml").tables
    for dag_id, dag in dags.items():
        assert dag["doc"], dag_id
        for sphinx in (":func:`", ":class:`", ":mod:`", ":data:`", ":meth:`", ":attr:`"):
            assert sphinx not in dag["doc"], (dag_id, sphinx)
        assert not re.search(r"(?<!`)``(?!`)", dag["doc"]), dag_id  # a reST literal; a code fence is Markdown
        for name, param in dag["params"].items():
            assert param["title"] and param["description"], (dag_id, name)
    for cfg in tables:
        uri = f"iceberg://lake/{cfg.namespace}/{cfg.table}"
        doc = dags[cfg.dag_id]["doc"]
        assert f"`{uri}`" in doc and f'schedule=[Asset.ref(uri="{uri}")]' in doc
        example = doc.split("```python\n")[1].split("```")[0].strip().splitlines()
        assert len(example) == 3 and example[0] == "from airflow.sdk import DAG, Asset"
        extra = dags[cfg.dag_id]["assets"][uri]
        assert extra["uri"] == uri and cfg.topic in extra["description"] and cfg.identifier in extra["description"]
        # every DAG of the project declares a table's asset alike: Airflow keeps the last parsed extra
        for other in dags.values():
            assert other["assets"].get(uri, extra) == extra


def test_a_user_input_error_fails_the_task_at_once_and_other_errors_retry():
    """The table DAG's retry policy: a trigger-form Param that does not fit (``TriggerParamError``)
    and a quarantined batch fail the task at once; an engine that does not answer is retried."""
    from airflow.sdk import RetryAction

    from cdclake.errors import (
        EngineUnavailableError,
        QuarantinedBatchError,
        QuarantineToleranceError,
        TriggerParamError,
    )
    from cdclake_airflow.table_dag import build_table_dag
    from tests.conftest import make_table

    dag = build_table_dag(Settings.from_env(), make_table(retries=3))
    policy = dag.get_task("apply").retry_policy
    for error in (
        TriggerParamError("replay_from_offsets: ..."),
        QuarantinedBatchError("..."),
        QuarantineToleranceError("..."),  # its retry would succeed, and the alert be lost
    ):
        assert policy.evaluate(error, try_number=1, max_tries=3).action is RetryAction.FAIL
    assert policy.evaluate(EngineUnavailableError("..."), try_number=1, max_tries=3).action is RetryAction.DEFAULT


@pytest.mark.parametrize("alert", [None, "table t: this run quarantined 3 bad record(s) ..."])
def test_the_submit_engines_apply_task_fails_with_the_jobs_tolerance_alert(monkeypatch, alert):
    """The submit engine's apply job writes a QuarantineToleranceError's message to ``--alert-file``
    and exits 0 (a failed job would be retried, its retry find the run committed, and the alert be
    lost): the task raises it; without the file it succeeds."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from cdclake.errors import QuarantineToleranceError
    from cdclake_airflow import hooks
    from cdclake_airflow.spark_submit import ALERT_ARG, CONNECTIONS_ARG, CdcSparkSubmitOperator

    class Connections:
        def catalog_properties(self):
            return {"uri": "sqlite://"}

        def kafka_config(self):
            return {"bootstrap.servers": "127.0.0.1:9"}

        def schema_registry_config(self):
            return None

    seen = []

    def job(self, context):
        args = list(self.application_args)
        seen.append(args)
        assert args[args.index(CONNECTIONS_ARG) + 1].endswith("connections.json")
        if alert is not None and ALERT_ARG in args:
            with open(args[args.index(ALERT_ARG) + 1], "w") as out:
                out.write(alert)

    monkeypatch.setattr(hooks, "CdcLakeHook", Connections)
    monkeypatch.setattr(SparkSubmitOperator, "execute", job)
    task = CdcSparkSubmitOperator(
        task_id="apply", application="apply_cdc.py", application_args=["--plan", "{}"], alert_file=True
    )
    if alert is None:
        task.execute({})
    else:
        with pytest.raises(QuarantineToleranceError, match="quarantined 3 bad record"):
            task.execute({})
    assert seen[0][:2] == ["--plan", "{}"] and ALERT_ARG in seen[0]
    assert task.application_args == ["--plan", "{}"]
    # the maintenance job takes no alert file
    CdcSparkSubmitOperator(task_id="maintain", application="maintain_table.py").execute({})
    assert ALERT_ARG not in seen[1]


def test_dag_file_builds_a_dag_per_discovered_table_of_a_1000_table_registry(tmp_path):
    """Parsing dags/cdc_tables.py with 1,000 registered topics: one DAG each, no import error,
    no Kafka client imported (the registry is a file); bench/dag_parse_bench.py times it."""
    from cdclake_dev.fleet import fleet_topic, write_fleet

    config, registry = write_fleet(tmp_path, 1000)
    result = run_python(
        """
        import json, sys
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(dag_folder="dags/cdc_tables.py")
        print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()},
                          "dags": {d: sorted(dag.tags) for d, dag in bag.dags.items()},
                          "kafka": "confluent_kafka" in sys.modules}))
        """,
        tables_config=config,
        registry=registry,
    )
    assert result["errors"] == {} and result["kafka"] is False
    assert len(result["dags"]) == 1000
    assert "fleet" in result["dags"]["cdc_db0_t00000"]
    assert fleet_topic(9) == "fleet.db9.t00009" and "cdc_db9_t00009" in result["dags"]  # keyless: changelog


def test_a_reconcile_task_retries_a_transient_error_and_fails_at_once_on_differences():
    """``cdc_reconcile``'s retry policy: differences that remain (``DriftError``), a table it
    cannot compare (``ConfigError``) and a table that did not catch up within the run's timeout
    (``CatchUpTimeoutError``: a retry would wait as long again; soak 7 saw one run last nearly two
    hours) fail at once; a broker that does not answer, or a marker that did not arrive, is retried."""
    from airflow.sdk import RetryAction
    from confluent_kafka import KafkaError, KafkaException

    from cdclake.errors import CatchUpTimeoutError, ConfigError, DriftError, ReconcileError
    from cdclake_airflow.reconcile_dag import build_reconcile_dag
    from tests.conftest import make_table

    task = build_reconcile_dag(Settings.from_env(), [make_table()]).get_task("reconcile")
    assert task.retries >= 1
    for error in (
        DriftError("table t: 3 differing"),
        ConfigError("key column ..."),
        CatchUpTimeoutError("table t: committed offsets ... did not reach ..."),
    ):
        assert task.retry_policy.evaluate(error, try_number=1, max_tries=2).action is RetryAction.FAIL
    transient = KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
    marker = ReconcileError("the reconcile marker ... did not reach topic ...")
    for error in (transient, marker):
        assert task.retry_policy.evaluate(error, try_number=1, max_tries=2).action is RetryAction.DEFAULT


def test_reconcile_tasks_leave_executor_slots_to_the_applies_they_wait_for():
    """A reconcile task holds its executor slot while its table's applies catch up: at most
    ``reconcile_tasks`` run at once (over all runs), and the local Airflow's parallelism leaves
    room for the applies besides them (the 60-minute soak: 15 reconcile tasks over a parallelism
    of 8 stalled every apply for their whole catch-up timeout)."""
    from cdclake_airflow.reconcile_dag import build_reconcile_dag
    from cdclake_dev.airflow_env import airflow_parallelism
    from tests.conftest import make_table

    settings = Settings.from_env({"CDCLAKE_RECONCILE_TASKS": "3"})
    tables = [make_table() for _ in range(15)]
    task = build_reconcile_dag(settings, tables).get_task("reconcile")
    assert task.max_active_tis_per_dag == 3
    for cpus in (1, 2, 16):
        assert airflow_parallelism(settings, cpus) > settings.apply_pool_slots + settings.reconcile_tasks
