"""``dynosim replay``: replay a trace (or synthetic traffic) on a simulated cluster and print
the summary; the flags override a configuration file's settings."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynosim import _core
from dynosim._defaults import (
    BACKENDS,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    G3_DUPLEXES,
    IN_FLIGHT,
    LINK_MODELS,
    OFFLOAD_WRITES,
    ROUTERS,
    TRANSFER_SIZINGS,
    settings_document,
)
from dynosim.cli import measured
from dynosim.cli.common import (
    EXIT_REJECTED,
    UsageError,
    add_workload_arguments,
    missing_extra_is_bad_input,
    name_flags,
    trace_from_args,
    typed,
    workload_from_args,
)
from dynosim.errors import ConfigError, MissingExtraError
from dynosim.workload.measured import MEASURED_FORMATS

if TYPE_CHECKING:
    from dynosim.config import SimConfig
    from dynosim.report import Report
    from dynosim.workload import MeasuredRun


def add_parser(sub: Any, line: str) -> None:
    """The ``replay`` subcommand and its flags."""
    r = sub.add_parser(
        "replay",
        help=line,
        description="Replay a trace (Mooncake JSONL or Azure CSV) on a simulated cluster. "
        "With no TRACE, replays the bundled Mooncake conversation sample.",
    )
    add_workload_arguments(r, extra_formats=MEASURED_FORMATS)
    measured.add_arguments(r)
    r.add_argument("--config", type=Path, help="YAML or JSON configuration file")
    r.add_argument("--workers", "--num-workers", type=int, help="number of aggregated workers")
    r.add_argument("--block-size", type=int, help="tokens per KV block")
    r.add_argument("--num-gpu-blocks", type=int, help="KV blocks per rank (a worker has DP ranks)")
    r.add_argument(
        "--max-num-seqs", type=int, help="most running requests per rank (a worker has DP ranks)"
    )
    r.add_argument(
        "--max-num-batched-tokens", type=int, help="token budget per pass (trtllm: max_num_tokens)"
    )
    r.add_argument(
        "--timing", choices=["polynomial", "fixed", "table", "aic"], help="step-time model"
    )
    r.add_argument(
        "--timing-table", type=Path, metavar="FILE.npz", help="table timing: the grids (npz)"
    )
    r.add_argument("--prefill-ms", type=float, help="fixed timing: prefill pass cost (ms)")
    r.add_argument("--decode-ms", type=float, help="fixed timing: decode pass cost (ms)")
    r.add_argument(
        "--arrival-speedup",
        "--arrival-speedup-ratio",
        type=float,
        help="divide every inter-arrival gap by R",
    )
    r.add_argument(
        "--router",
        "--router-mode",
        type=lambda name: name.replace("-", "_"),  # Dynamo spells it round-robin
        choices=ROUTERS,
        help="request routing",
    )
    r.add_argument("--concurrency", type=int, help="closed loop: at most N sessions in flight")
    m = r.add_argument_group(
        "model and GPUs (AIConfigurator names; pip install 'dynosim[aic]')",
        "With --timing aic, each rank's num_gpu_blocks is derived from --model and --system as "
        "the engine sizes its cache (GPU memory x --gpu-memory-utilization, less weights, the "
        "activation peak of a max-num-batched-tokens pass, runtime and communication buffers, "
        "from AIC's memory model), and the KV bytes per token from the model's geometry, "
        "unless --num-gpu-blocks / --kv-bytes-per-token are given.",
    )
    m.add_argument("--model", help="AIC model (e.g. Qwen/Qwen3-32B) or a Hugging Face config.json")
    m.add_argument("--system", help="AIC system (e.g. h200_sxm)")
    m.add_argument(
        "--backend",
        choices=BACKENDS,
        help="serving engine: the engine flavour simulated (engine.backend), and the engine "
        "whose data AIC prices",
    )
    m.add_argument(
        "--backend-version",
        help="the engine's version (default: AIC's current); each operation is priced with its "
        "measurements where AIC has them, else the closest version's",
    )
    m.add_argument("--tp", type=int, help="tensor-parallel GPUs per rank")
    m.add_argument("--dp", type=int, help="data-parallel ranks per worker (attention DP for MoE)")
    m.add_argument(
        "--ep", type=int, help="expert-parallel GPUs (MoE models): the tp x dp GPUs split experts"
    )
    m.add_argument(
        "--mixed-decode-profile",
        type=Path,
        metavar="FILE.npz",
        help="--timing aic: a measured profile of the attention of decode rows in passes that "
        "also prefill (batch x context x prefill tokens x heads, one layer, ms), instead of "
        "the backend's rule",
    )
    m.add_argument(
        "--gpu-memory-utilization",
        type=float,
        help="share of GPU memory for weights, activations and KV, of every engine (default "
        f"{DEFAULT_GPU_MEMORY_UTILIZATION:g}, vLLM's)",
    )
    d = r.add_argument_group("disaggregated serving (giving either worker count selects it)")
    d.add_argument("--prefill-workers", "--num-prefill-workers", type=int, help="prefill workers")
    d.add_argument("--decode-workers", "--num-decode-workers", type=int, help="decode workers")
    d.add_argument(
        "--kv-bandwidth-gbps",
        "--kv-transfer-bandwidth",
        type=float,
        help="each prefill worker's send link, GB/s",
    )
    d.add_argument(
        "--decode-kv-bandwidth-gbps", type=float, help="each decode worker's receive link, GB/s"
    )
    d.add_argument("--kv-bytes-per-token", type=float, help="KV bytes of one token")
    d.add_argument("--link-model", choices=LINK_MODELS, help="link sharing model")
    d.add_argument("--transfer-sizing", choices=TRANSFER_SIZINGS, help="tokens moved")
    o = r.add_argument_group("KV offload tiers (need --kv-bytes-per-token)")
    o.add_argument("--g2-blocks", type=int, help="G2 (host memory) blocks per rank")
    o.add_argument("--g3-blocks", type=int, help="G3 (disk) blocks per rank, or of the pool")
    o.add_argument(
        "--g3-shared", action="store_true", default=None, help="one G3 pool for the cluster"
    )
    o.add_argument("--g1-g2-gbps", type=float, help="each rank's G1<->G2 link per direction")
    o.add_argument("--g2-g3-gbps", type=float, help="each G2<->G3 link (or the pool's), GB/s")
    for tiers in ("g1-g2", "g2-g3"):
        for way, what in (("read", "onboards"), ("write", "offloads")):
            o.add_argument(f"--{tiers}-{way}-gbps", type=float, help=f"{tiers} {what} only, GB/s")
    o.add_argument(
        "--g3-duplex",
        choices=G3_DUPLEXES,
        help="G3 reads and writes share one capacity (half, default) or have one each",
    )
    o.add_argument(
        "--in-flight",
        choices=IN_FLIGHT,
        help="blocks whose copy down is in flight: recompute (default) or wait and onboard",
    )
    o.add_argument(
        "--offload-writes",
        choices=OFFLOAD_WRITES,
        help="offloads are flows that take time (default) or free",
    )
    s = r.add_argument_group("SLA (goodput counts the completed requests within every limit given)")
    s.add_argument("--sla-ttft-ms", type=float, help="a request's time to first token limit, ms")
    s.add_argument(
        "--sla-tpot-ms",
        "--sla-itl-ms",
        dest="sla_itl_ms",
        type=float,
        help="a request's mean inter-token latency (TPOT) limit, ms",
    )
    s.add_argument("--sla-e2e-ms", type=float, help="a request's end-to-end latency limit, ms")
    r.add_argument(
        "--fail-on-rejections",
        action="store_true",
        help=f"exit with status {EXIT_REJECTED} when the replay rejects any request (its "
        "outputs are written first)",
    )
    r.add_argument("--json", metavar="PATH|-", help="write the canonical JSON report ('-': stdout)")
    r.add_argument(
        "--html",
        type=Path,
        metavar="FILE.html",
        help="write the self-contained HTML page of the report (needs dynosim[plot])",
    )
    r.add_argument(
        "--explain",
        action="store_true",
        help="also print where the time went: each role's mean pass by kind split into its "
        "priced parts, each rank's passes, and the time to first token by stage (in --json "
        "too, as 'breakdown')",
    )
    r.add_argument("--no-progress", action="store_true", help="never show a progress bar")


#: The flags that set one configuration setting each: argparse name, section, key.
_SETTINGS = (
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
    ("backend", "engine", "backend"),
    ("g1_g2_read_gbps", "offload", "g1_g2_read_gbps"),
    ("g1_g2_write_gbps", "offload", "g1_g2_write_gbps"),
    ("g2_g3_read_gbps", "offload", "g2_g3_read_gbps"),
    ("g2_g3_write_gbps", "offload", "g2_g3_write_gbps"),
    ("g3_duplex", "offload", "g3_duplex"),
    ("offload_writes", "offload", "writes"),
    ("in_flight", "offload", "in_flight"),
    ("sla_ttft_ms", "sla", "ttft_ms"),
    ("sla_itl_ms", "sla", "itl_ms"),
    ("sla_e2e_ms", "sla", "e2e_ms"),
    ("gpu_memory_utilization", "engine", "gpu_memory_utilization"),
)


def _document(args: argparse.Namespace) -> tuple[dict[str, Any], list[tuple[str, str, Any]]]:
    """The configuration the flags describe as a document of plain values: the --config file
    (checked with the engine --backend names, whose settings it may hold) or no setting given,
    then each flag's setting. Also what each flag set: (dotted path, flag as typed, value)."""
    if args.config is not None:
        from dynosim.config import SimConfig, load_settings_file

        data = load_settings_file(
            args.config,
            SimConfig,
            "configuration",
            overrides={"engine.backend": args.backend} if args.backend else None,
        ).model_dump()
    else:
        data = settings_document()
    given = []
    for flag, section, key in _SETTINGS:
        value = getattr(args, flag)
        if value is None:
            continue
        if flag != "gpu_memory_utilization":  # set in every engine section, below
            data[section][key] = value
        given.append((f"{section}.{key}", typed(args, flag), value))
    if data["engine"]["backend"] == "trtllm" and args.max_num_batched_tokens is not None:
        # The pass's token budget is TensorRT-LLM's max_num_tokens.
        data["engine"]["max_num_tokens"] = data["engine"].pop("max_num_batched_tokens")
        given.append(
            (
                "engine.max_num_tokens",
                typed(args, "max_num_batched_tokens"),
                args.max_num_batched_tokens,
            )
        )
    if args.explain:
        data["report"]["explain"] = True
    if args.prefill_workers is not None or args.decode_workers is not None:
        data["cluster"]["mode"] = "disaggregated"
    _check_mode_flags(args, data["cluster"]["mode"])
    data["timing"] = _timing(args, data["timing"], data["engine"])
    if args.gpu_memory_utilization is not None:
        _memory_share(args, data)
    return data, given


def _config(data: dict[str, Any], given: list[tuple[str, str, Any]]) -> SimConfig:
    """The configuration document ``data`` as checked by the models; a setting a flag gave
    (``given``) that is refused is named by the flag as typed."""
    from dynosim.config import SimConfig

    try:
        return SimConfig.model_validate(data)
    except ConfigError as e:
        raise name_flags(e, given) from None


def _core_checks(args: argparse.Namespace, data: dict[str, Any]) -> bool:
    """Whether the core alone can check and replay ``data`` (see ``replay_file``): a trace
    file's replay whose settings all come from flags, as plain values, with no timing the
    Python layer derives (aic) or reads from a file (table); and ``data`` passes the core's
    checks. A document the core refuses goes the models' way, which name the problem as they
    name any configuration's (the flag as typed, a non-finite number as such)."""
    plain = (
        args.config is None
        and not args.synthetic
        and not args.measured
        and data["timing"]["model"] in ("polynomial", "fixed")
    )
    if not plain:
        return False
    try:
        _core.normalize_config_json(json.dumps(data))
    except ConfigError:
        return False
    return True


def _memory_share(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """--gpu-memory-utilization into every engine section, which sizes from it the KV blocks
    it is not given (:mod:`dynosim.sizing`)."""
    if args.num_gpu_blocks is not None:
        raise UsageError(
            "--gpu-memory-utilization sizes the KV cache from the model and GPU; it has no "
            "effect with --num-gpu-blocks"
        )
    timed = [data["timing"]] + [(data[r] or {}).get("timing") for r in ("prefill", "decode")]
    if not any(t and t["model"] == "aic" for t in timed):
        raise UsageError(
            "--gpu-memory-utilization sizes the KV cache from the model and GPU of --timing aic "
            "(--model and --system)"
        )
    for holder in [data, *(data[r] for r in ("prefill", "decode") if data[r])]:
        if holder.get("engine") is not None:
            holder["engine"]["gpu_memory_utilization"] = args.gpu_memory_utilization


#: Flags of KV transfers, which only disaggregated serving makes.
_TRANSFER_FLAGS = ("kv_bandwidth_gbps", "decode_kv_bandwidth_gbps", "link_model", "transfer_sizing")


def _check_mode_flags(args: argparse.Namespace, mode: str) -> None:
    """Refuse a flag the serving mode would ignore, naming it (as typed) and what chose the
    mode."""
    pools = [
        typed(args, n)
        for n in ("prefill_workers", "decode_workers")
        if getattr(args, n) is not None
    ]
    if mode == "disaggregated" and args.workers is not None:
        chosen_by = " and ".join(pools) if pools else f"--config {args.config} (cluster.mode)"
        raise UsageError(
            f"{typed(args, 'workers')} counts aggregated workers, but {chosen_by} selects "
            "disaggregated serving: give --prefill-workers and --decode-workers instead"
        )
    given = [typed(args, n) for n in _TRANSFER_FLAGS if getattr(args, n) is not None]
    if mode == "aggregated" and given:
        raise UsageError(
            f"{', '.join(given)}: KV transfers happen in disaggregated serving only; give "
            "--prefill-workers and --decode-workers (or cluster.mode: disaggregated in --config)"
        )


def _timing(
    args: argparse.Namespace, current: dict[str, Any], engine: dict[str, Any]
) -> dict[str, Any]:
    """The timing section after the --timing flags, checking they belong together."""
    model = args.timing or current["model"]
    if model == "aic":
        spec = dict(current) if current["model"] == "aic" else {"model": "aic"}
        if args.backend is not None:
            spec["backend"] = None  # follows the engine's, which --backend sets
        flags = {"model": "model_name", "system": "system"}
        given = {**flags, "backend_version": "backend_version", "ep": "ep"}
        given["mixed_decode_profile"] = "mixed_decode_profile"
        for flag, key in given.items():
            if getattr(args, flag) is not None:
                spec[key] = (
                    str(getattr(args, flag)) if flag.endswith("profile") else getattr(args, flag)
                )
        missing = [f"--{f}" for f, key in flags.items() if key not in spec]
        if missing:
            raise UsageError(f"--timing aic needs {' and '.join(missing)}")
        # The tables are for the engine's layout.
        return {**spec, "tp": engine["tensor_parallel_size"], "dp": engine["data_parallel_size"]}
    given = [
        f"--{flag.replace('_', '-')}"
        for flag in ("model", "system", "backend_version", "ep", "mixed_decode_profile")
        if getattr(args, flag) is not None
    ]
    if given:
        raise UsageError(
            f"{', '.join(given)}: AIConfigurator's model, GPU system, engine version, expert "
            "split and a measured mixed-decode profile apply to --timing aic (its step times, "
            "and the KV blocks and KV bytes per token derived from them)"
        )
    if model != "fixed" and (args.prefill_ms is not None or args.decode_ms is not None):
        raise UsageError("--prefill-ms and --decode-ms apply to --timing fixed only")
    if model != "table" and args.timing_table is not None:
        raise UsageError("--timing-table applies to --timing table only")
    if model == "fixed":
        fixed = {k: v for k, v in current.items() if k in ("prefill_ms", "decode_ms")}
        for key in ("prefill_ms", "decode_ms"):
            if getattr(args, key) is not None:
                fixed[key] = getattr(args, key)
        missing = [
            f"--{k.replace('_', '-')}" for k in ("prefill_ms", "decode_ms") if k not in fixed
        ]
        if missing:
            raise UsageError(f"--timing fixed needs {' and '.join(missing)}")
        return {"model": "fixed", **fixed}
    if model == "table":
        if args.timing_table is not None:
            from dynosim.config import load_timing_table

            return load_timing_table(args.timing_table).model_dump()
        if current["model"] != "table":
            raise UsageError("--timing table needs --timing-table FILE.npz")
    return current if model == current["model"] else {"model": model}


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `dynosim replay --help` needs none of them. What only
    # prints the report is imported once the replay is done (see `_print`).
    from dynosim._dependencies import matplotlib
    from dynosim.cli.output import check_outputs
    from dynosim.replay import replay, replay_file

    json_file = None if args.json in (None, "-") else Path(args.json)
    check_outputs(
        [("--json", json_file), ("--html", args.html)],
        [
            args.trace,
            args.config,
            args.timing_table,
            args.mixed_decode_profile,
            Path(args.model) if args.model else None,
        ],
    )
    if args.html is not None:
        try:
            matplotlib()
        except MissingExtraError as e:
            raise missing_extra_is_bad_input(e) from None
    data, given = _document(args)
    real = measured.measured_run(args)  # None without --measured
    if _core_checks(args, data):
        path, source = trace_from_args(args, sample_when_missing=True)
        report = replay_file(
            path,
            data,
            trace_block_size=args.trace_block_size,
            format=args.format,
            progress=not args.no_progress,
        )
        return _print(args, report, source, real, json_file)
    config = _config(data, given)
    if real:
        workload, source = real[0].columns, real[1]
    else:
        workload, source = workload_from_args(args, sample_when_missing=True)
    report = replay(workload, config, progress=not args.no_progress)
    return _print(args, report, source, real, json_file)


def _print(
    args: argparse.Namespace,
    report: Report,
    source: str,
    real: tuple[MeasuredRun, str] | None,
    json_file: Path | None,
) -> int:
    """Print and write what ``dynosim replay`` makes of ``report``; returns the exit code.
    Its modules (rich, the tables, the comparison) are imported only now: a replay's start
    waits on none of them, and a replay of flags alone builds no pydantic model at all."""
    from rich.console import Console

    from dynosim._files import atomic_open
    from dynosim.cli.breakdown import render_breakdown
    from dynosim.cli.summary import render_summary

    # With the JSON on stdout, the table goes to stderr so the JSON stays parseable.
    console = Console(file=sys.stderr if args.json == "-" else sys.stdout)
    console.print(render_summary(report, source))
    if report.config["report"]["explain"]:
        console.print(render_breakdown(report))
    if real:
        # Imported only with --measured: the comparison's models pull in pydantic.
        from dynosim.compare.measured import compare_measured

        console.print(measured.render_comparison(compare_measured(report, real[0])))
    # Written a column slice at a time: the JSON of millions of requests is never held whole.
    if args.json == "-":
        report.write_json(sys.stdout)
    elif json_file is not None:
        with atomic_open(json_file) as fh:
            report.write_json(fh)
    if args.html is not None:
        report.to_html(args.html)
        console.print(f"wrote {args.html}")
    if args.fail_on_rejections and report.summary["rejected_requests"]:
        return EXIT_REJECTED
    return 0


__all__ = ["add_parser", "run"]
