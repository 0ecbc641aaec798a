"""dynosim's version, as installed (``0+unknown`` in a source tree that was never installed),
looked up on first use (``dynosim.__version__``, a report's provenance, ``dynosim --version``):
importing importlib.metadata takes about 35 ms, most of ``import dynosim`` and of ``dynosim
--help``, which need no version."""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def version() -> str:
    """The installed distribution's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("dynosim")
    except PackageNotFoundError:
        return "0+unknown"


def __getattr__(name: str) -> Any:
    # `dynosim.__version__` (and its older name `VERSION`), which the package's lazy names
    # read from here.
    if name in ("__version__", "VERSION"):
        return version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["version"]
