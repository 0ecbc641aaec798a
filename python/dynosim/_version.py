"""dynosim's version, as installed (``0+unknown`` in a source tree that was never installed)."""

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("dynosim")
except PackageNotFoundError:
    VERSION = "0+unknown"

__all__ = ["VERSION"]
