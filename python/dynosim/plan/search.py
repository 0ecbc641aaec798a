"""The fewest GPUs meeting an SLA for one layout, without replaying every worker count.

A layout fixes each role's GPUs per worker; a point gives each role's worker count (one role
aggregated, or prefill and decode), and costs the sum of workers x GPUs per worker. The search
assumes that more workers of a role never make an SLA metric worse (so whether a point meets
the SLA is monotone in every count), and checks that on the replays it runs:

- one role: bisection over 1..N. When even N misses the SLA, N // 2 is replayed too, so the
  conclusion "none does" rests on two replays that can be compared.
- two roles: bisection of the prefill count with the most decode workers any point within the
  GPU limit can have, and of the decode count with the most prefill workers (these two probes
  may exceed the limit: they are bounds, not candidates); no point within the limit with fewer
  workers of a role can meet the SLA, so points are then tried in increasing cost from those
  two minimums, skipping points below one already seen to miss.

The check: for every two replayed points where one has at least as many workers of every role,
the larger must meet the SLA when the smaller does, reject no more requests, and have no
limited statistic worse by more than ``tolerance`` x its limit. Where that fails, the layout is
searched again by a linear scan: every point within the limit below the cost found, cheapest
first, which needs no assumption.

The search is written as a generator: it yields the points it needs replayed (a batch that can
run in parallel) and is sent back what each showed, so a driver can interleave the searches of
many layouts over one pool of workers.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field

#: Worker counts, one per role.
Point = tuple[int, ...]


@dataclass(frozen=True)
class Probe:
    """What a replay of a point showed: whether it meets the SLA, its rejected requests and
    its limited statistics by name (ms; NaN when it has none), with their limits."""

    met: bool
    rejected: float
    metrics: Mapping[str, float]
    limits: Mapping[str, float]


@dataclass
class Outcome:
    """A layout's search: the cheapest point meeting the SLA within the limit (None: none
    does), how it was found, and what the check found."""

    best: Point | None
    method: str
    violations: list[str] = field(default_factory=list)


#: A search: yields batches of points, is sent their probes, returns its Outcome.
Search = Generator[list[Point], dict[Point, Probe], Outcome]


def cost(point: Point, gpus: Sequence[int]) -> int:
    """GPUs of a point: workers x GPUs per worker, summed over roles."""
    return sum(n * g for n, g in zip(point, gpus, strict=True))


def within(max_gpus: int, gpus: Sequence[int]) -> list[Point]:
    """Every point (at least one worker per role) within ``max_gpus``, cheapest first (ties in
    role order)."""
    tops = [max_gpus - (sum(gpus) - g) for g in gpus]
    ranges = [range(1, top // g + 1) for top, g in zip(tops, gpus, strict=True)]
    points = [p for p in itertools.product(*ranges) if cost(p, gpus) <= max_gpus]
    return sorted(points, key=lambda p: (cost(p, gpus), p))


def violations(seen: Mapping[Point, Probe], tolerance: float) -> list[str]:
    """Pairs of replayed points that contradict "more workers are never worse" (module doc)."""
    out = []
    points = sorted(seen)
    for a, b in itertools.permutations(points, 2):
        if a == b or not all(x <= y for x, y in zip(a, b, strict=True)):
            continue
        pa, pb = seen[a], seen[b]
        if pa.met and not pb.met:
            out.append(f"{b} misses the SLA but {a} meets it")
        if pb.rejected > pa.rejected:
            out.append(f"{b} rejects {pb.rejected:g} requests, {a} {pa.rejected:g}")
        for name, limit in pb.limits.items():
            va, vb = pa.metrics[name], pb.metrics[name]
            if not (math.isnan(va) or math.isnan(vb)) and vb > va + tolerance * limit:
                out.append(f"{name} {vb:,.1f} at {b} > {va:,.1f} at {a}")
    return out


def _bisect(point: Callable[[int], Point], top: int, seen: dict[Point, Probe]) -> Generator:
    """The smallest n in 1..top whose ``point(n)`` meets the SLA (None: not even top)."""
    if point(top) not in seen:
        seen.update((yield [point(top)]))
    if not seen[point(top)].met:
        return None
    lo, hi = 0, top
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if point(mid) not in seen:
            seen.update((yield [point(mid)]))
        if seen[point(mid)].met:
            hi = mid
        else:
            lo = mid
    return hi


def search(max_gpus: int, gpus: Sequence[int], tolerance: float = 0.02) -> Search:
    """The search of one layout whose roles take ``gpus`` per worker (module doc)."""
    seen: dict[Point, Probe] = {}
    if len(gpus) == 1:
        top = max_gpus // gpus[0]
        best_n = yield from _bisect(lambda n: (n,), top, seen)
        if best_n is None and top > 1:
            # Two replays to compare before concluding that no count meets the SLA.
            seen.update((yield [(top // 2,)]))
        best: Point | None = None if best_n is None else (best_n,)
    else:
        best = yield from _two_roles(max_gpus, gpus, seen)
    found = violations(seen, tolerance)
    if not found:
        return Outcome(best, "bisection")
    best = yield from _scan(max_gpus, gpus, seen, best)
    return Outcome(best, "linear scan", found)


def _two_roles(max_gpus: int, gpus: Sequence[int], seen: dict[Point, Probe]) -> Generator:
    pg, dg = gpus
    p_top, d_top = (max_gpus - dg) // pg, (max_gpus - pg) // dg
    # Both bisections at once: each step asks for the next point of each.
    prefill = _bisect(lambda p: (p, d_top), p_top, seen)
    decode = _bisect(lambda d: (p_top, d), d_top, seen)
    result: dict[str, int | None] = {}
    asks = {"p": _start(prefill, result, "p"), "d": _start(decode, result, "d")}
    gens = {"p": prefill, "d": decode}
    while any(a is not None for a in asks.values()):
        batch = sorted({pt for a in asks.values() if a for pt in a})
        got = yield batch
        seen.update(got)
        for k, gen in gens.items():
            if asks[k] is not None:
                asks[k] = _step(gen, {pt: seen[pt] for pt in asks[k]}, result, k)
    p_min, d_min = result["p"], result["d"]
    if p_min is None or d_min is None:
        # Points to compare with the top one before concluding that none meets the SLA.
        halves = [((p_top + 1) // 2, d_top), (p_top, (d_top + 1) // 2)]
        ask = sorted({pt for pt in halves if pt not in seen})
        if ask:
            seen.update((yield ask))
        return None
    missed = [pt for pt, pr in seen.items() if not pr.met]
    for _, points in itertools.groupby(
        (pt for pt in within(max_gpus, gpus) if pt[0] >= p_min and pt[1] >= d_min),
        key=lambda pt: cost(pt, gpus),
    ):
        todo = [pt for pt in points if not any(pt[0] <= m[0] and pt[1] <= m[1] for m in missed)]
        ask = [pt for pt in todo if pt not in seen]
        if ask:
            seen.update((yield ask))
        met = [pt for pt in todo if seen[pt].met]
        if met:
            return min(met)
        missed += todo
    return None


def _start(gen: Generator, result: dict, key: str) -> list[Point] | None:
    try:
        return next(gen)
    except StopIteration as stop:
        result[key] = stop.value
        return None


def _step(gen: Generator, got: dict, result: dict, key: str) -> list[Point] | None:
    try:
        return gen.send(got)
    except StopIteration as stop:
        result[key] = stop.value
        return None


def _scan(
    max_gpus: int, gpus: Sequence[int], seen: dict[Point, Probe], found: Point | None
) -> Generator:
    """The cheapest point meeting the SLA among those within the limit that cost less than
    ``found`` (or all of them), level by level of cost, assuming nothing."""
    limit = cost(found, gpus) if found is not None else max_gpus + 1
    for _, points in itertools.groupby(
        (pt for pt in within(max_gpus, gpus) if cost(pt, gpus) < limit),
        key=lambda pt: cost(pt, gpus),
    ):
        level = list(points)
        ask = [pt for pt in level if pt not in seen]
        if ask:
            seen.update((yield ask))
        met = [pt for pt in level if seen[pt].met]
        if met:
            return min(met)
    return found


__all__ = ["Outcome", "Point", "Probe", "Search", "cost", "search", "violations", "within"]
