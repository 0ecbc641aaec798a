"""``dynosim render``: render a simulated candidate as a Kubernetes DynamoGraphDeployment with
AIConfigurator, write AIC's artifacts and validate the manifest written."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dynosim.cli.common import EXIT_FAILED, UsageError
from dynosim.cli.output import check_output_dir


def add_parser(sub: Any, line: str) -> None:
    """The ``render`` subcommand and its flags."""
    g = sub.add_parser(
        "render",
        help=line,
        description="Render a simulated candidate as a DynamoGraphDeployment with AIConfigurator "
        "(pip install 'dynosim[aic]'), write AIC's artifacts to DIR and validate the manifest "
        "written. The workload is a trace, or a fixed --isl and --osl.",
    )
    g.add_argument("--candidate", type=Path, required=True, help="candidate YAML or JSON file")
    g.add_argument("--trace", type=Path, help="trace file the candidate serves (.jsonl or .csv)")
    g.add_argument("--isl", type=int, help="synthetic workload: prompt tokens per request")
    g.add_argument("--osl", type=int, help="synthetic workload: output tokens per request")
    g.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="output dir")
    g.add_argument("--dynamo-version", help="Dynamo release to deploy (default: AIC's default)")
    g.add_argument("--image", help="worker runtime image (default: the release's)")
    g.add_argument("--name-prefix", help="DGD name prefix (the name is PREFIX-agg|disagg)")
    g.add_argument("--namespace", help="Kubernetes namespace (default: none set)")
    g.add_argument("--gpus-per-node", type=int, help="GPUs per node (default: the system's)")


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: dynosim.deploy imports the configuration models and AIC's
    # tables, which render --help does not need.
    from dynosim.deploy import RenderOptions, load_candidate, render_dgd, validate_manifest
    from dynosim.workload import SyntheticWorkload, load_trace

    check_output_dir(args.output, "-o", ("k8s_deploy.yaml",))
    lengths = [f for f, v in (("--isl", args.isl), ("--osl", args.osl)) if v is not None]
    if args.trace is not None:
        if lengths:  # the workload rule, in flag names
            raise UsageError(
                f"a trace workload has no fixed request length; remove {', '.join(lengths)}"
            )
        workload: Any = load_trace(args.trace)
    elif len(lengths) < 2:
        raise UsageError("render needs a workload: --trace FILE, or both --isl N and --osl N")
    else:
        # Rendering reads only isl and osl of a synthetic workload; count and rate are moot.
        workload = SyntheticWorkload(isl=args.isl, osl=args.osl, count=1, rate=1.0)
    flags = {
        "dynamo_version": args.dynamo_version,
        "image": args.image,
        "name_prefix": args.name_prefix,
        "namespace": args.namespace,
        "gpus_per_node": args.gpus_per_node,
    }
    options = RenderOptions(**{k: v for k, v in flags.items() if v is not None})
    rendered = render_dgd(load_candidate(args.candidate), workload, options)
    for warning in rendered.aic_warnings:
        print(f"dynosim: AIC {warning}", file=sys.stderr)
    written = rendered.write(args.output)
    manifest = args.output / "k8s_deploy.yaml"
    # Validate the file as written, against the candidate with the context length it carries.
    problems = validate_manifest(manifest, rendered.deployed)
    for problem in problems:
        print(problem)
    if problems:
        print(f"dynosim: {manifest}: {len(problems)} problem(s)", file=sys.stderr)
        return EXIT_FAILED
    print(
        f"wrote {len(written)} files to {args.output}; {manifest.name} is valid and deploys the "
        f"{rendered.candidate.mode} {rendered.candidate.backend} candidate "
        f"(context length {rendered.lowered.context_length}, Dynamo {rendered.dynamo_version})"
    )
    return 0


__all__ = ["add_parser", "run"]
