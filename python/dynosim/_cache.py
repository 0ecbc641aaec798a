"""Where dynosim keeps what it builds once and reuses: AIConfigurator's timing tables and the
AISimulate comparison binary, each in its own folder under one root."""

from __future__ import annotations

import os
from pathlib import Path

#: Overrides the cache root.
CACHE_ENV = "DYNOSIM_CACHE_DIR"


def default_cache_dir() -> Path:
    """The cache root: ``$DYNOSIM_CACHE_DIR``, else ``$XDG_CACHE_HOME/dynosim``, else
    ``~/.cache/dynosim`` (the XDG default)."""
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given)
    xdg = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec ignores a relative path.
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "dynosim"


__all__ = ["CACHE_ENV", "default_cache_dir"]
