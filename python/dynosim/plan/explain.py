"""Why a plan's candidate meets or misses the SLA: each constraint (rejections, the limited TTFT
and TPOT statistics, memory) as a value against its limit, the one that binds (the least
headroom, or the worst excess) and by how much; and the share of TTFT a disaggregated
deployment spends moving KV from prefill to decode workers."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dynosim.plan.search import Probe


@dataclass(frozen=True)
class Constraint:
    """One constraint of a candidate: ``value`` against ``limit`` in ``unit``.

    ``rejections``: requests rejected of all (none may be). A latency statistic (``TTFT p90``,
    ``TPOT mean``): its value and limit in ms. ``memory``: the tokens of the longest request a
    rank must hold (its prompt on a prefill worker) against the tokens its KV cache holds,
    for the role where that is tightest.
    """

    name: str
    value: float
    limit: float
    unit: str

    @property
    def ratio(self) -> float:
        """Value over limit (<= 1: it holds); any rejection is infinitely over (none may be)."""
        if self.name == "rejections":
            return math.inf if self.value > 0 else 0.0
        return self.value / self.limit

    def describe(self) -> str:
        """The constraint and its headroom or excess in words."""
        if self.name == "rejections":
            if self.value == 0:
                return f"no request rejected (of {self.limit:,.0f})"
            return f"{self.value:,.0f} of {self.limit:,.0f} requests rejected"
        what = f"{self.name} {_number(self.value)} of {_number(self.limit)} {self.unit}"
        if self.ratio <= 1:
            return f"{what}, {100 * (1 - self.ratio):.1f}% headroom"
        return f"{what}, {100 * (self.ratio - 1):.1f}% over"


def _number(value: float) -> str:
    """Three significant figures at least: 1,973 or 28.8 or 0.512."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def constraints(
    probe: Probe, requests: int, stats: Mapping[str, str], memory: Constraint | None
) -> list[Constraint]:
    """The constraints of a replayed candidate: its rejections out of ``requests``, each
    limited statistic of ``probe`` (``stats`` names its statistic, e.g. ``p90``; a statistic no
    request has is left out) and ``memory`` when known."""
    out = [Constraint("rejections", probe.rejected, requests, "requests")]
    for metric, value in probe.metrics.items():
        if not math.isnan(value):
            name = f"{metric.removesuffix('_ms').upper()} {stats[metric]}"
            out.append(Constraint(name, value, probe.limits[metric], "ms"))
    if memory is not None:
        out.append(memory)
    return out


def binding(found: Sequence[Constraint]) -> Constraint:
    """The constraint that binds: the one over its limit by the most, else the one with the
    least headroom (the first of equals)."""
    return max(found, key=lambda c: c.ratio)


def memory(needs: Mapping[str, tuple[int, int]]) -> Constraint | None:
    """The memory constraint of a candidate from each role's (tokens the longest request needs
    on a rank, KV tokens a rank holds): the tightest role's. None without roles."""
    if not needs:
        return None
    role = max(needs, key=lambda r: needs[r][0] / needs[r][1])
    need, held = needs[role]
    return Constraint("memory", need, held, f"KV tokens per {role} rank")


def transfer_share(requests: Mapping[str, Any]) -> dict[str, float] | None:
    """What KV transfers took of TTFT over the completed requests of a replay's per-request
    columns: ``share`` (sum of transfer times over sum of TTFTs, 0-1), ``mean_ms`` (mean
    transfer time) and ``ttft_mean_ms``; None when no completed request was transferred (an
    aggregated replay)."""
    start = np.asarray(requests["transfer_start_ms"], dtype=np.float64)
    end = np.asarray(requests["transfer_end_ms"], dtype=np.float64)
    ttft = np.asarray(requests["ttft_ms"], dtype=np.float64)
    done = ~np.isnan(ttft) & ~np.isnan(start) & ~np.isnan(end)
    if not done.any():
        return None
    moved = end[done] - start[done]
    return {
        "share": float(moved.sum() / ttft[done].sum()),
        "mean_ms": float(moved.mean()),
        "ttft_mean_ms": float(ttft[done].mean()),
    }


__all__ = ["Constraint", "binding", "constraints", "memory", "transfer_share"]
