"""Mooncake JSONL traces: one JSON object per line with ``timestamp`` (ms), ``input_length``,
``output_length`` and ``hash_ids`` (one id per ``trace_block_size`` prompt tokens; equal ids at
the same position mean a shared prefix), optionally ``session_id`` and ``delay_ms`` (or
``delay``) for multi-turn conversations. The core parses and checks every row, puts the rows
in arrival order and keeps the requests; numpy is not needed to replay them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dynosim import _core
from dynosim.errors import WorkloadError
from dynosim.workload.reading import warn_late


def read_mooncake(path: Path, data: bytes, trace_block_size: int) -> Any:
    """The requests of the Mooncake trace ``path``, whose bytes are ``data``, held by the core
    (a ``_core.PreparedWorkload``), in arrival order, the first at 0 ms; a bad row raises
    WorkloadError naming the file, line, field and value."""
    try:
        requests, late = _core.read_mooncake(data, str(path), trace_block_size)
    except WorkloadError as exc:
        # A refused request may be refused for the order the sort made: say it was sorted.
        if getattr(exc, "late", None) is not None:
            warn_late(path, *exc.late)
        raise
    if late is not None:
        warn_late(path, *late)
    return requests


__all__ = ["read_mooncake"]
