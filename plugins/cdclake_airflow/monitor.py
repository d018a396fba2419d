"""The "CDC tables" page of the Airflow UI: the status figures of every configured table
(:func:`cdclake.pipeline.status.status_of_tables`) next to its DAG's last run, served by the
api-server as a FastAPI app of the plugin ``plugins/cdclake_monitor_plugin.py``.

Mounted at :data:`URL_PREFIX` (``/cdc``):

* ``GET /cdc/``: the HTML page (no JavaScript, no asset from elsewhere: the per-hour plot is an
  inline SVG); a request without a valid Airflow login is redirected to the auth manager's login
  page, which comes back here.
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
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from cdclake_airflow.monitor_listing import MAX_PAGE_SIZE, PAGE_SIZE, html_text, listing_html, paged_payload, plural

if TYPE_CHECKING:
    from fastapi import FastAPI
    from sqlalchemy.orm import Session

    from cdclake.io.kafka import KafkaClients
    from cdclake.model.config import TableConfig
    from cdclake.pipeline.sources import SourceProbe
    from cdclake_airflow.hooks import CdcLakeHook

log = logging.getLogger(__name__)

URL_PREFIX = "/cdc"
"""Where the api-server mounts the app (``fastapi_apps``' ``url_prefix``)."""
PAGE_PATH = "/"
API_PATH = "/api/tables"
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
    shared DAG, or its own) and ``last_run`` (of ``scheduled_dag_id``, :func:`last_runs`, ``None``
    when the DAG never ran); a newest run of a table's own DAG that failed with no record of it on
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

    hook = CdcLakeHook()
    tables = readable_tables(
        user, load_tables(hook.settings.tables_config, hook.settings.discovery_registry).tables, session
    )
    kafka, kafka_source = kafka_for_request(hook)
    probe, connect_source = sources_for_request(hook)
    now_ms = int(time.time() * 1000)
    # None: each table's freshness_minutes of the table config
    report = status_report(
        hook.catalog, kafka, tables, now_ms=now_ms, freshness_minutes=freshness_minutes, sources=probe
    )
    statuses = report.tables
    runs = last_runs(session, sorted({t.scheduled_dag_id for t in tables}))
    rows = []
    for cfg, st in zip(tables, statuses, strict=True):
        row = {
            **st.model_dump(mode="json"),
            "dag_id": cfg.dag_id,
            "scheduled_dag_id": cfg.scheduled_dag_id,
            "last_run": runs.get(cfg.scheduled_dag_id),
        }
        # a shared DAG's run fails when any of its tables does: the table's own record of failed
        # tries (in its problems already) says whether it was this one
        problem = run_problem(row, row["last_run"]) if cfg.shared_dag is None else None
        if problem is not None:
            row["problems"] = [*row["problems"], problem]
            row["fresh"] = False if row["fresh"] is not None else None
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


def _when(ms: int | None, now_ms: int, verb: str = "") -> str:
    """``<div class="sub when">`` with the age of ``ms`` (``12m05s ago``), its UTC time in the tooltip."""
    if ms is None:
        return ""
    return f'<div class="sub when" title="{html_text(format_time(ms))}">{html_text(verb)}{html_text(format_duration(now_ms - ms))} ago</div>'


BAR_WIDTH = 5
BAR_GAP = 1
PLOT_HEIGHT = 32


def hourly_svg(events_per_hour: Sequence[int]) -> str:
    """The records applied per hour (oldest first) as an inline SVG bar plot: one ``rect.bar``
    per hour (``data-events``: its count; height proportional to the busiest hour, at least 1 px
    when not 0), each with a ``<title>`` tooltip."""
    n = len(events_per_hour)
    peak = max(events_per_hour, default=0)
    width = n * (BAR_WIDTH + BAR_GAP)
    total = sum(events_per_hour)
    bars = []
    for i, count in enumerate(events_per_hour):
        h = 0 if count <= 0 or peak <= 0 else max(1, round(count / peak * PLOT_HEIGHT))
        ago = n - i
        when = "the last hour" if ago == 1 else f"{ago}h to {ago - 1}h ago"
        bars.append(
            f'<rect class="bar" x="{i * (BAR_WIDTH + BAR_GAP)}" y="{PLOT_HEIGHT - h}" width="{BAR_WIDTH}" '
            f'height="{h}" data-events="{int(count)}"><title>{when}: {int(count)} events</title></rect>'
        )
    return (
        f'<svg class="hourly" role="img" width="{width}" height="{PLOT_HEIGHT + 1}" '
        f'viewBox="0 0 {width} {PLOT_HEIGHT + 1}" aria-label="events applied per hour, last {n} hours: {total} in all">'
        f'<line x1="0" y1="{PLOT_HEIGHT + 0.5}" x2="{width}" y2="{PLOT_HEIGHT + 0.5}" class="axis"/>'
        + "".join(bars)
        + "</svg>"
    )


OP_NAMES = {"c": "create", "u": "update", "d": "delete", "r": "snapshot read", "t": "truncate"}
"""Debezium's ``op`` codes (Debezium's MySQL connector documentation, "Data change events")."""
OP_ORDER = ("c", "u", "d", "r", "t")


def _ops(ops: Mapping[str, int]) -> str:
    if not ops:
        return '<span class="muted">-</span>'
    ordered = sorted(ops, key=lambda op: (OP_ORDER.index(op) if op in OP_ORDER else len(OP_ORDER), op))
    return " ".join(
        f'<span class="op" data-op="{html_text(op)}" title="{html_text(OP_NAMES.get(op, op))}">{html_text(op)}&nbsp;{int(ops[op])}</span>'
        for op in ordered
    )


def _fresh(row: Mapping[str, Any]) -> str:
    failure = row.get("run_failure")
    if failure:  # a table stuck on failures is never fresh; what failed is in its problems row
        tries = int(failure["failed_tries"])
        return (
            f'<span class="badge bad run-failure" title="{tries} failed tr{"y" if tries == 1 else "ies"}: '
            f'{html_text(failure["error"])}">{html_text(failure["state"])}</span>'
        )
    source = row.get("source")
    if source and not source.get("running"):  # nothing reaches its topic: its own lag says nothing
        return (
            f'<span class="badge bad source-down" title="source {html_text(source["name"])}: '
            f'{html_text(source.get("reason"))}">source {html_text(source["state"])}</span>'
        )
    fresh, limit = row.get("fresh"), row.get("freshness_minutes")
    if fresh is True:
        return f'<span class="badge ok" title="target {html_text(limit)} min">fresh</span>'
    if fresh is False:
        return f'<span class="badge bad" title="target {html_text(limit)} min">late</span>'
    why = "no freshness target" if limit is None else "lag unknown"
    return f'<span class="muted" title="{why}">-</span>'


def _last_run(row: Mapping[str, Any]) -> str:
    run = row.get("last_run")
    if not run:
        return '<span class="muted">never</span>'
    state = run.get("state") or "none"
    when = run.get("end_date_ms") or run.get("start_date_ms") or run.get("run_after_ms")
    dag_id = row.get("scheduled_dag_id") or row["dag_id"]
    href = f"../dags/{quote(str(dag_id), safe='')}/runs/{quote(str(run['run_id']), safe='')}"
    verb = "ended " if run.get("end_date_ms") else "started " if run.get("start_date_ms") else "due "
    return (
        f'<a class="state state-{html_text(state)}" href="{html_text(href)}" target="_top" title="{html_text(run["run_id"])}">{html_text(state)}</a>'
        + _when(when, int(row["checked_at_ms"]), verb)
    )


def _lag_time(row: Mapping[str, Any]) -> str:
    source = row.get("source")
    end_to_end = ""
    if source and row.get("end_to_end_lag_ms") is not None:
        end_to_end = (
            f'<div class="sub end-to-end" title="source -> Kafka -> lake: the greater of this lag and how far its connector is '
            f'behind the source">end to end {html_text(format_duration(row["end_to_end_lag_ms"]))}</div>'
        )
    if row.get("caught_up"):  # nothing pending: the newest event's age is the source's quiet time
        age = format_duration(row.get("last_event_age_ms"))
        return (
            f'<span class="caught-up" title="every record of the topic applied; newest event {html_text(age)} old">caught up</span>'
            + end_to_end
        )
    return (
        f'<span title="from {html_text(row.get("lag_basis") or "-")}">{html_text(format_duration(row.get("lag_ms")))}</span>'
        + end_to_end
    )


def _last_commit(row: Mapping[str, Any]) -> str:
    commit = row.get("last_commit")
    if commit is None:
        return '<span class="muted">never</span>'
    replay = ' <span class="badge replay" title="a manual replay of records applied before">replay</span>'
    return (
        f"{html_text(format_duration(commit['age_ms']))} ago{replay if commit.get('replay') else ''}"
        f'<div class="sub when">{html_text(format_time(commit["committed_at_ms"]))}</div>'
        f'<div class="sub">snapshot <span class="snapshot-id">{html_text(commit["snapshot_id"])}</span></div>'
    )


def _hourly(row: Mapping[str, Any]) -> str:
    activity = row.get("activity_24h") or {}
    counts = f"{plural(activity.get('events', 0), 'event')}, {plural(activity.get('commits', 0), 'commit')}"
    replays = int(activity.get("replays") or 0)
    if replays:  # records read again: not new source activity, so not in the plot or the counts
        counts += f'<div class="replays">{plural(replays, "replay")} ({plural(activity.get("replay_events", 0), "event")}) not counted</div>'
    return f'{hourly_svg(row.get("events_per_hour") or [])}<div class="sub">{counts}</div>'


def _transactions(row: Mapping[str, Any]) -> str:
    txn = row.get("transactions")
    if not txn:
        return '<span class="muted" title="the table does not commit whole source transactions">-</span>'
    last = txn.get("last_id")
    cell = (
        f'<span class="transaction-id" title="its last event at {html_text(txn.get("last_position"))}">{html_text(last)}</span>'
        if last
        else '<span class="muted">none yet</span>'
    )
    waiting = int(txn.get("waiting_events") or 0)
    if waiting:
        cell += f'<div class="sub waiting" title="for transaction {html_text(txn.get("waiting_for"))}">{plural(waiting, "record")} wait</div>'
    return cell


def _reconcile(row: Mapping[str, Any]) -> str:
    rec = row.get("last_reconcile")
    if not rec:
        return '<span class="muted">never</span>'
    diffs = int(rec["only_in_source"]) + int(rec["only_in_lake"]) + int(rec["differing"])
    verdict = "clean" if rec["clean"] else f"{diffs} diff{'s' if diffs != 1 else ''}"
    repaired = " (repaired)" if rec["repaired"] else ""
    return f"{html_text(verdict)}{repaired}<div class=sub>{html_text(format_duration(rec['age_ms']))} ago</div>"


COLUMNS = (
    "table",
    "fresh",
    "lag events",
    "lag time",
    "last commit",
    "last run",
    "events per hour (24 h)",
    "by op (24 h)",
    "quarantine",
    "schema",
    "snapshot run",
    "last transaction",
    "last reconcile",
)


def _row(row: Mapping[str, Any]) -> str:
    name = str(row["name"])
    snap = row.get("snapshot_in_progress")
    activity = row.get("activity_24h") or {}
    lag_events = row.get("lag_events")
    cells = {
        "table": f'<div class="name">{html_text(name)}</div><div class="sub">{html_text(row["identifier"])} &larr; {html_text(row["topic"])}</div>',
        "fresh": _fresh(row),
        "lag-events": "-" if lag_events is None else html_text(int(lag_events)),
        "lag-time": _lag_time(row),
        "last-commit": _last_commit(row),
        "last-run": _last_run(row),
        "hourly": _hourly(row),
        "ops": _ops(activity.get("ops") or {}),
        "quarantine": html_text(int(row.get("open_quarantine") or 0)),
        "schema": "-"
        if row.get("schema_id") is None
        else f"{html_text(row['schema_id'])}<div class=sub>{html_text(row.get('column_count'))} columns</div>",
        "snapshot-run": "no"
        if not snap
        else f"yes<div class=sub>{html_text(int(snap['records']))} records{', end applied' if snap['end_applied'] else ''}</div>",
        "transactions": _transactions(row),
        "last-reconcile": _reconcile(row),
    }
    numeric = {"lag-events", "quarantine"}
    tds = "".join(f'<td class="{k}{" num" if k in numeric else ""}">{v}</td>' for k, v in cells.items())
    out = f'<tr class="table-row" data-table="{html_text(name)}">{tds}</tr>'
    problems, warnings = row.get("problems") or [], row.get("warnings") or []
    if problems or warnings:  # a warning (events that contradict the connector modes) leaves the table fresh
        items = "".join(f"<li>{html_text(p)}</li>" for p in problems)
        items += "".join(f'<li class="warning">warning: {html_text(w)}</li>' for w in warnings)
        out += f'<tr class="problems" data-table="{html_text(name)}"><td colspan="{len(COLUMNS)}"><ul>{items}</ul></td></tr>'
    return out


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
@media (prefers-color-scheme: dark){body{background:#1a202c;color:#e2e8f0}th{color:#a0aec0}
th,td{border-color:#2d3748}.op{background:#2d3748}tr.problems td{background:#3b2f1e;color:#fbd38d}}
"""


def _legend() -> str:
    ops = "; ".join(f"<b>{html_text(op)}</b> {html_text(OP_NAMES[op])}" for op in OP_ORDER)
    return (
        f'<div class="legend" id="legend">by op: the Debezium op of the events applied: {ops}. '
        "Events per hour and by op count new source events only: a manual replay reads records applied "
        "before and is counted apart. Lag time: how far the newest event applied is behind now while "
        "events wait in the topic; <i>caught up</i> when none waits. Last transaction: the last whole source "
        "transaction applied (every commit holds whole ones under <code>transactions: whole</code>) and the "
        "records waiting for one whose events or END are not all in Kafka yet.</div>"
    )


def _groups(payload: Mapping[str, Any]) -> str:
    """One line per table group (``ul#cdc-groups``): where its tag shows the source, and since when."""
    from cdclake.model.groups import GroupStatus

    groups = payload.get("groups") or []
    if not groups:
        return ""
    now = payload["checked_at_ms"]
    items = "".join(f"<li>{html_text(GroupStatus(**g).describe(now))}</li>" for g in groups)
    return f'<h2>Table groups</h2><ul id="cdc-groups">{items}</ul>'


def _sources(payload: Mapping[str, Any]) -> str:
    """One entry per source (``ul#cdc-sources``, ``li.source`` with ``data-source`` and
    ``data-state``): its connector's state, why it does not run and the remedy, its binlog lag."""
    from cdclake.model.source_health import SourceStatus

    sources = payload.get("sources") or []
    if not sources:
        return ""
    items = []
    for raw in sources:
        source = SourceStatus.model_validate(raw)
        state = source.connector.state
        badge = "ok" if source.connector.running else "bad"
        head, *rest = source.lines()
        detail = "".join(f'<div class="sub">{html_text(line.strip())}</div>' for line in rest)
        items.append(
            f'<li class="source" data-source="{html_text(source.name)}" data-state="{html_text(state)}">'
            f'<span class="badge {badge}">{html_text(state)}</span> {html_text(head)}{detail}</li>'
        )
    return f'<h2>Sources</h2><ul id="cdc-sources">{"".join(items)}</ul>'


def render_page(payload: Mapping[str, Any]) -> str:
    """The HTML page of :func:`tables_payload`'s result: one row per table (``tr.table-row``,
    ``data-table`` its name; a cell per figure, its class the figure), the table's problems and
    warnings (``li.warning``) in a row under it (``tr.problems``). Every value is HTML-escaped."""
    rows = payload["tables"]
    head = "".join(f"<th>{html_text(c)}</th>" for c in COLUMNS)
    body = "".join(_row(r) for r in rows) or (
        f'<tr><td colspan="{len(COLUMNS)}" class="muted">no configured table whose DAG you may read</td></tr>'
    )
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">'
        "<title>CDC tables</title>"
        f"<style>{STYLE}</style></head><body>"
        "<h1>CDC tables</h1>"
        f'<div class="meta">checked {html_text(format_time(payload["checked_at_ms"]))}; Kafka: {html_text(payload["kafka"])}; '
        f"Kafka Connect: {html_text(payload.get('connect') or '-')}; "
        f'reloads every {REFRESH_SECONDS} s; <a href="api/tables">JSON</a></div>'
        f"{_sources(payload)}"
        f"{listing_html(payload)}"
        f'<div class="scroll"><table id="cdc-tables"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
        f"{_groups(payload)}"
        f"{_legend()}"
        "</body></html>\n"
    )


# --- the app --------------------------------------------------------------------------------------


def create_app() -> "FastAPI":
    """The FastAPI app of the page and the JSON endpoint (mounted at :data:`URL_PREFIX`)."""
    from airflow.api_fastapi.common.db.common import SessionDep
    from airflow.api_fastapi.core_api.security import GetUserDep
    from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
    from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

    app = FastAPI(
        title="cdclake: CDC tables",
        description="The status figures of the configured CDC tables (cdclake.pipeline.status).",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    freshness_query = Query(
        default=None, gt=0, description="judge every table by this limit (minutes) instead of its table config's"
    )

    @app.exception_handler(HTTPException)
    async def _login_for_the_page(request: Request, exc: HTTPException) -> Response:
        """The page without a valid login goes to the auth manager's login page (back here
        after); the JSON endpoint answers the status as is."""
        if exc.status_code in (status.HTTP_401_UNAUTHORIZED, status.HTTP_403_FORBIDDEN) and request.url.path.endswith(
            URL_PREFIX + PAGE_PATH
        ):
            from airflow.api_fastapi.app import get_auth_manager

            return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

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

    page_dep = Depends(page_asked)

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

    return app
