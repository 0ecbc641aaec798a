"""``dynosim validate``: check a DynamoGraphDeployment manifest, and that it deploys a
candidate."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dynosim.cli.common import EXIT_FAILED


def add_parser(sub: Any, line: str) -> None:
    """The ``validate`` subcommand and its flags."""
    v = sub.add_parser(
        "validate",
        help=line,
        description="Check a DynamoGraphDeployment manifest; with --candidate, also that it "
        "deploys that candidate. Prints one line per problem, naming its path, and exits 1 "
        "when there is any.",
    )
    v.add_argument("manifest", type=Path, help="manifest file (multi-document YAML)")
    v.add_argument("--candidate", type=Path, help="candidate YAML or JSON file")


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: dynosim.deploy imports the configuration models and AIC's
    # tables, which validate --help does not need.
    from dynosim.deploy import load_candidate, validate_manifest

    candidate = load_candidate(args.candidate) if args.candidate is not None else None
    problems = validate_manifest(args.manifest, candidate)
    for problem in problems:
        print(problem)
    if problems:
        print(f"dynosim: {args.manifest}: {len(problems)} problem(s)", file=sys.stderr)
        return EXIT_FAILED
    print(f"{args.manifest}: no problems")
    return 0


__all__ = ["add_parser", "run"]
