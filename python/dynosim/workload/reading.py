"""What the trace readers share: reading a file, checking a token count, putting rows in arrival
order (the core's rule), and naming the file line of a row the core's workload rules refuse."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dynosim import _core
from dynosim._files import MAX_LINE_BYTES, read_input
from dynosim._shown import shown
from dynosim.errors import WorkloadError, warn

#: Lengths travel as uint32.
MAX_LENGTH = 2**32


def read_trace_bytes(path: Path) -> bytes:
    """The bytes of a trace file; a device, or a line too long to be a row, is refused."""
    return read_input(path, WorkloadError, "trace", max_line=MAX_LINE_BYTES)


def decode_text(path: Path, data: bytes) -> str:
    """The UTF-8 text of file ``path``'s bytes (a byte-order mark dropped, CRLF and CR read as
    LF)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
    return text.replace("\r\n", "\n").replace("\r", "\n")


def token_count(where: str, key: str, value: Any) -> int:
    """``value`` as a token count of field ``key`` at ``where`` (file:line): 1 .. 2**32 - 1."""
    # type() rather than isinstance(): bool is an int subclass, and 12.0 is not a token count.
    if type(value) is not int or value < 0:
        raise WorkloadError(
            f"{where}: field {key!r}: expected a non-negative integer, got {shown(value, 80)}"
        )
    if value == 0 or value >= MAX_LENGTH:
        raise WorkloadError(f"{where}: field {key!r}: {TOKENS_EXPECTED}, got {shown(value)}")
    return value


#: What a token count must be, as messages say it.
TOKENS_EXPECTED = "expected between 1 and 2**32 - 1 tokens"


#: The order of rows already in arrival order: every row as it is. Indexing with it makes views,
#: not copies.
IN_ORDER = slice(None)


def arrival_order(path: Path, times: Any, line_numbers: Any) -> Any:
    """Indices (a numpy array) putting rows of int64 timestamps ``times`` in arrival order, by
    a stable sort (file order kept among equal timestamps), or :data:`IN_ORDER` when they
    already are; warns when the file was not in it (``line_numbers``: each row's file line)."""
    ordered = _core.arrival_order(times)
    if ordered is None:
        return IN_ORDER
    order, late, first = ordered
    warn_late(path, late, len(times), line_numbers[first])
    return order


def warn_late(path: Path, late: int, rows: int, first_line: int) -> None:
    """Warn that ``late`` of the ``rows`` rows of ``path`` arrive earlier than a row above them
    (the first at line ``first_line``) and were sorted."""
    warn(
        f"{path}: {late} of {rows} rows arrive earlier than a row above them "
        f"(first at line {first_line}); sorted by timestamp, "
        "keeping file order among equal timestamps"
    )


@contextmanager
def naming_lines(path: Path, line_numbers: Any) -> Iterator[None]:
    """Inside: a request the core's workload rules refuse is named by its file line
    (``line_numbers[i]`` of request ``i``) instead of its index."""
    try:
        yield
    except WorkloadError as exc:
        request = getattr(exc, "request", None)
        if request is None:
            raise
        raise WorkloadError(f"{path}:{line_numbers[request]}: {exc.detail}") from None


__all__ = [
    "IN_ORDER",
    "MAX_LENGTH",
    "TOKENS_EXPECTED",
    "arrival_order",
    "decode_text",
    "naming_lines",
    "read_trace_bytes",
    "token_count",
    "warn_late",
]
