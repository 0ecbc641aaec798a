"""The fidelity-case harness (``benches/fidelity_cases.py``) on small variants: its workload
follows the stated distributions, its configuration is what the ``dynosim replay`` flags give,
and its numbers hold together (TTFT stages add up, the MoE case runs two DP ranks with EP 2).
A few seconds; the AIC cases skip without the ``aic`` extra."""

from __future__ import annotations

import json
import math

import fidelity_cases as fc
import numpy as np
import pytest

from dynosim.cli import main as dynosim_main

needs_aic = pytest.mark.skipif(
    not fc.have_aic(), reason="needs the aic extra (pip install 'dynosim[aic]')"
)

LLAMA = "llama-8b-tp1-s128"
MOE = "qwen3-30b-a3b-dp2-ep2-s128"


def test_the_cases_are_the_stated_ones():
    assert len(fc.CASES) == 6
    layouts = {(c.model, c.tp, c.dp, c.ep) for c in fc.CASES.values()}
    assert layouts == {
        ("meta-llama/Meta-Llama-3.1-8B", 1, 1, 1),
        ("Qwen/Qwen3-30B-A3B", 1, 2, 2),
        ("Qwen/Qwen3-32B", 2, 1, 1),
    }
    for model, *_ in layouts:
        seqs = sorted(c.max_num_seqs for c in fc.CASES.values() if c.model == model)
        assert seqs == [128, 256]
    work = fc.workload()
    assert (work.count, work.rate, work.seed, work.arrival) == (1000, 10.0, 1, "poisson")


@pytest.mark.parametrize(("field", "mean", "sigma"), [("input", 220, 1.0), ("output", 200, 0.9)])
def test_lengths_follow_the_stated_lognormal(field, mean, sigma):
    # 200,000 draws: the sample mean's standard error is under 0.6 % of the mean.
    cols = fc.workload(count=200_000).columns()
    lengths = getattr(cols, f"{field}_length")
    assert lengths.min() >= 1
    # The distribution's own mean (mu = ln(mean) - sigma^2 / 2), not exp(mu) nor e^(mu + ...).
    assert lengths.mean() == pytest.approx(mean, rel=0.02)
    mu = math.log(mean) - sigma**2 / 2
    assert np.median(lengths) == pytest.approx(math.exp(mu), rel=0.02)
    logs = np.log(lengths[lengths >= 20])  # rounding aside
    assert logs.std() == pytest.approx(sigma, rel=0.1)
    # Poisson arrivals at 10 requests/s.
    assert np.diff(cols.arrival_ms).mean() == pytest.approx(100.0, rel=0.02)


@needs_aic
@pytest.mark.parametrize("name", [LLAMA, MOE, "qwen3-32b-tp2-s256"])
def test_the_configuration_is_what_the_replay_flags_give(name, tmp_path):
    case = fc.CASES[name]
    out = tmp_path / "cli.json"
    argv = ["replay", "--synthetic", "--isl", "220", "--osl", "200", "--rate", "10"]
    argv += ["--count", "3", *case.flags(), "--json", str(out), "--no-progress"]
    assert dynosim_main(argv) == 0
    cli = json.loads(out.read_text())["config"]
    assert fc.run_case(case, count=3).config == cli


@needs_aic
def test_a_small_llama_case_holds_together():
    report = fc.run_case(fc.CASES[LLAMA], count=50)
    got = fc.numbers(fc.CASES[LLAMA], report)
    assert got["completed"] == 50 and got["rejected"] == 0
    # The replay saw the workload's lengths.
    cols = fc.workload(count=50).columns()
    np.testing.assert_array_equal(report.requests["input_length"], cols.input_length)
    np.testing.assert_array_equal(report.requests["output_length"], cols.output_length)
    # Each request's TTFT stages add up to its TTFT, and their means to the mean TTFT.
    req = report.requests
    stages = sum(req[f"ttft_{stage}_ms"] for stage in got["ttft_stages_mean_ms"])
    np.testing.assert_allclose(stages, req["ttft_ms"], rtol=1e-9, atol=1e-6)
    assert sum(got["ttft_stages_mean_ms"].values()) == pytest.approx(got["ttft_ms"]["mean"])
    assert got["ttft_stages_mean_ms"]["prefill_passes"] > 0
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        s = got[key]
        assert 0 < s["p50"] <= s["p90"] <= s["p99"]
    # Pass kinds: counts add up to the replay's passes, parts to each kind's mean.
    assert sum(p["passes"] for p in got["passes"].values()) == report.summary["num_passes"]
    for p in got["passes"].values():
        assert sum(p["parts_mean_ms"].values()) == pytest.approx(p["mean_ms"])
        parts = list(p["parts_mean_ms"].values())
        assert parts == sorted(parts, reverse=True)
    text = fc.render(LLAMA, got, 0.1)
    assert "mean TTFT by stage: queue" in text and "decode_only" in text


@needs_aic
def test_the_moe_case_runs_two_dp_ranks_with_ep_2():
    report = fc.run_case(fc.CASES[MOE], count=50)
    assert report.provenance["timing"]["timing"]["layout"] == {"tp": 1, "dp": 2, "ep": 2}
    engine = report.config["engine"]
    assert (engine["tensor_parallel_size"], engine["data_parallel_size"]) == (1, 2)
    assert report.config["timing"]["ep"] == 2 and report.summary["num_gpus"] == 2
    got = fc.numbers(fc.CASES[MOE], report)
    assert got["dp_ranks"] == [0, 1] and got["completed"] == 50
    # Both ranks prefilled requests of their own, and the experts were priced.
    for rank in report.breakdown()["ranks"]:
        prefills = [rank["passes"][k] for k in ("prefill_only", "mixed") if k in rank["passes"]]
        assert any(p["parts_mean_ms"]["prefill_attention"] > 0 for p in prefills)
    assert got["passes"]["decode_only"]["parts_mean_ms"]["moe"] > 0


@needs_aic
def test_main_writes_the_numbers_of_one_case(tmp_path, capsys):
    out = tmp_path / "cases.json"
    assert fc.main(["--case", LLAMA, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert LLAMA in printed and "TTFT mean / p90 ms" in printed
    doc = json.loads(out.read_text())
    assert list(doc["cases"]) == [LLAMA]
    assert doc["workload"]["count"] == 1000 and doc["workload"]["isl"]["mean"] == 220.0
    assert doc["cases"][LLAMA]["completed"] == 1000


def test_without_aic_it_says_so_and_runs_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(fc, "have_aic", lambda: False)
    out = tmp_path / "cases.json"
    assert fc.main(["--json", str(out)]) == 0
    assert "skipped, nothing run" in capsys.readouterr().err
    assert not out.exists()
