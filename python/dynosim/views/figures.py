"""Pictures of replays and sweeps as matplotlib figures (the ``plot`` extra), drawn without
pyplot: latency CDFs with the SLA limits, arrivals and completions per second, queue and
running requests, KV blocks per worker, offload tiers, per-worker load, rejections, link use,
and a sweep's Pareto front."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dynosim._dependencies import matplotlib
from dynosim.views.describe import SATURATED, capacity
from dynosim.views.series import cdf, link_names, rate, timeseries, worker_names

#: The ``gid`` of what marks a limit or a pick rather than showing data.
REFERENCE = "reference"

#: Buckets a plot over time draws: 1 s buckets of an hour-long trace are a band of noise
#: (thousands of spikes in a few hundred pixels); a few hundred show the load's shape (each
#: bucket's mean, with its min-max as a light band).
TIME_POINTS = 200

#: The latency CDFs: summary metric, title, and the ``sla`` setting that limits it.
LATENCIES = (
    ("ttft_ms", "TTFT", "ttft_ms"),
    ("tpot_ms", "TPOT", "itl_ms"),
    ("itl_ms", "ITL", "itl_ms"),
    ("e2e_ms", "E2E", "e2e_ms"),
)


def _figure(rows: int = 1, cols: int = 1, width: float = 9.0, height: float = 3.0) -> Any:
    """A figure of ``rows`` x ``cols`` axes (``height`` inches per row). Margins are fixed
    in inches rather than solved by a layout engine, which measures every label's text
    several times and took half the time of drawing a page."""
    fig = matplotlib().figure.Figure(figsize=(width, height * rows))
    total = height * rows
    fig.subplots_adjust(
        left=0.75 / width,
        right=1 - 0.2 / width,
        bottom=0.6 / total,
        top=1 - 0.35 / total,
        hspace=0.95 / (height - 0.95),
        wspace=0.9 * cols / (width - 0.95 * cols),
    )
    return fig, fig.subplots(rows, cols, squeeze=False)


def _literal(text: str) -> str:
    """``text`` (a report's label, the user's) drawn as written: matplotlib reads what is
    between two ``$`` as math notation, and raises on what does not parse (``$\\frac$``)."""
    return text.replace("$", r"\$")


def _latency_points(report: Any, key: str) -> tuple[np.ndarray, np.ndarray]:
    """CDF points of one latency metric: per request, or for ITL every inter-token gap."""
    if key == "itl_ms":
        hist = report.summary["itl_cdf_ms"]
        return np.asarray(hist["ms"], dtype=float), np.asarray(hist["share"], dtype=float)
    return cdf(np.asarray(report.requests[key], dtype=float))


def latency(reports: Sequence[tuple[str, Any]]) -> Any:
    """CDFs of TTFT, TPOT and E2E per request and of every inter-token gap (ITL), one line
    per labelled report; a dashed line marks each SLA limit that is set."""
    fig, axes = _figure(2, 2)
    for ax, (key, title, sla_key) in zip(axes.flat, LATENCIES, strict=True):
        for label, report in reports:
            x, y = _latency_points(report, key)
            ax.plot(x, y, label=_literal(label) or None, drawstyle="steps-post", linewidth=1.2)
            limit = (report.config.get("sla") or {}).get(sla_key)
            if limit is not None:
                ax.axvline(
                    limit, linestyle="--", color="gray", linewidth=1, label="SLA", gid=REFERENCE
                )
        ax.set_title(f"{title} (ms)", fontsize=10)
        ax.set_ylim(0, 1.02)
        ax.set_ylabel("share of gaps" if key == "itl_ms" else "share of requests")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    return fig


def rates(reports: Sequence[tuple[str, Any]]) -> Any:
    """Requests arriving and completing per second over the replay (one pair of lines per
    labelled report; long replays in buckets of several seconds)."""
    fig, axes = _figure()
    ax = axes[0, 0]
    widths = set()
    for label, report in reports:
        duration = float(report.summary["duration_ms"])
        for key, what in (("arrival_ms", "arrivals"), ("last_token_ms", "completions")):
            times = np.asarray(report.requests[key], dtype=float)
            t, per_s, width = rate(times, duration, TIME_POINTS)
            widths.add(width)
            name = f"{_literal(label)}: {what}" if label else what
            ax.plot(t, per_s, label=name, linewidth=1, drawstyle="steps-post")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("requests / s" + ("" if widths == {1.0} else " (mean per bucket)"))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def _bands(ax: Any, series: dict[str, Any], names: Sequence[str], band: bool = True) -> None:
    """Each named series over time: its time-weighted mean per bucket as a line, and with
    ``band`` the bucket's min-max as a light band around it (a spike shorter than a bucket
    stays visible there); without, the mean alone (a share such as busy time, whose min and
    max are 0 and 1 in nearly every bucket)."""
    for name in names:
        t, avg, lo, hi = series[name]
        # A worker's or link's column is named by its label alone: the axis says what it is.
        label = name[name.index("[") + 1 : -1] if name.endswith("]") else name
        line = ax.plot(t, avg, linewidth=1.0, label=label, drawstyle="steps-post")
        if band and not np.array_equal(lo, hi):
            ax.fill_between(t, lo, hi, alpha=0.15, color=line[0].get_color(), step="post", lw=0)


def _limit(ax: Any, value: float, label: str) -> None:
    """A dashed line at a capacity (``value``), labelled."""
    ax.axhline(value, linestyle="--", color="black", linewidth=0.9, label=label, gid=REFERENCE)


def _legend(ax: Any) -> None:
    """The legend in a row above the axes, where it hides no data."""
    ax.legend(
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        ncol=8,
        fontsize=7,
        frameon=False,
        borderaxespad=0.2,
    )


def _saturated(ax: Any, t: np.ndarray, share: np.ndarray) -> None:
    """Shade red where a used share ran above :data:`SATURATED` over a bucket."""
    hot = share > SATURATED
    if hot.any():
        ax.fill_between(
            t,
            0,
            1,
            where=hot,
            step="post",
            color="red",
            alpha=0.18,
            lw=0,
            transform=ax.get_xaxis_transform(),
            label=f"above {100 * SATURATED:.0f} % used",
            gid=REFERENCE,
        )


def state(report: Any) -> Any:
    """Over time (each bucket's mean as a line, its min-max as a light band): requests waiting
    and running (all workers), KV blocks in use per worker with each role's capacity, the
    share of each bucket each worker ran passes, and with offload tiers the blocks G2 and G3
    hold with their capacities (shaded red where above 95 % full), the requests waiting for
    them and the used share of each kind of tier link (red above 95 %)."""
    series = timeseries(report, TIME_POINTS)
    cap = capacity(report)

    def each(name: str) -> list[str]:
        return [k for k in series if k.startswith(f"{name}[")]

    kv_limits = [
        (blocks, f"capacity{'' if role == 'aggregated' else f' ({role})'}: {blocks:,}")
        for role, blocks in cap.kv_blocks.items()
    ]
    if len({b for b, _ in kv_limits}) == 1:
        kv_limits = [(kv_limits[0][0], f"capacity: {kv_limits[0][0]:,}")]
    panels: list[tuple[list[str], str, bool, list[tuple[float, str]], Any]] = [
        (["queued", "running"], "requests", True, [], None),
        (each("kv_blocks_used"), "KV blocks in use", True, kv_limits, None),
        (each("busy"), "busy share", False, [], None),
    ]
    if "g2_blocks_used" in series:
        # A panel per tier: G3 is often many times G2, which would flatten G2 on a shared axis.
        for n, c in (("g2", cap.g2_blocks), ("g3", cap.g3_blocks)):
            if c:
                used = f"{n}_blocks_used"
                limit = [(c, f"capacity: {c:,}")]
                panels.append(([used], f"{n.upper()} blocks held", True, limit, [(used, c)]))
        panels.append((["onboarding"], "requests onboarding", True, [], None))
        links = [k for k in series if k.endswith("_link_use")]
        panels.append(
            (links, "tier link use (mean)", False, [(1.0, "capacity")], [(k, 1.0) for k in links])
        )
    fig, axes = _figure(len(panels), 1, height=2.6)
    for ax, (names, ylabel, band, limits, hot) in zip(axes.flat, panels, strict=True):
        _bands(ax, series, names, band)
        for value, label in limits:
            _limit(ax, value, label)
        if hot:
            t = series[hot[0][0]][0]
            share = np.max([series[name][1] / total for name, total in hot], axis=0)
            _saturated(ax, t, share)
        ax.set_ylabel(ylabel)
        if ax.get_ylim()[1] >= 10_000:
            # 600k, not 600000: the fixed margin leaves the axis label room for few digits.
            ax.yaxis.set_major_formatter(matplotlib().ticker.EngFormatter(sep=""))
        ax.set_xlabel("time (s)")
        ax.grid(alpha=0.3)
        if len(names) <= 16:
            _legend(ax)
    return fig


def load(report: Any) -> Any:
    """Per worker: requests completed, tokens computed (a disaggregated request counts its
    prompt on its prefill worker and its output on its decode worker) and the share of the
    replay spent running passes; rejections by reason."""
    r = report.requests
    names = worker_names(report.config, int(report.summary["num_workers"]))
    done = np.asarray(r["status"]) == 0
    prefill, decode = np.asarray(r["worker"]), np.asarray(r["decode_worker"])
    inputs = np.asarray(r["input_length"], dtype=float)
    outputs = np.asarray(r["output_length"], dtype=float)
    n = len(names)
    counts, tokens = np.zeros(n), np.zeros(n)
    disagg = report.config["cluster"]["mode"] == "disaggregated"
    on = done & (prefill >= 0)
    np.add.at(counts, prefill[on], 1)
    np.add.at(tokens, prefill[on], inputs[on] if disagg else inputs[on] + outputs[on])
    if disagg:
        first_decode = int(report.config["cluster"]["num_prefill_workers"])
        on = done & (decode >= 0)
        np.add.at(counts, first_decode + decode[on], 1)
        np.add.at(tokens, first_decode + decode[on], outputs[on])
    duration = float(report.summary["duration_ms"])
    busy = np.asarray(report.summary["worker_busy_ms"], dtype=float) / max(duration, 1e-300)
    fig, axes = _figure(1, 4, width=12.0)
    for ax, values, title in (
        (axes[0, 0], counts, "requests completed"),
        (axes[0, 1], tokens, "tokens computed"),
        (axes[0, 2], busy, "busy share of the replay"),
    ):
        ax.bar(names, values)
        ax.set_title(title, fontsize=10)
    reasons = report.summary.get("rejections_by_reason") or {}
    ax = axes[0, 3]
    ax.set_title("rejections by reason", fontsize=10)
    if reasons:
        ax.bar(list(reasons), list(reasons.values()))
    else:
        ax.text(0.5, 0.5, "no rejections", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in axes.flat:
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
        ax.grid(alpha=0.3, axis="y")
    return fig


def has_links(report: Any) -> bool:
    """Whether the replay moved KV over links (disaggregated, with a bandwidth)."""
    return bool(report.summary.get("link_utilization"))


def links(report: Any) -> Any:
    """Each KV-transfer link's used share of its capacity: over time (mean per bucket) and
    over the whole replay (prefill send links, then decode receive links). Raises ValueError
    for a replay without links."""
    use = report.summary.get("link_utilization") or []
    if not use:
        raise ValueError("this replay moved no KV over links (aggregated, or no bandwidth set)")
    series = timeseries(report, TIME_POINTS)
    fig, axes = _figure(2, 1, height=2.8)
    over_time, overall = axes[0, 0], axes[1, 0]
    names = [k for k in series if k.startswith("link_utilization[")]
    _bands(over_time, series, names, band=False)
    _limit(over_time, 1.0, "capacity")
    t = series[names[0]][0]
    _saturated(over_time, t, np.max([series[name][1] for name in names], axis=0))
    over_time.set_xlabel("time (s)")
    over_time.set_ylabel("used share (mean per bucket)")
    over_time.grid(alpha=0.3)
    if len(use) <= 16:
        _legend(over_time)
    bars = overall.bar(link_names(report.config), use)
    for bar, u in zip(bars, use, strict=True):
        if u > SATURATED:
            bar.set_color("red")
    overall.axhline(1.0, linestyle="--", color="gray", linewidth=1, gid=REFERENCE)
    overall.set_ylabel("used share of the replay")
    overall.tick_params(axis="x", labelrotation=30, labelsize=7)
    return fig


def pareto(
    rows: Sequence[dict[str, Any]],
    front_rows: Sequence[dict[str, Any]],
    pick: dict[str, Any] | None,
    tpot_floor: float | None,
) -> Any:
    """Output tokens/s/GPU against tokens/s/user (1000 / mean TPOT) of every replayed
    candidate, aggregated and disaggregated apart, those meeting the SLA filled; the Pareto
    front of those meeting it joined, the pick ringed, and the tokens/s/user a TPOT limit
    allows (``tpot_floor``; None without a limit) shaded as the feasible side."""
    fig, axes = _figure(width=9.0, height=5.0)
    ax = axes[0, 0]
    for mode, color, marker in (("aggregated", "C0", "o"), ("disaggregated", "C1", "s")):
        for met in (True, False):
            pts = [
                (row["tps_per_user"], row["output_tps_per_gpu"])
                for row in rows
                if row["mode"] == mode
                and bool(row["sla_met"]) == met
                and np.isfinite(row["tps_per_user"])
                and np.isfinite(row["output_tps_per_gpu"])
            ]
            if pts:
                x, y = zip(*pts, strict=True)
                ax.scatter(
                    x,
                    y,
                    marker=marker,
                    edgecolors=color,
                    facecolors=color if met else "none",
                    label=f"{mode}, {'meets the SLA' if met else 'misses it'}",
                )
    if front_rows:
        x = [r["tps_per_user"] for r in front_rows]
        y = [r["output_tps_per_gpu"] for r in front_rows]
        ax.plot(x, y, color="black", linewidth=1, drawstyle="steps-pre", label="Pareto front")
    if pick is not None:
        ax.scatter(
            [pick["tps_per_user"]],
            [pick["output_tps_per_gpu"]],
            s=260,
            facecolors="none",
            edgecolors="red",
            linewidths=2,
            label="pick",
            gid=REFERENCE,
        )
    if tpot_floor is not None:
        lo, hi = ax.get_xlim()
        hi = max(hi, tpot_floor * 1.05)
        ax.axvspan(tpot_floor, hi, color="green", alpha=0.07, lw=0, gid=REFERENCE)
        ax.axvline(
            tpot_floor,
            color="green",
            linestyle="--",
            linewidth=1,
            label="TPOT limit",
            gid=REFERENCE,
        )
        ax.set_xlim(lo, hi)
    ax.set_xlabel("tokens/s/user (1000 / mean TPOT)")
    ax.set_ylabel("output tokens/s/GPU")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


#: ``Report.plot`` kinds: one report's figures by name.
REPORT_FIGURES: dict[str, Callable[[Any], Any]] = {
    "latency": lambda report: latency([("", report)]),
    "rates": lambda report: rates([("", report)]),
    "state": state,
    "load": load,
    "links": links,
}


def plotted_points(fig: Any) -> int:
    """How many data points a figure draws: line vertices, scatter markers and non-empty bars
    (limit lines, shading and the pick's ring are marks, not data)."""
    scatter = matplotlib().collections.PathCollection
    total = 0
    for ax in fig.axes:
        lines = [a for a in ax.get_lines() if a.get_gid() != REFERENCE]
        total += sum(len(a.get_xdata()) for a in lines)
        total += sum(
            len(c.get_offsets())
            for c in ax.collections
            if isinstance(c, scatter) and c.get_gid() != REFERENCE
        )
        total += sum(1 for p in ax.patches if p.get_gid() != REFERENCE and p.get_height() > 0)
    return total


__all__ = [
    "LATENCIES",
    "REFERENCE",
    "REPORT_FIGURES",
    "has_links",
    "latency",
    "links",
    "load",
    "pareto",
    "plotted_points",
    "rates",
    "state",
]
