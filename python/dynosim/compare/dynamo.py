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
from pathlib import Path
from typing import Any

from dynosim._dependencies import dynamo
from dynosim.compare.peer import (
    PeerRun,
    mocker_scheduling,
    mooncake_trace,
    peer_transfer,
    polynomial_timing,
    round_robin,
)
from dynosim.config import Resolved, RoleView, SimConfig, resolve
from dynosim.config.models import ENGINE_DEFAULTS
from dynosim.errors import ConfigError, DynosimError

PEER = "Dynamo"


#: SGLang settings Dynamo's mocker takes (under ``engine.sglang``); the new-token ratio's
#: start, floor and decay are constants there (0.7, 0.14 of it, 600 steps).
_SGLANG_PASSED = (
    "schedule_policy",
    "max_prefill_tokens",
    "chunked_prefill_size",
    "clip_max_new_tokens",
    "schedule_conservativeness",
)
_SGLANG_FIXED = (
    "init_new_token_ratio",
    "min_new_token_ratio_factor",
    "new_token_ratio_decay_steps",
)


def _sglang_args(role: RoleView) -> dict[str, Any]:
    """A Dynamo SGLang engine's settings. Dynamo's SGLang mocker pages its radix cache at
    ``block_size`` tokens and holds ``num_gpu_blocks`` pages: dynosim's page size, and the same
    tokens (``num_gpu_blocks x block_size``)."""
    e = role.engine
    for name in _SGLANG_FIXED:
        fixed = ENGINE_DEFAULTS["sglang"][name]
        if e.setting(name) != fixed:
            raise ConfigError(
                f"{role.engine_path}.{name}: {PEER}'s SGLang mocker fixes it at {fixed!r}, "
                f"got {e.setting(name)!r}"
            )
    page = e.setting("page_size")
    tokens = e.num_gpu_blocks * e.setting("block_size")
    if tokens % page:
        raise ConfigError(
            f"{role.engine_path}.page_size: {PEER} counts its SGLang cache in whole pages; "
            f"{tokens} tokens (num_gpu_blocks x block_size) are not a multiple of {page}"
        )
    sglang = {name: e.setting(name) for name in _SGLANG_PASSED}
    sglang["schedule_policy"] = {"fcfs": "fifo"}.get(sglang["schedule_policy"], "lpm")
    return {
        "backend": "sglang",
        "block_size": page,
        "num_gpu_blocks": tokens // page,
        "sglang": sglang,
    }


def _flavour_args(role: RoleView) -> dict[str, Any]:
    """One role's engine flavour in Dynamo's engine settings: its backend and scheduling."""
    e = role.engine
    if e.backend == "vllm":
        return {
            "max_num_batched_tokens": e.max_num_batched_tokens,
            "enable_chunked_prefill": e.enable_chunked_prefill,
            "preemption_mode": e.preemption_mode,
        }
    if e.backend == "trtllm":
        # Dynamo's TensorRT-LLM engine runs its vLLM-like scheduler under the no-evict
        # admission rule, with vLLM's token budget and chunked prefill.
        if e.capacity_scheduler != "guaranteed_no_evict":
            raise ConfigError(
                f"{role.engine_path}.capacity_scheduler: {PEER} models guaranteed_no_evict "
                f"only; got {e.capacity_scheduler}"
            )
        if not e.enable_chunked_context:
            raise ConfigError(
                f"{role.engine_path}.enable_chunked_context: {PEER}'s TensorRT-LLM engine "
                "chunks contexts as its vLLM one chunks prefills (unchunked, its replay stops on "
                "a prompt longer than the budget); compare with true, got false"
            )
        return {
            "backend": "trtllm",
            "max_num_batched_tokens": e.max_num_tokens,
            "enable_chunked_prefill": e.enable_chunked_context,
            "trtllm": {"capacity_scheduler_policy": "guaranteed_no_evict"},
        }
    if e.backend == "sglang":
        return _sglang_args(role)
    raise ConfigError(
        f"{role.engine_path}.backend: the comparison with {PEER} maps the vllm, trtllm and sglang "
        f"engines; got {e.backend}"
    )


def _engine_args(role: RoleView) -> dict[str, Any]:
    """One role's Dynamo engine launch config: ``{"engine": {...}}`` plus the rank layout."""
    timing = polynomial_timing(role, PEER)
    mocker_scheduling(role, PEER)
    e = role.engine
    args: dict[str, Any] = {
        "engine": {
            "block_size": e.setting("block_size"),
            "num_gpu_blocks": e.num_gpu_blocks,
            "max_num_seqs": e.max_num_seqs,
            **_flavour_args(role),
            "enable_prefix_caching": True,  # dynosim always shares prefixes
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
    transfer = peer_transfer(view, PEER)
    if transfer is None:
        return {}  # instant transfers in both simulators
    return {
        "kv_transfer_bytes_per_token": transfer.bytes_per_token,
        "kv_transfer_bandwidth": transfer.gbps,
        "kv_transfer_timing_mode": transfer.sizing,
    }


def dynamo_replay_kwargs(config: SimConfig, trace_block_size: int) -> dict[str, Any]:
    """Keyword arguments of ``run_mocker_trace_replay`` equivalent to ``config``.

    ``trace_block_size`` is the number of prompt tokens per trace hash id (512 in the public
    Mooncake traces). Raises ConfigError for settings Dynamo cannot model.
    """
    round_robin(
        config,
        "the comparison with Dynamo covers round_robin only (its kv_router is another cost model)",
    )
    c = config.cluster
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


class DynamoReplay:
    """Dynamo's offline replay of one Mooncake JSONL trace under one dynosim configuration,
    checked and ready to run (as often as wanted).

    ``trace_block_size`` is the number of prompt tokens per trace hash id. Construction fails
    early: WorkloadError for a trace Dynamo cannot read, ConfigError for settings it cannot
    model, MissingExtraError when Dynamo is not installed (the compare extra).
    """

    def __init__(self, trace: str | Path, config: SimConfig, trace_block_size: int) -> None:
        self.trace = mooncake_trace(trace, PEER)
        self.kwargs = dynamo_replay_kwargs(config, trace_block_size)
        self._core = dynamo()

    def run(self, rss: Any = None) -> PeerRun:
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
        return PeerRun(
            summary=summary,
            wall_ms=wall_ms,
            cpu_ms=cpu_ms,
            simulation_ms=float(summary["wall_time_ms"]),
            trace_load_ms=None,  # Dynamo reads the trace inside its call
            peak_rss_mib=rss.peak_mib() if rss is not None else None,
        )


__all__ = ["DynamoReplay", "dynamo_replay_kwargs"]
