"""Trace workloads: requests replayed from a Mooncake JSONL or Azure CSV file, or from columns
in memory."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from dynosim._workload_defaults import TRACE_BLOCK_SIZE, TraceFormat
from dynosim.errors import WorkloadError
from dynosim.workload.base import WorkloadModel, is_columns
from dynosim.workload.trace_file import read_trace_file, trace_format

if TYPE_CHECKING:
    from dynosim.workload.columns import TraceColumns


class TraceWorkload(WorkloadModel):
    """Requests replayed from a trace file (``path``) or from in-memory columns.

    ``format`` is ``"mooncake"`` (JSONL) or ``"azure"`` (CSV); left unset it follows the
    extension (``.jsonl``/``.json`` or ``.csv``). ``trace_block_size`` is the number of prompt
    tokens per hash id (512 in the public Mooncake traces). The file is read on the first call to
    :meth:`requests` or :meth:`columns`; use :func:`load_trace` to read and validate it
    immediately. The core reads a Mooncake file and keeps its requests (no numpy until
    :meth:`columns` is called); an Azure file is read into columns.
    """

    kind: Literal["trace"] = "trace"
    path: Path | None = None
    format: TraceFormat | None = None
    trace_block_size: int = Field(TRACE_BLOCK_SIZE, gt=0, strict=True)
    _columns: TraceColumns | None = PrivateAttr(default=None)
    #: A Mooncake file's requests as the core holds them (a ``_core.PreparedWorkload``).
    _requests: Any = PrivateAttr(default=None)
    _sha256: str | None = PrivateAttr(default=None)

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
        assert self.path is not None  # checked at validation
        return trace_format(self.path, self.format)

    def _read(self) -> None:
        assert self.path is not None  # checked at validation; from_columns sets _columns
        found = read_trace_file(self.path, self.trace_block_size, self.format)
        self._sha256 = found.sha256
        if is_columns(found.requests):
            self._columns = found.requests
        else:
            self._requests = found.requests

    def requests(self) -> Any:
        """What the core replays: a Mooncake file's requests as the core holds them, else the
        columns (see :meth:`columns`); the file is read once."""
        if self._requests is None and self._columns is None:
            self._read()
        return self._columns if self._requests is None else self._requests

    def columns(self) -> TraceColumns:
        """The requests as columns (arrivals in ms, lengths in tokens), read once and cached; a
        Mooncake file's are read-only numpy views of the requests the core holds."""
        if self._columns is None:
            requests = self.requests()
            if self._columns is None:
                from dynosim.workload.columns import TraceColumns

                self._columns = TraceColumns(
                    **requests.columns(), trace_block_size=requests.trace_block_size
                )
        return self._columns

    def sha256(self) -> str:
        """The sha256 of the trace file's bytes (hex), taken when they are read."""
        if self._sha256 is None:
            assert self.path is not None  # only a workload read from a file has a file hash
            self.requests()
        assert self._sha256 is not None
        return self._sha256

    @classmethod
    def from_columns(cls, columns: TraceColumns) -> TraceWorkload:
        """A trace workload over in-memory columns (no file), for tests and programs."""
        from dynosim.workload.columns import TraceColumns

        if not isinstance(columns, TraceColumns):
            raise WorkloadError(f"expected TraceColumns, got {type(columns).__name__}")
        # model_construct skips the validator that insists on a path.
        workload = cls.model_construct(trace_block_size=columns.trace_block_size)
        workload._columns = columns
        return workload


def load_trace(
    path: str | os.PathLike[str],
    trace_block_size: int = TRACE_BLOCK_SIZE,
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
    if not isinstance(path, str | os.PathLike):
        raise WorkloadError(f"path: expected a trace file path, got {type(path).__name__}")
    workload = TraceWorkload(path=Path(path), trace_block_size=trace_block_size, format=format)
    workload.requests()
    return workload


__all__ = ["TraceWorkload", "load_trace"]
