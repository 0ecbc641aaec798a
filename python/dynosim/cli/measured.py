"""``dynosim replay MEASURED --measured``: replay a real benchmark's requests on the configured
deployment and print the simulated latencies and throughput beside the measured ones."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from dynosim.cli.common import SYNTHETIC_FLAGS, UsageError
from dynosim.workload.measured import MEASURED_FORMATS, load_measured

if TYPE_CHECKING:
    from dynosim.compare.measured import MeasuredComparison
    from dynosim.workload.measured import MeasuredRun

#: How each compared metric is shown.
_LABELS = {
    "ttft_ms": "TTFT (ms)",
    "tpot_ms": "TPOT (ms)",
    "itl_ms": "ITL (ms)",
    "e2e_ms": "E2E (ms)",
    "completed_requests": "completed requests",
    "request_throughput_rps": "requests/s",
    "output_token_throughput_tps": "output tokens/s",
}


def add_arguments(parser: Any) -> None:
    """The ``--measured`` flag of ``dynosim replay``."""
    parser.add_argument(
        "--measured",
        action="store_true",
        help="TRACE is a measured benchmark run (AIPerf profile_export.jsonl or vllm bench "
        "serve --save-result --save-detailed JSON): replay its requests and print simulated "
        "vs measured",
    )


def measured_run(args: argparse.Namespace) -> tuple[MeasuredRun, str] | None:
    """The measured run the flags name and a name for it, or None without ``--measured``
    (checking that the flags go together)."""
    if not args.measured:
        if args.format in MEASURED_FORMATS:
            raise UsageError(f"--format {args.format} reads a measured run: add --measured")
        return None
    if args.format is not None and args.format not in MEASURED_FORMATS:
        raise UsageError(
            f"--measured reads {' or '.join(MEASURED_FORMATS)} (--format), "
            f"not the trace format {args.format}"
        )
    synthetic = [
        f"--{k.replace('_', '-')}" for k in SYNTHETIC_FLAGS if getattr(args, k) is not None
    ]
    if args.synthetic or synthetic:
        flags = ", ".join(["--synthetic"] * args.synthetic + synthetic)
        raise UsageError(f"--measured replays the measured requests; {flags} do not apply")
    if args.trace is None:
        raise UsageError("--measured needs the measured file: dynosim replay MEASURED --measured")
    run = load_measured(args.trace, args.format)
    return run, f"measured run {args.trace} ({run.format})"


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render_comparison(comparison: MeasuredComparison) -> Any:
    """A rich renderable: what was replayed, the notes, and a table of every metric with
    the simulated and measured values and the error in %."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    skipped = ", ".join(f"{n} {reason}" for reason, n in comparison.not_replayed.items())
    lines = [
        Text(f"simulated vs measured ({comparison.format}: {comparison.path})", style="bold"),
        Text(
            f"{comparison.measured_records:,} records, {comparison.replayed:,} replayed"
            + (f"; not replayed: {skipped}" if skipped else "")
            + f"; {comparison.left_out:,} rejected by the simulated deployment and left out of "
            f"both sides; {comparison.compared:,} compared"
        ),
        *(Text(f"note: {note}") for note in comparison.notes),
    ]
    table = Table()
    for name in ("metric", "stat"):
        table.add_column(name, style="bold")
    for name in ("simulated", "measured", "error %"):
        table.add_column(name, justify="right")
    for row in comparison.rows:
        digits = 0 if row.metric == "completed_requests" else 2
        error = "-" if row.error_pct is None else f"{row.error_pct:+.1f}"
        table.add_row(
            _LABELS[row.metric],
            row.stat or "",
            _fmt(row.simulated, digits),
            _fmt(row.measured, digits),
            error,
        )
    return Group(*lines, table)


__all__ = ["add_arguments", "measured_run", "render_comparison"]
