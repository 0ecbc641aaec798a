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

Both sides cover the same requests: those the simulated deployment completed (a request it
rejected is left out of the measured side too, and counted). Percentiles interpolate linearly
on both sides (numpy's default, as the report's). The error is ``100 * (simulated - measured)
/ measured``. Nothing is fitted: the simulated side is whatever the configured deployment
gives.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from dynosim.errors import WorkloadError
from dynosim.report import STATUS_COMPLETED
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
    requests/s and output tokens/s, both sides over the ``compared`` requests.
    ``measured_records`` and ``not_replayed`` count the file's records (``not_replayed`` by
    reason: warmup, cancelled, failed); of the ``replayed`` ones, ``left_out`` were rejected by
    the simulated deployment and are left out of both sides. ``notes`` say what the reader
    assumed.
    """

    path: str
    format: str
    rows: tuple[ComparisonRow, ...]
    measured_records: int
    not_replayed: dict[str, int]
    replayed: int
    compared: int
    left_out: int
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


def measured_summary(measured: MeasuredRun, keep: np.ndarray | None = None) -> dict[str, Any]:
    """The measured run's statistics under the report summary's keys: latency metrics as
    ``{mean, p50, p90, p99}`` in ms (None: not measured), completed requests, requests/s
    and output tokens/s; over the requests ``keep`` (a mask over ``measured.columns``)
    marks, else all. Throughput is over the run's duration, or with requests left out over
    the span of those kept, from the first one's start to the last one's end."""
    if keep is None or keep.all():
        keep, seconds = np.ones(len(measured), dtype=bool), measured.duration_ms / 1000.0
    else:
        starts = measured.columns.arrival_ms[keep]
        ends = starts + measured.e2e_ms[keep]
        seconds = float(ends.max() - starts.min()) / 1000.0 if keep.any() else 0.0
    itl = None
    if measured.itl_ms is not None and measured.itl_offsets is not None:
        bounds = zip(measured.itl_offsets[:-1], measured.itl_offsets[1:], strict=True)
        kept = [measured.itl_ms[a:b] for (a, b), k in zip(bounds, keep, strict=True) if k]
        itl = np.concatenate(kept) if kept else np.empty(0)
    completed = int(keep.sum())
    output_tokens = int(measured.columns.output_length[keep].sum(dtype=np.uint64))
    return {
        "ttft_ms": _stats(measured.ttft_ms[keep]),
        "tpot_ms": _stats(measured.tpot_ms[keep]),
        "itl_ms": _stats(itl),
        "e2e_ms": _stats(measured.e2e_ms[keep]),
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
    row per metric and statistic with both values and the error in %, both over the requests
    the replay completed. Raises WorkloadError when the report replayed other requests."""
    _check_same_requests(report, measured)
    sim = report.summary
    keep = np.asarray(report.requests["status"]) == STATUS_COMPLETED
    real = measured_summary(measured, keep)
    rows = []
    for metric in LATENCIES:
        for stat in STATS:
            s, m = sim[metric][stat], real[metric][stat]
            rows.append(ComparisonRow(metric, stat, s, m, _error_pct(s, m)))
    for metric in SCALARS:
        s, m = sim[metric], real[metric]
        rows.append(ComparisonRow(metric, None, s, m, _error_pct(s, m)))
    notes = list(measured.notes)
    left_out = len(keep) - int(keep.sum())
    if left_out:
        notes.append(
            f"{left_out:,} requests the simulated deployment rejected are left out of both "
            f"sides: every row compares the {len(keep) - left_out:,} it completed, and the "
            "measured throughput is over their span"
        )
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
        compared=len(keep) - left_out,
        left_out=left_out,
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
