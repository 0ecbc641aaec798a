"""What dynosim's comparisons with other simulators share: the model they have in common with
dynosim and the summary they report.

Dynamo's offline replay (its mocker) and AISimulate's replay descend from the same model: the
polynomial step time, KV transfers (at line rate, or over links shared max-min fairly) with the
first token counted after the decode worker's first pass, round-robin placement of Mooncake
trace rows, and one flat summary (``mean_ttft_ms``, ``p99_e2e_latency_ms``, ...). The checks
here refuse, with a :class:`~dynosim.errors.ConfigError` naming the setting, what neither
models; each peer's module adds its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynosim.config import PolynomialTiming, Resolved, RoleView, SimConfig
from dynosim.errors import ConfigError, WorkloadError
from dynosim.report import Report


@dataclass(frozen=True)
class PeerRun:
    """One replay by another simulator: its summary (its keys, times in ms) and what it cost.

    ``wall_ms`` and ``cpu_ms`` cover the whole run (the trace load included); ``simulation_ms``
    is the replay without the trace load, as the peer measures it; ``trace_load_ms`` is the
    trace load when the peer reports it apart (None: inside the replay call);
    ``peak_rss_mib`` is the run's peak resident memory (MiB), when measured.
    """

    summary: dict[str, Any]
    wall_ms: float
    cpu_ms: float
    simulation_ms: float
    trace_load_ms: float | None
    peak_rss_mib: float | None


def mooncake_trace(trace: str | Path, peer: str) -> Path:
    """``trace`` as a Path; WorkloadError unless it is a Mooncake JSONL file (all a peer
    reads)."""
    path = Path(trace)
    if path.suffix.lower() not in (".jsonl", ".json"):
        raise WorkloadError(
            f"{path}: {peer}'s replay reads Mooncake JSONL traces only, not {path.suffix!r} files"
        )
    return path


def round_robin(config: SimConfig, why: str) -> None:
    """Refuse a router other than round robin; ``why`` says why the peer cannot compare it."""
    if config.cluster.router != "round_robin":
        raise ConfigError(f"cluster.router: {why}, got {config.cluster.router!r}")


def polynomial_timing(role: RoleView, peer: str) -> PolynomialTiming:
    """The role's timing, which must be the polynomial model (the only one both model)."""
    timing = role.timing
    if not isinstance(timing, PolynomialTiming):
        raise ConfigError(
            f"{role.timing_path}.model: {peer}'s replay times passes with the polynomial model "
            f"only, got {timing.model!r}"
        )
    return timing


#: What a peer of each link model does with KV transfers, as its refusals say.
LINK_MODELS = {
    "line_rate": "moves every transfer at full bandwidth",
    "max_min": "shares each prefill rank's send link and each decode rank's receive link "
    "max-min fairly",
}


#: vLLM settings the peers' vLLM engines do not model, with what a comparison needs them at.
_MOCKER_VLLM = {
    "async_scheduling": (False, "forms each pass when the one before ends"),
    "scheduler_reserve_full_isl": (False, "admits a request once its first chunk fits"),
}


def mocker_scheduling(role: RoleView, peer: str) -> None:
    """Refuse a vLLM engine setting a peer's vLLM engine does not model: its async scheduling
    and vLLM 0.19's whole-prompt admission gate (``offline_replay_bench --compare`` turns both
    off)."""
    e = role.engine
    if e.backend != "vllm":
        return
    for name, (value, what) in _MOCKER_VLLM.items():
        if e.setting(name) != value:
            raise ConfigError(
                f"{role.engine_path}.{name}: {peer}'s vLLM engine {what}; compare with "
                f"{name} {value}, got {e.setting(name)}"
            )


@dataclass(frozen=True)
class PeerTransfer:
    """KV transfers as a peer times them: the tokens each moves (``sizing``) x
    ``bytes_per_token`` over the source's send link (``send_gbps``) and the destination's
    receive link (``recv_gbps``), GB/s = 1e9 B/s."""

    bytes_per_token: int
    send_gbps: float
    recv_gbps: float
    sizing: str

    @property
    def gbps(self) -> float:
        """At line rate a transfer runs at the slower of its two ends (as in dynosim)."""
        return min(self.send_gbps, self.recv_gbps)


def peer_transfer(view: Resolved, peer: str, link_model: str = "line_rate") -> PeerTransfer | None:
    """The disaggregated cluster's KV transfers as a peer whose links follow ``link_model``
    (a key of LINK_MODELS) times them (None: instant in both).

    Refuses a first token counted at the KV's arrival (a peer counts it after the decode
    worker's first pass), another link model than the peer's, and a fractional number of bytes
    per token.
    """
    kv = view.kv_transfer
    if kv.first_token != "first_decode_pass":
        raise ConfigError(
            f"kv_transfer.first_token: {peer} counts a first token after the decode worker's "
            f"first pass; compare with first_token 'first_decode_pass', got {kv.first_token!r}"
        )
    if kv.send_gbps is None or kv.recv_gbps is None:
        return None
    if kv.link_model != link_model:
        raise ConfigError(
            f"kv_transfer.link_model: {peer} {LINK_MODELS[link_model]}; compare with "
            f"link_model {link_model!r}, got {kv.link_model!r}"
        )
    value = kv.bytes_per_token
    if value is None:
        raise ConfigError(
            "kv_transfer: a bandwidth needs kv_bytes_per_token or kv_shape to size transfers"
        )
    if value != int(value):
        raise ConfigError(
            f"kv_transfer.kv_bytes_per_token: {peer} takes a whole number of bytes, got {value}"
        )
    return PeerTransfer(
        bytes_per_token=int(value), send_gbps=kv.send_gbps, recv_gbps=kv.recv_gbps, sizing=kv.sizing
    )


#: Rows of the side-by-side table: label, dynosim summary path, the peers' summary key. The
#: peers' percentiles take the nearest rank (ITL: a DDSketch of 0.1 % relative accuracy) where
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
    # Both count prompt tokens found cached at a request's first admission; the peers' plain
    # prefix_cache_reused_ratio also counts re-admissions after preemption.
    ("prefix reuse ratio", ("prefix_reuse_ratio",), "first_admission_prefix_cache_reused_ratio"),
)


def relative_difference(ours: float | None, theirs: float | None) -> float | None:
    """(ours - theirs) / theirs, or None when either is missing or theirs is 0."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return (ours - theirs) / theirs


def metric_rows(report: Report, summary: dict[str, Any]) -> list[tuple[str, Any, Any, Any]]:
    """(label, dynosim value, the peer's value, relative difference) for every row of METRICS;
    ``summary`` is the peer's (``PeerRun.summary``)."""
    rows = []
    for label, path, key in METRICS:
        ours: Any = report.summary
        for part in path:
            ours = ours[part]
        theirs = summary.get(key)
        rows.append((label, ours, theirs, relative_difference(ours, theirs)))
    return rows


__all__ = [
    "LINK_MODELS",
    "METRICS",
    "PeerRun",
    "PeerTransfer",
    "metric_rows",
    "mooncake_trace",
    "peer_transfer",
    "polynomial_timing",
    "relative_difference",
    "round_robin",
]
