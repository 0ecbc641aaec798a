"""``offline_replay_bench`` (dynosim.bench) and the Dynamo comparison (dynosim.compare)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TRACES, peer_config

import dynosim
from dynosim._defaults import ROUTERS
from dynosim._dependencies import dynamo as import_dynamo
from dynosim.bench import EXIT_NONDETERMINISTIC, PeakRss, first_difference, main, run_iteration
from dynosim.bench import offline_replay_bench as bench
from dynosim.cli import EXIT_BAD_INPUT, EXIT_FAILED
from dynosim.compare import DynamoReplay, dynamo_replay_kwargs, metric_rows
from dynosim.config import DEFAULT_NUM_GPU_BLOCKS
from dynosim.errors import ConfigError, MissingExtraError, WorkloadError


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    """The first 300 rows of the bundled Mooncake sample (a fraction of a second to replay)."""
    lines = dynosim.sample_trace_path().read_text().splitlines()[:300]
    path = tmp_path / "small.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _bench_config(*argv: str) -> dynosim.SimConfig:
    parser = bench._parser()
    return bench.build_config(parser.parse_args(["trace.jsonl", *argv]), parser)


# --- the CI smoke run: two iterations and the determinism check -------------------------------


def test_smoke_two_iterations_are_deterministic(small_trace, tmp_path):
    timings, reports, report_json = (
        tmp_path / "timings.jsonl",
        tmp_path / "reports.jsonl",
        tmp_path / "report.json",
    )
    argv = [
        str(small_trace),
        "--iterations",
        "2",
        "--timings-jsonl",
        str(timings),
        "--canonical-reports-jsonl",
        str(reports),
        "--report-json",
        str(report_json),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "dynosim.bench", *argv], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "deterministic: 2 iterations gave the same canonical report" in done.stdout
    rows = [json.loads(line) for line in timings.read_text().splitlines()]
    assert [(r["simulator"], r["iteration"]) for r in rows] == [("dynosim", 1), ("dynosim", 2)]
    for r in rows:
        assert r["trace_load_ms"] > 0 and r["replay_ms"] > 0 and r["peak_rss_mib"] > 10
        assert r["wall_ms"] == pytest.approx(r["trace_load_ms"] + r["replay_ms"])
    first, second = reports.read_text().splitlines()
    assert first == second
    # The report is the same one the API gives for the same trace and default settings.
    expected = dynosim.replay(dynosim.load_trace(small_trace)).to_json()
    assert first == expected
    assert report_json.read_text() == expected + "\n"


def test_differing_iterations_exit_non_zero_and_name_the_field(small_trace, monkeypatch, capsys):
    calls = []
    # The bench imports the replay when it runs one (its --help does not): patched where it is.
    replay_module = importlib.import_module("dynosim.replay")
    real_replay = replay_module.replay

    def drifting_replay(workload, config):
        # The second replay silently runs another block size, as a nondeterministic core would.
        calls.append(config)
        if len(calls) == 2:
            config = config.model_copy(
                update={"engine": config.engine.model_copy(update={"block_size": 32})}
            )
        return real_replay(workload, config)

    monkeypatch.setattr(replay_module, "replay", drifting_replay)
    assert main([str(small_trace), "--iterations", "3"]) == EXIT_NONDETERMINISTIC
    err = capsys.readouterr().err
    assert "not deterministic: iteration 2's canonical report differs from iteration 1's" in err
    assert "at config.engine.block_size" in err
    assert len(calls) == 3


def test_first_difference_paths():
    assert first_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2}]}) is None
    assert first_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == "a[1].b"
    assert first_difference({"a": 1, "z": 1}, {"z": 1}) == "a"
    assert first_difference({"a": [1, 2]}, {"a": [1]}) == "a (length 2 vs 1)"
    assert first_difference(1, 2) == "(the whole document)"


def test_run_iteration_times_load_and_replay(small_trace):
    config = _bench_config()
    report, timing = run_iteration(small_trace, 512, config, 7, PeakRss())
    assert timing.iteration == 7
    assert timing.wall_ms == pytest.approx(timing.trace_load_ms + timing.replay_ms)
    assert timing.cpu_ms > 0
    assert report.completed_requests + report.rejected_requests == 300


def test_peak_rss_resets_between_windows():
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("this kernel cannot reset the peak RSS")
    rss = PeakRss()
    rss.reset()
    big = bytearray(64 * 1024 * 1024)
    big[::4096] = b"x" * len(big[::4096])  # touch every page so it is resident
    with_block = rss.peak_mib()
    del big
    rss.reset()
    assert rss.peak_mib() < with_block - 32


# --- flags -------------------------------------------------------------------------------


def test_flags_set_the_aggregated_config():
    flags = (
        "--num-workers 3 --block-size 32 --num-gpu-blocks 1000 --max-num-seqs 8 "
        "--max-num-batched-tokens 4096 --arrival-speedup-ratio 2.5 --router-mode round-robin"
    )
    c = _bench_config(*flags.split())
    assert (c.cluster.mode, c.cluster.num_workers, c.cluster.router) == (
        "aggregated",
        3,
        "round_robin",
    )
    assert c.cluster.arrival_speedup_ratio == 2.5
    assert (c.engine.block_size, c.engine.num_gpu_blocks) == (32, 1000)
    assert (c.engine.max_num_seqs, c.engine.max_num_batched_tokens) == (8, 4096)


def test_flags_set_the_disaggregated_config():
    disagg = "--serving-mode disagg --kv-transfer-bandwidth 64 --kv-bytes-per-token 262144"
    c = _bench_config(*f"{disagg} --num-prefill-workers 2 --num-decode-workers 3".split())
    assert (c.cluster.mode, c.cluster.num_prefill_workers, c.cluster.num_decode_workers) == (
        "disaggregated",
        2,
        3,
    )
    assert (c.kv_transfer.bandwidth_gbps, c.kv_transfer.kv_bytes_per_token) == (64.0, 262144)
    assert c.kv_transfer.link_model is None  # dynosim's default (max-min) applies
    compared = _bench_config(*f"{disagg} --compare dynamo".split())
    assert compared.kv_transfer.link_model == "line_rate"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--router-mode", "kv_router"], "--router-mode kv_router: not available in dynosim yet"),
        (["--iterations", "0"], "--iterations must be at least 1, got 0"),
        (["--kv-transfer-bandwidth", "64"], "--kv-transfer-bandwidth: only with --serving-mode"),
        (["--serving-mode", "disagg", "--num-workers", "4"], "--num-workers: counts aggregated"),
        (
            ["--serving-mode", "disagg", "--link-model", "max_min", "--compare", "dynamo"],
            "--compare dynamo needs --link-model line_rate",
        ),
    ],
)
def test_conflicting_flags_exit_2_with_the_reason(small_trace, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([str(small_trace), *argv])
    assert exit_info.value.code == EXIT_BAD_INPUT
    assert message in capsys.readouterr().err


def test_bad_trace_exits_2_naming_the_file(tmp_path, capsys):
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 2}\n')
    assert main([str(trace)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"{trace}:1: field 'hash_ids'" in err


def test_unwritable_output_exits_2_naming_the_path(small_trace, tmp_path, capsys):
    target = tmp_path / "missing-dir" / "timings.jsonl"
    assert main([str(small_trace), "--timings-jsonl", str(target)]) == EXIT_BAD_INPUT
    # Refused before the replay, naming the flag and the missing directory.
    err = capsys.readouterr().err
    assert f"--timings-jsonl {target}: {target.parent} does not exist" in err


def test_console_script_is_declared():
    tomllib = pytest.importorskip("tomllib")
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    scripts = tomllib.loads(pyproject.read_text())["project"]["scripts"]
    module, function = scripts["offline_replay_bench"].split(":")
    assert getattr(importlib.import_module(module), function) is main


# --- mapping dynosim settings to Dynamo's replay (no Dynamo needed) --------------------------


def test_aggregated_settings_map_to_dynamo_engine_args():
    config = peer_config(
        {
            "cluster": {"num_workers": 3, "arrival_speedup_ratio": 2.0},
            "engine": {"block_size": 32, "max_num_seqs": 64, "preemption_mode": "fifo"},
            "timing": {"model": "polynomial", "speedup_ratio": 2.0},
        }
    )
    kwargs = dynamo_replay_kwargs(config, 512)
    assert kwargs["num_workers"] == 3
    assert kwargs["router_mode"] == "round_robin"
    assert (kwargs["arrival_speedup_ratio"], kwargs["trace_block_size"]) == (2.0, 512)
    engine = kwargs["extra_engine_args"]["engine"]
    assert engine["block_size"] == 32 and engine["max_num_seqs"] == 64
    assert engine["num_gpu_blocks"] == DEFAULT_NUM_GPU_BLOCKS  # unset: the core's default
    assert engine["preemption_mode"] == "fifo"
    assert (engine["speedup_ratio"], engine["decode_speedup_ratio"]) == (2.0, 1.0)
    assert engine["worker_type"] == "aggregated"
    assert "prefill_engine_args" not in kwargs


def test_backend_flag_picks_the_engine_flavour_and_its_budget_setting():
    config = _bench_config("--backend", "trtllm", "--max-num-batched-tokens", "4096")
    assert (config.engine.backend, config.engine.max_num_tokens) == ("trtllm", 4096)
    assert config.engine.enable_chunked_context is None  # TensorRT-LLM's default: off
    # Compared with a peer, contexts are chunked as the peers' TensorRT-LLM engines chunk them.
    compared = _bench_config("--backend", "trtllm", "--compare", "dynamo")
    assert compared.engine.enable_chunked_context is True
    assert _bench_config("--max-num-batched-tokens", "512").engine.max_num_batched_tokens == 512


def test_trtllm_settings_map_to_dynamo_trtllm_engine():
    config = peer_config(
        {"engine": {"backend": "trtllm", "max_num_tokens": 4096, "enable_chunked_context": True}}
    )
    engine = dynamo_replay_kwargs(config, 512)["extra_engine_args"]["engine"]
    assert engine["backend"] == "trtllm"
    assert engine["trtllm"] == {"capacity_scheduler_policy": "guaranteed_no_evict"}
    assert (engine["block_size"], engine["max_num_batched_tokens"]) == (32, 4096)
    assert engine["enable_chunked_prefill"] is True
    assert "preemption_mode" not in engine


def test_disaggregated_settings_map_to_prefill_and_decode_args():
    config = peer_config(
        {
            "cluster": {"mode": "disaggregated", "num_prefill_workers": 2, "num_decode_workers": 1},
            "decode": {"engine": {"block_size": 64, "num_gpu_blocks": 4096}},
            "kv_transfer": {
                "bandwidth_gbps": 64.0,
                "decode_bandwidth_gbps": 32.0,
                "link_model": "line_rate",
                "first_token": "first_decode_pass",
                "sizing": "destination_missing",
                "kv_shape": {
                    "num_layers": 64,
                    "num_kv_heads": 8,
                    "head_dim": 128,
                    "dtype_bytes": 2,
                },
            },
        }
    )
    kwargs = dynamo_replay_kwargs(config, 512)
    assert (kwargs["num_prefill_workers"], kwargs["num_decode_workers"]) == (2, 1)
    prefill = kwargs["prefill_engine_args"]["engine"]
    decode = kwargs["decode_engine_args"]["engine"]
    assert (prefill["worker_type"], decode["worker_type"]) == ("prefill", "decode")
    assert decode["num_gpu_blocks"] == 4096
    assert prefill["num_gpu_blocks"] == DEFAULT_NUM_GPU_BLOCKS
    for engine in (prefill, decode):
        assert engine["kv_transfer_bytes_per_token"] == 64 * 2 * 8 * 128 * 2
        assert engine["kv_transfer_bandwidth"] == 32.0  # line rate: the slower end
        assert engine["kv_transfer_timing_mode"] == "destination_missing"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"timing": {"model": "fixed", "prefill_ms": 1, "decode_ms": 1}}, "timing.model: Dynamo"),
        (
            {
                "cluster": {"mode": "disaggregated"},
                "prefill": {"timing": {"model": "fixed", "prefill_ms": 1, "decode_ms": 1}},
                "kv_transfer": {"first_token": "first_decode_pass"},
            },
            "prefill.timing.model: Dynamo",
        ),
        (
            {"cluster": {"mode": "disaggregated"}},
            "kv_transfer.first_token: Dynamo counts a first token after the decode worker's",
        ),
        (
            {
                "cluster": {"mode": "disaggregated"},
                "kv_transfer": {
                    "bandwidth_gbps": 8.0,
                    "kv_bytes_per_token": 2,
                    "first_token": "first_decode_pass",
                },
            },
            "kv_transfer.link_model: Dynamo moves every transfer at full bandwidth",
        ),
        (
            {
                "cluster": {"mode": "disaggregated"},
                "kv_transfer": {
                    "bandwidth_gbps": 8.0,
                    "kv_bytes_per_token": 2.5,
                    "link_model": "line_rate",
                    "first_token": "first_decode_pass",
                },
            },
            "kv_transfer.kv_bytes_per_token: Dynamo takes a whole number of bytes, got 2.5",
        ),
        (
            {"engine": {"backend": "trtllm"}},
            "engine.enable_chunked_context: Dynamo's TensorRT-LLM engine chunks contexts",
        ),
        (
            {"engine": {"backend": "trtllm", "capacity_scheduler": "max_utilization"}},
            "engine.capacity_scheduler: Dynamo models guaranteed_no_evict only",
        ),
    ],
)
def test_settings_dynamo_cannot_model_are_refused(config, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        dynamo_replay_kwargs(peer_config(config), 512)


def test_compare_refuses_routers_other_than_round_robin():
    others = [r for r in ROUTERS if r != "round_robin"]
    if not others:
        pytest.skip("dynosim has no router besides round_robin")
    for router in others:
        config = peer_config({"cluster": {"router": router}})
        with pytest.raises(ConfigError, match=f"cluster.router: .* got '{router}'"):
            dynamo_replay_kwargs(config, 512)


def test_compare_refuses_csv_traces(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,8,2\n")
    with pytest.raises(WorkloadError, match="Mooncake JSONL traces only"):
        DynamoReplay(trace, peer_config(), 512)


def test_missing_extra_names_the_install_command(small_trace, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "dynamo", None)  # import dynamo now fails
    with pytest.raises(MissingExtraError, match=r"pip install 'dynosim\[compare\]'"):
        import_dynamo()
    assert main([str(small_trace), "--compare", "dynamo"]) == EXIT_FAILED
    assert "pip install 'dynosim[compare]'" in capsys.readouterr().err


# --- against Dynamo itself (needs the compare extra) ---------------------------------------

try:
    import_dynamo()
    HAVE_DYNAMO = True
except MissingExtraError:
    HAVE_DYNAMO = False

needs_dynamo = pytest.mark.skipif(
    not HAVE_DYNAMO, reason="Dynamo is not installed: pip install 'dynosim[compare]'"
)
CONVERSATION = TRACES / "mooncake_conversation.jsonl"


@needs_dynamo
def test_compare_prints_the_side_by_side_table(small_trace, tmp_path, capsys):
    timings = tmp_path / "t.jsonl"
    argv = [str(small_trace), "--compare", "dynamo", "--timings-jsonl", str(timings)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "dynosim vs Dynamo 1.6.1 offline replay" in out
    for label in ("wall: trace load + replay (ms)", "TTFT mean (ms)", "prefix reuse ratio"):
        assert label in out
    rows = [json.loads(line) for line in timings.read_text().splitlines()]
    assert [r["simulator"] for r in rows] == ["dynosim", "dynamo"]
    assert rows[1]["wall_ms"] > rows[1]["replay_ms"] > 0


@needs_dynamo
def test_compare_in_disaggregated_mode_without_a_bandwidth_runs(small_trace, capsys):
    # No bandwidth: transfers are instant on both sides, so there is no link model to ask for.
    argv = [str(small_trace), "--serving-mode", "disagg", "--num-prefill-workers", "2"]
    argv += ["--num-decode-workers", "2", "--compare", "dynamo"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "dynosim vs Dynamo" in out and "TTFT mean (ms)" in out


#: The reference runs on the full conversation trace (trace block 512, polynomial timing, round
#: robin, arrival speedup 1): vLLM-like engines with 64-token blocks, and the TensorRT-LLM-like
#: engine at its defaults (32-token blocks, no-evict admission) but with chunked context, which
#: Dynamo's TensorRT-LLM engine always does.
RUNS = {
    "aggregated": {"cluster": {"num_workers": 4}, "engine": {"block_size": 64}},
    "aggregated TRT-LLM": {
        "cluster": {"num_workers": 4},
        "engine": {"backend": "trtllm", "enable_chunked_context": True},
    },
    "disaggregated": {
        "cluster": {"mode": "disaggregated", "num_prefill_workers": 2, "num_decode_workers": 2},
        "engine": {"block_size": 64},
        "kv_transfer": {
            "bandwidth_gbps": 64.0,
            "kv_bytes_per_token": 262_144,
            "link_model": "line_rate",
            "first_token": "first_decode_pass",
        },
    },
}
DYNOSIM_ITERATIONS = 3  # dynosim's wall time is the median of these; Dynamo runs once


@pytest.fixture(scope="module")
def head_to_head():
    """Each reference run through both simulators: (dynosim report, dynosim timings, Dynamo run)."""
    if not CONVERSATION.exists():
        pytest.skip(f"{CONVERSATION} is not available")
    results = {}
    rss = PeakRss()
    for name, settings in RUNS.items():
        config = peer_config(settings)
        dynamo = DynamoReplay(CONVERSATION, config, 512)
        runs = [run_iteration(CONVERSATION, 512, config, i, rss) for i in range(DYNOSIM_ITERATIONS)]
        results[name] = (runs[-1][0], [t for _, t in runs], dynamo.run(rss))
    return results


@needs_dynamo
@pytest.mark.parametrize("run", RUNS)
def test_completed_requests_equal_dynamo(head_to_head, run):
    report, _, dynamo = head_to_head[run]
    assert report.completed_requests == dynamo.summary["completed_requests"] == 12_031


@needs_dynamo
@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("label", ["TTFT mean (ms)", "TPOT mean (ms)", "E2E mean (ms)"])
def test_mean_latency_within_2_percent_of_dynamo(head_to_head, run, label):
    report, _, dynamo = head_to_head[run]
    rows = {row[0]: row for row in metric_rows(report, dynamo.summary)}
    _, ours, theirs, rel = rows[label]
    assert abs(rel) <= 0.02, f"{run} {label}: dynosim {ours:.3f}, Dynamo {theirs:.3f}"
