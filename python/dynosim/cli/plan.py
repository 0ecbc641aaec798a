"""``dynosim plan``: the deployment of a model that serves a workload within an SLA on the
fewest GPUs; prints the ranked candidates, writes ``pareto.csv``, ``replays.csv``, their
picture ``pareto.html``, the pick's ``candidate.yaml`` and its manifest (``k8s_deploy.yaml``
and AIC's other artifacts)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynosim._defaults import BACKENDS, MODES
from dynosim._files import make_dirs, write_atomic
from dynosim._plan_defaults import (
    DEFAULT_SEARCH,
    PLAN_BACKEND,
    PLAN_DP,
    PLAN_EP,
    PLAN_TP,
    SEARCHES,
)
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
    text_table,
    wide_console,
)
from dynosim.errors import MissingExtraError

if TYPE_CHECKING:
    from dynosim.plan import PlanResult


def add_parser(sub: Any, line: str) -> None:
    """The ``plan`` subcommand and its flags."""
    p = sub.add_parser(
        "plan",
        help=line,
        description="Search the layouts AIConfigurator's default mode considers (aggregated "
        "TP x replicas; disaggregated prefill TP x decode TP x worker counts, KV moved over "
        "the system's links) within --max-gpus, each timed with AIC, with the engine settings "
        "that decide feasibility (chunked prefill, the pass token budget, the batch cap), for "
        "the fewest GPUs meeting the SLA on TRACE (or --synthetic traffic): the settings "
        "pruned by the trace's longest prompt and concurrency and tried on its longest "
        "requests first, worker counts by bisection. Prints how many replays ran against the "
        "full grid, the ranked candidates and why the pick and the runner-up are where they "
        "are (the constraint that binds and by how much), writes DIR/pareto.csv, "
        "DIR/replays.csv, DIR/pareto.html (every replay on the Pareto axes, with the plot "
        "extra), the pick's DIR/candidate.yaml and its DIR/k8s_deploy.yaml with the engine "
        "settings simulated (validated against it; dynosim validate checks it again). Exits 1 "
        "when no candidate meets the SLA (the closest are shown). Needs "
        "pip install 'dynosim[aic]'.",
    )
    add_workload_arguments(p)
    p.add_argument("--model", required=True, help="AIC model, e.g. Qwen/Qwen3-32B")
    p.add_argument("--system", required=True, help="AIC system, e.g. h200_sxm")
    p.add_argument("--backend", choices=BACKENDS, default=PLAN_BACKEND)
    p.add_argument("--backend-version", help="engine release (default: the Dynamo release's)")
    p.add_argument(
        "--max-gpus", "--total-gpus", type=int, required=True, help="most GPUs a deployment may use"
    )
    p.add_argument("--tp", type=int, nargs="+", default=list(PLAN_TP), help="TP sizes")
    p.add_argument(
        "--dp",
        type=int,
        nargs="+",
        default=list(PLAN_DP),
        help="DP ranks per worker (attention DP for MoE)",
    )
    p.add_argument(
        "--ep",
        type=int,
        nargs="+",
        default=list(PLAN_EP),
        help="expert-parallel sizes (MoE models): a worker's TP x DP GPUs split the experts",
    )
    p.add_argument(
        "--modes",
        nargs="+",
        choices=MODES,
        default=list(MODES),
        help="serving modes",
    )
    e = p.add_argument_group("engine settings searched (default: a ladder around the engine's)")
    e.add_argument(
        "--chunked-prefill",
        nargs="+",
        choices=["on", "off"],
        help="chunked prefill / chunked context (default: on and off where the engine has "
        "the switch and AIC renders both: TensorRT-LLM; vLLM on; SGLang always chunks)",
    )
    e.add_argument(
        "--token-budgets",
        type=int,
        nargs="+",
        metavar="TOKENS",
        help="pass token budgets (vLLM max_num_batched_tokens, TensorRT-LLM max_num_tokens, "
        "SGLang chunked_prefill_size; default: 1/2, 1, 2 and 4 x the engine's)",
    )
    e.add_argument(
        "--max-batch-size",
        type=int,
        nargs="+",
        help="batch caps, max_num_seqs (default: 1/4, 1/2 and 1 x the base engine's)",
    )
    e.add_argument(
        "--no-prune",
        action="store_true",
        help="search every setting of the whole ladder (slow: the reference the pruned "
        "search is tested against)",
    )
    k = p.add_argument_group("links and tiers")
    k.add_argument(
        "--kv-link-gbps",
        type=float,
        metavar="GBPS",
        help="one GPU's link for KV moved from prefill to decode workers, GB/s (default: the "
        "system's network link per GPU, from AIC's system spec); a rank's is its TP GPUs'",
    )
    k.add_argument("--g2-blocks", type=int, help="G2 (host memory) KV blocks per rank")
    k.add_argument("--g3-blocks", type=int, help="G3 (disk) KV blocks per rank; needs G2")
    p.add_argument(
        "--config",
        type=Path,
        help="base configuration (routing, KV links, each role's own engine, ...)",
    )
    p.add_argument(
        "--search",
        choices=SEARCHES,
        default=DEFAULT_SEARCH,
        help="bisection over worker counts (default) or the whole grid",
    )
    p.add_argument("--dynamo-version", help="Dynamo release to deploy (default: AIC's)")
    p.add_argument("--no-render", action="store_true", help="do not render the pick's manifest")
    add_search_arguments(p)
    p.add_argument(
        "-o", "--output", "--save-dir", type=Path, required=True, metavar="DIR", help="output dir"
    )


def _header(result: PlanResult, args: argparse.Namespace, source: str) -> str:
    ladder = result.ladder
    layouts = len(result.layouts)
    return (
        f"dynosim plan of {source}: {args.model} on {args.system} ({args.backend}), "
        f"{result.sla.describe()}, at most {args.max_gpus} GPUs: {result.replays_run} replays "
        f"and {result.probes} probes of the trace's longest requests, against a full grid of "
        f"{result.grid_size:,} ({layouts} layouts x {ladder.full} engine settings x worker "
        f"counts; {len(ladder.settings)} settings after pruning) in {result.wall_s:.1f} s"
    )


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: the planner (numpy, AIC's tables), the deployments and the pages,
    # which plan --help does not need.
    import yaml

    from dynosim.deploy import RenderOptions
    from dynosim.plan import plan
    from dynosim.plan.planner import SETTINGS
    from dynosim.views.pages import pareto_page

    # The row columns a plan prints (the layout names the TP, DP and EP sizes).
    shown = tuple(
        s
        for s in SETTINGS
        if s not in ("tp", "prefill_tp", "decode_tp", "dp", "ep", "within_max_gpus")
    )
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
    chunked = None if args.chunked_prefill is None else [c == "on" for c in args.chunked_prefill]
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
            chunked_prefill=chunked,
            token_budgets=args.token_budgets,
            max_batch_size=args.max_batch_size,
            prune=not args.no_prune,
            kv_link_gbps=args.kv_link_gbps,
            base=args.config,
            offload={
                k: v
                for k, v in (("g2_blocks", args.g2_blocks), ("g3_blocks", args.g3_blocks))
                if v is not None
            },
            search=args.search,
            executor=args.executor,
            jobs=args.jobs,
            address=args.address,
            progress=not args.no_progress,
            render=not args.no_render,
            render_options=options,
        )
    except MissingExtraError as e:
        raise missing_extra_is_bad_input(e) from None
    make_dirs(out)
    # Files of the output directory are created fresh: a link planted there is replaced. No
    # wall times in them: identical plans write identical bytes.
    write_atomic(out / "replays.csv", result.replays.csv_text(wall=False), fresh=True)
    write_atomic(out / "pareto.csv", result.pareto.csv_text(wall=False), fresh=True)
    head, why = result.why_table()
    if plot:
        title = f"dynosim plan of {source}: {args.model} on {args.system}"
        page = pareto_page(
            result.replays,
            result.pick,
            title,
            front=result.pareto.rows,
            why=(head, why) if why else None,
        )
        write_atomic(out / "pareto.html", page, fresh=True)
    console = wide_console()
    console.print(_header(result, args, source))
    for note in result.ladder.pruned:
        console.print(f"pruned by the trace: {note}")
    for lay in result.layouts:
        for rejecting in lay.rejecting:
            console.print(f"{lay.name}: {rejecting}; not replayed")
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
                "no candidate meets the SLA; the closest:", result.closest(5), shown, result.sla
            )
        )
        if why:
            console.print(text_table("why the closest miss (the constraint that binds)", head, why))
        return EXIT_FAILED
    console.print(
        rows_table(
            "ranked candidates (each layout's fewest GPUs meeting the SLA)",
            result.ranked,
            shown,
            result.sla,
        )
    )
    console.print(text_table("why (the constraint that binds, and by how much)", head, why))
    pick = result.pick
    settings = next(lay.settings for lay in result.layouts if lay.name == pick["layout"])
    assert settings is not None  # the pick's layout has its setting
    console.print(
        f"pick: {pick['layout']}, {settings.describe(args.backend)}, {pick['gpus']} GPUs "
        f"(candidate {pick['index']})"
    )
    if result.transfer is not None:
        console.print(
            f"KV transfer: {100 * result.transfer['share']:.1f}% of TTFT (mean "
            f"{result.transfer['mean_ms']:,.1f} ms of a mean TTFT of "
            f"{result.transfer['ttft_mean_ms']:,.1f} ms)"
        )
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
