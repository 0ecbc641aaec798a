"""Reading input files within bounds, and writing output files so an interrupted write never
leaves a partial file under the name, and a failed one raises
:class:`~dynosim.errors.OutputError` naming the file.

Every file dynosim writes goes through :func:`atomic_open` (or :func:`write_atomic`, the same
for one text): a regular file is written under a temporary name beside it, renamed over the
name once complete and removed when the write fails or is interrupted. The temporary file is
created under a random name, exclusively and never through a link (``O_EXCL | O_NOFOLLOW``),
so nothing planted in the directory can redirect the write.

A path the user names keeps the shell's rules: one that exists and is not a regular file
(``/dev/stdout``, a FIFO, ``/dev/full``) is written in place (renaming over a device would
replace it), and a symbolic link is written through, to the file it names, as ``>`` does. A
file a command creates inside its output directory (``fresh=True``: a sweep's tables, a plan's
``replays.csv``, the rendered manifest) is created fresh instead: whatever is under its name,
a link included, is replaced, never followed."""

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

#: The largest document read whole (a report, a ``vllm bench serve`` result): written on one
#: line, so no line limit applies, but a pipe that never ends is still stopped.
MAX_DOCUMENT_BYTES = 8 << 30


def read_input(
    path: str | os.PathLike[str],
    error: type[Exception],
    what: str,
    *,
    max_line: int | None = None,
    max_bytes: int | None = None,
) -> bytes:
    """The bytes of the input file ``path`` (``what`` names it in messages: "trace", ...).

    Raises ``error`` naming the file when it cannot be read, is a directory or a device (a pipe
    is read, so a process substitution works), or, with ``max_line`` (at least 1 MiB), holds a
    line longer than that many bytes, or with ``max_bytes`` (a document read whole) is longer
    than that: an unbounded input fails at once instead of being read forever.
    """
    try:
        with open(path, "rb") as fh:
            status = os.fstat(fh.fileno())
            if not (stat.S_ISREG(status.st_mode) or stat.S_ISFIFO(status.st_mode)):
                kind = "a directory" if stat.S_ISDIR(status.st_mode) else "a device or socket"
                raise error(f"{path}: cannot read the {what}: not a regular file ({kind})")
            if max_line is not None:
                # A regular file is read in chunks of its size (plus one, to see its end in one
                # read): asking for max_line bytes makes Python allocate, and fault in, that
                # much for every read.
                size = status.st_size + 1 if stat.S_ISREG(status.st_mode) else max_line
                return _read_lines_bounded(fh, path, error, what, max_line, min(size, max_line))
            if max_bytes is None:
                return fh.read()
            data = b"" if status.st_size > max_bytes else fh.read(max_bytes + 1)
            if status.st_size > max_bytes or len(data) > max_bytes:
                raise error(
                    f"{path}: longer than {max_bytes >> 30} GiB: not a {what} dynosim reads "
                    "(a device or a stream that does not end?)"
                )
            return data
    except IsADirectoryError:
        raise error(f"{path}: cannot read the {what}: not a regular file (a directory)") from None
    except OSError as exc:
        raise error(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None


def _read_lines_bounded(
    fh: BinaryIO,
    path: str | os.PathLike[str],
    error: type[Exception],
    what: str,
    max_line: int,
    chunk_bytes: int,
) -> bytes:
    # Chunks of chunk_bytes (at most max_line): a file no longer than that (every usual one) is
    # read in one call into one buffer, which join returns as it is. Lines inside one chunk are
    # no longer than max_line: only a line running across chunks is measured, up to its first
    # break in a later chunk.
    chunks: list[bytes] = []
    lines = 1
    since_break = 0  # bytes since the last line break
    while chunk := fh.read(chunk_bytes):
        chunks.append(chunk)
        # The first and last break; a '\r' is looked for only before the first '\n' and after
        # the last, not through a whole chunk that has none.
        newline = chunk.find(b"\n")
        first = len(chunk) if newline < 0 else newline
        cr = chunk.find(b"\r", 0, first)
        first = first if cr < 0 else cr
        too_long = since_break + first > max_line
        last = chunk.rfind(b"\n")
        last = max(last, chunk.rfind(b"\r", last + 1))
        since_break = since_break + len(chunk) if last < 0 else len(chunk) - last - 1
        if too_long or since_break > max_line:
            # The long line starts after the last break before this chunk (too_long), or after
            # the last break of this one.
            lines += sum(c.count(b"\n") for c in (chunks[:-1] if too_long else chunks))
            raise error(
                f"{path}:{lines}: line longer than {max_line >> 20} MiB: not a {what} "
                "(a binary file or a device?)"
            )
        if len(chunk) < chunk_bytes:
            # A buffered read returns less than asked only at the end: asking again would
            # allocate, and fault in, another chunk_bytes for nothing (about 1.5 ms a 3 MB trace).
            break
    return b"".join(chunks)


def destination(path: str | os.PathLike[str]) -> Path:
    """The file a write to ``path`` lands in: ``path``, or the file a link there names.

    Raises :class:`~dynosim.errors.OutputError` naming ``path`` when its links loop."""
    path = Path(path)
    if not path.is_symlink():
        return path
    try:
        return Path(os.path.realpath(path, strict=True))
    except FileNotFoundError:  # a dangling link: the write creates the file it names
        return Path(os.path.realpath(path))
    except OSError as e:
        raise cannot_write(path, e) from None


#: Opening a temporary file: created here and now, never through a link, not inherited.
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC


def create_temporary(directory: Path, name: str) -> tuple[Path, int]:
    """A new empty file in ``directory`` under a random hidden name derived from ``name``, and
    its open descriptor (write only): created exclusively, so no file or link already there is
    ever opened or followed. Raises OSError when the directory takes no files."""
    import secrets  # here: ~8 ms of a start that writes no file

    while True:
        temporary = directory / f".{name}.{secrets.token_hex(8)}.tmp"
        try:
            return temporary, os.open(temporary, _CREATE, 0o666)
        except FileExistsError:  # a name planted there (by chance: 2^-64): draw another
            continue


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
def atomic_open(
    path: str | os.PathLike[str], mode: str = "w", *, fresh: bool = False
) -> Iterator[IO[Any]]:
    """A file handle (``mode`` ``"w"``: UTF-8 text, newlines as written; ``"wb"``: bytes)
    whose content appears under ``path`` only when the block ends without an exception.

    ``fresh``: ``path`` is a file the command creates in its output directory; whatever is
    under that name is replaced (a link too, never followed), and nothing is written in place.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"mode: expected 'w' or 'wb', got {mode!r}")
    text = {"encoding": "utf-8", "newline": ""} if mode == "w" else {}
    path = Path(path) if fresh else destination(path)
    temporary: Path | None = None
    try:
        if not fresh and in_place(path):
            with open(path, mode, **text) as fh:
                yield fh
            return
        temporary, fd = create_temporary(path.parent, path.name)
        with open(fd, mode, **text) as fh:
            yield fh
        os.replace(temporary, path)  # a link at ``path`` is replaced, not what it names
        temporary = None
    except OutputError:
        raise
    except OSError as e:
        raise cannot_write(path, e) from None
    finally:
        if temporary is not None:
            temporary.unlink(missing_ok=True)


def open_fresh(path: str | os.PathLike[str]) -> IO[str]:
    """A UTF-8 text handle to a new empty file at ``path``, in place of whatever was under
    that name (a link is replaced, not followed): for a file appended to as work goes on,
    such as a sweep's partial rows. Raises OutputError naming ``path``."""
    path = Path(path)
    try:
        temporary, fd = create_temporary(path.parent, path.name)
    except OSError as e:
        raise cannot_write(path, e) from None
    fh = open(fd, "w", encoding="utf-8", newline="")
    try:
        os.replace(temporary, path)
    except OSError as e:
        fh.close()
        temporary.unlink(missing_ok=True)
        raise cannot_write(path, e) from None
    return fh


def make_dirs(path: str | os.PathLike[str]) -> Path:
    """The directory ``path``, created with its parents if needed."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise cannot_write(path, e) from None
    return Path(path)


def write_atomic(path: str | os.PathLike[str], text: str, *, fresh: bool = False) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_open` (``fresh``: a file the
    command creates in its output directory, see there)."""
    with atomic_open(path, fresh=fresh) as fh:
        fh.write(text)
    return Path(path)


__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_LINE_BYTES",
    "atomic_open",
    "cannot_write",
    "create_temporary",
    "destination",
    "in_place",
    "make_dirs",
    "open_fresh",
    "read_input",
    "write_atomic",
]
