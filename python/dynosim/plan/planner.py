"""``dynosim.plan``: the deployment that serves a workload within an SLA on the fewest GPUs.

The layouts are those AIConfigurator's default mode considers: aggregated workers of each TP
size, and disaggregated prefill and decode workers of each pair of TP sizes (with DP and EP sizes
when given), disaggregated ones moving KV over the links the system has (each GPU's network link,
from AIC's system spec, unless the base or ``kv_link_gbps`` says otherwise). Each is timed with
AIC (``aic`` timing per role) and given the KV cache its GPUs hold (:mod:`dynosim.sizing`, as
every replay). The engine settings that decide whether an engine takes the trace and how fast
(chunked prefill, the pass token budget, the batch cap) are searched with the worker counts
(:mod:`dynosim.plan.engines`): the ladder pruned by the trace's own facts, each setting first
tried on the trace's two longest requests (a setting that rejects one is never replayed in
full, and never picked), then :mod:`dynosim.plan.search` finds each layout's fewest GPUs:
aggregated layouts first, disaggregated ones within the fewest GPUs those found.
Candidates are :class:`~dynosim.deploy.Candidate` objects turned into configurations by
:meth:`~dynosim.deploy.Candidate.to_config`, and the pick is rendered from
:meth:`~dynosim.deploy.Candidate.from_config` of the configuration replayed, so the deployment
simulated and the one rendered, its engine settings included, are the same by construction.
Replays are numbered by layout, setting and worker counts, so identical plans number them
identically whatever order they finish in.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import RootModel

from dynosim._cache import default_cache_dir
from dynosim._defaults import MODES
from dynosim._plan_defaults import (
    DEFAULT_SEARCH,
    PLAN_BACKEND,
    PLAN_DP,
    PLAN_EP,
    PLAN_TP,
    SEARCHES,
)
from dynosim.aic import resolve_aic_timing
from dynosim.aic.database import gpu_links_gbps
from dynosim.aic.generator import dynamo_release
from dynosim.config import AicTiming, SimConfig, load_config, load_settings_file, resolve
from dynosim.deploy import (
    Candidate,
    Problem,
    RenderedManifest,
    RenderOptions,
    WorkerRole,
    lower_workload,
    render_dgd,
    validate_manifest,
)
from dynosim.deploy.candidate import ENGINE_SETTINGS
from dynosim.deploy.lowering import LoweredWorkload
from dynosim.errors import ConfigError, DynosimError
from dynosim.plan import explain
from dynosim.plan import search as searching
from dynosim.plan.engines import (
    EngineSettings,
    Key,
    Ladder,
    LayoutOutcome,
    base_engine,
    engine_ladder,
    layout_search,
    listed,
)
from dynosim.plan.executors import Runner
from dynosim.plan.result import SweepResult, metrics_row
from dynosim.plan.sla import Sla
from dynosim.plan.sweep import WorkloadLike, progress_bar, with_goodput_sla, workload_columns
from dynosim.plan.timing import TimingTables
from dynosim.replay import replay as replay_once
from dynosim.sizing import resolve_sizes
from dynosim.workload import TraceColumns, TraceWorkload, load_trace
from dynosim.workload.columns import csr_take
from dynosim.workload.prepared import PreparedWorkload

#: Columns that label a plan's rows, before the metrics.
SETTINGS = (
    "layout",
    "tp",
    "prefill_tp",
    "decode_tp",
    "dp",
    "ep",
    "chunked_prefill",
    "max_num_tokens",
    "chunk_size",
    "max_batch_size",
    "replicas",
    "prefill_workers",
    "decode_workers",
    "within_max_gpus",
)

#: Layouts whose other engine settings are searched at once, after every layout's reference
#: setting: the most promising first (fewest GPUs, then closest to the SLA), each wave below
#: the fewest GPUs the waves before it found. Fixed, so a plan replays the same candidates on
#: any machine.
WAVE = 2


@dataclass(frozen=True)
class Layout:
    """A serving mode with each role's TP size (prefill then decode when disaggregated), the
    DP ranks per worker and the expert split (EP); worker counts and engine settings are what
    the search picks."""

    mode: str
    tps: tuple[int, ...]
    dp: int
    ep: int

    @property
    def roles(self) -> tuple[str, ...]:
        return ("aggregated",) if self.mode == "aggregated" else ("prefill", "decode")

    @property
    def gpus(self) -> tuple[int, ...]:
        """GPUs of one worker of each role."""
        return tuple(tp * self.dp for tp in self.tps)

    def name(self, with_dp: bool, with_ep: bool) -> str:
        """``aggregated tp2`` or ``disaggregated prefill tp2 / decode tp4`` (with ``dp`` and
        ``ep`` when the plan varies them)."""
        if self.mode == "aggregated":
            out = f"aggregated tp{self.tps[0]}"
        else:
            out = f"disaggregated prefill tp{self.tps[0]} / decode tp{self.tps[1]}"
        out += f" dp{self.dp}" if with_dp else ""
        return out + (f" ep{self.ep}" if with_ep else "")


@dataclass
class LayoutResult:
    """One layout's search: its fewest-GPU point meeting the SLA and the engine settings it
    runs (None: none within the limit), how that setting's worker counts were searched, what
    the monotonicity checks found, replays run, the settings that reject a request of the
    trace (each with the reason, never replayed in full), or why the layout could not be
    searched."""

    layout: Layout
    name: str
    best: tuple[int, ...] | None = None
    settings: EngineSettings | None = None
    method: str = ""
    violations: list[str] = field(default_factory=list)
    replays: int = 0
    rejecting: list[str] = field(default_factory=list)
    grid_size: int = 0
    error: str = ""


@dataclass(frozen=True)
class Why:
    """Why a candidate is where it is: ``label`` (``pick``, ``runner-up``, ``pick at fewer
    GPUs``), its row, each of its constraints and the one that binds."""

    label: str
    row: dict[str, Any]
    constraints: list[explain.Constraint]

    @property
    def binding(self) -> explain.Constraint:
        """The constraint that binds (:func:`dynosim.plan.explain.binding`)."""
        return explain.binding(self.constraints)


@dataclass
class PlanResult:
    """What :func:`plan` found.

    ``ranked``: each layout's fewest-GPU row meeting the SLA, fewest GPUs first (ties: the
    larger SLA margin); disaggregated layouts are searched within the fewest GPUs the
    aggregated ones found (pruned searches). ``pick``: the first of them (None when no
    layout meets the SLA); ``candidate`` and ``config`` its deployment (engine settings
    included) and the configuration replayed, with the sizes it was replayed with
    (:mod:`dynosim.sizing`).
    ``pareto``: the front of tokens/s/GPU against tokens/s/user over every replay within the
    GPU limit meeting the SLA. ``replays``: every replay run (probes beyond the limit
    included, marked by ``within_max_gpus``), numbered by layout, setting and point;
    ``grid_size``: layouts x engine settings x points within the limit, what replaying the
    whole grid would cost; ``probes``: the settings tried on the trace's two longest requests
    (their requests replayed alone) before any full replay; ``ladder``: the engine settings
    searched and what the trace's facts pruned (``backend``: the engine they are of).
    ``why``: for the pick, the runner-up and the pick at fewer GPUs (when replayed), or
    without a pick for the two replays that came closest, each constraint and the one that
    binds.
    ``transfer``: for a disaggregated pick, the share of TTFT its KV transfers take
    (:func:`dynosim.plan.explain.transfer_share`). ``rendered`` and ``problems``: the pick's
    manifest and its validation (``render=True``).
    """

    sla: Sla
    max_gpus: int
    layouts: list[LayoutResult]
    replays: SweepResult
    ranked: list[dict[str, Any]]
    pareto: SweepResult
    grid_size: int
    wall_s: float
    ladder: Ladder
    backend: str
    probes: int = 0
    pick: dict[str, Any] | None = None
    candidate: Candidate | None = None
    config: SimConfig | None = None
    why: list[Why] = field(default_factory=list)
    transfer: dict[str, float] | None = None
    rendered: RenderedManifest | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def replays_run(self) -> int:
        """Replays the search ran (probes of the longest requests not counted)."""
        return len(self.replays)

    @property
    def runner_up(self) -> dict[str, Any] | None:
        """The second of ``ranked`` (another layout's fewest GPUs meeting the SLA), or None."""
        return self.ranked[1] if len(self.ranked) > 1 else None

    def why_table(self) -> tuple[list[str], list[list[str]]]:
        """``why`` as a table of text (header, rows): which candidate, its layout, engine
        settings and GPUs, the constraint that binds and by how much, then every constraint."""
        head = ["", "#", "layout", "engine", "GPUs", "binds", "constraints"]
        rows = []
        for why in self.why:
            row = why.row
            rows.append(
                [
                    why.label,
                    str(row["index"]),
                    row["layout"],
                    _row_settings(row).describe(self.backend),
                    str(row["gpus"]),
                    why.binding.describe(),
                    "; ".join(c.describe() for c in why.constraints),
                ]
            )
        return head, rows

    def closest(self, n: int = 5) -> list[dict[str, Any]]:
        """The ``n`` replays within the GPU limit that missed the SLA by the least."""
        inside = [r for r in self.replays.rows if r["within_max_gpus"]]
        return SweepResult(inside, self.replays.settings, self.sla).closest(n)


class _Builder:
    """Configurations of one plan: a layout with engine settings at given worker counts,
    through a Candidate, on the base with the links of the layout's GPUs."""

    def __init__(
        self,
        base: SimConfig,
        *,
        model: str,
        system: str,
        backend: str,
        backend_version: str,
        links: Mapping[str, float] | None,
    ) -> None:
        self.base = base
        self.model, self.system, self.backend = model, system, backend
        self.backend_version = backend_version
        self.block_size = base_engine(backend, base).setting("block_size")
        self.links = links
        self._bases: dict[Layout, SimConfig] = {}

    def candidate(
        self, layout: Layout, settings: EngineSettings, point: Sequence[int]
    ) -> Candidate:
        """The candidate of ``layout`` with ``settings`` at worker counts ``point``; a role's
        own engine section in the base keeps the settings it sets itself."""
        roles = {
            role: WorkerRole(
                replicas=n,
                tensor_parallel_size=tp,
                data_parallel_size=layout.dp,
                expert_parallel_size=layout.ep,
                **self._role_fields(role, settings),
            )
            for role, tp, n in zip(layout.roles, layout.tps, point, strict=True)
        }
        return Candidate(
            mode=layout.mode,
            model=self.model,
            system=self.system,
            backend=self.backend,
            backend_version=self.backend_version,
            block_size=self.block_size,
            **roles,
        )

    def _role_fields(self, role: str, settings: EngineSettings) -> dict[str, Any]:
        fields = settings.role_fields(self.backend)
        own = getattr(self.base, role).engine if role != "aggregated" else None
        if own is None:
            return fields
        keys = {**ENGINE_SETTINGS[self.backend], "max_batch_size": "max_num_seqs"}
        kept = {k for k in own.model_fields_set if getattr(own, k) is not None}
        return {
            name: getattr(own, keys[name]) if keys[name] in kept else value
            for name, value in fields.items()
        }

    def config(self, layout: Layout, settings: EngineSettings, point: Sequence[int]) -> SimConfig:
        """The configuration of ``layout`` with ``settings`` at worker counts ``point``: the
        candidate's on the layout's base; its sizes (each role's KV blocks, the KV bytes of a
        token) are resolved when it is replayed, as every configuration's are."""
        return self.candidate(layout, settings, point).to_config(self.layout_base(layout))

    def layout_base(self, layout: Layout) -> SimConfig:
        """The base with the links of ``layout``'s GPUs where the base leaves them unset: a
        rank's KV send (prefill) and receive (decode) links are its TP GPUs' network links;
        with offload tiers, a rank's G1<->G2 link its GPUs' PCIe links (the smallest rank's)."""
        if self.links is None:
            return self.base
        if layout not in self._bases:
            # Unchecked until the candidate's configuration is: a link needs the KV bytes of a
            # token, which the roles' aic timing (the candidate's) gives.
            update: dict[str, Any] = {}
            transfer, offload = self.base.kv_transfer, self.base.offload
            if layout.mode == "disaggregated" and transfer.bandwidth_gbps is None:
                link = self.links["inter_node"]
                update["kv_transfer"] = transfer.model_copy(
                    update={
                        "bandwidth_gbps": layout.tps[0] * link,
                        "decode_bandwidth_gbps": layout.tps[1] * link,
                    }
                )
            if offload.g2_blocks is not None and "g1_g2_gbps" not in offload.model_fields_set:
                update["offload"] = offload.model_copy(
                    update={"g1_g2_gbps": min(layout.tps) * self.links["pcie"]}
                )
            self._bases[layout] = self.base.model_copy(update=update)
        return self._bases[layout]


def _layouts(
    modes: Sequence[str],
    tp: Sequence[int],
    prefill_tp: Sequence[int] | None,
    decode_tp: Sequence[int] | None,
    dp: Sequence[int],
    ep: Sequence[int],
) -> list[Layout]:
    out = []
    for mode in modes:
        if mode not in MODES:
            raise ConfigError(f"modes: expected {' and/or '.join(MODES)}, got {mode!r}")
    for name, values in (
        ("modes", modes),
        ("tp", tp),
        ("prefill_tp", prefill_tp),
        ("decode_tp", decode_tp),
        ("dp", dp),
        ("ep", ep),
    ):
        if values is not None:
            listed(name, values, positive=name != "modes")
    for d in dp:
        for e in ep:
            if "aggregated" in modes:
                out += [Layout("aggregated", (t,), d, e) for t in tp]
            if "disaggregated" in modes:
                out += [
                    Layout("disaggregated", (p, q), d, e)
                    for p in (prefill_tp or tp)
                    for q in (decode_tp or tp)
                ]
    return out


#: The most GPUs a plan may use: its search lists the points (a worker count per role) within
#: the limit, about max_gpus^2 / 2 of them for a disaggregated layout of 1-GPU workers.
MAX_PLAN_GPUS = 1024


def plan(
    workload: WorkloadLike,
    *,
    model: str,
    system: str,
    sla: Sla | Mapping[str, Any],
    max_gpus: int,
    backend: str = PLAN_BACKEND,
    backend_version: str | None = None,
    modes: Sequence[str] = MODES,
    tp: Sequence[int] = PLAN_TP,
    prefill_tp: Sequence[int] | None = None,
    decode_tp: Sequence[int] | None = None,
    dp: Sequence[int] = PLAN_DP,
    ep: Sequence[int] = PLAN_EP,
    chunked_prefill: Sequence[bool] | None = None,
    token_budgets: Sequence[int] | None = None,
    max_batch_size: Sequence[int] | None = None,
    prune: bool = True,
    kv_link_gbps: float | None = None,
    base: SimConfig | Mapping[str, Any] | str | Path | None = None,
    offload: Mapping[str, Any] | None = None,
    search: str = DEFAULT_SEARCH,
    tolerance: float = 0.02,
    executor: Any = None,
    jobs: int | None = None,
    address: str | None = None,
    progress: bool = True,
    render: bool = False,
    render_options: RenderOptions | Mapping[str, Any] | None = None,
) -> PlanResult:
    """Find the deployment of ``model`` on ``system`` that serves ``workload`` within ``sla``
    on the fewest GPUs, at most ``max_gpus``, with the engine settings it runs.

    Args:
        workload: a trace (``load_trace``), a ``SyntheticWorkload``, columns or a trace path.
        model, system, backend: AIConfigurator names (``Qwen/Qwen3-32B``, ``h200_sxm``,
            ``trtllm``); needs ``pip install 'dynosim[aic]'``.
        sla: limits on TTFT and TPOT statistics (ms), an :class:`Sla` or its fields.
        max_gpus: the most GPUs a deployment may use.
        backend_version: the engine release deployed and timed; None: the one the Dynamo
            release rendered ships (``render_options.dynamo_version``, else AIC's default).
        modes, tp, prefill_tp, decode_tp, dp, ep: the layouts (TP sizes per role, prefill and
            decode TP default to ``tp``; DP ranks per worker; the expert split of a
            mixture-of-experts model over a worker's TP x DP GPUs, each a size a deployment
            can run (:class:`~dynosim.deploy.Candidate`: a layout that is not is reported,
            not searched)).
        chunked_prefill, token_budgets, max_batch_size: the engine settings' rungs (chunked
            prefill on/off; tokens per pass: vLLM ``max_num_batched_tokens``, TensorRT-LLM
            ``max_num_tokens``, SGLang ``chunked_prefill_size``; requests per worker,
            ``max_num_seqs``); defaults in :func:`dynosim.plan.engines.engine_ladder`.
        prune: prune the settings with the trace's facts and search them where a constraint
            binds (:mod:`dynosim.plan.engines`); False: search every setting of the whole
            ladder, none tried on the longest requests first (the slow reference).
        kv_link_gbps: one GPU's link for KV moved between prefill and decode workers (GB/s);
            None: the system's network link per GPU (AIC's ``node.inter_node_bw``). A rank's
            link is its TP GPUs'; a base that sets ``kv_transfer.bandwidth_gbps`` keeps its own.
        base: settings the candidates start from (routing, KV links, offload tiers, block
            size, each role's own engine, ...). Each role's KV blocks follow from its engine's
            ``gpu_memory_utilization`` unless the base gives ``num_gpu_blocks``
            (:mod:`dynosim.sizing`); with offload tiers and no ``g1_g2_gbps`` a rank's G1<->G2
            link is its GPUs' PCIe (AIC's ``node.pcie_bw``). The base is checked timed by
            the plan's model (unless it names its own timing), so links and tiers it sets may
            leave the KV bytes of a token to the model.
        offload: offload tier settings merged into the base's (``g2_blocks``, ...).
        search: ``"bisect"`` (module :mod:`dynosim.plan.search`) or ``"grid"`` (replay every
            point of every setting within the limit).
        tolerance: how much worse (a fraction of the limit) a statistic may get with more
            workers before the bisection is distrusted and a linear scan replaces it.
        executor, jobs, progress: as :func:`dynosim.sweep`; ``address``: the Ray cluster to
            run on (``executor="ray"``; ``ray start --head`` prints it).
        render, render_options: render the pick with AIC and validate the manifest against it.

    Raises:
        ConfigError: bad arguments, ``max_gpus`` past ``MAX_PLAN_GPUS``, or below one worker
            of every layout.
    """
    if isinstance(max_gpus, bool) or not isinstance(max_gpus, int) or max_gpus < 1:
        raise ConfigError(f"max_gpus: expected a positive integer, got {max_gpus!r}")
    if max_gpus > MAX_PLAN_GPUS:
        raise ConfigError(
            f"max_gpus: at most {MAX_PLAN_GPUS:,} (the search walks the pairs of prefill and "
            f"decode worker counts within it), got {max_gpus:,}"
        )
    if search not in SEARCHES:
        raise ConfigError(f"search: expected one of {', '.join(SEARCHES)}, got {search!r}")
    if kv_link_gbps is not None and not (
        isinstance(kv_link_gbps, int | float)
        and not isinstance(kv_link_gbps, bool)
        and math.isfinite(kv_link_gbps)
        and kv_link_gbps > 0
    ):
        raise ConfigError(f"kv_link_gbps: expected a positive number (GB/s), got {kv_link_gbps!r}")
    the_sla = Sla.coerce(sla)
    layouts = _layouts(modes, tp, prefill_tp, decode_tp, dp, ep)
    fitting = [lay for lay in layouts if sum(lay.gpus) <= max_gpus]
    if not fitting:
        smallest = min(layouts, key=lambda lay: sum(lay.gpus))
        raise ConfigError(
            f"max_gpus {max_gpus} is below one worker of every layout: the smallest, "
            f"{smallest.name(smallest.dp != 1, smallest.ep != 1)}, needs "
            f"{sum(smallest.gpus)} GPUs"
        )
    opts = (
        RenderOptions()
        if render_options is None
        else (
            render_options
            if isinstance(render_options, RenderOptions)
            else RenderOptions(**render_options)
        )
    )
    if backend_version is None:
        backend_version = dynamo_release(opts.dynamo_version, backend)[1]
    # Checks model, system, backend and version against AIC before anything runs.
    timing = AicTiming(
        model_name=model, system=system, backend=backend, backend_version=backend_version
    )
    resolve_aic_timing(timing, default_cache_dir() / "aic")
    cfg = with_goodput_sla(_plan_base(base, offload, timing), the_sla)
    links = gpu_links_gbps(system)
    if kv_link_gbps is not None:
        links = {**links, "inter_node": float(kv_link_gbps)}
    builder = _Builder(
        cfg,
        model=model,
        system=system,
        backend=backend,
        backend_version=backend_version,
        links=links,
    )
    if isinstance(workload, str | Path):
        workload = load_trace(workload)
    columns = workload_columns(workload)
    target = (
        workload if not isinstance(workload, TraceColumns) else TraceWorkload.from_columns(workload)
    )
    limits = the_sla.limits()
    lowered = lower_workload(
        target,
        sla_ms=(limits["ttft_ms"][1], limits["tpot_ms"][1])
        if "ttft_ms" in limits and "tpot_ms" in limits
        else None,
    )
    ladder = engine_ladder(
        backend,
        cfg,
        lowered,
        chunked=chunked_prefill,
        budgets=token_budgets,
        max_num_seqs=max_batch_size,
        prune=prune,
    )
    with_dp, with_ep = len(set(dp)) > 1 or dp[0] != 1, len(set(ep)) > 1 or ep[0] != 1
    results = [LayoutResult(lay, lay.name(with_dp, with_ep)) for lay in fitting]
    started = time.perf_counter()
    driver = _Driver(results, builder, ladder, columns, the_sla, max_gpus, prune, backend)
    rows = driver.run(search, tolerance, executor, jobs, address, progress)
    replays = SweepResult(rows, SETTINGS, the_sla)
    ranked = []
    by_key = {_row_key(r): r for r in replays.rows}
    for res in results:
        if res.best is not None and res.settings is not None:
            ranked.append(by_key[(res.name, res.settings, res.best)])
    ranked.sort(key=lambda r: (r["gpus"], r["sla_ratio"], r["index"]))
    inside = SweepResult([r for r in replays.rows if r["within_max_gpus"]], SETTINGS, the_sla)
    out = PlanResult(
        sla=the_sla,
        max_gpus=max_gpus,
        layouts=results,
        replays=replays,
        ranked=ranked,
        pareto=inside.pareto(),
        grid_size=sum(r.grid_size for r in results),
        wall_s=0.0,
        ladder=ladder,
        backend=backend,
        probes=len(driver.probed),
    )
    if ranked:
        out.pick = ranked[0]
        lay = next(r.layout for r in results if r.name == out.pick["layout"])
        settings = _row_settings(out.pick)
        out.config = resolve_sizes(builder.config(lay, settings, _point(out.pick))).config
        out.candidate = Candidate.from_config(out.config)
        if lay.mode == "disaggregated":
            out.transfer = explain.transfer_share(replay_once(columns, out.config).requests)
    out.why = _explain(out, driver, builder, lowered)
    out.wall_s = time.perf_counter() - started
    if render and out.candidate is not None:
        out.rendered = render_dgd(out.candidate, target, opts)
        out.problems = validate_manifest(out.rendered.text, out.rendered.deployed)
    return out


#: Any mapping, as a settings file may hold (checked as a configuration once completed).
_Document = RootModel[dict[str, Any]]


def _plan_base(
    base: SimConfig | Mapping[str, Any] | str | Path | None,
    offload: Mapping[str, Any] | None,
    timing: AicTiming,
) -> SimConfig:
    """The base configuration, with ``offload`` merged into its tiers, checked as the
    candidates will run: its engine of the plan's backend, timed by the plan's model where it
    names no timing of its own, so the links and tiers it sets may leave the KV bytes of a
    token to the model, as every candidate's configuration does."""
    if isinstance(base, SimConfig):
        data = base.model_dump(exclude_unset=True)
    elif isinstance(base, str | Path):
        data = load_settings_file(base, _Document, "configuration").root
    elif base is None or isinstance(base, Mapping):
        data = dict(base or {})
    else:
        return load_config(base)  # its error names what it takes
    if offload:
        data["offload"] = {**data.get("offload", {}), **offload}
    # Every candidate's engines run the plan's backend.
    data["engine"] = {**data.get("engine", {}), "backend": timing.backend}
    data.setdefault("timing", timing.model_dump(exclude_none=True))
    try:
        return SimConfig.model_validate(data)
    except ConfigError as e:
        where = f"{base}: " if isinstance(base, str | Path) else "base: "
        raise ConfigError(f"{where}{e}") from None


def _point(row: Mapping[str, Any]) -> tuple[int, ...]:
    if row["replicas"] is not None:
        return (row["replicas"],)
    return (row["prefill_workers"], row["decode_workers"])


def _row_settings(row: Mapping[str, Any]) -> EngineSettings:
    """The engine settings of a row (SGLang's budget rung is its chunk size)."""
    budget = row["chunk_size"] if row["chunk_size"] is not None else row["max_num_tokens"]
    return EngineSettings(row["chunked_prefill"], budget, row["max_batch_size"])


def _row_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return (row["layout"], _row_settings(row), _point(row))


def _settings_columns(
    layout: Layout, name: str, settings: EngineSettings, point: Sequence[int], backend: str
) -> dict[str, Any]:
    agg = layout.mode == "aggregated"
    fields = settings.role_fields(backend)
    return {
        "layout": name,
        "tp": layout.tps[0] if agg else None,
        "prefill_tp": None if agg else layout.tps[0],
        "decode_tp": None if agg else layout.tps[1],
        "dp": layout.dp,
        "ep": layout.ep,
        "chunked_prefill": fields.get("chunked_prefill"),
        "max_num_tokens": fields.get("max_num_tokens"),
        "chunk_size": fields.get("chunk_size"),
        "max_batch_size": settings.max_num_seqs,
        "replicas": point[0] if agg else None,
        "prefill_workers": None if agg else point[0],
        "decode_workers": None if agg else point[1],
    }


def _grid(max_gpus: int, gpus: Sequence[int], _tolerance: float) -> searching.Search:
    """Replay every point within the limit; the cheapest meeting the SLA (ties: the smallest
    point, as the bisection breaks them)."""
    points = searching.within(max_gpus, gpus)
    seen = yield points
    met = [p for p in points if seen[p].met]
    best = min(met, key=lambda p: (searching.cost(p, gpus), p)) if met else None
    return searching.Outcome(best, "grid")


def _longest(columns: TraceColumns) -> TraceColumns:
    """The trace's longest prompt and longest request (prompt plus output), on their own: a
    setting that cannot take one of them rejects it in the full replay too."""
    prompts = columns.input_length.astype(np.int64)
    totals = prompts + columns.output_length.astype(np.int64)
    rows = np.unique(np.array([int(np.argmax(prompts)), int(np.argmax(totals))]))
    offsets, ids = csr_take(columns.hash_offsets, columns.hash_ids, rows)
    return TraceColumns(
        arrival_ms=np.zeros(len(rows)),
        input_length=np.ascontiguousarray(columns.input_length[rows]),
        output_length=np.ascontiguousarray(columns.output_length[rows]),
        hash_offsets=offsets,
        hash_ids=np.ascontiguousarray(ids),
        trace_block_size=columns.trace_block_size,
    )


class _Driver:
    """Runs every layout's search over one pool: each asks for (setting, point) pairs; a
    setting is first tried on the trace's longest requests (``prune``), one that rejects them
    answered at once; the rest are replayed as workers free up, and a search moves on once all
    it asked for is back."""

    def __init__(
        self,
        results: list[LayoutResult],
        builder: _Builder,
        ladder: Ladder,
        columns: TraceColumns,
        sla: Sla,
        max_gpus: int,
        prune: bool,
        backend: str,
    ) -> None:
        self.results, self.builder, self.ladder = results, builder, ladder
        self.columns, self.sla, self.max_gpus = columns, sla, max_gpus
        self.prune, self.backend = prune, backend
        self.tables = TimingTables()
        self.limits = {m: lim for m, (_, lim) in sla.limits().items()}
        #: (layout index, setting index) -> the probe's rejections: [] when it takes both.
        self.probed: dict[tuple[int, int], list[str]] = {}
        self._longest = PreparedWorkload(_longest(columns)) if prune else None
        #: The probe of each replayed row, by its key.
        self.seen: dict[tuple[Any, ...], searching.Probe] = {}

    def probe(self, k: int, s: int) -> list[str]:
        """What the trace's longest requests meet under setting ``s`` of layout ``k`` at one
        worker per role: the reasons they are rejected ([]: both served)."""
        if (k, s) not in self.probed:
            res = self.results[k]
            lay = res.layout
            config = self.builder.config(lay, self.ladder.settings[s], (1,) * len(lay.roles))
            assert self._longest is not None
            summary = json.loads(self._longest.replay_summary(self.tables.core_json(config)))
            reasons = sorted(summary["rejections_by_reason"])
            self.probed[(k, s)] = reasons
            if reasons:
                res.rejecting.append(
                    f"{self.ladder.settings[s].describe(self.backend)}: the trace's longest "
                    f"requests are rejected ({', '.join(reasons)})"
                )
        return self.probed[(k, s)]

    def run(
        self,
        search: str,
        tolerance: float,
        executor: Any,
        jobs: int | None,
        address: str | None,
        progress: bool,
    ) -> list[dict[str, Any]]:
        """Search every layout; the rows of every replay, numbered by layout, setting and
        point."""
        settings = self.ladder.settings
        rows: list[dict[str, Any]] = []
        gens: dict[int, Any] = {}
        outs: dict[int, LayoutOutcome] = {}
        parked: list[int] = []
        waiting: dict[int, dict[Key, searching.Probe | None]] = {}
        nan = {m: math.nan for m in self.limits}
        with (
            Runner(self.columns, executor, jobs, address=address) as runner,
            progress_bar("replaying", None, progress) as bar,
        ):

            def fail(k: int, reason: str) -> None:
                self.results[k].error = reason
                waiting.pop(k, None)
                gens.pop(k, None)

            def ask(k: int, keys: list[Key]) -> dict[Key, searching.Probe] | None:
                """Submit the replays ``keys`` need; their answers when none does."""
                lay = self.results[k].layout
                answers: dict[Key, searching.Probe | None] = {}
                for s, point in keys:
                    try:
                        rejected = self.probe(k, s) if self.prune else []
                        if rejected:
                            answers[(s, point)] = searching.Probe(
                                False, float(len(rejected)), nan, self.limits
                            )
                            continue
                        config = self.builder.config(lay, settings[s], point)
                        core_json = self.tables.core_json(config)
                    except DynosimError as e:
                        fail(k, f"{type(e).__name__}: {e}")
                        return None
                    runner.submit((k, s, point, config), core_json)
                    answers[(s, point)] = None
                    self.results[k].replays += 1
                if all(a is not None for a in answers.values()):
                    return answers  # type: ignore[return-value]
                waiting[k] = answers
                return None

            def advance(k: int, sent: Any) -> None:
                while k in gens:
                    try:
                        keys = next(gens[k]) if sent is None else gens[k].send(sent)
                    except StopIteration as stop:
                        self._finish(k, stop.value)
                        gens.pop(k)
                        return
                    if not keys:  # done with its reference: waits for the plan-wide bound
                        parked.append(k)
                        return
                    sent = ask(k, keys)
                    if sent is None:
                        return

            def found() -> dict[int, int]:
                """Each searched layout's fewest GPUs so far."""
                return {
                    k: searching.cost(o.best[1], self.results[k].layout.gpus)
                    for k, o in outs.items()
                    if o.best is not None
                }

            every = not self.prune or search == "grid"
            points = searching.search if search == "bisect" else _grid
            for res in self.results:
                res.grid_size = len(searching.within(self.max_gpus, res.layout.gpus)) * (
                    self.ladder.full
                )
            for stage in self._stages(every):
                # A later stage searches within the fewest GPUs the stages before it found.
                limit = min([self.max_gpus, *found().values()])
                for k in stage:
                    outs[k] = LayoutOutcome(None)
                    if sum(self.results[k].layout.gpus) > limit:
                        self.results[k].method = f"not searched: one worker each is over {limit}"
                        continue
                    gens[k] = layout_search(
                        limit,
                        self.results[k].layout.gpus,
                        settings,
                        tolerance,
                        every_setting=every,
                        search_points=points,
                        out=outs[k],
                    )
                    advance(k, None)
                while runner.in_flight or parked:
                    if not runner.in_flight:
                        # Every reference searched (and the waves before): the bound and the
                        # order are the same whatever order replays finished in.
                        cost = found()
                        bound = min(cost.values(), default=self.max_gpus + 1)
                        parked.sort(key=lambda k: (cost.get(k, math.inf), outs[k].closest, k))
                        for k in parked[:WAVE]:
                            advance(k, bound)
                        del parked[:WAVE]
                        continue
                    for (k, s, point, config), outcome in runner.wait():
                        bar.advance()
                        row = self._row(k, s, point, config, outcome)
                        rows.append(row)
                        if k not in waiting:
                            continue  # the layout already failed
                        if outcome.summary_json is None:
                            fail(k, outcome.error)
                            continue
                        waiting[k][(s, point)] = self.seen[_row_key(row)]
                        if all(p is not None for p in waiting[k].values()):
                            advance(k, waiting.pop(k))
        # Numbered by layout, setting and point: the same whatever order replays finished in.
        order = {r.name: k for k, r in enumerate(self.results)}
        rows.sort(
            key=lambda r: (
                order[r["layout"]],
                settings.index(_row_settings(r)),
                _point(r),
            )
        )
        for i, row in enumerate(rows):
            row["index"] = i
        return rows

    def _stages(self, every: bool) -> list[list[int]]:
        """The layouts in the order their searches start: aggregated ones first, then
        disaggregated ones within the fewest GPUs those found (their replays at the most
        workers of each role are the dearest); all at once when every setting is searched."""
        if every:
            return [list(range(len(self.results)))]
        stages = [
            [k for k, r in enumerate(self.results) if r.layout.mode == mode] for mode in MODES
        ]
        return [stage for stage in stages if stage]

    def _row(self, k: int, s: int, point: Any, config: SimConfig, outcome: Any) -> dict[str, Any]:
        res, settings = self.results[k], self.ladder.settings[s]
        view = resolve(config)
        summary = None if outcome.summary_json is None else json.loads(outcome.summary_json)
        row = {
            "index": -1,
            **_settings_columns(res.layout, res.name, settings, point, self.backend),
            "within_max_gpus": searching.cost(tuple(point), res.layout.gpus) <= self.max_gpus,
            **metrics_row(
                summary,
                self.sla,
                mode=res.layout.mode,
                workers=view.num_workers,
                gpus=view.num_gpus,
                wall_ms=outcome.wall_ms,
                error=outcome.error,
            ),
        }
        if summary is not None:
            self.seen[_row_key(row)] = searching.Probe(
                met=row["sla_met"],
                rejected=float(row["rejected"]),
                metrics=self.sla.values(summary),
                limits=self.limits,
            )
        return row

    def _finish(self, k: int, outcome: Any) -> None:
        res, settings = self.results[k], self.ladder.settings
        names = {s: settings[s].describe(self.backend) for s in outcome.methods}
        res.violations = [f"{names[s]}: {v}" for s, v in outcome.violations]
        if outcome.best is not None:
            s, res.best = outcome.best
            res.settings = settings[s]
            res.method = outcome.methods[s]
        else:
            res.method = ", ".join(sorted(set(outcome.methods.values())))


def _explain(
    out: PlanResult, driver: _Driver, builder: _Builder, lowered: LoweredWorkload
) -> list[Why]:
    """The constraints of the pick, the runner-up and the pick at fewer GPUs (the most GPUs
    below the pick its setting was replayed at, which missed the SLA); without a pick, of the
    two replays within the limit that came closest."""
    pick = out.pick
    labelled: list[tuple[str, dict[str, Any]]]
    if pick is None:
        closest = [r for r in out.closest(2) if not r["error"]]
        labelled = list(zip(("closest", "next closest"), closest, strict=False))
        return [_why(label, row, out, driver, builder, lowered) for label, row in labelled]
    cheaper = [
        r
        for r in out.replays.rows
        if r["layout"] == pick["layout"]
        and _row_settings(r) == _row_settings(pick)
        and not r["sla_met"]
        and r["gpus"] < pick["gpus"]
        and not r["error"]
    ]
    labelled = [("pick", pick)]
    if out.runner_up is not None:
        labelled.append(("runner-up", out.runner_up))
    if cheaper:
        labelled.append(
            (
                "pick at fewer GPUs",
                max(cheaper, key=lambda r: (r["gpus"], -r["sla_ratio"], -r["index"])),
            )
        )
    return [_why(label, row, out, driver, builder, lowered) for label, row in labelled]


def _why(
    label: str,
    row: dict[str, Any],
    out: PlanResult,
    driver: _Driver,
    builder: _Builder,
    lowered: LoweredWorkload,
) -> Why:
    """The constraints of one replayed row: its rejections, limited statistics and memory (the
    longest request a rank of each role must hold against its KV cache)."""
    stats = {m: stat for m, (stat, _) in out.sla.limits().items()}
    layout = next(r.layout for r in out.layouts if r.name == row["layout"])
    config = resolve_sizes(builder.config(layout, _row_settings(row), _point(row))).config
    needs = {}
    for role, v in resolve(config).roles.items():
        need = lowered.longest_prompt if role == "prefill" else lowered.longest_request
        needs[role] = (need, v.engine.num_gpu_blocks * v.engine.block_size)
    probe = driver.seen[_row_key(row)]
    memory = explain.memory(needs)
    return Why(label, row, explain.constraints(probe, lowered.requests, stats, memory))


__all__ = [
    "MAX_PLAN_GPUS",
    "SEARCHES",
    "SETTINGS",
    "Layout",
    "LayoutResult",
    "PlanResult",
    "Why",
    "plan",
]
