"""Hostile runs (issue 32): links planted in an output directory, documents that expand past a
bound, sweeps larger than the machine, SIGTERM, times past f64's millisecond resolution,
damaged reports and measured files, and the settings and flags that did nothing or leaked a
traceback. Each test is one example of a class the code handles by one mechanism."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import needs_aic

from dynosim.cli import EXIT_BAD_INPUT, main

SYNTH = ["--synthetic", "--isl", "64", "--osl", "4", "--rate", "10", "--count", "20"]


def cli_error(
    argv: list[str], capsys: pytest.CaptureFixture[str], code: int = EXIT_BAD_INPUT
) -> str:
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
        "mode: aggregated\nmodel: Qwen/Qwen3-32B\nsystem: h200_sxm\nbackend: vllm\n"
        "backend_version: 0.24.0\nblock_size: 64\naggregated: {replicas: 1, max_batch_size: 8}\n"
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


# --- YAML alias expansion, and messages that never serialise more than they show (item 2) ----


def alias_bomb(levels: int = 9, tail: str = "cluster: {num_workers: *i}\n") -> str:
    """A few hundred bytes of nested aliases standing for 10^levels nodes."""
    lines = ["a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for i in range(1, levels):
        name, inner = chr(97 + i), chr(96 + i)
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{inner}"] * 10) + "]")
    return "\n".join(lines) + "\n" + tail


def test_a_config_of_nested_aliases_is_refused_before_it_is_walked(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    assert len(path.read_bytes()) < 500
    started = time.perf_counter()
    err = cli_error(["replay", "--no-progress", "--config", str(path)], capsys)
    assert err == (
        f"{path}: line 5, column 36: aliases expand the document by more than 100,000 nodes; "
        "write the repeated values out, or repeat them less"
    )
    assert time.perf_counter() - started < 30  # it took 224 s and 2.5 GB


@pytest.mark.parametrize("kind", ["space", "candidate", "manifest"])
def test_every_document_kind_bounds_its_aliases(tmp_path, capsys, kind):
    from dynosim.deploy import load_candidate, validate_manifest
    from dynosim.errors import ConfigError
    from dynosim.plan import Space

    path = tmp_path / f"{kind}.yaml"
    path.write_text(alias_bomb(tail="kind: x\n"))
    message = "line 5, column 36: aliases expand the document by more than 100,000 nodes"
    if kind == "manifest":
        started = time.perf_counter()
        assert main(["validate", str(path)]) == 1
        assert message in capsys.readouterr().out
        assert time.perf_counter() - started < 30  # 118 s and 5.5 GB before
        (problem,) = validate_manifest(path)
        assert str(problem).startswith(message)
        return
    with pytest.raises(ConfigError) as info:
        (Space.load if kind == "space" else load_candidate)(path)
    assert str(info.value).startswith(f"{path}: {message}")


def test_aliases_within_the_bound_still_read(tmp_path):
    from dynosim.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text(
        "cluster: {mode: disaggregated}\ndecode:\n  engine: &e {max_num_seqs: 8}\n"
        "prefill:\n  engine: *e\n"
    )
    config = load_config(path)
    assert config.prefill.engine.max_num_seqs == 8 == config.decode.engine.max_num_seqs


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: &a [*a]\n", "line 1, column 8: alias *a refers to a node it is inside"),
        ("[" * 200 + "]" * 200, "line 1, column 101: nested deeper than 100 levels"),
        ("cluster:\n  num_workers: " + "9" * 5000 + "\n", "line 2, column 16: an integer of 5,000"),
        (
            "cluster: {num_workers: 2}\nengine: {}\ncluster: {num_workers: 3}\n",
            "line 3, column 1: duplicate key 'cluster' (first at line 1, column 1)",
        ),
    ],
    ids=["recursive", "deep", "digits", "duplicate key"],
)
def test_hostile_yaml_is_refused_naming_line_and_column(tmp_path, text, message):
    from dynosim.config import load_config
    from dynosim.errors import ConfigError

    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: {message}")


def test_a_message_shows_a_bounded_part_of_a_huge_value(tmp_path):
    from dynosim import SimConfig
    from dynosim._validation import shown
    from dynosim.errors import ConfigError

    # A value of 10^9 elements that is only 9 levels of shared lists.
    value: list = [1] * 10
    for _ in range(8):
        value = [value] * 10
    started = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        SimConfig.model_validate({"cluster": {"router": value}})
    assert len(str(info.value)) < 200 and time.perf_counter() - started < 30
    assert shown("x" * 10**8) == '"' + "x" * 56 + "..."
    assert shown(10**4000) == "<an integer of ~4,000 digits>"
    loop: list = []
    loop.append(loop)
    assert shown(loop) == "[[...]]"
    # Many bad fields: the message lists five, and counts the rest.
    bad = {f"k{i}": 1 for i in range(1000)}
    with pytest.raises(ConfigError) as info:
        SimConfig.model_validate({"cluster": bad})
    assert str(info.value).endswith("; and 995 more problems") and len(info.value.problems) == 1000
