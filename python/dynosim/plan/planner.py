"""``dynosim.plan``: the deployment that serves a workload within an SLA on the fewest GPUs.

The layouts are those AIConfigurator's default mode considers: aggregated workers of each TP
size, and disaggregated prefill and decode workers of each pair of TP sizes (with DP and EP sizes
and batch caps when given). Each is timed with AIC (``aic`` timing per role) and given the KV
cache its GPUs hold (:mod:`dynosim.sizing`, as every replay); :mod:`dynosim.plan.search` then
finds its fewest GPUs meeting the SLA without replaying every worker count. Candidates are
:class:`~dynosim.deploy.Candidate` objects turned into configurations by
:meth:`~dynosim.deploy.Candidate.to_config`, and the pick is rendered from
:meth:`~dynosim.deploy.Candidate.from_config` of the configuration replayed, so the deployment
simulated and the one rendered are the same by construction.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynosim._cache import default_cache_dir
from dynosim.aic import resolve_aic_timing
from dynosim.aic.generator import dynamo_release
from dynosim.config import AicTiming, SimConfig, load_config, resolve
from dynosim.deploy import (
    Candidate,
    Problem,
    RenderedManifest,
    RenderOptions,
    WorkerRole,
    render_dgd,
    validate_manifest,
)
from dynosim.errors import ConfigError, DynosimError
from dynosim.plan import search as searching
from dynosim.plan.executors import Runner
from dynosim.plan.result import SweepResult, metrics_row
from dynosim.plan.sla import Sla
from dynosim.plan.sweep import WorkloadLike, progress_bar, with_goodput_sla, workload_columns
from dynosim.plan.timing import TimingTables
from dynosim.sizing import resolve_sizes
from dynosim.workload import TraceColumns, TraceWorkload, load_trace

#: Columns that label a plan's rows, before the metrics.
SETTINGS = (
    "layout",
    "tp",
    "prefill_tp",
    "decode_tp",
    "dp",
    "ep",
    "max_batch_size",
    "replicas",
    "prefill_workers",
    "decode_workers",
    "within_max_gpus",
)

#: How a plan searches each layout.
SEARCHES = ("bisect", "grid")


@dataclass(frozen=True)
class Layout:
    """A serving mode with each role's TP size (prefill then decode when disaggregated), the
    DP ranks per worker, the expert split (EP) and the batch cap; worker counts are what the
    search picks."""

    mode: str
    tps: tuple[int, ...]
    dp: int
    ep: int
    max_batch_size: int

    @property
    def roles(self) -> tuple[str, ...]:
        return ("aggregated",) if self.mode == "aggregated" else ("prefill", "decode")

    @property
    def gpus(self) -> tuple[int, ...]:
        """GPUs of one worker of each role."""
        return tuple(tp * self.dp for tp in self.tps)

    def name(self, with_dp: bool, with_ep: bool, with_batch: bool) -> str:
        """``aggregated tp2`` or ``disaggregated prefill tp2 / decode tp4`` (with ``dp``,
        ``ep`` and the batch cap when the plan varies them)."""
        if self.mode == "aggregated":
            out = f"aggregated tp{self.tps[0]}"
        else:
            out = f"disaggregated prefill tp{self.tps[0]} / decode tp{self.tps[1]}"
        out += f" dp{self.dp}" if with_dp else ""
        out += f" ep{self.ep}" if with_ep else ""
        return out + (f" batch {self.max_batch_size}" if with_batch else "")


@dataclass
class LayoutResult:
    """One layout's search: its fewest-GPU point meeting the SLA (None: none within the
    limit), how it was searched, what the monotonicity check found, replays run, or the
    reason the layout could not be searched."""

    layout: Layout
    name: str
    best: tuple[int, ...] | None = None
    method: str = ""
    violations: list[str] = field(default_factory=list)
    replays: int = 0
    grid_size: int = 0
    error: str = ""


@dataclass
class PlanResult:
    """What :func:`plan` found.

    ``ranked``: each layout's fewest-GPU row meeting the SLA, fewest GPUs first (ties: the
    larger SLA margin). ``pick``: the first of them (None when no layout meets the SLA);
    ``candidate`` and ``config`` its deployment and the configuration replayed, with the
    sizes it was replayed with (:mod:`dynosim.sizing`). ``pareto``:
    the front of tokens/s/GPU against tokens/s/user over every replay within the GPU limit
    meeting the SLA. ``replays``: every replay run (probes beyond the limit included, marked
    by ``within_max_gpus``); ``grid_size``: the points within the limit over all layouts, what
    replaying the whole grid would cost. ``rendered`` and ``problems``: the pick's manifest
    and its validation (``render=True``).
    """

    sla: Sla
    max_gpus: int
    layouts: list[LayoutResult]
    replays: SweepResult
    ranked: list[dict[str, Any]]
    pareto: SweepResult
    grid_size: int
    wall_s: float
    pick: dict[str, Any] | None = None
    candidate: Candidate | None = None
    config: SimConfig | None = None
    rendered: RenderedManifest | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def replays_run(self) -> int:
        """Replays the search ran."""
        return len(self.replays)

    def closest(self, n: int = 5) -> list[dict[str, Any]]:
        """The ``n`` replays within the GPU limit that missed the SLA by the least."""
        inside = [r for r in self.replays.rows if r["within_max_gpus"]]
        return SweepResult(inside, self.replays.settings, self.sla).closest(n)


class _Builder:
    """Configurations of one plan: a layout at given worker counts, through a Candidate."""

    def __init__(
        self, base: SimConfig, *, model: str, system: str, backend: str, backend_version: str
    ) -> None:
        self.base = base
        self.model, self.system, self.backend = model, system, backend
        self.backend_version = backend_version
        self.block_size = base.engine.setting("block_size")

    def candidate(self, layout: Layout, point: Sequence[int]) -> Candidate:
        roles = {
            role: WorkerRole(
                replicas=n,
                tensor_parallel_size=tp,
                data_parallel_size=layout.dp,
                expert_parallel_size=layout.ep,
                max_batch_size=layout.max_batch_size,
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

    def config(self, layout: Layout, point: Sequence[int]) -> SimConfig:
        """The configuration of ``layout`` at worker counts ``point``: the candidate's; its
        sizes (each role's KV blocks, the KV bytes of a token) are resolved when it is
        replayed, as every configuration's are."""
        return self.candidate(layout, point).to_config(self.base)


def _layouts(
    modes: Sequence[str],
    tp: Sequence[int],
    prefill_tp: Sequence[int] | None,
    decode_tp: Sequence[int] | None,
    dp: Sequence[int],
    ep: Sequence[int],
    batches: Sequence[int],
) -> list[Layout]:
    out = []
    for mode in modes:
        if mode not in ("aggregated", "disaggregated"):
            raise ConfigError(f"modes: expected aggregated and/or disaggregated, got {mode!r}")
    for name, values in (
        ("modes", modes),
        ("tp", tp),
        ("prefill_tp", prefill_tp),
        ("decode_tp", decode_tp),
        ("dp", dp),
        ("ep", ep),
        ("max_batch_size", batches),
    ):
        if values is None:
            continue
        if name != "modes" and (
            not values
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values)
        ):
            raise ConfigError(
                f"{name}: expected a non-empty list of positive integers, got {list(values)!r}"
            )
        # A value given twice would search its layouts twice, which adds nothing.
        twice = [v for k, v in enumerate(values) if v in list(values)[:k]]
        if twice:
            raise ConfigError(f"{name}: {twice[0]} is given twice; give each value once")
    for d in dp:
        for e in ep:
            for b in batches:
                if "aggregated" in modes:
                    out += [Layout("aggregated", (t,), d, e, b) for t in tp]
                if "disaggregated" in modes:
                    out += [
                        Layout("disaggregated", (p, q), d, e, b)
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
    backend: str = "trtllm",
    backend_version: str | None = None,
    modes: Sequence[str] = ("aggregated", "disaggregated"),
    tp: Sequence[int] = (1, 2, 4, 8),
    prefill_tp: Sequence[int] | None = None,
    decode_tp: Sequence[int] | None = None,
    dp: Sequence[int] = (1,),
    ep: Sequence[int] = (1,),
    max_batch_size: Sequence[int] | None = None,
    base: SimConfig | Mapping[str, Any] | str | Path | None = None,
    search: str = "bisect",
    tolerance: float = 0.02,
    executor: Any = None,
    jobs: int | None = None,
    progress: bool = True,
    render: bool = False,
    render_options: RenderOptions | Mapping[str, Any] | None = None,
) -> PlanResult:
    """Find the deployment of ``model`` on ``system`` that serves ``workload`` within ``sla``
    on the fewest GPUs, at most ``max_gpus``.

    Args:
        workload: a trace (``load_trace``), a ``SyntheticWorkload``, columns or a trace path.
        model, system, backend: AIConfigurator names (``Qwen/Qwen3-32B``, ``h200_sxm``,
            ``trtllm``); needs ``pip install 'dynosim[aic]'``.
        sla: limits on TTFT and TPOT statistics (ms), an :class:`Sla` or its fields.
        max_gpus: the most GPUs a deployment may use.
        backend_version: the engine release deployed and timed; None: the one the Dynamo
            release rendered ships (``render_options.dynamo_version``, else AIC's default).
        modes, tp, prefill_tp, decode_tp, dp, ep, max_batch_size: the layouts (TP sizes per
            role, prefill and decode TP default to ``tp``; DP ranks per worker; the expert
            split of a mixture-of-experts model over a worker's TP x DP GPUs, each a size a
            deployment can run (:class:`~dynosim.deploy.Candidate`: a layout that is not is
            reported, not searched); batch caps, default the base engine's ``max_num_seqs``).
        base: settings the candidates start from (routing, KV links, block size, each role's
            own engine, ...). Each role's KV blocks follow from its engine's
            ``gpu_memory_utilization`` unless the base gives ``num_gpu_blocks``
            (:mod:`dynosim.sizing`).
        search: ``"bisect"`` (module :mod:`dynosim.plan.search`) or ``"grid"`` (replay every
            point within the limit).
        tolerance: how much worse (a fraction of the limit) a statistic may get with more
            workers before the bisection is distrusted and a linear scan replaces it.
        executor, jobs, progress: as :func:`dynosim.sweep`.
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
    the_sla = Sla.coerce(sla)
    cfg = with_goodput_sla(load_config(base), the_sla)
    batches = list(max_batch_size) if max_batch_size is not None else [cfg.engine.max_num_seqs]
    layouts = _layouts(modes, tp, prefill_tp, decode_tp, dp, ep, batches)
    fitting = [lay for lay in layouts if sum(lay.gpus) <= max_gpus]
    if not fitting:
        smallest = min(layouts, key=lambda lay: sum(lay.gpus))
        raise ConfigError(
            f"max_gpus {max_gpus} is below one worker of every layout: the smallest, "
            f"{smallest.name(smallest.dp != 1, smallest.ep != 1, False)}, needs "
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
    resolve_aic_timing(
        AicTiming(
            model_name=model, system=system, backend=backend, backend_version=backend_version
        ),
        default_cache_dir() / "aic",
    )
    builder = _Builder(
        cfg, model=model, system=system, backend=backend, backend_version=backend_version
    )
    if isinstance(workload, str | Path):
        workload = load_trace(workload)
    columns = workload_columns(workload)
    with_dp, with_ep = len(set(dp)) > 1 or dp[0] != 1, len(set(ep)) > 1 or ep[0] != 1
    with_batch = len(batches) > 1
    results = [LayoutResult(lay, lay.name(with_dp, with_ep, with_batch)) for lay in fitting]
    started = time.perf_counter()
    rows = _drive(
        results, builder, columns, the_sla, max_gpus, search, tolerance, executor, jobs, progress
    )
    replays = SweepResult(rows, SETTINGS, the_sla)
    ranked = []
    by_point = {(r["layout"], _point(r)): r for r in replays.rows}
    for res in results:
        if res.best is not None:
            ranked.append(by_point[(res.name, res.best)])
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
        wall_s=time.perf_counter() - started,
    )
    if not ranked:
        return out
    out.pick = ranked[0]
    lay = next(r.layout for r in results if r.name == out.pick["layout"])
    out.config = resolve_sizes(builder.config(lay, _point(out.pick))).config
    out.candidate = Candidate.from_config(out.config)
    if render:
        target = (
            workload
            if not isinstance(workload, TraceColumns)
            else TraceWorkload.from_columns(workload)
        )
        out.rendered = render_dgd(out.candidate, target, opts)
        out.problems = validate_manifest(out.rendered.text, out.rendered.deployed)
    return out


def _point(row: Mapping[str, Any]) -> tuple[int, ...]:
    if row["replicas"] is not None:
        return (row["replicas"],)
    return (row["prefill_workers"], row["decode_workers"])


def _settings(layout: Layout, name: str, point: Sequence[int], max_gpus: int) -> dict[str, Any]:
    agg = layout.mode == "aggregated"
    return {
        "layout": name,
        "tp": layout.tps[0] if agg else None,
        "prefill_tp": None if agg else layout.tps[0],
        "decode_tp": None if agg else layout.tps[1],
        "dp": layout.dp,
        "ep": layout.ep,
        "max_batch_size": layout.max_batch_size,
        "replicas": point[0] if agg else None,
        "prefill_workers": None if agg else point[0],
        "decode_workers": None if agg else point[1],
        "within_max_gpus": searching.cost(tuple(point), layout.gpus) <= max_gpus,
    }


def _grid(max_gpus: int, gpus: Sequence[int]) -> searching.Search:
    """Replay every point within the limit; the cheapest meeting the SLA (ties: the smallest
    point, as the bisection breaks them)."""
    points = searching.within(max_gpus, gpus)
    seen = yield points
    met = [p for p in points if seen[p].met]
    best = min(met, key=lambda p: (searching.cost(p, gpus), p)) if met else None
    return searching.Outcome(best, "grid")


def _drive(
    results: list[LayoutResult],
    builder: _Builder,
    columns: TraceColumns,
    sla: Sla,
    max_gpus: int,
    search: str,
    tolerance: float,
    executor: Any,
    jobs: int | None,
    progress: bool,
) -> list[dict[str, Any]]:
    """Run every layout's search over one pool: each asks for points, the points are replayed
    as workers free up, and a search moves on once all the points it asked for are back."""
    tables = TimingTables()
    rows: list[dict[str, Any]] = []
    gens: dict[int, searching.Search] = {}
    waiting: dict[int, dict[tuple[int, ...], searching.Probe | None]] = {}
    index = 0
    with (
        Runner(columns, executor, jobs) as runner,
        progress_bar("replaying", None, progress) as bar,
    ):

        def fail(k: int, reason: str) -> None:
            results[k].error = reason
            waiting.pop(k, None)
            gens.pop(k, None)

        def ask(k: int, points: list[tuple[int, ...]]) -> None:
            nonlocal index
            if not points:
                advance(k, {})
                return
            waiting[k] = dict.fromkeys(points)
            lay = results[k].layout
            for point in points:
                try:
                    config = builder.config(lay, point)
                    core_json = tables.core_json(config)
                except DynosimError as e:
                    fail(k, f"{type(e).__name__}: {e}")
                    return
                runner.submit((k, point, index, config), core_json)
                index += 1
                results[k].replays += 1

        def advance(k: int, sent: dict | None) -> None:
            try:
                points = next(gens[k]) if sent is None else gens[k].send(sent)
            except StopIteration as stop:
                outcome: searching.Outcome = stop.value
                results[k].best, results[k].method = outcome.best, outcome.method
                results[k].violations = outcome.violations
                gens.pop(k)
                waiting.pop(k, None)
                return
            ask(k, points)

        for k, res in enumerate(results):
            res.grid_size = len(searching.within(max_gpus, res.layout.gpus))
            if search == "grid":
                gens[k] = _grid(max_gpus, res.layout.gpus)
            else:
                gens[k] = searching.search(max_gpus, res.layout.gpus, tolerance)
            advance(k, None)
        while runner.in_flight:
            for (k, point, i, config), outcome in runner.wait():
                bar.advance()
                view = resolve(config)
                summary = None
                if outcome.summary_json is not None:
                    summary = json.loads(outcome.summary_json)
                lay = results[k].layout
                row = {
                    "index": i,
                    **_settings(lay, results[k].name, point, max_gpus),
                    **metrics_row(
                        summary,
                        sla,
                        mode=lay.mode,
                        workers=view.num_workers,
                        gpus=view.num_gpus,
                        wall_ms=outcome.wall_ms,
                        error=outcome.error,
                    ),
                }
                rows.append(row)
                if k not in waiting:
                    continue  # the layout already failed
                if summary is None:
                    fail(k, outcome.error)
                    continue
                limits = {m: lim for m, (_, lim) in sla.limits().items()}
                waiting[k][point] = searching.Probe(
                    met=row["sla_met"],
                    rejected=float(row["rejected"]),
                    metrics=sla.values(summary),
                    limits=limits,
                )
                if all(p is not None for p in waiting[k].values()):
                    advance(k, dict(waiting[k]))
    return rows


__all__ = ["MAX_PLAN_GPUS", "SEARCHES", "SETTINGS", "Layout", "LayoutResult", "PlanResult", "plan"]
