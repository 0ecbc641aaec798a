"""``dynosim plan``: the deployment of a model that serves a workload within an SLA on the
fewest GPUs; prints the ranked candidates, writes ``pareto.csv``, ``replays.csv``, their
picture ``pareto.html``, the pick's ``candidate.yaml`` and its manifest (``k8s_deploy.yaml``
and AIC's other artifacts)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from dynosim._files import make_dirs, write_atomic
from dynosim.cli.common import (
    EXIT_FAILED,
    UsageError,
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
from dynosim.config import load_config
from dynosim.deploy import RenderOptions
from dynosim.errors import MissingExtraError
from dynosim.plan import plan
from dynosim.views.pages import pareto_page

#: The row columns a plan prints (the layout names the TP sizes).
SHOWN = ("layout", "replicas", "prefill_workers", "decode_workers")


def add_parser(sub: Any, line: str) -> None:
    """The ``plan`` subcommand and its flags."""
    p = sub.add_parser(
        "plan",
        help=line,
        description="Search the layouts AIConfigurator's default mode considers (aggregated "
        "TP x replicas; disaggregated prefill TP x decode TP x worker counts) within "
        "--max-gpus, each timed with AIC, for the fewest GPUs meeting the SLA on TRACE (or "
        "--synthetic traffic), by bisection over worker counts. Prints the ranked candidates, "
        "writes DIR/pareto.csv, DIR/replays.csv, DIR/pareto.html (every replay on the Pareto "
        "axes, with the plot extra), the pick's DIR/candidate.yaml and its DIR/k8s_deploy.yaml "
        "(validated against it; dynosim validate checks it again). "
        "Exits 1 when no candidate meets the SLA (the closest are shown). Needs "
        "pip install 'dynosim[aic]'.",
    )
    add_workload_arguments(p)
    p.add_argument("--model", required=True, help="AIC model, e.g. Qwen/Qwen3-32B")
    p.add_argument("--system", required=True, help="AIC system, e.g. h200_sxm")
    p.add_argument("--backend", choices=["trtllm", "vllm", "sglang"], default="trtllm")
    p.add_argument("--backend-version", help="engine release (default: the Dynamo release's)")
    p.add_argument(
        "--max-gpus", "--total-gpus", type=int, required=True, help="most GPUs a deployment may use"
    )
    p.add_argument("--tp", type=int, nargs="+", default=[1, 2, 4, 8], help="TP sizes")
    p.add_argument(
        "--dp", type=int, nargs="+", default=[1], help="DP ranks per worker (attention DP for MoE)"
    )
    p.add_argument(
        "--ep",
        type=int,
        nargs="+",
        default=[1],
        help="expert-parallel sizes (MoE models): a worker's TP x DP GPUs split the experts",
    )
    p.add_argument(
        "--modes",
        nargs="+",
        choices=["aggregated", "disaggregated"],
        default=["aggregated", "disaggregated"],
        help="serving modes",
    )
    p.add_argument("--max-batch-size", type=int, nargs="+", help="batch caps (default: base's)")
    p.add_argument(
        "--config",
        type=Path,
        help="base configuration (routing, KV links, each role's own engine, ...)",
    )
    p.add_argument(
        "--search",
        choices=["bisect", "grid"],
        default="bisect",
        help="bisection over worker counts (default) or the whole grid",
    )
    p.add_argument("--dynamo-version", help="Dynamo release to deploy (default: AIC's)")
    p.add_argument("--no-render", action="store_true", help="do not render the pick's manifest")
    add_search_arguments(p)
    p.add_argument(
        "-o", "--output", "--save-dir", type=Path, required=True, metavar="DIR", help="output dir"
    )


def run(args: argparse.Namespace) -> int:
    if args.sla_ttft_ms is None and args.sla_tpot_ms is None:
        raise UsageError("plan needs an SLA: --sla-ttft-ms and/or --sla-tpot-ms")
    out: Path = check_output_dir(
        args.output,
        "-o",
        ("replays.csv", "pareto.csv", "pareto.html", "candidate.yaml", "k8s_deploy.yaml"),
    )
    workload, source = workload_from_args(args, sample_when_missing=False)
    plot = can_plot(f"{args.output}/pareto.html")
    options = RenderOptions(dynamo_version=args.dynamo_version) if args.dynamo_version else None
    try:
        result = plan(
            workload,
            model=args.model,
            system=args.system,
            backend=args.backend,
            backend_version=args.backend_version,
            sla=sla_from_args(args),
            max_gpus=args.max_gpus,
            modes=args.modes,
            tp=args.tp,
            dp=args.dp,
            ep=args.ep,
            max_batch_size=args.max_batch_size,
            base=load_config(args.config),
            search=args.search,
            executor=args.executor,
            jobs=args.jobs,
            progress=not args.no_progress,
            render=not args.no_render,
            render_options=options,
        )
    except MissingExtraError as e:
        raise missing_extra_is_bad_input(e) from None
    make_dirs(out)
    # Files of the output directory are created fresh: a link planted there is replaced.
    write_atomic(out / "replays.csv", result.replays.csv_text(), fresh=True)
    write_atomic(out / "pareto.csv", result.pareto.csv_text(), fresh=True)
    if plot:
        title = f"dynosim plan of {source}: {args.model} on {args.system}"
        page = pareto_page(result.replays, result.pick, title, front=result.pareto.rows)
        write_atomic(out / "pareto.html", page, fresh=True)
    console = wide_console()
    console.print(
        f"dynosim plan of {source}: {args.model} on {args.system} ({args.backend}), "
        f"{result.sla.describe()}, at most {args.max_gpus} GPUs: {result.replays_run} replays "
        f"(the full grid has {result.grid_size}) in {result.wall_s:.1f} s"
    )
    for lay in result.layouts:
        if lay.error:
            print(f"dynosim: {lay.name}: not searched: {lay.error}", file=sys.stderr)
        elif lay.violations:
            print(
                f"dynosim: {lay.name}: more workers made it worse ({lay.violations[0]}); "
                "searched by a linear scan",
                file=sys.stderr,
            )
    if result.pick is None:
        console.print(
            rows_table(
                "no candidate meets the SLA; the closest:", result.closest(5), SHOWN, result.sla
            )
        )
        return EXIT_FAILED
    console.print(
        rows_table(
            "ranked candidates (each layout's fewest GPUs meeting the SLA)",
            result.ranked,
            SHOWN,
            result.sla,
        )
    )
    pick = result.pick
    console.print(f"pick: {pick['layout']}, {pick['gpus']} GPUs (candidate {pick['index']})")
    # The deployment as rendered (with the context length its manifest carries), for
    # dynosim render and dynosim validate --candidate.
    deployed = result.rendered.deployed if result.rendered is not None else result.candidate
    assert deployed is not None  # a pick has its candidate
    candidate = yaml.safe_dump(deployed.model_dump(mode="json"), sort_keys=False)
    write_atomic(out / "candidate.yaml", candidate, fresh=True)
    if result.rendered is not None:
        for warning in result.rendered.aic_warnings:
            print(f"dynosim: AIC {warning}", file=sys.stderr)
        result.rendered.write(out)
        for problem in result.problems:
            print(problem)
        if result.problems:
            print(
                f"dynosim: {out}/k8s_deploy.yaml: {len(result.problems)} problem(s)",
                file=sys.stderr,
            )
            return EXIT_FAILED
        console.print(
            f"wrote {out}/k8s_deploy.yaml (valid for the pick), candidate.yaml, pareto.csv, "
            "replays.csv" + (", pareto.html" if plot else "")
        )
    return 0


__all__ = ["add_parser", "run"]
