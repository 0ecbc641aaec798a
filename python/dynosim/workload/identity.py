"""What a report names its requests by: a trace file's name and the sha256 of its bytes (what
``sha256sum`` prints), or, for requests made in memory, their kind and the sha256 of their
columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def file_identity(path: Path, sha256: str) -> dict[str, str]:
    """``{"name", "sha256"}`` of a trace file: its name (not the directory it was read from,
    so a report does not depend on where the file lies) and the hash of its bytes."""
    return {"name": path.name, "sha256": sha256}


def identity(workload: Any, requests: Any) -> dict[str, str]:
    """``{"name", "sha256"}`` of the workload ``requests`` came from: a trace file's
    (:func:`file_identity`); otherwise ``"synthetic"`` or ``"columns"`` and the hash of the
    columns (``requests``, then a ``TraceColumns``)."""
    # Imported here: the workload models pull in pydantic, which a trace file's replay from the
    # command line does without (it names its requests by file_identity).
    from dynosim.workload.base import is_synthetic
    from dynosim.workload.trace import TraceWorkload

    if isinstance(workload, TraceWorkload) and workload.path is not None:
        return file_identity(workload.path, workload.sha256())
    kind = "synthetic" if is_synthetic(workload) else "columns"
    return {"name": kind, "sha256": requests.sha256}


__all__ = ["file_identity", "identity"]
