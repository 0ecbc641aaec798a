"""The series a report's pictures show, derived from the report's own data: latency CDFs,
events per time bucket, worker names, and the cluster's state over time."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from dynosim import _core

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


def resolved_view(config: Mapping[str, Any]) -> dict[str, Any]:
    """A report's configuration as the core resolves it, in plain values: ``roles`` (each
    role's ``role``, ``workers``, ``gpus_per_worker``, ``engine`` and ``timing`` sections and
    their dotted paths), ``kv_transfer``, ``offload``, ``num_workers`` and ``num_gpus``. What a
    view reads without building the configuration models (``dynosim.config.resolve`` is the
    same view as models)."""
    return json.loads(_core.resolve_config_json(json.dumps(config)))


def link_names(config: dict[str, Any]) -> list[str]:
    """A label per KV-transfer link in the report's link order: the send link of each prefill
    rank (``P0 send``; ``P0.1 send`` for rank 1 of a data-parallel worker), then the receive
    link of each decode rank (``D0 recv``, ...)."""
    roles = {r["role"]: r for r in resolved_view(config)["roles"]}
    labels = []
    for role, letter, end in (("prefill", "P", "send"), ("decode", "D", "recv")):
        view = roles[role]
        dp = view["engine"]["data_parallel_size"]
        for w in range(view["workers"]):
            labels.extend(f"{letter}{w}{f'.{r}' if dp > 1 else ''} {end}" for r in range(dp))
    return labels


#: A report's time series bucket by bucket: start (s), mean, min, max.
Series = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def bucket_widths(report: Any) -> np.ndarray:
    """How long the replay covered each bucket of its time series (ms): the bucket width,
    less for a last bucket the replay ended inside."""
    ts = report.timeseries
    starts = np.asarray(ts["time_ms"], dtype=float)
    if not len(starts):
        return starts
    end = max(float(report.summary["duration_ms"]), float(starts[-1]))
    return np.minimum(np.diff(np.append(starts, end)), float(ts["interval_ms"]))


def _merge(
    t: np.ndarray, mean: np.ndarray, lo: np.ndarray, hi: np.ndarray, w: np.ndarray, points: int
) -> Series:
    """Runs of adjacent buckets merged into at most ``points`` buckets: each run's start, its
    time-weighted mean (weights ``w``, ms covered), its least minimum and its greatest
    maximum, so a spike stays in the maximum however many buckets merge."""
    k = -(-len(t) // points) if points > 0 else 1
    if k <= 1:
        return t, mean, lo, hi
    starts = np.arange(0, len(t), k)
    covered = np.add.reduceat(w, starts)
    weighted = np.add.reduceat(mean * w[:, None] if mean.ndim > 1 else mean * w, starts)
    safe = np.where(covered > 0, covered, 1.0)
    merged = weighted / (safe[:, None] if mean.ndim > 1 else safe)
    return t[starts], merged, np.minimum.reduceat(lo, starts), np.maximum.reduceat(hi, starts)


def timeseries(report: Any, points: int | None = None) -> dict[str, Series]:
    """The report's time series as ``{name: (t_s, mean, min, max)}`` over its buckets, or
    over at most ``points`` buckets made of runs of them (the mean time-weighted, the min and
    max of the run: a long replay drawn in a few hundred buckets per line); a series with a
    column per worker or link gives one entry per column, ``name[label]``."""
    ts = report.timeseries
    t = np.asarray(ts["time_ms"], dtype=float) / 1000.0
    widths = bucket_widths(report)
    out: dict[str, Series] = {}
    for name, part in ts.items():
        if not isinstance(part, dict):
            continue
        mean, lo, hi = (np.asarray(part[k], dtype=float) for k in ("mean", "min", "max"))
        run_t = t
        if points is not None:
            run_t, mean, lo, hi = _merge(t, mean, lo, hi, widths, points)
        if mean.ndim == 1:
            out[name] = (run_t, mean, lo, hi)
            continue
        columns = mean.shape[1]
        if name == "link_utilization":
            labels = link_names(report.config)
        else:
            labels = worker_names(report.config, columns)
        for k, label in enumerate(labels):
            out[f"{name}[{label}]"] = (run_t, mean[:, k], lo[:, k], hi[:, k])
    return out


__all__ = [
    "MAX_POINTS",
    "Series",
    "bucket_widths",
    "cdf",
    "link_names",
    "rate",
    "resolved_view",
    "timeseries",
    "worker_names",
]
