"""Reading input files within bounds, and writing output files so an interrupted write never
leaves a partial file under the name."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

#: A line of a line-oriented input (a trace) longer than this is no row: the file is binary, or
#: a device such as /dev/zero that would be read forever.
MAX_LINE_BYTES = 64 << 20

_CHUNK = 1 << 20


def read_input(
    path: str | os.PathLike[str],
    error: type[Exception],
    what: str,
    *,
    max_line: int | None = None,
) -> bytes:
    """The bytes of the input file ``path`` (``what`` names it in messages: "trace", ...).

    Raises ``error`` naming the file when it cannot be read, is a directory or a device (a pipe
    is read, so a process substitution works), or, with ``max_line`` (at least 1 MiB), holds a
    line longer than that many bytes: an unbounded input fails at once instead of being read
    forever.
    """
    try:
        with open(path, "rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
                kind = "a directory" if stat.S_ISDIR(mode) else "a device or socket"
                raise error(f"{path}: cannot read the {what}: not a regular file ({kind})")
            if max_line is None:
                return fh.read()
            return _read_lines_bounded(fh, path, error, what, max_line)
    except IsADirectoryError:
        raise error(f"{path}: cannot read the {what}: not a regular file (a directory)") from None
    except OSError as exc:
        raise error(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None


def _read_lines_bounded(
    fh: BinaryIO, path: str | os.PathLike[str], error: type[Exception], what: str, max_line: int
) -> bytes:
    # Lines inside one chunk are shorter than a chunk (at most max_line): only a line running
    # across chunks is measured, up to its first break in a later chunk.
    chunks: list[bytes] = []
    lines = 1
    since_break = 0  # bytes since the last line break
    while chunk := fh.read(_CHUNK):
        chunks.append(chunk)
        breaks = [i for i in (chunk.find(b"\n"), chunk.find(b"\r")) if i >= 0]
        first = min(breaks, default=len(chunk))
        too_long = since_break + first > max_line
        last = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        since_break = since_break + len(chunk) if last < 0 else len(chunk) - last - 1
        if too_long or since_break > max_line:
            # The long line starts after the last break before this chunk (too_long), or after
            # the last break of this one.
            lines += sum(c.count(b"\n") for c in (chunks[:-1] if too_long else chunks))
            raise error(
                f"{path}:{lines}: line longer than {max_line >> 20} MiB: not a {what} "
                "(a binary file or a device?)"
            )
    return b"".join(chunks)


def write_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary name beside it, renamed at the
    end."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


__all__ = ["MAX_LINE_BYTES", "read_input", "write_atomic"]
