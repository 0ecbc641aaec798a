"""Azure LLM inference CSV traces (``TIMESTAMP,ContextTokens,GeneratedTokens``): wall-clock
datetimes and no prefix information, so every request gets fresh hash ids."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from dynosim._shown import shown
from dynosim.errors import WorkloadError
from dynosim.workload.columns import TraceColumns, fresh_hash_ids
from dynosim.workload.reading import (
    TOKENS_EXPECTED,
    arrival_order,
    decode_text,
    naming_lines,
    token_count,
)

_AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
# numpy's datetime parser also takes "NaT", "now", "today" and zone suffixes; allow only plain
# wall-clock datetimes like 2023-11-16 18:15:46.6805900.
_AZURE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?")


def _azure_count(where: str, key: str, text: str) -> int:
    # isdigit() alone accepts non-ASCII digits, and int() alone accepts "+5", " 5" and "1_0".
    if not (text.isascii() and text.isdigit()):
        raise WorkloadError(
            f"{where}: field {key!r}: expected a non-negative integer, got {shown(text)}"
        )
    if len(text) > 10:  # past 2**32 - 1, and maybe past the digits int() converts
        raise WorkloadError(f"{where}: field {key!r}: {TOKENS_EXPECTED}, got {shown(text)}")
    return token_count(where, key, int(text))


def read_azure(path: Path, data: bytes, trace_block_size: int) -> TraceColumns:
    """The requests of the Azure CSV file ``path``, whose bytes are ``data``, as columns."""
    lines = decode_text(path, data).split("\n")
    if not any(map(str.strip, lines)):
        raise WorkloadError(f"{path}: no requests: the file is empty")
    if lines[0] != _AZURE_HEADER:
        raise WorkloadError(
            f"{path}:1: expected the header {_AZURE_HEADER!r}, got {lines[0][:80]!r}"
        )
    times: list[str] = []
    inputs: list[int] = []
    outputs: list[int] = []
    line_numbers: list[int] = []
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        fields = line.split(",")
        if len(fields) != 3:
            raise WorkloadError(
                f"{where}: expected 3 comma-separated fields ({_AZURE_HEADER}), "
                f"got {len(fields)}: {line[:80]!r}"
            )
        stamp, context, generated = fields
        if not _AZURE_TIME.fullmatch(stamp):
            raise WorkloadError(
                f"{where}: field 'TIMESTAMP': expected a datetime like "
                f"'2023-11-16 18:15:46.6805900', got {shown(stamp)}"
            )
        times.append(stamp)
        inputs.append(_azure_count(where, "ContextTokens", context))
        outputs.append(_azure_count(where, "GeneratedTokens", generated))
        line_numbers.append(lineno)
    if not times:
        raise WorkloadError(f"{path}: no requests: the file has no data rows")

    try:
        ns = np.array(times, dtype="datetime64[ns]").view(np.int64)
    except ValueError:
        # The vectorised parse does not say which value failed (e.g. month 13); find it.
        for stamp, lineno in zip(times, line_numbers, strict=True):
            try:
                np.datetime64(stamp, "ns")
            except ValueError as exc:
                raise WorkloadError(
                    f"{path}:{lineno}: field 'TIMESTAMP': not a valid datetime ({exc}), "
                    f"got {shown(stamp)}"
                ) from exc
        raise
    # Nanoseconds in 64 bits wrap around silently outside these years (2323 reads as 1739).
    years = ns.astype("datetime64[ns]").astype("datetime64[Y]").astype(np.int64) + 1970
    wide = np.array(times, dtype="datetime64[Y]").astype(np.int64) + 1970
    wrapped = np.flatnonzero(years != wide)
    if wrapped.size:
        k = int(wrapped[0])
        raise WorkloadError(
            f"{path}:{line_numbers[k]}: field 'TIMESTAMP': outside the years 1678 to 2261 a "
            f"timestamp in ns holds, got {shown(times[k])}"
        )
    order = arrival_order(path, ns, line_numbers)
    ns = ns[order]
    input_length = np.array(inputs, dtype=np.uint32)[order]
    offsets, hash_ids = fresh_hash_ids(input_length, trace_block_size)
    with naming_lines(path, np.array(line_numbers)[order]):
        return TraceColumns(
            arrival_ms=(ns - ns[0]) / 1e6,
            input_length=input_length,
            output_length=np.array(outputs, dtype=np.uint32)[order],
            hash_offsets=offsets,
            hash_ids=hash_ids,
            trace_block_size=trace_block_size,
        )


__all__ = ["read_azure"]
