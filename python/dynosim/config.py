"""Typed simulation settings: cluster, engine, timing, SLA and report options.

The defaults are not written here: they come from the Rust core (``_core.default_config_json``),
the one place that holds them. Value ranges are checked by the core too, so Python and Rust never
disagree on what is valid; pydantic checks types and shape, and gives the JSON schema.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dynosim import _core
from dynosim.errors import ConfigError

_DEFAULTS: dict[str, Any] = json.loads(_core.default_config_json())


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
    gpus_per_worker: int = Field(
        _default("cluster", "gpus_per_worker"), description="GPUs one worker occupies."
    )
    arrival_speedup_ratio: float = Field(
        _default("cluster", "arrival_speedup_ratio"),
        description="Divides every inter-arrival gap of the trace.",
    )
    router: Literal["round_robin"] = Field(
        _default("cluster", "router"), description="How requests are spread over workers."
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
        description="Which running request a KV shortage preempts: newest (lifo) or oldest.",
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


TimingConfig = Annotated[PolynomialTiming | FixedTiming, Field(discriminator="model")]


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

    @model_validator(mode="after")
    def _check_ranges(self) -> SimConfig:
        # The core owns the value rules; it raises ConfigError naming the field and value.
        _core.normalize_config_json(self.to_core_json())
        return self

    def to_core_json(self) -> str:
        """The configuration as the JSON document the Rust core reads."""
        return self.model_dump_json()


def load_config(source: SimConfig | dict[str, Any] | str | Path | None = None) -> SimConfig:
    """A SimConfig from a model, a dict, or a YAML / JSON file path (None: all defaults)."""
    if source is None:
        return SimConfig()
    if isinstance(source, SimConfig):
        return source
    if isinstance(source, dict):
        return SimConfig.model_validate(source)
    path = Path(source)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read configuration: {e.strerror}") from None
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML/JSON: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a configuration must be a mapping, got {type(data).__name__}")
    try:
        return SimConfig.model_validate(data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def config_json_schema() -> dict[str, Any]:
    """The JSON schema of SimConfig (for editors and YAML language servers)."""
    return SimConfig.model_json_schema()


__all__ = [
    "ClusterConfig",
    "EngineConfig",
    "FixedTiming",
    "KvShape",
    "KvTransferConfig",
    "PolynomialTiming",
    "ReportConfig",
    "RoleConfig",
    "SimConfig",
    "SlaConfig",
    "TimingConfig",
    "config_json_schema",
    "load_config",
]
