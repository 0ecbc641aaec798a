"""The AIC timing model from the command line: engine versions, MoE layouts, KV capacity as
vLLM sizes it, and the report's provenance of each."""

from __future__ import annotations

import json

import pytest
from conftest import needs_aic

from dynosim.cli import EXIT_BAD_INPUT, main

BASE = [
    "replay",
    "--synthetic",
    "--isl",
    "300",
    "--osl",
    "50",
    "--rate",
    "5",
    "--count",
    "40",
    "--workers",
    "1",
    "--timing",
    "aic",
    "--system",
    "rtx_pro_6000_server",
    "--backend",
    "vllm",
    "--max-num-seqs",
    "128",
    "--max-num-batched-tokens",
    "2048",
    "--block-size",
    "16",
    "--no-progress",
]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNOSIM_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


@needs_aic
def test_an_engine_version_aic_holds_in_part(cache, capsys):
    out = cache / "r.json"
    argv = [*BASE, "--model", "Qwen/Qwen3-32B", "--tp", "2", "--backend-version", "0.19.0"]
    assert main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    priced = report["provenance"]["timing"]["timing"]
    assert priced["backend_version"] == "0.19.0"
    assert priced["priced_by"]["comm"] == "0.19.0" and priced["priced_by"]["gemm"] == "0.24.0"
    # The configuration shows the section as given; the tables are named by the provenance.
    assert report["config"]["timing"]["model"] == "aic"
    assert priced["tables"].endswith(".npz")
    # num_gpu_blocks derived as vLLM sizes it, every term in the report.
    cap = report["provenance"]["kv_capacity"]["engine"]
    assert cap["source"] == "aic" and cap["memory_fraction"] == 0.9
    assert report["config"]["engine"]["num_gpu_blocks"] == cap["num_gpu_blocks"]
    assert cap["num_gpu_blocks"] == int(cap["kv_memory_bytes_per_gpu"] // (131_072 * 16))


@needs_aic
def test_moe_layout_from_the_command_line(cache):
    out = cache / "r.json"
    argv = [*BASE, "--model", "Qwen/Qwen3-30B-A3B", "--tp", "1", "--dp", "2", "--ep", "2"]
    assert main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["provenance"]["timing"]["timing"]["layout"] == {"tp": 1, "dp": 2, "ep": 2}
    assert report["summary"]["num_gpus"] == 2  # one worker of 2 ranks of 1 GPU
    cap = report["provenance"]["kv_capacity"]["engine"]
    assert (cap["dp"], cap["ep"], cap["comm_bytes"]) == (2, 2, 0.0)


@needs_aic
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--model", "Qwen/Qwen3-32B", "--tp", "2", "--ep", "2"], "--ep"),
        (
            ["--model", "Qwen/Qwen3-30B-A3B", "--tp", "1", "--dp", "3", "--ep", "3"],
            "--tp/--dp/--ep",
        ),
        (["--model", "Qwen/Qwen3-32B", "--backend-version", "0.18.0"], "--backend-version"),
        (
            ["--model", "Qwen/Qwen3-32B", "--gpu-memory-utilization", "1.5"],
            "engine.gpu_memory_utilization: must be in (0, 1] (a share of the GPU's memory), "
            "got 1.5",
        ),
    ],
)
def test_bad_layouts_and_versions_exit_2_naming_the_flag(cache, capsys, flags, message):
    assert main([*BASE, *flags]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_ep_without_a_model_is_a_usage_error(capsys):
    assert main(["replay", "--ep", "2", "--no-progress"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "--ep: AIConfigurator's model, GPU system, engine version and expert split" in err
    assert "apply to --timing aic" in err
