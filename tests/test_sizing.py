"""One resolution of sizes for every entry point (dynosim.sizing): a given num_gpu_blocks or KV
bytes per token wins; unset, they come from the model and GPU an aic timing section names, for
every role; without a model, 16,384 uncalibrated blocks. The report's provenance says which."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from conftest import needs_aic

import dynosim
from dynosim.cli import main
from dynosim.config import DEFAULT_NUM_GPU_BLOCKS

AIC = {"model": "aic", "model_name": "Qwen/Qwen3-32B", "system": "h200_sxm"}
AIC_FLAGS = ["--timing", "aic", "--model", "Qwen/Qwen3-32B", "--system", "h200_sxm"]
#: Qwen3-32B's KV of one token: 64 layers x K and V x 8 KV heads x 128 values x 2 bytes (bf16).
QWEN3_32B_KV_BYTES = 64 * 2 * 8 * 128 * 2
#: Long prompts at 20 a second: more than a rank of Qwen3-32B on an H200 holds at once, and far
#: fewer than 16,384 blocks of 64 tokens (about 1M tokens) would.
PRESSED = ["--synthetic", "--isl", "6000", "--osl", "300", "--rate", "20", "--count", "200"]
PRESSED_WORKLOAD = dynosim.SyntheticWorkload(isl=6000, osl=300, count=200, rate=20.0)
SMALL = ["--synthetic", "--isl", "500", "--osl", "20", "--rate", "5", "--count", "20"]


def cli_report(tmp_path, *argv: str) -> dict:
    out = tmp_path / "r.json"
    assert main(["replay", *argv, "--no-progress", "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_without_a_model_the_default_blocks_are_used_and_said_so():
    work = dynosim.SyntheticWorkload(isl=500, osl=20, count=20, rate=5.0)
    report = dynosim.replay(work)
    assert report.config["engine"]["num_gpu_blocks"] == DEFAULT_NUM_GPU_BLOCKS == 16_384
    assert report.provenance["kv_capacity"] == {
        "engine": {
            "source": "default",
            "num_gpu_blocks": 16_384,
            "note": "no model and GPU to size it from (timing is polynomial timing): uncalibrated",
        }
    }
    assert "kv_bytes_per_token" not in report.provenance
    given = dynosim.replay(
        work,
        {
            "cluster": {"mode": "disaggregated"},
            "engine": {"num_gpu_blocks": 777},
            "kv_transfer": {"kv_bytes_per_token": 1000},
        },
    )
    assert given.provenance["kv_capacity"] == {"engine": {"source": "given", "num_gpu_blocks": 777}}
    assert given.provenance["kv_bytes_per_token"] == {"source": "given", "bytes_per_token": 1000}
    assert given.config["engine"]["num_gpu_blocks"] == 777


@needs_aic
def test_a_sweep_and_a_replay_of_one_deployment_have_one_capacity(tmp_path):
    base = {"cluster": {"num_workers": 2}, "engine": {"backend": "vllm"}, "timing": AIC}
    cli = cli_report(tmp_path, *PRESSED, *AIC_FLAGS, "--backend", "vllm", "--workers", "2")
    api = dynosim.replay(PRESSED_WORKLOAD, base)
    space = {"cluster.num_workers": [2]}
    (row,) = dynosim.sweep(PRESSED_WORKLOAD, base, space, progress=False).rows
    # The CLI, the API and the sweep replay one capacity: the same latencies to the last digit
    # (the CLI used to size the cache and the API and sweeps to keep 16,384 blocks).
    assert cli["config"]["engine"]["num_gpu_blocks"] == api.config["engine"]["num_gpu_blocks"]
    assert cli["summary"] == api.summary
    summary = api.summary
    for metric in ("ttft", "tpot", "e2e"):
        for stat in ("mean", "p90", "p99"):
            assert row[f"{metric}_{stat}_ms"] == summary[f"{metric}_ms"][stat]
    assert row["output_tps"] == summary["output_token_throughput_tps"]
    # The blocks are those AIC's memory model leaves a rank, and they bind: requests are
    # preempted, which 16,384 blocks would not do.
    derived = cli["provenance"]["kv_capacity"]["engine"]
    assert derived["source"] == "aic" and derived["model"] == "Qwen/Qwen3-32B"
    blocks = derived["num_gpu_blocks"]
    # vLLM keeps one block of its pool as the null block.
    assert blocks == int(derived["kv_memory_bytes_per_gpu"] // (QWEN3_32B_KV_BYTES * 64)) - 1
    assert blocks == api.config["engine"]["num_gpu_blocks"] < DEFAULT_NUM_GPU_BLOCKS
    assert summary["num_preemptions"] > 0


@needs_aic
def test_a_role_with_its_own_engine_gets_its_derived_blocks(tmp_path):
    # The decode role runs its own engine at TP 2 (timed by its own aic section); the CLI's
    # sizing filled the shared engine only and left it 16,384 blocks.
    config = tmp_path / "c.yaml"
    decode = {"engine": {"tensor_parallel_size": 2}, "timing": {**AIC, "tp": 2}}
    config.write_text(yaml.safe_dump({"decode": decode}))
    flags = ["--config", str(config), "--prefill-workers", "1", "--decode-workers", "1"]
    report = cli_report(tmp_path, *SMALL, *AIC_FLAGS, *flags)
    shared, own = report["config"]["engine"], report["config"]["decode"]["engine"]
    # Half the weights per GPU at TP 2 leave more room than twice the blocks of TP 1.
    assert own["num_gpu_blocks"] > 2 * shared["num_gpu_blocks"]
    assert own["num_gpu_blocks"] != DEFAULT_NUM_GPU_BLOCKS
    capacity = report["provenance"]["kv_capacity"]
    assert sorted(capacity) == ["decode.engine", "engine"]
    assert capacity["decode.engine"]["source"] == capacity["engine"]["source"] == "aic"
    assert (capacity["engine"]["tp"], capacity["decode.engine"]["tp"]) == (1, 2)
    assert shared["num_gpu_blocks"] == capacity["engine"]["num_gpu_blocks"]
    assert own["num_gpu_blocks"] == capacity["decode.engine"]["num_gpu_blocks"]
    # --gpu-memory-utilization is every engine's, a role's own included.
    shared_share = cli_report(
        tmp_path, *SMALL, *AIC_FLAGS, *flags, "--gpu-memory-utilization", "0.7"
    )["provenance"]["kv_capacity"]
    assert {c["memory_fraction"] for c in shared_share.values()} == {0.7}
    # Each engine's own memory share sizes it.
    tight = {
        "cluster": {"mode": "disaggregated"},
        "timing": AIC,
        "decode": {**decode, "engine": {**decode["engine"], "gpu_memory_utilization": 0.7}},
    }
    work = dynosim.SyntheticWorkload(isl=500, osl=20, count=20, rate=5.0)
    sized = dynosim.replay(work, tight).provenance["kv_capacity"]["decode.engine"]
    assert sized["memory_fraction"] == 0.7
    assert sized["num_gpu_blocks"] < own["num_gpu_blocks"]


@needs_aic
def test_roles_sharing_an_engine_but_sized_apart_get_their_own(tmp_path):
    # One engine section, two timing sections of different memory needs (a longer pass
    # budget is not a layout, so vary the GPU instead): each role gets its own copy.
    work = dynosim.SyntheticWorkload(isl=500, osl=20, count=20, rate=5.0)
    config = {
        "cluster": {"mode": "disaggregated"},
        "timing": AIC,
        "decode": {"timing": {**AIC, "system": "h100_sxm"}},
    }
    report = dynosim.replay(work, config)
    capacity = report.provenance["kv_capacity"]
    assert sorted(capacity) == ["decode.engine", "prefill.engine"]
    assert capacity["prefill.engine"]["system"] == "h200_sxm"
    assert capacity["decode.engine"]["system"] == "h100_sxm"
    for role in ("prefill", "decode"):
        blocks = report.config[role]["engine"]["num_gpu_blocks"]
        assert blocks == capacity[f"{role}.engine"]["num_gpu_blocks"]
    assert (
        report.config["prefill"]["engine"]["num_gpu_blocks"]
        > (report.config["decode"]["engine"]["num_gpu_blocks"])
    )


@needs_aic
def test_kv_bytes_per_token_from_the_model_feed_links_and_tiers(tmp_path):
    links = ["--prefill-workers", "1", "--decode-workers", "1", "--kv-bandwidth-gbps", "25"]
    report = cli_report(tmp_path, *SMALL, *AIC_FLAGS, *links)
    assert report["provenance"]["kv_bytes_per_token"] == {
        "source": "model",
        "model": "Qwen/Qwen3-32B",
        "backend": "vllm",
        "bytes_per_token": QWEN3_32B_KV_BYTES,
    }
    moved = np.array(report["requests"]["transfer_bytes"])
    prompts = np.array(report["requests"]["input_length"])
    assert (moved == prompts * QWEN3_32B_KV_BYTES).all()
    # Offload tiers size their block moves from it too.
    tiered = cli_report(tmp_path, *SMALL, *AIC_FLAGS, "--g2-blocks", "1000")
    assert tiered["provenance"]["kv_bytes_per_token"]["source"] == "model"
    # A value given wins.
    given = cli_report(tmp_path, *SMALL, *AIC_FLAGS, *links, "--kv-bytes-per-token", "1000")
    assert given["provenance"]["kv_bytes_per_token"] == {
        "source": "given",
        "bytes_per_token": 1000,
    }
    assert (np.array(given["requests"]["transfer_bytes"]) == prompts * 1000).all()


@needs_aic
def test_given_blocks_win_over_the_model(tmp_path):
    report = cli_report(tmp_path, *SMALL, *AIC_FLAGS, "--num-gpu-blocks", "500")
    assert report["config"]["engine"]["num_gpu_blocks"] == 500
    assert report["provenance"]["kv_capacity"] == {
        "engine": {"source": "given", "num_gpu_blocks": 500}
    }


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--model", "Qwen/Qwen3-32B"], "--model: AIConfigurator's model, GPU system"),
        (
            [*AIC_FLAGS, "--num-gpu-blocks", "10", "--gpu-memory-utilization", "0.8"],
            "it has no effect with --num-gpu-blocks",
        ),
        (["--gpu-memory-utilization", "0.8"], "sizes the KV cache from the model and GPU"),
    ],
)
def test_sizing_flags_that_do_not_apply(capsys, flags, message):
    assert main(["replay", *SMALL, *flags, "--no-progress"]) == 2
    assert message in capsys.readouterr().err
