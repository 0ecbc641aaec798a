"""Reading input files within bounds, and writing output files so an interrupted write never
leaves a partial file under the name, and a failed one raises
:class:`~dynosim.errors.OutputError` naming the file.

Every file dynosim writes goes through :func:`atomic_open` (or :func:`write_atomic`, the same
for one text): a regular file is written under a temporary name beside it, renamed over the
name once complete and removed when the write fails or is interrupted. A path that exists and
is not a regular file (``/dev/stdout``, a FIFO, ``/dev/full``) is written in place: renaming
over a device would replace it. A symbolic link is written through, to the file it names, as
the shell's ``>`` does (renaming over the link would replace the link)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, BinaryIO

from dynosim.errors import OutputError

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


def destination(path: str | os.PathLike[str]) -> Path:
    """The file a write to ``path`` lands in: ``path``, or the file a link there names."""
    path = Path(path)
    return path.resolve() if path.is_symlink() else path


def temporary_name(path: Path) -> Path:
    """Where :func:`atomic_open` writes ``path`` until the file is complete (a hidden name
    beside it, so the rename stays on one file system)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def in_place(path: Path) -> bool:
    """Whether ``path`` is written in place: it exists and is not a regular file."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def cannot_write(path: str | os.PathLike[str], err: OSError) -> OutputError:
    """The error of failing to write ``path``."""
    return OutputError(f"{path}: cannot write: {err.strerror or err}")


@contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """A file handle (``mode`` ``"w"``: UTF-8 text, newlines as written; ``"wb"``: bytes)
    whose content appears under ``path`` only when the block ends without an exception."""
    if mode not in ("w", "wb"):
        raise ValueError(f"mode: expected 'w' or 'wb', got {mode!r}")
    path = destination(path)
    target = path if in_place(path) else temporary_name(path)
    text = {"encoding": "utf-8", "newline": ""} if mode == "w" else {}
    try:
        with open(target, mode, **text) as fh:
            yield fh
        if target != path:
            os.replace(target, path)
    except OutputError:
        raise
    except OSError as e:
        raise cannot_write(path, e) from None
    finally:
        if target != path:
            target.unlink(missing_ok=True)


def make_dirs(path: str | os.PathLike[str]) -> Path:
    """The directory ``path``, created with its parents if needed."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise cannot_write(path, e) from None
    return Path(path)


def write_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_open`."""
    with atomic_open(path) as fh:
        fh.write(text)
    return Path(path)


__all__ = [
    "MAX_LINE_BYTES",
    "atomic_open",
    "cannot_write",
    "destination",
    "in_place",
    "make_dirs",
    "read_input",
    "temporary_name",
    "write_atomic",
]
