"""The comparison with AISimulate (dynosim.compare.aisimulate): mapping settings to the
``dynosim-aisim`` binary's flags, refusing what AISimulate cannot model, building and running
the binary, and agreement with AISimulate itself on the conversation trace."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import TRACES, peer_config

import dynosim
from dynosim.bench import build_config
from dynosim.bench import main as bench_main
from dynosim.bench.offline_replay_bench import _parser
from dynosim.cli import EXIT_BAD_INPUT, EXIT_FAILED
from dynosim.compare import AISIMULATE_VERSION, AisimulateReplay, aisimulate_args, metric_rows
from dynosim.compare import aisimulate as aisim
from dynosim.compare import aisimulate_build as binary
from dynosim.config import DEFAULT_NUM_GPU_BLOCKS, EngineConfig, resolve
from dynosim.errors import ConfigError, DynosimError, MissingExtraError, WorkloadError

CONVERSATION = TRACES / "mooncake_conversation.jsonl"


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    """The first 300 rows of the bundled Mooncake sample."""
    lines = dynosim.sample_trace_path().read_text().splitlines()[:300]
    path = tmp_path / "small.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def flags(args: list[str]) -> dict[str, str]:
    """The binary's flags as a dict (every flag takes one value)."""
    assert len(args) % 2 == 0
    return dict(zip(args[::2], args[1::2], strict=True))


# --- mapping dynosim settings to the binary's flags (no binary needed) -----------------------


def test_aggregated_settings_map_to_flags():
    config = peer_config(
        {
            "cluster": {"num_workers": 3, "arrival_speedup_ratio": 2.5, "concurrency": 16},
            "engine": {
                "block_size": 32,
                "num_gpu_blocks": 1000,
                "max_num_seqs": 64,
                "max_num_batched_tokens": 4096,
                "enable_chunked_prefill": False,
                "preemption_mode": "fifo",
                "tensor_parallel_size": 2,
            },
            "timing": {"model": "polynomial", "speedup_ratio": 2.0, "decode_speedup_ratio": 1.5},
        }
    )
    assert flags(aisimulate_args(config, 256)) == {
        "--trace-block-size": "256",
        "--arrival-speedup": "2.5",
        "--concurrency": "16",
        "--mode": "aggregated",
        "--workers": "3",
        "--backend": "vllm",
        "--block-size": "32",
        "--num-gpu-blocks": "1000",
        "--max-num-seqs": "64",
        "--max-num-batched-tokens": "4096",
        "--chunked-prefill": "false",
        "--preemption-mode": "fifo",
        "--tensor-parallel-size": "2",
        "--speedup-ratio": "2.0",
        "--decode-speedup-ratio": "1.5",
    }


def test_disaggregated_settings_map_to_role_flags():
    config = peer_config(
        {
            "cluster": {"mode": "disaggregated", "num_prefill_workers": 2, "num_decode_workers": 3},
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
    got = flags(aisimulate_args(config, 512))
    assert (got["--mode"], got["--prefill-workers"], got["--decode-workers"]) == (
        "disaggregated",
        "2",
        "3",
    )
    assert "--workers" not in got and "--block-size" not in got  # every engine flag per role
    assert got["--kv-bytes-per-token"] == str(64 * 2 * 8 * 128 * 2)
    assert got["--kv-bandwidth-gbps"] == "32.0"  # line rate: the slower end
    assert got["--kv-sizing"] == "destination_missing"
    default = config.engine
    assert default.num_gpu_blocks is None  # unset: the core's default, without a model
    assert got["--prefill.num-gpu-blocks"] == str(DEFAULT_NUM_GPU_BLOCKS)
    assert got["--decode.num-gpu-blocks"] == "4096"
    for role in ("prefill", "decode"):
        assert got[f"--{role}.backend"] == "vllm"
        assert got[f"--{role}.max-num-seqs"] == str(default.max_num_seqs)


def test_instant_transfers_pass_no_transfer_flags():
    config = peer_config(
        {"cluster": {"mode": "disaggregated"}, "kv_transfer": {"first_token": "first_decode_pass"}}
    )
    got = flags(aisimulate_args(config, 512))
    assert not [f for f in got if f.startswith("--kv-")]


def _disagg(**kv: Any) -> dict:
    return {
        "cluster": {"mode": "disaggregated"},
        "kv_transfer": {"bandwidth_gbps": 8.0, "kv_bytes_per_token": 2, **kv},
    }


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"timing": {"model": "fixed", "prefill_ms": 1, "decode_ms": 1}},
            "timing.model: AISimulate's replay times passes with the polynomial model only, "
            "got 'fixed'",
        ),
        (
            {
                "cluster": {"mode": "disaggregated"},
                "decode": {"timing": {"model": "fixed", "prefill_ms": 1, "decode_ms": 1}},
                "kv_transfer": {"first_token": "first_decode_pass"},
            },
            "decode.timing.model: AISimulate's replay",
        ),
        (
            {"cluster": {"router": "kv_aware"}},
            "cluster.router: AISimulate's published replay places requests round robin only",
        ),
        (
            {"offload": {"g2_blocks": 64}, "kv_transfer": {"kv_bytes_per_token": 2}},
            "offload.g2_blocks: AISimulate's offload tiers are another model",
        ),
        (
            {"engine": {"data_parallel_size": 2}},
            "engine.data_parallel_size: AISimulate spreads requests round robin over every "
            "data-parallel rank",
        ),
        (
            _disagg(first_token="first_decode_pass"),
            "kv_transfer.link_model: AISimulate moves every transfer at full bandwidth; compare "
            "with link_model 'line_rate', got 'max_min'",
        ),
        (
            _disagg(link_model="line_rate"),
            "kv_transfer.first_token: AISimulate counts a first token after the decode worker's "
            "first pass",
        ),
        (
            _disagg(
                link_model="line_rate", first_token="first_decode_pass", kv_bytes_per_token=2.5
            ),
            "kv_transfer.kv_bytes_per_token: AISimulate takes a whole number of bytes, got 2.5",
        ),
    ],
)
def test_settings_aisimulate_cannot_model_are_refused(config, message):
    with pytest.raises(ConfigError) as info:
        aisimulate_args(peer_config(config), 512)
    assert message in str(info.value)


class _NewerEngine(EngineConfig):
    """An engine section with a setting the mapping does not know (as a later dynosim may add)."""

    capacity_policy: str = "no_evict"


def test_an_engine_setting_the_mapping_does_not_know_is_refused_unless_default():
    role = resolve(peer_config()).roles["aggregated"]
    base = role.engine.model_dump()
    at_default = dataclasses.replace(role, engine=_NewerEngine(**base))
    assert "--block-size" in aisim._engine_flags(at_default, "")
    newer = dataclasses.replace(role, engine=_NewerEngine(**base, capacity_policy="max_util"))
    with pytest.raises(ConfigError, match=r"engine\.capacity_policy: the comparison with"):
        aisim._engine_flags(newer, "")


def test_csv_traces_are_refused(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,8,2\n")
    with pytest.raises(WorkloadError, match="AISimulate's replay reads Mooncake JSONL traces only"):
        AisimulateReplay(trace, peer_config(), 512)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--compare-timeout", "5"], "--compare-timeout: only with --compare aisimulate"),
        (["--compare", "aisimulate", "--compare-timeout", "0"], "--compare-timeout must be pos"),
        (
            ["--serving-mode", "disagg", "--link-model", "max_min", "--compare", "aisimulate"],
            "AISimulate moves every transfer at line rate; --compare aisimulate needs "
            "--link-model line_rate",
        ),
    ],
)
def test_conflicting_compare_flags_exit_2(small_trace, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench_main([str(small_trace), *argv])
    assert exit_info.value.code == EXIT_BAD_INPUT
    assert message in capsys.readouterr().err


def test_compare_defaults_to_line_rate_and_first_decode_pass():
    parser = _parser()
    argv = ["t.jsonl", "--serving-mode", "disagg", "--kv-transfer-bandwidth", "5"]
    args = parser.parse_args([*argv, "--kv-bytes-per-token", "262144", "--compare", "aisimulate"])
    kv = build_config(args, parser).kv_transfer
    assert (kv.link_model, kv.first_token) == ("line_rate", "first_decode_pass")


# --- finding, building and running the binary (no real build) --------------------------------


@pytest.fixture
def no_built_binary(monkeypatch):
    """Forget the binary built in this process and any $DYNOSIM_AISIM_BIN."""
    monkeypatch.delenv(binary.BINARY_ENV, raising=False)
    monkeypatch.setattr(binary, "_built", {})


def test_missing_cargo_names_the_install(no_built_binary, monkeypatch, small_trace, capsys):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(MissingExtraError, match=r"builds rust/dynosim-aisim with cargo, which is"):
        binary.aisimulate_binary()
    assert bench_main([str(small_trace), "--compare", "aisimulate"]) == EXIT_FAILED
    assert "install a Rust toolchain >= 1.88" in capsys.readouterr().err


def test_an_installation_without_the_sources_says_so(no_built_binary, monkeypatch, tmp_path):
    monkeypatch.setattr(binary, "SOURCE_ROOT", tmp_path)
    with pytest.raises(MissingExtraError, match=r"which this installation does not include"):
        binary.aisimulate_binary()


def test_a_given_binary_must_be_executable(monkeypatch, tmp_path):
    monkeypatch.setenv(binary.BINARY_ENV, str(tmp_path / "nope"))
    with pytest.raises(MissingExtraError, match=r"\$DYNOSIM_AISIM_BIN: .*nope is not an exec"):
        binary.aisimulate_binary()


def fake_binary(monkeypatch, tmp_path: Path, body: str) -> None:
    """$DYNOSIM_AISIM_BIN set to a shell script with ``body``."""
    script = tmp_path / "fake-aisim"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setenv(binary.BINARY_ENV, str(script))


def test_a_run_past_its_timeout_is_stopped(monkeypatch, tmp_path, small_trace):
    fake_binary(monkeypatch, tmp_path, "sleep 30")
    replay = AisimulateReplay(small_trace, peer_config(), 512, timeout_s=0.3)
    start = time.perf_counter()
    with pytest.raises(DynosimError, match=r"did not finish within 0.3 s and was stopped"):
        replay.run()
    assert time.perf_counter() - start < 10


def test_a_failed_run_raises_its_message(monkeypatch, tmp_path, small_trace):
    fake_binary(monkeypatch, tmp_path, 'echo "replay invariant violated" >&2; exit 1')
    with pytest.raises(DynosimError, match="exited with status 1: replay invariant violated"):
        AisimulateReplay(small_trace, peer_config(), 512).run()
    fake_binary(monkeypatch, tmp_path, "echo not json")
    with pytest.raises(DynosimError, match="dynosim-aisim printed no summary"):
        AisimulateReplay(small_trace, peer_config(), 512).run()


def test_a_timeout_kills_the_programs_children_too(tmp_path):
    pid_file = tmp_path / "pid"
    argv = ["/bin/sh", "-c", f"sleep 30 & echo $! > {pid_file}; wait"]
    with pytest.raises(subprocess.TimeoutExpired):
        binary.run_program(argv, 0.5)
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        # A killed orphan can linger as a zombie until its new parent reaps it.
        if Path(f"/proc/{child}/stat").read_text().split(") ")[1].startswith("Z"):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the timed-out program's child {child} still runs")


def test_run_program_measures_the_child():
    done = binary.run_program([sys.executable, "-c", "print(sum(range(3_000_000)))"], 60)
    assert done.returncode == 0
    assert done.stdout.strip() == str(sum(range(3_000_000)))
    assert done.wall_ms > 0 and done.cpu_ms > 0


# --- against AISimulate itself (builds rust/dynosim-aisim with cargo) ------------------------

HAVE_BINARY = bool(os.environ.get(binary.BINARY_ENV)) or shutil.which("cargo") is not None
needs_aisimulate = pytest.mark.skipif(
    not HAVE_BINARY,
    reason="cargo is not on PATH: comparing with AISimulate builds rust/dynosim-aisim with it",
)


@pytest.fixture(scope="module")
def aisim_bin() -> Path:
    """The built binary (a clean build takes about 10 minutes on 2 cores; CI builds it first)."""
    return binary.aisimulate_binary()


@needs_aisimulate
def test_binary_reports_the_pinned_version(aisim_bin):
    tomllib = pytest.importorskip("tomllib")
    manifest = tomllib.loads((binary.SOURCE_ROOT / "rust/dynosim-aisim/Cargo.toml").read_text())
    assert manifest["dependencies"]["aisimulate-core"] == f"={AISIMULATE_VERSION}"
    assert manifest["package"]["rust-version"] == "1.88"
    help_run = subprocess.run([aisim_bin, "--help"], capture_output=True, text=True)
    assert help_run.returncode == 0 and "usage: dynosim-aisim TRACE" in help_run.stdout


@needs_aisimulate
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--backend", "tgi"], "--backend: unknown variant `tgi`"),
        (["--workers", "two"], '--workers: invalid value "two"'),
        (["--decode.block-size", "16"], "--decode.block-size: only with --mode disaggregated"),
        (["--prefill.workers", "2", "--mode", "disaggregated"], "workers is no engine flag"),
    ],
)
def test_binary_bad_flags_exit_2_naming_the_flag(aisim_bin, small_trace, argv, message):
    done = subprocess.run([aisim_bin, small_trace, *argv], capture_output=True, text=True)
    assert done.returncode == 2
    assert message in done.stderr


@needs_aisimulate
def test_binary_failure_names_the_trace(aisim_bin, tmp_path):
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 2}\n')
    done = subprocess.run([aisim_bin, trace], capture_output=True, text=True)
    assert done.returncode == 1
    assert f"{trace}: AISimulate's replay failed" in done.stderr
    assert "missing hash_ids" in done.stderr


@needs_aisimulate
def test_binary_summary_is_deterministic(aisim_bin, small_trace, tmp_path):
    config = peer_config({"cluster": {"num_workers": 2}})
    command = [aisim_bin, small_trace, *aisimulate_args(config, 512)]
    first, second = (
        json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
        for _ in range(2)
    )
    # Only what measures this machine's speed differs: wall time and processed tokens per s.
    differing = {k for k in first["summary"] if first["summary"][k] != second["summary"][k]}
    assert differing <= {
        "wall_time_ms",
        "processed_tokens_per_s",
        "processed_output_tokens_per_s",
    }
    assert first["summary"]["mean_ttft_ms"] > 0
    assert first["requests"] == {
        "arrived": 300,
        "completed": 300,
        "rejected": 0,
        "canceled": 0,
        "failed": 0,
    }
    assert first["version"] == AISIMULATE_VERSION
    assert first["engine"]["rank"]["timing_model"] == {"type": "polynomial"}
    assert first["peak_rss_mib"] > 1


@needs_aisimulate
def test_compare_prints_the_side_by_side_table(aisim_bin, small_trace, tmp_path, capsys):
    timings = tmp_path / "t.jsonl"
    argv = [str(small_trace), "--compare", "aisimulate", "--timings-jsonl", str(timings)]
    assert bench_main([*argv, "--iterations", "2"]) == 0
    out = capsys.readouterr().out
    assert f"dynosim vs AISimulate (aisimulate-core {AISIMULATE_VERSION}) replay" in out
    assert "AISimulate 2" in out
    for label in ("wall: trace load + replay (ms)", "TTFT mean (ms)", "prefix reuse ratio"):
        assert label in out
    rows = [json.loads(line) for line in timings.read_text().splitlines()]
    assert [r["simulator"] for r in rows] == ["dynosim", "dynosim", "aisimulate", "aisimulate"]
    for r in rows[2:]:
        assert r["wall_ms"] > r["replay_ms"] > 0 and r["trace_load_ms"] > 0


@needs_aisimulate
def test_a_zero_delay_turn_joins_the_pass_starting_as_its_previous_turn_ends(aisim_bin, tmp_path):
    """Session a keeps the worker busy decoding; session b's second turn is sent when its first
    ends, plus the delay. With a delay of 0 the turn arrives at the instant a pass starts:
    AISimulate admits it into that pass, dynosim into the next (one decode pass later, 5.8 ms
    here). With any positive delay the two agree exactly."""
    rows = [
        {"timestamp": 0, "input_length": 512, "output_length": 400, "hash_ids": [1]},
        {"timestamp": 0, "input_length": 512, "output_length": 10, "hash_ids": [2]},
        {"timestamp": 0, "input_length": 512, "output_length": 10, "hash_ids": [3]},
    ]
    for row, session in zip(rows, ("a", "b", "b"), strict=True):
        row["session_id"] = session
    ttft = {}
    for delay in (0.0, 0.5):
        rows[2]["delay_ms"] = delay
        trace = tmp_path / f"delay{delay}.jsonl"
        trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
        config = peer_config({"cluster": {"num_workers": 1}})
        ours = dynosim.replay(dynosim.load_trace(trace), config).requests["ttft_ms"][2]
        per_request = tmp_path / "per_request.jsonl"
        command = [aisim_bin, trace, *aisimulate_args(config, 512), "--per-request", per_request]
        subprocess.run(command, capture_output=True, check=True)
        records = [json.loads(line) for line in per_request.read_text().splitlines()]
        (theirs,) = [r["ttft_ms"] for r in records if r["session_id"] == "b" and r["turn_index"]]
        ttft[delay] = (ours, theirs)
    assert ttft[0.5][0] == pytest.approx(ttft[0.5][1], abs=1e-6)
    ours, theirs = ttft[0.0]
    assert ours - theirs == pytest.approx(5.77, abs=0.05)  # one decode pass of one request


#: The conversation trace through both simulators (block 64, trace block 512, polynomial
#: timing, round robin, arrival speedup 1). Disaggregation: 2 prefill + 2 decode workers,
#: 262,144 KV bytes per token (64 layers x 8 KV heads x 128 x bf16: the conversation trace
#: then offers about 10.7 GB/s of KV), line-rate links, first token after the first decode pass.
def disaggregated(gbps: float, link_model: str = "line_rate") -> dict:
    return {
        "cluster": {"mode": "disaggregated", "num_prefill_workers": 2, "num_decode_workers": 2},
        "engine": {"block_size": 64},
        "kv_transfer": {
            "bandwidth_gbps": gbps,
            "kv_bytes_per_token": 262_144,
            "link_model": link_model,
            "first_token": "first_decode_pass",
        },
    }


RUNS = {
    "aggregated vLLM": {"cluster": {"num_workers": 4}, "engine": {"block_size": 64}},
    # AISimulate's TensorRT-LLM engine chunks contexts (TensorRT-LLM's default is not to).
    "aggregated TRT-LLM": {
        "cluster": {"num_workers": 4},
        "engine": {"backend": "trtllm", "enable_chunked_context": True},
    },
    "disaggregated 25 GB/s": disaggregated(25.0),
    "disaggregated 5 GB/s": disaggregated(5.0),
}


@pytest.fixture(scope="module")
def conversation() -> Any:
    if not CONVERSATION.exists():
        pytest.skip(f"{CONVERSATION} is not available")
    return dynosim.load_trace(CONVERSATION)


@pytest.fixture(scope="module")
def head_to_head(aisim_bin, conversation):
    """Each run through both simulators, once: (dynosim report, AISimulate's summary)."""
    cache: dict[str, tuple[Any, dict]] = {}

    def get(run: str) -> tuple[Any, dict]:
        if run not in cache:
            config = peer_config(RUNS[run])
            report = dynosim.replay(conversation, config)
            cache[run] = (report, AisimulateReplay(CONVERSATION, config, 512).run().summary)
        return cache[run]

    return get


@needs_aisimulate
@pytest.mark.parametrize("run", RUNS)
def test_mean_latency_within_half_a_percent_of_aisimulate(head_to_head, run):
    report, theirs = head_to_head(run)
    assert report.completed_requests == theirs["completed_requests"] == 12_031
    rows = {row[0]: row for row in metric_rows(report, theirs)}
    for label in ("TTFT mean (ms)", "TPOT mean (ms)", "E2E mean (ms)"):
        _, ours, their_value, rel = rows[label]
        assert abs(rel) <= 0.005, f"{run} {label}: dynosim {ours:.3f}, AISimulate {their_value:.3f}"


@needs_aisimulate
def test_at_5_gbps_shared_links_queue_where_aisimulate_does_not(head_to_head, conversation):
    """The offered KV traffic (about 10.7 GB/s) exceeds the two prefill send links' 10 GB/s:
    links shared max-min fairly queue transfers for the whole trace, while AISimulate's
    fixed-delay transfers (dynosim's line rate) never wait for a link."""
    _, theirs = head_to_head("disaggregated 5 GB/s")
    shared = dynosim.replay(conversation, peer_config(disaggregated(5.0, "max_min")))
    ttft = shared.requests["ttft_ms"]
    assert shared.summary["ttft_ms"]["mean"] > 50 * theirs["mean_ttft_ms"]
    # The queue grows through the trace: the last thousand requests wait far longer.
    assert ttft[-1000:].mean() > 5 * ttft[:1000].mean()
