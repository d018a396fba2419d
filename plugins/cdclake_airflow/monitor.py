"""The "CDC tables" page of the Airflow UI: the status figures of every configured table
(:func:`cdclake.pipeline.status.status_of_tables`) next to its DAG's last run, served by the
api-server as a FastAPI app of the plugin ``plugins/cdclake_monitor_plugin.py``.

Mounted at :data:`URL_PREFIX` (``/cdc``):

* ``GET /cdc/``: the HTML page (no JavaScript, no asset from elsewhere: the per-hour plot is an
  inline SVG); a request without a valid Airflow login is redirected to the auth manager's login
  page, which comes back here.
* ``GET /cdc/README.md``, ``GET /cdc/docs/<name>.md``: the project's README and docs rendered from
  Markdown (the UI's Docs menu, "cdclake docs"), with their relative links; 404 for any other path.
* ``GET /cdc/api/tables``: the same figures as JSON
  (:func:`~cdclake_airflow.monitor_listing.paged_payload`); 401 without login.
  ``?freshness_minutes=N`` judges every table by ``N`` minutes instead of its
  ``freshness_minutes`` of the table config (on both routes).
* Both routes show one page of tables, those behind their freshness target first, under a summary
  of every table: ``?name=`` (the name holds it), ``?state=`` (``behind``, ``fresh``,
  ``unjudged``), ``?page=``, ``?page_size=`` (default 50).

Authentication and authorization are Airflow's: the user comes from Airflow's own dependency
``airflow.api_fastapi.core_api.security.get_user`` (the UI's ``_token`` cookie, or an
``Authorization: Bearer`` token of ``POST /auth/token``), and a table is listed only for a user
the auth manager lets read its DAG's runs (``is_authorized_dag(GET, RUN)``: what
``GET /api/v2/dags/{dag_id}/dagRuns`` asks).

Importing this module is cheap (the standard library only; Airflow's plugin loader executes every
file below ``plugins/``, in every Airflow process): :func:`create_app` imports FastAPI and
Airflow's API modules, and a request imports pyiceberg and confluent-kafka, never Spark. The
plugin builds the app on the first request to ``/cdc`` (``cdclake_monitor_plugin.MonitorApp``),
in the api-server only. This module has no ``from __future__ import annotations``: the routes
:func:`create_app` defines are resolved by FastAPI from their annotations' objects.
"""

import dataclasses
import functools
import logging
import re
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from cdclake_airflow.monitor_listing import BEHIND_NAMES_SHOWN, MAX_PAGE_SIZE, PAGE_SIZE, paged_payload, plural

if TYPE_CHECKING:
    from fastapi import FastAPI, HTTPException, Request, Response
    from sqlalchemy.orm import Session

    from cdclake.io.kafka import KafkaClients
    from cdclake.model.config import TableConfig
    from cdclake.pipeline.sources import SourceProbe
    from cdclake.settings import Settings
    from cdclake_airflow.hooks import CdcLakeHook

log = logging.getLogger(__name__)

URL_PREFIX = "/cdc"
"""Where the api-server mounts the app (``fastapi_apps``' ``url_prefix``)."""
PAGE_PATH = "/"
API_PATH = "/api/tables"
TOP_DOC_PATH = "/{name}.md"
DOCS_PATH = "/docs/{name}.md"
"""The project's docs (:func:`doc_file`), rendered from Markdown: the plugin's "cdclake docs" entry of the
UI's Docs menu opens ``/cdc/README.md``."""
REFRESH_SECONDS = 60
"""The page reloads itself this often (``<meta http-equiv="refresh">``)."""


# --- the figures ---------------------------------------------------------------------------------


def kafka_for_request(hook: "CdcLakeHook") -> "tuple[KafkaClients, str]":
    """``(Kafka clients, where their config came from)``: the hook's Airflow connection
    ``kafka_default`` (:attr:`cdclake_airflow.hooks.CdcLakeHook.kafka`, resolved now, through
    Airflow's secrets backends: environment variables, the metadata DB, a configured backend); when
    it cannot be resolved, ``bootstrap.servers`` of the hook's settings (``CDCLAKE_KAFKA_BOOTSTRAP``)."""
    from cdclake.io.kafka import KafkaClients

    conn_id = hook.kafka_conn_id
    try:
        return hook.kafka, f"Airflow connection {conn_id}"
    except Exception as e:  # a missing or malformed connection: the settings still name a broker
        log.warning("Airflow connection %s unusable (%s): using CDCLAKE_KAFKA_BOOTSTRAP", conn_id, e)
        return (
            KafkaClients.from_settings(hook.settings),
            f"CDCLAKE_KAFKA_BOOTSTRAP (connection {conn_id} unusable: {type(e).__name__})",
        )


def readable_tables(user: Any, tables: "Sequence[TableConfig]", session: "Session") -> "list[TableConfig]":
    """The tables whose DAG's runs ``user`` may read (the auth manager's
    ``is_authorized_dag(method="GET", access_entity=RUN)``, with the DAG's team in multi-team
    setups), in config order."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.models.dag import DagModel

    auth_manager = get_auth_manager()
    teams = DagModel.get_dag_id_to_team_name_mapping([t.dag_id for t in tables], session=session)
    return [
        t
        for t in tables
        if auth_manager.is_authorized_dag(
            method="GET",
            access_entity=DagAccessEntity.RUN,
            details=DagDetails(id=t.dag_id, team_name=teams.get(t.dag_id)),
            user=user,
        )
    ]


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def last_runs(session: "Session", dag_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The newest DAG run (greatest ``run_after``, then id) of each DAG of ``dag_ids``, from the
    Airflow metadata DB: ``{dag_id: {"run_id", "state", "run_type", "run_after_ms",
    "start_date_ms", "end_date_ms"}}`` (epoch ms or ``None``; each also as ``<x>_iso``, ISO 8601
    in UTC); DAGs without a run are left out. One query."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy import func, select

    from cdclake.model.status import iso_time

    if not dag_ids:
        return {}
    rank = (
        func.row_number()
        .over(partition_by=DagRun.dag_id, order_by=(DagRun.run_after.desc(), DagRun.id.desc()))
        .label("rank")
    )
    ranked = select(DagRun.id, rank).where(DagRun.dag_id.in_(list(dag_ids))).subquery()
    runs = session.scalars(select(DagRun).join(ranked, DagRun.id == ranked.c.id).where(ranked.c.rank == 1))
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        times = {"run_after": _ms(run.run_after), "start_date": _ms(run.start_date), "end_date": _ms(run.end_date)}
        out[run.dag_id] = {
            "run_id": run.run_id,
            "state": None if run.state is None else str(run.state),
            "run_type": None if run.run_type is None else str(run.run_type),
            **{f"{name}_ms": ms for name, ms in times.items()},
            **{f"{name}_iso": iso_time(ms) for name, ms in times.items()},
        }
    return out


def run_problem(status: Mapping[str, Any], run: Mapping[str, Any] | None) -> str | None:
    """A problem sentence when the DAG's newest run failed and the table holds no record of its
    failed tries (:attr:`~cdclake.model.status.TableStatus.run_failure`: the DAG's callbacks
    write it on the Iceberg table, so a run failing before the table exists leaves none);
    ``None`` otherwise."""
    if run is None or run.get("state") != "failed" or status.get("run_failure"):
        return None
    return f"its DAG's newest run {run['run_id']!r} failed: see its log"


def paused_dags(session: "Session", dag_ids: Sequence[str]) -> dict[str, bool]:
    """Whether each DAG of ``dag_ids`` is paused (``DagModel.is_paused``), from the Airflow
    metadata DB; a DAG Airflow has not parsed yet is left out. One query."""
    from airflow.models.dag import DagModel
    from sqlalchemy import select

    if not dag_ids:
        return {}
    rows = session.execute(select(DagModel.dag_id, DagModel.is_paused).where(DagModel.dag_id.in_(list(dag_ids))))
    return {dag_id: bool(paused) for dag_id, paused in rows}


def asset_ids(session: "Session", assets: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """The id of each asset ``(name, uri)`` of ``assets`` Airflow knows (its page in the UI is
    ``/assets/<id>``), from the Airflow metadata DB. One query."""
    from airflow.models.asset import AssetModel
    from sqlalchemy import select

    if not assets:
        return {}
    uris = sorted({uri for _, uri in assets})
    rows = session.execute(select(AssetModel.id, AssetModel.name, AssetModel.uri).where(AssetModel.uri.in_(uris)))
    wanted = set(assets)
    return {(name, uri): int(id_) for id_, name, uri in rows if (name, uri) in wanted}


def log_task_ids(settings: "Settings", tables: "Sequence[TableConfig]") -> dict[str, str]:
    """The task of each table's scheduled DAG whose log tells the table's run in its last line:
    ``apply`` (engine ``connect``), ``publish`` (engine ``submit``), ``apply_<k>`` of its shared
    DAG (:func:`cdclake.model.shared.task_tables`); by table name, for every table of ``tables``
    (the whole table config: a shared DAG's cut into tasks counts every member)."""
    from cdclake.model.shared import shared_dags, task_tables

    tasks = {t.name: "apply" if (t.engine or settings.engine) == "connect" else "publish" for t in tables}
    for members in shared_dags(tables).values():
        for k, chunk in enumerate(task_tables(members)):
            tasks.update({t.name: f"apply_{k}" for t in chunk})
    return tasks


def judge_paused(row: dict[str, Any], paused: bool | None) -> None:
    """Note in ``row`` (a table's figures) whether the DAG that runs it on schedule is ``paused``
    (``None``: Airflow does not know the DAG yet); a paused table within its freshness target is
    not judged (``fresh`` ``None``: the page says *paused*, not *fresh*), one past it stays late."""
    row["paused"] = paused
    if paused and row.get("fresh"):
        row["fresh"] = None


def sources_for_request(hook: "CdcLakeHook") -> "tuple[SourceProbe | None, str]":
    """``(what the status asks about the sources, where it came from)``: the hook's
    :meth:`~cdclake_airflow.hooks.CdcLakeHook.source_probe` (Airflow connection ``kafka_connect``,
    else ``CDCLAKE_CONNECT_URL``; ``None`` with neither); a connection that cannot be used is said,
    and the sources are not asked."""
    try:
        probe = hook.source_probe()
    except Exception as e:  # a malformed connection: the page still shows the tables
        log.warning("Airflow connection %s unusable (%s): sources not watched", hook.kafka_connect_conn_id, e)
        return None, f"not watched (connection {hook.kafka_connect_conn_id} unusable: {e})"
    if probe is None:
        return None, f"not watched (no connection {hook.kafka_connect_conn_id}, no CDCLAKE_CONNECT_URL)"
    return probe, probe.connect.url


def tables_payload(user: Any, session: "Session", freshness_minutes: int | None = None) -> dict[str, Any]:
    """What both routes show: ``{"checked_at_ms", "kafka", "connect", "sources", "tables", "groups"}``.

    ``tables`` holds, for each configured table ``user`` may read (config order),
    :class:`~cdclake.model.status.TableStatus` as JSON (``model_dump(mode="json")``: its
    units, epoch ms and durations in ms, times also in ISO 8601, snapshot ids as strings) plus
    ``dag_id`` (the table's DAG), ``scheduled_dag_id`` (the DAG that runs it on schedule: its
    shared DAG, or its own), ``paused`` (whether ``scheduled_dag_id`` is paused; ``None`` before
    Airflow parsed it: :func:`judge_paused`, a paused table is not called fresh), ``last_run`` (of
    ``scheduled_dag_id``, :func:`last_runs`, ``None`` when the DAG never ran), ``log_task_id`` (the
    task of that run whose log ends with the run's line, :func:`log_task_ids`), ``asset_uri`` and
    ``asset_id`` (the table's asset, ``None`` before Airflow knows it: its page is
    ``/assets/<id>``); a newest run of a table's own DAG that failed with no record of it on
    the table is one more problem (:func:`run_problem`), and such a table is not fresh (a shared
    DAG's run fails when any of its tables does: each table's record says which). ``groups``: the :class:`~cdclake.model.groups.GroupStatus` of each
    table group of those tables, as a dict. ``kafka`` names where the Kafka client config came from
    (:func:`kafka_for_request`). ``sources``: the :class:`~cdclake.model.source_health.SourceStatus`
    of each source of those tables (its connector's state, its binlog lag; empty when Kafka
    Connect is not configured), ``connect`` where Kafka Connect is or why it is not watched
    (:func:`sources_for_request`). Freshness: ``freshness_minutes`` for every table when given,
    else each table's ``freshness_minutes`` of the table config (unset: not judged).
    """
    from cdclake.model.config import load_tables
    from cdclake.model.status import iso_time
    from cdclake.pipeline.groups import group_statuses
    from cdclake.pipeline.status import status_report
    from cdclake_airflow.hooks import CdcLakeHook
    from cdclake_airflow.table_dag import table_asset_name, table_asset_uri

    hook = CdcLakeHook()
    settings = hook.settings
    configured = load_tables(settings.tables_config, settings.discovery_registry).tables
    tables = readable_tables(user, configured, session)
    kafka, kafka_source = kafka_for_request(hook)
    probe, connect_source = sources_for_request(hook)
    now_ms = int(time.time() * 1000)
    # None: each table's freshness_minutes of the table config
    report = status_report(
        hook.catalog, kafka, tables, now_ms=now_ms, freshness_minutes=freshness_minutes, sources=probe
    )
    statuses = report.tables
    scheduled = sorted({t.scheduled_dag_id for t in tables})
    runs, paused = last_runs(session, scheduled), paused_dags(session, scheduled)
    assets = {t.name: (table_asset_name(settings, t), table_asset_uri(settings, t)) for t in tables}
    ids, log_tasks = asset_ids(session, list(assets.values())), log_task_ids(settings, configured)
    rows = []
    for cfg, st in zip(tables, statuses, strict=True):
        row = {
            **st.model_dump(mode="json"),
            "dag_id": cfg.dag_id,
            "scheduled_dag_id": cfg.scheduled_dag_id,
            "last_run": runs.get(cfg.scheduled_dag_id),
            "log_task_id": log_tasks.get(cfg.name),
            "asset_uri": assets[cfg.name][1],
            "asset_id": ids.get(assets[cfg.name]),
        }
        # a shared DAG's run fails when any of its tables does: the table's own record of failed
        # tries (in its problems already) says whether it was this one
        problem = run_problem(row, row["last_run"]) if cfg.shared_dag is None else None
        if problem is not None:
            row["problems"] = [*row["problems"], problem]
            row["fresh"] = False if row["fresh"] is not None else None
        judge_paused(row, paused.get(cfg.scheduled_dag_id))
        rows.append(row)
    groups = [dataclasses.asdict(g) for g in group_statuses(hook.catalog, tables)]
    return {
        "checked_at_ms": now_ms,
        "checked_at_iso": iso_time(now_ms),
        "kafka": kafka_source,
        "connect": connect_source,
        "sources": [source.model_dump(mode="json") for source in report.sources],
        "tables": rows,
        "groups": groups,
    }


# --- the page -------------------------------------------------------------------------------------


def format_duration(ms: int | None) -> str:
    """:func:`cdclake.model.status.format_duration` (imported when first used: Airflow's plugin
    loader imports this module in every Airflow process)."""
    from cdclake.model.status import format_duration as _format

    return _format(ms)


def format_time(ms: int | None) -> str:
    """Epoch ms as ``2026-11-24 03:31:06 UTC``; ``-`` when unknown."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


BAR_WIDTH = 5
BAR_GAP = 1
PLOT_HEIGHT = 32


def hourly_bars(events_per_hour: Sequence[int]) -> dict[str, Any]:
    """The per-hour plot of the records applied per hour (oldest first), as the template draws it:
    ``bars`` (one per hour: ``x``, ``h`` its height, proportional to the busiest hour and at least
    1 px when not 0, ``count``, ``when``), ``width``, ``plot_height``, ``bar_width``, ``hours`` and
    ``total``."""
    n = len(events_per_hour)
    peak = max(events_per_hour, default=0)
    bars = []
    for i, count in enumerate(events_per_hour):
        ago = n - i
        bars.append(
            {
                "x": i * (BAR_WIDTH + BAR_GAP),
                "h": 0 if count <= 0 or peak <= 0 else max(1, round(count / peak * PLOT_HEIGHT)),
                "count": int(count),
                "when": "the last hour" if ago == 1 else f"{ago}h to {ago - 1}h ago",
            }
        )
    return {
        "bars": bars,
        "width": n * (BAR_WIDTH + BAR_GAP),
        "plot_height": PLOT_HEIGHT,
        "bar_width": BAR_WIDTH,
        "hours": n,
        "total": sum(events_per_hour),
    }


def hourly_svg(events_per_hour: Sequence[int]) -> str:
    """The records applied per hour (oldest first) as an inline SVG bar plot (:func:`hourly_bars`):
    one ``rect.bar`` per hour (``data-events``: its count), each with a ``<title>`` tooltip."""
    return str(_page_template().module.hourly_svg(hourly_bars(events_per_hour)))


OP_NAMES = {"c": "create", "u": "update", "d": "delete", "r": "snapshot read", "t": "truncate"}
"""Debezium's ``op`` codes (Debezium's MySQL connector documentation, "Data change events")."""
OP_ORDER = ("c", "u", "d", "r", "t")


def ordered_ops(ops: Mapping[str, int]) -> list[tuple[str, int]]:
    """``(op, count)`` of the events applied by op, in :data:`OP_ORDER` (unknown ops last, by name)."""
    ordered = sorted(ops, key=lambda op: (OP_ORDER.index(op) if op in OP_ORDER else len(OP_ORDER), op))
    return [(op, int(ops[op])) for op in ordered]


COLUMNS = (
    "table",
    "fresh",
    "lag (events)",
    "lag (time)",
    "last commit",
    "last run",
    "events per hour (24 h)",
    "by op (24 h)",
    "quarantined records",
    "columns",
    "Debezium snapshot",
    "last transaction",
    "last reconcile",
)
"""The page's column headers, in the order of a row's cells (each cell's class names its figure)."""

STATES = (("", "any"), ("behind", "behind their target"), ("fresh", "fresh"), ("unjudged", "not judged"))
"""The filter's states: ``?state=`` values and their labels."""

TEMPLATES = Path(__file__).with_name("templates")
"""The page's Jinja2 templates."""

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;font-size:13px;margin:12px;color:#1a202c;background:#fff}
.scroll{overflow-x:auto}
h1{font-size:20px;margin:0 0 4px}
.meta{color:#718096;margin-bottom:12px}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #e2e8f0;padding:5px 6px;text-align:left;vertical-align:top}
th{font-weight:600;color:#4a5568}
.when,.name,.state,.badge{white-space:nowrap}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.name{font-weight:600}.sub{color:#718096;font-size:12px}.muted{color:#a0aec0}
.badge{border-radius:4px;padding:1px 6px;font-weight:600}.ok{background:#c6f6d5;color:#22543d}.bad{background:#fed7d7;color:#822727}
.state{font-weight:600;text-decoration:none}.state-success{color:#2f855a}.state-failed{color:#c53030}
.state-running,.state-queued{color:#2b6cb0}
svg.hourly .bar{fill:#4299e1}svg.hourly .axis{stroke:#cbd5e0;stroke-width:1}
.op{display:inline-block;background:#edf2f7;border-radius:4px;padding:0 4px;margin:0 2px 2px 0;font-size:12px}
tr.problems td{border-bottom:1px solid #e2e8f0;background:#fffaf0;color:#9c4221;padding-top:0}
tr.problems ul{margin:4px 0;padding-left:20px}
.replay{background:#e9d8fd;color:#44337a;font-size:11px}.legend{color:#718096;margin-top:8px}
.paused{background:#edf2f7;color:#4a5568}.dag-state{font-weight:600}.dag-state.paused{background:none;color:#b7791f}
.dag-state.active{color:#2f855a}.filters label{color:#4a5568;margin-right:4px}.filters select{margin-right:8px}
@media (prefers-color-scheme: dark){body{background:#1a202c;color:#e2e8f0}th{color:#a0aec0}
th,td{border-color:#2d3748}.op{background:#2d3748}tr.problems td{background:#3b2f1e;color:#fbd38d}}
"""


def page_href(listing: Mapping[str, Any], page: int) -> str:
    """The link to page ``page`` of :func:`~cdclake_airflow.monitor_listing.paged_payload`'s
    ``listing``, with its filters (and its page size when not the default)."""
    query = {k: listing[k] for k in ("name", "state") if listing[k]}
    if listing["page_size"] != PAGE_SIZE:
        query["page_size"] = listing["page_size"]
    return "?" + "&".join(f"{k}={quote(str(v))}" for k, v in {**query, "page": page}.items())


def _page_template() -> Any:
    """The page's template (``templates/cdc_tables.html``)."""
    return _templates().get_template("cdc_tables.html")


@functools.cache
def _templates() -> Any:
    """The Jinja2 environment of the plugin's templates (:data:`TEMPLATES`), autoescaped: every
    value is HTML-escaped unless marked safe. Jinja2 (Airflow's dependency) is imported on first
    use."""
    import jinja2
    from markupsafe import Markup

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.globals.update(
        duration=format_duration,
        utc=format_time,
        plural=plural,
        quote=lambda value, safe="": quote(str(value), safe=safe),
        hourly_bars=hourly_bars,
        ordered_ops=ordered_ops,
        page_href=page_href,
        op_names=OP_NAMES,
        op_order=OP_ORDER,
        columns=COLUMNS,
        states=STATES,
        refresh_seconds=REFRESH_SECONDS,
        behind_names_shown=BEHIND_NAMES_SHOWN,
        style=Markup(STYLE),  # this module's constant, as is
    )
    return env


def _sources(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each source's entry (``li.source``): ``name``, ``state``, ``running``, ``head`` (its
    connector's state and why it does not run) and ``rest`` (its binlog lag, problems, remedy),
    as ``cdclake status`` prints them."""
    from cdclake.model.source_health import SourceStatus

    out = []
    for raw in payload.get("sources") or []:
        source = SourceStatus.model_validate(raw)
        head, *rest = source.lines()
        out.append(
            {
                "name": source.name,
                "state": source.connector.state,
                "running": source.connector.running,
                "head": head,
                "rest": [line.strip() for line in rest],
            }
        )
    return out


def _groups(payload: Mapping[str, Any]) -> list[str]:
    """One line per table group (``ul#cdc-groups``): where its tag shows the source, and since when."""
    from cdclake.model.groups import GroupStatus

    now = payload["checked_at_ms"]
    return [GroupStatus(**g).describe(now) for g in payload.get("groups") or []]


def render_page(payload: Mapping[str, Any]) -> str:
    """The HTML page of :func:`tables_payload`'s result (template ``templates/cdc_tables.html``):
    one row per table (``tr.table-row``, ``data-table`` its name; a cell per figure, its class the
    figure), the table's problems and warnings (``li.warning``) in a row under it
    (``tr.problems``). Each table's name links to its DAG, its asset URI to its asset page, its last
    run to the run and that run's task log. Every value is HTML-escaped."""
    return str(_page_template().render(p=payload, sources=_sources(payload), groups=_groups(payload)))


# --- the project's docs ------------------------------------------------------------------------------

TOP_DOCS = ("README", "CHANGELOG")
"""The documents at the project's root the docs routes serve (``/cdc/README.md``); every
``docs/<name>.md`` is served as ``/cdc/docs/<name>.md``, so that the documents' relative links
(``docs/guide.md``, ``operations.md``, ``../README.md``) stay within."""
_DOC_NAME = re.compile(r"[A-Za-z0-9_-]+")


def doc_file(name: str, folder: str = "") -> Path | None:
    """The project's Markdown document ``<folder>/<name>.md`` a docs route names: one of
    :data:`TOP_DOCS` (``folder`` empty) or a file of ``docs/`` (``folder`` ``docs``) that exists;
    ``None`` for any other name (a path, another folder)."""
    from cdclake.settings import PROJECT_ROOT

    if not _DOC_NAME.fullmatch(name):
        return None
    if folder == "docs":
        path = PROJECT_ROOT / "docs" / f"{name}.md"
    elif not folder and name in TOP_DOCS:
        path = PROJECT_ROOT / f"{name}.md"
    else:
        return None
    return path if path.is_file() else None


def heading_id(text: str) -> str:
    """A heading's anchor as GitHub makes it (the documents link ``operations.md#a-heading``):
    lower case, punctuation dropped but ``-`` and ``_``, spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def render_doc(path: Path, root: str) -> str:
    """A Markdown document of the project as an HTML page (template ``templates/cdc_doc.html``):
    CommonMark with tables (markdown-it-py, Airflow's dependency through rich), any HTML in the
    Markdown escaped, headings with GitHub's anchors; ``root`` is the relative link back to
    ``/cdc/`` (its navigation: README, guide, operations, monitoring, the CDC tables page)."""
    from markdown_it import MarkdownIt
    from markupsafe import Markup

    text = path.read_text(encoding="utf-8")
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(text)
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and i + 1 < len(tokens):
            token.attrSet("id", heading_id(tokens[i + 1].content))
    title = next((line.lstrip("#").strip() for line in text.splitlines() if line.startswith("# ")), path.stem)
    body = Markup(md.renderer.render(tokens, md.options, {}))  # markdown-it escaped the document
    return str(_templates().get_template("cdc_doc.html").render(title=title, body=body, root=root))


# --- the app --------------------------------------------------------------------------------------


def create_app() -> "FastAPI":
    """The FastAPI app of the page, the JSON endpoint and the project's docs (mounted at
    :data:`URL_PREFIX`): :func:`_add_table_routes`, :func:`_add_doc_routes`; a request without a
    valid login is answered by :func:`_login_for_the_page`."""
    from fastapi import FastAPI, HTTPException

    app = FastAPI(
        title="cdclake: CDC tables",
        description="The status figures of the configured CDC tables (cdclake.pipeline.status).",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.exception_handler(HTTPException)(_login_for_the_page)
    _add_table_routes(app)
    _add_doc_routes(app)
    return app


async def _login_for_the_page(request: "Request", exc: "HTTPException") -> "Response":
    """The page or a document without a valid login goes to the auth manager's login page
    (back there after); the JSON endpoint answers the status as is."""
    from fastapi import status
    from fastapi.responses import JSONResponse, RedirectResponse

    if exc.status_code in (status.HTTP_401_UNAUTHORIZED, status.HTTP_403_FORBIDDEN) and (
        URL_PREFIX + "/api/" not in request.url.path
    ):
        from airflow.api_fastapi.app import get_auth_manager

        return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


def _page_asked_dependency() -> Any:
    """The ``Depends`` of the page of tables a request asks for (``?name=``, ``?state=``,
    ``?page=``, ``?page_size=``): :func:`~cdclake_airflow.monitor_listing.paged_payload`'s keywords."""
    from fastapi import Depends, Query

    name_query = Query(default=None, description="only the tables whose name holds this text")
    state_query = Query(default=None, pattern="^(|behind|fresh|unjudged)$", description="only the tables in this state")
    page_query = Query(default=1, ge=1, description="the page (behind their target first)")
    size_query = Query(default=PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE, description="tables per page")

    def page_asked(
        name: str | None = name_query,
        state: str | None = state_query,
        page: int = page_query,
        page_size: int = size_query,
    ) -> dict[str, Any]:
        """The page a request asks for: :func:`~cdclake_airflow.monitor_listing.paged_payload`'s
        keywords (the form sends an empty state for "any")."""
        return {"name": name, "state": state or None, "page": page, "page_size": page_size}

    return Depends(page_asked)


def _add_table_routes(app: "FastAPI") -> None:
    """The routes of the tables' figures on ``app``: :data:`API_PATH` (JSON) and :data:`PAGE_PATH`
    (the HTML page), each one page of tables (:func:`_page_asked_dependency`), ``?freshness_minutes=``."""
    from airflow.api_fastapi.common.db.common import SessionDep
    from airflow.api_fastapi.core_api.security import GetUserDep
    from fastapi import Query
    from fastapi.responses import HTMLResponse

    freshness_query = Query(
        default=None, gt=0, description="judge every table by this limit (minutes) instead of its table config's"
    )
    page_dep = _page_asked_dependency()

    @app.get(API_PATH)
    def tables_json(
        user: GetUserDep,
        session: SessionDep,
        freshness_minutes: int | None = freshness_query,
        asked: dict[str, Any] = page_dep,
    ) -> Any:
        """The status figures of the tables the user may read, one page
        (:func:`~cdclake_airflow.monitor_listing.paged_payload`)."""
        return paged_payload(tables_payload(user, session, freshness_minutes), **asked)

    @app.get(PAGE_PATH, response_class=HTMLResponse)
    def tables_page(
        user: GetUserDep,
        session: SessionDep,
        freshness_minutes: int | None = freshness_query,
        asked: dict[str, Any] = page_dep,
    ) -> str:
        """The HTML page (:func:`render_page`) of one page of tables."""
        return render_page(paged_payload(tables_payload(user, session, freshness_minutes), **asked))


def _doc_page(name: str, folder: str, root: str) -> str:
    """The page (:func:`render_doc`, ``root`` its link back to ``/cdc/``) of the document a docs
    route names (:func:`doc_file`); ``HTTPException`` 404 when there is none."""
    from fastapi import HTTPException, status

    path = doc_file(name, folder)
    if path is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no document {folder + '/' if folder else ''}{name}.md")
    return render_doc(path, root)


def _add_doc_routes(app: "FastAPI") -> None:
    """The routes of the project's docs on ``app``: :data:`TOP_DOC_PATH` and :data:`DOCS_PATH`,
    for a logged-in user."""
    from airflow.api_fastapi.core_api.security import GetUserDep
    from fastapi.responses import HTMLResponse

    @app.get(TOP_DOC_PATH, response_class=HTMLResponse)
    def top_doc(name: str, user: GetUserDep) -> str:
        """``README.md`` or ``CHANGELOG.md`` of the project (:func:`render_doc`); 404 for any other."""
        return _doc_page(name, "", "./")

    @app.get(DOCS_PATH, response_class=HTMLResponse)
    def docs_doc(name: str, user: GetUserDep) -> str:
        """``docs/<name>.md`` of the project (:func:`render_doc`); 404 when there is none."""
        return _doc_page(name, "docs", "../")
