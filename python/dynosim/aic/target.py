"""An ``aic`` timing section checked against AIConfigurator's database and resolved into
everything its tables depend on: the cache key of those tables."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from dynosim._shown import shown
from dynosim.aic.database import (
    bundled_model_config,
    is_moe,
    supported_backends,
    supported_tp,
    text_config,
)
from dynosim.aic.versions import (
    aic_version,
    is_slot,
    known_versions,
    pricing_versions,
    resolve_version,
    systems_overlay,
)
from dynosim.config import AicTiming
from dynosim.errors import ConfigError

#: Bumped whenever the table axes or the query mapping change, so old cached tables are not
#: reused (part of every table's cache key). 2: operator tables (mixed passes, prefixes).
GRID_VERSION = 3


@dataclass(frozen=True)
class AicTarget:
    """An :class:`~dynosim.config.AicTiming` with every input resolved.

    ``pricing`` names, per family of operations, the version whose measurements price it
    (:func:`~dynosim.aic.versions.pricing_versions`); ``systems_path`` is the private copy of
    AIC's systems folder that version needs, or None when AIC answers for it by itself. All
    but ``systems_path`` make the cache key of the tables.
    """

    model_name: str
    system: str
    backend: str
    backend_version: str
    tp: int
    dp: int
    ep: int
    pricing: tuple[tuple[str, str], ...]
    aic_version: str
    systems_path: str | None = None
    grid_version: int = GRID_VERSION

    @property
    def moe(self) -> bool:
        """Whether the model is a mixture of experts (its experts split ``ep`` ways)."""
        return is_moe(self.model_name)

    def aic_layout(self) -> dict[str, int]:
        """The layout as AIC's engine and memory model take it: the TP of a rank, and for a
        mixture-of-experts model the attention-DP ranks and the experts' split (``moe_tp_size``
        x ``moe_ep_size`` = tp x dp GPUs). A dense model's DP ranks are replicas AIC need not
        know of."""
        if not self.moe:
            return {"tp_size": self.tp}
        return {
            "tp_size": self.tp,
            "attention_dp_size": self.dp,
            "moe_ep_size": self.ep,
            "moe_tp_size": self.tp * self.dp // self.ep,
        }

    def layout(self) -> str:
        """The layout in words, e.g. ``tp=1 dp=2 ep=2``."""
        return f"tp={self.tp} dp={self.dp} ep={self.ep}"

    def key(self) -> str:
        """The canonical JSON of the key (stored in the cache file and hashed into its name)."""
        key = asdict(self)
        del key["systems_path"]
        return json.dumps(key, sort_keys=True)

    def file_name(self) -> str:
        """Cache file name: readable inputs plus a hash of the full key."""
        digest = hashlib.sha256(self.key().encode()).hexdigest()[:16]
        model = self.model_name.replace("/", "--")
        return (
            f"{model}_{self.system}_{self.backend}-{self.backend_version}_tp{self.tp}"
            f"_dp{self.dp}_ep{self.ep}_{digest}.npz"
        )


def expert_split_problem(model_name: str, ep: int) -> str | None:
    """Why ``model_name`` cannot have its experts split ``ep`` ways (a dense model has none to
    split), or None.

    Raises:
        ConfigError: AIC does not know the model.
        MissingExtraError: AIConfigurator is not installed.
    """
    if ep != 1 and not is_moe(model_name):
        return (
            "expert parallelism splits the experts of a mixture-of-experts model, but "
            f"{model_name} is dense; got ep={ep}"
        )
    return None


@functools.lru_cache(maxsize=256)
def resolve_aic_timing(spec: AicTiming, cache_dir: Path) -> AicTarget:
    """Check that AIC supports ``spec`` and resolve its backend version and what prices each
    family of operations; no engine is built. ``cache_dir`` holds the private systems folder
    a version outside AIC's queryable ones needs. Resolved once per process and section
    (reading AIC's database takes a third of a second; a plan resolves the same few sections
    for every candidate).

    Raises:
        MissingExtraError: AIConfigurator is not installed.
        ConfigError: the model, system, backend, version or layout is not supported (the
            message names the value and lists the supported ones).
    """
    if spec.backend is None:
        raise ConfigError(
            "timing.backend: unset; in a configuration an aic section prices its engine's "
            "backend (engine.backend), but on its own it must name one"
        )
    config = text_config(bundled_model_config(spec.model_name))
    if not known_versions(spec.system, spec.backend):
        backends = supported_backends(spec.system)  # names an unknown system, or one without data
        raise ConfigError(
            f"AIC has no {spec.backend} data for system {shown(spec.system)}; backends there: "
            f"{', '.join(backends) or 'none'}"
        )
    version = resolve_version(spec.system, spec.backend, spec.backend_version)
    moe = is_moe(spec.model_name)
    if problem := expert_split_problem(spec.model_name, spec.ep):
        raise ConfigError(f"timing.ep (--ep): {problem}")
    # The all-reduce spans the GPUs of one rank (tp); a MoE model's experts span tp x dp / ep.
    comm_gpus = {spec.tp} | ({spec.tp * spec.dp // spec.ep} if moe else set())
    # tp=1 needs no all-reduce data; reading it (pandas, parquet) costs half a second.
    if comm_gpus != {1}:
        sizes = supported_tp(spec.system, spec.backend, version)
        missing = sorted(comm_gpus - set(sizes))
        if missing:
            raise ConfigError(
                f"timing.tp (--tp/--dp/--ep): AIC has no all-reduce measurement over "
                f"{missing[0]} GPUs on {spec.system} with {spec.backend} {version} (layout "
                f"tp={spec.tp} "
                f"dp={spec.dp} ep={spec.ep}); all-reduce sizes measured: "
                f"{', '.join(map(str, sizes))}"
            )
    heads = config.get("num_attention_heads")
    if isinstance(heads, int) and heads % spec.tp:
        raise ConfigError(
            f"timing.tp: {spec.tp} does not divide the {heads} attention heads of {spec.model_name}"
        )
    pricing = pricing_versions(spec.system, spec.backend, version)
    overlay = None
    if not is_slot(spec.system, spec.backend, version):
        overlay = str(systems_overlay(spec.system, spec.backend, version, pricing, cache_dir))
    return AicTarget(
        model_name=spec.model_name,
        system=spec.system,
        backend=spec.backend,
        backend_version=version,
        tp=spec.tp,
        dp=spec.dp,
        ep=spec.ep,
        pricing=tuple(sorted(pricing.items())),
        aic_version=aic_version(),
        systems_path=overlay,
    )


__all__ = ["GRID_VERSION", "AicTarget", "expert_split_problem", "resolve_aic_timing"]
