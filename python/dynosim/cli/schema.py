"""``dynosim schema``: print the JSON schema of the configuration file."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(sub: Any, line: str) -> None:
    """The ``schema`` subcommand."""
    sub.add_parser("schema", help=line)


def run(args: argparse.Namespace) -> int:
    """Print the schema; exit 0."""
    from dynosim.config import config_json_schema  # pydantic's models: not for --help

    print(json.dumps(config_json_schema(), indent=2, sort_keys=True))
    return 0


__all__ = ["add_parser", "run"]
