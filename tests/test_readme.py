"""The README's command examples: every one parses with the flags it shows, and the replay and
report examples run, on the real conversation trace (and the Azure conversation CSV) where
the README says ``trace.jsonl`` (``trace.csv``)."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import TRACES, have
from test_timing import table

from dynosim.bench import offline_replay_bench as bench
from dynosim.cli import _parser, main

README = Path(__file__).resolve().parents[1] / "README.md"
PROGRAMS = ("dynosim", "offline_replay_bench")


def readme_commands() -> list[tuple[int, list[str]]]:
    """Each ``dynosim`` or ``offline_replay_bench`` command in the README's ``sh`` blocks:
    its line and its words (continuation lines joined, comments dropped)."""
    found = []
    inside, pending, start = False, "", 0
    for number, line in enumerate(README.read_text().splitlines(), 1):
        if line.startswith("```"):
            inside = line == "```sh"
            continue
        if not inside:
            continue
        if not pending:
            start = number
        pending += line.rstrip("\\") + " "
        if line.endswith("\\"):
            continue
        words = shlex.split(pending, comments=True)
        pending = ""
        # "pip install . && dynosim replay" holds a dynosim command after the &&.
        while "&&" in words:
            words = words[words.index("&&") + 1 :]
        if words and words[0] in PROGRAMS:
            found.append((start, words))
    return found


COMMANDS = readme_commands()


def test_the_readme_has_the_examples():
    programs = {(w[0], w[1]) for _, w in COMMANDS}
    for command in ("replay", "sweep", "plan", "report", "render", "validate"):
        assert ("dynosim", command) in programs
    assert len(COMMANDS) >= 25


@pytest.mark.parametrize(("line", "words"), COMMANDS, ids=[f"README:{n}" for n, _ in COMMANDS])
def test_every_readme_command_parses(line, words):
    argv = words[1:]
    if words[0] == "dynosim":
        args = _parser(argv).parse_args(argv)
        assert args.command == (argv[0] if argv else None)
    else:
        bench._parser().parse_args(argv)


def _trace(name: str) -> Path:
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"real trace {path} is not available")
    return path


#: What a placeholder file of the README stands for in a run.
def _files(tmp_path: Path) -> dict[str, Path]:
    profile = tmp_path / "profile.npz"
    np.savez(profile, **{k: np.asarray(v) for k, v in table().items() if k != "model"})
    (tmp_path / "cluster.yaml").write_text("cluster:\n  num_workers: 2\n")
    measured = Path(__file__).parent / "data/measured/aiperf_2025_example.jsonl"
    return {
        "trace.jsonl": _trace("mooncake_conversation.jsonl"),
        "trace.csv": _trace("azure_2023_conv.csv"),
        "profile.npz": profile,
        "profile_export.jsonl": measured,
    }


_NEEDS_AIC = ("--timing", "aic")
_RUN = [
    (n, w) for n, w in COMMANDS if w[0] == "dynosim" and len(w) > 1 and w[1] in ("replay", "report")
]


@pytest.mark.parametrize(("line", "words"), _RUN, ids=[f"README:{n}" for n, _ in _RUN])
def test_readme_replay_and_report_examples_run(line, words, tmp_path, monkeypatch, capsys):
    if "aic" in words and not have("aiconfigurator_core"):
        pytest.skip("needs the aic extra")
    monkeypatch.chdir(tmp_path)
    files = _files(tmp_path)
    argv = [str(files.get(w, w)) for w in words[1:]]
    if argv[0] == "report":
        # The saved reports the README's report examples read: a replay's JSON.
        assert main(["replay", "--json", "run.json"]) == 0
        for name in ("a.json", "b.json"):
            shutil.copy("run.json", name)
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    if argv[0] == "replay" and "--measured" not in argv:
        # What ran is named first, and a trace the README names was the one replayed.
        assert out.startswith("dynosim replay of ")
        trace = next((w for w in words if w in files), None)
        if trace is not None:
            assert files[trace].name in out.splitlines()[0]
    for written in ("run.json", "report.json"):
        if written in argv:
            assert json.loads(Path(written).read_text())["summary"]["num_requests"] > 0


_PLAN = next(
    (n, w)
    for n, w in COMMANDS
    if w[:2] == ["dynosim", "plan"] and "trace.jsonl" in w and "--executor" not in w
)


@pytest.mark.skipif(not have("aiconfigurator_core"), reason="needs the aic extra")
def test_the_readme_plan_example_finds_a_deployment_on_the_real_trace(
    tmp_path, monkeypatch, capsys
):
    # The README's first plan: TensorRT-LLM's default engine rejects the trace's long prompts,
    # so the pick must come from the engine-settings search, reject nothing and validate.
    line, words = _PLAN
    monkeypatch.chdir(tmp_path)
    files = _files(tmp_path)
    argv = [str(files.get(w, w)) for w in words[1:]] + ["--no-progress"]
    assert main(argv) == 0, f"README:{line}: {capsys.readouterr().err}"
    out = capsys.readouterr().out
    assert "pick:" in out and "no request rejected" in out
    out_dir = Path(argv[argv.index("-o") + 1])
    manifest, candidate = out_dir / "k8s_deploy.yaml", out_dir / "candidate.yaml"
    assert main(["validate", str(manifest), "--candidate", str(candidate)]) == 0
