"""Workloads: the requests a simulation replays, from a trace file or generated synthetically.

A workload turns into :class:`TraceColumns`, the columnar form the Rust core consumes: one arrival
time (ms), input length and output length (tokens) per request, plus the prefix hash ids of each
request's prompt blocks in CSR layout.

Two trace formats are read:

* Mooncake JSONL: one JSON object per line with ``timestamp`` (ms), ``input_length``,
  ``output_length`` and ``hash_ids`` (one id per ``trace_block_size`` prompt tokens; equal ids
  at the same position mean a shared prefix).
* Azure CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``): wall-clock datetimes and no prefix
  information, so every request gets fresh hash ids.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import pydantic
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from dynosim.errors import WorkloadError

__all__ = [
    "SyntheticWorkload",
    "TraceColumns",
    "TraceWorkload",
    "Workload",
    "load_trace",
]

_MAX_LENGTH = 2**32  # lengths travel as uint32
_MAX_HASH_ID = 2**63  # hash ids must also fit an int64 on the Rust side
_MAX_TIMESTAMP = 2**63  # bounds the value so float conversion never overflows
_AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
# numpy's datetime parser also takes "NaT", "now", "today" and zone suffixes; allow only plain
# wall-clock datetimes like 2023-11-16 18:15:46.6805900.
_AZURE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?")
_MOONCAKE_FIELDS = (
    ("timestamp", "created_time"),
    ("input_length", "input_tokens"),
    ("output_length", "output_tokens"),
    ("hash_ids", None),
)
_INT_ONLY = frozenset({int})


@dataclass(frozen=True, eq=False)
class TraceColumns:
    """Columnar requests handed to the Rust core.

    Request ``i`` arrives at ``arrival_ms[i]`` (ms, the first request at 0, non-decreasing), has
    ``input_length[i]`` prompt tokens and ``output_length[i]`` generated tokens (both >= 1), and
    owns the prefix hash ids ``hash_ids[hash_offsets[i]:hash_offsets[i + 1]]``, one per
    ``trace_block_size`` prompt tokens. Arrays are 1-D and C-contiguous with dtypes float64
    (arrivals), uint32 (lengths) and uint64 (offsets, ids); construction checks all of this and
    raises :class:`~dynosim.errors.WorkloadError`. Equality is identity: compare the arrays.
    """

    arrival_ms: np.ndarray
    input_length: np.ndarray
    output_length: np.ndarray
    hash_offsets: np.ndarray
    hash_ids: np.ndarray
    trace_block_size: int

    def __post_init__(self) -> None:
        bs = self.trace_block_size
        if isinstance(bs, bool) or not isinstance(bs, int) or bs <= 0:
            raise WorkloadError(
                f"TraceColumns.trace_block_size: expected a positive integer, got {bs!r}"
            )
        for name, dtype in (
            ("arrival_ms", np.float64),
            ("input_length", np.uint32),
            ("output_length", np.uint32),
            ("hash_offsets", np.uint64),
            ("hash_ids", np.uint64),
        ):
            arr = getattr(self, name)
            if not isinstance(arr, np.ndarray):
                raise WorkloadError(
                    f"TraceColumns.{name}: expected a numpy array, got {type(arr).__name__}"
                )
            if arr.dtype != dtype or arr.ndim != 1:
                raise WorkloadError(
                    f"TraceColumns.{name}: expected a 1-D {np.dtype(dtype)} array, "
                    f"got {arr.ndim}-D {arr.dtype}"
                )
            if not arr.flags.c_contiguous:
                raise WorkloadError(f"TraceColumns.{name}: expected a C-contiguous array")
        n = len(self.arrival_ms)
        if n == 0:
            raise WorkloadError("TraceColumns: a trace needs at least one request")
        for name in ("input_length", "output_length"):
            if len(getattr(self, name)) != n:
                raise WorkloadError(
                    f"TraceColumns.{name}: expected {n} values (one per request), "
                    f"got {len(getattr(self, name))}"
                )
        if len(self.hash_offsets) != n + 1:
            raise WorkloadError(
                f"TraceColumns.hash_offsets: expected {n + 1} offsets (requests + 1), "
                f"got {len(self.hash_offsets)}"
            )
        self._check_values()

    def _check_values(self) -> None:
        arrival, offsets = self.arrival_ms, self.hash_offsets
        if arrival[0] != 0.0:
            raise WorkloadError(
                f"TraceColumns.arrival_ms: the first arrival must be 0 ms, got {arrival[0]}"
            )
        if not np.isfinite(arrival).all():
            i = int(np.argmin(np.isfinite(arrival)))
            raise WorkloadError(
                f"TraceColumns.arrival_ms[{i}]: expected finite ms, got {arrival[i]}"
            )
        if (np.diff(arrival) < 0).any():
            i = int(np.argmax(np.diff(arrival) < 0)) + 1
            raise WorkloadError(
                f"TraceColumns.arrival_ms[{i}]: arrivals must be non-decreasing, "
                f"got {arrival[i]} after {arrival[i - 1]}"
            )
        for name in ("input_length", "output_length"):
            arr = getattr(self, name)
            if (arr == 0).any():
                i = int(np.argmax(arr == 0))
                raise WorkloadError(f"TraceColumns.{name}[{i}]: expected >= 1 tokens, got 0")
        if offsets[0] != 0 or offsets[-1] != len(self.hash_ids):
            raise WorkloadError(
                f"TraceColumns.hash_offsets: expected to run from 0 to {len(self.hash_ids)} "
                f"(len(hash_ids)), got {offsets[0]} to {offsets[-1]}"
            )
        # Differences of uint64 wrap around when offsets decrease, so compare instead.
        if (offsets[1:] < offsets[:-1]).any():
            i = int(np.argmax(offsets[1:] < offsets[:-1])) + 1
            raise WorkloadError(
                f"TraceColumns.hash_offsets[{i}]: offsets must be non-decreasing, "
                f"got {offsets[i]} after {offsets[i - 1]}"
            )
        short = np.diff(offsets) * np.uint64(self.trace_block_size) < self.input_length
        if short.any():
            i = int(np.argmax(short))
            raise WorkloadError(
                f"TraceColumns.hash_ids: too few hash ids for request {i}: "
                f"{offsets[i + 1] - offsets[i]} ids of {self.trace_block_size} tokens "
                f"for input_length {self.input_length[i]}"
            )

    def __len__(self) -> int:
        """Number of requests."""
        return len(self.arrival_ms)


def _fresh_hash_ids(
    input_length: np.ndarray, trace_block_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """CSR offsets and ids giving each request its own ceil(input / block) never-shared ids."""
    blocks = (input_length.astype(np.uint64) + np.uint64(trace_block_size - 1)) // np.uint64(
        trace_block_size
    )
    offsets = np.zeros(len(blocks) + 1, dtype=np.uint64)
    np.cumsum(blocks, out=offsets[1:])
    return offsets, np.arange(offsets[-1], dtype=np.uint64)


class _WorkloadModel(BaseModel):
    """Shared config of the workload models: every validation failure is a WorkloadError."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except pydantic.ValidationError as exc:
            raise _as_workload_error(exc) from exc


def _as_workload_error(exc: pydantic.ValidationError) -> WorkloadError:
    parts = []
    for err in exc.errors():
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, WorkloadError):
            parts.append(str(cause))  # already a complete message from our validators
        else:
            where = ".".join(["workload", *map(str, err["loc"])])
            if err["type"] == "missing":
                parts.append(f"{where}: a value is required")
            else:
                parts.append(f"{where}: {err['msg']}, got {err['input']!r}")
    return WorkloadError("; ".join(parts))


class TraceWorkload(_WorkloadModel):
    """Requests replayed from a trace file (``path``) or from in-memory columns.

    ``format`` is ``"mooncake"`` (JSONL) or ``"azure"`` (CSV); left unset it follows the
    extension (``.jsonl``/``.json`` or ``.csv``). ``trace_block_size`` is the number of prompt
    tokens per hash id (512 in the public Mooncake traces). The file is read on the first call to
    :meth:`columns`; use :func:`load_trace` to read and validate it immediately.
    """

    kind: Literal["trace"] = "trace"
    path: Path | None = None
    format: Literal["mooncake", "azure"] | None = None
    trace_block_size: int = Field(512, gt=0, strict=True)
    _columns: TraceColumns | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _no_fixed_length(cls, data: Any) -> Any:
        # Runs before extra="forbid", so the user learns why isl/osl are wrong, not just that.
        if isinstance(data, Mapping):
            given = [f"workload.{key}" for key in ("isl", "osl") if key in data]
            if given:
                raise WorkloadError(
                    f"a trace workload has no fixed request length; remove {', '.join(given)}"
                )
        return data

    @model_validator(mode="after")
    def _source_known(self) -> TraceWorkload:
        if self.path is None:
            raise WorkloadError(
                "a trace workload needs workload.path "
                "(or build one in memory with TraceWorkload.from_columns)"
            )
        self._trace_format()
        return self

    def _trace_format(self) -> str:
        if self.format is not None:
            return self.format
        assert self.path is not None  # checked at validation
        suffix = self.path.suffix.lower()
        if suffix in (".jsonl", ".json"):
            return "mooncake"
        if suffix == ".csv":
            return "azure"
        raise WorkloadError(
            f"{self.path}: cannot tell the trace format from the extension {suffix!r}; "
            "pass format='mooncake' (JSONL) or format='azure' (CSV)"
        )

    def columns(self) -> TraceColumns:
        """The requests as columns (arrivals in ms, lengths in tokens), read once and cached."""
        if self._columns is None:
            assert self.path is not None  # checked at validation; from_columns sets _columns
            read = _read_mooncake if self._trace_format() == "mooncake" else _read_azure
            self._columns = read(self.path, self.trace_block_size)
        return self._columns

    @classmethod
    def from_columns(cls, columns: TraceColumns) -> TraceWorkload:
        """A trace workload over in-memory columns (no file), for tests and programs."""
        if not isinstance(columns, TraceColumns):
            raise WorkloadError(f"expected TraceColumns, got {type(columns).__name__}")
        # model_construct skips the validator that insists on a path.
        workload = cls.model_construct(trace_block_size=columns.trace_block_size)
        workload._columns = columns
        return workload


class SyntheticWorkload(_WorkloadModel):
    """``count`` requests of ``isl`` prompt and ``osl`` output tokens with Poisson arrivals.

    Arrivals are ``rate`` requests per second on average: exponential gaps with mean
    ``1000 / rate`` ms, the first request at 0 ms, drawn from ``numpy.random.default_rng(seed)``
    so the same seed gives identical columns. No two requests share a prefix hash id.
    """

    kind: Literal["synthetic"] = "synthetic"
    isl: int = Field(ge=1, lt=_MAX_LENGTH, strict=True)
    osl: int = Field(ge=1, lt=_MAX_LENGTH, strict=True)
    count: int = Field(ge=1, strict=True)
    rate: float = Field(gt=0, allow_inf_nan=False, strict=True)
    seed: int = Field(0, ge=0, strict=True)
    trace_block_size: int = Field(512, gt=0, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _fixed_length_given(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            missing = [f"workload.{key}" for key in ("isl", "osl") if data.get(key) is None]
            if missing:
                raise WorkloadError(
                    "a synthetic workload needs workload.isl and workload.osl; "
                    f"missing: {', '.join(missing)}"
                )
        return data

    def columns(self) -> TraceColumns:
        """Generate the requests as columns (arrivals in ms, lengths in tokens)."""
        rng = np.random.default_rng(self.seed)
        arrival = np.zeros(self.count, dtype=np.float64)
        np.cumsum(rng.exponential(1000.0 / self.rate, size=self.count - 1), out=arrival[1:])
        input_length = np.full(self.count, self.isl, dtype=np.uint32)
        offsets, hash_ids = _fresh_hash_ids(input_length, self.trace_block_size)
        return TraceColumns(
            arrival_ms=arrival,
            input_length=input_length,
            output_length=np.full(self.count, self.osl, dtype=np.uint32),
            hash_offsets=offsets,
            hash_ids=hash_ids,
            trace_block_size=self.trace_block_size,
        )


Workload = Annotated[TraceWorkload | SyntheticWorkload, Field(discriminator="kind")]


def load_trace(
    path: str | os.PathLike[str],
    trace_block_size: int = 512,
    format: str | None = None,
) -> TraceWorkload:
    """Read and validate a whole trace file now and return it as a loaded :class:`TraceWorkload`.

    ``trace_block_size`` is the number of prompt tokens per hash id; ``format`` is
    ``"mooncake"`` or ``"azure"``, or None to follow the extension. Arrivals are shifted so the
    first request arrives at 0 ms.

    Rows whose timestamp is earlier than a row above them are not an error: the rows are sorted
    by timestamp with a stable sort (file order kept among equal timestamps) and a
    ``UserWarning`` names the file, how many rows were out of order and the first one's line.
    Every problem in the file raises :class:`~dynosim.errors.WorkloadError` naming the file,
    line, field and value.
    """
    workload = TraceWorkload(path=Path(path), trace_block_size=trace_block_size, format=format)
    workload.columns()
    return workload


def _read_lines(path: Path) -> list[str]:
    try:
        # utf-8-sig drops a byte-order mark; universal newlines turn CRLF into one line break.
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read the trace: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
    return text.split("\n")


def _shown(value: Any) -> str:
    """A JSON value as it appears in the file, cut short so a message stays one readable line."""
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _length(where: str, key: str, value: Any) -> int:
    # type() rather than isinstance(): bool is an int subclass, and 12.0 is not a token count.
    if type(value) is not int or value < 0:
        raise WorkloadError(
            f"{where}: field {key!r}: expected a non-negative integer, got {_shown(value)}"
        )
    if value == 0 or value >= _MAX_LENGTH:
        raise WorkloadError(
            f"{where}: field {key!r}: expected between 1 and 2**32 - 1 tokens, got {value}"
        )
    return value


def _read_mooncake(path: Path, trace_block_size: int) -> TraceColumns:
    timestamps: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    # Ids go straight into one flat list so the per-row lists die at once (fewer GC passes).
    hash_counts: list[int] = []
    hash_flat: list[int] = []
    line_numbers: list[int] = []
    for lineno, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(
                f"{where}: invalid JSON ({exc.msg} at column {exc.colno}): {line[:80]!r}"
            ) from exc
        if not isinstance(row, dict):
            raise WorkloadError(f"{where}: expected a JSON object, got {_shown(row)}")
        values = []
        for key, alias in _MOONCAKE_FIELDS:
            if key in row and alias in row:
                raise WorkloadError(
                    f"{where}: field {key!r} is given twice, also as its alias {alias!r}; keep one"
                )
            if key in row:
                values.append((key, row[key]))
            elif alias in row:
                values.append((alias, row[alias]))
            else:
                also = f" (or {alias!r})" if alias else ""
                raise WorkloadError(
                    f"{where}: field {key!r}{also} is missing; got fields {_shown(list(row))}"
                )
        (ts_key, ts), (in_key, input_length), (out_key, output_length), (_, ids) = values
        if type(ts) not in (int, float) or not 0 <= ts < _MAX_TIMESTAMP:
            raise WorkloadError(
                f"{where}: field {ts_key!r}: expected a finite non-negative number of ms, "
                f"got {_shown(ts)}"
            )
        input_length = _length(where, in_key, input_length)
        output_length = _length(where, out_key, output_length)
        if type(ids) is not list:
            raise WorkloadError(
                f"{where}: field 'hash_ids': expected a list of non-negative integers, "
                f"got {_shown(ids)}"
            )
        # Whole-list checks run in C; the per-element scan only happens to report a bad id.
        if ids and not (
            _INT_ONLY.issuperset(map(type, ids)) and 0 <= min(ids) and max(ids) < _MAX_HASH_ID
        ):
            pos, bad = next(
                (i, h) for i, h in enumerate(ids) if type(h) is not int or not 0 <= h < _MAX_HASH_ID
            )
            raise WorkloadError(
                f"{where}: field 'hash_ids': expected integers in [0, 2**63), "
                f"got {_shown(bad)} at position {pos}"
            )
        if len(ids) * trace_block_size < input_length:
            raise WorkloadError(
                f"{where}: field 'hash_ids': too few hash ids: got {len(ids)}, which cover "
                f"{len(ids) * trace_block_size} tokens at {trace_block_size} tokens per id, "
                f"but {in_key} is {input_length}"
            )
        timestamps.append(ts)
        inputs.append(input_length)
        outputs.append(output_length)
        hash_counts.append(len(ids))
        hash_flat.extend(ids)
        line_numbers.append(lineno)
    if not timestamps:
        raise WorkloadError(f"{path}: no requests: the file has no data rows")

    ts_ms = np.array(timestamps, dtype=np.float64)
    order = _arrival_order(path, ts_ms, line_numbers)
    ts_ms = ts_ms[order]
    offsets, hash_ids = _csr_take(
        np.array(hash_counts, dtype=np.int64), np.array(hash_flat, dtype=np.uint64), order
    )
    return TraceColumns(
        arrival_ms=ts_ms - ts_ms[0],
        input_length=np.array(inputs, dtype=np.uint32)[order],
        output_length=np.array(outputs, dtype=np.uint32)[order],
        hash_offsets=offsets,
        hash_ids=hash_ids,
        trace_block_size=trace_block_size,
    )


def _csr_take(
    counts: np.ndarray, ids: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Reorder CSR rows (``counts[i]`` ids per row, ``ids`` concatenated) to ``order``."""
    starts = np.cumsum(counts) - counts
    counts = counts[order]
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    # Element j of new row r comes from starts[order[r]] + (j - offsets[r]).
    take = np.repeat(starts[order] - offsets[:-1], counts) + np.arange(offsets[-1])
    return offsets.astype(np.uint64), ids[take]


def _azure_count(where: str, key: str, text: str) -> int:
    # isdigit() alone accepts non-ASCII digits, and int() alone accepts "+5", " 5" and "1_0".
    if not (text.isascii() and text.isdigit()):
        raise WorkloadError(
            f"{where}: field {key!r}: expected a non-negative integer, got {text!r}"
        )
    return _length(where, key, int(text))


def _read_azure(path: Path, trace_block_size: int) -> TraceColumns:
    lines = _read_lines(path)
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
                f"'2023-11-16 18:15:46.6805900', got {stamp!r}"
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
                    f"got {stamp!r}"
                ) from exc
        raise
    order = _arrival_order(path, ns, line_numbers)
    ns = ns[order]
    input_length = np.array(inputs, dtype=np.uint32)[order]
    offsets, hash_ids = _fresh_hash_ids(input_length, trace_block_size)
    return TraceColumns(
        arrival_ms=(ns - ns[0]) / 1e6,
        input_length=input_length,
        output_length=np.array(outputs, dtype=np.uint32)[order],
        hash_offsets=offsets,
        hash_ids=hash_ids,
        trace_block_size=trace_block_size,
    )


def _arrival_order(path: Path, times: np.ndarray, line_numbers: list[int]) -> np.ndarray:
    """Indices putting rows in arrival order; warns when the file was not already in it."""
    late = np.zeros(len(times), dtype=bool)
    late[1:] = times[1:] < np.maximum.accumulate(times)[:-1]
    if not late.any():
        return np.arange(len(times))
    warnings.warn(
        f"{path}: {int(late.sum())} of {len(times)} rows arrive earlier than a row above them "
        f"(first at line {line_numbers[int(np.argmax(late))]}); sorted by timestamp, "
        "keeping file order among equal timestamps",
        UserWarning,
        stacklevel=4,  # past _read_* and columns(), to whoever asked for the columns
    )
    return np.argsort(times, kind="stable")
