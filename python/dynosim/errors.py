"""The exceptions dynosim raises.

Every error derives from :class:`DynosimError`. Errors caused by bad input (a malformed trace, an
invalid configuration) also derive from :class:`ValueError`, so ``except ValueError`` keeps working
for callers that do not know dynosim's hierarchy.
"""

from __future__ import annotations


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
]
