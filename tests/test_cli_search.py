"""``dynosim sweep`` and ``dynosim plan``: the files they write, the tables they print, and
their exit codes on bad input (2) and when no candidate meets the SLA (1)."""

from __future__ import annotations

import csv
import json
import sys

import pytest
from conftest import needs_aic

from dynosim.cli import main

SYNTH = ["--synthetic", "--isl", "2000", "--osl", "100", "--rate", "4", "--count", "200"]


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("cluster.num_workers: [1, 2]\nengine.max_num_seqs: [32, 256]\n")
    return path


def test_sweep_writes_the_table_and_the_front(tmp_path, space, capsys):
    out = tmp_path / "out"
    code = main(
        [
            "sweep",
            *SYNTH,
            "--space",
            str(space),
            "--sla-ttft-ms",
            "1000",
            "-o",
            str(out),
            "--no-progress",
            "--jobs",
            "2",
        ]
    )
    assert code == 0
    written = sorted(p.name for p in out.iterdir())
    assert written == ["pareto.csv", "pareto.html", "results.csv", "results.jsonl"]
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [r["index"] for r in rows] == ["0", "1", "2", "3"]
    assert [r["cluster.num_workers"] for r in rows] == ["1", "1", "2", "2"]
    lines = (out / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["index"] for line in lines] == [0, 1, 2, 3]
    printed = capsys.readouterr().out
    assert "4 candidates, 4 meet" in printed and "Pareto front" in printed


def test_sweep_bad_space_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster.num_wrkers: [1, 2]\n")
    assert main(["sweep", *SYNTH, "--space", str(bad), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert 'unknown path "cluster.num_wrkers"' in err and "allowed keys:" in err
    bad.write_text("cluster.num_workers: []\n")
    assert main(["sweep", *SYNTH, "--space", str(bad), "-o", str(tmp_path / "o")]) == 2
    assert "cluster.num_workers: expected at least one value" in capsys.readouterr().err
    assert not (tmp_path / "o" / "results.partial.jsonl").exists()


def test_sweep_no_candidate_meets_exits_1_with_the_closest(tmp_path, space, capsys):
    code = main(
        [
            "sweep",
            *SYNTH,
            "--space",
            str(space),
            "--sla-ttft-ms",
            "1",
            "-o",
            str(tmp_path / "o"),
            "--no-progress",
        ]
    )
    assert code == 1
    printed = capsys.readouterr().out
    assert "0 meet" in printed and "the closest" in printed and "TTFT p90" in printed
    # The results are written all the same.
    assert len((tmp_path / "o" / "results.csv").read_text().splitlines()) == 5


def test_ray_asked_for_but_missing_exits_2(tmp_path, space, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    code = main(
        [
            "sweep",
            *SYNTH,
            "--space",
            str(space),
            "--executor",
            "ray",
            "-o",
            str(tmp_path / "o"),
            "--no-progress",
        ]
    )
    assert code == 2
    assert "install it with: pip install 'dynosim[ray]'" in capsys.readouterr().err


PLAN = [
    "plan",
    *SYNTH[:-2],
    "--count",
    "300",
    "--model",
    "Qwen/Qwen3-32B",
    "--system",
    "h200_sxm",
    "--no-progress",
]


@needs_aic
def test_plan_max_gpus_below_one_worker_exits_2(tmp_path, capsys):
    code = main(
        [
            *PLAN,
            "--sla-ttft-ms",
            "500",
            "--max-gpus",
            "1",
            "--tp",
            "2",
            "4",
            "-o",
            str(tmp_path / "o"),
        ]
    )
    assert code == 2
    assert "max_gpus 1 is below one worker of every layout" in capsys.readouterr().err


@needs_aic
def test_plan_no_candidate_meets_exits_1(tmp_path, capsys):
    code = main(
        [
            *PLAN,
            "--sla-ttft-ms",
            "1",
            "--max-gpus",
            "2",
            "--tp",
            "1",
            "--modes",
            "aggregated",
            "-o",
            str(tmp_path / "o"),
        ]
    )
    assert code == 1
    printed = capsys.readouterr().out
    assert "no candidate meets the SLA; the closest" in printed and "TTFT p90" in printed


@needs_aic
def test_plan_writes_the_pick_manifest(tmp_path, capsys):
    out = tmp_path / "o"
    code = main(
        [
            *PLAN,
            "--sla-ttft-ms",
            "600",
            "--sla-tpot-ms",
            "30",
            "--max-gpus",
            "4",
            "--tp",
            "1",
            "2",
            "-o",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr()
    printed = capsys.readouterr().out
    assert "ranked candidates" in printed and "pick:" in printed
    assert (out / "k8s_deploy.yaml").exists() and (out / "pareto.csv").exists()
    assert "DynamoGraphDeployment" in (out / "k8s_deploy.yaml").read_text()


@needs_aic
def test_identical_plans_write_identical_files(tmp_path):
    # Replays numbered by layout, setting and workers, no wall times in the files: two runs,
    # on one thread and on two (replays finishing in another order), write the same bytes.
    argv = [*PLAN, "--sla-ttft-ms", "600", "--sla-tpot-ms", "30", "--max-gpus", "4"]
    a, b = tmp_path / "a", tmp_path / "b"
    assert main([*argv, "--tp", "1", "2", "--jobs", "2", "-o", str(a)]) == 0
    assert main([*argv, "--tp", "1", "2", "--jobs", "1", "-o", str(b)]) == 0
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    assert {"replays.csv", "pareto.csv", "candidate.yaml", "k8s_deploy.yaml"} <= set(names)
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    if (a / "pareto.html").exists():  # with the plot extra: the page says why too
        assert "Why (the constraint that binds, and by how much)" in (a / "pareto.html").read_text()
    rows = list(csv.DictReader((a / "replays.csv").open()))
    assert [int(r["index"]) for r in rows] == list(range(len(rows)))
    assert "wall_ms" not in rows[0]


@needs_aic
def test_a_manifest_with_the_chunking_flag_changed_fails_validation(tmp_path, capsys):
    out = tmp_path / "o"
    argv = [*PLAN, "--sla-ttft-ms", "600", "--sla-tpot-ms", "30", "--max-gpus", "4", "--tp", "2"]
    # With a G2 tier per rank (its KV bytes per token from the model, its link PCIe).
    assert main([*argv, "--chunked-prefill", "on", "--g2-blocks", "4096", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "chunked on" in printed and "why (the constraint that binds" in printed
    manifest, candidate = out / "k8s_deploy.yaml", str(out / "candidate.yaml")
    text = manifest.read_text()
    assert "enable_chunked_prefill: True" in text
    assert main(["validate", str(manifest), "--candidate", candidate]) == 0
    manifest.write_text(
        text.replace("enable_chunked_prefill: True", "enable_chunked_prefill: False")
    )
    capsys.readouterr()
    assert main(["validate", str(manifest), "--candidate", candidate]) == 1
    printed = capsys.readouterr().out
    assert "enable_chunked_prefill turns chunked prefill off" in printed
    assert "chunked_prefill is on (simulated on)" in printed


@needs_aic
def test_plan_applies_its_backend_to_a_config_base(tmp_path, capsys):
    # A base naming an SGLang-only setting and no backend: --backend sglang makes it valid,
    # another backend names the setting.
    base = tmp_path / "base.yaml"
    base.write_text("engine:\n  schedule_policy: lpm\n")
    argv = [*PLAN, "--config", str(base), "--sla-ttft-ms", "600", "--sla-tpot-ms", "30"]
    argv += ["--max-gpus", "2", "--tp", "1", "--no-render"]
    out = tmp_path / "o"
    assert main([*argv, "--backend", "sglang", "-o", str(out)]) == 0, capsys.readouterr()
    capsys.readouterr()
    assert main([*argv, "--backend", "vllm", "-o", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err
    assert "schedule_policy" in err and str(base) in err
