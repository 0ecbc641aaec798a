"""Side by side with Dynamo's own offline replay (the optional ``dynosim[compare]`` extra).

Dynamo's mocker (PyPI ``ai-dynamo-runtime`` 1.6.1) replays a Mooncake trace on CPU through
``dynamo._core.run_mocker_trace_replay``. This module maps a dynosim configuration onto that
call's arguments, runs it, and lines its summary up against a dynosim :class:`Report`.

Only what both simulators model can be compared: Dynamo times passes with the polynomial model
and moves KV at line rate, so a configuration with another timing model or with max-min fair
links raises :class:`~dynosim.errors.ConfigError` naming the field.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynosim._dependencies import dynamo
from dynosim.config import PolynomialTiming, Resolved, RoleView, SimConfig, resolve
from dynosim.errors import ConfigError, DynosimError, WorkloadError
from dynosim.report import Report


def kv_bytes_per_token(view: Resolved) -> int | None:
    """The whole-model KV bytes of one token (None: not given), as the whole number of bytes
    Dynamo takes; a fractional value raises ConfigError."""
    value = view.kv_transfer.bytes_per_token
    if value is None:
        return None
    if value != int(value):
        raise ConfigError(
            f"kv_transfer.kv_bytes_per_token: Dynamo takes a whole number of bytes, got {value}"
        )
    return int(value)


def _engine_args(role: RoleView) -> dict[str, Any]:
    """One role's Dynamo engine launch config: ``{"engine": {...}}`` plus the rank layout."""
    timing = role.timing
    if not isinstance(timing, PolynomialTiming):
        raise ConfigError(
            f"{role.timing_path}.model: Dynamo's replay times passes with the polynomial model "
            f"only, got {timing.model!r}"
        )
    e = role.engine
    args: dict[str, Any] = {
        "engine": {
            "block_size": e.block_size,
            "num_gpu_blocks": e.num_gpu_blocks,
            "max_num_seqs": e.max_num_seqs,
            "max_num_batched_tokens": e.max_num_batched_tokens,
            "enable_chunked_prefill": e.enable_chunked_prefill,
            "enable_prefix_caching": True,  # dynosim always shares prefixes
            "preemption_mode": e.preemption_mode,
            "speedup_ratio": timing.speedup_ratio,
            "decode_speedup_ratio": timing.decode_speedup_ratio,
            "worker_type": role.role,  # Dynamo names the roles as dynosim does
        }
    }
    # Rank layout sits beside "engine" in Dynamo's launch config.
    if e.tensor_parallel_size != 1:
        args["tensor_parallel_size"] = e.tensor_parallel_size
    if e.data_parallel_size != 1:
        args["dp_size"] = e.data_parallel_size
    return args


def _transfer_args(view: Resolved) -> dict[str, Any]:
    """The KV-transfer fields of a disaggregated engine: bytes per token, GB/s, sizing."""
    kv = view.kv_transfer
    if kv.first_token != "first_decode_pass":
        raise ConfigError(
            "kv_transfer.first_token: Dynamo counts a first token after the decode worker's "
            f"first pass; compare with first_token 'first_decode_pass', got {kv.first_token!r}"
        )
    if kv.send_gbps is None or kv.recv_gbps is None:
        return {}  # instant transfers in both simulators
    if kv.link_model != "line_rate":
        raise ConfigError(
            "kv_transfer.link_model: Dynamo moves every transfer at full bandwidth; compare "
            f"with link_model 'line_rate', got {kv.link_model!r}"
        )
    per_token = kv_bytes_per_token(view)
    if per_token is None:
        raise ConfigError(
            "kv_transfer: a bandwidth needs kv_bytes_per_token or kv_shape to size transfers"
        )
    return {
        "kv_transfer_bytes_per_token": per_token,
        # At line rate a lone transfer runs at the slower of its two ends (as in dynosim).
        "kv_transfer_bandwidth": min(kv.send_gbps, kv.recv_gbps),
        "kv_transfer_timing_mode": kv.sizing,
    }


def dynamo_replay_kwargs(config: SimConfig, trace_block_size: int) -> dict[str, Any]:
    """Keyword arguments of ``run_mocker_trace_replay`` equivalent to ``config``.

    ``trace_block_size`` is the number of prompt tokens per trace hash id (512 in the public
    Mooncake traces). Raises ConfigError for settings Dynamo cannot model.
    """
    c = config.cluster
    if c.router != "round_robin":
        raise ConfigError(
            f"cluster.router: the comparison with Dynamo covers round_robin only (its kv_router "
            f"is another cost model), got {c.router!r}"
        )
    view = resolve(config)
    kwargs: dict[str, Any] = {
        "router_mode": "round_robin",
        "arrival_speedup_ratio": c.arrival_speedup_ratio,
        "trace_block_size": trace_block_size,
        "trace_format": "mooncake",
    }
    if c.mode == "aggregated":
        kwargs["num_workers"] = c.num_workers
        kwargs["extra_engine_args"] = _engine_args(view.roles["aggregated"])
    else:
        transfer = _transfer_args(view)
        kwargs["num_prefill_workers"] = c.num_prefill_workers
        kwargs["num_decode_workers"] = c.num_decode_workers
        for role in ("prefill", "decode"):
            args = _engine_args(view.roles[role])
            args["engine"].update(transfer)
            kwargs[f"{role}_engine_args"] = args
    return kwargs


@dataclass(frozen=True)
class DynamoRun:
    """One Dynamo replay: its summary (Dynamo's keys, times in ms) and what it cost.

    ``wall_ms`` and ``cpu_ms`` cover the whole call (Dynamo reads and parses the trace inside
    it); ``simulation_ms`` is Dynamo's own ``wall_time_ms``, the simulation without the trace
    load; ``peak_rss_mib`` is the process's peak resident memory during the call (MiB), when
    measured.
    """

    summary: dict[str, Any]
    wall_ms: float
    cpu_ms: float
    simulation_ms: float
    peak_rss_mib: float | None


class DynamoReplay:
    """Dynamo's offline replay of one Mooncake JSONL trace under one dynosim configuration,
    checked and ready to run (as often as wanted).

    ``trace_block_size`` is the number of prompt tokens per trace hash id. Construction fails
    early: WorkloadError for a trace Dynamo cannot read, ConfigError for settings it cannot
    model, MissingExtraError when Dynamo is not installed (the compare extra).
    """

    def __init__(self, trace: str | Path, config: SimConfig, trace_block_size: int) -> None:
        self.trace = Path(trace)
        if self.trace.suffix.lower() not in (".jsonl", ".json"):
            raise WorkloadError(
                f"{self.trace}: Dynamo's replay reads Mooncake JSONL traces only, "
                f"not {self.trace.suffix!r} files"
            )
        self.kwargs = dynamo_replay_kwargs(config, trace_block_size)
        self._core = dynamo()

    def run(self, rss: Any = None) -> DynamoRun:
        """Replay once. ``rss``, if given, has ``reset()`` and ``peak_mib()`` (for example
        ``dynosim.bench.PeakRss``) and measures the call's own peak memory."""
        if rss is not None:
            rss.reset()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        try:
            result = self._core.run_mocker_trace_replay([str(self.trace)], **self.kwargs)
        except Exception as e:  # Dynamo raises plain exceptions; name the side that failed
            raise DynosimError(f"{self.trace}: Dynamo's offline replay failed: {e}") from e
        wall_ms = (time.perf_counter() - wall0) * 1000.0
        cpu_ms = (time.process_time() - cpu0) * 1000.0
        summary = dict(result.summary)
        return DynamoRun(
            summary=summary,
            wall_ms=wall_ms,
            cpu_ms=cpu_ms,
            simulation_ms=float(summary["wall_time_ms"]),
            peak_rss_mib=rss.peak_mib() if rss is not None else None,
        )


#: Rows of the side-by-side table: label, dynosim summary path, Dynamo summary key. Dynamo's
#: percentiles take the nearest rank (ITL: a DDSketch of 0.1 % relative accuracy) where
#: dynosim's interpolate exactly like numpy; on one set of samples that moves a p99 by up to
#: about 0.5 %, means not at all.
METRICS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("completed requests", ("completed_requests",), "completed_requests"),
    ("virtual duration (ms)", ("duration_ms",), "duration_ms"),
    *(
        (f"{name} {stat} (ms)", (key, stat), f"{dstat}_{dkey}_ms")
        for name, key, dkey in (
            ("TTFT", "ttft_ms", "ttft"),
            ("TTST", "ttst_ms", "ttst"),
            ("TPOT", "tpot_ms", "tpot"),
            ("ITL", "itl_ms", "itl"),
            ("E2E", "e2e_ms", "e2e_latency"),
        )
        for stat, dstat in (("mean", "mean"), ("p50", "median"), ("p99", "p99"))
    ),
    ("requests/s", ("request_throughput_rps",), "request_throughput_rps"),
    ("output tokens/s", ("output_token_throughput_tps",), "output_throughput_tok_s"),
    ("total tokens/s", ("total_token_throughput_tps",), "total_throughput_tok_s"),
    # Both count prompt tokens found cached at a request's first admission; Dynamo's plain
    # prefix_cache_reused_ratio also counts re-admissions after preemption.
    ("prefix reuse ratio", ("prefix_reuse_ratio",), "first_admission_prefix_cache_reused_ratio"),
)


def relative_difference(ours: float | None, theirs: float | None) -> float | None:
    """(ours - theirs) / theirs, or None when either is missing or theirs is 0."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return (ours - theirs) / theirs


def metric_rows(report: Report, dynamo: dict[str, Any]) -> list[tuple[str, Any, Any, Any]]:
    """(label, dynosim value, Dynamo value, relative difference) for every row of METRICS."""
    rows = []
    for label, path, key in METRICS:
        ours: Any = report.summary
        for part in path:
            ours = ours[part]
        theirs = dynamo.get(key)
        rows.append((label, ours, theirs, relative_difference(ours, theirs)))
    return rows


__all__ = [
    "METRICS",
    "DynamoReplay",
    "DynamoRun",
    "dynamo_replay_kwargs",
    "kv_bytes_per_token",
    "metric_rows",
    "relative_difference",
]
