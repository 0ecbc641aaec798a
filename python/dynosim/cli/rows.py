"""Tables of sweep and plan rows for the terminal, and the flags sweep and plan share: the SLA
and where replays run."""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dynosim._plan_defaults import (
    DEFAULT_EXECUTOR,
    DEFAULT_TPOT_STAT,
    DEFAULT_TTFT_STAT,
    EXECUTORS,
    STATS,
)
from dynosim.cli.common import name_flags, typed
from dynosim.errors import ConfigError

if TYPE_CHECKING:
    from dynosim.plan import Sla

#: Short headers of the plan's settings.
_HEADERS = {"replicas": "workers", "prefill_workers": "prefill", "decode_workers": "decode"}


def add_search_arguments(parser: Any) -> None:
    """The SLA flags and the executor flags."""
    s = parser.add_argument_group("SLA (a candidate meets it when every limit holds)")
    s.add_argument("--sla-ttft-ms", "--ttft", type=float, help="TTFT limit (ms)")
    s.add_argument("--sla-tpot-ms", "--tpot", type=float, help="TPOT limit (ms)")
    s.add_argument(
        "--sla-percentile",
        choices=STATS,
        default=DEFAULT_TTFT_STAT,
        help=f"TTFT statistic limited ({DEFAULT_TTFT_STAT})",
    )
    s.add_argument(
        "--sla-tpot-stat",
        choices=STATS,
        default=DEFAULT_TPOT_STAT,
        help=f"TPOT statistic limited ({DEFAULT_TPOT_STAT})",
    )
    e = parser.add_argument_group("where replays run")
    e.add_argument(
        "--executor",
        choices=EXECUTORS,
        default=DEFAULT_EXECUTOR,
        help="thread pool (default), process pool, or Ray tasks (pip install 'dynosim[ray]')",
    )
    e.add_argument("--jobs", type=int, help="parallel replays (default: the CPU count)")
    e.add_argument(
        "--address",
        help="with --executor ray: an existing Ray cluster's address (ray start --head "
        "prints it, e.g. 127.0.0.1:6379); default: start Ray locally",
    )
    parser.add_argument("--no-progress", action="store_true", help="never show a progress bar")


def sla_from_args(args: argparse.Namespace) -> Sla:
    """The SLA the flags give; a bad limit is named by the flag as typed."""
    # Here, not at the top: dynosim.plan imports the planner (numpy, AIC's tables), which
    # sweep --help and plan --help do not need.
    from dynosim.plan import Sla

    try:
        return Sla(
            ttft_ms=args.sla_ttft_ms,
            tpot_ms=args.sla_tpot_ms,
            ttft_stat=args.sla_percentile,
            tpot_stat=args.sla_tpot_stat,
        )
    except ConfigError as e:
        given = [
            (f"sla.{key}", typed(args, f"sla_{key}"), getattr(args, f"sla_{key}"))
            for key in ("ttft_ms", "tpot_ms")
        ]
        raise name_flags(e, given) from None


def wide_console() -> Any:
    """A console on stdout, 160 columns wide when stdout is not a terminal (a file or a pipe
    gets the whole table rather than 80 columns of ellipses)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=160)


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value)


def rows_table(
    title: str, rows: Sequence[Mapping[str, Any]], settings: Sequence[str], sla: Sla
) -> Any:
    """A rich Table: the settings given, GPUs, tokens/s/GPU and per user, the limited
    statistics, and whether (or how) the SLA is met."""
    from rich.table import Table

    shown = [s for s in settings if any(r.get(s) is not None for r in rows)]
    stats = [
        (f"{m.removesuffix('_ms')}_{stat}_ms", f"{m.removesuffix('_ms').upper()} {stat}")
        for m, (stat, _) in sla.limits().items()
    ]
    table = Table(title=title, title_justify="left")
    for col in ["#", *(_HEADERS.get(s, s) for s in shown), "GPUs", "tok/s/GPU", "tok/s/user"]:
        table.add_column(col, justify="left" if col in ("layout",) else "right")
    for _, label in stats:
        table.add_column(f"{label} ms", justify="right")
    table.add_column("SLA")
    for r in rows:
        stat_cells = [_fmt(r.get(key)) for key, _ in stats]
        verdict = "met" if r["sla_met"] else (r["error"] or r["sla_misses"] or "missed")
        table.add_row(
            str(r["index"]),
            *(_fmt(r.get(s)) for s in shown),
            _fmt(r["gpus"]),
            _fmt(r["output_tps_per_gpu"]),
            _fmt(r["tps_per_user"]),
            *stat_cells,
            verdict,
        )
    return table


def text_table(title: str, head: Sequence[str], rows: Sequence[Sequence[str]]) -> Any:
    """A rich Table of text cells under ``head``."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in head:
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    return table


__all__ = [
    "add_search_arguments",
    "rows_table",
    "sla_from_args",
    "text_table",
    "wide_console",
]
