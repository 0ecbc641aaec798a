"""What AIConfigurator's database holds: models (their bundled Hugging Face configs), systems
(hardware specs), backends and versions per system, tensor-parallel sizes with all-reduce data;
and the check that resolves an ``aic`` timing section against it."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dynosim._dependencies import aic_core, pandas
from dynosim.config import AicTiming
from dynosim.errors import ConfigError

#: Bumped whenever the table axes or the query mapping change, so old cached tables are not
#: reused (part of every table's cache key).
GRID_VERSION = 1


@dataclass(frozen=True)
class AicTarget:
    """An :class:`AicTiming` with every input resolved: the cache key of its tables."""

    model_name: str
    system: str
    backend: str
    backend_version: str
    tp: int
    aic_version: str
    grid_version: int = GRID_VERSION

    def key(self) -> str:
        """The canonical JSON of the key (stored in the cache file and hashed into its name)."""
        return json.dumps(asdict(self), sort_keys=True)

    def file_name(self) -> str:
        """Cache file name: readable inputs plus a hash of the full key."""
        digest = hashlib.sha256(self.key().encode()).hexdigest()[:16]
        model = self.model_name.replace("/", "--")
        return (
            f"{model}_{self.system}_{self.backend}-{self.backend_version}_tp{self.tp}_{digest}.npz"
        )


def aic_version() -> str:
    """The installed ``aiconfigurator-core`` version (part of the cache key)."""
    aic_core()
    return importlib.metadata.version("aiconfigurator-core")


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
            f"AIConfigurator has no model {model_name!r}; supported models: {', '.join(models)}"
        )
    path = _model_configs_dir() / f"{model_name.replace('/', '--')}_config.json"
    return json.loads(path.read_text())


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
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
            f"system {system!r} {why}; systems with data: {', '.join(sorted(databases))}"
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
        raise ConfigError(f"AIC has no system {system!r}; systems: {', '.join(_system_specs())}")
    return spec


def _resolve_version(system: str, backend: str, requested: str | None) -> str:
    pdb = aic_core("sdk.perf_database")
    # The version slots are cheap to read; AIC's full database listing parses hundreds of YAML
    # files (seconds), so it is only consulted to explain a failure or when there are no slots.
    slots = pdb.get_version_slots(system, backend) or {}
    versions = sorted(set(slots.values()))
    if not versions:
        backends = supported_backends(system)
        if backend not in backends:
            raise ConfigError(
                f"AIC has no {backend} data for system {system!r}; backends there: "
                f"{', '.join(backends)}"
            )
        versions = backends[backend]
    if requested is None:
        # AIC's own default (get_latest_database_version): the "current" slot when slots exist.
        version = slots.get("current") or pdb.get_latest_database_version(system, backend)
    elif requested in ("current", "previous", "next"):
        version = slots.get(requested)
    else:
        version = requested
    if version is None or version not in versions:
        aliases = ", ".join(f"{k}={v}" for k, v in slots.items())
        raise ConfigError(
            f"AIC has no {backend} version {requested!r} for system {system!r}; versions: "
            f"{', '.join(versions)}" + (f" (aliases: {aliases})" if aliases else "")
        )
    return version


def _version_tuple(version: str) -> tuple[int, ...]:
    # "1.3.0rc20" -> (1, 3, 0, 0, 20); a final release sorts after its release candidates.
    head, _, rc = version.partition("rc")
    nums = [int(p) for p in head.replace("post", ".").split(".") if p.isdigit()]
    return (*nums, 0, int(rc)) if rc.isdigit() else (*nums, 1, 0)


def supported_tp(system: str, backend: str, backend_version: str) -> list[int]:
    """Tensor-parallel sizes AIC has measured all-reduce data for (plus 1, which needs none).

    AIC prices the TP all-reduce from ``comm/<backend>/<version>/custom_allreduce_perf.parquet``
    of the system, filling a version without its own file from the newest older one; beyond the
    GPU counts measured there (2, 4, 8 on an 8-GPU node) it would extrapolate, so those sizes are
    refused rather than trusted.
    """
    pd = pandas("reading AIC's all-reduce tables", "aic")
    pdb = aic_core("sdk.perf_database")
    spec = system_spec(system)
    want = _version_tuple(backend_version)
    best: tuple[tuple[int, ...], Path] | None = None
    for root in pdb.get_systems_paths():
        comm = Path(root) / spec.get("data_dir", "") / "comm" / backend
        for path in comm.glob("*/custom_allreduce_perf.parquet"):
            v = _version_tuple(path.parent.name)
            if v <= want and (best is None or v > best[0]):
                best = (v, path)
    sizes = {1}
    if best is not None:
        sizes |= {int(n) for n in pd.read_parquet(best[1], columns=["num_gpus"])["num_gpus"]}
    return sorted(sizes)


def resolve_aic_timing(spec: AicTiming) -> AicTarget:
    """Check that AIC supports ``spec`` and resolve its backend version; no engine is built.

    Raises:
        MissingExtraError: AIConfigurator is not installed.
        ConfigError: the model, system, backend, version or TP is not supported (the message
            names the value and lists the supported ones).
    """
    config = _text_config(bundled_model_config(spec.model_name))
    version = _resolve_version(spec.system, spec.backend, spec.backend_version)
    # tp=1 needs no all-reduce data; reading it (pandas, parquet) costs half a second.
    sizes = [1] if spec.tp == 1 else supported_tp(spec.system, spec.backend, version)
    if spec.tp not in sizes:
        raise ConfigError(
            f"AIC has no all-reduce data for tp={spec.tp} on {spec.system} with {spec.backend} "
            f"{version}; supported tp: {', '.join(map(str, sizes))}"
        )
    heads = config.get("num_attention_heads")
    if isinstance(heads, int) and heads % spec.tp:
        raise ConfigError(
            f"tp={spec.tp} does not divide the {heads} attention heads of {spec.model_name}"
        )
    return AicTarget(
        model_name=spec.model_name,
        system=spec.system,
        backend=spec.backend,
        backend_version=version,
        tp=spec.tp,
        aic_version=aic_version(),
    )


__all__ = [
    "GRID_VERSION",
    "AicTarget",
    "aic_version",
    "bundled_model_config",
    "resolve_aic_timing",
    "supported_backends",
    "supported_models",
    "supported_tp",
    "system_spec",
]
