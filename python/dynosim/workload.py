"""Workloads: the requests a simulation replays, from a trace file or generated synthetically.

A workload turns into :class:`TraceColumns`, the columnar form the Rust core consumes: one arrival
time (ms), input length and output length (tokens) per request, plus the prefix hash ids of each
request's prompt blocks in CSR layout.

Two trace formats are read:

* Mooncake JSONL: one JSON object per line with ``timestamp`` (ms), ``input_length``,
  ``output_length`` and ``hash_ids`` (one id per ``trace_block_size`` prompt tokens; equal ids
  at the same position mean a shared prefix), optionally ``session_id`` and ``delay_ms`` (or
  ``delay``) for multi-turn conversations.
* Azure CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``): wall-clock datetimes and no prefix
  information, so every request gets fresh hash ids.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import pydantic
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    model_validator,
)
from pydantic_core import PydanticCustomError

from dynosim import _core
from dynosim.errors import WorkloadError

__all__ = [
    "EmpiricalLength",
    "LengthSpec",
    "LognormalLength",
    "NormalLength",
    "SyntheticWorkload",
    "TraceColumns",
    "TraceWorkload",
    "UniformLength",
    "Workload",
    "load_trace",
]

_MAX_LENGTH = 2**32  # lengths travel as uint32
_AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
# numpy's datetime parser also takes "NaT", "now", "today" and zone suffixes; allow only plain
# wall-clock datetimes like 2023-11-16 18:15:46.6805900.
_AZURE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?")


@dataclass(frozen=True, eq=False)
class TraceColumns:
    """Columnar requests handed to the Rust core.

    Request ``i`` arrives at ``arrival_ms[i]`` (ms, the first request at 0, non-decreasing), has
    ``input_length[i]`` prompt tokens and ``output_length[i]`` generated tokens (both >= 1), and
    owns the prefix hash ids ``hash_ids[hash_offsets[i]:hash_offsets[i + 1]]``, one per
    ``trace_block_size`` prompt tokens. Arrays are 1-D and C-contiguous with dtypes float64
    (arrivals), uint32 (lengths) and uint64 (offsets, ids); construction checks all of this and
    raises :class:`~dynosim.errors.WorkloadError`. Equality is identity: compare the arrays.

    Sessions (multi-turn conversations) are two optional columns, both None when the trace has
    no sessions at all, else both given:

    * ``session`` (int64): the session of each request, ``-1`` for a request outside any
      session; sessions are numbered densely ``0 .. num_sessions - 1`` in order of first
      appearance (session ``s + 1`` first appears after session ``s`` does). The requests of
      one session are its turns, in row order.
    * ``delay_ms`` (float64): how long after turn ``n`` completes turn ``n + 1`` is sent; NaN
      where no delay was given, and always NaN on a request outside a session and on the first
      turn of a session. The first turn is sent at its ``arrival_ms``; a later turn with a NaN
      delay is sent when the turn before it completes plus the gap between their
      ``arrival_ms``. Delays are finite and >= 0.
    """

    arrival_ms: np.ndarray
    input_length: np.ndarray
    output_length: np.ndarray
    hash_offsets: np.ndarray
    hash_ids: np.ndarray
    trace_block_size: int
    session: np.ndarray | None = None
    delay_ms: np.ndarray | None = None

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
            ("session", np.int64),
            ("delay_ms", np.float64),
        ):
            arr = getattr(self, name)
            if arr is None and name in ("session", "delay_ms"):
                continue
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
        if (self.session is None) != (self.delay_ms is None):
            given, absent = (
                ("session", "delay_ms") if self.delay_ms is None else ("delay_ms", "session")
            )
            raise WorkloadError(
                f"TraceColumns.{absent}: expected an array when {given} is given "
                "(sessions need both columns; pass neither for a trace without sessions)"
            )
        if self.session is not None:
            for name in ("session", "delay_ms"):
                if len(getattr(self, name)) != n:
                    raise WorkloadError(
                        f"TraceColumns.{name}: expected {n} values (one per request), "
                        f"got {len(getattr(self, name))}"
                    )
        self._check_values()
        self._check_sessions()

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

    def _check_sessions(self) -> None:
        session, delay = self.session, self.delay_ms
        if session is None or delay is None:
            return
        # Highest session index among the rows above each row (-1 above the first row).
        above = np.empty_like(session)
        above[:1] = -1
        np.maximum.accumulate(session[:-1], out=above[1:])
        np.maximum(above, -1, out=above)
        bad = (session < -1) | (session > above + 1)
        if bad.any():
            i = int(np.argmax(bad))
            raise WorkloadError(
                f"TraceColumns.session[{i}]: expected -1 (no session) or a session numbered "
                "densely in order of first appearance (0, then at most one more than any "
                f"session above), got {session[i]} with sessions up to {above[i]} above"
            )
        given = ~np.isnan(delay)
        bad = given & ~(np.isfinite(delay) & (delay >= 0))
        if bad.any():
            i = int(np.argmax(bad))
            raise WorkloadError(
                f"TraceColumns.delay_ms[{i}]: expected NaN (no delay) or finite ms >= 0, "
                f"got {delay[i]}"
            )
        bad = given & (session < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise WorkloadError(
                f"TraceColumns.delay_ms[{i}]: a delay applies between turns of a session, "
                f"but request {i} has no session; got {delay[i]}"
            )
        bad = given & (session > above)  # the first turn of its session
        if bad.any():
            i = int(np.argmax(bad))
            raise WorkloadError(
                f"TraceColumns.delay_ms[{i}]: request {i} is the first turn of session "
                f"{session[i]}, which is sent at its arrival; expected NaN, got {delay[i]}"
            )

    def __len__(self) -> int:
        """Number of requests."""
        return len(self.arrival_ms)

    @property
    def num_sessions(self) -> int:
        """Number of sessions (0 when the trace has none)."""
        if self.session is None:
            return 0
        return int(self.session.max()) + 1


def _fresh_hash_ids(
    input_length: np.ndarray, trace_block_size: int, first_id: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """CSR offsets and ids giving each request its own ceil(input / block) never-shared ids.

    The ids are ``first_id``, ``first_id + 1``, ... in row order.
    """
    blocks = (input_length.astype(np.uint64) + np.uint64(trace_block_size - 1)) // np.uint64(
        trace_block_size
    )
    offsets = np.zeros(len(blocks) + 1, dtype=np.uint64)
    np.cumsum(blocks, out=offsets[1:])
    return offsets, np.arange(first_id, first_id + int(offsets[-1]), dtype=np.uint64)


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
            loc = err["loc"]
            if len(loc) > 1 and loc[0] in ("isl", "osl") and loc[1] in _LENGTH_TAGS:
                loc = (loc[0], *loc[2:])  # the union's tag: the input already names it
            where = ".".join(["workload", *map(str, loc)])
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


# Synthetic workloads

#: Tags of the length specs: a fixed int, or a distribution named by its ``dist``.
_LENGTH_TAGS = ("fixed", "normal", "lognormal", "uniform", "empirical")


class _LengthDistribution(BaseModel):
    """A distribution of request lengths (tokens) that a synthetic workload draws from.

    Built inside a :class:`SyntheticWorkload`, a bad distribution raises a
    :class:`~dynosim.errors.WorkloadError` naming ``workload.isl`` or ``workload.osl``; built on
    its own it raises ``pydantic.ValidationError`` (a ``ValueError`` too). A custom
    ``__init__`` converting that error, as the workload models have, would make pydantic call
    it for nested values too and lose the field's location.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    def _draw(self, rng: np.random.Generator, size: int, field: str) -> np.ndarray:
        raise NotImplementedError


class NormalLength(_LengthDistribution):
    """Lengths drawn from a normal distribution of ``mean`` and ``std`` tokens.

    Draws are rounded to the nearest integer (ties to even) and clipped to [1, 2**32 - 1], so
    the mean of the lengths is ``mean`` only while little of the distribution lies below 1.
    """

    dist: Literal["normal"] = "normal"
    mean: float = Field(ge=1, allow_inf_nan=False, strict=True)
    std: float = Field(ge=0, allow_inf_nan=False, strict=True)

    def _draw(self, rng: np.random.Generator, size: int, field: str) -> np.ndarray:
        return _rounded_lengths(rng.normal(self.mean, self.std, size))


class LognormalLength(_LengthDistribution):
    """Lengths drawn from a lognormal distribution whose own mean is ``mean`` tokens.

    ``sigma`` is the standard deviation of the log of a length; the log-mean is
    ``mu = ln(mean) - sigma**2 / 2``, so the lengths average ``mean`` tokens (before rounding to
    the nearest integer, ties to even, and clipping to [1, 2**32 - 1]). Their median is
    ``exp(mu)`` and their squared coefficient of variation ``exp(sigma**2) - 1``.
    """

    dist: Literal["lognormal"] = "lognormal"
    mean: float = Field(ge=1, allow_inf_nan=False, strict=True)
    sigma: float = Field(ge=0, allow_inf_nan=False, strict=True)

    def _draw(self, rng: np.random.Generator, size: int, field: str) -> np.ndarray:
        mu = math.log(self.mean) - self.sigma**2 / 2
        return _rounded_lengths(rng.lognormal(mu, self.sigma, size))


class UniformLength(_LengthDistribution):
    """Integer lengths uniform over ``low .. high`` tokens, both ends included."""

    dist: Literal["uniform"] = "uniform"
    low: int = Field(ge=1, lt=_MAX_LENGTH, strict=True)
    high: int = Field(ge=1, lt=_MAX_LENGTH, strict=True)

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.low > self.high:
            raise PydanticCustomError("uniform_order", "expected low <= high")
        return self

    def _draw(self, rng: np.random.Generator, size: int, field: str) -> np.ndarray:
        return rng.integers(self.low, self.high, size, dtype=np.int64, endpoint=True).astype(
            np.uint32
        )


class EmpiricalLength(_LengthDistribution):
    """Lengths sampled with replacement, uniformly, from ``values`` or from a trace.

    Give exactly one of ``values`` (token counts) and ``trace`` (a Mooncake ``.jsonl`` or
    Azure ``.csv`` file, read as :func:`load_trace` reads it with the default 512 tokens per
    hash id). From a trace, ``isl`` samples the trace's input lengths and ``osl`` its output
    lengths. The trace is read each time the workload generates its columns.
    """

    dist: Literal["empirical"] = "empirical"
    trace: Path | None = None
    values: tuple[Annotated[int, Field(ge=1, lt=_MAX_LENGTH, strict=True)], ...] | None = Field(
        None, min_length=1
    )

    @model_validator(mode="after")
    def _one_source(self) -> EmpiricalLength:
        if (self.trace is None) == (self.values is None):
            raise PydanticCustomError(
                "empirical_source",
                "an empirical distribution needs exactly one of 'trace' and 'values'",
            )
        return self

    def _draw(self, rng: np.random.Generator, size: int, field: str) -> np.ndarray:
        if self.values is not None:
            pool = np.array(self.values, dtype=np.uint32)
        else:
            assert self.trace is not None  # checked at validation
            try:
                cols = TraceWorkload(path=self.trace).columns()
            except WorkloadError as exc:
                raise WorkloadError(f"workload.{field}: empirical trace: {exc}") from exc
            pool = cols.input_length if field == "isl" else cols.output_length
        return pool[rng.integers(0, len(pool), size)]


def _rounded_lengths(draws: np.ndarray) -> np.ndarray:
    """Float draws as token counts: nearest integer (ties to even), clipped to [1, 2**32 - 1]."""
    np.rint(draws, out=draws)
    np.clip(draws, 1, _MAX_LENGTH - 1, out=draws)
    return draws.astype(np.uint32)


def _length_tag(value: Any) -> str | None:
    if isinstance(value, _LengthDistribution):
        return value.dist  # type: ignore[attr-defined,no-any-return]
    if isinstance(value, Mapping):
        dist = value.get("dist")
        return dist if isinstance(dist, str) and dist in _LENGTH_TAGS[1:] else None
    return "fixed"


#: A request length in a synthetic workload: a fixed number of tokens or a distribution.
LengthSpec = Annotated[
    Annotated[int, Field(ge=1, lt=_MAX_LENGTH, strict=True), Tag("fixed")]
    | Annotated[NormalLength, Tag("normal")]
    | Annotated[LognormalLength, Tag("lognormal")]
    | Annotated[UniformLength, Tag("uniform")]
    | Annotated[EmpiricalLength, Tag("empirical")],
    Discriminator(
        _length_tag,
        custom_error_type="length_spec",
        custom_error_message=(
            "expected a token count or a distribution with 'dist' one of "
            "'normal', 'lognormal', 'uniform', 'empirical'"
        ),
    ),
]


class SyntheticWorkload(_WorkloadModel):
    """Generated requests: lengths, arrivals, shared prefixes, all from one ``seed``.

    Lengths: ``isl`` (prompt) and ``osl`` (output) are each a fixed token count or a
    distribution (:class:`NormalLength`, :class:`LognormalLength`, :class:`UniformLength`,
    :class:`EmpiricalLength`, or the same as a mapping with ``dist``). Draws are rounded to the
    nearest integer (ties to even) and clipped to [1, 2**32 - 1] tokens.

    Size: exactly one of ``count`` (requests) and ``duration_s`` (requests arriving before
    ``duration_s`` seconds, the first at 0 ms; at least one).

    Arrivals: the first request arrives at 0 ms. With ``rate`` (requests per second) the gaps
    between arrivals are independent with mean ``1000 / rate`` ms: exponential for ``arrival``
    ``"poisson"`` (the default), or gamma with shape ``k = burstiness`` and scale
    ``1000 / (rate * k)`` for ``"gamma"``, whose gaps have squared coefficient of variation
    ``1 / k`` (``burstiness`` 1 is Poisson, below 1 burstier, above 1 more regular). Without a
    rate every request arrives at 0 ms: an all-at-once batch, or a closed loop whose
    concurrency limit sets the pace (``duration_s`` and gamma arrivals need a rate).

    Prefixes: without ``prefix_groups`` no two requests share a prefix hash id. With
    ``prefix_groups = G`` and ``prefix_fraction = f`` (both or neither), request ``i`` (in
    arrival order) belongs to group ``i % G``; the first ``floor(f * isl / trace_block_size)``
    hash ids of its prompt (computed in float64) are its group's shared ids, block ``j`` of
    group ``g`` being id ``g * K + j`` (``K`` the most shared blocks of any request), and the
    rest of its ids are unique, so requests of one group share the longest common chain of
    shared blocks.

    Randomness comes from ``numpy.random.default_rng(seed)``, drawn in this order: arrival gaps,
    then ``isl``, then ``osl`` (a fixed length draws nothing); the same workload gives identical
    columns. Generation is vectorised: a million requests take a fraction of a second.
    """

    kind: Literal["synthetic"] = "synthetic"
    isl: LengthSpec
    osl: LengthSpec
    count: int | None = Field(None, ge=1, strict=True)
    duration_s: float | None = Field(None, gt=0, allow_inf_nan=False, strict=True)
    rate: float | None = Field(None, gt=0, allow_inf_nan=False, strict=True)
    arrival: Literal["poisson", "gamma"] = "poisson"
    burstiness: float | None = Field(None, gt=0, allow_inf_nan=False, strict=True)
    prefix_groups: int | None = Field(None, ge=1, strict=True)
    prefix_fraction: float | None = Field(None, ge=0, le=1, allow_inf_nan=False, strict=True)
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

    @model_validator(mode="after")
    def _consistent(self) -> SyntheticWorkload:
        if (self.count is None) == (self.duration_s is None):
            got = "neither" if self.count is None else "both"
            raise WorkloadError(
                "a synthetic workload needs exactly one of workload.count and "
                f"workload.duration_s; got {got}"
            )
        if self.rate is None:
            needs = [
                name
                for name, given in (
                    ("workload.duration_s", self.duration_s is not None),
                    ("workload.arrival 'gamma'", self.arrival == "gamma"),
                )
                if given
            ]
            if needs:
                raise WorkloadError(
                    f"{' and '.join(needs)} need{'s' if len(needs) == 1 else ''} workload.rate "
                    "(requests per second)"
                )
        if self.arrival == "gamma" and self.burstiness is None:
            raise WorkloadError(
                "workload.arrival 'gamma' needs workload.burstiness "
                "(the gamma shape k: 1 is Poisson, below 1 burstier)"
            )
        if self.arrival != "gamma" and self.burstiness is not None:
            raise WorkloadError(
                f"workload.burstiness applies only to workload.arrival 'gamma', "
                f"got arrival {self.arrival!r}; remove workload.burstiness or set arrival 'gamma'"
            )
        if (self.prefix_groups is None) != (self.prefix_fraction is None):
            missing = "prefix_fraction" if self.prefix_fraction is None else "prefix_groups"
            raise WorkloadError(
                "workload.prefix_groups and workload.prefix_fraction go together; "
                f"missing: workload.{missing}"
            )
        return self

    def columns(self) -> TraceColumns:
        """Generate the requests as columns (arrivals in ms, lengths in tokens)."""
        rng = np.random.default_rng(self.seed)
        arrival = self._arrivals(rng)
        n = len(arrival)
        input_length = self._lengths(self.isl, rng, n, "isl")
        output_length = self._lengths(self.osl, rng, n, "osl")
        if self.prefix_groups is None or self.prefix_fraction is None:
            offsets, hash_ids = _fresh_hash_ids(input_length, self.trace_block_size)
        else:
            offsets, hash_ids = _grouped_hash_ids(
                input_length, self.trace_block_size, self.prefix_groups, self.prefix_fraction
            )
        return TraceColumns(
            arrival_ms=arrival,
            input_length=input_length,
            output_length=output_length,
            hash_offsets=offsets,
            hash_ids=hash_ids,
            trace_block_size=self.trace_block_size,
        )

    def _gaps(self, rng: np.random.Generator, size: int) -> np.ndarray:
        assert self.rate is not None  # the callers check
        mean = 1000.0 / self.rate
        if self.arrival == "gamma":
            assert self.burstiness is not None  # checked at validation
            return rng.gamma(self.burstiness, mean / self.burstiness, size)
        return rng.exponential(mean, size)

    def _arrivals(self, rng: np.random.Generator) -> np.ndarray:
        if self.count is not None:
            arrival = np.zeros(self.count, dtype=np.float64)
            if self.rate is not None:
                np.cumsum(self._gaps(rng, self.count - 1), out=arrival[1:])
            return arrival
        assert self.duration_s is not None and self.rate is not None  # checked at validation
        end_ms = self.duration_s * 1000.0
        expected = self.duration_s * self.rate
        # Enough gaps to pass the end almost always; draw more (in order) if not.
        chunk = int(expected + 8.0 * math.sqrt(expected)) + 64
        parts = [np.zeros(1, dtype=np.float64)]
        last = 0.0
        while last < end_ms:
            times = np.cumsum(self._gaps(rng, chunk))
            times += last
            parts.append(times)
            last = float(times[-1])
        arrival = np.concatenate(parts)
        return arrival[: int(np.searchsorted(arrival, end_ms, side="left"))].copy()

    @staticmethod
    def _lengths(spec: Any, rng: np.random.Generator, size: int, field: str) -> np.ndarray:
        if isinstance(spec, _LengthDistribution):
            return spec._draw(rng, size, field)
        return np.full(size, spec, dtype=np.uint32)


#: Requests per slice when writing shared prefix ids: bounds the temporaries to a few MB.
_GROUP_CHUNK = 1 << 16


def _grouped_hash_ids(
    input_length: np.ndarray, trace_block_size: int, groups: int, fraction: float
) -> tuple[np.ndarray, np.ndarray]:
    """CSR hash ids where each request's first blocks are its prefix group's shared ids.

    Request ``i`` is in group ``i % groups`` and shares ``floor(fraction * input / block)``
    blocks: block ``j < shared`` is id ``group * K + j`` (``K`` the largest ``shared``); every
    other block gets an id of its own, ``min(groups, requests) * K`` plus its position in
    ``hash_ids``.
    """
    shared = np.floor(fraction * input_length.astype(np.float64) / trace_block_size).astype(
        np.intp  # np.repeat takes its counts as intp
    )
    n, width = len(shared), int(shared.max())
    # Unique ids start past the shared ones; groups beyond the requests stay empty.
    offsets, hash_ids = _fresh_hash_ids(input_length, trace_block_size, min(groups, n) * width)
    for lo in range(0, n, _GROUP_CHUNK):
        hi = min(lo + _GROUP_CHUNK, n)
        count = shared[lo:hi]
        # Position j = 0 .. shared[i] - 1 within each request i of the slice, concatenated.
        pos = np.arange(int(count.sum()), dtype=np.uint64)
        pos -= np.repeat((np.cumsum(count) - count).astype(np.uint64), count)
        where = np.repeat(offsets[lo:hi], count)
        where += pos
        ids = np.repeat(np.arange(lo, hi, dtype=np.uint64) % np.uint64(groups), count)
        ids *= np.uint64(width)
        ids += pos
        hash_ids[where] = ids
    return offsets, hash_ids


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

    Sessions (Mooncake only): a row may carry ``session_id`` (an integer or a string; ``1`` and
    ``"1"`` are different sessions) and ``delay_ms`` (alias ``delay``: finite ms >= 0, only on
    a row with a ``session_id``); JSON null counts as absent. The rows of one session are its
    turns in file order *after* the stable timestamp sort: turn 1 is the row with the earliest
    timestamp and is sent at it, so it takes no delay (an error); turn n + 1 is sent when turn
    n completes plus its ``delay_ms``, or plus the timestamp gap between the two turns when it
    has none. Sessions become :attr:`TraceColumns.session` (numbered 0, 1, ... in order of
    first appearance, -1 for rows without one) and :attr:`TraceColumns.delay_ms` (NaN where
    none was given); both are None when no row has a ``session_id``.
    """
    workload = TraceWorkload(path=Path(path), trace_block_size=trace_block_size, format=format)
    workload.columns()
    return workload


def _unreadable(path: Path, exc: OSError) -> WorkloadError:
    return WorkloadError(f"{path}: cannot read the trace: {exc.strerror or exc}")


def _read_lines(path: Path) -> list[str]:
    try:
        # utf-8-sig drops a byte-order mark; universal newlines turn CRLF into one line break.
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise _unreadable(path, exc) from exc
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
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _unreadable(path, exc) from exc
    # The Rust core parses and checks every row (file order); sorting and sessions stay here.
    rows = _core.parse_mooncake(data, str(path), trace_block_size)
    line_numbers = rows["line"]
    order = _arrival_order(path, rows["timestamp_ms"], line_numbers)
    ts_ms = rows["timestamp_ms"][order]
    offsets, hash_ids = _csr_take(rows["hash_offsets"], rows["hash_ids"], order)
    session_col = delay_col = None
    if rows["session_keys"]:
        session_col, delay_col = _session_columns(
            path,
            rows["session"][order],
            rows["delay_ms"][order],
            line_numbers[order],
            rows["session_keys"],
        )
    return TraceColumns(
        arrival_ms=ts_ms - ts_ms[0],
        input_length=rows["input_length"][order],
        output_length=rows["output_length"][order],
        hash_offsets=offsets,
        hash_ids=hash_ids,
        trace_block_size=trace_block_size,
        session=session_col,
        delay_ms=delay_col,
    )


def _session_columns(
    path: Path,
    raw: np.ndarray,
    delay: np.ndarray,
    line_numbers: np.ndarray,
    session_ids: list[int | str],
) -> tuple[np.ndarray, np.ndarray]:
    """Renumber sessions (rows in arrival order) densely in order of first appearance.

    ``raw`` holds each row's index into ``session_ids`` (numbered in file order), -1 for none.
    A delay on the first turn of a session is an error: that turn is sent at its timestamp.
    """
    has = raw >= 0
    _, first, inverse = np.unique(raw[has], return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    session = np.full(len(raw), -1, dtype=np.int64)
    session[has] = rank[inverse.reshape(-1)]
    is_first = np.zeros(len(raw), dtype=bool)
    is_first[np.flatnonzero(has)[first]] = True
    bad = is_first & ~np.isnan(delay)
    if bad.any():
        i = int(np.argmax(bad))
        raise WorkloadError(
            f"{path}:{line_numbers[i]}: field 'delay_ms' (or 'delay'): this row is the first "
            f"turn of session {_shown(session_ids[raw[i]])} (its earliest timestamp) and is "
            f"sent at its timestamp, so it takes no delay; got {_shown(float(delay[i]))}"
        )
    return session, np.ascontiguousarray(delay)


def _csr_take(
    offsets: np.ndarray, ids: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Reorder CSR rows (row ``i`` owns ``ids[offsets[i]:offsets[i + 1]]``) to ``order``."""
    starts = offsets.astype(np.int64)
    counts = np.diff(starts)[order]
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


def _arrival_order(
    path: Path, times: np.ndarray, line_numbers: list[int] | np.ndarray
) -> np.ndarray:
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
