"""Hostile inputs (issue 18): sizes past their limits, infinite sizes, more hash ids than blocks,
conflicting flags, errors that name their field, bounded reads, and the small leaks of raw
Python errors. Each test is one example of a class the code handles by one mechanism."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import make_columns

import dynosim
from dynosim import SimConfig, load_trace
from dynosim._files import read_input
from dynosim.bench import offline_replay_bench as bench
from dynosim.cli import EXIT_BAD_INPUT, main
from dynosim.cli.summary import render_summary
from dynosim.config import LIMITS, KvShape, load_config, load_timing_table
from dynosim.deploy import Candidate, validate_manifest
from dynosim.deploy import render as render_module
from dynosim.errors import ConfigError, ManifestError, ReportError, WorkloadError
from dynosim.links import max_min_rates
from dynosim.report import load_report


def cli_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of a command that must exit 2 (bad input)."""
    assert main(argv) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert err.startswith("dynosim: error: ") and "Traceback" not in err, err
    return err.removeprefix("dynosim: error: ")


# --- sizes without upper bounds (item 2) -----------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"engine": {"num_gpu_blocks": 4_000_000_000}},
            "engine.num_gpu_blocks: must be between 1 and 1,000,000,000, got 4000000000",
        ),
        (
            {"cluster": {"num_workers": 100_000_000}},
            "cluster.num_workers: must be between 1 and 16,384, got 100000000",
        ),
        # From Python: 2**31 fits the core's u32, so only the limit stops it allocating.
        (
            {"cluster": {"num_workers": 2**31}},
            "cluster.num_workers: must be between 1 and 16,384, got 2147483648",
        ),
        # 65,536 workers x TP 65,536 = 2^32 GPUs, which wrapped to 0 in a release build.
        (
            {"cluster": {"num_workers": 65_536}, "engine": {"tensor_parallel_size": 65_536}},
            "cluster.num_workers: must be between 1 and 16,384, got 65536",
        ),
        (
            {"engine": {"tensor_parallel_size": 65_536}},
            "engine.tensor_parallel_size: must be between 1 and 1,024, got 65536",
        ),
        # 16,384 x 1,024 x 1 = 16,777,216 GPUs: each factor within its limit, the product not.
        (
            {"cluster": {"num_workers": 16_384}, "engine": {"tensor_parallel_size": 1024}},
            "cluster.num_workers: cluster.num_workers 16,384 x engine.tensor_parallel_size "
            "1,024 x engine.data_parallel_size 1 = 16,777,216 GPUs, more than the limit of "
            "10,000,000",
        ),
        # 2,000,000 blocks x 4,096 tokens = 8,192,000,000 tokens: past 32-bit positions.
        (
            {"engine": {"num_gpu_blocks": 2_000_000, "block_size": 4096}},
            "engine.num_gpu_blocks: engine.num_gpu_blocks 2,000,000 x engine.block_size 4,096 "
            "= 8,192,000,000 tokens per rank, more than the limit of 4,294,967,295",
        ),
        (
            {"offload": {"g2_blocks": 2**32 - 1}, "kv_transfer": {"kv_bytes_per_token": 2}},
            "offload.g2_blocks: must be between 1 and 1,000,000,000, got 4294967295",
        ),
        (
            {"cluster": {"concurrency": 2**31}},
            "cluster.concurrency: must be between 1 and 100,000,000, got 2147483648",
        ),
    ],
)
def test_sizes_past_their_limits_name_the_field_and_the_limit(settings, message):
    with pytest.raises(ConfigError) as info:
        SimConfig.model_validate(settings)
    assert str(info.value) == message


def test_limits_are_the_cores(capsys):
    assert LIMITS["max_workers"] == 16_384 and LIMITS["max_parallel"] == 1024
    # At the limits a configuration is valid, and the GPU count is exact: 16,384 x 8 x 2.
    settings = {"cluster": {"num_workers": 8192}, "engine": {"tensor_parallel_size": 8}}
    settings["engine"]["data_parallel_size"] = 2
    assert dynosim.config.resolve(SimConfig.model_validate(settings)).num_gpus == 131_072
    err = cli_error(["replay", "--no-progress", "--num-gpu-blocks", "4000000000"], capsys)
    assert err == (
        "--num-gpu-blocks 4000000000 (engine.num_gpu_blocks): must be between 1 and "
        "1,000,000,000, got 4000000000"
    )


@pytest.mark.parametrize(
    ("shape", "tp", "message"),
    [
        # 4,294,967,295^3 x 2 x 2 bytes wrapped around 2^64 in a release build.
        (
            {"num_layers": 2**32 - 1, "num_kv_heads": 2**32 - 1, "head_dim": 2**32 - 1},
            1,
            "kv_shape.num_layers: must be between 1 and 10,000, got 4294967295",
        ),
        ({}, -1, "tp: must be between 1 and 1,024, got -1"),
        ({}, 2**70, f"tp: must be between 1 and 1,024, got {2**70}"),
        ({}, 1.5, "tp: expected an integer, got 1.5"),
    ],
)
def test_kv_shape_bytes_are_taken_of_a_checked_shape(shape, tp, message):
    fields = {"num_layers": 2, "num_kv_heads": 2, "head_dim": 2, "dtype_bytes": 2, **shape}
    with pytest.raises(ConfigError) as info:
        KvShape(**fields).bytes_per_token(tp)
    assert str(info.value) == message


def test_a_plan_past_its_gpu_limit_is_refused_before_any_work():
    # 1,000,000 GPUs of 1-GPU workers: half a trillion (prefill, decode) points to list.
    started = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        dynosim.plan(
            "no-such-trace.jsonl",
            model="Qwen/Qwen3-32B",
            system="h200_sxm",
            sla={"ttft_ms": 1000},
            max_gpus=1_000_000,
            progress=False,
        )
    assert str(info.value) == (
        "max_gpus: at most 1,024 (the search walks the pairs of prefill and decode worker "
        "counts within it), got 1,000,000"
    )
    assert time.perf_counter() - started < 30


def test_a_space_past_its_size_is_refused_before_listing_it():
    from dynosim.plan import Space

    # 10 paths of 20 values: 20^10 = 10,240,000,000,000 candidates.
    grid = {f"sla.{k}": [float(v) for v in range(1, 21)] for k in ("ttft_ms", "itl_ms")}
    grid |= {f"cluster.{k}": list(range(1, 21)) for k in ("num_workers", "router_seed")}
    grid |= {
        f"engine.{k}": list(range(1, 21))
        for k in ("block_size", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens")
    }
    grid |= {"cluster.overlap_weight": list(range(20)), "report.sample_interval_ms": [1.0] * 20}
    started = time.perf_counter()
    with pytest.raises(ConfigError, match=r"= 10,240,000,000,000 candidates, more than the"):
        Space(grid)
    small = Space({"cluster.num_workers": list(range(1, 1001))})
    with pytest.raises(ConfigError, match=r"^space: 1,000 x 1,001 candidates = 1,001,000"):
        small * Space({"engine.max_num_seqs": list(range(1, 1002))})
    assert time.perf_counter() - started < 30


# --- infinite sizes (item 4) -----------------------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        ["--prefill-workers", "1", "--decode-workers", "1"],
        ["--prefill-workers", "1", "--decode-workers", "1", "--kv-bandwidth-gbps", "1"],
        ["--g2-blocks", "16"],
    ],
    ids=["disaggregated", "with a bandwidth", "offload tiers"],
)
def test_an_infinite_kv_size_is_refused_naming_the_setting(flags, capsys):
    argv = ["replay", "--no-progress", "--kv-bytes-per-token", "1e308", *flags]
    err = cli_error(argv, capsys)
    assert err == (
        "--kv-bytes-per-token 1e+308 (kv_transfer.kv_bytes_per_token): must be at most 1e9, "
        "got 1e308"
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"kv_transfer": {"bandwidth_gbps": 1e300, "kv_bytes_per_token": 2}},
            "kv_transfer.bandwidth_gbps: must be at most 1e6, got 1e300",
        ),
        (
            {"offload": {"g2_blocks": 4, "g2_g3_gbps": 1e308}},
            "offload.g2_g3_gbps: must be at most 1e6, got 1e308",
        ),
        # Two passes of 1e308 ms sum to infinity.
        (
            {"timing": {"model": "fixed", "prefill_ms": 1e308, "decode_ms": 1e308}},
            "timing.prefill_ms: must be at most 1e9, got 1e308",
        ),
        (
            {
                "cluster": {"mode": "disaggregated"},
                "prefill": {"timing": {"model": "polynomial", "decode_speedup_ratio": 1e-300}},
            },
            "prefill.timing.decode_speedup_ratio: must be at least 1e-6, got 1e-300",
        ),
        (
            {"cluster": {"router": "kv_aware", "overlap_weight": 1e308}},
            "cluster.overlap_weight: must be a finite number from 0 to 1e6, got 1e308",
        ),
        (
            {
                "kv_transfer": {
                    "kv_shape": {
                        "num_layers": 10_000,
                        "num_kv_heads": 65_536,
                        "head_dim": 65_536,
                        "dtype_bytes": 16,
                    }
                }
            },
            # 10,000 x 2 x 65,536 x 65,536 x 16 bytes.
            "kv_transfer.kv_shape: gives 1.37438953472e15 KV bytes per token, more than the "
            "limit of 1e9",
        ),
    ],
)
def test_sizes_that_derive_infinite_bytes_or_rates_are_bounded(settings, message):
    with pytest.raises(ConfigError) as info:
        SimConfig.model_validate(settings)
    assert str(info.value) == message


def test_the_largest_kv_size_gives_finite_transfer_bytes(columns):
    # 1e9 bytes per token x 4,000 tokens: 4e12 bytes, finite in the summary and its JSON.
    config = {
        "cluster": {"mode": "disaggregated"},
        "kv_transfer": {"kv_bytes_per_token": 1e9, "bandwidth_gbps": 1e6},
    }
    report = dynosim.replay(columns([(0.0, 4000, 2, list(range(8)))]), config)
    assert report.summary["transfer_bytes"] == 4e12
    assert "transfer_bytes" in json.loads(report.to_json())["summary"]


# --- more hash ids than the trace block size allows (item 8) ---------------------------------


def test_a_trace_hashed_at_a_smaller_block_size_is_refused(tmp_path):
    # Hashed at 64 tokens per id: 1,000 tokens have ceil(1000 / 64) = 16 ids; at the default
    # 512 tokens per id the row would need 2.
    path = tmp_path / "hashed64.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 64, "output_length": 1, "hash_ids": [1]},
        {"timestamp": 1, "input_length": 1000, "output_length": 1, "hash_ids": list(range(16))},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(WorkloadError) as info:
        load_trace(path)
    assert str(info.value) == (
        f"{path}:2: field 'hash_ids': too many hash ids: got 16, but input_length 1000 needs 2 "
        "at 512 tokens per id; the ids imply a trace block size of 64 (--trace-block-size 64)"
    )
    # Row 1's 64 tokens are one id at either size.
    assert len(load_trace(path, trace_block_size=64).columns()) == 2


def test_columns_with_too_many_hash_ids_are_refused():
    with pytest.raises(WorkloadError, match=r"^workload request 1: too many hash ids: got 3"):
        make_columns([(0.0, 600, 1, [1, 2]), (1.0, 10, 1, [3, 4, 5])])


# --- conflicting or ignored flags, and bools as numbers (item 9) -----------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--workers", "4", "--prefill-workers", "2"],
            "--workers counts aggregated workers, but --prefill-workers selects disaggregated "
            "serving: give --prefill-workers and --decode-workers instead",
        ),
        (
            ["--workers", "4", "--decode-workers", "2"],
            "--workers counts aggregated workers, but --decode-workers selects disaggregated",
        ),
        (
            ["--kv-bandwidth-gbps", "5", "--kv-bytes-per-token", "2"],
            "--kv-bandwidth-gbps: KV transfers happen in disaggregated serving only",
        ),
        (
            ["--transfer-sizing", "full_prompt"],
            "--transfer-sizing: KV transfers happen in disaggregated serving only",
        ),
        (
            ["--link-model", "line_rate", "--decode-kv-bandwidth-gbps", "3"],
            "--decode-kv-bandwidth-gbps, --link-model: KV transfers happen in disaggregated",
        ),
    ],
)
def test_flags_the_serving_mode_would_ignore_are_refused(flags, message, capsys):
    assert cli_error(["replay", "--no-progress", *flags], capsys).startswith(message)


def test_trace_flags_with_synthetic_traffic_are_used_or_refused(capsys):
    synthetic = ["replay", "--no-progress", "--synthetic", "--isl", "8", "--osl", "2"]
    synthetic += ["--count", "3", "--rate", "1"]
    err = cli_error([*synthetic, "--trace-block-size", "0"], capsys)
    assert err == "workload.trace_block_size: Input should be greater than 0, got 0"
    err = cli_error([*synthetic, "--format", "azure"], capsys)
    assert err == "--format reads a TRACE; --synthetic generates its requests"
    # The generator's seed with a trace was ignored.
    err = cli_error(["replay", "--no-progress", "--seed", "5"], capsys)
    assert err == "--seed needs --synthetic"


def test_workers_with_a_disaggregated_config_file_is_refused(tmp_path, capsys):
    config = tmp_path / "disagg.yaml"
    config.write_text("cluster:\n  mode: disaggregated\n")
    err = cli_error(["replay", "--config", str(config), "--workers", "3"], capsys)
    assert err.startswith(f"--workers counts aggregated workers, but --config {config}")


@pytest.mark.parametrize(
    ("settings", "path"),
    [
        ({"cluster": {"num_workers": True}}, "cluster.num_workers"),
        ({"engine": {"block_size": False}}, "engine.block_size"),
        ({"cluster": {"arrival_speedup_ratio": True}}, "cluster.arrival_speedup_ratio"),
        ({"decode": {"engine": {"max_num_seqs": True}}}, "decode.engine.max_num_seqs"),
        ({"timing": {"model": "fixed", "prefill_ms": True, "decode_ms": 1}}, "timing.prefill_ms"),
        ({"sla": {"ttft_ms": True}}, "sla.ttft_ms"),
    ],
)
def test_a_bool_is_not_a_number_anywhere_in_the_config(settings, path):
    with pytest.raises(ConfigError) as info:
        SimConfig.model_validate(settings)
    assert str(info.value) == f"{path}: expected a number, got {json.dumps(_leaf(settings))}"


def _leaf(settings):
    while isinstance(settings, dict):
        settings = next(v for v in settings.values() if not isinstance(v, str))
    return settings


def test_a_bool_in_a_config_file_names_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("cluster:\n  num_workers: yes\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: cluster\.num_workers: expected a number"):
        load_config(path)
    # Where a bool belongs, it is still one.
    assert not SimConfig.model_validate(
        {"engine": {"enable_chunked_prefill": False}}
    ).engine.enable_chunked_prefill


def test_bench_compare_in_disaggregated_mode_without_a_bandwidth_runs_instant_transfers():
    parser = bench._parser()
    args = parser.parse_args(
        [
            "trace.jsonl",
            "--serving-mode",
            "disagg",
            "--num-prefill-workers",
            "2",
            "--num-decode-workers",
            "2",
            "--compare",
            "dynamo",
        ]
    )
    config = bench.build_config(args, parser)
    # No bandwidth, so no link model: instant on both sides; first tokens as the peer counts.
    assert config.kv_transfer.link_model is None and config.kv_transfer.bandwidth_gbps is None
    assert config.kv_transfer.first_token == "first_decode_pass"
    # With a bandwidth, the peer's line rate.
    args = parser.parse_args(
        [
            *["t.jsonl", "--serving-mode", "disagg", "--compare", "dynamo"],
            *["--kv-transfer-bandwidth", "8", "--kv-bytes-per-token", "2"],
        ]
    )
    assert bench.build_config(args, parser).kv_transfer.link_model == "line_rate"


# --- every config error names its dotted path (item 10) --------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--workers", "-1"],
            "--workers -1 (cluster.num_workers): invalid value: integer `-1`, expected an "
            "integer from 0 to 4294967295",
        ),
        (
            ["--max-num-seqs", "-1"],
            "--max-num-seqs -1 (engine.max_num_seqs): invalid value: integer `-1`, expected an "
            "integer from 0 to 4294967295",
        ),
        (
            ["--g2-blocks", "-5", "--kv-bytes-per-token", "2"],
            "--g2-blocks -5 (offload.g2_blocks): invalid value: integer `-5`, expected an "
            "integer from 0 to 4294967295",
        ),
        (
            ["--num-gpu-blocks", str(2**40)],
            "--num-gpu-blocks 1099511627776 (engine.num_gpu_blocks): invalid value: integer "
            "`1099511627776`, expected an integer from 0 to 4294967295",
        ),
    ],
)
def test_out_of_range_flags_name_the_flag_and_the_dotted_field(flags, message, capsys):
    assert cli_error(["replay", "--no-progress", *flags], capsys) == message


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"cluster": {"router_seed": -1}},
            "cluster.router_seed: invalid value: integer `-1`, expected an integer from 0 to "
            "18446744073709551615",
        ),
        (
            {"engine": {"num_gpu_blocks": 2**40}},
            "engine.num_gpu_blocks: invalid value: integer `1099511627776`, expected an integer "
            "from 0 to 4294967295",
        ),
        ({"timing": {"speedup_ratio": 0}}, "timing.model: required, but not given"),
        (
            {"timing": {"model": "polynomial", "speedup_ratio": 0}},
            "timing.speedup_ratio: must be a finite number > 0, got 0",
        ),
        ({"prefill": {"timing": {"speedup_ratio": 0}}}, "prefill.timing.model: required"),
    ],
)
def test_config_errors_name_their_dotted_path(settings, message):
    with pytest.raises(ConfigError) as info:
        SimConfig.model_validate(settings)
    assert str(info.value).startswith(message)


def test_core_document_errors_name_their_dotted_path():
    with pytest.raises(ConfigError) as info:
        dynosim._core.normalize_config_json('{"decode": {"engine": {"block_size": "x"}}}')
    assert str(info.value).startswith('decode.engine.block_size: invalid type: string "x"')
    with pytest.raises(ConfigError, match=r"^invalid configuration: "):
        dynosim._core.normalize_config_json("[1]")


# --- render and validate bound what they accept (item 11) ------------------------------------

CANDIDATE = {
    "mode": "aggregated",
    "model": "Qwen/Qwen3-32B",
    "system": "h200_sxm",
    "backend": "vllm",
    "backend_version": "0.12.0",
    "block_size": 64,
    "aggregated": {"replicas": 2, "max_batch_size": 64},
}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"aggregated": {"replicas": 100_000_000, "max_batch_size": 64}},
            "candidate.aggregated.replicas: Input should be less than or equal to 16384",
        ),
        ({"block_size": 7}, "candidate.block_size: expected a power of two"),
        ({"block_size": 2**17}, "candidate.block_size: expected 1 to 65,536 tokens"),
        (
            {"context_length": 8_600_000_000},
            "candidate.context_length: expected 1 to 4,294,967,295 tokens, got 8600000000",
        ),
        (
            {"aggregated": {"replicas": 1, "tensor_parallel_size": 4096, "max_batch_size": 1}},
            "candidate.aggregated.tensor_parallel_size: Input should be less than or equal to",
        ),
    ],
)
def test_candidates_past_what_deploys_are_refused(changes, message):
    with pytest.raises(ConfigError) as info:
        Candidate.model_validate({**CANDIDATE, **changes})
    assert str(info.value).startswith(message)


def test_render_refuses_a_huge_deployment_before_calling_aic(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("AIC was called")

    monkeypatch.setattr(render_module, "dynamo_release", never)
    monkeypatch.setattr(render_module, "generate", never)
    # 10,000 replicas x 2 GPUs: within the replay's limits, past the rendered deployment's.
    role = {"replicas": 10_000, "tensor_parallel_size": 2, "max_batch_size": 8}
    cand = {**CANDIDATE, "aggregated": role}
    workload = dynosim.SyntheticWorkload(isl=10, osl=10, count=5, rate=1.0)
    started = time.perf_counter()
    with pytest.raises(ConfigError, match=r"^candidate: 20,000 GPUs over its roles"):
        render_module.render_dgd(cand, workload)
    with pytest.raises(ConfigError, match=r"replicas: Input should be less than or equal"):
        render_module.render_dgd(
            {**CANDIDATE, "aggregated": {"replicas": 100_000_000, "max_batch_size": 8}}, workload
        )
    assert time.perf_counter() - started < 60  # refused at once, not after AIC ran


MANIFEST = """\
apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata:
  name: dynosim-agg
spec:
  services:
    Frontend:
      componentType: frontend
      replicas: 1
    VllmWorker:
      componentType: worker
      replicas: {replicas}
      resources:
        limits:
          gpu: "1"
      extraPodSpec:
        mainContainer:
          command: [python3, -m, dynamo.vllm]
          args: [--model, Qwen/Qwen3-32B, --block-size, "{block}", --max-model-len, "{ctx}"]
"""


def test_validate_refuses_engine_settings_no_deployment_has():
    text = MANIFEST.format(replicas=100_000_000, block=7, ctx=8_600_000_000)
    problems = [str(p) for p in validate_manifest(text)]
    assert any("replicas: expected 1 to 16,384, got 100000000" in p for p in problems), problems
    assert any("--block-size: expected a power of two" in p for p in problems), problems
    assert any("--max-model-len: expected 1 to 4,294,967,295 tokens" in p for p in problems)
    fine = [str(p) for p in validate_manifest(MANIFEST.format(replicas=2, block=16, ctx=4096))]
    assert not [p for p in fine if "block-size" in p or "max-model-len" in p], fine


# --- smaller leaks (item 12) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("flows", "message"),
    [
        ([[-1]], "flow 0: link id -1 is out of range (there are 2 links)"),
        ([[0], [2**70]], f"flow 1: link id {2**70} is out of range (there are 2 links)"),
        ([[0.7]], "flow 0: link id 0.7 is not an integer"),
        ([[True]], "flow 0: link id true is not an integer"),
        ([[5]], "flow 0: link id 5 is out of range (there are 2 links)"),
        (3, "flows: expected a sequence, got 3"),
    ],
)
def test_max_min_rates_refuses_bad_link_ids_with_a_config_error(flows, message):
    with pytest.raises(ConfigError) as info:
        max_min_rates(flows, [1.0, 2.0])
    assert str(info.value) == message
    with pytest.raises(ConfigError, match=r"^link 1: capacity: expected a number"):
        max_min_rates([[0]], [1.0, "fast"])
    # numpy integer ids are ids.
    assert max_min_rates([np.array([0, 1])], [1.0, 2.0]).tolist() == [1.0]


def test_replay_of_something_that_is_no_workload_is_a_workload_error():
    with pytest.raises(WorkloadError, match=r"^workload: expected a TraceWorkload.*got int"):
        dynosim.replay(123)  # type: ignore[arg-type]
    with pytest.raises(WorkloadError, match=r"^path: expected a trace file path, got int"):
        load_trace(123)  # type: ignore[arg-type]


def unsorted_trace(tmp_path: Path) -> Path:
    path = tmp_path / "unsorted.jsonl"
    rows = [
        {"timestamp": t, "input_length": 10, "output_length": 2, "hash_ids": [i]}
        for i, t in enumerate([5, 0])
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_out_of_order_warning_points_at_the_callers_line(tmp_path):
    path = unsorted_trace(tmp_path)
    for load in (lambda: load_trace(path).columns(), lambda: dynosim.replay(path)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            load()
        (warning,) = [w for w in caught if "arrive earlier" in str(w.message)]
        assert warning.filename == __file__, warning.filename


def test_the_cli_prints_a_warning_as_one_line(tmp_path, capsys):
    path = unsorted_trace(tmp_path)
    saved = warnings.showwarning
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            assert main(["replay", "--no-progress", str(path)]) == 0
    finally:
        warnings.showwarning = saved
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if "arrive earlier" in line]
    assert line.startswith(f"dynosim: warning: {path}: 1 of 2 rows arrive earlier")
    assert ".py" not in err  # no source file, no source line


def test_timing_table_value_errors_name_the_npz_file(tmp_path):
    path = tmp_path / "bad.npz"
    np.savez(
        path,
        prefill_tokens=np.array([1.0, 1.0]),
        prefill_batch=np.array([1.0]),
        prefill_ms=np.array([[1.0], [1.0]]),
        decode_batch=np.array([1.0]),
        decode_context=np.array([1.0]),
        decode_ms=np.array([[1.0]]),
    )
    with pytest.raises(ConfigError) as info:
        load_timing_table(path)
    assert str(info.value) == (
        f"{path}: timing.prefill_tokens[1]: axis must be strictly increasing, got 1 after 1"
    )


def test_the_latency_table_fits_80_columns_without_cutting_numbers(columns):
    from rich.console import Console

    # Passes of 5e8 ms: latencies up to about 1e9 ms.
    config = {"timing": {"model": "fixed", "prefill_ms": 5e8, "decode_ms": 1e5}}
    report = dynosim.replay(columns([(0.0, 100, 3, [1]), (0.0, 100, 3, [2])]), config)
    with open(os.devnull, "w") as sink:
        console = Console(width=80, record=True, file=sink)
        console.print(render_summary(report, "t"))
    text = console.export_text()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    # The largest latency, E2E max, in 4 significant digits.
    assert f"{report.summary['e2e_ms']['max']:.3e}" in text


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
@pytest.mark.parametrize(
    ("read", "error"),
    [
        (lambda p: load_trace(p, format="mooncake").columns(), WorkloadError),
        (lambda p: load_trace(p, format="azure").columns(), WorkloadError),
        (load_config, ConfigError),
        (validate_manifest, ManifestError),
        (load_report, ReportError),
        (load_timing_table, ConfigError),
    ],
    ids=["mooncake", "azure", "config", "manifest", "report", "timing table"],
)
def test_a_device_is_refused_at_once_not_read_forever(read, error):
    started = time.perf_counter()
    with pytest.raises(error, match=r"^/dev/zero: cannot read the [a-z ]+: not a regular file"):
        read(Path("/dev/zero"))
    assert time.perf_counter() - started < 30


def test_a_pipe_is_read_but_a_line_without_end_is_refused(tmp_path):
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)

    def write(data: bytes) -> None:
        with open(fifo, "wb") as fh:
            try:
                fh.write(data)
            except BrokenPipeError:
                pass

    writer = threading.Thread(target=write, args=(b"ok\n" + b"\0" * (3 << 20),), daemon=True)
    writer.start()
    with pytest.raises(WorkloadError) as info:
        read_input(fifo, WorkloadError, "trace", max_line=1 << 20)
    writer.join(10)
    assert str(info.value) == (
        f"{fifo}:2: line longer than 1 MiB: not a trace (a binary file or a device?)"
    )
    writer = threading.Thread(target=write, args=(b"a\nb\n",), daemon=True)
    writer.start()
    assert read_input(fifo, WorkloadError, "trace", max_line=1 << 20) == b"a\nb\n"
    writer.join(10)
    with pytest.raises(WorkloadError, match=r"not a regular file \(a directory\)"):
        read_input(tmp_path, WorkloadError, "trace")
    # A line of 1.5 MiB from the middle of the first 1 MiB read into the second, ended there.
    crossing = tmp_path / "crossing.jsonl"
    crossing.write_bytes(b"a" * 100 + b"\n" + b"x" * (3 << 19) + b"\nok\n")
    with pytest.raises(WorkloadError, match=r"crossing\.jsonl:2: line longer than 1 MiB"):
        read_input(crossing, WorkloadError, "trace", max_line=1 << 20)


def test_a_trace_through_a_pipe_is_read_once_and_hashed_from_its_bytes(tmp_path):
    # A pipe (a shell's <(...)) cannot be read twice: the report's hash comes from the bytes.
    text = unsorted_trace(tmp_path).read_bytes()
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "wb") as fh:
            fh.write(text)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = dynosim.replay(fifo)
    writer.join(10)
    assert report.num_requests == 2
    assert report.provenance["trace"]["sha256"] == hashlib.sha256(text).hexdigest()
