"""The service-level agreement a candidate deployment must meet: a limit on a statistic of TTFT
and of TPOT, every request completed."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from dynosim._plan_defaults import DEFAULT_TPOT_STAT, DEFAULT_TTFT_STAT, Stat
from dynosim._validation import StrictModel
from dynosim.errors import ConfigError


class Sla(StrictModel):
    """Latency limits (ms) on one statistic each of TTFT and of TPOT (a request's mean time per
    output token after the first); an unset limit is not checked.

    A candidate meets the SLA when every request completed (none rejected) and each set limit
    holds: ``summary[ttft_ms][ttft_stat] <= ttft_ms`` and likewise for TPOT. A statistic no
    request has (TPOT when every output is one token) violates nothing, as in goodput.
    """

    _root = "sla"
    ttft_ms: float | None = Field(None, gt=0, allow_inf_nan=False, description="TTFT limit (ms).")
    tpot_ms: float | None = Field(None, gt=0, allow_inf_nan=False, description="TPOT limit (ms).")
    ttft_stat: Stat = Field(DEFAULT_TTFT_STAT, description="The TTFT statistic limited.")
    tpot_stat: Stat = Field(DEFAULT_TPOT_STAT, description="The TPOT statistic limited.")

    @classmethod
    def coerce(cls, value: Sla | Mapping[str, Any] | None) -> Sla:
        """An Sla from an Sla, a mapping of its fields, or None (no latency limits)."""
        if value is None:
            return cls()
        if isinstance(value, Sla):
            return value
        if isinstance(value, Mapping):
            return cls.model_validate(dict(value))
        raise ConfigError(f"sla: expected an Sla, a mapping or None, got {type(value).__name__}")

    def limits(self) -> dict[str, tuple[str, float]]:
        """The set limits: summary metric (``ttft_ms``, ``tpot_ms``) -> (statistic, limit ms)."""
        out = {}
        if self.ttft_ms is not None:
            out["ttft_ms"] = (self.ttft_stat, self.ttft_ms)
        if self.tpot_ms is not None:
            out["tpot_ms"] = (self.tpot_stat, self.tpot_ms)
        return out

    def values(self, summary: Mapping[str, Any]) -> dict[str, float]:
        """The limited statistics of a replay's summary (ms; NaN where no request has one)."""
        return {
            metric: _number(summary[metric][stat]) for metric, (stat, _) in self.limits().items()
        }

    def ratio(self, summary: Mapping[str, Any]) -> float:
        """The worst limited statistic over its limit (<= 1: the latency limits hold; 0 with no
        limit set). Ranks candidates that miss the SLA by how close they came."""
        limits = {metric: limit for metric, (_, limit) in self.limits().items()}
        return max(over_limits(self.values(summary), limits).values(), default=0.0)

    def violations(self, summary: Mapping[str, Any]) -> list[str]:
        """Why a replay's summary misses the SLA, one phrase per broken rule ([]: it meets it)."""
        out = []
        rejected = int(summary["rejected_requests"])
        if rejected:
            out.append(f"{rejected} of {summary['num_requests']} requests rejected")
        for metric, value in self.values(summary).items():
            stat, limit = self.limits()[metric]
            if value > limit:  # False for NaN
                name = metric.removesuffix("_ms").upper()
                out.append(f"{name} {stat} {value:,.1f} ms > {limit:,.1f} ms")
        return out

    def describe(self) -> str:
        """The SLA in words, e.g. ``TTFT p90 <= 2,000 ms, TPOT mean <= 50 ms``."""
        parts = [
            f"{m.removesuffix('_ms').upper()} {stat} <= {limit:,.0f} ms"
            for m, (stat, limit) in self.limits().items()
        ]
        return ", ".join(parts) if parts else "no latency limit"


def over_limits(values: Mapping[str, float], limits: Mapping[str, float]) -> dict[str, float]:
    """Each limited statistic (ms) over its limit (ms), by metric name; a NaN statistic (no
    request has one) is left out, as it violates nothing."""
    return {m: v / limits[m] for m, v in values.items() if not math.isnan(v)}


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


__all__ = ["Sla", "Stat", "over_limits"]
