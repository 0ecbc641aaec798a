"""The core's defaults and the router names, read without pydantic or numpy: the configuration
models (:mod:`dynosim.config.models`) take their defaults from here, and so does a command's
``--help``, which shows them and must start fast."""

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


def flavour_setting(backend: str, name: str, value: Any) -> Any:
    """Engine setting ``name`` of a ``backend`` engine: ``value`` as set, else (None) the
    flavour's default."""
    return ENGINE_DEFAULTS[backend].get(name) if value is None else value


__all__ = [
    "DEFAULTS",
    "DEFAULT_NUM_GPU_BLOCKS",
    "ENGINE_DEFAULTS",
    "ROUTERS",
    "Router",
    "flavour_setting",
]
