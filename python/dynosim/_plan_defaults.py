"""The choices and defaults of plans and sweeps (searches, layouts, SLA statistics,
executors), read without pydantic or numpy: :func:`dynosim.plan.plan`, :func:`~dynosim.plan.sweep`
and :class:`~dynosim.plan.Sla` take them from here, and so do ``dynosim plan --help`` and
``dynosim sweep --help``, which show them and must start fast."""

from __future__ import annotations

from typing import Literal, get_args

#: How a plan searches each layout: bisection over worker counts, or the whole grid.
Search = Literal["bisect", "grid"]
SEARCHES: tuple[str, ...] = get_args(Search)
DEFAULT_SEARCH: Search = "bisect"

#: The serving engine a plan deploys unless told (an AIConfigurator backend name).
PLAN_BACKEND = "trtllm"
#: The TP sizes, DP ranks per worker and expert-parallel sizes a plan searches unless told.
PLAN_TP: tuple[int, ...] = (1, 2, 4, 8)
PLAN_DP: tuple[int, ...] = (1,)
PLAN_EP: tuple[int, ...] = (1,)

#: Statistics of a latency distribution an SLA may limit (keys of a report's summary).
Stat = Literal["mean", "p50", "p75", "p90", "p95", "p99", "max"]
STATS: tuple[str, ...] = get_args(Stat)
#: The statistics an SLA limits unless told: TTFT's p90, TPOT's mean.
DEFAULT_TTFT_STAT: Stat = "p90"
DEFAULT_TPOT_STAT: Stat = "mean"

#: Executors named by a string, and the one replays run on unless told (a thread pool).
EXECUTORS: tuple[str, ...] = ("threads", "processes", "ray")
DEFAULT_EXECUTOR = "threads"

__all__ = [
    "DEFAULT_EXECUTOR",
    "DEFAULT_SEARCH",
    "DEFAULT_TPOT_STAT",
    "DEFAULT_TTFT_STAT",
    "EXECUTORS",
    "PLAN_BACKEND",
    "PLAN_DP",
    "PLAN_EP",
    "PLAN_TP",
    "SEARCHES",
    "STATS",
    "Search",
    "Stat",
]
