"""Output files: every command checks its output paths before any work (exit 2 naming the
flag and the path), a write that fails anyway exits 2 naming the file, a closed stdout ends
the command quietly, and no interrupted write leaves a partial file under the output's name."""

from __future__ import annotations

import importlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import dynosim
from dynosim._files import atomic_open, write_atomic
from dynosim.cli import main
from dynosim.config.timing_table import write_npz
from dynosim.errors import OutputError

SYNTH = ["--synthetic", "--isl", "64", "--osl", "4", "--rate", "10", "--count", "20"]

#: Where nothing can be created, even by root (tests may run as root, for which file modes
#: do not stop writing).
IMPOSSIBLE = Path("/proc/dynosim-test/out.json")


@pytest.fixture
def no_replay(monkeypatch):
    """Fail the test if the command gets as far as replaying: outputs are checked first."""

    def refuse(*args, **kwargs):
        raise AssertionError("the replay ran before the output path was checked")

    # The command imports the replay when it runs it: patch it where it lives.
    monkeypatch.setattr(importlib.import_module("dynosim.replay"), "replay", refuse)


def _err(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("missing/dir/r.json", "missing/dir does not exist"),
        (".", "is a directory"),
        (str(IMPOSSIBLE), "/proc/dynosim-test does not exist"),
        ("/proc/r.json", "cannot create files in /proc"),
        ("file.txt/r.json", "file.txt is not a directory"),
    ],
)
def test_replay_json_to_an_unusable_path_is_refused_before_the_replay(
    tmp_path, monkeypatch, capsys, no_replay, target, expected
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file.txt").write_text("x")
    assert main(["replay", *SYNTH, "--no-progress", "--json", target]) == 2
    err = _err(capsys)
    assert f"--json {target}" in err and expected in err


def test_replay_json_naming_the_trace_or_the_config_is_refused(tmp_path, capsys, no_replay):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [1]}\n')
    config = tmp_path / "c.yaml"
    config.write_text("cluster: {num_workers: 1}\n")
    for argv in (
        [str(trace), "--json", str(trace)],
        # The same file by another spelling.
        [str(trace), "--json", str(tmp_path / "." / "t.jsonl")],
        [str(trace), "--config", str(config), "--json", str(config)],
    ):
        assert main(["replay", "--no-progress", *argv]) == 2
        assert "is an input of this command" in _err(capsys)
    assert trace.read_text().startswith('{"timestamp": 0')


def test_replay_json_and_html_naming_one_file_is_refused(tmp_path, capsys, no_replay):
    out = str(tmp_path / "r")
    assert main(["replay", *SYNTH, "--json", out, "--html", out]) == 2
    assert "--json and --html name the same file" in _err(capsys)


def test_replay_json_to_a_full_device_exits_2_naming_it(capsys):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    assert main(["replay", *SYNTH, "--no-progress", "--json", "/dev/full"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "dynosim: error: /dev/full: cannot write: No space left on device" in err
    # Written in place: renaming a temporary file over it would have replaced the device.
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_writing_a_device_writes_in_place_and_keeps_it():
    write_atomic("/dev/null", "nothing\n")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dynosim", *argv], capture_output=True, text=True, **kwargs
    )


def test_json_to_stdout_closed_by_its_reader_ends_quietly():
    # `dynosim replay --json - | head -c 10`: the reader takes 10 bytes and goes away.
    proc = subprocess.Popen(
        [sys.executable, "-m", "dynosim", "replay", "--no-progress", "--json", "-"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(10) == b'{"config":'
    proc.stdout.close()
    err = proc.stderr.read().decode()
    # 141 when the closed pipe showed (128 + SIGPIPE, as a shell reports `yes | head`); 0 when
    # the whole JSON fit in the pipe before the reader left.
    assert proc.wait(timeout=60) in (0, 141)
    assert "Traceback" not in err and "Exception ignored" not in err
    assert "TTFT" in err  # the summary went to stderr, whole


def test_a_table_to_stdout_closed_by_its_reader_ends_quietly():
    proc = subprocess.Popen(
        [sys.executable, "-m", "dynosim", "schema"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) in (0, 141)
    assert err == ""


def test_schema_to_a_full_device_exits_2():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "dynosim", "schema"], stdout=full, stderr=subprocess.PIPE
        )
    err = proc.stderr.decode()
    assert proc.returncode == 2
    assert err == "dynosim: error: standard output: No space left on device\n"


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("file.txt", "-o file.txt: is a file; give a directory"),
        ("file.txt/sub", "file.txt is not a directory"),
        ("/proc/dynosim-test/out", "cannot create files in /proc"),
    ],
)
def test_render_sweep_and_plan_refuse_an_unusable_output_dir_first(
    tmp_path, monkeypatch, capsys, target, expected
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file.txt").write_text("x")
    space = tmp_path / "space.yaml"
    space.write_text("cluster.num_workers: [1, 2]\n")
    # The candidate does not exist: the output directory is refused before it is read, and
    # render and plan refuse before AIConfigurator is needed.
    plan = ["plan", *SYNTH, "--model", "m", "--system", "s", "--max-gpus", "8"]
    for argv in (
        ["render", "--candidate", "missing.yaml", "--isl", "10", "--osl", "10"],
        ["sweep", *SYNTH, "--space", str(space), "--no-progress"],
        [*plan, "--sla-ttft-ms", "100"],
    ):
        assert main([*argv, "-o", target]) == 2, argv
        assert expected in _err(capsys)
    assert (tmp_path / "file.txt").read_text() == "x"


def test_bench_outputs_are_checked_before_the_replay(tmp_path, capsys, monkeypatch):
    from dynosim.bench import offline_replay_bench as bench

    def refuse(*args, **kwargs):
        raise AssertionError("the replay ran before the output path was checked")

    monkeypatch.setattr(bench, "run_iteration", refuse)
    trace = dynosim.sample_trace_path()
    for flags, expected in (
        (["--report-json", str(tmp_path)], f"--report-json {tmp_path}: is a directory"),
        (["--timings-jsonl", str(IMPOSSIBLE)], f"--timings-jsonl {IMPOSSIBLE}"),
        (["--canonical-reports-jsonl", str(trace)], "is an input of this command"),
        (
            ["--report-json", str(tmp_path / "a"), "--timings-jsonl", str(tmp_path / "a")],
            "--report-json and --timings-jsonl name the same file",
        ),
    ):
        assert bench.main([str(trace), *flags]) == 2
        err = capsys.readouterr().err
        assert err.startswith("offline_replay_bench: error: ") and expected in err


def test_write_errors_name_the_file(tmp_path):
    with pytest.raises(OutputError, match=r"missing/r.json: cannot write: No such file"):
        write_atomic(tmp_path / "missing" / "r.json", "{}")
    with pytest.raises(OutputError, match="cannot write: Is a directory"):
        write_atomic(tmp_path, "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_interrupted_write_leaves_neither_the_file_nor_its_temporary(tmp_path):
    target = tmp_path / "rows.jsonl"
    target.write_text("the previous complete file\n")
    with pytest.raises(KeyboardInterrupt), atomic_open(target) as fh:
        fh.write('{"row": 1}\n')
        raise KeyboardInterrupt
    assert target.read_text() == "the previous complete file\n"
    assert [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]
    with pytest.raises(KeyboardInterrupt), atomic_open(tmp_path / "t.npz", "wb") as fh:
        fh.write(b"PK")
        raise KeyboardInterrupt
    assert [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]


def test_timing_tables_are_written_through_a_temporary_name(tmp_path, monkeypatch):
    import numpy as np

    def cut(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez_compressed", cut)
    with pytest.raises(KeyboardInterrupt):
        write_npz(tmp_path / "t.npz", {"a": np.zeros(3)})
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_bench_leaves_no_complete_looking_timings(tmp_path, monkeypatch, capsys):
    from dynosim.bench import offline_replay_bench as bench

    real = bench.run_iteration

    def second_interrupted(trace, block, config, i, rss):
        if i == 2:
            raise KeyboardInterrupt
        return real(trace, block, config, i, rss)

    monkeypatch.setattr(bench, "run_iteration", second_interrupted)
    timings, reports = tmp_path / "timings.jsonl", tmp_path / "reports.jsonl"
    argv = [str(dynosim.sample_trace_path()), "--iterations", "3"]
    argv += ["--timings-jsonl", str(timings), "--canonical-reports-jsonl", str(reports)]
    assert bench.main(argv) == 130
    assert capsys.readouterr().err == "offline_replay_bench: interrupted\n"
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_sweep_leaves_only_its_partial_rows(tmp_path, monkeypatch, capsys):
    from dynosim.plan import result

    def cut(self):
        raise KeyboardInterrupt

    # Interrupted while writing the tables, after every replay.
    monkeypatch.setattr(result.SweepResult, "csv_text", cut)
    space = tmp_path / "space.yaml"
    space.write_text("cluster.num_workers: [1, 2]\n")
    out = tmp_path / "out"
    argv = ["sweep", *SYNTH, "--space", str(space), "--no-progress", "-o", str(out)]
    assert main(argv) == 130
    assert capsys.readouterr().err == "dynosim: interrupted\n"
    assert sorted(p.name for p in out.iterdir()) == ["results.jsonl", "results.partial.jsonl"]
    rows = [json.loads(line) for line in (out / "results.partial.jsonl").open()]
    assert sorted(r["index"] for r in rows) == [0, 1]


def test_a_cut_sweep_into_an_earlier_sweeps_directory_leaves_none_of_its_files(
    tmp_path, monkeypatch, capsys
):
    space = tmp_path / "space.yaml"
    space.write_text("cluster.num_workers: [1, 2]\n")
    out = tmp_path / "out"
    argv = ["sweep", *SYNTH, "--space", str(space), "--no-progress", "-o", str(out)]
    assert main(argv) == 0
    assert (out / "results.csv").exists()
    capsys.readouterr()

    from dynosim.plan import result

    def cut(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(result.SweepResult, "jsonl_text", cut)
    assert main(argv) == 130
    # Only this sweep's rows, under a name that says they are partial: the earlier sweep's
    # complete-looking tables are gone.
    assert sorted(p.name for p in out.iterdir()) == ["results.partial.jsonl"]


def test_an_output_dir_where_a_file_would_go_is_a_directory_is_refused(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text("cluster.num_workers: [1, 2]\n")
    out = tmp_path / "out"
    (out / "pareto.csv").mkdir(parents=True)
    argv = ["sweep", *SYNTH, "--space", str(space), "--no-progress", "-o", str(out)]
    assert main(argv) == 2
    assert f"{out / 'pareto.csv'} is a directory; it would be a file" in _err(capsys)


def test_a_link_is_written_through_to_the_file_it_names(tmp_path, capsys):
    real = tmp_path / "real.json"
    real.write_text("old\n")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert main(["replay", *SYNTH, "--no-progress", "--json", str(link)]) == 0
    assert link.is_symlink() and json.loads(real.read_text())["summary"]["num_requests"] == 20
    # A link to the trace is the trace.
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [1]}\n')
    (tmp_path / "alias.json").symlink_to(trace)
    capsys.readouterr()
    assert main(["replay", str(trace), "--json", str(tmp_path / "alias.json")]) == 2
    assert "is an input of this command" in _err(capsys)
