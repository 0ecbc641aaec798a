"""Hostile runs (issue 32): links planted in an output directory, documents that expand past a
bound, sweeps larger than the machine, SIGTERM, times past f64's millisecond resolution,
damaged reports and measured files, and the settings and flags that did nothing or leaked a
traceback. Each test is one example of a class the code handles by one mechanism."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import needs_aic

from dynosim.cli import EXIT_BAD_INPUT, main

SYNTH = ["--synthetic", "--isl", "64", "--osl", "4", "--rate", "10", "--count", "20"]


def cli_error(argv: list[str], capsys: pytest.CaptureFixture[str], code: int = EXIT_BAD_INPUT) -> str:
    """The one error line of a command that must exit ``code``."""
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert err.startswith("dynosim: error: ") and "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    return err.removeprefix("dynosim: error: ")


# --- links planted in an output directory (item 1) -------------------------------------------


def plant(out: Path, names: list[str], victims: Path) -> dict[str, Path]:
    """A link in ``out`` under each of ``names``, to a victim file of its own in ``victims``."""
    out.mkdir(parents=True, exist_ok=True)
    victims.mkdir(exist_ok=True)
    planted = {}
    for name in names:
        victim = victims / f"{name}.victim"
        victim.write_text("keep me\n")
        (out / name).symlink_to(victim)
        planted[name] = victim
    return planted


def assert_untouched(out: Path, planted: dict[str, Path], written: list[str]) -> None:
    for name, victim in planted.items():
        assert victim.read_text() == "keep me\n", name
    for name in written:
        assert not (out / name).is_symlink() and (out / name).is_file(), name


def test_a_link_planted_in_a_sweep_directory_is_replaced_not_followed(tmp_path, monkeypatch):
    from dynosim.cli.sweep import COMPLETE, PARTIAL

    space = tmp_path / "space.yaml"
    space.write_text("cluster.num_workers: [1, 2]\n")
    out = tmp_path / "o1"
    planted = plant(out, [PARTIAL, *COMPLETE], tmp_path / "victims")
    argv = ["sweep", *SYNTH, "--space", str(space), "--no-progress", "-o", str(out)]
    # Cut short after the rows: the partial file is the sweep's own, the victim untouched.
    from dynosim.plan import result

    def cut(self):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(result.SweepResult, "jsonl_text", cut)
        assert main(argv) == 130
    assert_untouched(out, planted, [PARTIAL])
    assert len((out / PARTIAL).read_text().splitlines()) == 2
    # A complete sweep: every table written fresh, the partial rows gone.
    (out / PARTIAL).unlink()
    planted = plant(out, [PARTIAL], tmp_path / "victims2")
    assert main(argv) == 0
    assert_untouched(out, planted, [n for n in COMPLETE if n != "pareto.html" or have_plot()])
    assert not (out / PARTIAL).exists()


def have_plot() -> bool:
    from conftest import have

    return have("matplotlib")


def test_a_link_to_a_directory_in_a_sweep_directory_is_replaced(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("cluster.num_workers: [1]\n")
    out = tmp_path / "o"
    out.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (out / "results.csv").symlink_to(tmp_path / "elsewhere")
    assert main(["sweep", *SYNTH, "--space", str(space), "--no-progress", "-o", str(out)]) == 0
    assert (out / "results.csv").is_file() and list((tmp_path / "elsewhere").iterdir()) == []


@needs_aic
def test_a_link_planted_in_a_plan_directory_is_replaced_not_followed(tmp_path, capsys):
    out = tmp_path / "plan"
    names = ["replays.csv", "pareto.csv", "pareto.html", "k8s_deploy.yaml"]
    planted = plant(out, names, tmp_path / "victims")
    argv = ["plan", "--synthetic", "--isl", "2000", "--osl", "100", "--rate", "4"]
    argv += ["--count", "300", "--model", "Qwen/Qwen3-32B", "--system", "h200_sxm"]
    argv += ["--no-progress", "--sla-ttft-ms", "600", "--sla-tpot-ms", "30", "--max-gpus", "2"]
    argv += ["--tp", "1", "--modes", "aggregated", "-o", str(out)]
    assert main(argv) == 0, capsys.readouterr()
    assert_untouched(out, planted, [n for n in names if n != "pareto.html" or have_plot()])


@needs_aic
def test_a_link_planted_in_a_render_directory_is_replaced_not_followed(tmp_path, capsys):
    candidate = tmp_path / "candidate.yaml"
    candidate.write_text(
        "mode: aggregated\nmodel: Qwen/Qwen3-32B\nsystem: h200_sxm\nbackend: vllm\nbackend_version: 0.24.0\n"
        "block_size: 64\naggregated: {replicas: 1, max_batch_size: 8}\n"
    )
    out = tmp_path / "deploy"
    planted = plant(out, ["k8s_deploy.yaml"], tmp_path / "victims")
    argv = ["render", "--candidate", str(candidate), "--isl", "100", "--osl", "10"]
    assert main([*argv, "-o", str(out)]) == 0, capsys.readouterr()
    assert_untouched(out, planted, ["k8s_deploy.yaml"])
    assert "DynamoGraphDeployment" in (out / "k8s_deploy.yaml").read_text()


def test_a_file_the_user_names_is_still_written_through_its_link(tmp_path):
    from dynosim._files import write_atomic

    real = tmp_path / "real.txt"
    real.write_text("old\n")
    (tmp_path / "link.txt").symlink_to(real)
    write_atomic(tmp_path / "link.txt", "new\n")
    assert real.read_text() == "new\n" and (tmp_path / "link.txt").is_symlink()
    write_atomic(tmp_path / "link.txt", "fresh\n", fresh=True)
    assert real.read_text() == "new\n" and not (tmp_path / "link.txt").is_symlink()
    assert (tmp_path / "link.txt").read_text() == "fresh\n"


def test_a_temporary_name_planted_beside_an_output_is_never_opened(tmp_path, monkeypatch):
    import secrets

    from dynosim._files import write_atomic

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    # The name the first draw gives is taken by a link: the write draws another.
    draws = iter(["0" * 16, "1" * 16])
    monkeypatch.setattr(secrets, "token_hex", lambda n: next(draws))
    (tmp_path / f".out.json.{'0' * 16}.tmp").symlink_to(victim)
    write_atomic(tmp_path / "out.json", "{}\n")
    assert victim.read_text() == "keep me\n" and (tmp_path / "out.json").read_text() == "{}\n"
