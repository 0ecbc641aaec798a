"""Reading a trace file whole: its format, the hash of its bytes and its requests as the core
replays them. A Mooncake file is read without pydantic or numpy."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynosim.errors import WorkloadError
from dynosim.workload.mooncake import read_mooncake
from dynosim.workload.reading import read_trace_bytes


def trace_format(path: Path, format: str | None) -> str:
    """``format`` when given, else the one trace file ``path``'s extension names:
    ``"mooncake"`` (``.jsonl``, ``.json``) or ``"azure"`` (``.csv``)."""
    if format is not None:
        return format
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        return "mooncake"
    if suffix == ".csv":
        return "azure"
    raise WorkloadError(
        f"{path}: cannot tell the trace format from the extension {suffix!r}; "
        "pass format='mooncake' (JSONL) or format='azure' (CSV)"
    )


@dataclass(frozen=True)
class TraceFile:
    """A trace file read: its path, the sha256 of its bytes (hex, what ``sha256sum`` prints)
    and its requests as the core replays them (a Mooncake file's held by the core, an Azure
    file's as ``TraceColumns``)."""

    path: Path
    sha256: str
    requests: Any


def read_trace_file(path: Path, trace_block_size: int, format: str | None) -> TraceFile:
    """Read and check the trace file ``path`` (``format``: see :func:`trace_format`) with
    ``trace_block_size`` prompt tokens per hash id; a bad row raises WorkloadError naming the
    file, line, field and value."""
    kind = trace_format(path, format)
    data = read_trace_bytes(path)
    # The trace's identity in a report: the hash of exactly the bytes replayed, taken while
    # they are in memory (reading the file again costs more than hashing).
    sha256 = hashlib.sha256(data).hexdigest()
    if kind == "mooncake":
        return TraceFile(path, sha256, read_mooncake(path, data, trace_block_size))
    from dynosim.workload.azure import read_azure

    return TraceFile(path, sha256, read_azure(path, data, trace_block_size))


__all__ = ["TraceFile", "read_trace_file", "trace_format"]
