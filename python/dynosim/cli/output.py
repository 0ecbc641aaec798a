"""Output paths checked before any long work: a file the command will write must be
creatable or replaceable, and must not be one of its inputs."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from dynosim.cli.common import UsageError


def check_output(path: Path, flag: str, inputs: Iterable[Path | None] = ()) -> Path:
    """``path`` when a file can be written there; otherwise a UsageError (exit 2) naming
    ``flag`` and the path: its directory is missing or not writable, it is a directory or an
    unwritable file, or it is one of ``inputs``."""
    where = f"{flag} {path}"
    if path.is_dir():
        raise UsageError(f"{where}: is a directory; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{where}: the directory {parent} does not exist")
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"{where}: the file is not writable")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{where}: cannot create files in {parent}")
    for given in inputs:
        if given is not None and path.exists() and given.exists() and path.samefile(given):
            raise UsageError(f"{where}: is an input of this command; it would be overwritten")
    return path


__all__ = ["check_output"]
