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
    # vLLM keeps one block of its pool as the null block.
    assert cap["num_gpu_blocks"] == int(cap["kv_memory_bytes_per_gpu"] // (131_072 * 16)) - 1


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
            "--gpu-memory-utilization 1.5 (engine.gpu_memory_utilization): must be in (0, 1] "
            "(a share of the GPU's memory), got 1.5",
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
    assert "--ep: AIConfigurator's model, GPU system, engine version, expert split" in err
    assert "apply to --timing aic" in err


# ---- the rules an aic section adds to AIC's operators (vLLM 0.19) -----------------------------


def _target(model: str, system: str = "rtx_pro_6000_server", backend: str = "vllm", **layout):
    from dynosim.aic.tables import default_cache_dir
    from dynosim.aic.target import resolve_aic_timing
    from dynosim.config import AicTiming

    spec = AicTiming(model_name=model, system=system, backend=backend, **layout)
    return resolve_aic_timing(spec, default_cache_dir() / "aic")


@needs_aic
@pytest.mark.parametrize(
    ("model", "system", "backend", "factor"),
    [
        # Llama-3.1-8B: 32 query heads over 8 KV heads, G = 4; FA2 on sm 120.
        ("meta-llama/Meta-Llama-3.1-8B", "rtx_pro_6000_server", "vllm", 2.0),
        # Qwen3-30B-A3B: 32 over 4, G = 8.
        ("Qwen/Qwen3-30B-A3B", "rtx_pro_6000_server", "vllm", 8**0.5),
        # Hopper runs FlashAttention 3 (its mixed batches keep the packing), and other engines
        # are priced as AIC prices them.
        ("meta-llama/Meta-Llama-3.1-8B", "h200_sxm", "vllm", 1.0),
        ("meta-llama/Meta-Llama-3.1-8B", "rtx_pro_6000_server", "trtllm", 1.0),
    ],
)
def test_decode_rows_of_a_mixed_pass_cost_the_square_root_of_the_head_grouping(
    model, system, backend, factor
):
    from dynosim.aic.tables import mixed_decode_factor

    assert mixed_decode_factor(_target(model, system, backend)) == pytest.approx(factor)


@needs_aic
def test_all_reduces_of_8_mib_and_more_go_to_nccl():
    from dynosim.aic.tables import nccl_from_tokens

    # Qwen3-32B: hidden size 5,120, 10,240 bytes a token: 8 MiB is 819.2 tokens.
    assert nccl_from_tokens(_target("Qwen/Qwen3-32B", tp=2), 5120) == 820
    # More than two PCIe GPUs: vLLM turns its custom all-reduce off; NVLink keeps it.
    assert nccl_from_tokens(_target("Qwen/Qwen3-32B", tp=4), 5120) == 1
    assert nccl_from_tokens(_target("Qwen/Qwen3-32B", "h200_sxm", tp=4), 5120) == 820
    # No all-reduce at TP 1; other engines priced as AIC prices them.
    assert nccl_from_tokens(_target("Qwen/Qwen3-32B"), 5120) is None
    assert nccl_from_tokens(_target("Qwen/Qwen3-32B", backend="trtllm", tp=2), 5120) is None


@needs_aic
def test_nccl_prices_the_large_all_reduces_in_the_tables(cache):
    from aiconfigurator_core.sdk import common, operations
    from aiconfigurator_core.sdk.engine import build_ops_json

    from dynosim.aic.tables import _Engine, build_tables

    target = _target("Qwen/Qwen3-32B", tp=2, backend_version="0.19.0")
    tables, _ = build_tables(target)
    t = tables.tokens
    custom, nccl = (
        tables.non_attention_parts["all_reduce"],
        tables.non_attention_parts["all_reduce_nccl"],
    )
    for i, tokens in enumerate(t):
        assert (custom[i] == 0.0) == (tokens >= 820) and (nccl[i] > 0.0) == (tokens >= 820)
    # At 1,024 tokens: 2 all-reduces in each of 64 layers plus the embedding's, each priced
    # with AIC's 2-GPU NCCL all-reduce of 1,024 x 5,120 bf16 values.
    i = t.index(1024)
    handle = _Engine(target).handle
    op = operations.NCCL(
        "ar",
        129,
        "all_reduce",
        num_elements_per_token=5120,
        num_gpus=2,
        comm_quant_mode=common.CommQuantMode.half,
    )
    want = handle.evaluate_ops_json(build_ops_json([op]), is_context=True, batch_size=1, s=1024)
    assert nccl[i] == pytest.approx(want[0][1], rel=1e-9)


def _profile(path, ms_per_layer=0.01, heads=(16.0, 32.0)):
    import numpy as np

    arrays = {
        "batch": np.array([1.0, 64.0]),
        "context": np.array([1.0, 8192.0]),
        "prefill_tokens": np.array([1.0, 2048.0]),
        "heads": np.array(heads),
        "ms": np.full((2, 2, 2, len(heads)), ms_per_layer),
    }
    np.savez(path, **arrays)
    return path


@needs_aic
def test_a_measured_profile_prices_the_decode_rows_of_mixed_passes(cache, tmp_path):
    # A flat profile: 0.01 ms a layer whatever the shape; Llama-3.1-8B has 32 layers, so the
    # decode rows of every mixed pass cost 0.32 ms in all (decode, spread and mixed parts).
    profile = _profile(tmp_path / "p.npz")
    out = tmp_path / "r.json"
    argv = [
        *BASE,
        "--model",
        "meta-llama/Meta-Llama-3.1-8B",
        "--mixed-decode-profile",
        str(profile),
        "--explain",
        "--json",
        str(out),
    ]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    made = report["provenance"]["timing"]["timing"]["mixed_decode"]
    assert (made["profile"], made["heads"], made["layers"]) == ("p.npz", 32.0, 32)
    mixed = report["breakdown"]["ranks"][0]["passes"]["mixed"]["parts_mean_ms"]
    rows = mixed["decode_attention"] + mixed["decode_spread"] + mixed["mixed_decode_attention"]
    assert rows == pytest.approx(0.32, rel=1e-9)


@needs_aic
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"drop": "heads"}, "lacks arrays heads"),
        ({"ms": (2, 2, 2)}, "array ms must have shape (2, 2, 2, 2)"),
        ({"heads": (32.0, 16.0)}, "array heads must be positive and strictly increasing"),
        ({"ms_value": -1.0}, "must be a finite latency"),
    ],
)
def test_a_bad_profile_is_refused_naming_the_file(cache, tmp_path, capsys, change, message):
    import numpy as np

    path = tmp_path / "bad.npz"
    arrays = dict(np.load(_profile(tmp_path / "p.npz")))
    if "drop" in change:
        del arrays[change["drop"]]
    if "ms" in change:
        arrays["ms"] = np.zeros(change["ms"])
    if "heads" in change:
        arrays["heads"] = np.array(change["heads"])
    if "ms_value" in change:
        arrays["ms"] = np.full((2, 2, 2, 2), change["ms_value"])
    np.savez(path, **arrays)
    argv = [*BASE, "--model", "meta-llama/Meta-Llama-3.1-8B", "--mixed-decode-profile", str(path)]
    assert main(argv) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert str(path) in err and message in err and "Traceback" not in err
