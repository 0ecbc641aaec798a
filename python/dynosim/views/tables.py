"""The numbers a page or card shows, as HTML tables. Every number cell carries the dotted key
it was read from and its exact value (``data-key``, ``data-value``), so a reader, or a test,
can tie what is shown to the report."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

#: The headline numbers of a replay: label, summary key, unit.
HEADLINE = (
    ("requests", "num_requests", ""),
    ("completed", "completed_requests", ""),
    ("rejected", "rejected_requests", ""),
    ("simulated time", "duration_ms", "ms"),
    ("request throughput", "request_throughput_rps", "req/s"),
    ("output throughput", "output_token_throughput_tps", "tok/s"),
    ("total throughput", "total_token_throughput_tps", "tok/s"),
    ("goodput", "goodput_rps", "req/s"),
    ("requests meeting the SLA", "goodput_requests", ""),
    ("prefix reuse", "prefix_reuse_ratio", "of prompt tokens"),
    ("GPUs", "num_gpus", ""),
    ("GPU-hours", "gpu_hours", "h"),
    ("KV transfers", "num_transfers", ""),
    ("preemptions", "num_preemptions", ""),
)

#: The latency metrics of the latency table (summary key, label) and its statistics.
LATENCY_ROWS = (
    ("ttft_ms", "TTFT"),
    ("ttst_ms", "TTST"),
    ("tpot_ms", "TPOT"),
    ("itl_ms", "ITL"),
    ("e2e_ms", "E2E"),
)
LATENCY_STATS = ("mean", "p50", "p90", "p95", "p99", "max")


def lookup(data: Mapping[str, Any], key: str) -> Any:
    """The value at a dotted ``key`` of nested mappings (None where a part is missing)."""
    value: Any = data
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def fmt(value: Any) -> str:
    """A number as shown: integers with thousands separators, floats to 2 decimals (small ones
    to 4 significant digits), a missing value as an en dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "&ndash;"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return html.escape(str(value))
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.2f}" if abs(value) >= 1 or value == 0 else f"{value:.4g}"


def cell(data: Mapping[str, Any], key: str, report: str = "") -> str:
    """A table cell showing ``data[key]`` (dotted), tagged with its key and exact value (and
    ``data-report``, which report of several it belongs to, when given)."""
    value = lookup(data, key)
    exact = html.escape(json.dumps(value), quote=True)
    attrs = f'class="num" data-key="{html.escape(key)}" data-value="{exact}"'
    if report:
        attrs += f' data-report="{html.escape(report)}"'
    return f"<td {attrs}>{fmt(value)}</td>"


def headline(summary: Mapping[str, Any], keys: Sequence[tuple[str, str, str]] = HEADLINE) -> str:
    """The headline numbers as a two-column table (label, value with unit)."""
    rows = "".join(
        f"<tr><th>{label}</th>{cell(summary, key)}<td class='unit'>{unit}</td></tr>"
        for label, key, unit in keys
        if lookup(summary, key) is not None
    )
    return f'<table class="kv">{rows}</table>'


def latencies(summary: Mapping[str, Any], stats: Sequence[str] = LATENCY_STATS) -> str:
    """The latency distributions (ms) as a table: a row per metric, a column per statistic."""
    head = "".join(f"<th>{s}</th>" for s in stats)
    rows = "".join(
        f"<tr><th>{label}</th>" + "".join(cell(summary, f"{key}.{s}") for s in stats) + "</tr>"
        for key, label in LATENCY_ROWS
    )
    return f'<table class="grid"><tr><th>ms</th>{head}</tr>{rows}</table>'


def plain(rows: Sequence[Sequence[Any]], head: Sequence[str] | None = None) -> str:
    """A table of already formatted cells (escaped here), with an optional header row."""
    top = "".join(f"<th>{html.escape(str(h))}</th>" for h in head) if head else ""
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    table = f'<table class="grid">{f"<tr>{top}</tr>" if top else ""}{body}</table>'
    return f'<div class="scroll">{table}</div>'


__all__ = [
    "HEADLINE",
    "LATENCY_ROWS",
    "LATENCY_STATS",
    "cell",
    "fmt",
    "headline",
    "latencies",
    "lookup",
    "plain",
]
