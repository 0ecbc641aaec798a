"""The one resolution of a configuration's sizes: the KV blocks of each role's ranks and the KV
bytes of a token. Every entry point (``dynosim.replay``, sweeps, plans, the command line,
``offline_replay_bench``) replays what :func:`resolve_sizes` returns, through
:func:`dynosim.replay.core_config`, so the same deployment gets the same capacity everywhere.

The rule, per value:

- set in the configuration: used as given;
- unset, and the role's timing names the model and the GPU (an ``aic`` section): derived.
  ``num_gpu_blocks`` is what the role's engine allocates on one rank of that layout:
  ``gpu_memory_utilization`` of the GPU's memory, less the weights on a GPU, the activation peak
  of a pass, the runtime's own memory and the communication buffers (AIConfigurator's memory
  model), over the KV bytes of a block. The KV bytes of a token (``kv_transfer.kv_shape``) are
  the model's KV geometry when the roles' sections name one model;
- unset otherwise: ``num_gpu_blocks`` takes the core's default (16,384 blocks, calibrated to no
  GPU), and the KV bytes of a token stay unset (instant transfers need none; links and offload
  tiers then ask for them).

What applied is the report's provenance: ``kv_capacity`` by engine section (``source``
``given``, ``default``, or ``aic`` with every term of the memory model) and
``kv_bytes_per_token`` (``given``, ``model``, or ``unset`` with the reason the roles' model
gave none).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dynosim import _core
from dynosim.errors import ConfigError

if TYPE_CHECKING:
    from dynosim.config import AicTiming, EngineConfig, KvShape, SimConfig

#: Sizes derived so far, or why they could not be, by what they depend on: kept across calls,
#: a sweep's configurations share a few.
SizeMemo = dict[Any, Any]


@dataclass(frozen=True)
class Sized:
    """A configuration with every rank's ``num_gpu_blocks`` set (and the KV geometry where the
    model gives it), and the provenance of each size by its dotted path."""

    config: SimConfig
    provenance: dict[str, Any]


def _remember(memo: SizeMemo, key: Any, derive: Any) -> Any:
    """``derive()`` once per ``key``; a ConfigError is remembered and raised again."""
    if key not in memo:
        try:
            memo[key] = derive()
        except ConfigError as e:
            memo[key] = e
    found = memo[key]
    if isinstance(found, ConfigError):
        raise found
    return found


def _derived_blocks(timing: AicTiming, engine: EngineConfig, memo: SizeMemo) -> dict[str, Any]:
    """The KV capacity of one rank of ``engine`` timed by ``timing`` (every term, as a dict)."""
    from dynosim.capacity import aic_kv_capacity

    spec = timing.model_copy(update={"backend": timing.backend or engine.backend})
    block_size = engine.setting("block_size")
    budget = engine.pass_token_budget
    fraction = engine.gpu_memory_utilization
    key = ("kv_capacity", spec, block_size, budget, engine.max_num_seqs, fraction)
    return _remember(
        memo,
        key,
        lambda: aic_kv_capacity(
            spec,
            block_size=block_size,
            max_num_batched_tokens=budget,
            max_num_seqs=engine.max_num_seqs,
            gpu_memory_utilization=fraction,
        ).to_dict(),
    )


def _model_shape(model: str, backend: str, memo: SizeMemo) -> KvShape:
    from dynosim.capacity import kv_geometry

    key = ("kv_shape", model, backend)
    return _remember(memo, key, lambda: kv_geometry(model, backend=backend))


def resolve_sizes(config: SimConfig, memo: SizeMemo | None = None) -> Sized:
    """``config`` with its sizes resolved by the module's rule, and their provenance.

    Raises:
        ConfigError: a role's model does not fit its GPUs, or AIC cannot size its layout (the
            message gives the figures or AIC's reason).
        MissingExtraError: a size is to be derived and AIConfigurator is not installed.
    """
    from dynosim.config import SimConfig

    data = config.model_dump()
    provenance = size_document(data, config.model_dump_json(), memo)
    return Sized(SimConfig.model_validate(data), provenance)


def size_document(data: dict[str, Any], text: str, memo: SizeMemo | None = None) -> dict[str, Any]:
    """The module's rule on a configuration document: ``data`` (settings as plain values, as a
    configuration file holds them, any left out at their defaults; ``text`` the same as JSON)
    gets every role's ``num_gpu_blocks`` set, and the KV geometry where the model gives it, in
    place; returns their provenance. pydantic and
    AIConfigurator are imported only for a role whose timing is an ``aic`` section.

    Raises: as :func:`resolve_sizes`.
    """
    memo = {} if memo is None else memo
    view = json.loads(_core.resolve_config_json(text))
    roles = view["roles"]
    blocks: dict[str, tuple[str, dict[str, Any]]] = {}
    for r in roles:
        given = _section(data, r["engine_path"]).get("num_gpu_blocks")
        if given is not None:
            entry = {"source": "given", "num_gpu_blocks": given}
        elif r["timing"]["model"] == "aic":
            from dynosim.config.resolved import role_view

            v = role_view(r)
            entry = _derived_blocks(v.timing, v.engine, memo)
        else:
            entry = {
                "source": "default",
                "num_gpu_blocks": r["engine"]["num_gpu_blocks"],
                "note": f"no model and GPU to size it from ({r['timing_path']} is "
                f"{r['timing']['model']} timing): uncalibrated",
            }
        blocks[r["role"]] = (r["engine_path"], entry)
    capacity: dict[str, Any] = {}
    for role, (path, entry) in blocks.items():
        shared = [e for p, e in blocks.values() if p == path]
        if any(e["num_gpu_blocks"] != entry["num_gpu_blocks"] for e in shared):
            # Roles sharing the engine section but sized apart (their own timing sections)
            # each get their own copy of it.
            path = f"{role}.engine"
            _section(data, role)["engine"] = dict(_section(data, "engine"))
        _section(data, path)["num_gpu_blocks"] = entry["num_gpu_blocks"]
        capacity[path] = entry
    provenance: dict[str, Any] = {"kv_capacity": capacity}
    transfer = _section(data, "kv_transfer")
    if transfer.get("kv_bytes_per_token") is not None or transfer.get("kv_shape") is not None:
        provenance["kv_bytes_per_token"] = {
            "source": "given",
            "bytes_per_token": view["kv_transfer"]["bytes_per_token"],
        }
        return provenance
    models = sorted(
        {
            (r["timing"]["model_name"], r["engine"]["backend"])
            for r in roles
            if r["timing"]["model"] == "aic"
        }
    )
    if len(models) > 1:
        named = ", ".join(f"{m} ({b})" for m, b in models)
        provenance["kv_bytes_per_token"] = {
            "source": "unset",
            "note": f"the roles' aic timing sections name different models: {named}",
        }
    elif models:
        model, backend = models[0]
        try:
            shape = _model_shape(model, backend, memo)
        except ConfigError as e:  # a KV that is not one size per token: left to the user
            provenance["kv_bytes_per_token"] = {"source": "unset", "note": str(e)}
        else:
            transfer["kv_shape"] = shape.model_dump()
            provenance["kv_bytes_per_token"] = {
                "source": "model",
                "model": model,
                "backend": backend,
                "bytes_per_token": shape.bytes_per_token(),
            }
    return provenance


def _section(data: dict[str, Any], path: str) -> dict[str, Any]:
    """The section of ``data`` at dotted ``path`` (``engine`` or ``prefill.engine``), made
    empty where the document leaves it out (every setting in it then takes its default)."""
    node = data
    for part in path.split("."):
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
    return node


__all__ = ["SizeMemo", "Sized", "resolve_sizes", "size_document"]
