"""The exceptions dynosim raises.

Every error derives from :class:`DynosimError`. Errors caused by bad input (a malformed trace, an
invalid configuration) also derive from :class:`ValueError`, so ``except ValueError`` keeps working
for callers that do not know dynosim's hierarchy.
"""

from __future__ import annotations

import os
import sys
import warnings

#: Files under this directory are dynosim's own (spelled as the interpreter names its code).
_PACKAGE_DIR = os.path.dirname(__file__) + os.sep


class DynosimError(Exception):
    """Base class of every error dynosim raises."""


class WorkloadError(DynosimError, ValueError):
    """A trace or synthetic workload is malformed (the message names file, line, field, value)."""


class ConfigError(DynosimError, ValueError):
    """A simulation configuration is invalid (the message names the field and value)."""


class SimulationError(DynosimError, RuntimeError):
    """The simulator could not finish a replay (an internal invariant broke; please report it)."""


class MissingExtraError(DynosimError, ImportError):
    """An optional dependency is needed for this feature; the message says what to install."""


class ManifestError(DynosimError, ValueError):
    """A DGD manifest cannot be read, or AIC's generator did not render one (the message says
    which file or artifact)."""


class ReportError(DynosimError, ValueError):
    """A saved report cannot be read: not a dynosim report, or written by an incompatible
    version (the message names the file)."""


def warn(message: str) -> None:
    """Warn (UserWarning) at the first caller outside dynosim, however deep inside the package
    the warning arises, so it points at the user's line rather than dynosim's source."""
    level, frame = 2, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, UserWarning, stacklevel=level)


class OutputError(DynosimError, OSError):
    """An output file cannot be written (the message names it and says why)."""


__all__ = [
    "ConfigError",
    "DynosimError",
    "ManifestError",
    "MissingExtraError",
    "OutputError",
    "ReportError",
    "SimulationError",
    "WorkloadError",
    "warn",
]
