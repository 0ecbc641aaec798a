"""Which version of a serving engine's measurements prices each operation.

AIConfigurator (AIC) keeps its measurements per system in families of operations (``gemm``,
``attention``, ``comm`` for the all-reduce, ``moe``, ...), each under
``<family>/<backend>/<version>/``, and often holds only part of them for a version: on
``rtx_pro_6000_server`` vLLM 0.19.0 has all-reduce data only, while GEMM and attention data exist
for 0.24.0. The engine version a user runs is priced here family by family: with that version's
own data where AIC has it, else the newest older version (AIC's own backward fill), else the
closest newer one. AIC answers only for the versions it lists as queryable (its "slots"), so a
version outside them is priced through a private copy of AIC's systems folder (links to AIC's
files plus a ``reuse.yaml`` per family that takes a newer version, and the version added to the
slots), built once in dynosim's cache folder.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import yaml

from dynosim._dependencies import aic_core
from dynosim._shown import shown
from dynosim.errors import ConfigError


def aic_version() -> str:
    """The installed ``aiconfigurator-core`` version (part of every cache key)."""
    aic_core()
    return importlib.metadata.version("aiconfigurator-core")


def version_key(version: str) -> tuple:
    """A sortable key of a version string, as AIC orders versions."""
    return aic_core("sdk.perf_database")._version_sort_tuple(version)


def _systems_root() -> Path:
    return Path(aic_core("sdk.perf_database").get_systems_paths()[0])


def _data_dir(system: str) -> Path:
    spec = aic_core("sdk.perf_database").load_system_spec(system) or {}
    return _systems_root() / spec.get("data_dir", f"data/{system}")


def family_versions(system: str, backend: str) -> dict[str, list[str]]:
    """For each family of operations, the versions of ``backend`` that hold measurements on
    ``system`` (oldest first)."""
    out: dict[str, list[str]] = {}
    root = _data_dir(system)
    if not root.is_dir():
        return out
    for family in sorted(p for p in root.iterdir() if (p / backend).is_dir()):
        versions = [
            v.name for v in (family / backend).iterdir() if v.is_dir() and any(v.glob("*.parquet"))
        ]
        if versions:
            out[family.name] = sorted(versions, key=version_key)
    return out


def pricing_versions(system: str, backend: str, version: str) -> dict[str, str]:
    """For each family of operations, the version whose measurements price it when ``backend``
    ``version`` runs on ``system``: its own, else the newest older, else the closest newer."""
    want = version_key(version)
    out = {}
    for family, versions in family_versions(system, backend).items():
        older = [v for v in versions if version_key(v) <= want]
        out[family] = older[-1] if older else versions[0]
    return out


def known_versions(system: str, backend: str) -> list[str]:
    """Every version of ``backend`` that holds measurements of some family on ``system``, plus
    AIC's queryable slots (oldest first)."""
    slots = aic_core("sdk.perf_database").get_version_slots(system, backend) or {}
    found = {v for vs in family_versions(system, backend).values() for v in vs}
    return sorted(found | {v for v in slots.values() if v}, key=version_key)


def resolve_version(system: str, backend: str, requested: str | None) -> str:
    """The version ``requested`` names: AIC's current one when None, a slot when ``current``,
    ``previous`` or ``next``, else itself if AIC holds any measurement of it.

    Raises:
        ConfigError: AIC has no such version (the message lists the versions it has).
    """
    pdb = aic_core("sdk.perf_database")
    slots = pdb.get_version_slots(system, backend) or {}
    known = known_versions(system, backend)
    if requested is None:
        version = slots.get("current") or pdb.get_latest_database_version(system, backend)
    elif requested in ("current", "previous", "next"):
        version = slots.get(requested)
    else:
        version = requested
    if version is None or version not in known:
        aliases = ", ".join(f"{k}={v}" for k, v in slots.items() if v)
        raise ConfigError(
            f"timing.backend_version (--backend-version): AIC has no {backend} version "
            f"{shown(requested)} for system {shown(system)}; versions with "
            f"measurements: {', '.join(known) or 'none'}"
            + (f" (aliases: {aliases})" if aliases else "")
        )
    return version


def is_slot(system: str, backend: str, version: str) -> bool:
    """Whether AIC answers for ``version`` by itself (one of its queryable slots)."""
    slots = aic_core("sdk.perf_database").get_version_slots(system, backend) or {}
    return version in slots.values()


def systems_overlay(
    system: str, backend: str, version: str, pricing: Mapping[str, str], cache_dir: Path
) -> Path:
    """A copy of AIC's systems folder (links to its files) in which ``version`` is a queryable
    slot and every family that holds no measurement at or below it takes the newer version
    ``pricing`` names; built once under ``cache_dir``, then reused."""
    key = json.dumps([system, backend, version, dict(pricing), str(_systems_root()), aic_version()])
    root = cache_dir / f"systems-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    if root.is_dir():
        return root
    source = _systems_root()
    tmp = root.with_name(f".{root.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "data").mkdir(parents=True)
    for entry in source.iterdir():
        if entry.name not in ("data", "query_versions.yaml", "__pycache__"):
            (tmp / entry.name).symlink_to(entry)
    data_dir = _data_dir(system)
    for entry in (source / "data").iterdir():
        if entry != data_dir:
            (tmp / "data" / entry.name).symlink_to(entry)
    own = tmp / data_dir.relative_to(source)
    for family in data_dir.iterdir():
        for bk in (p for p in family.iterdir() if p.is_dir()):
            for ver in (p for p in bk.iterdir() if p.is_dir()):
                (own / family.name / bk.name).mkdir(parents=True, exist_ok=True)
                (own / family.name / bk.name / ver.name).symlink_to(ver)
    want = version_key(version)
    for family, donor in pricing.items():
        if version_key(donor) <= want:
            continue  # AIC's own backward fill takes it
        donor_dir = data_dir / family / backend / donor
        target = own / family / backend / version
        target.mkdir(parents=True, exist_ok=True)
        reuse = [
            {
                "table": table.stem,
                "from_version": donor,
                "reason": f"dynosim: no {family} measurement at or below {version}",
                "approved_by": "dynosim",
            }
            for table in sorted(donor_dir.glob("*.parquet"))
        ]
        (target / "reuse.yaml").write_text(yaml.safe_dump({"schema_version": 1, "reuse": reuse}))
    queries = yaml.safe_load((source / "query_versions.yaml").read_text()) or {}
    slots = aic_core("sdk.perf_database").get_version_slots(system, backend) or {}
    overrides = queries.setdefault("overrides", {}).setdefault(system, {})
    overrides[backend] = {"current": slots.get("current") or version, "previous": version}
    (tmp / "query_versions.yaml").write_text(yaml.safe_dump(queries))
    try:
        tmp.rename(root)
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return root


__all__ = [
    "aic_version",
    "family_versions",
    "is_slot",
    "known_versions",
    "pricing_versions",
    "resolve_version",
    "systems_overlay",
    "version_key",
]
