"""Synthetic workloads: generated lengths (fixed or drawn), arrivals (Poisson or gamma) and
shared prefixes, all from one seed."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator
from pydantic_core import PydanticCustomError

from dynosim._workload_defaults import SYNTHETIC_SEED, TRACE_BLOCK_SIZE
from dynosim.errors import WorkloadError
from dynosim.workload.base import LENGTH_TAGS, WorkloadModel
from dynosim.workload.columns import TraceColumns, check_size, fresh_hash_ids
from dynosim.workload.reading import MAX_LENGTH
from dynosim.workload.trace import TraceWorkload


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
    low: int = Field(ge=1, lt=MAX_LENGTH, strict=True)
    high: int = Field(ge=1, lt=MAX_LENGTH, strict=True)

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
    values: tuple[Annotated[int, Field(ge=1, lt=MAX_LENGTH, strict=True)], ...] | None = Field(
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
    np.clip(draws, 1, MAX_LENGTH - 1, out=draws)
    return draws.astype(np.uint32)


def _length_tag(value: Any) -> str | None:
    if isinstance(value, _LengthDistribution):
        return value.dist  # type: ignore[attr-defined,no-any-return]
    if isinstance(value, Mapping):
        dist = value.get("dist")
        return dist if isinstance(dist, str) and dist in LENGTH_TAGS[1:] else None
    return "fixed"


#: A request length in a synthetic workload: a fixed number of tokens or a distribution.
LengthSpec = Annotated[
    Annotated[int, Field(ge=1, lt=MAX_LENGTH, strict=True), Tag("fixed")]
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


class SyntheticWorkload(WorkloadModel):
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
    seed: int = Field(SYNTHETIC_SEED, ge=0, strict=True)
    trace_block_size: int = Field(TRACE_BLOCK_SIZE, gt=0, lt=MAX_LENGTH, strict=True)

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
        # Sizes are refused here, before generating allocates anything.
        if self.count is not None:
            requests: float = self.count
            what = "workload.count:"
        else:
            assert self.duration_s is not None and self.rate is not None  # checked above
            requests = self.duration_s * self.rate
            what = (
                f"workload.duration_s {self.duration_s:g} s at workload.rate {self.rate:g}/s "
                "would make about"
            )
        check_size(what, requests)
        if isinstance(self.isl, int):
            blocks = -(-self.isl // self.trace_block_size)
            check_size(
                f"workload.isl {self.isl} tokens x {requests:,.0f} requests "
                f"({self.trace_block_size} tokens per hash id) would need",
                0,
                requests * blocks,
            )
        return self

    def columns(self) -> TraceColumns:
        """Generate the requests as columns (arrivals in ms, lengths in tokens)."""
        rng = np.random.default_rng(self.seed)
        arrival = self._arrivals(rng)
        n = len(arrival)
        input_length = self._lengths(self.isl, rng, n, "isl")
        tbs = np.uint64(self.trace_block_size)
        blocks = (input_length.astype(np.uint64) + (tbs - np.uint64(1))) // tbs
        check_size("workload.isl: the prompts drawn need", 0, int(blocks.sum()))
        output_length = self._lengths(self.osl, rng, n, "osl")
        if self.prefix_groups is None or self.prefix_fraction is None:
            offsets, hash_ids = fresh_hash_ids(input_length, self.trace_block_size)
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
    # Groups beyond the requests stay empty: request i < n <= groups is group i either way,
    # and the ids stay far below 2**64 however many groups are asked for.
    groups = min(groups, n)
    # Unique ids start past the shared ones.
    offsets, hash_ids = fresh_hash_ids(input_length, trace_block_size, groups * width)
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


__all__ = [
    "EmpiricalLength",
    "LengthSpec",
    "LognormalLength",
    "NormalLength",
    "SyntheticWorkload",
    "UniformLength",
]
