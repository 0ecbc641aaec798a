"""The configuration as the replay reads it, computed by the core: each role's engine and
timing (a role's own section, else the shared one) and where they came from, the effective
KV-transfer settings, and the worker and GPU counts. Code that needs these reads this view
rather than resolving role overrides or unset values itself."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import TypeAdapter

from dynosim import _core
from dynosim._defaults import FirstToken, LinkModel, TransferSizing
from dynosim.config.models import EngineConfig, TimingConfig

if TYPE_CHECKING:
    from dynosim.config.models import SimConfig

Role = Literal["aggregated", "prefill", "decode"]

_TIMING: TypeAdapter[TimingConfig] = TypeAdapter(TimingConfig)


@dataclass(frozen=True)
class RoleView:
    """One role of the cluster as it runs: its worker count, GPUs per worker (TP x DP), engine
    and timing, and the dotted paths those sections came from (``prefill.engine`` when the
    role has its own, else ``engine``)."""

    role: Role
    workers: int
    gpus_per_worker: int
    engine: EngineConfig
    timing: TimingConfig
    engine_path: str
    timing_path: str


@dataclass(frozen=True)
class TransferView:
    """KV transfers with every unset value resolved. ``bytes_per_token`` is the whole model's
    (None: not given); bandwidths in GB/s (None: instant transfers, and ``link_model`` None)."""

    bytes_per_token: float | None
    send_gbps: float | None
    recv_gbps: float | None
    link_model: LinkModel | None
    sizing: TransferSizing
    first_token: FirstToken


@dataclass(frozen=True)
class TierRates:
    """The offload tiers' link rates with every unset value resolved (GB/s): reads go up a
    tier (onboards), writes down (offloads)."""

    g1_g2_read_gbps: float
    g1_g2_write_gbps: float
    g2_g3_read_gbps: float
    g2_g3_write_gbps: float


@dataclass(frozen=True)
class Resolved:
    """The roles the serving mode runs (aggregated, or prefill then decode), the transfer
    settings, the offload tiers' rates (None: no tiers), and all workers and GPUs together."""

    roles: dict[str, RoleView]
    kv_transfer: TransferView
    offload: TierRates | None
    num_workers: int
    num_gpus: int


def role_view(role: dict[str, Any]) -> RoleView:
    """One role of the core's resolved view (its JSON, read) as a :class:`RoleView`."""
    return RoleView(
        role=role["role"],
        workers=role["workers"],
        gpus_per_worker=role["gpus_per_worker"],
        engine=EngineConfig.model_validate(role["engine"]),
        timing=_TIMING.validate_python(role["timing"]),
        engine_path=role["engine_path"],
        timing_path=role["timing_path"],
    )


def resolve(config: SimConfig) -> Resolved:
    """The :class:`Resolved` view of ``config``."""
    data = json.loads(_core.resolve_config_json(config.model_dump_json()))
    return Resolved(
        roles={r["role"]: role_view(r) for r in data["roles"]},
        kv_transfer=TransferView(**data["kv_transfer"]),
        offload=None if data["offload"] is None else TierRates(**data["offload"]),
        num_workers=data["num_workers"],
        num_gpus=data["num_gpus"],
    )


__all__ = ["Resolved", "Role", "RoleView", "TierRates", "TransferView", "resolve", "role_view"]
