"""The core's defaults and the names of its choices (routers, serving engines, serving modes),
read without pydantic or numpy: the configuration models (:mod:`dynosim.config.models`) take
their defaults and choices from here, and so does a command's ``--help``, which shows them and
must start fast."""

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


def flavour_setting(backend: str, name: str, value: Any) -> Any:
    """Engine setting ``name`` of a ``backend`` engine: ``value`` as set, else (None) the
    flavour's default."""
    return ENGINE_DEFAULTS[backend].get(name) if value is None else value


__all__ = [
    "BACKENDS",
    "DEFAULTS",
    "DEFAULT_NUM_GPU_BLOCKS",
    "ENGINE_DEFAULTS",
    "MODES",
    "ROUTERS",
    "Backend",
    "Mode",
    "Router",
    "flavour_setting",
]
