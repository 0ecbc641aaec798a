"""The ``dynosim`` command line, one module per command: ``replay``, ``sweep``, ``plan``,
``report`` (HTML pages of saved reports), ``schema``, ``render`` and ``validate`` (DGD
manifests)."""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

from dynosim.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    Parser,
    VersionAction,
    plain_warnings,
    run_command,
)

#: The commands, in the order ``--help`` lists them, with their line there: each is the module
#: of its name here, with ``add_parser(sub, line)`` and ``run(args)``.
COMMANDS = {
    "replay": "replay a trace on a simulated cluster",
    "sweep": "replay a workload under every candidate of a space of configurations",
    "plan": "find the deployment meeting an SLA on the fewest GPUs, with its manifest",
    "report": "HTML page of a saved replay report (or two compared)",
    "schema": "print the JSON schema of the configuration file",
    "render": "render a candidate as a Kubernetes DGD manifest with AIConfigurator",
    "validate": "check a DGD manifest (and that it deploys a candidate)",
}


def _parser(argv: list[str]) -> argparse.ArgumentParser:
    """The parser of ``argv``: when its first word names a command, with that command's
    parser alone, so a start imports only what that command needs (the others pull in
    AIConfigurator's generator, the planner, the pages...); otherwise with each command by
    name and line only, which is all ``dynosim --help`` lists (``dynosim --help`` and
    ``--version`` import no command)."""
    p = Parser(prog="dynosim", description=__doc__)
    p.add_argument("--version", action=VersionAction, help="show dynosim's version and exit")
    sub = p.add_subparsers(dest="command", required=True)
    first = next((word for word in argv if not word.startswith("-")), None)
    if first in COMMANDS:
        import_module(f"dynosim.cli.{first}").add_parser(sub, COMMANDS[first])
    else:
        for name, line in COMMANDS.items():
            sub.add_parser(name, help=line)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``dynosim`` console script; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    args = _parser(argv).parse_args(argv)
    plain_warnings()
    command = import_module(f"dynosim.cli.{args.command}")
    return run_command("dynosim", lambda: command.run(args))


__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "main"]
