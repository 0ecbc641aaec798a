"""What a replay's report says in words, wherever a user reads it (the command line's summary,
``offline_replay_bench``, the HTML page): what was simulated, which requests were rejected and
why, which link or tier ran saturated, the capacities its time series fill, and the
configuration with the values the replay used."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dynosim.views.series import bucket_widths, link_names, resolved_view

if TYPE_CHECKING:
    from dynosim.config import EngineConfig
    from dynosim.config.resolved import RoleView

#: Use (a link's busy share, a tier's filled share) above which a replay is called saturated.
SATURATED = 0.95


def _layout(role: Mapping[str, Any]) -> str:
    """``TP2``, ``TP1 x DP2 (EP2)``: one worker's GPUs (``role``: a role of
    :func:`~dynosim.views.series.resolved_view`)."""
    engine = role["engine"]
    text = f"TP{engine['tensor_parallel_size']}"
    if engine["data_parallel_size"] > 1:
        text += f" x DP{engine['data_parallel_size']}"
    ep = role["timing"].get("ep", 1)  # aic timing only
    return text + (f" (EP{ep})" if ep > 1 else "")


def _timing(role: Mapping[str, Any], provenance: Mapping[str, Any]) -> str:
    """The model, GPU and step-time model a role runs, in words."""
    t = role["timing"]
    if t["model"] == "aic":
        made = (provenance.get("timing") or {}).get(role["timing_path"]) or {}
        backend = t["backend"] or role["engine"]["backend"]
        version = made.get("backend_version") or t["backend_version"] or "current"
        return f"{t['model_name']} on {t['system']} (AIC timing of {backend} {version})"
    if t["model"] == "polynomial":
        return "no model or GPU: uncalibrated polynomial timing (Dynamo mocker's)"
    if t["model"] == "fixed":
        return (
            f"no model or GPU: uncalibrated fixed timing ({t['prefill_ms']:g} ms a prefilling "
            f"pass, {t['decode_ms']:g} ms a decoding one)"
        )
    if t["model"] == "table":
        return "no model named: measured table timing (step times on grids)"
    return "no model named: operator-table timing"


def deployment(report: Any) -> str:
    """One line on what a replay simulated: model and GPU system with the timing model (or
    that the timing is uncalibrated), then the engine flavour and layout of each role: TP, DP
    and EP per worker, worker counts, prefill and decode pools, GPUs in all."""
    # The core's view, not the models: the command line's summary prints this without them.
    view = resolved_view(report.config)
    provenance = report.provenance or {}
    roles = view["roles"]
    num_gpus = view["num_gpus"]
    gpus = f"{num_gpus:,} GPU{'s' if num_gpus != 1 else ''}"

    def pool(role: Mapping[str, Any]) -> str:
        return f"{role['engine']['backend']} {_layout(role)}"

    if len(roles) == 1:
        (role,) = roles
        plural = "s" if role["workers"] != 1 else ""
        layout = f"aggregated: {role['workers']} {pool(role)} worker{plural} ({gpus})"
    else:
        prefill, decode = roles
        layout = (
            f"disaggregated: {prefill['workers']} prefill ({pool(prefill)}) + "
            f"{decode['workers']} decode ({pool(decode)}) workers ({gpus})"
        )
    timings = [_timing(role, provenance) for role in roles]
    if len(set(timings)) == 1:
        return f"{timings[0]}; {layout}"
    return f"{layout}; " + "; ".join(
        f"{r['role']}: {t}" for r, t in zip(roles, timings, strict=True)
    )


def _capacity(engine: EngineConfig) -> str:
    blocks = engine.num_gpu_blocks or 0
    block = engine.setting("block_size")
    return f"{blocks:,} blocks of {block} tokens"


def _why(reason: str, view: Any) -> str:
    """What a rejection reason means for this configuration, and what would avoid it."""
    roles = list(view.roles.values())
    if reason == "prompt_exceeds_pass_token_budget":
        budget = roles[0].engine.pass_token_budget
        return (
            f"longer than one pass's token budget ({budget:,}) of an engine that does not chunk "
            "prompts (TensorRT-LLM's chunked context is off by default): set "
            "engine.enable_chunked_context: true (--config), or a --max-num-batched-tokens "
            "above the longest prompt"
        )
    caches = ", ".join(
        (f"{r.role}: " if len(roles) > 1 else "") + _capacity(r.engine) for r in roles
    )
    what = ", with their output," if reason == "prompt_plus_output_exceeds_kv_cache" else ""
    return (
        f"needing{what} more KV blocks than one rank's cache holds ({caches}): give more "
        "--num-gpu-blocks (with --timing aic: more GPUs per rank, --tp)"
    )


def rejections(report: Any) -> list[str]:
    """Lines on the requests a replay rejected ([] when none): how many, their share, and each
    reason with its count (most first), the prompt lengths it hit and what would avoid it."""
    s = report.summary
    rejected = int(s["rejected_requests"])
    if not rejected:
        return []
    total = int(s["num_requests"])
    lines = [
        f"{rejected:,} of {total:,} requests rejected ({100.0 * rejected / total:.1f} %); "
        f"the latencies cover the {int(s['completed_requests']):,} completed"
    ]
    from dynosim.config import SimConfig, resolve

    view = resolve(SimConfig.model_validate(report.config))
    rows, reasons = zip(*report.rejections(), strict=True)
    prompts = np.asarray(report.requests["input_length"])[list(rows)]
    reasons = np.asarray(reasons)
    by_count = sorted(s["rejections_by_reason"].items(), key=lambda kv: (-kv[1], kv[0]))
    for reason, count in by_count:
        hit = prompts[reasons == reason]
        span = f"{hit.min():,}" if hit.min() == hit.max() else f"{hit.min():,}-{hit.max():,}"
        lines.append(f"{count:,} {reason}: prompts of {span} tokens, {_why(reason, view)}")
    return lines


@dataclass(frozen=True)
class Capacity:
    """What a replay's time series can reach: KV blocks per worker (each worker's role's
    ``num_gpu_blocks`` x its DP ranks), and with offload tiers the blocks G2 and G3 hold in
    all (None: no such tier)."""

    kv_blocks: dict[str, int]
    g2_blocks: int | None
    g3_blocks: int | None


def capacity(report: Any) -> Capacity:
    """The :class:`Capacity` of a replay, by role (``aggregated``, ``prefill``, ``decode``)."""
    from dynosim.config import SimConfig, resolve

    config = SimConfig.model_validate(report.config)
    view = resolve(config)
    kv = {
        name: int(role.engine.num_gpu_blocks or 0) * role.engine.data_parallel_size
        for name, role in view.roles.items()
    }
    ranks = sum(r.workers * r.engine.data_parallel_size for r in view.roles.values())
    tiers = config.offload
    g2 = None if tiers.g2_blocks is None else tiers.g2_blocks * ranks
    g3 = None
    if tiers.g3_blocks is not None:
        g3 = tiers.g3_blocks * (1 if tiers.g3_shared else ranks)
    return Capacity(kv, g2, g3)


def _filled(report: Any, name: str) -> float:
    """A series' time-weighted mean over the whole replay."""
    widths = bucket_widths(report)
    means = np.asarray(report.timeseries[name]["mean"], dtype=float)
    total = widths.sum()
    return float((means * widths).sum() / total) if total > 0 else 0.0


#: The tier links the summary measures, by key of ``summary.offload.link_utilization``.
_TIER_LINKS = {
    "g1_to_g2": "G1->G2 (copies down to host memory)",
    "g2_to_g1": "G2->G1 (onboards from host memory)",
    "g2_to_g3": "G2->G3 (copies down to disk)",
    "g3_to_g2": "G3->G2 (onboards from disk)",
}


def saturation(report: Any) -> list[str]:
    """A warning line per KV-transfer link, tier link and offload tier used above
    :data:`SATURATED` over the whole replay (a link's busy share, a tier's filled share):
    what waits on it, and by how much."""
    s = report.summary
    lines = []
    use = s.get("link_utilization") or []
    names = link_names(report.config) if use else []
    hot = [(name, u) for name, u in zip(names, use, strict=True) if u > SATURATED]
    if hot:
        listed = ", ".join(f"{name} {100.0 * u:.1f} %" for name, u in hot)
        lines.append(
            f"KV-transfer link{'s' if len(hot) > 1 else ''} saturated (used over "
            f"{100 * SATURATED:.0f} % of the replay): {listed}; transfers queue for "
            f"{'them' if len(hot) > 1 else 'it'} (transfer ms p99 "
            f"{s['transfer_ms']['p99']:,.1f})"
        )
    offload = s.get("offload")
    if offload:
        for key, what in _TIER_LINKS.items():
            u = offload["link_utilization"].get(key, 0.0)
            if u > SATURATED:
                lines.append(
                    f"tier link {what} saturated: used {100.0 * u:.1f} % of the replay; "
                    "its flows queue"
                )
        cap = capacity(report)
        for tier, total in (("G2", cap.g2_blocks), ("G3", cap.g3_blocks)):
            if not total:
                continue
            held = _filled(report, f"{tier.lower()}_blocks_used")
            if held > SATURATED * total:
                lines.append(
                    f"{tier} tier full: it held {100.0 * held / total:.1f} % of its "
                    f"{total:,} blocks on average over the replay; what it evicts is "
                    + ("copied down to G3" if tier == "G2" and cap.g3_blocks else "dropped")
                )
    return lines


def _engine_used(engine: EngineConfig) -> dict[str, Any]:
    """An engine section with every setting its flavour has at the value used; settings of
    other flavours (which it cannot have) left out."""
    return {
        name: engine.setting(name)
        for name in type(engine).model_fields
        if engine.setting(name) is not None
    }


def _timing_used(view: RoleView, provenance: Mapping[str, Any]) -> dict[str, Any]:
    data = view.timing.model_dump()
    if data["model"] == "aic":
        made = (provenance.get("timing") or {}).get(view.timing_path) or {}
        data["backend"] = data["backend"] or view.engine.backend
        data["backend_version"] = made.get("backend_version") or data["backend_version"]
    # Measured grids are the report's data, not settings to read: shown by their size.
    return {
        key: f"{np.shape(value)} grid" if isinstance(value, list) and len(value) > 8 else value
        for key, value in data.items()
        if value is not None
    }


def used_config(report: Any) -> dict[str, Any]:
    """The configuration a replay ran, every setting at the value it used: each role's engine
    with its flavour's defaults filled in, each role's timing (an AIC section with the engine
    and version that priced it), KV transfers and offload tier rates resolved; settings the
    replay had no use for (the other mode's worker counts, other flavours' settings, unset
    limits, transfers in aggregated serving, tier rates without tiers) left out."""
    from dynosim.config import SimConfig, resolve

    config = SimConfig.model_validate(report.config)
    view = resolve(config)
    provenance = report.provenance or {}
    disaggregated = config.cluster.mode == "disaggregated"
    idle = {"num_workers"} if disaggregated else {"num_prefill_workers", "num_decode_workers"}
    out: dict[str, Any] = {
        "cluster": {
            k: v for k, v in config.cluster.model_dump().items() if v is not None and k not in idle
        }
    }
    for name, role in view.roles.items():
        section = {"engine": _engine_used(role.engine), "timing": _timing_used(role, provenance)}
        if disaggregated:
            out[name] = section
        else:
            out.update(section)
    if disaggregated:
        t = view.kv_transfer
        out["kv_transfer"] = {
            "kv_bytes_per_token": t.bytes_per_token,
            "bandwidth_gbps": t.send_gbps if t.send_gbps is not None else "instant transfers",
            "decode_bandwidth_gbps": t.recv_gbps if t.recv_gbps is not None else "instant",
            "link_model": t.link_model,
            "sizing": t.sizing,
            "first_token": t.first_token,
        }
        out["kv_transfer"] = {k: v for k, v in out["kv_transfer"].items() if v is not None}
    if view.offload is not None:
        tiers = {k: v for k, v in config.offload.model_dump().items() if v is not None}
        out["offload"] = {**tiers, **vars(view.offload)}
    sla = {k: v for k, v in config.sla.model_dump().items() if v is not None}
    if sla:
        out["sla"] = sla
    out["report"] = config.report.model_dump()
    return out


__all__ = [
    "SATURATED",
    "Capacity",
    "capacity",
    "deployment",
    "rejections",
    "saturation",
    "used_config",
]
