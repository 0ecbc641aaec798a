"""The base of the workload models: validation failures are WorkloadErrors naming
``workload.<field>``."""

from __future__ import annotations

from dynosim._validation import StrictModel, WorkloadProblems

#: Tags of the length specs of a synthetic workload (left out of error paths).
LENGTH_TAGS = ("fixed", "normal", "lognormal", "uniform", "empirical")


class WorkloadModel(StrictModel):
    """Frozen, refusing unknown fields, raising WorkloadError naming ``workload.<field>``."""

    _error = WorkloadProblems
    _root = "workload"
    _tags = frozenset(LENGTH_TAGS)


__all__ = ["LENGTH_TAGS", "WorkloadModel"]
