"""What a report names its requests by: a trace file's name and the sha256 of its bytes (what
``sha256sum`` prints), or, for requests made in memory, their kind and the sha256 of their
columns."""

from __future__ import annotations

import hashlib
from typing import Any

from dynosim.workload.columns import TraceColumns
from dynosim.workload.synthetic import SyntheticWorkload
from dynosim.workload.trace import TraceWorkload


def columns_sha256(columns: TraceColumns) -> str:
    """The sha256 of the requests themselves: the trace block size, then each column's name,
    dtype and bytes (an absent session column hashed as its name alone)."""
    digest = hashlib.sha256(f"trace_block_size={columns.trace_block_size}".encode())
    for name in (
        "arrival_ms",
        "input_length",
        "output_length",
        "hash_offsets",
        "hash_ids",
        "session",
        "delay_ms",
    ):
        digest.update(name.encode())
        arr = getattr(columns, name)
        if arr is not None:
            digest.update(arr.dtype.str.encode())
            digest.update(arr.tobytes())
    return digest.hexdigest()


def identity(workload: Any, columns: TraceColumns) -> dict[str, str]:
    """``{"name", "sha256"}`` of the workload ``columns`` came from: a trace file's name and
    the hash of its bytes; otherwise ``"synthetic"`` or ``"columns"`` and the hash of the
    columns."""
    if isinstance(workload, TraceWorkload) and workload.path is not None:
        return {"name": workload.path.name, "sha256": workload.sha256()}
    kind = "synthetic" if isinstance(workload, SyntheticWorkload) else "columns"
    return {"name": kind, "sha256": columns_sha256(columns)}


__all__ = ["columns_sha256", "identity"]
