"""``dynosim report``: the self-contained HTML page of a saved replay report, or of two side
by side."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dynosim._dependencies import matplotlib
from dynosim.cli.common import UsageError, missing_extra_is_bad_input
from dynosim.cli.output import check_output
from dynosim.errors import MissingExtraError


def add_parser(sub: Any, line: str) -> None:
    """The ``report`` subcommand and its flags."""
    p = sub.add_parser(
        "report",
        help=line,
        description="Write the self-contained HTML page (no network needed to view it) of a "
        "report saved with 'dynosim replay --json': summary, configuration, provenance, "
        "latency CDFs, rates and state over time, per-worker load. Given two reports, a page "
        "comparing them: their numbers and the change, the settings that differ, overlaid "
        "CDFs. Needs the plot extra: pip install 'dynosim[plot]'.",
    )
    p.add_argument("reports", nargs="+", type=Path, metavar="RUN.json", help="one or two")
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE.html",
        help="where to write (default: report.html, or compare.html for two reports)",
    )
    p.add_argument(
        "--labels",
        nargs=2,
        metavar=("A", "B"),
        help="names of the two reports on a compare page (default: their file names)",
    )


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: reports and pages import numpy and pydantic's models, which
    # report --help does not need.
    from dynosim.report import load_report
    from dynosim.views.pages import compare_page

    paths: list[Path] = args.reports
    if len(paths) > 2:
        raise UsageError(f"report takes one or two reports, got {len(paths)}")
    if args.labels and len(paths) != 2:
        raise UsageError("--labels names the two reports of a comparison")
    default = "report.html" if len(paths) == 1 else "compare.html"
    out = check_output(args.output or Path(default), "-o", paths)
    try:
        matplotlib()
    except MissingExtraError as e:
        raise missing_extra_is_bad_input(e) from None
    reports = [load_report(p) for p in paths]
    if len(reports) == 1:
        reports[0].to_html(out)
    else:
        labels = tuple(args.labels) if args.labels else _labels(paths)
        compare_page(reports[0], reports[1], labels, out)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")
    return 0


def _labels(paths: list[Path]) -> tuple[str, str]:
    """The two reports' file names, or their paths when the names are equal."""
    a, b = paths
    return (a.name, b.name) if a.name != b.name else (str(a), str(b))


__all__ = ["add_parser", "run"]
