"""Output paths checked before any long work: a file the command will write must be
creatable or replaceable and must not be one of its inputs; a directory it will fill must be
a directory, or creatable. Every output flag of every command (``--json``, ``--html``,
``-o``, ``--report-json``, sweep and plan directories, render's) is checked here, and the
files are then written through :mod:`dynosim._files`, whose errors name the file."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from dynosim._files import create_temporary, destination, in_place
from dynosim.cli.common import UsageError


def _same(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file (existing or not)."""
    if a.exists() and b.exists():
        return a.samefile(b)
    return a.resolve() == b.resolve()


def _probe(directory: Path, where: str) -> None:
    """Create and remove a temporary file in ``directory`` as the write will: the one test of
    being able to create a file there that holds for root, read-only mounts and pseudo file
    systems alike (where ``os.access`` says yes)."""
    try:
        probe, fd = create_temporary(directory, "dynosim-probe")
    except OSError as e:
        raise UsageError(f"{where}: cannot create files in {directory}: {e.strerror}") from None
    os.close(fd)
    probe.unlink(missing_ok=True)


def check_output(path: Path, flag: str, inputs: Iterable[Path | None] = ()) -> Path:
    """``path`` when a file can be written there; otherwise a UsageError (exit 2) naming
    ``flag`` and the path: its directory is missing or not writable, it is a directory or an
    unwritable file, or it is one of ``inputs``. A link is checked as the file it names."""
    where = f"{flag} {path}"
    _not_stdout(path, flag, "a file name")
    if path.is_dir():
        raise UsageError(f"{where}: is a directory; give a file name")
    target = destination(path)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise UsageError(f"{where}: {parent} {what}")
    for source in inputs:
        if source is not None and _same(target, source):
            raise UsageError(f"{where}: is an input of this command; it would be overwritten")
    if target.exists() and not os.access(target, os.W_OK):
        raise UsageError(f"{where}: the file is not writable")
    if not in_place(target):  # a device or a FIFO is written in place, never replaced
        _probe(parent, where)
    return path


def check_outputs(
    outputs: Sequence[tuple[str, Path | None]], inputs: Iterable[Path | None] = ()
) -> None:
    """:func:`check_output` of each ``(flag, path)`` given (None: not asked for), and no two
    flags naming one file."""
    inputs = list(inputs)
    given = [(flag, path) for flag, path in outputs if path is not None]
    for k, (flag, path) in enumerate(given):
        check_output(path, flag, inputs)
        for other_flag, other in given[:k]:
            if _same(path, other):
                raise UsageError(f"{other_flag} and {flag} name the same file {path}")


def check_output_dir(path: Path, flag: str, files: Iterable[str] = ()) -> Path:
    """``path`` when the command can fill it with files (``files``: names it writes there):
    a directory that exists or can be created, where none of ``files`` is a directory;
    otherwise a UsageError (exit 2) naming ``flag`` and the path. Those files are created
    fresh (:func:`dynosim._files.atomic_open` with ``fresh``): a link under one of their names
    is replaced, whatever it names."""
    where = f"{flag} {path}"
    _not_stdout(path, flag, "a directory")
    if path.exists() and not path.is_dir():
        raise UsageError(f"{where}: is a file; give a directory")
    for name in files:
        if _is_directory(path / name):
            raise UsageError(f"{where}: {path / name} is a directory; it would be a file")
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
        if existing.exists() and not existing.is_dir():
            raise UsageError(f"{where}: {existing} is not a directory")
    _probe(existing, where)
    return path


def _not_stdout(path: Path, flag: str, what: str) -> None:
    """Refuse ``-``, which a user means as standard output (only ``--json`` writes there):
    written as a file named ``-``, it would surprise."""
    if str(path) == "-":
        raise UsageError(
            f"{flag} -: standard output takes only --json; give {what} (./- for one named -)"
        )


def _is_directory(path: Path) -> bool:
    """Whether ``path`` itself is a directory (a link to one is not: it would be replaced)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


__all__ = ["check_output", "check_output_dir", "check_outputs"]
