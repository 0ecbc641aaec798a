"""Side by side with AISimulate, the simulator dynosim grew from, through its published Rust
core (crates.io ``aisimulate-core``; its Python wheel cannot be installed from PyPI): the stable
0.13.0 by default, or a development release (:data:`RELEASES`).

The crate ``rust/dynosim-aisim`` replays a Mooncake trace with AISimulate and prints its summary
as JSON (:mod:`~dynosim.compare.aisimulate_build` builds it on first use, per release). This
module maps a dynosim configuration onto that binary's flags, runs it under a timeout and reads
its summary, which has the keys of Dynamo's (the two share the model).

Only what both simulators model can be compared; the rest raises
:class:`~dynosim.errors.ConfigError` naming the setting:

- timing other than the polynomial model;
- in disaggregation, another link model than the release's (0.13.0 delays each transfer by its
  size over the full bandwidth: ``kv_transfer.link_model: line_rate``; the development release
  shares each prefill rank's send link and each decode rank's receive link max-min fairly:
  ``max_min``) and a first token counted at the KV's arrival (AISimulate counts it after the
  decode worker's first pass: ``kv_transfer.first_token: first_decode_pass``);
- routers other than round robin (the published replay composes no other placement);
- KV offload tiers (AISimulate's G2/G3 tiers are another model: FIFO transfer lanes per rank,
  offload writes that take bandwidth, a latency to the first byte of G3);
- more than one data-parallel rank per worker (AISimulate spreads requests round robin over
  every rank, not by vLLM's DP load balancer);
- engine settings this mapping does not know (a newer dynosim setting), unless at their default.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dynosim.compare.aisimulate_build import BINARY_ENV, aisimulate_binary, run_program
from dynosim.compare.peer import (
    PeerRun,
    mocker_scheduling,
    mooncake_trace,
    peer_transfer,
    polynomial_timing,
    round_robin,
)
from dynosim.compare.releases import AISIMULATE_VERSION, RELEASES, RUN_TIMEOUT_S, Release
from dynosim.config import Resolved, RoleView, SimConfig, resolve
from dynosim.errors import ConfigError, DynosimError

PEER = "AISimulate"

#: The release whose offload tiers are compared.
_TIERED = next(r.version for r in RELEASES.values() if r.offload_tiers)


def release(version: str) -> Release:
    """The release of ``version``; ConfigError naming the known ones otherwise."""
    try:
        return RELEASES[version]
    except KeyError:
        raise ConfigError(
            f"aisimulate version {version!r}: the comparison builds on aisimulate-core "
            f"{', '.join(RELEASES)}"
        ) from None


#: dynosim engine settings of every flavour and the binary's flags for them.
_ENGINE_FLAGS = (
    ("block_size", "block-size"),
    ("num_gpu_blocks", "num-gpu-blocks"),
    ("max_num_seqs", "max-num-seqs"),
    ("tensor_parallel_size", "tensor-parallel-size"),
)
#: Each flavour's own settings and the flags for them. AISimulate's TensorRT-LLM engine runs
#: its vLLM-like scheduler under the no-evict admission rule: the pass budget and chunked
#: context are its vLLM flags.
_FLAVOUR_FLAGS = {
    "vllm": (
        ("max_num_batched_tokens", "max-num-batched-tokens"),
        ("enable_chunked_prefill", "chunked-prefill"),
        ("preemption_mode", "preemption-mode"),
    ),
    "trtllm": (
        ("max_num_tokens", "max-num-batched-tokens"),
        ("enable_chunked_context", "chunked-prefill"),
    ),
}
#: Engine settings checked rather than passed: the flavour (passed as --backend), the
#: data-parallel ranks, TensorRT-LLM's capacity scheduler, vLLM's scheduling the peer does not
#: model (``mocker_scheduling``), and CUDA graphs (they pad operator-table prices only; the
#: comparison times passes with the polynomial model).
_ENGINE_CHECKED = (
    "backend",
    "data_parallel_size",
    "capacity_scheduler",
    "async_scheduling",
    "scheduler_reserve_full_isl",
    "enforce_eager",
)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _engine_flags(role: RoleView, prefix: str) -> list[str]:
    """One role's engine and timing as the binary's flags, each as ``--{prefix}flag``."""
    timing = polynomial_timing(role, PEER)
    mocker_scheduling(role, PEER)
    e = role.engine
    if e.data_parallel_size != 1:
        raise ConfigError(
            f"{role.engine_path}.data_parallel_size: AISimulate spreads requests round robin "
            "over every data-parallel rank rather than by vLLM's DP load balancer; compare "
            f"with data_parallel_size 1, got {e.data_parallel_size}"
        )
    if e.backend == "trtllm" and e.capacity_scheduler != "guaranteed_no_evict":
        raise ConfigError(
            f"{role.engine_path}.capacity_scheduler: AISimulate's TensorRT-LLM engine models "
            f"guaranteed_no_evict only; got {e.capacity_scheduler}"
        )
    flags = _ENGINE_FLAGS + _FLAVOUR_FLAGS.get(e.backend, ())
    known = {name for name, _ in flags} | set(_ENGINE_CHECKED)
    for name, field in type(e).model_fields.items():
        value = getattr(e, name)
        if name not in known and value != field.default:
            raise ConfigError(
                f"{role.engine_path}.{name}: the comparison with AISimulate does not map this "
                f"setting; compare with its default {field.default!r}, got {value!r}"
            )
    # The engine flavour picks AISimulate's scheduler of the same name.
    values: list[tuple[str, Any]] = [("backend", e.backend)]
    values += [(flag, getattr(e, name)) for name, flag in flags]
    values += [
        ("speedup-ratio", timing.speedup_ratio),
        ("decode-speedup-ratio", timing.decode_speedup_ratio),
    ]
    return [
        arg
        for flag, value in values
        if value is not None
        for arg in (f"--{prefix}{flag}", _text(value))
    ]


def _offload_flags(config: SimConfig, view: Resolved, version: str) -> list[str]:
    """The offload tiers (every rank's) as the binary's flags: dynosim's G2 is AISimulate's
    host tier (its G1<->G2 link the host-to-device and device-to-host bandwidths), its G3 the
    G3 tier per worker or, with ``g3_shared``, one pool whose caps are the pool link's (no cap
    per worker, as dynosim has none). Refuses tiers the release cannot compare."""
    o, rates = config.offload, view.offload
    if rates is None:
        return []
    if not release(version).offload_tiers:
        raise ConfigError(
            f"offload.g2_blocks: AISimulate {version}'s offload tiers are another model (FIFO "
            "transfer lanes per rank, a latency to G3's first byte); compare without offload "
            f"tiers, or with --aisimulate-version {_TIERED}, got {o.g2_blocks}"
        )
    peer = f"{PEER} {version}"
    for name, value, want in (
        ("writes", o.writes, "flows"),  # its copies down take bandwidth
        ("in_flight", o.in_flight, "wait"),  # a lookup of a pending block is deferred
    ):
        if value != want:
            raise ConfigError(f"offload.{name}: {peer} models {want!r} only, got {value!r}")
    bytes_per_token = view.kv_transfer.bytes_per_token
    if bytes_per_token is None:
        raise ConfigError(
            "offload: the comparison sizes offload copies by kv_transfer.kv_bytes_per_token "
            "(or kv_shape); give it"
        )
    if bytes_per_token != int(bytes_per_token):
        raise ConfigError(
            f"kv_transfer.kv_bytes_per_token: {peer} sizes offload copies in whole bytes, got "
            f"{bytes_per_token}"
        )
    args = ["--kv-cache-bytes-per-token", str(int(bytes_per_token))]
    args += ["--host-blocks", str(o.g2_blocks), "--h2d-gbps", _text(rates.g1_g2_read_gbps)]
    args += ["--d2h-gbps", _text(rates.g1_g2_write_gbps)]
    if o.g3_blocks is None:
        return args
    if config.cluster.mode != "aggregated":
        raise ConfigError(
            f"offload.g3_blocks: {peer} models G3 offload for aggregated workers only; compare "
            f"without G3 in disaggregation, got {o.g3_blocks}"
        )
    if o.g3_duplex != "full":
        raise ConfigError(
            f"offload.g3_duplex: {peer}'s G3 reads and writes have a capacity each; compare with "
            f"g3_duplex 'full', got {o.g3_duplex!r}"
        )
    read, write = rates.g2_g3_read_gbps, rates.g2_g3_write_gbps
    args += ["--g3-blocks", str(o.g3_blocks)]
    if o.g3_shared:
        args += ["--g3-scope", "cluster_shared", "--g3-read-gbps", "0", "--g3-write-gbps", "0"]
        args += ["--g3-shared-read-gbps", _text(read), "--g3-shared-write-gbps", _text(write)]
    else:
        args += ["--g3-scope", "worker_local"]
        args += ["--g3-read-gbps", _text(read), "--g3-write-gbps", _text(write)]
    return args


def aisimulate_args(
    config: SimConfig, trace_block_size: int, version: str = AISIMULATE_VERSION
) -> list[str]:
    """The ``dynosim-aisim`` flags (after the trace) that replay like ``config`` on
    aisimulate-core ``version``.

    ``trace_block_size`` is the number of prompt tokens per trace hash id (512 in the public
    Mooncake traces). Raises ConfigError for settings that release cannot model.
    """
    links = release(version).link_model
    round_robin(
        config,
        "AISimulate's published replay places requests round robin only (another "
        "router needs a custom composition)",
    )
    c = config.cluster
    view = resolve(config)
    args = [
        "--trace-block-size",
        str(trace_block_size),
        "--arrival-speedup",
        _text(c.arrival_speedup_ratio),
    ]
    if c.concurrency is not None:
        args += ["--concurrency", str(c.concurrency)]
    args += _offload_flags(config, view, version)
    if c.mode == "aggregated":
        args += ["--mode", "aggregated", "--workers", str(c.num_workers)]
        return args + _engine_flags(view.roles["aggregated"], "")
    args += ["--mode", "disaggregated"]
    args += ["--prefill-workers", str(c.num_prefill_workers)]
    args += ["--decode-workers", str(c.num_decode_workers)]
    transfer = peer_transfer(view, f"{PEER} {version}", links)
    if transfer is not None:
        args += ["--kv-bytes-per-token", str(transfer.bytes_per_token)]
        if links == "line_rate":
            args += ["--kv-bandwidth-gbps", _text(transfer.gbps)]
        else:
            args += ["--kv-bandwidth-gbps", _text(transfer.send_gbps)]
            args += ["--kv-recv-bandwidth-gbps", _text(transfer.recv_gbps)]
        args += ["--kv-sizing", transfer.sizing]
    for role in ("prefill", "decode"):
        args += _engine_flags(view.roles[role], f"{role}.")
    return args


class AisimulateReplay:
    """AISimulate's replay (aisimulate-core ``version``) of one Mooncake JSONL trace under one
    dynosim configuration, checked, built and ready to run (as often as wanted).

    ``trace_block_size`` is the number of prompt tokens per trace hash id; ``timeout_s`` bounds
    each run (s). Construction fails early: WorkloadError for a trace AISimulate cannot read,
    ConfigError for an unknown version or settings it cannot model, MissingExtraError when the
    binary can be neither found nor built (no cargo), DynosimError when its build fails.
    ``announce``, if given, is called with a line before a build starts (it can take minutes)
    and one with its time when it ends.
    """

    def __init__(
        self,
        trace: str | Path,
        config: SimConfig,
        trace_block_size: int,
        timeout_s: float = RUN_TIMEOUT_S,
        announce: Callable[[str], None] | None = None,
        version: str = AISIMULATE_VERSION,
    ) -> None:
        self.trace = mooncake_trace(trace, PEER)
        self.version = version
        self.args = aisimulate_args(config, trace_block_size, version)
        self.timeout_s = timeout_s
        self.binary = aisimulate_binary(version, announce)

    def command(self) -> list[str]:
        """The command line of one run."""
        return [str(self.binary), str(self.trace), *self.args]

    def run(self) -> PeerRun:
        """Replay once in a child process. Wall and CPU time (ms) are the child's; trace load,
        replay and peak memory (MiB, None where the child cannot read it) its own measurement.
        A failed or timed-out run raises DynosimError with AISimulate's message."""
        try:
            done = run_program(self.command(), self.timeout_s)
        except subprocess.TimeoutExpired:
            raise DynosimError(
                f"{self.trace}: AISimulate's replay did not finish within {self.timeout_s:g} s "
                "and was stopped (its SGLang engine can spin without progress on a request "
                "that never fits its cache)"
            ) from None
        if done.returncode != 0:
            raise DynosimError(
                f"dynosim-aisim exited with status {done.returncode}: {done.stderr.strip()}"
            )
        try:
            out = json.loads(done.stdout)
            summary, wall, built_on = out["summary"], out["wall"], out["version"]
        except (ValueError, KeyError, TypeError) as e:
            raise DynosimError(
                f"dynosim-aisim printed no summary ({e}): {done.stdout[:200]!r}"
            ) from None
        if built_on != self.version:
            raise DynosimError(
                f"{self.binary} is built on aisimulate-core {built_on}, not {self.version} "
                f"(${BINARY_ENV} names one binary for one release)"
            )
        return PeerRun(
            summary=summary,
            wall_ms=done.wall_ms,
            cpu_ms=done.cpu_ms,
            simulation_ms=float(wall["replay_ms"]),
            trace_load_ms=float(wall["trace_load_ms"]),
            peak_rss_mib=out.get("peak_rss_mib"),
        )


__all__ = [
    "AISIMULATE_VERSION",
    "RELEASES",
    "RUN_TIMEOUT_S",
    "AisimulateReplay",
    "Release",
    "aisimulate_args",
    "release",
]
