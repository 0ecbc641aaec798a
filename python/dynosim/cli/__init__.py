"""The ``dynosim`` command line, one module per command: ``replay``, ``sweep``, ``plan``,
``report`` (HTML pages of saved reports), ``schema``, ``render`` and ``validate`` (DGD
manifests)."""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

from dynosim.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, plain_warnings, run_command

#: The commands, in the order ``--help`` lists them: each is the module of its name here, with
#: ``add_parser(sub)`` and ``run(args)``.
COMMANDS = ("replay", "sweep", "plan", "report", "schema", "render", "validate")


def _parser(argv: list[str]) -> argparse.ArgumentParser:
    """The parser of ``argv``: when its first word names a command, that command's alone, so
    a start imports only what that command needs (the others pull in AIConfigurator's
    generator, the planner, the pages...); otherwise every command's, for the full help."""
    p = argparse.ArgumentParser(prog="dynosim", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    first = next((word for word in argv if not word.startswith("-")), None)
    for name in (first,) if first in COMMANDS else COMMANDS:
        import_module(f"dynosim.cli.{name}").add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``dynosim`` console script; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    args = _parser(argv).parse_args(argv)
    plain_warnings()
    command = import_module(f"dynosim.cli.{args.command}")
    return run_command("dynosim", lambda: command.run(args))


__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "main"]
