"""Searching deployments by replaying them: a :class:`Space` of candidate configurations,
:func:`sweep` (replay each, tabulate it against an :class:`Sla`), and :func:`plan` (the
fewest GPUs meeting the SLA for each layout of a model on a system, without replaying every
worker count, with the pick's manifest)."""

from dynosim.plan.planner import PlanResult, plan
from dynosim.plan.result import SweepResult
from dynosim.plan.sla import Sla
from dynosim.plan.space import Space
from dynosim.plan.sweep import sweep

__all__ = ["PlanResult", "Sla", "Space", "SweepResult", "plan", "sweep"]
