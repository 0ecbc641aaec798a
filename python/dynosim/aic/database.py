"""What AIConfigurator's database holds: models (their bundled Hugging Face configs), systems
(hardware specs), backends per system, and the tensor-parallel sizes it has all-reduce
measurements for."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dynosim._dependencies import aic_core, pandas
from dynosim._shown import shown, suggestion
from dynosim.aic.versions import pricing_versions
from dynosim.errors import ConfigError


def _model_configs_dir() -> Path:
    # AIC's own lookup (sdk.utils._get_model_config_path): an env override, else the package data.
    if configured := os.environ.get("AICONFIGURATOR_MODEL_CONFIGS_PATH"):
        return Path(configured)
    from importlib.resources import files

    return Path(str(files("aiconfigurator_core") / "model_configs"))


def supported_models() -> list[str]:
    """AIC model names with a bundled config (the models AIC can build without downloading)."""
    aic_core()
    names = []
    for path in _model_configs_dir().glob("*_config.json"):
        stem = path.name.removesuffix("_config.json")
        if stem.endswith("_hf_quant"):  # a quantization sidecar, not a model
            continue
        org, sep, name = stem.partition("--")
        names.append(f"{org}/{name}" if sep else stem)
    return sorted(names)


def bundled_model_config(model_name: str) -> dict[str, Any]:
    """The Hugging Face ``config.json`` AIC bundles for ``model_name``.

    Raises:
        ConfigError: the model is not among AIC's bundled models (the message lists them).
    """
    models = supported_models()
    if model_name not in models:
        raise ConfigError(
            f"AIConfigurator has no model {shown(model_name)}"
            f"{suggestion(model_name, models)}; supported models: {', '.join(models)}"
        )
    path = _model_configs_dir() / f"{model_name.replace('/', '--')}_config.json"
    return json.loads(path.read_text())


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    # Vision-language configs nest the language model's fields under text_config.
    return {**config.get("text_config", {}), **config}


def supported_backends(system: str) -> dict[str, list[str]]:
    """``{backend: [versions]}`` AIC has performance data for on ``system``.

    Raises:
        ConfigError: the system has no performance data (the message lists the systems that do).
    """
    pdb = aic_core("sdk.perf_database")
    databases = pdb.get_supported_databases()
    if system not in databases:
        spec_only = system in _system_specs()
        why = "has a spec but no performance data in AIC" if spec_only else "is unknown to AIC"
        raise ConfigError(
            f"system {shown(system)} {why}{suggestion(system, databases)}; systems with data: "
            f"{', '.join(sorted(databases))}"
        )
    return {b: list(v) for b, v in sorted(databases[system].items())}


def _system_specs() -> list[str]:
    pdb = aic_core("sdk.perf_database")
    names = set()
    for root in pdb.get_systems_paths():
        for path in Path(root).glob("*.yaml"):
            if "gpu" in (pdb.load_system_spec(path.stem) or {}):
                names.add(path.stem)
    return sorted(names)


def system_spec(system: str) -> dict[str, Any]:
    """AIC's hardware spec of ``system`` (``gpu.mem_capacity`` in bytes, ``node``, ...).

    Raises:
        ConfigError: AIC has no spec for the system (the message lists the systems it has).
    """
    pdb = aic_core("sdk.perf_database")
    spec = pdb.load_system_spec(system) if system else {}
    if not spec or "gpu" not in spec:
        raise ConfigError(
            f"AIC has no system {shown(system)}{suggestion(system, _system_specs())}; systems: "
            f"{', '.join(_system_specs())}"
        )
    return spec


def gpu_links_gbps(system: str) -> dict[str, float]:
    """The links of one GPU of ``system`` in GB/s (1e9 B/s, one direction), from AIC's system
    spec (``node.*_bw``): ``inter_node`` (its network link to other nodes, what KV moved from
    a prefill to a decode worker crosses), ``intra_node`` (NVLink) and ``pcie`` (to host
    memory, what a G1<->G2 offload crosses).

    Raises:
        ConfigError: AIC has no spec for the system, or the spec gives no such bandwidth.
    """
    node = system_spec(system).get("node", {})
    out = {}
    for name in ("inter_node", "intra_node", "pcie"):
        value = node.get(f"{name}_bw")
        if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
            raise ConfigError(
                f"AIC's system {system!r} gives no node.{name}_bw (bytes/s), got {value!r}"
            )
        out[name] = float(value) / 1e9
    return out


def supported_tp(system: str, backend: str, backend_version: str) -> list[int]:
    """Tensor-parallel sizes AIC has all-reduce measurements for (plus 1, which needs none).

    AIC prices the TP all-reduce from ``comm/<backend>/<version>/custom_allreduce_perf.parquet``
    of the system, the version chosen as for every family
    (:func:`~dynosim.aic.versions.pricing_versions`); beyond the GPU counts measured there (2, 4,
    8 on an 8-GPU node) it would extrapolate, so those sizes are refused rather than trusted.
    """
    comm = pricing_versions(system, backend, backend_version).get("comm")
    sizes = {1}
    if comm is not None:
        spec = system_spec(system)
        pdb = aic_core("sdk.perf_database")
        path = (
            Path(pdb.get_systems_paths()[0])
            / spec.get("data_dir", "")
            / "comm"
            / backend
            / comm
            / "custom_allreduce_perf.parquet"
        )
        if path.exists():
            table = pandas("reading AIC's all-reduce tables", "aic").read_parquet(
                path, columns=["num_gpus"]
            )
            sizes |= {int(n) for n in table["num_gpus"]}
    return sorted(sizes)


def is_moe(model_name: str) -> bool:
    """Whether AIC's bundled config of ``model_name`` is a mixture of experts."""
    config = text_config(bundled_model_config(model_name))
    return any(config.get(k) for k in ("num_experts", "num_local_experts", "n_routed_experts"))


__all__ = [
    "bundled_model_config",
    "gpu_links_gbps",
    "is_moe",
    "supported_backends",
    "supported_models",
    "supported_tp",
    "system_spec",
    "text_config",
]
