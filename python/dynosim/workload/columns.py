"""The columnar requests a replay reads: one arrival (ms), input and output length (tokens) per
request, the prefix hash ids of each prompt in CSR layout, and optional session columns."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dynosim import _core
from dynosim._shown import shown
from dynosim.errors import WorkloadError


@dataclass(frozen=True, eq=False)
class TraceColumns:
    """Columnar requests handed to the Rust core.

    Request ``i`` arrives at ``arrival_ms[i]`` (ms; the replay counts from the first arrival),
    has ``input_length[i]`` prompt tokens and ``output_length[i]`` generated tokens, and owns the
    prefix hash ids ``hash_ids[hash_offsets[i]:hash_offsets[i + 1]]``, one per
    ``trace_block_size`` prompt tokens. Arrays are 1-D and C-contiguous with dtypes float64
    (arrivals), uint32 (lengths) and uint64 (offsets, ids). Construction checks dtypes and
    shapes here, then the values by the core's rules (the ones a replay applies): arrivals
    finite and non-decreasing, lengths >= 1, enough hash ids to cover each prompt, offsets
    running from 0 to ``len(hash_ids)``; a failure raises
    :class:`~dynosim.errors.WorkloadError` naming the request. Equality is identity: compare
    the arrays.

    Sessions (multi-turn conversations) are two optional columns, both None when the trace has
    no sessions at all, else both given:

    * ``session`` (int64): the session of each request, ``-1`` for a request outside any
      session. The requests of one session are its turns, in row order.
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
        if isinstance(bs, bool) or not isinstance(bs, int) or not 0 < bs < 2**32:
            raise WorkloadError(
                f"TraceColumns.trace_block_size: expected a positive integer, got {shown(bs)}"
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
            # A read-only view: the columns are checked once and hashed once (``sha256``), so
            # they must not change through this object.
            view = arr.view()
            view.flags.writeable = False
            object.__setattr__(self, name, view)
        n = len(self.arrival_ms)
        for name in ("input_length", "output_length", "session", "delay_ms"):
            arr = getattr(self, name)
            if arr is not None and len(arr) != n:
                raise WorkloadError(
                    f"TraceColumns.{name}: expected {n} values (one per request), got {len(arr)}"
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
        _core.validate_workload(self)

    def __len__(self) -> int:
        """Number of requests."""
        return len(self.arrival_ms)

    @cached_property
    def sha256(self) -> str:
        """The sha256 (hex) of the requests themselves: the trace block size, then each
        column's name, dtype and bytes (an absent session column hashed as its name alone).
        Computed once: a report names in-memory requests by it."""
        digest = hashlib.sha256(f"trace_block_size={self.trace_block_size}".encode())
        for name in _ARRAYS:
            digest.update(name.encode())
            arr = getattr(self, name)
            if arr is not None:
                digest.update(arr.dtype.str.encode())
                digest.update(arr.tobytes())
        return digest.hexdigest()

    @property
    def nbytes(self) -> int:
        """Bytes of the columns' arrays."""
        return sum(a.nbytes for a in (getattr(self, n) for n in _ARRAYS) if a is not None)

    @property
    def tokens(self) -> int:
        """Prompt and output tokens of every request together."""
        return int(self.input_length.sum(dtype=np.uint64) + self.output_length.sum(dtype=np.uint64))

    @property
    def num_sessions(self) -> int:
        """Number of distinct sessions (0 when the trace has none)."""
        if self.session is None:
            return 0
        return len(np.unique(self.session[self.session >= 0]))


#: The array columns, in the order the hash of the requests takes them.
_ARRAYS = (
    "arrival_ms",
    "input_length",
    "output_length",
    "hash_offsets",
    "hash_ids",
    "session",
    "delay_ms",
)


def check_size(what: str, requests: float, hash_ids: float = 0) -> None:
    """Refuse, before anything is allocated, a workload of more ``requests`` or prompt
    ``hash_ids`` than one workload may hold (the core's limits, the same for every kind of
    workload); ``what`` names what would make them."""
    for count, limit, noun in (
        (requests, _core.MAX_REQUESTS, "requests"),
        (hash_ids, _core.MAX_HASH_IDS, "prompt hash ids"),
    ):
        if count > limit:
            shown = f"{count:,}" if isinstance(count, int) else f"{count:,.0f}"
            raise WorkloadError(
                f"{what} {shown} {noun}, more than the {limit:,} one workload may hold"
            )


def fresh_hash_ids(
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


def csr_take(
    offsets: np.ndarray, ids: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """CSR rows (row ``i`` owns ``ids[offsets[i]:offsets[i + 1]]``) taken in the order of the
    indices ``rows``: their new offsets and ids."""
    starts = offsets.astype(np.int64)
    counts = np.diff(starts)[rows]
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    # Element j of new row r comes from starts[rows[r]] + (j - offsets[r]).
    take = np.repeat(starts[rows] - offsets[:-1], counts) + np.arange(offsets[-1])
    return offsets.astype(np.uint64), ids[take]


__all__ = ["TraceColumns", "check_size", "csr_take", "fresh_hash_ids"]
