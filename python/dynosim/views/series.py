"""The series a report's pictures show, derived from the report's own data: latency CDFs,
events per time bucket, worker names, and the cluster's state over time."""

from __future__ import annotations

from typing import Any

import numpy as np

#: Most points a plotted series keeps. The core's time series never hold more buckets than
#: this (each with its min and max, so spikes stay visible); CDFs and event counts are reduced
#: to it here.
MAX_POINTS = 2048


def cdf(values: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF of ``values`` (NaN dropped): sorted values and the share of values at
    or below each, thinned to at most ``max_points`` evenly spaced ranks (both ends kept)."""
    x = np.sort(values[~np.isnan(values)])
    if len(x) == 0:
        return x, x
    y = np.arange(1, len(x) + 1) / len(x)
    if len(x) > max_points:
        keep = np.unique(np.linspace(0, len(x) - 1, max_points).round().astype(int))
        x, y = x[keep], y[keep]
    return x, y


def rate(
    times_ms: np.ndarray, duration_ms: float, max_points: int = MAX_POINTS
) -> tuple[np.ndarray, np.ndarray, float]:
    """Events per second over ``[0, duration_ms]`` from their times (ms, NaN dropped), in
    buckets of a whole number of seconds, as few as fit in ``max_points``: the buckets' starts
    (s), the mean rate in each (events/s), and the bucket width (s)."""
    t = times_ms[~np.isnan(times_ms)]
    span_s = max(duration_ms, float(t.max()) if len(t) else 0.0) / 1000.0
    width = max(1.0, float(np.ceil(span_s / max_points)))
    buckets = max(1, int(np.ceil(span_s / width)))
    index = np.minimum((t / 1000.0 // width).astype(np.int64), buckets - 1)
    counts = np.bincount(index, minlength=buckets)
    return np.arange(buckets) * width, counts / width, width


def worker_names(config: dict[str, Any], num_workers: int) -> list[str]:
    """A label per worker in the report's worker order: ``W0``, ... aggregated; prefill
    workers ``P0``, ... then decode workers ``D0``, ... disaggregated."""
    cluster = config["cluster"]
    if cluster["mode"] != "disaggregated":
        return [f"W{i}" for i in range(num_workers)]
    p = int(cluster["num_prefill_workers"])
    return [f"P{i}" for i in range(p)] + [f"D{i}" for i in range(num_workers - p)]


def timeseries(report: Any) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The report's time series as ``{name: (t_s, min, max)}`` over its buckets; a series with
    one column per worker gives one entry per worker, ``name[label]``."""
    ts = report.timeseries
    t = np.asarray(ts["time_ms"], dtype=float) / 1000.0
    names = worker_names(report.config, int(report.summary["num_workers"]))
    out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for name, part in ts.items():
        if not isinstance(part, dict):
            continue
        lo, hi = np.asarray(part["min"], dtype=float), np.asarray(part["max"], dtype=float)
        if lo.ndim == 1:
            out[name] = (t, lo, hi)
        else:
            for w in range(lo.shape[1]):
                out[f"{name}[{names[w]}]"] = (t, lo[:, w], hi[:, w])
    return out


__all__ = ["MAX_POINTS", "cdf", "rate", "timeseries", "worker_names"]
