"""Typed simulation settings: cluster, engine, timing, SLA and report options.

The defaults are not written here: they come from the Rust core (``_core.default_config_json``),
the one place that holds them. Value ranges are checked by the core too, so Python and Rust never
disagree on what is valid; pydantic checks types and shape, and gives the JSON schema.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import numpy as np
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from dynosim import _core
from dynosim.errors import ConfigError

_DEFAULTS: dict[str, Any] = json.loads(_core.default_config_json())
_M = TypeVar("_M", bound=BaseModel)


class _FieldErrors(ConfigError):
    """A ConfigError that keeps its problems as (dotted path, message) pairs, so an enclosing
    model can prefix the paths when a nested model fails."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{path}: {msg}" if path else msg for path, msg in problems))


def _problems(err: ValidationError) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"])
        cause = e.get("ctx", {}).get("error")
        if isinstance(cause, _FieldErrors):  # a nested model's own report
            out += [(".".join(filter(None, (path, p))), m) for p, m in cause.problems]
        elif isinstance(cause, ConfigError):  # a value rule of the core: names its field
            out.append(("", str(cause)))
        else:
            got = f" (got {e['input']!r})" if e["type"] != "missing" else ""
            out.append((path, f"{e['msg']}{got}"))
    return out


class _Settings(BaseModel):
    """Frozen, strict about unknown keys, and raising ConfigError instead of ValidationError."""

    # inf/NaN would reach the core as JSON null (an unset value): refuse them here.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise _FieldErrors(_problems(e)) from None

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any):  # type: ignore[override]
        try:
            return super().model_validate(obj, **kwargs)
        except ValidationError as e:
            raise _FieldErrors(_problems(e)) from None


def _default(section: str, key: str) -> Any:
    return _DEFAULTS[section][key]


class ClusterConfig(_Settings):
    """The cluster's workers and how the trace is played."""

    mode: Literal["aggregated", "disaggregated"] = Field(
        _default("cluster", "mode"),
        description="aggregated: every worker prefills and decodes; disaggregated: prefill "
        "workers hand the KV to decode workers.",
    )
    num_workers: int = Field(
        _default("cluster", "num_workers"), description="Workers in aggregated mode."
    )
    num_prefill_workers: int = Field(
        _default("cluster", "num_prefill_workers"), description="Prefill workers (disaggregated)."
    )
    num_decode_workers: int = Field(
        _default("cluster", "num_decode_workers"), description="Decode workers (disaggregated)."
    )
    arrival_speedup_ratio: float = Field(
        _default("cluster", "arrival_speedup_ratio"),
        description="Divides every inter-arrival gap of the trace.",
    )
    router: Literal["round_robin", "random", "kv_aware"] = Field(
        _default("cluster", "router"),
        description="How requests are spread over workers: in turn, at random (seeded), or "
        "kv_aware: lowest overlap_weight x prompt blocks to prefill + active blocks.",
    )
    router_seed: int = Field(_default("cluster", "router_seed"), description="Random router seed.")
    overlap_weight: float = Field(
        _default("cluster", "overlap_weight"),
        description="kv_aware: weight of blocks to prefill against active blocks.",
    )
    concurrency: int | None = Field(
        _default("cluster", "concurrency"),
        description="Closed loop: at most this many sessions in flight (a request without a "
        "session is a session of one turn); trace timestamps of session starts are ignored.",
    )


class EngineConfig(_Settings):
    """One worker's vLLM-like engine."""

    block_size: int = Field(_default("engine", "block_size"), description="Tokens per KV block.")
    num_gpu_blocks: int = Field(
        _default("engine", "num_gpu_blocks"), description="KV blocks in one worker's GPU cache."
    )
    max_num_seqs: int = Field(
        _default("engine", "max_num_seqs"), description="Most requests running at once."
    )
    max_num_batched_tokens: int = Field(
        _default("engine", "max_num_batched_tokens"), description="Token budget of one pass."
    )
    enable_chunked_prefill: bool = Field(
        _default("engine", "enable_chunked_prefill"),
        description="Split long prompts across passes.",
    )
    preemption_mode: Literal["lifo", "fifo"] = Field(
        _default("engine", "preemption_mode"),
        description="Which running request a KV shortage preempts, among those admitted "
        "after the one needing the block: the newest (lifo) or the oldest (fifo).",
    )
    tensor_parallel_size: int = Field(
        _default("engine", "tensor_parallel_size"),
        description="GPUs one rank spans (TP); part of the timing key and the GPU count.",
    )
    data_parallel_size: int = Field(
        _default("engine", "data_parallel_size"),
        description="Ranks per worker, each with its own scheduler and num_gpu_blocks; a "
        "grouped pass ends when the slowest rank ends. GPUs per worker = TP x DP.",
    )


_POLY = _DEFAULTS["timing"]


class PolynomialTiming(_Settings):
    """Dynamo mocker's uncalibrated step-time polynomial (ms)."""

    model: Literal["polynomial"] = "polynomial"
    speedup_ratio: float = Field(_POLY["speedup_ratio"], description="Divides every step time.")
    decode_speedup_ratio: float = Field(
        _POLY["decode_speedup_ratio"], description="Further divides decode step times."
    )


class FixedTiming(_Settings):
    """Constant step times, for hand-checkable cases."""

    model: Literal["fixed"] = "fixed"
    prefill_ms: float = Field(description="Cost of a pass that prefills anything (ms).")
    decode_ms: float = Field(description="Cost of a pass that decodes anything (ms).")


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
        return value.tolist() if isinstance(value, np.ndarray) else value


def load_timing_table(path: str | Path) -> TableTiming:
    """A TableTiming from an .npz file holding the arrays named in ``TABLE_ARRAYS``."""
    path = Path(path)
    try:
        with np.load(path) as npz:
            missing = [name for name in TABLE_ARRAYS if name not in npz.files]
            if missing:
                raise ConfigError(
                    f"{path}: timing table lacks arrays {', '.join(missing)} "
                    f"(found {', '.join(npz.files) or 'none'})"
                )
            arrays = {name: npz[name] for name in TABLE_ARRAYS}
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read the timing table: {e}") from None
    try:
        return TableTiming(**arrays)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


class AicTiming(_Settings):
    """Step times from AIConfigurator's performance database, built once into ``table`` timing
    (needs ``pip install 'dynosim[aic]'``)."""

    model: Literal["aic"] = "aic"
    model_name: str = Field(description="AIConfigurator model name, e.g. Qwen/Qwen3-32B.")
    system: str = Field(description="AIConfigurator system name, e.g. h200_sxm.")
    backend: Literal["trtllm", "vllm", "sglang"] = Field("trtllm", description="Serving engine.")
    backend_version: str | None = Field(
        None,
        description="Backend version in AIC's database; unset: AIC's current one for the "
        "system and backend ('current', 'next' and 'previous' are accepted too).",
    )
    tp: int = Field(1, ge=1, description="Tensor-parallel GPUs of one rank.")


TimingConfig = Annotated[
    PolynomialTiming | FixedTiming | TableTiming | AicTiming, Field(discriminator="model")
]


class RoleConfig(_Settings):
    """One role's own settings in disaggregated mode; each given section replaces the shared
    ``engine`` / ``timing`` section as a whole for that role."""

    engine: EngineConfig | None = None
    timing: TimingConfig | None = None


class KvShape(_Settings):
    """A model's KV geometry: bytes per token = layers x 2 x kv heads x head dim x dtype bytes."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int = Field(description="Bytes per KV element (2 for bf16, 1 for fp8).")


class KvTransferConfig(_Settings):
    """KV transfers from prefill to decode workers (disaggregated mode)."""

    bandwidth_gbps: float | None = Field(
        None, description="Each prefill worker's send link (GB/s = 1e9 B/s); unset: instant."
    )
    decode_bandwidth_gbps: float | None = Field(
        None, description="Each decode worker's receive link (GB/s); unset: bandwidth_gbps."
    )
    link_model: Literal["max_min", "line_rate"] | None = Field(
        None,
        description="max_min (default with a bandwidth): transfers share links max-min "
        "fairly; line_rate: every transfer at full bandwidth (Dynamo's model).",
    )
    sizing: Literal["full_prompt", "destination_missing"] | None = Field(
        None,
        description="Tokens a transfer moves: the full prompt (default) or only the blocks "
        "the decode worker does not cache.",
    )
    first_token: Literal["kv_arrival", "first_decode_pass"] | None = Field(
        None,
        description="When a request's first token counts: when its KV lands (default, SPEC "
        "section 5), or at the end of the decode worker's first pass with it, decode workers "
        "reserving blocks only between passes (Dynamo's mocker).",
    )
    kv_bytes_per_token: float | None = Field(None, description="KV bytes of one token.")
    kv_shape: KvShape | None = Field(None, description="Or the model's KV geometry.")


class SlaConfig(_Settings):
    """Goodput thresholds; an unset threshold is not checked."""

    ttft_ms: float | None = Field(None, description="Time to first token limit (ms).")
    itl_ms: float | None = Field(None, description="Limit on a request's mean ITL (TPOT, ms).")
    e2e_ms: float | None = Field(None, description="End-to-end latency limit (ms).")


class ReportConfig(_Settings):
    """What the report samples besides per-request metrics."""

    sample_interval_ms: float = Field(
        _default("report", "sample_interval_ms"), description="Time-series interval (ms)."
    )


class OffloadConfig(_Settings):
    """KV offload tiers (SPEC section 6): G2 host memory per rank, G3 disk per rank or shared.
    Needs ``kv_transfer.kv_bytes_per_token`` (or ``kv_shape``) to size block moves."""

    g2_blocks: int | None = Field(
        _default("offload", "g2_blocks"),
        description="G2 (host memory) blocks per rank; unset: no offload tiers.",
    )
    g3_blocks: int | None = Field(
        _default("offload", "g3_blocks"),
        description="G3 (disk) blocks per rank, or of the one pool with g3_shared; needs G2.",
    )
    g3_shared: bool = Field(
        _default("offload", "g3_shared"),
        description="One G3 pool, and its G3->G2 link, shared by the whole cluster.",
    )
    g1_g2_gbps: float = Field(
        _default("offload", "g1_g2_gbps"),
        description=(
            "Each rank's G1<->G2 link per direction (GB/s = 1e9 B/s): G2 hits come up on it; "
            "offloads count their bytes but move no flow (nothing else shares their direction "
            "and offloaded blocks count as in G2 at once)."
        ),
    )
    g2_g3_gbps: float = Field(
        _default("offload", "g2_g3_gbps"),
        description=(
            "Each rank's (or the shared pool's) G2<->G3 link per direction (GB/s): G3 hits "
            "come up on it (and through the G1<->G2 link)."
        ),
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
        # An aic section is checked by its own model; building its tables waits for a replay.
        data = self.model_dump()
        for section in (data, data["prefill"], data["decode"]):
            if (section.get("timing") or {}).get("model") == "aic":
                section["timing"] = None if section is not data else {"model": "polynomial"}
        _core.normalize_config_json(json.dumps(data))
        return self

    def to_core_json(self) -> str:
        """The configuration as the JSON document the Rust core reads. ``aic`` timing sections
        become their ``table`` timing (built once with AIConfigurator, then read from the
        on-disk cache): the core reads tables only."""
        timings = (self.timing, self.prefill.timing, self.decode.timing)
        if not any(isinstance(t, AicTiming) for t in timings):
            return self.model_dump_json()
        from dynosim.aic import aic_sections_to_tables  # lazy: it imports this module

        return json.dumps(aic_sections_to_tables(self.model_dump()))


def load_config(source: SimConfig | dict[str, Any] | str | Path | None = None) -> SimConfig:
    """A SimConfig from a model, a dict, or a YAML / JSON file path (None: all defaults)."""
    if source is None:
        return SimConfig()
    if isinstance(source, SimConfig):
        return source
    if isinstance(source, dict):
        return SimConfig.model_validate(source)
    return load_settings_file(source, SimConfig, "configuration")


def load_settings_file(path: str | Path, model: type[_M], what: str) -> _M:
    """Validate a YAML / JSON file as ``model``; every problem is a ConfigError naming the file
    (``what`` names the document in messages, e.g. "configuration")."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the {what}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text: {e}") from None
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML/JSON: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a {what} must be a mapping, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def config_json_schema() -> dict[str, Any]:
    """The JSON schema of SimConfig (for editors and YAML language servers)."""
    return SimConfig.model_json_schema()


__all__ = [
    "AicTiming",
    "ClusterConfig",
    "EngineConfig",
    "FixedTiming",
    "KvShape",
    "KvTransferConfig",
    "OffloadConfig",
    "PolynomialTiming",
    "ReportConfig",
    "RoleConfig",
    "SimConfig",
    "SlaConfig",
    "TableTiming",
    "TimingConfig",
    "config_json_schema",
    "load_config",
    "load_timing_table",
]
