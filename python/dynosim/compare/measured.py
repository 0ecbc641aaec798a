"""Side by side with a measured run: the latencies and throughput a replay of a real
benchmark's requests simulated, against what the benchmark measured.

Each metric is compared with the one of the same definition:

* TTFT: dynosim's first token minus arrival vs the benchmark's first response minus request
  start (AIPerf ``time_to_first_token``/``ttft``, vLLM ``ttfts``);
* TPOT: ``(E2E - TTFT) / (output - 1)`` per request on both sides (AIPerf's
  ``inter_token_latency`` by default, vLLM's TPOT);
* ITL: every gap between two tokens of every request vs every gap between two streamed
  chunks (AIPerf ``inter_chunk_latency``, vLLM ``itls``);
* E2E: last token minus arrival vs last response minus request start;
* throughput: completed requests and output tokens over the duration, from the first
  request's start to the last one's end on both sides.

Percentiles interpolate linearly on both sides (numpy's default, as the report's). The error
is ``100 * (simulated - measured) / measured``. Nothing is fitted: the simulated side is
whatever the configured deployment gives.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from dynosim.errors import WorkloadError
from dynosim.workload.measured import MeasuredRun

#: The latency metrics compared (report summary keys, ms) and the statistics of each.
LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
STATS = ("mean", "p50", "p90", "p99")
#: The scalar metrics compared (report summary keys).
SCALARS = ("completed_requests", "request_throughput_rps", "output_token_throughput_tps")
_PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}


class Simulated(Protocol):
    """What is read from a replay: a :class:`dynosim.Report` has it."""

    summary: dict[str, Any]
    config: dict[str, Any]
    requests: dict[str, np.ndarray]


@dataclass(frozen=True)
class ComparisonRow:
    """One metric side by side: ``metric`` is a report summary key (``ttft_ms``,
    ``request_throughput_rps``, ...), ``stat`` the statistic (``mean``, ``p50``, ``p90``,
    ``p99``; None for a scalar). ``error_pct`` is ``100 * (simulated - measured) /
    measured``; None where either side has no value or the measured one is 0."""

    metric: str
    stat: str | None
    simulated: float | None
    measured: float | None
    error_pct: float | None


@dataclass(frozen=True)
class MeasuredComparison:
    """A replay of a measured run next to the measurement.

    ``rows``: TTFT, TPOT, ITL and E2E (mean, p50, p90, p99, ms), then completed requests,
    requests/s and output tokens/s. ``measured_records`` and ``not_replayed`` count the
    file's records (``not_replayed`` by reason: warmup, cancelled, failed); ``simulated_rejected``
    the replayed requests the simulated deployment rejected (their latencies are missing
    from the simulated side). ``notes`` say what the reader assumed.
    """

    path: str
    format: str
    rows: tuple[ComparisonRow, ...]
    measured_records: int
    not_replayed: dict[str, int]
    replayed: int
    simulated_rejected: int
    notes: tuple[str, ...]

    def row(self, metric: str, stat: str | None = None) -> ComparisonRow:
        """The row of ``metric`` (and ``stat`` for a latency)."""
        for row in self.rows:
            if row.metric == metric and row.stat == stat:
                return row
        raise KeyError(f"no row {metric!r} {stat!r}")

    def to_dict(self) -> dict[str, Any]:
        """Plain Python data (rows as dicts)."""
        return asdict(self)


def _error_pct(simulated: float | None, measured: float | None) -> float | None:
    if simulated is None or measured is None or measured == 0:
        return None
    return 100.0 * (simulated - measured) / measured


def _stats(samples: np.ndarray | None) -> dict[str, float | None]:
    """Mean and percentiles of the samples that are not NaN (None: no samples)."""
    values = None if samples is None else samples[~np.isnan(samples)]
    if values is None or len(values) == 0:
        return dict.fromkeys(STATS)
    out: dict[str, float | None] = {"mean": float(values.mean())}
    for stat, q in _PERCENTILES.items():
        out[stat] = float(np.percentile(values, q))
    return out


def measured_summary(measured: MeasuredRun) -> dict[str, Any]:
    """The measured run's statistics under the report summary's keys: latency metrics as
    ``{mean, p50, p90, p99}`` in ms (None: not measured), completed requests, requests/s
    and output tokens/s."""
    seconds = measured.duration_ms / 1000.0
    completed = len(measured)
    output_tokens = int(measured.columns.output_length.sum(dtype=np.uint64))
    return {
        "ttft_ms": _stats(measured.ttft_ms),
        "tpot_ms": _stats(measured.tpot_ms),
        "itl_ms": _stats(measured.itl_ms),
        "e2e_ms": _stats(measured.e2e_ms),
        "completed_requests": completed,
        "request_throughput_rps": completed / seconds if seconds > 0 else None,
        "output_token_throughput_tps": output_tokens / seconds if seconds > 0 else None,
    }


def _check_same_requests(report: Simulated, measured: MeasuredRun) -> None:
    cols = measured.columns
    requests = report.requests
    if not (
        len(requests["input_length"]) == len(cols)
        and np.array_equal(requests["input_length"], cols.input_length)
        and np.array_equal(requests["output_length"], cols.output_length)
    ):
        raise WorkloadError(
            f"the report is not a replay of the {len(cols)} requests measured in "
            f"{measured.path} (it has {len(requests['input_length'])} requests or other "
            "lengths); replay the measured run's columns"
        )


def compare_measured(report: Simulated, measured: MeasuredRun) -> MeasuredComparison:
    """``report`` (a replay of ``measured.columns``) next to what ``measured`` measured: a
    row per metric and statistic with both values and the error in %. Raises WorkloadError
    when the report replayed other requests."""
    _check_same_requests(report, measured)
    sim = report.summary
    real = measured_summary(measured)
    rows = []
    for metric in LATENCIES:
        for stat in STATS:
            s, m = sim[metric][stat], real[metric][stat]
            rows.append(ComparisonRow(metric, stat, s, m, _error_pct(s, m)))
    for metric in SCALARS:
        s, m = sim[metric], real[metric]
        rows.append(ComparisonRow(metric, None, s, m, _error_pct(s, m)))
    notes = list(measured.notes)
    speedup = report.config["cluster"]["arrival_speedup_ratio"]
    if speedup != 1:
        notes.append(f"the replay divided every arrival gap by {speedup:g}: not the measured load")
    return MeasuredComparison(
        path=str(measured.path),
        format=measured.format,
        rows=tuple(rows),
        measured_records=measured.num_records,
        not_replayed=dict(measured.not_replayed),
        replayed=len(measured),
        simulated_rejected=int(sim["rejected_requests"]),
        notes=tuple(notes),
    )


__all__ = [
    "LATENCIES",
    "SCALARS",
    "STATS",
    "ComparisonRow",
    "MeasuredComparison",
    "compare_measured",
    "measured_summary",
]
