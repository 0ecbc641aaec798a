"""Mooncake JSONL traces: one JSON object per line with ``timestamp`` (ms), ``input_length``,
``output_length`` and ``hash_ids`` (one id per ``trace_block_size`` prompt tokens; equal ids at
the same position mean a shared prefix), optionally ``session_id`` and ``delay_ms`` (or
``delay``) for multi-turn conversations. The core parses and checks every row."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dynosim import _core
from dynosim.workload.columns import TraceColumns
from dynosim.workload.reading import arrival_order, csr_take, naming_lines


def read_mooncake(path: Path, data: bytes, trace_block_size: int) -> TraceColumns:
    """The requests of the Mooncake trace ``path``, whose bytes are ``data``, as columns, in
    arrival order, the first at 0 ms; a bad row raises WorkloadError naming the file, line,
    field and value."""
    # The core parses and checks every row (file order); sorting stays here.
    rows = _core.parse_mooncake(data, str(path), trace_block_size)
    lines = rows["line"]
    order = arrival_order(path, rows["timestamp_ms"], lines)
    ts_ms = rows["timestamp_ms"][order]
    offsets, hash_ids = csr_take(rows["hash_offsets"], rows["hash_ids"], order)
    session = _by_first_arrival(rows["session"][order]) if rows["session_keys"] else None
    with naming_lines(path, lines[order]):
        return TraceColumns(
            arrival_ms=ts_ms - ts_ms[0],
            input_length=rows["input_length"][order],
            output_length=rows["output_length"][order],
            hash_offsets=offsets,
            hash_ids=hash_ids,
            trace_block_size=trace_block_size,
            session=session,
            delay_ms=None if session is None else rows["delay_ms"][order],
        )


def _by_first_arrival(session: np.ndarray) -> np.ndarray:
    """Sessions renumbered 0, 1, ... in order of first arrival (the parser numbers them in
    file order); -1 (no session) stays."""
    has = session >= 0
    _, first, inverse = np.unique(session[has], return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    out = np.full(len(session), -1, dtype=np.int64)
    out[has] = rank[inverse.reshape(-1)]
    return out


__all__ = ["read_mooncake"]
