"""The terminal view of ``dynosim replay --explain``: where a replay's time went."""

from __future__ import annotations

from typing import Any

from dynosim.report import Report

#: Pass kinds as the breakdown names them, in the order shown.
_KINDS = ("prefill_only", "decode_only", "mixed")
#: Ranks listed one by one; the rest are in the JSON report and Report.breakdown().
_MAX_RANK_ROWS = 16


def _ms(value: float) -> str:
    return f"{value:,.3f}"


def _role_parts(ranks: list[dict[str, Any]], kind: str, names: list[str]) -> dict[str, float]:
    """The mean of each part over the role's passes of ``kind`` (weighted by passes)."""
    passes = [r["passes"][kind] for r in ranks if kind in r["passes"]]
    total = sum(p["passes"] for p in passes)
    if not total:
        return {}
    return {
        name: sum(p["parts_mean_ms"][name] * p["passes"] for p in passes) / total for name in names
    }


def render_breakdown(report: Report) -> Any:
    """Rich tables of ``report.breakdown()``: per role, the mean priced pass by kind split into
    its parts (with the AIC family and engine version that priced each); per rank, its passes
    by kind (count, mean and p99 ms); and the mean time to first token by stage."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    b = report.breakdown()
    out: list[Any] = []
    for role, parts in b["parts"].items():
        ranks = [r for r in b["ranks"] if r["role"] == role]
        kinds = [k for k in _KINDS if any(k in r["passes"] for r in ranks)]
        table = Table(title=f"{role}: mean priced pass (ms) by part", title_justify="left")
        table.add_column("part", style="bold")
        table.add_column("priced by")
        for kind in kinds:
            table.add_column(kind, justify="right")
        means = {kind: _role_parts(ranks, kind, list(parts)) for kind in kinds}
        for name, priced in parts.items():
            family, version = priced.get("family"), priced.get("version")
            by = f"{family} {version}" if family and version else "-"
            table.add_row(name, by, *(_ms(means[k][name]) for k in kinds))
        table.add_row("total", "", *(_ms(sum(means[k].values())) for k in kinds), style="bold")
        out.append(table)
    per_rank = Table(title="passes per rank: count, mean / p99 ms", title_justify="left")
    for col in ("role", "worker", "dp rank", *_KINDS):
        per_rank.add_column(col, justify="right" if col in _KINDS else "left")
    for r in b["ranks"][:_MAX_RANK_ROWS]:
        cells = []
        for kind in _KINDS:
            p = r["passes"].get(kind)
            cells.append(f"{p['passes']:,}, {_ms(p['mean_ms'])} / {_ms(p['p99_ms'])}" if p else "-")
        per_rank.add_row(r["role"], str(r["worker"]), str(r["dp_rank"]), *cells)
    out.append(per_rank)
    if len(b["ranks"]) > _MAX_RANK_ROWS:
        more = len(b["ranks"]) - _MAX_RANK_ROWS
        out.append(Text(f"... {more} more ranks in --json and Report.breakdown()"))
    ttft = Table(title="time to first token by stage (mean ms)", title_justify="left")
    ttft.add_column("stage", style="bold")
    ttft.add_column("mean ms", justify="right")
    ttft.add_column("share", justify="right")
    stages = b["ttft_stages"]
    whole = sum(s["mean_ms"] for s in stages)
    for s in stages:
        share = f"{100 * s['mean_ms'] / whole:.1f} %" if whole > 0 else "-"
        ttft.add_row(s["stage"], _ms(s["mean_ms"]), share)
    out.append(ttft)
    return Group(*out)


__all__ = ["render_breakdown"]
