"""The compact summary card a notebook shows for a report (``Report._repr_html_``)."""

from __future__ import annotations

import html
from typing import Any

from dynosim.views.tables import cell, lookup

#: The card's numbers: label, summary key, unit.
CARD = (
    ("requests", "num_requests", ""),
    ("completed", "completed_requests", ""),
    ("rejected", "rejected_requests", ""),
    ("output", "output_token_throughput_tps", "tok/s"),
    ("TTFT p50", "ttft_ms.p50", "ms"),
    ("TTFT p99", "ttft_ms.p99", "ms"),
    ("TPOT mean", "tpot_ms.mean", "ms"),
    ("E2E p90", "e2e_ms.p90", "ms"),
    ("goodput", "goodput_rps", "req/s"),
    ("GPU-hours", "gpu_hours", "h"),
)


def summary_card(report: Any) -> str:
    """A small table of the replay's headline numbers, under the trace's name."""
    name = lookup(report.provenance, "trace.name") or "workload"
    cells = "".join(
        f"<tr><th style='text-align:left;font-weight:500'>{label}</th>"
        f"{cell(report.summary, key)}<td style='color:#7a8494'>{unit}</td></tr>"
        for label, key, unit in CARD
    )
    return (
        '<div class="dynosim-report" style="font-family:system-ui,sans-serif;font-size:13px">'
        f"<b>dynosim report</b>: {html.escape(str(name))}, "
        f"{report.summary['duration_ms'] / 1000.0:,.1f} s simulated"
        f'<table style="border-collapse:collapse">{cells}</table></div>'
    )


__all__ = ["CARD", "summary_card"]
