"""Typed simulation settings: cluster, engine, timing, KV transfers, offload tiers, SLA, report.

Pure data. The defaults are not written here: they come from the Rust core
(``_core.default_config_json``), the one place that holds them. Value ranges are checked by the
core too, so Python and Rust never disagree on what is valid; pydantic checks types and shape,
and gives the JSON schema.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from dynosim import _core
from dynosim._defaults import (
    DEFAULT_NUM_GPU_BLOCKS,
    DEFAULTS,
    ENGINE_DEFAULTS,
    Backend,
    FirstToken,
    G3Duplex,
    InFlight,
    LinkModel,
    Mode,
    OffloadWrites,
    Router,
    TransferSizing,
    flavour_setting,
)
from dynosim._lazy import is_loaded_instance
from dynosim._shown import shown
from dynosim._validation import StrictModel
from dynosim.errors import ConfigError

_AIC_DEFAULTS: dict[str, Any] = json.loads(_core.aic_timing_defaults_json())
#: The core's upper bounds of sizes (``max_workers``, ``max_parallel``, ...): what a replay can
#: hold. The core checks them; other models that map onto a configuration read them here.
LIMITS: dict[str, Any] = json.loads(_core.config_limits_json())

#: The ``model`` tags of the timing sections (left out of error paths).
TIMING_MODELS = frozenset({"polynomial", "fixed", "table", "op_tables", "aic"})


class _Settings(StrictModel):
    """A configuration section: frozen, strict about unknown keys, raising ConfigError."""

    # inf/NaN would reach the core as JSON null (an unset value): refuse them here.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    _tags = TIMING_MODELS


def _default(section: str, key: str, description: str) -> Any:
    """A field whose default is the core's."""
    return Field(DEFAULTS[section][key], description=description)


class ClusterConfig(_Settings):
    """The cluster's workers and how the trace is played."""

    mode: Mode = _default(
        "cluster",
        "mode",
        "aggregated: every worker prefills and decodes; disaggregated: prefill workers hand "
        "the KV to decode workers.",
    )
    num_workers: int = _default("cluster", "num_workers", "Workers in aggregated mode.")
    num_prefill_workers: int = _default(
        "cluster", "num_prefill_workers", "Prefill workers (disaggregated)."
    )
    num_decode_workers: int = _default(
        "cluster", "num_decode_workers", "Decode workers (disaggregated)."
    )
    arrival_speedup_ratio: float = _default(
        "cluster", "arrival_speedup_ratio", "Divides every inter-arrival gap of the trace."
    )
    router: Router = _default(
        "cluster",
        "router",
        "How requests are spread over workers: in turn, at random (seeded), or kv_aware: "
        "lowest overlap_weight x prompt blocks to prefill + active blocks.",
    )
    router_seed: int = _default("cluster", "router_seed", "Random router seed.")
    overlap_weight: float = _default(
        "cluster", "overlap_weight", "kv_aware: weight of blocks to prefill against active blocks."
    )
    concurrency: int | None = _default(
        "cluster",
        "concurrency",
        "Closed loop: at most this many sessions in flight (a request without a session is a "
        "session of one turn); trace timestamps of session starts are ignored.",
    )


def _flavour(name: str, description: str) -> Any:
    """Optional setting ``name`` of some flavours (unset: the flavour's default)."""
    defaults = ", ".join(f"{b} {d[name]!r}" for b, d in ENGINE_DEFAULTS.items() if name in d)
    return Field(None, description=f"{description} Default: {defaults}.")


class EngineConfig(_Settings):
    """One worker's engine: the serving engine it models (``backend``), its KV cache, limits,
    layout, and its flavour's scheduling settings. A flavour setting left unset takes the
    flavour's default (``ENGINE_DEFAULTS``); one of another flavour is an error."""

    backend: Backend = _default(
        "engine",
        "backend",
        "The serving engine modelled: vllm, sglang or trtllm (and the engine an aic timing "
        "section prices).",
    )
    block_size: int | None = _flavour("block_size", "Tokens per KV block.")
    num_gpu_blocks: int | None = Field(
        None,
        description="KV blocks in one rank's GPU cache; unset: derived from the model and GPU "
        "when the role's timing names them (an aic section), as the engine would allocate "
        f"them from gpu_memory_utilization, else {DEFAULT_NUM_GPU_BLOCKS:,} "
        "(uncalibrated).",
    )
    gpu_memory_utilization: float = _default(
        "engine",
        "gpu_memory_utilization",
        "Share of a GPU's memory the engine takes for weights, activations and KV cache "
        "(vLLM's gpu_memory_utilization; SGLang's mem_fraction_static, TensorRT-LLM's "
        "free_gpu_memory_fraction as AIC reads them); unset num_gpu_blocks are sized from it.",
    )
    max_num_seqs: int = _default(
        "engine", "max_num_seqs", "Most requests running at once on one rank."
    )
    tensor_parallel_size: int = _default(
        "engine",
        "tensor_parallel_size",
        "GPUs one rank spans (TP); part of the timing key and the GPU count.",
    )
    data_parallel_size: int = _default(
        "engine",
        "data_parallel_size",
        "Ranks per worker, each with its own scheduler and num_gpu_blocks; a grouped pass "
        "ends when the slowest rank ends. GPUs per worker = TP x DP.",
    )
    max_num_batched_tokens: int | None = _flavour(
        "max_num_batched_tokens", "vLLM: token budget of one pass."
    )
    enable_chunked_prefill: bool | None = _flavour(
        "enable_chunked_prefill", "vLLM: split long prompts across passes."
    )
    preemption_mode: Literal["lifo", "fifo"] | None = _flavour(
        "preemption_mode",
        "vLLM: which running request a KV shortage preempts, among those "
        "admitted after the one needing the block: the newest (lifo) or the oldest (fifo).",
    )
    async_scheduling: bool | None = _flavour(
        "async_scheduling",
        "vLLM: form each pass while the one before runs (vLLM's default): a request reaching "
        "a busy rank waits for the pass already formed.",
    )
    scheduler_reserve_full_isl: bool | None = _flavour(
        "scheduler_reserve_full_isl",
        "vLLM 0.19: admit a waiting request only if blocks for its whole prompt are free.",
    )
    enforce_eager: bool | None = _flavour(
        "enforce_eager",
        "vLLM: no CUDA graphs; with them (the default) an operator-table price pads a pass "
        "to its captured size.",
    )
    max_num_tokens: int | None = _flavour(
        "max_num_tokens",
        "TensorRT-LLM: token budget of one pass, generation tokens counted first.",
    )
    capacity_scheduler: Literal["guaranteed_no_evict", "max_utilization"] | None = _flavour(
        "capacity_scheduler",
        "TensorRT-LLM: admit only requests whose prompt and maximum output "
        "fit (guaranteed_no_evict), or while the next pass fits, pausing the latest-started "
        "request when it does not (max_utilization).",
    )
    enable_chunked_context: bool | None = _flavour(
        "enable_chunked_context",
        "TensorRT-LLM: let a context larger than the remaining budget "
        "run in chunks; off, a whole context must fit one pass's budget.",
    )
    page_size: int | None = _flavour(
        "page_size", "SGLang: tokens per page of the radix prefix cache."
    )
    chunked_prefill_size: int | None = _flavour(
        "chunked_prefill_size", "SGLang: most prompt tokens of one request per pass."
    )
    max_prefill_tokens: int | None = _flavour(
        "max_prefill_tokens", "SGLang: most prompt tokens of one prefill batch."
    )
    schedule_policy: Literal["fcfs", "lpm"] | None = _flavour(
        "schedule_policy",
        "SGLang: waiting-queue order, arrival (fcfs) or longest cached prefix (lpm).",
    )
    schedule_conservativeness: float | None = _flavour(
        "schedule_conservativeness",
        "SGLang: scales the reservation for running requests' future tokens.",
    )
    init_new_token_ratio: float | None = _flavour(
        "init_new_token_ratio", "SGLang: the new-token ratio's start (unscaled)."
    )
    min_new_token_ratio_factor: float | None = _flavour(
        "min_new_token_ratio_factor",
        "SGLang: the ratio's floor as a share of its start.",
    )
    new_token_ratio_decay_steps: int | None = _flavour(
        "new_token_ratio_decay_steps",
        "SGLang: decode steps from the ratio's start to its floor.",
    )
    clip_max_new_tokens: int | None = _flavour(
        "clip_max_new_tokens",
        "SGLang: cap on the remaining output a running request reserves.",
    )

    def setting(self, name: str) -> Any:
        """The value of setting ``name``: as set, else the flavour's default."""
        return flavour_setting(self.backend, name, getattr(self, name))

    @property
    def pass_token_budget(self) -> int:
        """Token budget of one pass (vLLM's max_num_batched_tokens, TensorRT-LLM's
        max_num_tokens, SGLang's max_prefill_tokens), as the core reads it."""
        return _core.engine_pass_token_budget(self.model_dump_json())


class PolynomialTiming(_Settings):
    """Dynamo mocker's uncalibrated step-time polynomial (ms)."""

    model: Literal["polynomial"] = "polynomial"
    speedup_ratio: float = _default("timing", "speedup_ratio", "Divides every step time.")
    decode_speedup_ratio: float = _default(
        "timing", "decode_speedup_ratio", "Further divides decode step times."
    )


class FixedTiming(_Settings):
    """Constant step times, for hand-checkable cases."""

    model: Literal["fixed"] = "fixed"
    prefill_ms: float = Field(description="Cost of a pass that prefills anything (ms).")
    decode_ms: float = Field(description="Cost of a pass that decodes anything (ms).")


def _as_lists(value: Any) -> Any:
    return value.tolist() if is_loaded_instance(value, "numpy", "ndarray") else value


#: The arrays a timing-table .npz file holds, named like TableTiming's fields.
TABLE_ARRAYS = (
    "prefill_tokens",
    "prefill_batch",
    "prefill_ms",
    "decode_batch",
    "decode_context",
    "decode_ms",
)


class TableTiming(_Settings):
    """Measured step times on grids, interpolated bilinearly and extrapolated linearly past the
    edges (never below 0 ms). Axes are strictly increasing; numpy arrays are accepted."""

    model: Literal["table"] = "table"
    prefill_tokens: list[float] = Field(
        description="Axis: uncached prompt tokens prefilled in one pass."
    )
    prefill_batch: list[float] = Field(description="Axis: requests prefilling in the pass.")
    prefill_ms: list[list[float]] = Field(description="Pass latency (ms), [tokens][batch].")
    decode_batch: list[float] = Field(description="Axis: requests decoding in one pass.")
    decode_context: list[float] = Field(
        description="Axis: mean KV tokens per decoding request (this step's token included)."
    )
    decode_ms: list[list[float]] = Field(description="Step latency (ms), [batch][context].")

    @field_validator(*TABLE_ARRAYS, mode="before")
    @classmethod
    def _arrays_to_lists(cls, value: Any) -> Any:
        return _as_lists(value)


#: The arrays of operator tables, named like OpTables' fields.
OP_TABLE_ARRAYS = (
    "tokens",
    "non_attention_ms",
    "chunk_batch",
    "chunk_tokens",
    "chunk_prefix",
    "context_attention_ms",
    "decode_batch",
    "decode_context",
    "decode_attention_ms",
)


class MixedDecodeAttention(_Settings):
    """The attention of the decode rows of a pass that also prefills (ms), over the decode
    rows, their mean context and the pass's prefill tokens; numpy arrays are accepted."""

    batch: list[float] = Field(description="Axis: decode rows in the pass.")
    context: list[float] = Field(description="Axis: their mean context (this token included).")
    prefill_tokens: list[float] = Field(description="Axis: prefill tokens in the pass.")
    ms: list[list[list[float]]] = Field(
        description="Their attention (ms), [batch][context][prefill_tokens]."
    )

    @field_validator("batch", "context", "prefill_tokens", "ms", mode="before")
    @classmethod
    def _arrays_to_lists(cls, value: Any) -> Any:
        return _as_lists(value)


class OpTables(_Settings):
    """Step times assembled from operator groups, as AIConfigurator prices a pass that mixes
    prefill chunks and decodes (what an ``aic`` section becomes): every operator but attention
    over all the tokens of the pass, plus the attention of the prefill chunks over the context
    each follows, plus the attention of the decodes. Interpolated multilinearly, extrapolated
    linearly; numpy arrays are accepted."""

    model: Literal["op_tables"] = "op_tables"
    tokens: list[float] = Field(
        description="Axis: tokens a pass computes (chunk tokens plus one per decode)."
    )
    non_attention_ms: list[float] = Field(
        description="Every operator but attention over that many tokens (ms)."
    )
    non_attention_parts: dict[str, list[float]] = Field(
        default_factory=dict,
        description="non_attention_ms split by family of operations (gemm, moe, "
        "communication, elementwise), each over the tokens axis (ms), summing to it: what "
        "Report.breakdown shows; empty: one non_attention part.",
    )
    chunk_batch: list[float] = Field(description="Axis: prefill chunks in the pass.")
    chunk_tokens: list[float] = Field(description="Axis: mean new tokens per chunk.")
    chunk_prefix: list[float] = Field(
        description="Axis: mean earlier tokens per chunk (cached prefix or earlier chunks)."
    )
    context_attention_ms: list[list[list[float]]] = Field(
        description="Prefill attention of that many equal chunks (ms), [batch][tokens][prefix]."
    )
    decode_batch: list[float] = Field(description="Axis: requests decoding in the pass.")
    decode_context: list[float] = Field(
        description="Axis: mean context per decoding request (this step's token included)."
    )
    decode_attention_ms: list[list[float]] = Field(
        description="Decode attention (ms), [batch][context]."
    )
    mixed_decode_factor: float = Field(
        1.0,
        description="Decode rows in a pass that also prefills cost this many times their "
        "attention in a pass of decodes only (1: priced as decodes).",
    )
    mixed_decode_attention: MixedDecodeAttention | None = Field(
        None,
        description="Measured instead of the factor: the decode rows' attention in a mixed pass.",
    )

    @field_validator(*OP_TABLE_ARRAYS, mode="before")
    @classmethod
    def _arrays_to_lists(cls, value: Any) -> Any:
        return _as_lists(value)

    @field_validator("non_attention_parts", mode="before")
    @classmethod
    def _part_arrays_to_lists(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: _as_lists(v) for k, v in value.items()}
        return value


class AicTiming(_Settings):
    """Step times from AIConfigurator's performance database, built into ``table`` timing when
    a replay starts (once, then read from the on-disk cache; needs ``pip install
    'dynosim[aic]'``)."""

    model: Literal["aic"] = "aic"
    model_name: str = Field(description="AIConfigurator model name, e.g. Qwen/Qwen3-32B.")
    system: str = Field(description="AIConfigurator system name, e.g. h200_sxm.")
    backend: Backend | None = Field(
        _AIC_DEFAULTS["backend"],
        description="Serving engine whose measurements price the passes; unset: the backend "
        "of the engine this section times (set, it must be that one).",
    )
    backend_version: str | None = Field(
        _AIC_DEFAULTS["backend_version"],
        description="Backend version in AIC's database; unset: AIC's current one for the "
        "system and backend ('current', 'next' and 'previous' are accepted too).",
    )
    tp: int = Field(
        _AIC_DEFAULTS["tp"],
        description="Tensor-parallel GPUs of one rank: the tensor_parallel_size of the engine "
        "this section times.",
    )
    dp: int = Field(
        _AIC_DEFAULTS["dp"],
        description="Data-parallel ranks of one worker: the data_parallel_size of the engine "
        "this section times (attention-DP ranks sharing the experts of a MoE model).",
    )
    ep: int = Field(
        _AIC_DEFAULTS["ep"],
        description="Expert-parallel GPUs (mixture-of-experts models only): the tp x dp GPUs "
        "of a worker split the experts ep ways.",
    )
    mixed_decode_profile: str | None = Field(
        _AIC_DEFAULTS["mixed_decode_profile"],
        description="An .npz profile of the attention of decode rows in passes that also "
        "prefill, measured on the system's GPU (batch x context x prefill tokens x heads, one "
        "layer, ms): prices them instead of the backend's rule.",
    )


TimingConfig = Annotated[
    PolynomialTiming | FixedTiming | TableTiming | OpTables | AicTiming,
    Field(discriminator="model"),
]


class RoleConfig(_Settings):
    """One role's own settings in disaggregated mode; each given section replaces the shared
    ``engine`` / ``timing`` section as a whole for that role."""

    engine: EngineConfig | None = _default("prefill", "engine", "The role's own engine.")
    timing: TimingConfig | None = _default("prefill", "timing", "The role's own timing.")


class KvShape(_Settings):
    """A model's KV geometry: bytes per token = layers x 2 x kv heads x head dim x dtype bytes
    (a latent: layers x width x dtype bytes)."""

    num_layers: int
    num_kv_heads: int = Field(description="KV heads per layer (1 for a latent).")
    head_dim: int = Field(description="Values per head (the latent width for a latent).")
    dtype_bytes: int = Field(description="Bytes per KV element (2 for bf16, 1 for fp8).")
    latent: bool = Field(
        False,
        description="A DeepSeek-style MLA latent: one vector per layer and token, no separate "
        "K and V, kept whole by every tensor-parallel GPU.",
    )

    def bytes_per_token(self, tp: int = 1) -> int:
        """KV bytes of one token on one GPU of a ``tp``-way tensor-parallel rank (``tp`` 1: the
        whole model's, what a transfer moves); computed by the core, which checks the shape
        and ``tp`` first (ConfigError)."""
        if isinstance(tp, bool) or not isinstance(tp, int):
            raise ConfigError(f"tp: expected an integer, got {shown(tp)}")
        if not -(2**63) <= tp < 2**63:  # past any limit, and past what the core reads
            raise ConfigError(f"tp: must be between 1 and {LIMITS['max_parallel']:,}, got {tp}")
        return _core.kv_shape_bytes_per_token(self.model_dump_json(), tp)


class KvTransferConfig(_Settings):
    """KV transfers from prefill to decode workers (disaggregated mode)."""

    bandwidth_gbps: float | None = _default(
        "kv_transfer",
        "bandwidth_gbps",
        "Each prefill rank's send link (GB/s = 1e9 B/s); unset: instant.",
    )
    decode_bandwidth_gbps: float | None = _default(
        "kv_transfer",
        "decode_bandwidth_gbps",
        "Each decode rank's receive link (GB/s); unset: bandwidth_gbps.",
    )
    link_model: LinkModel | None = _default(
        "kv_transfer",
        "link_model",
        "max_min (default with a bandwidth): transfers share links max-min fairly; "
        "line_rate: every transfer at full bandwidth (Dynamo's model).",
    )
    sizing: TransferSizing | None = _default(
        "kv_transfer",
        "sizing",
        "Tokens a transfer moves: the full prompt (default) or only the blocks the decode "
        "worker does not cache.",
    )
    first_token: FirstToken | None = _default(
        "kv_transfer",
        "first_token",
        "When a request's first token counts: when its KV lands on the decode worker "
        "(default), or at the end of the decode worker's first pass with it, decode workers "
        "reserving blocks only between passes (Dynamo's mocker).",
    )
    kv_bytes_per_token: float | None = _default(
        "kv_transfer", "kv_bytes_per_token", "KV bytes of one token (whole model)."
    )
    kv_shape: KvShape | None = _default("kv_transfer", "kv_shape", "Or the model's KV geometry.")


class SlaConfig(_Settings):
    """Goodput thresholds; an unset threshold is not checked."""

    ttft_ms: float | None = _default("sla", "ttft_ms", "Time to first token limit (ms).")
    itl_ms: float | None = _default("sla", "itl_ms", "Limit on a request's mean ITL (TPOT, ms).")
    e2e_ms: float | None = _default("sla", "e2e_ms", "End-to-end latency limit (ms).")


class ReportConfig(_Settings):
    """What the report samples besides per-request metrics."""

    sample_interval_ms: float = _default(
        "report", "sample_interval_ms", "Time-series interval (ms)."
    )
    explain: bool = _default(
        "report",
        "explain",
        "Keep where the time went (Report.breakdown): each rank's passes by kind with the "
        "parts of their priced time, each request's time to first token by stage; about 4 "
        "bytes per pass.",
    )


class OffloadConfig(_Settings):
    """KV offload tiers: G2 host memory per rank, G3 disk per rank or one pool for the cluster.
    Needs ``kv_transfer.kv_bytes_per_token`` (or ``kv_shape``) to size block moves."""

    g2_blocks: int | None = _default(
        "offload", "g2_blocks", "G2 (host memory) blocks per rank; unset: no offload tiers."
    )
    g3_blocks: int | None = _default(
        "offload",
        "g3_blocks",
        "G3 (disk) blocks per rank, or of the one pool with g3_shared; needs G2.",
    )
    g3_shared: bool = _default(
        "offload", "g3_shared", "One G3 pool, and its G3->G2 link, shared by the whole cluster."
    )
    g1_g2_gbps: float = _default(
        "offload",
        "g1_g2_gbps",
        "Each rank's G1<->G2 (PCIe) link, per direction: it is full duplex (GB/s = 1e9 B/s). "
        "Onboards of G2 hits and offloads of G1 evictions run on it.",
    )
    g2_g3_gbps: float = _default(
        "offload",
        "g2_g3_gbps",
        "Each rank's (or the shared pool's) G2<->G3 link (GB/s): with g3_duplex half the one "
        "capacity offloads and onboards share max-min fairly, with full each direction's.",
    )
    g1_g2_read_gbps: float | None = _default(
        "offload", "g1_g2_read_gbps", "G2->G1 (onboard) rate, GB/s; unset: g1_g2_gbps."
    )
    g1_g2_write_gbps: float | None = _default(
        "offload", "g1_g2_write_gbps", "G1->G2 (offload) rate, GB/s; unset: g1_g2_gbps."
    )
    g2_g3_read_gbps: float | None = _default(
        "offload",
        "g2_g3_read_gbps",
        "G3->G2 (onboard) rate, GB/s: with full duplex its link's capacity, with half a cap on "
        "each read within the shared capacity; unset: g2_g3_gbps.",
    )
    g2_g3_write_gbps: float | None = _default(
        "offload",
        "g2_g3_write_gbps",
        "G2->G3 (offload) rate, GB/s, as g2_g3_read_gbps is for reads; unset: g2_g3_gbps.",
    )
    g3_duplex: G3Duplex = _default(
        "offload",
        "g3_duplex",
        "half: a G3 link's reads and writes share one capacity (a storage service); full: one "
        "capacity per direction.",
    )
    in_flight: InFlight = _default(
        "offload",
        "in_flight",
        "A request finding prompt blocks whose copy down is still in flight: wait for it and "
        "onboard them, or recompute them (a tier offers a block once its copy has landed).",
    )
    writes: OffloadWrites = _default(
        "offload",
        "writes",
        "flows: an offload is a copy on its tier link and a block is a hit below once it lands; "
        "free: copies take no time or bandwidth (for comparison).",
    )


class SimConfig(_Settings):
    """Everything a replay needs besides the workload."""

    cluster: ClusterConfig = ClusterConfig()
    engine: EngineConfig = EngineConfig()
    timing: TimingConfig = PolynomialTiming()
    prefill: RoleConfig = RoleConfig()
    decode: RoleConfig = RoleConfig()
    kv_transfer: KvTransferConfig = KvTransferConfig()
    sla: SlaConfig = SlaConfig()
    report: ReportConfig = ReportConfig()
    offload: OffloadConfig = OffloadConfig()

    @model_validator(mode="after")
    def _check_ranges(self) -> SimConfig:
        # The core owns the value rules; it raises ConfigError naming the field and value.
        _core.normalize_config_json(self.model_dump_json())
        return self


__all__ = [
    "DEFAULT_NUM_GPU_BLOCKS",
    "LIMITS",
    "OP_TABLE_ARRAYS",
    "TABLE_ARRAYS",
    "TIMING_MODELS",
    "AicTiming",
    "ClusterConfig",
    "EngineConfig",
    "FixedTiming",
    "KvShape",
    "KvTransferConfig",
    "MixedDecodeAttention",
    "OffloadConfig",
    "OpTables",
    "PolynomialTiming",
    "ReportConfig",
    "RoleConfig",
    "SimConfig",
    "SlaConfig",
    "TableTiming",
    "TimingConfig",
]
