"""``dynosim sweep``: replay a workload under every candidate of a space of configurations and
write the table: ``results.csv``, ``results.jsonl`` and ``pareto.csv``, and the picture of
it, ``pareto.html``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dynosim._files import cannot_write, make_dirs, open_fresh, write_atomic
from dynosim.cli.common import (
    EXIT_FAILED,
    add_workload_arguments,
    can_plot,
    missing_extra_is_bad_input,
    workload_from_args,
)
from dynosim.cli.output import check_output_dir
from dynosim.cli.rows import (
    add_search_arguments,
    rows_table,
    sla_from_args,
    wide_console,
)
from dynosim.errors import MissingExtraError

#: Rows are appended here as replays finish; it is removed once the complete files exist.
PARTIAL = "results.partial.jsonl"
#: The files of a complete sweep, written once every replay is done.
COMPLETE = ("results.jsonl", "results.csv", "pareto.csv", "pareto.html")


def add_parser(sub: Any, line: str) -> None:
    """The ``sweep`` subcommand and its flags."""
    p = sub.add_parser(
        "sweep",
        help=line,
        description="Replay TRACE (or --synthetic traffic) under every candidate of --space "
        "applied to --config, and write DIR/results.csv, DIR/results.jsonl and DIR/pareto.csv "
        "(the front of tokens/s/GPU against tokens/s/user among candidates meeting the SLA), "
        "and DIR/pareto.html, every candidate on those axes (with the plot extra). "
        "Rows are appended to DIR/results.partial.jsonl as replays finish, so an interrupted "
        "sweep leaves what it computed there and no complete-looking file (an earlier sweep's "
        "files in DIR are removed once the first row is in). Exits 1 when an SLA "
        "is given and no candidate meets it.",
    )
    add_workload_arguments(p)
    p.add_argument("--config", type=Path, help="base configuration (YAML or JSON)")
    p.add_argument(
        "--space",
        type=Path,
        required=True,
        help="YAML/JSON: dotted config paths -> lists of values (their grid), and optionally "
        "'zip:' with paths -> lists paired element-wise",
    )
    add_search_arguments(p)
    p.add_argument(
        "--force-jobs",
        action="store_true",
        help="run --jobs replays at once even past the CPUs, the candidates or the memory "
        "they are estimated to need",
    )
    p.add_argument(
        "-o", "--output", "--save-dir", type=Path, required=True, metavar="DIR", help="output dir"
    )


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: the configuration models, the planner (numpy, AIC's tables) and
    # the pages, which sweep --help does not need.
    from dynosim.config import load_config
    from dynosim.plan import Space, sweep
    from dynosim.views.pages import pareto_page

    out: Path = check_output_dir(args.output, "-o", (*COMPLETE, PARTIAL))
    space = Space.load(args.space)
    base = load_config(args.config)
    sla = sla_from_args(args)
    workload, source = workload_from_args(args, sample_when_missing=False)
    make_dirs(out)
    plot = can_plot(f"{out}/pareto.html")
    partial = out / PARTIAL
    handle: list[Any] = []  # opened with the first row: bad input leaves no file behind

    def keep(row: dict[str, Any]) -> None:
        try:
            if not handle:
                # An earlier sweep's complete files would sit beside this one's partial rows,
                # looking like its results if it is cut short.
                for name in COMPLETE:
                    (out / name).unlink(missing_ok=True)
                handle.append(open_fresh(partial))
            handle[0].write(json.dumps(row, sort_keys=True, default=str) + "\n")
            handle[0].flush()
        except OSError as e:
            raise cannot_write(partial, e) from None

    try:
        result = sweep(
            workload,
            base,
            space,
            sla=sla,
            executor=args.executor,
            jobs=args.jobs,
            force_jobs=args.force_jobs,
            address=args.address,
            progress=not args.no_progress,
            on_row=keep,
        )
    except MissingExtraError as e:
        raise missing_extra_is_bad_input(e) from None
    finally:
        for fh in handle:
            fh.close()
    # Files of the output directory are created fresh: a link planted there is replaced.
    write_atomic(out / "results.jsonl", result.jsonl_text(), fresh=True)
    write_atomic(out / "results.csv", result.csv_text(), fresh=True)
    front = result.pareto()
    write_atomic(out / "pareto.csv", front.csv_text(), fresh=True)
    if plot:
        page = pareto_page(result, result.best(), f"dynosim sweep of {source}")
        write_atomic(out / "pareto.html", page, fresh=True)
    partial.unlink(missing_ok=True)
    console = wide_console()
    met = len(result.feasible())
    failed = len(result.failed())
    console.print(
        f"dynosim sweep of {source}: {len(result)} candidates, {met} meet {sla.describe()}"
        + (f", {failed} failed (see 'error' in results.csv)" if failed else "")
        + f"; wrote {out}/results.csv, results.jsonl, pareto.csv"
        + (", pareto.html" if plot else "")
    )
    if not front.rows:
        console.print(
            rows_table(
                "no candidate meets the SLA; the closest:", result.closest(5), result.settings, sla
            )
        )
        return EXIT_FAILED
    console.print(
        rows_table(
            "Pareto front (tokens/s/GPU against tokens/s/user)", front.rows, result.settings, sla
        )
    )
    best = result.best()
    if best is not None:
        print(
            f"fewest GPUs meeting the SLA: candidate {best['index']} ({best['gpus']} GPUs)",
            file=sys.stdout,
        )
    return 0


__all__ = ["COMPLETE", "PARTIAL", "add_parser", "run"]
