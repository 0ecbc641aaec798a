"""Self-contained HTML pages: one replay, two replays side by side, and a sweep's or plan's
Pareto front. Pictures are inline SVG drawn by matplotlib, so a page needs no network and no
JavaScript, and the same report gives the same bytes."""

from __future__ import annotations

import html
import io
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from dynosim._dependencies import matplotlib
from dynosim._files import write_atomic
from dynosim._version import VERSION
from dynosim.views import figures
from dynosim.views.tables import (
    HEADLINE,
    LATENCY_ROWS,
    cell,
    fmt,
    headline,
    latencies,
    lookup,
    plain,
)

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1180px;
padding:0 24px 48px;color:#1d2430}
h1{font-size:22px;margin:24px 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid
#dde2ea;padding-bottom:4px}.sub{color:#5a6475;margin:0 0 12px}
table{border-collapse:collapse;margin:6px 0 12px}th,td{padding:3px 10px;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}table.grid td,table.grid th{border:1px
solid #dde2ea}table.kv th{font-weight:500;color:#3a4556}td.unit{color:#7a8494}
.row{display:flex;gap:36px;flex-wrap:wrap;align-items:flex-start}
figure{margin:8px 0 18px}figure svg{max-width:100%;height:auto}figcaption{color:#5a6475;
font-size:13px}pre{background:#f5f7fa;padding:10px;overflow:auto;font-size:12px}
.scroll{overflow-x:auto;max-width:100%}
"""


def _svg(fig: Any, name: str) -> str:
    """``fig`` as an inline ``<svg>`` element; ids salted with ``name`` so figures on one page
    never share one, and no date, so the same figure gives the same bytes."""
    rc = {"svg.hashsalt": f"dynosim-{name}", "svg.fonttype": "none"}
    buf = io.StringIO()
    with matplotlib().rc_context(rc):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg") :]


def _figure(fig: Any, name: str, caption: str) -> str:
    """A figure block: the SVG, how many data points it draws, and a caption."""
    points = figures.plotted_points(fig)
    return (
        f'<figure class="plot" id="plot-{name}" data-points="{points}">{_svg(fig, name)}'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def _page(title: str, subtitle: str, sections: Sequence[tuple[str, str]]) -> str:
    """A whole page: its title, a line under it, then ``(heading, body HTML)`` sections."""
    body = "".join(
        f'<section id="{html.escape(h.lower().replace(" ", "-"))}"><h2>{html.escape(h)}</h2>'
        f"{content}</section>"
        for h, content in sections
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        f'<h1>{html.escape(title)}</h1><p class="sub">{html.escape(subtitle)}</p>'
        f"{body}</body></html>\n"
    )


def _deliver(text: str, path: str | os.PathLike[str] | None) -> str:
    if path is not None:
        write_atomic(path, text)
    return text


def _trace_name(report: Any) -> str:
    return str(lookup(report.provenance, "trace.name") or "workload")


def _describe(report: Any) -> str:
    """One line on the deployment: serving mode, workers, GPUs, engine and timing."""
    c = report.config
    cluster = c["cluster"]
    if cluster["mode"] == "disaggregated":
        workers = (
            f"disaggregated, {cluster['num_prefill_workers']} prefill + "
            f"{cluster['num_decode_workers']} decode workers"
        )
    else:
        workers = f"aggregated, {cluster['num_workers']} workers"
    engine = c["engine"]
    backend = engine.get("backend", "vllm")
    layout = f"TP{engine['tensor_parallel_size']}"
    if engine.get("data_parallel_size", 1) > 1:
        layout += f" x DP{engine['data_parallel_size']}"
    return (
        f"{workers} ({layout}, {report.summary['num_gpus']} GPUs), {backend} engine, "
        f"{c['timing']['model']} timing"
    )


def _provenance(report: Any) -> str:
    """What made the report: dynosim version, configuration hash, trace, derived settings."""
    p = report.provenance
    rows = [
        ("dynosim version", p.get("dynosim_version", "unknown")),
        ("configuration sha256", p.get("config_sha256", "unknown")),
        ("trace", lookup(p, "trace.name") or "unknown"),
        ("trace sha256", lookup(p, "trace.sha256") or "unknown"),
    ]
    table = "".join(
        f"<tr><th>{k}</th><td><code>{html.escape(str(v))}</code></td></tr>" for k, v in rows
    )
    rest = {k: v for k, v in p.items() if k not in ("dynosim_version", "config_sha256", "trace")}
    derived = (
        f"<p>Derived settings:</p><pre>{html.escape(json.dumps(rest, indent=2, sort_keys=True))}"
        "</pre>"
        if rest
        else ""
    )
    return f'<table class="kv">{table}</table>{derived}'


def _config(config: Mapping[str, Any]) -> str:
    text = yaml.safe_dump(dict(config), sort_keys=False)
    return f"<pre>{html.escape(text)}</pre>"


def replay_page(report: Any, path: str | os.PathLike[str] | None = None) -> str:
    """The HTML page of one replay: summary and latency tables, latency CDFs, rates and state
    over time, per-worker load and rejections, link use, configuration and provenance."""
    s = report.summary
    summary = f'<div class="row">{headline(s)}{latencies(s)}</div>'
    rejected = s.get("rejections_by_reason") or {}
    if rejected:
        summary += "<p>Rejected, by reason:</p>" + plain(sorted(rejected.items()))
    over_time = _figure(
        figures.rates([("", report)]),
        "rates",
        "Requests arriving and completing per second.",
    ) + _figure(
        figures.state(report),
        "state",
        "Requests waiting and running, KV blocks in use per worker"
        + (
            ", blocks held in the offload tiers, requests waiting for them and the tier links' use"
            if "g2_blocks_used" in report.timeseries
            else ""
        )
        + ": each time bucket's maximum, shaded down to its minimum; the share of each bucket "
        "each worker ran passes.",
    )
    load = _figure(
        figures.load(report),
        "load",
        "Per worker: requests completed, tokens computed, share of the replay running passes; "
        "rejections by reason.",
    )
    if figures.has_links(report):
        load += _figure(
            figures.links(report),
            "links",
            "Used share of each KV-transfer link's capacity: per time bucket, and over the "
            "whole replay.",
        )
    sections = [
        ("Summary", summary),
        (
            "Latency distributions",
            _figure(
                figures.latency([("", report)]),
                "latency",
                "CDFs of TTFT, TPOT and E2E per request and of every inter-token gap (ITL); "
                "dashed: the SLA limit, when set.",
            ),
        ),
        ("Over time", over_time),
        ("Load", load),
        ("Configuration", _config(report.config)),
        ("Provenance", _provenance(report)),
    ]
    title = f"dynosim replay: {_trace_name(report)}"
    return _deliver(_page(title, _describe(report), sections), path)


#: What the compare page puts side by side: summary keys, a label and a unit.
_COMPARED = (
    *((label, key, unit) for label, key, unit in HEADLINE),
    *(
        (f"{name} {stat}", f"{key}.{stat}", "ms")
        for key, name in LATENCY_ROWS
        for stat in ("mean", "p50", "p90", "p99")
    ),
)


def _differences(a: Any, b: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """Dotted paths where two configurations differ, with each side's value."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            out += _differences(a.get(key), b.get(key), f"{prefix}{key}.")
        return out
    return [] if a == b else [(prefix.rstrip("."), a, b)]


def _delta(a: Any, b: Any) -> tuple[str, str]:
    """B - A and its share of A, formatted ("" where either is missing)."""
    if not isinstance(a, int | float) or not isinstance(b, int | float):
        return "", ""
    d = b - a
    share = f"{100.0 * d / a:+.1f} %" if a else ""
    return (f"+{fmt(d)}" if d > 0 else fmt(d)), share


def compare_page(
    a: Any,
    b: Any,
    labels: tuple[str, str] = ("A", "B"),
    path: str | os.PathLike[str] | None = None,
) -> str:
    """The HTML page putting two replays side by side: their numbers with the change from A
    to B, the settings that differ, overlaid latency CDFs and rates."""
    la, lb = labels
    rows = []
    for label, key, unit in _COMPARED:
        va, vb = lookup(a.summary, key), lookup(b.summary, key)
        if va is None and vb is None:
            continue
        d, share = _delta(va, vb)
        rows.append(
            f"<tr><th>{html.escape(label)}</th>{cell(a.summary, key, 'a')}"
            f"{cell(b.summary, key, 'b')}<td class='num'>{d}</td><td class='num'>{share}</td>"
            f"<td class='unit'>{unit}</td></tr>"
        )
    head = (
        f"<tr><th></th><th>{html.escape(la)}</th><th>{html.escape(lb)}</th>"
        f"<th>{html.escape(lb)} &minus; {html.escape(la)}</th><th>change</th><th></th></tr>"
    )
    table = f'<table class="grid">{head}{"".join(rows)}</table>'
    diffs = _differences(a.config, b.config)
    changed = (
        plain([(k, json.dumps(x), json.dumps(y)) for k, x, y in diffs], ("setting", la, lb))
        if diffs
        else "<p>The two configurations are the same.</p>"
    )
    traces = {_trace_name(a), _trace_name(b)}
    runs = [(la, a), (lb, b)]
    sections = [
        ("Numbers", table),
        ("What differs", changed),
        (
            "Latency distributions",
            _figure(figures.latency(runs), "latency", f"CDFs of {la} and {lb} overlaid."),
        ),
        ("Over time", _figure(figures.rates(runs), "rates", "Arrivals and completions per s.")),
        (
            "Provenance",
            f"<h3>{html.escape(la)}</h3>{_provenance(a)}<h3>{html.escape(lb)}</h3>{_provenance(b)}",
        ),
    ]
    title = f"dynosim: {la} vs {lb}"
    subtitle = f"{la}: {_describe(a)}. {lb}: {_describe(b)}. Trace: {', '.join(sorted(traces))}."
    return _deliver(_page(title, subtitle, sections), path)


#: Columns of the candidate tables on the Pareto page.
_CANDIDATE_COLUMNS = (
    "mode",
    "workers",
    "gpus",
    "output_tps_per_gpu",
    "tps_per_user",
    "ttft_p90_ms",
    "tpot_mean_ms",
    "sla_met",
)


def _candidates(rows: Sequence[Mapping[str, Any]], settings: Sequence[str]) -> str:
    columns = ("index", *settings, *_CANDIDATE_COLUMNS)
    return plain([[_shown(r.get(c)) for c in columns] for r in rows], columns)


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:,.2f}"
    if isinstance(value, Mapping | list):
        return json.dumps(value, sort_keys=True)
    return "" if value is None else str(value)


def pareto_page(
    result: Any,
    pick: Mapping[str, Any] | None,
    title: str,
    path: str | os.PathLike[str] | None = None,
    front: Sequence[Mapping[str, Any]] | None = None,
    why: tuple[Sequence[str], Sequence[Sequence[str]]] | None = None,
) -> str:
    """The HTML page of a sweep's or plan's candidates (a SweepResult): tokens/s/GPU against
    tokens/s/user, aggregated and disaggregated apart, the SLA-feasible side, the front
    (``front``, or the result's own Pareto front) and the pick; then the pick, why (``why``:
    a header and rows of text, a plan's constraints of the pick and the runner-up), the front
    and every candidate as tables."""
    rows = result.rows
    front = result.pareto().rows if front is None else list(front)
    sla = result.sla
    # 1000 / mean TPOT is the x axis, so only a limit on mean TPOT is a line on it.
    floor = 1000.0 / sla.tpot_ms if sla.tpot_ms is not None and sla.tpot_stat == "mean" else None
    met = sum(1 for r in rows if r["sla_met"])
    failed = sum(1 for r in rows if r["error"])
    limits = "; ".join(
        f"{m.removesuffix('_ms').upper()} {st} <= {v:g} ms" for m, (st, v) in sla.limits().items()
    )
    subtitle = (
        f"{len(rows)} candidates replayed, {met} meet the SLA ({limits or 'no latency limit'}, "
        f"every request completed), {failed} failed. dynosim {VERSION}."
    )
    chosen = (
        "<p>No candidate meets the SLA.</p>"
        if pick is None
        else "<p>The pick (fewest GPUs meeting the SLA):</p>" + _candidates([pick], result.settings)
    )
    caption = (
        "Each candidate's output tokens/s per GPU against tokens/s per user (1000 / mean "
        "TPOT); filled: meets the SLA; line: the Pareto front of those; ring: the pick"
        + ("; shaded: where mean TPOT is within its limit." if floor is not None else ".")
    )
    sections = [
        ("Pareto front", _figure(figures.pareto(rows, front, pick, floor), "pareto", caption)),
        ("Pick", chosen),
        *(
            [("Why (the constraint that binds, and by how much)", plain(why[1], why[0]))]
            if why
            else []
        ),
        ("Front", _candidates(front, result.settings) if front else "<p>Empty.</p>"),
        ("Every candidate", _candidates(rows, result.settings)),
    ]
    return _deliver(_page(title, subtitle, sections), path)


__all__ = ["compare_page", "pareto_page", "replay_page"]
