"""The ``dynosim`` command line, one module per command: ``replay``, ``sweep``, ``plan``,
``report`` (HTML pages of saved reports), ``schema``, ``render`` and ``validate`` (DGD
manifests)."""

from __future__ import annotations

import argparse
from types import ModuleType

from dynosim._version import VERSION
from dynosim.cli import plan, render, replay, report, schema, sweep, validate
from dynosim.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, Parser, plain_warnings, run_command

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
    p = Parser(prog="dynosim", description=__doc__)
    p.add_argument("--version", action="version", version=f"dynosim {VERSION}")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``dynosim`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    plain_warnings()
    return run_command("dynosim", lambda: COMMANDS[args.command].run(args))


__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "main"]
