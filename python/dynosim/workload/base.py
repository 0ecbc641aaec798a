"""The base of the workload models: validation failures are WorkloadErrors naming
``workload.<field>``."""

from __future__ import annotations

from typing import Any

from dynosim._lazy import is_loaded_instance
from dynosim._validation import StrictModel, WorkloadProblems

#: Tags of the length specs of a synthetic workload (left out of error paths).
LENGTH_TAGS = ("fixed", "normal", "lognormal", "uniform", "empirical")


class WorkloadModel(StrictModel):
    """Frozen, refusing unknown fields, raising WorkloadError naming ``workload.<field>``."""

    _error = WorkloadProblems
    _root = "workload"
    _tags = frozenset(LENGTH_TAGS)


def is_synthetic(workload: Any) -> bool:
    """Whether ``workload`` is a ``SyntheticWorkload``, without importing the synthetic models
    (six pydantic classes a trace replay's start need not build)."""
    return is_loaded_instance(workload, "dynosim.workload.synthetic", "SyntheticWorkload")


def is_columns(workload: Any) -> bool:
    """Whether ``workload`` is a ``TraceColumns``, without importing numpy (which a trace
    replay's start need not import)."""
    return is_loaded_instance(workload, "dynosim.workload.columns", "TraceColumns")


__all__ = ["LENGTH_TAGS", "WorkloadModel", "is_columns", "is_synthetic"]
