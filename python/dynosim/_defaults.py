"""The core's defaults and the names of its choices (routers, serving engines, serving modes,
KV transfers' and offloads' models), read without pydantic or numpy: the configuration models
(:mod:`dynosim.config.models`) take their defaults and choices from here, and so does a
command's ``--help``, which shows them and must start fast."""

from __future__ import annotations

import json
from typing import Any, Literal, get_args

from dynosim import _core

#: Every setting at its default, by section, from the Rust core (the one place that holds them).
DEFAULTS: dict[str, Any] = json.loads(_core.default_config_json())

#: Every engine flavour's settings at their defaults, by backend name (from the core).
ENGINE_DEFAULTS: dict[str, dict[str, Any]] = json.loads(_core.engine_defaults_json())

#: KV blocks of a rank whose configuration, model and GPU do not size it (the core's default,
#: calibrated to no GPU).
DEFAULT_NUM_GPU_BLOCKS: int = DEFAULTS["engine"]["num_gpu_blocks"]

#: The share of GPU memory an engine gives weights, activations and KV (the core's default,
#: vLLM's).
DEFAULT_GPU_MEMORY_UTILIZATION: float = DEFAULTS["engine"]["gpu_memory_utilization"]

#: How requests are spread over workers (``cluster.router``).
Router = Literal["round_robin", "random", "kv_aware"]
ROUTERS: tuple[str, ...] = get_args(Router)

#: The serving engines modelled (``engine.backend``), each an engine flavour of the core
#: (the keys of ``ENGINE_DEFAULTS``), in the order commands list them.
Backend = Literal["trtllm", "vllm", "sglang"]
BACKENDS: tuple[str, ...] = get_args(Backend)

#: How workers serve (``cluster.mode``): each prefills and decodes, or prefill workers hand
#: the KV to decode workers.
Mode = Literal["aggregated", "disaggregated"]
MODES: tuple[str, ...] = get_args(Mode)

#: How KV transfers share links (``kv_transfer.link_model``), the tokens they move
#: (``kv_transfer.sizing``) and when a disaggregated request's first token counts
#: (``kv_transfer.first_token``).
LinkModel = Literal["max_min", "line_rate"]
LINK_MODELS: tuple[str, ...] = get_args(LinkModel)
TransferSizing = Literal["full_prompt", "destination_missing"]
TRANSFER_SIZINGS: tuple[str, ...] = get_args(TransferSizing)
FirstToken = Literal["kv_arrival", "first_decode_pass"]

#: Whether a G3 link's reads and writes share one capacity (``offload.g3_duplex``), what a
#: request does with blocks whose copy down is in flight (``offload.in_flight``), and whether
#: offloads take time (``offload.writes``).
G3Duplex = Literal["half", "full"]
G3_DUPLEXES: tuple[str, ...] = get_args(G3Duplex)
InFlight = Literal["wait", "recompute"]
IN_FLIGHT: tuple[str, ...] = get_args(InFlight)
OffloadWrites = Literal["flows", "free"]
OFFLOAD_WRITES: tuple[str, ...] = get_args(OffloadWrites)


def settings_document() -> dict[str, Any]:
    """A configuration with no setting given, as the configuration models write it out
    (``SimConfig().model_dump()``) without building them: the core's defaults, but with
    ``engine.num_gpu_blocks`` unset (None), as an unset size is derived from the model and GPU
    where the timing names them (:mod:`dynosim.sizing`). A new document each call."""
    document: dict[str, Any] = json.loads(_core.default_config_json())
    document["engine"]["num_gpu_blocks"] = None
    return document


def flavour_setting(backend: str, name: str, value: Any) -> Any:
    """Engine setting ``name`` of a ``backend`` engine: ``value`` as set, else (None) the
    flavour's default."""
    return ENGINE_DEFAULTS[backend].get(name) if value is None else value


__all__ = [
    "BACKENDS",
    "DEFAULTS",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_NUM_GPU_BLOCKS",
    "ENGINE_DEFAULTS",
    "G3_DUPLEXES",
    "IN_FLIGHT",
    "LINK_MODELS",
    "MODES",
    "OFFLOAD_WRITES",
    "ROUTERS",
    "TRANSFER_SIZINGS",
    "Backend",
    "FirstToken",
    "G3Duplex",
    "InFlight",
    "LinkModel",
    "Mode",
    "OffloadWrites",
    "Router",
    "TransferSizing",
    "flavour_setting",
    "settings_document",
]
