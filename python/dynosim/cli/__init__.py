"""The ``dynosim`` command line, one module per command: ``replay``, ``sweep``, ``plan``,
``report`` (HTML pages of saved reports), ``schema``, ``render`` and ``validate`` (DGD
manifests)."""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from dynosim.cli import plan, render, replay, report, schema, sweep, validate
from dynosim.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, plain_warnings
from dynosim.errors import DynosimError

#: The commands by name, in the order ``--help`` lists them.
COMMANDS: dict[str, ModuleType] = {
    "replay": replay,
    "sweep": sweep,
    "plan": plan,
    "report": report,
    "schema": schema,
    "render": render,
    "validate": validate,
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dynosim", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``dynosim`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    plain_warnings()
    try:
        return COMMANDS[args.command].run(args)
    except ValueError as e:  # bad trace, config or flags (WorkloadError, ConfigError, ...)
        print(f"dynosim: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except DynosimError as e:
        print(f"dynosim: error: {e}", file=sys.stderr)
        return EXIT_FAILED


__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "main"]
