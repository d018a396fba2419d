"""The text views of the ``cdclake`` commands: an Iceberg table of the local stack, the status
figures of the configured tables."""

from __future__ import annotations

from typing import Any

from cdclake.settings import Settings


def show_table(name: str, *, limit: int, metadata_columns: bool, settings: Settings | None = None) -> str:
    """The table as text: identifier fields, schema, committed offsets, snapshot summary, rows."""
    from cdclake.io.catalog import load_catalog, load_table_or_none
    from cdclake.model.config import load_tables
    from cdclake.model.layout import METADATA_COLUMNS

    settings = settings or Settings.from_env()
    cfg = load_tables(settings.tables_config, settings.discovery_registry).get(name)
    table = load_table_or_none(load_catalog(settings), cfg.identifier)
    if table is None:
        return f"{settings.catalog_name}.{cfg.identifier}: no such table yet (run the DAG first)\n"
    schema = table.schema()
    keys = [schema.find_field(i).name for i in schema.identifier_field_ids]
    out = [f"== {settings.catalog_name}.{cfg.identifier} ==", str(schema), f"identifier fields: {keys}", ""]
    snap = table.current_snapshot()
    if snap is not None and snap.summary is not None:
        out.append(f"current snapshot {snap.snapshot_id} ({snap.summary.operation.value}); summary:")
        for key, value in sorted(snap.summary.additional_properties.items()):
            if key.startswith("cdc.") or key in ("total-records", "total-data-files", "total-delete-files"):
                out.append(f"  {key} = {value}")
        out.append("")
    arrow = table.scan().to_arrow()
    if not metadata_columns:
        arrow = arrow.drop_columns([c for c, _, _ in METADATA_COLUMNS])
    arrow = arrow.sort_by([(c, "ascending") for c in cfg.primary_key])
    out.append(f"{arrow.num_rows} row(s)")
    if arrow.num_rows:
        import pandas as pd

        # floats as Python prints them: the exact value stored, not a rounded display
        with pd.option_context(
            "display.float_format", lambda v: repr(float(v)), "display.max_colwidth", 80, "display.width", 200
        ):
            # integer columns with nulls stay integers (pandas would make them floats: 7 -> 7.0)
            out.append(arrow.slice(0, limit).to_pandas(integer_object_nulls=True).to_string(index=False))
    else:
        out.append("")
    return "\n".join(out) + "\n"


def format_status_table(statuses: list[Any], *, with_fresh: bool = False, said: tuple[str, ...] = ()) -> str:
    """:class:`~cdclake.pipeline.status.TableStatus` list as a terminal table, one row per table,
    then the problems and warnings: a problem every table has (Kafka did not answer) once, as
    ``all tables: ...``, the others per table; a problem that begins with one of ``said`` (told
    above the table already) is left out. Lag time reads ``caught up`` when nothing waits in
    the topic; a last commit that was a manual replay is marked ``(replay)``; last transaction: the
    last whole source transaction applied and the records waiting for one that is not whole yet
    (``-``: the table does not commit whole transactions)."""
    from cdclake.model.status import format_duration

    def reconcile(st: Any) -> str:
        rec = st.last_reconcile
        if rec is None:
            return "never"
        diffs = rec.only_in_source + rec.only_in_lake + rec.differing
        verdict = "clean" if rec.clean else f"{diffs} diff{'s' if diffs != 1 else ''}"
        return f"{verdict}{' (repaired)' if rec.repaired else ''}, {format_duration(rec.age_ms)} ago"

    def transactions(st: Any) -> str:
        txn = st.transactions
        if txn is None:
            return "-"
        waiting = f", {txn.waiting_events} wait for {txn.waiting_for}" if txn.waiting_events else ""
        return f"{txn.last_id or 'none yet'}{waiting}"

    header = [
        "table",
        "lag events",
        "lag time",
        "last commit",
        "snapshot id",
        "events 24h",
        "quarantine",
        "schema",
        "snapshot run",
        "last transaction",
        "last reconcile",
    ] + (["fresh"] if with_fresh else [])
    rows = [header]
    for st in statuses:
        row = [
            st.name if st.table_exists else f"{st.name} (no table)",
            "-" if st.lag_events is None else str(st.lag_events),
            "caught up" if st.caught_up else format_duration(st.lag_ms),
            "never"
            if st.last_commit is None
            else f"{format_duration(st.last_commit.age_ms)} ago{' (replay)' if st.last_commit.replay else ''}",
            "-" if st.last_commit is None else str(st.last_commit.snapshot_id),
            str(st.activity_24h.events),
            str(st.open_quarantine),
            "-" if st.schema_id is None else f"{st.schema_id} ({st.column_count} cols)",
            "yes" if st.snapshot_in_progress is not None else "no",
            transactions(st),
            reconcile(st),
        ]
        if with_fresh:
            fresh = {True: "yes", False: "NO", None: "-"}[st.fresh]
            row.append(f"{fresh} ({st.run_failure.state})" if st.run_failure is not None else fresh)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    numeric = {1, 2, 3, 4, 5, 6}
    lines = [
        "  ".join(
            cell.rjust(w) if i in numeric else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    shared = set.intersection(*(set(st.problems) for st in statuses)) if len(statuses) > 1 else set()
    told = {problem for st in statuses for problem in st.problems if problem.startswith(said)} if said else set()
    lines.extend(f"all tables: {problem}" for problem in statuses[0].problems if problem in shared - told)
    for st in statuses:
        lines.extend(f"{st.name}: {problem}" for problem in st.problems if problem not in shared | told)
        lines.extend(f"{st.name}: warning: {warning}" for warning in st.warnings)
    return "\n".join(lines) + "\n"


def format_sources(sources: list[Any]) -> str:
    """:class:`~cdclake.model.source_health.SourceStatus` list (``cdclake status``, above the
    tables) as text: per source, its connector's state and why it does not run, its binlog lag,
    the remedy (:meth:`~cdclake.model.source_health.SourceStatus.lines`); ``""`` without sources."""
    if not sources:
        return ""
    return "".join("\n".join(source.lines()) + "\n" for source in sources) + "\n"


def format_findings(findings: list[Any]) -> str:
    """:class:`~cdclake.pipeline.discovery.Finding` list (``cdclake discover``) as a terminal
    table: topic, state, the Iceberg table, the DAG, the primary key (``changelog``: none) and why
    a topic is excluded, pending or left out."""
    header = ["topic", "state", "iceberg table", "dag", "primary key", "why"]
    rows = [header]
    for f in findings:
        has_table = f.state in ("registered", "new", "configured")
        key = (",".join(f.primary_key) or "changelog") if has_table else "-"
        rows.append([f.topic, f.state, f.identifier or "-", f.dag_id or "-", key, f.reason])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n" for r in rows)


def format_page_summary(cut: Any) -> str:
    """The lines above one page of ``cdclake status`` (a :class:`~cdclake.model.listing.Page`):
    the tables per freshness state, those behind their target by name (at most 20), and which
    page of how many is shown; ``""`` for a single page of tables none of which is behind."""
    if cut.pages == 1 and not cut.behind:
        return ""
    names = ", ".join(cut.behind[:20]) + (f" and {len(cut.behind) - 20} more" if len(cut.behind) > 20 else "")
    lines = [
        f"{cut.total} tables: {cut.counts['behind']} behind their freshness target{': ' + names if names else ''}; "
        f"{cut.counts['fresh']} fresh; {cut.counts['unjudged']} not judged",
        f"page {cut.page} of {cut.pages} ({cut.matched} tables match; --page, --name, --state to choose)",
    ]
    return "\n".join(lines) + "\n\n"
