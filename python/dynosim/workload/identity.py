"""What a report names its requests by: a trace file's name and the sha256 of its bytes (what
``sha256sum`` prints), or, for requests made in memory, their kind and the sha256 of their
columns."""

from __future__ import annotations

from typing import Any

from dynosim.workload.base import is_synthetic
from dynosim.workload.trace import TraceWorkload


def identity(workload: Any, requests: Any) -> dict[str, str]:
    """``{"name", "sha256"}`` of the workload ``requests`` came from: a trace file's name and
    the hash of its bytes; otherwise ``"synthetic"`` or ``"columns"`` and the hash of the
    columns (``requests``, then a ``TraceColumns``)."""
    if isinstance(workload, TraceWorkload) and workload.path is not None:
        return {"name": workload.path.name, "sha256": workload.sha256()}
    kind = "synthetic" if is_synthetic(workload) else "columns"
    return {"name": kind, "sha256": requests.sha256}


__all__ = ["identity"]
