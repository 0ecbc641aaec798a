"""``offline_replay_bench``: time dynosim's replay of a trace, check that repeated replays give
the same canonical report, and optionally run another simulator on the same trace and settings
for a side-by-side table: Dynamo's own offline replay, or AISimulate's.

Each iteration reads and parses the trace, then replays it (the same work Dynamo's
``run_mocker_trace_replay`` does in one call). Run ``offline_replay_bench --help`` or
``python -m dynosim.bench --help``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from dynosim import _core
from dynosim._defaults import (
    DEFAULT_NUM_GPU_BLOCKS,
    DEFAULTS,
    ENGINE_DEFAULTS,
    LINK_MODELS,
    ROUTERS,
    flavour_setting,
)
from dynosim._files import atomic_open
from dynosim._workload_defaults import TRACE_BLOCK_SIZE
from dynosim.cli.common import (
    EXIT_REJECTED,
    Parser,
    VersionAction,
    missing_extra_is_bad_input,
    name_flags,
    plain_warnings,
    run_command,
    typed,
)
from dynosim.cli.output import check_outputs
from dynosim.compare.releases import AISIMULATE_VERSION, RELEASES, RUN_TIMEOUT_S
from dynosim.errors import ConfigError, MissingExtraError

# The configuration models, the replay, the reports and the peers import pydantic and numpy:
# imported where they are used, so that --help starts without them (as dynosim's commands do).
if TYPE_CHECKING:
    from dynosim.compare.peer import PeerRun
    from dynosim.config import SimConfig
    from dynosim.report import Report

#: Exit code when two iterations' canonical reports differ (0: all equal; see dynosim.cli.common
#: for bad input and failed simulations).
EXIT_NONDETERMINISTIC = 3


class PeakRss:
    """Peak resident memory of this process (MiB) since the last :meth:`reset`.

    On Linux the kernel's high-water mark is reset through ``/proc/self/clear_refs``, so each
    iteration gets its own peak; elsewhere the peak covers the whole process so far.
    """

    _STATUS = Path("/proc/self/status")

    def reset(self) -> None:
        """Start a new measurement window (a no-op where the kernel cannot reset the peak)."""
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            pass

    def peak_mib(self) -> float:
        """The peak resident set size (MiB) of the current window."""
        try:
            match = re.search(r"^VmHWM:\s+(\d+) kB", self._STATUS.read_text(), re.MULTILINE)
        except OSError:
            match = None
        if match:
            return int(match.group(1)) / 1024.0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # ru_maxrss is in KiB on Linux and in bytes on macOS.
        return peak / (1024.0 * 1024.0 if sys.platform == "darwin" else 1024.0)


@dataclass(frozen=True)
class IterationTiming:
    """What one iteration cost: trace load and replay wall time, their sum, the process CPU
    time over both (all threads), all in ms, and the peak resident memory (MiB)."""

    iteration: int
    trace_load_ms: float
    replay_ms: float
    wall_ms: float
    cpu_ms: float
    peak_rss_mib: float


def run_iteration(
    trace: Path, trace_block_size: int, config: SimConfig, iteration: int, rss: PeakRss
) -> tuple[Report, IterationTiming]:
    """Load ``trace`` (``trace_block_size`` tokens per hash id) and replay it under ``config``;
    return the report and the iteration's timing."""
    from dynosim.replay import replay
    from dynosim.workload import load_trace

    rss.reset()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    workload = load_trace(trace, trace_block_size=trace_block_size)
    wall1 = time.perf_counter()
    report = replay(workload, config)
    wall2, cpu2 = time.perf_counter(), time.process_time()
    return report, IterationTiming(
        iteration=iteration,
        trace_load_ms=(wall1 - wall0) * 1000.0,
        replay_ms=(wall2 - wall1) * 1000.0,
        wall_ms=(wall2 - wall0) * 1000.0,
        cpu_ms=(cpu2 - cpu0) * 1000.0,
        peak_rss_mib=rss.peak_mib(),
    )


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The dotted path of the first place two JSON values differ (None when equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys()):
            where = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                return where
            found = first_difference(a[key], b[key], where)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):  # lengths compared below
            found = first_difference(x, y, f"{path}[{i}]")
            if found is not None:
                return found
        return None if len(a) == len(b) else f"{path} (length {len(a)} vs {len(b)})"
    return None if a == b else (path or "(the whole document)")


def _parser() -> argparse.ArgumentParser:
    # The defaults the help shows come from the core (read without the configuration models).
    cluster, engine = DEFAULTS["cluster"], DEFAULTS["engine"]
    block_size = flavour_setting(engine["backend"], "block_size", engine["block_size"])
    budget = _core.engine_pass_token_budget(json.dumps(engine))
    p = Parser(
        prog="offline_replay_bench",
        description="Replay a trace with dynosim, time every iteration (trace load + replay), "
        "check that all iterations give the same canonical report, and optionally run "
        "Dynamo's or AISimulate's replay on the same trace and settings (--compare).",
    )
    p.add_argument("--version", action=VersionAction)
    p.add_argument("trace", type=Path, help="trace file: Mooncake JSONL or Azure CSV")
    p.add_argument(
        "--serving-mode",
        choices=["aggregated", "disagg"],
        default="aggregated",
        help="aggregated workers, or prefill and decode workers (default: aggregated)",
    )
    p.add_argument(
        "--num-workers",
        "--workers",
        type=int,
        metavar="N",
        help=f"workers (default {cluster['num_workers']})",
    )
    p.add_argument(
        "--num-prefill-workers",
        "--prefill-workers",
        type=int,
        metavar="N",
        help=f"disagg: prefill workers (default {cluster['num_prefill_workers']})",
    )
    p.add_argument(
        "--num-decode-workers",
        "--decode-workers",
        type=int,
        metavar="N",
        help=f"disagg: decode workers (default {cluster['num_decode_workers']})",
    )
    p.add_argument(
        "--router-mode",
        "--router",
        default=cluster["router"],
        metavar="MODE",
        help=f"how requests are spread over workers; dynosim has: {', '.join(ROUTERS)}",
    )
    p.add_argument(
        "--arrival-speedup-ratio",
        "--arrival-speedup",
        type=float,
        metavar="R",
        help="divide every inter-arrival gap by R "
        f"(default {cluster['arrival_speedup_ratio']:g}; Dynamo's own bench defaults to 4)",
    )
    p.add_argument(
        "--backend",
        choices=list(ENGINE_DEFAULTS),  # the core's engine flavours, in its order
        help=f"the serving engine modelled (default {engine['backend']}); --compare runs the "
        "peer's engine of the same name",
    )
    p.add_argument(
        "--trace-block-size",
        type=int,
        default=TRACE_BLOCK_SIZE,
        metavar="TOKENS",
        help=f"tokens per trace hash id (default {TRACE_BLOCK_SIZE})",
    )
    p.add_argument(
        "--block-size",
        type=int,
        metavar="TOKENS",
        help=f"tokens per KV block (default {block_size})",
    )
    p.add_argument(
        "--num-gpu-blocks",
        type=int,
        metavar="N",
        help=f"KV blocks per rank (default {DEFAULT_NUM_GPU_BLOCKS:,})",
    )
    p.add_argument(
        "--max-num-seqs",
        type=int,
        metavar="N",
        help=f"most running requests per rank (default {engine['max_num_seqs']})",
    )
    p.add_argument(
        "--max-num-batched-tokens",
        type=int,
        metavar="TOKENS",
        help=f"token budget of one pass (default {budget}; trtllm: its max_num_tokens)",
    )
    p.add_argument(
        "--kv-bytes-per-token", type=float, metavar="BYTES", help="disagg: KV bytes of one token"
    )
    p.add_argument(
        "--kv-transfer-bandwidth",
        "--kv-bandwidth-gbps",
        type=float,
        metavar="GB/s",
        help="disagg: KV link bandwidth in GB/s (1e9 B/s); unset: instant transfers",
    )
    p.add_argument(
        "--link-model",
        choices=LINK_MODELS,
        help="disagg: links shared max-min fairly (dynosim's default) or every transfer at "
        "line rate (Dynamo's and AISimulate 0.13.0's model); with --compare the peer's model",
    )
    p.add_argument(
        "--iterations", type=int, default=1, metavar="N", help="replays to run (default 1)"
    )
    p.add_argument(
        "--fail-on-rejections",
        action="store_true",
        help=f"exit with status {EXIT_REJECTED} when the replay rejects any request (after "
        "the tables and files are written)",
    )
    p.add_argument(
        "--report-json", type=Path, metavar="PATH", help="write the last canonical report here"
    )
    p.add_argument(
        "--timings-jsonl",
        type=Path,
        metavar="PATH",
        help="write one JSON line per iteration: wall, CPU, trace load and replay ms, peak RSS MiB",
    )
    p.add_argument(
        "--canonical-reports-jsonl",
        type=Path,
        metavar="PATH",
        help="write every iteration's canonical report, one per line",
    )
    p.add_argument(
        "--compare",
        choices=["dynamo", "aisimulate"],
        help="also run another simulator on the same trace and settings, as often as "
        "--iterations, and print both side by side: dynamo, Dynamo's offline replay (pip "
        "install 'dynosim[compare]'), or aisimulate, AISimulate's (aisimulate-core, its "
        "replay built with cargo on first use into dynosim's cache directory)",
    )
    p.add_argument(
        "--aisimulate-version",
        choices=list(RELEASES),
        metavar="VERSION",
        help=f"aisimulate: the aisimulate-core release to compare with (default "
        f"{AISIMULATE_VERSION}; {', '.join(v for v in RELEASES if v != AISIMULATE_VERSION)} "
        "shares its KV-transfer links max-min fairly)",
    )
    p.add_argument(
        "--compare-timeout",
        type=float,
        metavar="SECONDS",
        help=f"aisimulate: stop a run after this long (default {RUN_TIMEOUT_S:g}; its SGLang "
        "engine can spin without progress)",
    )
    return p


#: The simulators --compare runs, by name, as the tables name them.
_PEERS = {"dynamo": "Dynamo", "aisimulate": "AISimulate"}

_DISAGG_ONLY = (
    "num_prefill_workers",
    "num_decode_workers",
    "kv_bytes_per_token",
    "kv_transfer_bandwidth",
    "link_model",
)


def _peer_title(args: argparse.Namespace) -> str:
    """The simulator --compare names, with the release for AISimulate."""
    if args.compare == "aisimulate":
        return f"AISimulate {args.aisimulate_version or AISIMULATE_VERSION}"
    return _PEERS[args.compare]


def _peer_link_model(args: argparse.Namespace) -> str:
    """How the --compare peer's KV transfers use links (a key of peer.LINK_MODELS, the
    descriptions of the link models)."""
    if args.compare == "aisimulate":
        return RELEASES[args.aisimulate_version or AISIMULATE_VERSION].link_model
    return "line_rate"


#: The engine setting --max-num-batched-tokens sets, by flavour (the pass's token budget).
_BUDGET = {"trtllm": "max_num_tokens"}


def build_config(args: argparse.Namespace, parser: argparse.ArgumentParser) -> SimConfig:
    """The SimConfig the flags describe (defaults from dynosim); flag conflicts end the
    program through ``parser.error`` (exit status 2)."""
    from dynosim._shown import suggestion
    from dynosim.compare import peer
    from dynosim.config import SimConfig

    router = args.router_mode.replace("-", "_")  # Dynamo spells it round-robin
    if router not in ROUTERS:
        parser.error(
            f"{typed(args, 'router_mode')} {args.router_mode}: not available in dynosim yet; "
            f"choose from {', '.join(ROUTERS)}{suggestion(router, ROUTERS)}"
        )
    if args.iterations < 1:
        parser.error(f"--iterations must be at least 1, got {args.iterations}")
    if args.serving_mode == "aggregated":
        given = [typed(args, n) for n in _DISAGG_ONLY if getattr(args, n) is not None]
        if given:
            parser.error(f"{', '.join(given)}: only with --serving-mode disagg")
    elif args.num_workers is not None:
        parser.error(
            f"{typed(args, 'num_workers')}: counts aggregated workers; with --serving-mode "
            "disagg give --num-prefill-workers and --num-decode-workers"
        )
    for name in ("compare_timeout", "aisimulate_version"):
        if getattr(args, name) is not None and args.compare != "aisimulate":
            parser.error(f"{typed(args, name)}: only with --compare aisimulate")
    if args.compare_timeout is not None:
        if not args.compare_timeout > 0:
            parser.error(f"--compare-timeout must be positive, got {args.compare_timeout:g}")
    link_model = args.link_model
    peer_disagg = args.compare is not None and args.serving_mode == "disagg"
    if peer_disagg:
        peer_links = _peer_link_model(args)
        if link_model not in (None, peer_links):
            parser.error(
                f"--link-model {link_model}: {_peer_title(args)} {peer.LINK_MODELS[peer_links]}; "
                f"--compare {args.compare} needs --link-model {peer_links}"
            )
        # Without a bandwidth transfers are instant on both sides: no link model to set.
        if args.kv_transfer_bandwidth is not None:
            link_model = peer_links
    data: dict[str, Any] = SimConfig().model_dump()
    if peer_disagg:
        # Count first tokens as the peers do: after the decode worker's first pass.
        data["kv_transfer"]["first_token"] = "first_decode_pass"
    backend = args.backend or data["engine"]["backend"]
    data["engine"]["backend"] = backend
    if backend == "trtllm" and args.compare is not None:
        # The peers' TensorRT-LLM engines chunk contexts (TensorRT-LLM's default is not to).
        data["engine"]["enable_chunked_context"] = True
    if backend == "vllm" and args.compare is not None:
        # The peers' vLLM engines form each pass when the one before ends and admit a request
        # once its first chunk fits (vLLM forms passes ahead and, from 0.19, gates on the
        # whole prompt).
        data["engine"]["async_scheduling"] = False
        data["engine"]["scheduler_reserve_full_isl"] = False
    data["cluster"]["router"] = router
    data["cluster"]["mode"] = "aggregated" if args.serving_mode == "aggregated" else "disaggregated"
    set_by = []
    for dest, value, section, key in (
        ("num_workers", args.num_workers, "cluster", "num_workers"),
        ("num_prefill_workers", args.num_prefill_workers, "cluster", "num_prefill_workers"),
        ("num_decode_workers", args.num_decode_workers, "cluster", "num_decode_workers"),
        ("arrival_speedup_ratio", args.arrival_speedup_ratio, "cluster", "arrival_speedup_ratio"),
        ("block_size", args.block_size, "engine", "block_size"),
        ("num_gpu_blocks", args.num_gpu_blocks, "engine", "num_gpu_blocks"),
        ("max_num_seqs", args.max_num_seqs, "engine", "max_num_seqs"),
        (
            "max_num_batched_tokens",
            args.max_num_batched_tokens,
            "engine",
            _BUDGET.get(backend, "max_num_batched_tokens"),
        ),
        ("kv_bytes_per_token", args.kv_bytes_per_token, "kv_transfer", "kv_bytes_per_token"),
        ("kv_transfer_bandwidth", args.kv_transfer_bandwidth, "kv_transfer", "bandwidth_gbps"),
        ("link_model", link_model, "kv_transfer", "link_model"),
    ):
        if value is not None:
            data[section][key] = value
            set_by.append((f"{section}.{key}", typed(args, dest), value))
    try:
        return SimConfig.model_validate(data)
    except ConfigError as e:
        raise name_flags(e, set_by) from None


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.4f}" if abs(value) < 10 else f"{value:,.2f}"


def _ratio(dynosim_ms: float, peer_ms: float) -> str:
    return f"{peer_ms / dynosim_ms:,.1f}x faster" if dynosim_ms > 0 else "-"


@dataclass(frozen=True)
class Peer:
    """Another simulator run beside dynosim: its name in the tables, its key in the timings
    JSONL, the title of the side-by-side table, and one run of it."""

    name: str
    key: str
    title: str
    run: Callable[[], PeerRun]


def timing_table(
    timings: Sequence[IterationTiming], peer_name: str = "", peer_runs: Sequence[PeerRun] = ()
) -> Any:
    """A rich Table of every iteration's cost (ms, MiB), the peer's runs below dynosim's."""
    from rich.table import Table

    table = Table(title="iterations (ms; peak RSS in MiB)", title_justify="left")
    for col in ("run", "trace load", "replay", "wall", "CPU", "peak RSS"):
        table.add_column(col, justify="right" if col != "run" else "left")
    for t in timings:
        table.add_row(
            f"dynosim {t.iteration}",
            *(_fmt(v) for v in (t.trace_load_ms, t.replay_ms, t.wall_ms, t.cpu_ms, t.peak_rss_mib)),
        )
    for i, run in enumerate(peer_runs, start=1):
        table.add_row(
            f"{peer_name} {i}",
            "(inside)" if run.trace_load_ms is None else _fmt(run.trace_load_ms),
            *(_fmt(v) for v in (run.simulation_ms, run.wall_ms, run.cpu_ms, run.peak_rss_mib)),
        )
    return table


def comparison_table(
    report: Report,
    timings: Sequence[IterationTiming],
    peer_name: str,
    peer_runs: Sequence[PeerRun],
    title: str,
) -> Any:
    """The side-by-side rich Table: medians of wall and CPU time (ms) with the peer's time over
    dynosim's, then every metric of ``dynosim.compare.METRICS`` with its relative difference
    (dynosim - peer) / peer."""
    from rich.table import Table

    from dynosim.compare.peer import metric_rows

    def median(values: Any) -> float:
        return statistics.median(list(values))

    n = len(timings)
    table = Table(
        title=f"{title} (median of {n} run{'s' if n > 1 else ''} each)", title_justify="left"
    )
    table.add_column("metric", style="bold")
    table.add_column("dynosim", justify="right")
    table.add_column(peer_name, justify="right")
    table.add_column("difference", justify="right")
    for label, ours, theirs in (
        (
            "wall: trace load + replay (ms)",
            median(t.wall_ms for t in timings),
            median(r.wall_ms for r in peer_runs),
        ),
        (
            "wall: replay only (ms)",
            median(t.replay_ms for t in timings),
            median(r.simulation_ms for r in peer_runs),
        ),
        (
            "CPU: trace load + replay (ms)",
            median(t.cpu_ms for t in timings),
            median(r.cpu_ms for r in peer_runs),
        ),
    ):
        table.add_row(label, _fmt(ours), _fmt(theirs), _ratio(ours, theirs))
    for label, ours, theirs, rel in metric_rows(report, peer_runs[-1].summary):
        diff = "-" if rel is None else f"{rel * 100:+.2f} %"
        table.add_row(label, _fmt(ours), _fmt(theirs), diff)
    return table


def _write_jsonl(handle: IO[str] | None, record: Any) -> None:
    if handle is not None:
        handle.write(json.dumps(record, sort_keys=True, allow_nan=False) + "\n")


def _open(files: ExitStack, path: Path | None) -> IO[str] | None:
    """A handle writing ``path`` under a temporary name until the run ends (an interrupted
    run leaves no file that looks complete), or None."""
    return None if path is None else files.enter_context(atomic_open(path))


def make_peer(args: argparse.Namespace, config: SimConfig, rss: PeakRss) -> Peer | None:
    """The simulator ``--compare`` names, checked (and AISimulate built) so that an unusable
    trace, setting or install fails before any replay; None without ``--compare``."""
    from dynosim.compare.aisimulate import AisimulateReplay
    from dynosim.compare.dynamo import DynamoReplay

    name = _PEERS.get(args.compare or "")
    if args.compare == "dynamo":
        dynamo = DynamoReplay(args.trace, config, args.trace_block_size)
        title = f"dynosim vs Dynamo {version('ai-dynamo-runtime')} offline replay"
        # In this process: the peak memory is measured around each call.
        return Peer(name, args.compare, title, lambda: dynamo.run(rss))
    if args.compare == "aisimulate":
        release = args.aisimulate_version or AISIMULATE_VERSION
        try:
            aisim = AisimulateReplay(
                args.trace,
                config,
                args.trace_block_size,
                timeout_s=args.compare_timeout or RUN_TIMEOUT_S,
                announce=lambda line: print(f"offline_replay_bench: {line}", file=sys.stderr),
                version=release,
            )
        except MissingExtraError as e:  # no cargo: asked for on the command line
            raise missing_extra_is_bad_input(e) from None
        title = f"dynosim vs AISimulate (aisimulate-core {release}) replay"
        return Peer(name, args.compare, title, aisim.run)
    return None


def _run(args: argparse.Namespace, config: SimConfig) -> int:
    from rich.console import Console

    from dynosim.cli.summary import render_summary

    console = Console()
    rss = PeakRss()
    peer = make_peer(args, config, rss)
    timings: list[IterationTiming] = []
    peer_runs: list[PeerRun] = []
    first_json: str | None = None
    first_digest = ""
    mismatch: str | None = None
    with ExitStack() as files:
        timings_out = _open(files, args.timings_jsonl)
        reports_out = _open(files, args.canonical_reports_jsonl)
        for i in range(1, args.iterations + 1):
            report, timing = run_iteration(args.trace, args.trace_block_size, config, i, rss)
            timings.append(timing)
            _write_jsonl(timings_out, {"simulator": "dynosim", **asdict(timing)})
            canonical = report.to_json()
            digest = hashlib.sha256(canonical.encode()).hexdigest()
            if reports_out is not None:
                reports_out.write(canonical + "\n")
            if first_json is None:
                first_json, first_digest = canonical, digest
            elif digest != first_digest and mismatch is None:
                where = first_difference(json.loads(first_json), json.loads(canonical))
                mismatch = f"iteration {i}'s canonical report differs from iteration 1's at {where}"
        if peer is not None:
            # After every dynosim iteration: Dynamo's memory stays mapped in this process and
            # would otherwise show in dynosim's peak RSS.
            for i in range(1, args.iterations + 1):
                run = peer.run()
                peer_runs.append(run)
                # trace_load_ms is null when the peer reads the trace inside its call (Dynamo).
                row = {"simulator": peer.key, "iteration": i, "trace_load_ms": run.trace_load_ms}
                row.update(replay_ms=run.simulation_ms, wall_ms=run.wall_ms, cpu_ms=run.cpu_ms)
                _write_jsonl(timings_out, {**row, "peak_rss_mib": run.peak_rss_mib})
    if args.report_json is not None:
        with atomic_open(args.report_json) as fh:
            report.write_json(fh)
    console.print(render_summary(report, str(args.trace)))
    if peer is None:
        console.print(timing_table(timings))
    else:
        console.print(timing_table(timings, peer.name, peer_runs))
        console.print(comparison_table(report, timings, peer.name, peer_runs, peer.title))
    if mismatch is not None:
        print(f"offline_replay_bench: error: not deterministic: {mismatch}", file=sys.stderr)
        return EXIT_NONDETERMINISTIC
    if args.iterations > 1:
        console.print(
            f"deterministic: {args.iterations} iterations gave the same canonical report "
            f"(sha256 {first_digest[:16]})"
        )
    if args.fail_on_rejections and report.summary["rejected_requests"]:
        return EXIT_REJECTED
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``offline_replay_bench`` and ``python -m dynosim.bench``; returns the exit
    code: 0, 2 for bad input, 1 for a failed run, 3 when iterations disagree, 4 with
    ``--fail-on-rejections`` when the replay rejected requests."""
    parser = _parser()
    args = parser.parse_args(argv)
    plain_warnings()

    def command() -> int:
        config = build_config(args, parser)
        outputs = ("report_json", "timings_jsonl", "canonical_reports_jsonl")
        check_outputs([(typed(args, name), getattr(args, name)) for name in outputs], [args.trace])
        return _run(args, config)

    return run_command("offline_replay_bench", command)


if __name__ == "__main__":
    sys.exit(main())
