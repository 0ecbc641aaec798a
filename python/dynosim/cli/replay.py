"""The ``dynosim`` command line: ``dynosim replay``, ``dynosim schema``, and ``dynosim render`` /
``dynosim validate`` for DGD manifests."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dynosim.config import SimConfig, config_json_schema, load_config, load_timing_table
from dynosim.errors import DynosimError
from dynosim.replay import replay
from dynosim.report import Report
from dynosim.samples import sample_trace_path
from dynosim.workload import SyntheticWorkload, TraceWorkload, load_trace

#: Exit codes: bad input (trace, config, flags) and a failed simulation.
EXIT_BAD_INPUT = 2
EXIT_FAILED = 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dynosim", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser(
        "replay",
        help="replay a trace on a simulated cluster",
        description="Replay a trace (Mooncake JSONL or Azure CSV) on a simulated cluster. "
        "With no TRACE, replays the bundled Mooncake conversation sample.",
    )
    r.add_argument("trace", nargs="?", type=Path, help="trace file (.jsonl or .csv)")
    g = r.add_argument_group("synthetic traffic (instead of a trace)")
    g.add_argument("--synthetic", action="store_true", help="replay generated requests")
    g.add_argument("--isl", type=int, help="prompt tokens per request")
    g.add_argument("--osl", type=int, help="output tokens per request")
    g.add_argument("--rate", type=float, help="arrival rate (requests/s, Poisson)")
    g.add_argument("--count", type=int, help="number of requests")
    g.add_argument("--duration-s", type=float, help="or generate arrivals for this long (s)")
    g.add_argument("--seed", type=int, default=0, help="generator seed")
    r.add_argument(
        "--format", choices=["mooncake", "azure"], help="trace format (default: by extension)"
    )
    r.add_argument("--trace-block-size", type=int, default=512, help="tokens per trace hash id")
    r.add_argument("--config", type=Path, help="YAML or JSON configuration file")
    r.add_argument("--workers", type=int, help="number of aggregated workers")
    r.add_argument("--block-size", type=int, help="tokens per KV block")
    r.add_argument("--num-gpu-blocks", type=int, help="KV blocks per worker")
    r.add_argument("--max-num-seqs", type=int, help="most running requests per worker")
    r.add_argument("--max-num-batched-tokens", type=int, help="token budget per pass")
    r.add_argument(
        "--timing", choices=["polynomial", "fixed", "table", "aic"], help="step-time model"
    )
    r.add_argument(
        "--timing-table", type=Path, metavar="FILE.npz", help="table timing: the grids (npz)"
    )
    r.add_argument("--prefill-ms", type=float, help="fixed timing: prefill pass cost (ms)")
    r.add_argument("--decode-ms", type=float, help="fixed timing: decode pass cost (ms)")
    r.add_argument("--arrival-speedup", type=float, help="divide every inter-arrival gap by R")
    r.add_argument(
        "--router", choices=["round_robin", "random", "kv_aware"], help="request routing"
    )
    r.add_argument("--concurrency", type=int, help="closed loop: at most N sessions in flight")
    m = r.add_argument_group(
        "model and GPUs (AIConfigurator names; pip install 'dynosim[aic]')",
        "With --model and --system, num_gpu_blocks is estimated from the GPU memory, the "
        "weights and the KV bytes per token unless --num-gpu-blocks is given.",
    )
    m.add_argument("--model", help="AIC model (e.g. Qwen/Qwen3-32B) or a Hugging Face config.json")
    m.add_argument("--system", help="AIC system (e.g. h200_sxm)")
    m.add_argument("--backend", choices=["trtllm", "vllm", "sglang"], help="--timing aic: engine")
    m.add_argument("--backend-version", help="--timing aic: version (default: AIC's current)")
    m.add_argument("--tp", type=int, help="tensor-parallel GPUs per rank")
    m.add_argument("--dp", type=int, help="data-parallel ranks per worker")
    d = r.add_argument_group("disaggregated serving (giving either worker count selects it)")
    d.add_argument("--prefill-workers", type=int, help="prefill workers")
    d.add_argument("--decode-workers", type=int, help="decode workers")
    d.add_argument("--kv-bandwidth-gbps", type=float, help="each prefill worker's send link, GB/s")
    d.add_argument(
        "--decode-kv-bandwidth-gbps", type=float, help="each decode worker's receive link, GB/s"
    )
    d.add_argument("--kv-bytes-per-token", type=float, help="KV bytes of one token")
    d.add_argument("--link-model", choices=["max_min", "line_rate"], help="link sharing model")
    d.add_argument(
        "--transfer-sizing", choices=["full_prompt", "destination_missing"], help="tokens moved"
    )
    o = r.add_argument_group("KV offload tiers (need --kv-bytes-per-token)")
    o.add_argument("--g2-blocks", type=int, help="G2 (host memory) blocks per rank")
    o.add_argument("--g3-blocks", type=int, help="G3 (disk) blocks per rank, or of the pool")
    o.add_argument(
        "--g3-shared", action="store_true", default=None, help="one G3 pool for the cluster"
    )
    o.add_argument("--g1-g2-gbps", type=float, help="each rank's G1<->G2 link per direction")
    o.add_argument("--g2-g3-gbps", type=float, help="each G2<->G3 link (or the pool's), GB/s")
    r.add_argument("--json", metavar="PATH|-", help="write the canonical JSON report ('-': stdout)")
    r.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    sub.add_parser("schema", help="print the JSON schema of the configuration file")
    _add_manifest_parsers(sub)
    return p


def _add_manifest_parsers(sub: Any) -> None:
    """The ``render`` and ``validate`` subcommands (DGD manifests)."""
    g = sub.add_parser(
        "render",
        help="render a candidate as a Kubernetes DGD manifest with AIConfigurator",
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
    v = sub.add_parser(
        "validate",
        help="check a DGD manifest (and that it deploys a candidate)",
        description="Check a DynamoGraphDeployment manifest; with --candidate, also that it "
        "deploys that candidate. Prints one line per problem, naming its path, and exits 1 "
        "when there is any.",
    )
    v.add_argument("manifest", type=Path, help="manifest file (multi-document YAML)")
    v.add_argument("--candidate", type=Path, help="candidate YAML or JSON file")


def _config(args: argparse.Namespace) -> SimConfig:
    data: dict[str, Any] = load_config(args.config).model_dump()
    for flag, section, key in (
        ("workers", "cluster", "num_workers"),
        ("arrival_speedup", "cluster", "arrival_speedup_ratio"),
        ("block_size", "engine", "block_size"),
        ("num_gpu_blocks", "engine", "num_gpu_blocks"),
        ("max_num_seqs", "engine", "max_num_seqs"),
        ("max_num_batched_tokens", "engine", "max_num_batched_tokens"),
        ("prefill_workers", "cluster", "num_prefill_workers"),
        ("decode_workers", "cluster", "num_decode_workers"),
        ("kv_bandwidth_gbps", "kv_transfer", "bandwidth_gbps"),
        ("decode_kv_bandwidth_gbps", "kv_transfer", "decode_bandwidth_gbps"),
        ("kv_bytes_per_token", "kv_transfer", "kv_bytes_per_token"),
        ("link_model", "kv_transfer", "link_model"),
        ("transfer_sizing", "kv_transfer", "sizing"),
        ("router", "cluster", "router"),
        ("concurrency", "cluster", "concurrency"),
        ("tp", "engine", "tensor_parallel_size"),
        ("dp", "engine", "data_parallel_size"),
        ("g2_blocks", "offload", "g2_blocks"),
        ("g3_blocks", "offload", "g3_blocks"),
        ("g3_shared", "offload", "g3_shared"),
        ("g1_g2_gbps", "offload", "g1_g2_gbps"),
        ("g2_g3_gbps", "offload", "g2_g3_gbps"),
    ):
        value = getattr(args, flag)
        if value is not None:
            data[section][key] = value
    if args.prefill_workers is not None or args.decode_workers is not None:
        data["cluster"]["mode"] = "disaggregated"
    data["timing"] = _timing(args, data["timing"], data["engine"]["tensor_parallel_size"])
    if args.num_gpu_blocks is None and args.model is not None and args.system is not None:
        from dynosim.capacity import estimate_kv_capacity

        data["engine"]["num_gpu_blocks"] = estimate_kv_capacity(
            args.model,
            args.system,
            tp=data["engine"]["tensor_parallel_size"],
            block_size=data["engine"]["block_size"],
            backend=args.backend or "trtllm",
        ).num_gpu_blocks
    return SimConfig.model_validate(data)


class _UsageError(DynosimError, ValueError):
    pass


def _timing(args: argparse.Namespace, current: dict[str, Any], tp: int) -> dict[str, Any]:
    """The timing section after the --timing flags, checking they belong together."""
    model = args.timing or current["model"]
    if model != "aic" and (args.backend is not None or args.backend_version is not None):
        raise _UsageError("--backend and --backend-version apply to --timing aic only")
    if model == "aic":
        spec = dict(current) if current["model"] == "aic" else {"model": "aic"}
        flags = {"model": "model_name", "system": "system", "backend": "backend"}
        for flag, key in {**flags, "backend_version": "backend_version"}.items():
            if getattr(args, flag) is not None:
                spec[key] = getattr(args, flag)
        missing = [f"--{f}" for f, key in flags.items() if f != "backend" and key not in spec]
        if missing:
            raise _UsageError(f"--timing aic needs {' and '.join(missing)}")
        return {**spec, "tp": tp}  # the tables are for the engine's TP
    if model != "fixed" and (args.prefill_ms is not None or args.decode_ms is not None):
        raise _UsageError("--prefill-ms and --decode-ms apply to --timing fixed only")
    if model != "table" and args.timing_table is not None:
        raise _UsageError("--timing-table applies to --timing table only")
    if model == "fixed":
        fixed = {k: v for k, v in current.items() if k in ("prefill_ms", "decode_ms")}
        for key in ("prefill_ms", "decode_ms"):
            if getattr(args, key) is not None:
                fixed[key] = getattr(args, key)
        missing = [
            f"--{k.replace('_', '-')}" for k in ("prefill_ms", "decode_ms") if k not in fixed
        ]
        if missing:
            raise _UsageError(f"--timing fixed needs {' and '.join(missing)}")
        return {"model": "fixed", **fixed}
    if model == "table":
        if args.timing_table is not None:
            return load_timing_table(args.timing_table).model_dump()
        if current["model"] != "table":
            raise _UsageError("--timing table needs --timing-table FILE.npz")
    return current if model == current["model"] else {"model": model}


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render_summary(report: Report, source: str) -> Any:
    """A rich Table of the summary: counts, throughput, latency percentiles, reuse, GPU-hours."""
    from rich.table import Table

    s = report.summary
    head = Table(show_header=False)
    head.add_column(style="bold")
    head.add_column(justify="right")
    rows = [
        ("requests", f"{s['num_requests']:,}"),
        ("completed / rejected", f"{s['completed_requests']:,} / {s['rejected_requests']:,}"),
        ("workers x GPUs each", f"{s['num_workers']} x {s['num_gpus'] // s['num_workers']}"),
        ("virtual duration (s)", _fmt(s["duration_ms"] / 1000.0)),
        ("request throughput (req/s)", _fmt(s["request_throughput_rps"], 3)),
        ("output tokens/s", _fmt(s["output_token_throughput_tps"], 1)),
        ("total tokens/s", _fmt(s["total_token_throughput_tps"], 1)),
        ("prefix reuse ratio", _fmt(s["prefix_reuse_ratio"], 4)),
        ("goodput (req/s)", _fmt(s["goodput_rps"], 3)),
        ("GPU-hours", _fmt(s["gpu_hours"], 3)),
        ("passes / preemptions", f"{s['num_passes']:,} / {s['num_preemptions']:,}"),
    ]
    if report.config["cluster"]["mode"] == "disaggregated":
        c = report.config["cluster"]
        util = s["link_utilization"]
        rows[2] = (
            "prefill + decode workers",
            f"{c['num_prefill_workers']} + {c['num_decode_workers']}",
        )
        rows += [
            ("KV transfers / GB", f"{s['num_transfers']:,} / {s['transfer_bytes'] / 1e9:,.2f}"),
            (
                "transfer ms mean / p99",
                f"{_fmt(s['transfer_ms']['mean'])} / {_fmt(s['transfer_ms']['p99'])}",
            ),
            ("max link utilization", _fmt(max(util), 4) if util else "-"),
            ("rate recomputations", f"{s['rate_recomputations']:,}"),
        ]
    if "offload" in s:
        o = s["offload"]
        rows.append(
            (
                "hit blocks G1 / G2 / G3",
                f"{o['g1_hit_blocks']:,} / {o['g2_hit_blocks']:,} / {o['g3_hit_blocks']:,}",
            )
        )
        rows.append(
            (
                "onboards / ms mean / GB up / GB down",
                f"{o['num_onboards']:,} / {_fmt(o['onboard_ms']['mean'])} / "
                f"{o['onboard_bytes'] / 1e9:,.2f} / {o['offload_bytes'] / 1e9:,.2f}",
            )
        )
    for name, value in rows:
        head.add_row(name, value)
    lat = Table(title="latency (ms)", title_justify="left")
    lat.add_column("metric", style="bold")
    for col in ("mean", "p50", "p90", "p99", "max"):
        lat.add_column(col, justify="right")
    for metric in ("ttft_ms", "ttst_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        d = s[metric]
        lat.add_row(
            metric.removesuffix("_ms").upper(),
            *(_fmt(d[c]) for c in ("mean", "p50", "p90", "p99", "max")),
        )
    from rich.console import Group
    from rich.text import Text

    return Group(Text(f"dynosim replay of {source}", style="bold"), head, lat)


def _workload(args: argparse.Namespace) -> tuple[TraceWorkload | SyntheticWorkload, str]:
    """The workload the replay flags describe, and a name for it."""
    synthetic_flags = ("isl", "osl", "rate", "count", "duration_s")
    if args.synthetic:
        if args.trace is not None:
            raise _UsageError("give a TRACE or --synthetic, not both")
        given = {k: getattr(args, k) for k in synthetic_flags if getattr(args, k) is not None}
        work = SyntheticWorkload(**given, seed=args.seed)
        return work, f"synthetic (isl {args.isl}, osl {args.osl}, rate {args.rate}/s)"
    stray = [f"--{k.replace('_', '-')}" for k in synthetic_flags if getattr(args, k) is not None]
    if stray:
        raise _UsageError(f"{', '.join(stray)} need --synthetic")
    path = args.trace or sample_trace_path()
    source = str(args.trace) if args.trace else f"bundled sample ({path.name})"
    return load_trace(path, trace_block_size=args.trace_block_size, format=args.format), source


def _replay(args: argparse.Namespace) -> int:
    from rich.console import Console

    config = _config(args)
    workload, source = _workload(args)
    report = replay(workload, config, progress=not args.no_progress)
    # With the JSON on stdout, the table goes to stderr so the JSON stays parseable.
    console = Console(file=sys.stderr if args.json == "-" else sys.stdout)
    console.print(render_summary(report, source))
    if args.json == "-":
        sys.stdout.write(report.to_json() + "\n")
    elif args.json:
        Path(args.json).write_text(report.to_json() + "\n")
    return 0


def _render(args: argparse.Namespace) -> int:
    from dynosim.deploy import RenderOptions, load_candidate, render_dgd
    from dynosim.manifest import validate_manifest
    from dynosim.workload import SyntheticWorkload

    lengths = [f for f, v in (("--isl", args.isl), ("--osl", args.osl)) if v is not None]
    if args.trace is not None:
        if lengths:  # the workload rule, in flag names
            raise _UsageError(
                f"a trace workload has no fixed request length; remove {', '.join(lengths)}"
            )
        workload: Any = load_trace(args.trace)
    elif len(lengths) < 2:
        raise _UsageError("render needs a workload: --trace FILE, or both --isl N and --osl N")
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


def _validate(args: argparse.Namespace) -> int:
    from dynosim.deploy import load_candidate
    from dynosim.manifest import validate_manifest

    candidate = load_candidate(args.candidate) if args.candidate is not None else None
    problems = validate_manifest(args.manifest, candidate)
    for problem in problems:
        print(problem)
    if problems:
        print(f"dynosim: {args.manifest}: {len(problems)} problem(s)", file=sys.stderr)
        return EXIT_FAILED
    print(f"{args.manifest}: no problems")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``dynosim`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "schema":
            print(json.dumps(config_json_schema(), indent=2, sort_keys=True))
            return 0
        if args.command == "render":
            return _render(args)
        if args.command == "validate":
            return _validate(args)
        return _replay(args)
    except ValueError as e:  # bad trace, config or flags (WorkloadError, ConfigError, ...)
        print(f"dynosim: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except DynosimError as e:
        print(f"dynosim: error: {e}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
