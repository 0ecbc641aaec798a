"""The terminal summary of a replay: what was simulated, counts, throughput, latency
percentiles, reuse, GPU-hours, then any rejected requests and saturated links or tiers."""

from __future__ import annotations

from typing import Any

from dynosim.report import Report
from dynosim.views.describe import deployment, rejections, saturation

#: The statistics of the latency table, its columns in order.
_LATENCY_COLUMNS = ("mean", "p50", "p90", "p99", "max")


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _fmt_ms(value: float | None) -> str:
    """A latency in at most 10 characters, so the five columns of the latency table fit an
    80-column terminal without cutting a number: 2 decimals below 1e6 ms, none below 1e8,
    then 4 significant digits."""
    if value is None:
        return "-"
    if abs(value) < 1e6:
        return f"{value:,.2f}"
    if abs(value) < 1e8:
        return f"{value:,.0f}"
    return f"{value:.3e}"


def _sla(report: Report) -> str:
    """The SLA goodput counts requests within, or that none was given."""
    limits = [
        f"{name} <= {limit:,g} ms"
        for name, key in (("TTFT", "ttft_ms"), ("TPOT", "itl_ms"), ("E2E", "e2e_ms"))
        if (limit := report.config["sla"][key]) is not None
    ]
    return ", ".join(limits) if limits else "none given: goodput counts every completed request"


def render_summary(report: Report, source: str) -> Any:
    """The summary as rich renderables: a first line naming the trace and what was simulated
    (model, GPU system, timing model, engine and layout), a table of counts, throughput,
    reuse and GPU-hours, the latency table, then a warning line for rejected requests (how
    many, the share, each reason) and for each link or tier used above 95 %."""
    from rich.table import Table

    s = report.summary
    head = Table(show_header=False)
    head.add_column(style="bold")
    head.add_column(justify="right")
    rows = [
        ("requests", f"{s['num_requests']:,}"),
        ("completed / rejected", f"{s['completed_requests']:,} / {s['rejected_requests']:,}"),
        ("workers x GPUs each", f"{s['num_workers']} x {s['num_gpus'] // s['num_workers']}"),
        ("virtual duration (s)", _fmt(s["duration_ms"] / 1000.0)),
        ("request throughput (req/s)", _fmt(s["request_throughput_rps"], 3)),
        ("output tokens/s", _fmt(s["output_token_throughput_tps"], 1)),
        ("total tokens/s", _fmt(s["total_token_throughput_tps"], 1)),
        ("prefix reuse ratio", _fmt(s["prefix_reuse_ratio"], 4)),
        ("SLA", _sla(report)),
        ("goodput (req/s)", _fmt(s["goodput_rps"], 3)),
        ("GPU-hours", _fmt(s["gpu_hours"], 3)),
        ("passes / preemptions", f"{s['num_passes']:,} / {s['num_preemptions']:,}"),
    ]
    if report.config["cluster"]["mode"] == "disaggregated":
        c = report.config["cluster"]
        util = s["link_utilization"]
        rows[2] = (
            "prefill + decode workers",
            f"{c['num_prefill_workers']} + {c['num_decode_workers']}",
        )
        rows += [
            ("KV transfers / GB", f"{s['num_transfers']:,} / {s['transfer_bytes'] / 1e9:,.2f}"),
            (
                "transfer ms mean / p99",
                f"{_fmt(s['transfer_ms']['mean'])} / {_fmt(s['transfer_ms']['p99'])}",
            ),
            ("max link utilization", _fmt(max(util), 4) if util else "-"),
            ("rate recomputations", f"{s['rate_recomputations']:,}"),
        ]
    if "offload" in s:
        o = s["offload"]
        rows.append(
            (
                "hit blocks G1 / G2 / G3",
                f"{o['g1_hit_blocks']:,} / {o['g2_hit_blocks']:,} / {o['g3_hit_blocks']:,}",
            )
        )
        rows.append(
            (
                "onboards / ms mean / GB up / GB down",
                f"{o['num_onboards']:,} / {_fmt(o['onboard_ms']['mean'])} / "
                f"{o['onboard_bytes'] / 1e9:,.2f} / {o['offload_bytes'] / 1e9:,.2f}",
            )
        )
        f = o["flows"]
        rows.append(
            (
                "copies down G1->G2 / G2->G3: flows, ms mean",
                f"{f['g1_to_g2']['flows']:,}, {_fmt(f['g1_to_g2']['mean_flow_ms'])} / "
                f"{f['g2_to_g3']['flows']:,}, {_fmt(f['g2_to_g3']['mean_flow_ms'])}",
            )
        )
        u = o["link_utilization"]
        rows.append(
            (
                "tier link use G1->G2 / G2->G1 / G2->G3 / G3->G2",
                " / ".join(_fmt(u[k], 3) for k in ("g1_to_g2", "g2_to_g1", "g2_to_g3", "g3_to_g2")),
            )
        )
        rows.append(
            (
                "onboards waiting for copies: share, ms mean",
                f"{_fmt(o['delayed_onboard_share'], 4)}, {_fmt(o['offload_wait_ms_mean'])}",
            )
        )
        if "decode" in o:
            d = o["decode"]
            rows.append(
                (
                    "decode side: hit blocks G1 / G2 / G3, GB up",
                    f"{d['g1_hit_blocks']:,} / {d['g2_hit_blocks']:,} / {d['g3_hit_blocks']:,}, "
                    f"{d['onboard_bytes'] / 1e9:,.2f}",
                )
            )
    for name, value in rows:
        head.add_row(name, value)
    lat = Table(title="latency (ms)", title_justify="left")
    lat.add_column("metric", style="bold")
    for col in _LATENCY_COLUMNS:
        lat.add_column(col, justify="right", no_wrap=True)
    for metric in ("ttft_ms", "ttst_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        d = s[metric]
        lat.add_row(
            metric.removesuffix("_ms").upper(),
            *(_fmt_ms(d[c]) for c in _LATENCY_COLUMNS),
        )
    from rich.console import Group
    from rich.text import Text

    refused = rejections(report)
    warnings = [Text(f"warning: {line}", style="bold yellow") for line in refused[:1]]
    warnings += [Text(f"  {line}", style="yellow") for line in refused[1:]]
    warnings += [Text(f"warning: {line}", style="bold yellow") for line in saturation(report)]
    first = Text(f"dynosim replay of {source}: {deployment(report)}", style="bold")
    return Group(first, head, lat, *warnings)


__all__ = ["render_summary"]
