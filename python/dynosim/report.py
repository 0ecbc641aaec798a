"""The result of a replay: per-request arrays, time series, the summary, canonical JSON."""

from __future__ import annotations

import json
import math
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from dynosim import _core

if TYPE_CHECKING:
    from dynosim.compare.measured import MeasuredComparison
    from dynosim.workload.measured import MeasuredRun

#: Machine names of rejection reasons, indexed by ``Report.requests["reject_reason"]``.
REJECT_REASONS: tuple[str, ...] = tuple(_core.reject_reason_names())

#: ``Report.requests["status"]`` codes.
STATUS_COMPLETED = 0
STATUS_REJECTED = 1

_LATENCIES = ("ttft_ms", "ttst_ms", "tpot_ms", "itl_ms", "e2e_ms")


def _plain(value: Any) -> Any:
    """JSON-ready: arrays to lists, NaN to null (JSON has no NaN)."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f":
            return [None if math.isnan(x) else x for x in value.tolist()]
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


class Report:
    """What one replay produced.

    Attributes:
        summary: counts (completed + rejected = requests), token totals, ``duration_ms``,
            throughputs in requests/s and tokens/s, latency distributions in ms with mean, std,
            min, max, p50, p75, p90, p95, p99, prefix reuse, GPU-hours, goodput.
        config: the full configuration that ran, defaults filled in.
        requests: one numpy array per field, one entry per workload row in row order: times in
            ms (NaN where a request never got there), token counts, ``worker``, ``status``
            (0 completed, 1 rejected), ``reject_reason`` (index into ``REJECT_REASONS``).
        timeseries: ``time_ms``, ``queued``, ``running`` and ``kv_blocks_used`` (samples x
            workers), every ``interval_ms``.
        provenance: where derived settings came from: ``timing`` (per AIC timing section, the
            model, system, engine version, layout and the version whose measurements priced
            each family of operations) and ``kv_capacity`` (how ``num_gpu_blocks`` was
            derived), when they were; empty otherwise.
    """

    def __init__(self, raw: dict[str, Any], provenance: dict[str, Any] | None = None) -> None:
        self.summary: dict[str, Any] = json.loads(raw["summary_json"])
        self.config: dict[str, Any] = json.loads(raw["config_json"])
        self.requests: dict[str, np.ndarray] = raw["requests"]
        self.timeseries: dict[str, Any] = raw["timeseries"]
        self.provenance: dict[str, Any] = provenance or {}
        for arrays in (self.requests, self.timeseries):
            for value in arrays.values():
                if isinstance(value, np.ndarray):
                    value.flags.writeable = False

    @property
    def num_requests(self) -> int:
        return int(self.summary["num_requests"])

    @property
    def completed_requests(self) -> int:
        return int(self.summary["completed_requests"])

    @property
    def rejected_requests(self) -> int:
        return int(self.summary["rejected_requests"])

    def rejections(self) -> list[tuple[int, str]]:
        """Every rejected request as (row index, reason name)."""
        rows = np.flatnonzero(self.requests["status"] == STATUS_REJECTED)
        codes = self.requests["reject_reason"][rows]
        return [(int(i), REJECT_REASONS[c]) for i, c in zip(rows, codes, strict=True)]

    def to_dict(self) -> dict[str, Any]:
        """Summary, configuration, per-request columns and time series as plain Python data."""
        out = {
            "summary": self.summary,
            "config": self.config,
            "requests": self.requests,
            "timeseries": self.timeseries,
        }
        if self.provenance:
            out["provenance"] = self.provenance
        return _plain(out)

    @cached_property
    def _canonical(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, no whitespace, null for NaN. Same inputs, same bytes."""
        return self._canonical

    def latency(self, metric: str) -> dict[str, Any]:
        """The distribution of one latency metric (ms): one of ttft_ms, ttst_ms, tpot_ms,
        itl_ms, e2e_ms."""
        if metric not in _LATENCIES:
            raise KeyError(f"unknown latency metric {metric!r}; choose one of {_LATENCIES}")
        return self.summary[metric]

    def compare_measured(self, measured: MeasuredRun) -> MeasuredComparison:
        """This replay of ``measured.columns`` side by side with what the real benchmark
        ``measured`` (``dynosim.load_measured``) measured: mean, p50, p90 and p99 of TTFT,
        TPOT, ITL and E2E (ms), completed requests, requests/s and output tokens/s, with the
        error in %. See :mod:`dynosim.compare.measured` for which metric is compared with
        which."""
        from dynosim.compare.measured import compare_measured

        return compare_measured(self, measured)

    def __repr__(self) -> str:
        s = self.summary
        return (
            f"Report(requests={s['num_requests']}, completed={s['completed_requests']}, "
            f"rejected={s['rejected_requests']}, duration_ms={s['duration_ms']:.1f})"
        )


__all__ = ["REJECT_REASONS", "STATUS_COMPLETED", "STATUS_REJECTED", "Report"]
