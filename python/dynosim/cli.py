"""The ``dynosim`` command line: ``dynosim replay`` and ``dynosim schema``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dynosim.config import SimConfig, config_json_schema, load_config
from dynosim.errors import DynosimError
from dynosim.replay import replay
from dynosim.report import Report
from dynosim.samples import sample_trace_path
from dynosim.workload import load_trace

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
    r.add_argument("--timing", choices=["polynomial", "fixed"], help="step-time model")
    r.add_argument("--prefill-ms", type=float, help="fixed timing: prefill pass cost (ms)")
    r.add_argument("--decode-ms", type=float, help="fixed timing: decode pass cost (ms)")
    r.add_argument("--arrival-speedup", type=float, help="divide every inter-arrival gap by R")
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
    r.add_argument("--json", metavar="PATH|-", help="write the canonical JSON report ('-': stdout)")
    r.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    sub.add_parser("schema", help="print the JSON schema of the configuration file")
    return p


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
    ):
        value = getattr(args, flag)
        if value is not None:
            data[section][key] = value
    if args.prefill_workers is not None or args.decode_workers is not None:
        data["cluster"]["mode"] = "disaggregated"
    timing = args.timing or data["timing"]["model"]
    if timing == "fixed":
        fixed = {k: v for k, v in data["timing"].items() if k in ("prefill_ms", "decode_ms")}
        for key in ("prefill_ms", "decode_ms"):
            if getattr(args, key) is not None:
                fixed[key] = getattr(args, key)
        missing = [
            f"--{k.replace('_', '-')}" for k in ("prefill_ms", "decode_ms") if k not in fixed
        ]
        if missing:
            raise _UsageError(f"--timing fixed needs {' and '.join(missing)}")
        data["timing"] = {"model": "fixed", **fixed}
    elif args.prefill_ms is not None or args.decode_ms is not None:
        raise _UsageError("--prefill-ms and --decode-ms apply to --timing fixed only")
    elif timing != data["timing"]["model"]:
        data["timing"] = {"model": timing}
    return SimConfig.model_validate(data)


class _UsageError(DynosimError, ValueError):
    pass


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


def _replay(args: argparse.Namespace) -> int:
    from rich.console import Console

    config = _config(args)
    path = args.trace or sample_trace_path()
    source = str(args.trace) if args.trace else f"bundled sample ({path.name})"
    workload = load_trace(path, trace_block_size=args.trace_block_size, format=args.format)
    report = replay(workload, config, progress=not args.no_progress)
    # With the JSON on stdout, the table goes to stderr so the JSON stays parseable.
    console = Console(file=sys.stderr if args.json == "-" else sys.stdout)
    console.print(render_summary(report, source))
    if args.json == "-":
        sys.stdout.write(report.to_json() + "\n")
    elif args.json:
        Path(args.json).write_text(report.to_json() + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``dynosim`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "schema":
            print(json.dumps(config_json_schema(), indent=2, sort_keys=True))
            return 0
        return _replay(args)
    except ValueError as e:  # bad trace, config or flags (WorkloadError, ConfigError, ...)
        print(f"dynosim: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except DynosimError as e:
        print(f"dynosim: error: {e}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
