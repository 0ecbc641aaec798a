"""Explained replays: Report.breakdown() and ``dynosim replay --explain``."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import needs_aic

import dynosim
from dynosim.cli import main

#: One worker, fixed timing (prefill 10 ms, decode 1 ms), 4-token blocks.
FIXED = {
    "cluster": {"num_workers": 1},
    "engine": {"block_size": 4, "num_gpu_blocks": 100},
    "timing": {"model": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0},
    "report": {"explain": True},
}

STAGES = ("queue", "prefill_passes", "between_chunks", "handoff", "transfer", "after_transfer")


def _two_requests() -> dynosim.SyntheticWorkload:
    # Both at 0 (no rate): 8-token prompts of 2 tokens each, prefilled together in one pass.
    return dynosim.SyntheticWorkload(isl=8, osl=2, count=2)


def test_breakdown_of_a_hand_computed_replay():
    report = dynosim.replay(_two_requests(), FIXED)
    b = report.breakdown()
    # One prefill pass (0-10) for both prompts, one decode pass (10-11).
    (rank,) = b["ranks"]
    assert (rank["role"], rank["worker"], rank["dp_rank"]) == ("aggregated", 0, 0)
    assert rank["passes"]["prefill_only"]["passes"] == 1
    assert rank["passes"]["prefill_only"]["mean_ms"] == 10.0
    assert rank["passes"]["decode_only"]["parts_mean_ms"] == {"prefill": 0.0, "decode": 1.0}
    assert "mixed" not in rank["passes"]
    # Fixed timing is not AIC's: no family or version priced its parts.
    assert b["parts"] == {
        "aggregated": {
            "prefill": {"family": None, "version": None},
            "decode": {"family": None, "version": None},
        }
    }
    assert [s["stage"] for s in b["ttft_stages"]] == list(STAGES)
    assert b["ttft_stages"][1]["mean_ms"] == 10.0
    # Each request's stages are columns, and they add up to its TTFT.
    stages = sum(report.requests[f"ttft_{s}_ms"] for s in STAGES)
    np.testing.assert_allclose(stages, report.requests["ttft_ms"])


def test_explaining_changes_nothing_else_and_survives_a_round_trip(tmp_path):
    plain = dynosim.replay(_two_requests(), {**FIXED, "report": {"explain": False}})
    explained = dynosim.replay(_two_requests(), FIXED)
    assert plain.summary == explained.summary
    with pytest.raises(ValueError, match="explain"):
        plain.breakdown()
    path = tmp_path / "r.json"
    path.write_text(explained.to_json())
    again = dynosim.load_report(path)
    assert again.breakdown() == explained.breakdown()
    assert again.to_json() == explained.to_json()


def test_a_damaged_breakdown_is_refused_naming_it(tmp_path):
    data = json.loads(dynosim.replay(_two_requests(), FIXED).to_json())
    data["breakdown"]["ranks"][0]["passes"]["prefill_only"]["mean_ms"] = "fast"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(
        dynosim.errors.ReportError,
        match=r"breakdown\.ranks\[0\]\.passes\.prefill_only\.mean_ms: expected a number",
    ):
        dynosim.load_report(path)
    # A report whose configuration says explained carries its breakdown and stage columns.
    del data["breakdown"]
    path.write_text(json.dumps(data))
    with pytest.raises(dynosim.errors.ReportError, match="breakdown: expected exactly when"):
        dynosim.load_report(path)


def test_cli_explain_prints_the_tables(capsys):
    argv = ["replay", "--synthetic", "--isl", "8", "--osl", "3", "--count", "4", "--rate", "50"]
    fixed = ["--timing", "fixed", "--prefill-ms", "10", "--decode-ms", "1", "--no-progress"]
    assert main([*argv, *fixed, "--explain"]) == 0
    out = capsys.readouterr().out
    assert "aggregated: mean priced pass (ms) by part" in out
    assert "time to first token by stage" in out
    assert "prefill_passes" in out


def test_cli_explain_with_json_on_stdout_puts_the_breakdown_in_the_json(capsys):
    argv = ["replay", "--synthetic", "--isl", "8", "--osl", "3", "--count", "4", "--rate", "50"]
    fixed = ["--timing", "fixed", "--prefill-ms", "10", "--decode-ms", "1", "--no-progress"]
    assert main([*argv, *fixed, "--explain", "--json", "-"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # stdout is the JSON alone
    assert report["breakdown"]["ranks"][0]["role"] == "aggregated"
    assert "ttft_queue_ms" in report["requests"]
    # The tables went to stderr with the summary.
    assert "time to first token by stage" in captured.err


@needs_aic
def test_breakdown_names_the_aic_family_and_version_of_each_part(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNOSIM_CACHE_DIR", str(tmp_path / "cache"))
    config = {
        "cluster": {"num_workers": 1},
        "engine": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 4096},
        "timing": {
            "model": "aic",
            "model_name": "Qwen/Qwen3-32B",
            "system": "rtx_pro_6000_server",
            "backend_version": "0.19.0",
            "tp": 2,
        },
        "report": {"explain": True},
    }
    config["engine"]["tensor_parallel_size"] = 2
    report = dynosim.replay(dynosim.SyntheticWorkload(isl=300, osl=20, count=20, rate=5.0), config)
    parts = report.breakdown()["parts"]["aggregated"]
    # On this system AIC holds vLLM 0.19.0's all-reduce data, and 0.24.0's for the rest.
    assert parts["all_reduce"] == {"family": "comm", "version": "0.19.0"}
    # All-reduces of 8 MiB and more go to NCCL, priced with the system's NCCL measurements.
    assert parts["all_reduce_nccl"] == {"family": "nccl", "version": "2.29.2"}
    assert parts["gemm"] == {"family": "gemm", "version": "0.24.0"}
    assert parts["decode_attention"] == {"family": "attention", "version": "0.24.0"}
    assert parts["elementwise"] == {"family": None, "version": None}
    # The parts of each pass add up to its price (up to the rounding of the summed tables).
    for kind in report.breakdown()["ranks"][0]["passes"].values():
        total = sum(kind["parts_mean_ms"].values())
        assert total == pytest.approx(kind["mean_ms"], rel=1e-5)
