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
from dynosim._version import version
from dynosim.views import figures
from dynosim.views.describe import deployment, rejections, saturation, used_config
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
.warn{background:#fff4d6;border-left:4px solid #d99a00;padding:8px 12px;margin:8px 0 14px}
.warn p{margin:2px 0}.warn p.more{padding-left:1.5em;color:#4a4030}
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


def _config(report: Any) -> str:
    text = yaml.safe_dump(used_config(report), sort_keys=False)
    return (
        "<p>Every setting with the value the replay used (each engine flavour's defaults "
        "filled in; settings it had no use for left out). The JSON report keeps the "
        f"configuration as given.</p><pre>{html.escape(text)}</pre>"
    )


def _warnings(report: Any) -> str:
    """The warnings a replay calls for, in a box at the top of its page: rejected requests
    (how many, the share, each reason) and each link or tier used above 95 %; "" when none."""
    refused = rejections(report)
    lines = [f"<p><b>{html.escape(refused[0])}</b></p>"] if refused else []
    lines += [f'<p class="more">{html.escape(line)}</p>' for line in refused[1:]]
    lines += [f"<p><b>{html.escape(line)}</b></p>" for line in saturation(report)]
    return f'<div class="warn" id="warnings">{"".join(lines)}</div>' if lines else ""


def replay_page(report: Any, path: str | os.PathLike[str] | None = None) -> str:
    """The HTML page of one replay: summary and latency tables, latency CDFs, rates and state
    over time, per-worker load and rejections, link use, configuration and provenance."""
    s = report.summary
    summary = f'{_warnings(report)}<div class="row">{headline(s)}{latencies(s)}</div>'
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
        + ": each time bucket's mean, its minimum to maximum lightly shaded, dashed the "
        "capacities, red where a tier or link ran above 95 % of its capacity; the share of "
        "each bucket each worker ran passes.",
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
            "Used share of each KV-transfer link's capacity: each time bucket's mean (red "
            "where a link ran above 95 %), and over the whole replay (red bars above 95 %).",
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
        ("Configuration", _config(report)),
        ("Provenance", _provenance(report)),
    ]
    title = f"dynosim replay: {_trace_name(report)}"
    return _deliver(_page(title, deployment(report), sections), path)


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
    subtitle = f"{la}: {deployment(a)}. {lb}: {deployment(b)}. Trace: {', '.join(sorted(traces))}."
    return _deliver(_page(title, subtitle, sections), path)


#: Columns of the candidate tables on the Pareto page after the GPUs, the SLA's statistics
#: and its verdict, each with its header.
_CANDIDATE_COLUMNS = (
    ("output_tps_per_gpu", "tok/s/GPU"),
    ("tps_per_user", "tok/s/user"),
    ("mode", "mode"),
    ("workers", "workers"),
)


def _verdict(row: Mapping[str, Any]) -> str:
    return "met" if row["sla_met"] else (row["sla_misses"] or "missed")


def _candidates(rows: Sequence[Mapping[str, Any]], settings: Sequence[str], sla: Any) -> str:
    """A table of replayed candidates, fewest GPUs first: GPUs, the statistics the SLA limits
    (TTFT p90 and mean TPOT when it limits none), whether it is met, then throughput, mode,
    workers, the settings and the candidate's number."""
    limited = sla.limits() or {"ttft_ms": ("p90", None), "tpot_ms": ("mean", None)}
    stats = [(f"{m.removesuffix('_ms')}_{st}_ms", m, st) for m, (st, _) in limited.items()]
    head = [
        "GPUs",
        *(f"{m.removesuffix('_ms').upper()} {st} (ms)" for _, m, st in stats),
        "SLA",
        *(h for _, h in _CANDIDATE_COLUMNS),
        *settings,
        "candidate",
    ]
    table = [
        [
            _shown(r["gpus"]),
            *(_shown(r.get(key)) for key, _, _ in stats),
            _verdict(r),
            *(_shown(r.get(c)) for c, _ in _CANDIDATE_COLUMNS),
            *(_shown(r.get(c)) for c in settings),
            _shown(r["index"]),
        ]
        for r in sorted(rows, key=lambda r: (r["gpus"], r["index"]))
    ]
    return plain(table, head)


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
    and every replayed candidate as tables leading with GPUs, the SLA's statistics and its
    verdict, and the candidates that failed with their errors."""
    rows = result.rows
    front = result.pareto().rows if front is None else list(front)
    sla = result.sla
    # 1000 / mean TPOT is the x axis, so only a limit on mean TPOT is a line on it.
    floor = 1000.0 / sla.tpot_ms if sla.tpot_ms is not None and sla.tpot_stat == "mean" else None
    met = sum(1 for r in rows if r["sla_met"])
    replayed = [r for r in rows if not r["error"]]
    failed = len(rows) - len(replayed)
    limits = "; ".join(
        f"{m.removesuffix('_ms').upper()} {st} <= {v:g} ms" for m, (st, v) in sla.limits().items()
    )
    subtitle = (
        f"{len(replayed)} candidates replayed, {met} meet the SLA "
        f"({limits or 'no latency limit'}, every request completed), {failed} failed. "
        f"dynosim {version()}."
    )
    chosen = (
        "<p>No candidate meets the SLA.</p>"
        if pick is None
        else "<p>The pick (fewest GPUs meeting the SLA):</p>"
        + _candidates([pick], result.settings, sla)
    )
    not_replayed = (
        "<p>These candidates did not replay (they are not plotted):</p>"
        + plain([(r["index"], r["error"]) for r in rows if r["error"]], ("candidate", "error"))
        if failed
        else ""
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
        ("Front", _candidates(front, result.settings, sla) if front else "<p>Empty.</p>"),
        ("Every replayed candidate", _candidates(replayed, result.settings, sla) + not_replayed),
    ]
    return _deliver(_page(title, subtitle, sections), path)


__all__ = ["compare_page", "pareto_page", "replay_page"]
