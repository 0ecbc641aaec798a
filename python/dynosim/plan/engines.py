"""The engine settings a plan searches, and how it searches them with the worker counts.

Each backend's settings that decide whether an engine can take a trace and how fast: chunked
prefill on or off (vLLM's ``enable_chunked_prefill``, TensorRT-LLM's chunked context; SGLang
always chunks), the pass token budget over a small ladder (vLLM ``max_num_batched_tokens``,
TensorRT-LLM ``max_num_tokens``, SGLang ``chunked_prefill_size``) and the batch cap
(``max_num_seqs``). The ladder's default rungs are half, one, two and four times the base
engine's budget, and a quarter, half and all of its batch cap.

Before anything is replayed the trace's own facts prune the ladder (:func:`engine_ladder`):

- chunked prefill off takes a prompt longer than the budget nowhere (the engine rejects it), so
  its rungs below the longest prompt become one rung: the longest prompt in whole KV blocks;
- a batch cap at or above the trace's SLA concurrency (the most requests in flight were each to
  take its SLA time) never binds while requests keep to the SLA, so of those caps only the
  smallest is kept.

A layout is then searched (:func:`layout_search`) with one reference setting, the one closest
to the base engine, by :func:`dynosim.plan.search.search` over worker counts; then, at the most
expensive point that missed the SLA below the cheapest one found, the settings that relieve the
constraint binding there are tried (:func:`moves`: TTFT, a larger budget, a larger cap, the
other chunking; TPOT, a smaller budget, a smaller cap, chunking on), and a setting that meets
the SLA there is searched in turn below it. Settings are searched where a constraint binds,
not over the whole ladder: ``prune=False`` in :func:`dynosim.plan` searches every setting of
the unpruned ladder, the reference this search is tested against.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from dynosim.config import LIMITS, EngineConfig, SimConfig
from dynosim.deploy.candidate import ENGINE_SETTINGS
from dynosim.deploy.lowering import LoweredWorkload
from dynosim.deploy.render import engine_settings_problem
from dynosim.errors import ConfigError
from dynosim.plan import search as searching
from dynosim.plan.sla import over_limits


@dataclass(frozen=True)
class EngineSettings:
    """How a candidate's engines fill a pass: chunked prefill (None for SGLang, which always
    chunks), the pass token budget rung (tokens: vLLM ``max_num_batched_tokens``, TensorRT-LLM
    ``max_num_tokens``, SGLang ``chunked_prefill_size``) and the batch cap (requests)."""

    chunked: bool | None
    budget: int
    max_num_seqs: int

    def role_fields(self, backend: str) -> dict[str, Any]:
        """The settings as a :class:`~dynosim.deploy.WorkerRole`'s fields."""
        out: dict[str, Any] = {"max_batch_size": self.max_num_seqs}
        if backend == "sglang":
            out["chunk_size"] = self.budget
        else:
            out |= {"chunked_prefill": self.chunked, "max_num_tokens": self.budget}
        return out

    def describe(self, backend: str) -> str:
        """The settings in words, e.g. ``chunked on, 16,384 tokens/pass, 128 seqs``."""
        if backend == "sglang":
            return f"chunks of {self.budget:,} tokens, {self.max_num_seqs} seqs"
        chunking = "on" if self.chunked else "off"
        return f"chunked {chunking}, {self.budget:,} tokens/pass, {self.max_num_seqs} seqs"


def base_engine(backend: str, base: SimConfig) -> EngineConfig:
    """The engine a plan of ``backend`` starts from: the base's when it is of ``backend``,
    else that backend's defaults (a base written for another engine sets none of its
    flavour's settings)."""
    return base.engine if base.engine.backend == backend else EngineConfig(backend=backend)


def _budget_field(backend: str) -> str:
    return "chunk_size" if backend == "sglang" else "max_num_tokens"


def listed(name: str, values: Sequence[Any], *, positive: bool = True) -> None:
    """Check a list a plan searches: positive integers (unless ``positive`` is False), at
    least one, each given once (twice would search it twice, which adds nothing).

    Raises:
        ConfigError: naming the list and the value.
    """
    if positive and (
        not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values)
    ):
        raise ConfigError(
            f"{name}: expected a non-empty list of positive integers, got {list(values)!r}"
        )
    twice = [v for k, v in enumerate(values) if v in list(values)[:k]]
    if twice:
        raise ConfigError(f"{name}: {twice[0]} is given twice; give each value once")


@dataclass
class Ladder:
    """The settings a plan searches, closest to the base engine first; how many the ladder
    held before the trace's facts pruned it, and what they pruned and why."""

    settings: list[EngineSettings]
    full: int
    pruned: list[str] = field(default_factory=list)


def engine_ladder(
    backend: str,
    base: SimConfig,
    lowered: LoweredWorkload,
    *,
    chunked: Sequence[bool] | None = None,
    budgets: Sequence[int] | None = None,
    max_num_seqs: Sequence[int] | None = None,
    prune: bool = True,
) -> Ladder:
    """The engine settings a plan of ``backend`` searches, starting from the base engine's.

    Args:
        backend: vllm, trtllm or sglang.
        base: the plan's base configuration: its engine (when of ``backend``) gives the
            budget B and batch cap S the default rungs scale, and its closed-loop
            ``cluster.concurrency`` bounds the requests in flight.
        lowered: the workload's facts (:func:`~dynosim.deploy.lower_workload` with the SLA):
            its longest prompt and its SLA concurrency.
        chunked, budgets, max_num_seqs: the rungs (default: chunking on and off where the
            backend has the switch and AIC renders both, vLLM on only; B/2, B, 2B, 4B tokens;
            S/4, S/2, S requests).
        prune: prune with the trace's facts (module doc); False keeps the whole ladder.

    Raises:
        ConfigError: an empty or non-positive list, chunking off for SGLang (always chunks) or
            for vLLM (AIC cannot render it).
    """
    engine = base_engine(backend, base)
    budget_key = ENGINE_SETTINGS[backend][_budget_field(backend)]
    b0, s0 = int(engine.setting(budget_key)), engine.max_num_seqs
    if budgets is None:
        budgets = sorted({max(1, b0 // 2), b0, 2 * b0, 4 * b0})
    if max_num_seqs is None:
        max_num_seqs = sorted({max(1, s0 // 4), max(1, s0 // 2), s0})
    listed("token_budgets", budgets)
    listed("max_batch_size", max_num_seqs)
    if backend == "sglang":
        if chunked is not None and list(chunked) != [True]:
            raise ConfigError(
                "chunked_prefill: SGLang's engine is simulated always chunking prompts (at "
                f"chunked_prefill_size); expected [true], got {list(chunked)!r}"
            )
        switches: list[bool | None] = [None]
    else:
        switches = [True] if backend == "vllm" else [True, False]
        if chunked is not None:
            if not chunked or any(not isinstance(c, bool) for c in chunked):
                raise ConfigError(
                    f"chunked_prefill: expected a non-empty list of booleans, got {chunked!r}"
                )
            listed("chunked_prefill", chunked, positive=False)
            switches = sorted(set(chunked), reverse=True)
        for switch in switches:
            if problem := engine_settings_problem(backend, switch):
                raise ConfigError(f"chunked_prefill: {problem}")
    full = len(switches) * len(budgets) * len(max_num_seqs)
    pruned: list[str] = []
    rungs = {s: sorted(budgets) for s in switches}
    caps = sorted(max_num_seqs)
    if prune:
        whole = lowered.longest_prompt_blocks(int(engine.setting("block_size")))
        if False in rungs and whole <= LIMITS["max_batched_tokens"]:
            short = [b for b in rungs[False] if b < whole]
            if short:
                rungs[False] = sorted({max(b, whole) for b in rungs[False]})
                pruned.append(
                    f"chunked prefill off: {budget_key} {', '.join(f'{b:,}' for b in short)} "
                    f"would reject the longest prompt ({lowered.longest_prompt:,} tokens); "
                    f"searched at {whole:,} instead (the longest prompt in whole blocks)"
                )
        bounds = [c for c in (lowered.concurrency, base.cluster.concurrency) if c is not None]
        if bounds:
            bound = min(bounds)
            above = [c for c in caps if c >= bound]
            if len(above) > 1:
                caps = [c for c in caps if c < bound] + above[:1]
                pruned.append(
                    f"max_num_seqs {', '.join(map(str, above[1:]))}: at most {bound} requests "
                    "are in flight at once were each to take its SLA time (the trace's "
                    f"concurrency), so no cap above {above[0]} binds"
                )
    settings = [EngineSettings(s, b, c) for s in switches for b in rungs[s] for c in caps]
    chunk0 = (
        engine.setting(ENGINE_SETTINGS[backend]["chunked_prefill"]) if backend != "sglang" else None
    )

    def distance(s: EngineSettings) -> tuple[float, int]:
        return (
            float(s.chunked != chunk0)
            + abs(math.log2(s.budget / b0))
            + abs(math.log2(s.max_num_seqs / s0)),
            settings.index(s),
        )

    return Ladder(sorted(settings, key=distance), full, pruned)


def _nearest(options: Sequence[EngineSettings], budget: int) -> EngineSettings | None:
    return min(options, key=lambda s: (abs(math.log2(s.budget / budget)), s.budget), default=None)


def moves(
    settings: Sequence[EngineSettings], current: EngineSettings, probe: searching.Probe
) -> list[EngineSettings]:
    """The settings of ``settings`` that relieve the limited statistic over its limit by the
    most at ``probe`` (a replay of ``current`` that missed the SLA), most likely first: for
    TTFT a larger budget, a larger cap, the other chunking; for TPOT a smaller budget, a
    smaller cap, chunking on. [] when no limited statistic is over."""
    same = [s for s in settings if s.chunked == current.chunked]

    def step(attr: str, up: bool) -> EngineSettings | None:
        keep = "max_num_seqs" if attr == "budget" else "budget"
        row = [s for s in same if getattr(s, keep) == getattr(current, keep)]
        mine = getattr(current, attr)
        beyond = [s for s in row if (getattr(s, attr) > mine if up else getattr(s, attr) < mine)]
        return min(beyond, key=lambda s: abs(getattr(s, attr) - mine), default=None)

    def toggled(to: bool | None) -> EngineSettings | None:
        if current.chunked is None or to == current.chunked:
            return None
        other = [s for s in settings if s.chunked == to and s.max_num_seqs == current.max_num_seqs]
        return _nearest(other, current.budget)

    ratios = over_limits(probe.metrics, probe.limits)
    if not ratios or max(ratios.values()) <= 1:
        return []
    elif max(ratios, key=lambda m: ratios[m]) == "ttft_ms":
        found = [step("budget", True), step("max_num_seqs", True), toggled(not current.chunked)]
    else:
        found = [step("budget", False), step("max_num_seqs", False), toggled(True)]
    out: list[EngineSettings] = []
    for s in found:
        if s is not None and s != current and s not in out:
            out.append(s)
    return out


#: What a layout search asks for: a setting (index into the layout's settings) at a point.
Key = tuple[int, searching.Point]

#: The most a limited statistic may exceed its limit (as a multiple) at a point where other
#: settings are tried: a setting moves a statistic by tens of percent, not by multiples, so a
#: point further off is left to more workers.
MOVE_REACH = 1.5


@dataclass
class LayoutOutcome:
    """A layout's search: its cheapest (setting index, point) meeting the SLA (None: none
    within the limit), how each setting's worker counts were searched, and what the
    monotonicity checks found (setting index, violation)."""

    best: Key | None
    methods: dict[int, str] = field(default_factory=dict)
    violations: list[tuple[int, str]] = field(default_factory=list)
    #: The smallest worst-statistic-over-limit of the reference's replays (how close it came).
    closest: float = math.inf


def layout_search(
    max_gpus: int,
    gpus: Sequence[int],
    settings: Sequence[EngineSettings],
    tolerance: float = 0.02,
    *,
    every_setting: bool = False,
    search_points: Callable[[int, Sequence[int], float], searching.Search] = searching.search,
    out: LayoutOutcome | None = None,
) -> Generator[list[Key], Any, LayoutOutcome]:
    """The search of one layout (module doc) whose roles take ``gpus`` per worker, over
    ``settings``, filling ``out`` (returned) as it goes.

    It yields batches of (setting index, point) and is sent each one's probe. The first
    setting is the reference (one whose probes report rejections is passed over for the
    next); once its worker counts are searched the search yields ``[]`` and is sent the
    plan-wide bound (the fewest GPUs any layout met the SLA on so far; ``max_gpus + 1`` when
    none did): other settings are then tried only where they could find a point below it, at
    points within ``MOVE_REACH`` of the SLA, and on a layout whose reference met the SLA
    nowhere within the limit only while no layout has. ``every_setting``: search each setting's
    worker counts in turn instead (the unpruned reference; no bound is asked for).
    ``search_points`` searches one setting's worker counts (:func:`dynosim.plan.search.search`,
    or the full grid)."""
    seen: dict[Key, searching.Probe] = {}
    out = LayoutOutcome(None) if out is None else out

    def run(k: int, limit: int) -> Generator:
        """Search setting ``k`` within ``limit`` GPUs; its cheapest point meeting the SLA."""
        gen = search_points(limit, gpus, tolerance)
        try:
            points = next(gen)
            while True:
                ask = [(k, p) for p in points if (k, p) not in seen]
                if ask:
                    seen.update((yield ask))
                points = gen.send({p: seen[(k, p)] for p in points})
        except StopIteration as stop:
            found: searching.Outcome = stop.value
        out.methods[k] = found.method
        out.violations += [(k, v) for v in found.violations]
        return found.best

    def better(a: Key | None, b: Key) -> bool:
        return a is None or (searching.cost(b[1], gpus), b) < (searching.cost(a[1], gpus), a)

    if every_setting:
        for k in range(len(settings)):
            best = yield from run(k, max_gpus)
            if best is not None and better(out.best, (k, best)):
                out.best = (k, best)
        return out
    tried: set[int] = set()
    current = 0
    for current in range(len(settings)):
        tried.add(current)
        best = yield from run(current, max_gpus)
        if best is not None:
            out.best = (current, best)
            break
        if not any(p.rejected for (j, _), p in seen.items() if j == current):
            break  # replayed and missed the SLA: the moves below take it from here
    out.closest = min(
        (_ratio(pr) for (j, _), pr in seen.items() if j == current and not pr.rejected),
        default=math.inf,
    )
    # The plan-wide bound: the fewest GPUs found so far by any layout.
    bound = yield []
    limit = min(bound - 1, max_gpus)
    if out.best is None and bound <= max_gpus:
        # Its reference met the SLA nowhere within the limit, and another layout did: other
        # settings would have to make up for the most workers and then some.
        return out
    while True:
        missed = [(p, pr) for (j, p), pr in seen.items() if j == current and not pr.met]
        missed = [(p, pr) for p, pr in missed if not pr.rejected and _ratio(pr) <= MOVE_REACH]
        if out.best is not None:
            # The most GPUs below the cheapest point found and the bound (the closest first).
            below = min(limit, searching.cost(out.best[1], gpus) - 1)
            cheaper = [
                (searching.cost(p, gpus), -_ratio(pr), p)
                for p, pr in missed
                if searching.cost(p, gpus) <= below
            ]
            point = max(cheaper)[2] if cheaper else None
        else:
            # None within the limit: where it came closest (the two-role bounds included).
            point = min(((_ratio(pr), p) for p, pr in missed), default=(0.0, None))[1]
        if point is None:
            return out
        here = seen[(current, point)]
        for j in moves(settings, settings[current], here):
            k = settings.index(j)
            if k in tried:
                continue
            tried.add(k)
            if (k, point) not in seen:
                seen.update((yield [(k, point)]))
            probe = seen[(k, point)]
            if probe.met:
                current = k
                best = yield from run(k, min(searching.cost(point, gpus), limit))
                if best is not None:  # None: it met only at a bound beyond the limit
                    out.best = (k, best)
                break
            if not probe.rejected and _ratio(probe) < _ratio(here):
                current = k  # closer: its own moves go on from here
                break
        else:
            return out


def _ratio(probe: searching.Probe) -> float:
    """The worst limited statistic over its limit (0 with none)."""
    return max(over_limits(probe.metrics, probe.limits).values(), default=0.0)


__all__ = [
    "EngineSettings",
    "Key",
    "Ladder",
    "LayoutOutcome",
    "base_engine",
    "engine_ladder",
    "layout_search",
    "listed",
    "moves",
]
