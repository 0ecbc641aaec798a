"""A measured benchmark run: the requests to replay and what the real cluster measured for
each, and what both readers share (checking a measured value, building the run)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dynosim._documents import DocumentError, json_document
from dynosim._files import MAX_DOCUMENT_BYTES, read_input
from dynosim._shown import shown
from dynosim._validation import WorkloadProblems
from dynosim.errors import WorkloadError
from dynosim.workload.columns import TraceColumns, fresh_hash_ids
from dynosim.workload.reading import decode_text

#: The measured formats, by the name ``--format`` takes.

#: Prompt tokens per fresh hash id. A measured run carries no prefix information, so every
#: prompt gets ids no other prompt shares; their block size changes nothing.
_BLOCK = 512


@dataclass(frozen=True, eq=False)
class MeasuredRun:
    """The per-request records of a real benchmark run, ready to replay and compare.

    Attributes:
        path: the file read.
        format: ``"aiperf"`` or ``"vllm-bench"``.
        columns: the requests to replay, one per completed measured request, in order of
            their start: arrivals in ms from the first one's start, input and output lengths
            in tokens as the benchmark counted them, and fresh hash ids (the file says nothing
            about shared prefixes, so no prompt shares one).
        ttft_ms, tpot_ms, e2e_ms: the measured time to first token, time per output token
            and end-to-end latency of each replayed request (ms, float64, the order of
            ``columns``). TPOT is ``(E2E - TTFT) / (output - 1)`` as dynosim defines it, NaN
            for a request of one output token; it is AIPerf's ``inter_token_latency`` and
            ``vllm bench``'s TPOT.
        itl_ms: every gap between two streamed chunks of every replayed request (ms), or None
            when the file has none for some request; a chunk is one token unless ``notes``
            says otherwise.
        itl_offsets: where each request's gaps are in ``itl_ms``: request ``i``'s are
            ``itl_ms[itl_offsets[i]:itl_offsets[i + 1]]`` (None with ``itl_ms``).
        duration_ms: from the first replayed request's start to the last one's end (ms), as a
            dynosim report counts its duration, unless ``notes`` says it is the tool's own.
        num_records: the records in the file.
        not_replayed: how many records were not replayed, by reason (``warmup``,
            ``cancelled``, ``failed``, ``no output tokens``); with the replayed ones they make
            ``num_records``.
        notes: what the reader did or assumed that changes what the comparison means.
    """

    path: Path
    format: str  # one of dynosim.workload.measured.MEASURED_FORMATS
    columns: TraceColumns
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    e2e_ms: np.ndarray
    itl_ms: np.ndarray | None
    itl_offsets: np.ndarray | None
    duration_ms: float
    num_records: int
    not_replayed: dict[str, int]
    notes: tuple[str, ...]

    def __len__(self) -> int:
        """Number of replayed requests."""
        return len(self.columns)


def read_measured(path: Path) -> str:
    """The text of a measured run, read once (a pipe cannot be read twice): a document of at
    most ``MAX_DOCUMENT_BYTES``, for ``vllm bench serve`` writes its result, gigabytes of it
    with ``--save-detailed``, on one line; the JSON-lines format bounds its lines itself
    (:func:`check_lines`)."""
    return decode_text(
        path, read_input(path, WorkloadError, "measured run", max_bytes=MAX_DOCUMENT_BYTES)
    )


def check_lines(path: Path, lines: list[str], limit: int, what: str) -> None:
    """Refuse a line of ``lines`` longer than ``limit`` characters: not ``what``."""
    for lineno, line in enumerate(lines, start=1):
        if len(line) > limit:
            raise WorkloadError(f"{path}:{lineno}: line longer than {limit >> 20} MiB: not {what}")


def parse_json(where: str, text: str) -> Any:
    """A JSON document (a file, or one line of one) at ``where``, within the bounds of
    :func:`dynosim._documents.json_document`; WorkloadError naming ``where`` otherwise."""
    try:
        return json_document(text)
    except DocumentError as exc:
        raise WorkloadError(
            f"{where}: {exc.problem}" + (f" ({exc.where})" if exc.where else "")
        ) from None


def check_schema(model: Any, where: str, data: Any) -> Any:
    """``data`` validated as the pydantic ``model`` (a measured format's schema); its first
    problem raises WorkloadError as ``where: field 'path': message``."""
    try:
        return model.model_validate(data)
    except WorkloadProblems as exc:
        path, message = exc.problems[0]
        raise WorkloadError(
            f"{where}: field {path!r}: {message}" if path else f"{where}: {message}"
        ) from None


def finite(value: Any) -> float | None:
    """``value`` as a finite float, or None: not a number (a bool neither: True is an int),
    not finite, or an integer past what a float holds."""
    # type() rather than isinstance(): True is an int, and a measured time is not a bool.
    if type(value) is float:
        return value if math.isfinite(value) else None
    if type(value) is int and abs(value) < 2**1023:
        return float(value)
    return None


def measured_value(where: str, key: str, value: Any, unit: str) -> float:
    """``value`` of field ``key`` at ``where`` as a finite number >= 0 (in ``unit``, for the
    message)."""
    number = finite(value)
    if number is None or number < 0:
        raise WorkloadError(
            f"{where}: field {key!r}: expected a finite number >= 0 ({unit}), "
            f"got {shown(value, 80)}"
        )
    return number


@dataclass
class Replayed:
    """The completed requests a reader collected, in file order; ``build_run`` turns them
    into a :class:`MeasuredRun`."""

    input_length: list[int] = field(default_factory=list)
    output_length: list[int] = field(default_factory=list)
    ttft_ms: list[float] = field(default_factory=list)
    e2e_ms: list[float] = field(default_factory=list)
    gaps_ms: list[Sequence[float] | None] = field(default_factory=list)

    def add(
        self,
        input_length: int,
        output_length: int,
        ttft_ms: float,
        e2e_ms: float,
        gaps_ms: Sequence[float] | None,
    ) -> None:
        self.input_length.append(input_length)
        self.output_length.append(output_length)
        self.ttft_ms.append(ttft_ms)
        self.e2e_ms.append(e2e_ms)
        self.gaps_ms.append(gaps_ms)


def build_run(
    path: Path,
    format: str,
    done: Replayed,
    start_ms: Sequence[float],
    num_records: int,
    not_replayed: dict[str, int],
    notes: list[str],
    duration_ms: float | None = None,
) -> MeasuredRun:
    """The measured run of the completed requests ``done``, started at ``start_ms`` (ms from
    any origin), in order of their start (a stable sort; a note says when the file was in
    another order). ``duration_ms`` None: from the first start to the last end."""
    skipped = {reason: count for reason, count in not_replayed.items() if count}
    if not start_ms:
        reasons = ", ".join(f"{count} {reason}" for reason, count in skipped.items())
        raise WorkloadError(
            f"{path}: no completed requests to replay ({num_records} records"
            + (f": {reasons})" if reasons else ")")
        )
    start = np.array(start_ms, dtype=np.float64)
    order = np.argsort(start, kind="stable")
    if (order != np.arange(len(order))).any():
        notes.append("requests sorted by start time (the file lists them in another order)")
    start = start[order]
    input_length = np.array(done.input_length, dtype=np.uint32)[order]
    output_length = np.array(done.output_length, dtype=np.uint32)[order]
    ttft = np.array(done.ttft_ms, dtype=np.float64)[order]
    e2e = np.array(done.e2e_ms, dtype=np.float64)[order]
    tpot = np.full(len(order), np.nan)
    many = output_length > 1
    tpot[many] = (e2e[many] - ttft[many]) / (output_length[many].astype(np.float64) - 1.0)
    gaps = [done.gaps_ms[i] for i in order]
    full = [g for g in gaps if g is not None]
    itl: np.ndarray | None = None
    itl_offsets: np.ndarray | None = None
    if len(full) == len(gaps):
        itl = np.array([x for g in full for x in g], dtype=np.float64)
        itl_offsets = np.cumsum([0, *(len(g) for g in full)], dtype=np.int64)
        chunky = sum(len(g) != n - 1 for g, n in zip(full, output_length.tolist(), strict=True))
        if chunky:
            notes.append(
                f"{chunky} requests streamed a number of chunks other than their output "
                "tokens (several tokens to a chunk): the measured ITL is per chunk, "
                "dynosim's per token"
            )
    else:
        notes.append(
            f"{len(gaps) - len(full)} requests have no chunk gaps in the file: the measured "
            "ITL is not compared"
        )
    if duration_ms is None:
        duration_ms = float((start + e2e).max() - start[0])
    offsets, hash_ids = fresh_hash_ids(input_length, _BLOCK)
    columns = TraceColumns(
        arrival_ms=start - start[0],
        input_length=input_length,
        output_length=output_length,
        hash_offsets=offsets,
        hash_ids=hash_ids,
        trace_block_size=_BLOCK,
    )
    return MeasuredRun(
        path=path,
        format=format,
        columns=columns,
        ttft_ms=ttft,
        tpot_ms=tpot,
        e2e_ms=e2e,
        itl_ms=itl,
        itl_offsets=itl_offsets,
        duration_ms=duration_ms,
        num_records=num_records,
        not_replayed=skipped,
        notes=tuple(notes),
    )


__all__ = [
    "MeasuredRun",
    "Replayed",
    "build_run",
    "check_lines",
    "check_schema",
    "finite",
    "measured_value",
    "parse_json",
    "read_measured",
]
