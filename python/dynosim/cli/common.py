"""What every ``dynosim`` command shares: exit codes and the usage error."""

from __future__ import annotations

from dynosim.errors import DynosimError

#: Exit codes: bad input (trace, config, flags) and a failed simulation.
EXIT_BAD_INPUT = 2
EXIT_FAILED = 1


class UsageError(DynosimError, ValueError):
    """Flags that do not go together (the message names them)."""


__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "UsageError"]
