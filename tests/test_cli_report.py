"""``dynosim replay --html`` and ``dynosim report``: pages from a replay or a saved report, and
bad inputs refused (exit 2, naming the path) before any replay or drawing."""

from __future__ import annotations

import importlib
import json
import os

import pytest

from dynosim.cli import EXIT_BAD_INPUT, main

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Two saved reports of the bundled sample: 2 and 4 workers."""
    out = tmp_path_factory.mktemp("runs")
    for workers in (2, 4):
        path = out / f"w{workers}.json"
        argv = ["replay", "--no-progress", "--workers", str(workers), "--json", str(path)]
        assert main(argv) == 0
    return out


def test_replay_writes_an_html_page(tmp_path, capsys):
    page = tmp_path / "run.html"
    assert main(["replay", "--no-progress", "--workers", "2", "--html", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "mooncake_conversation_sample.jsonl" in text
    assert f"wrote {page}" in capsys.readouterr().out


def test_report_from_a_saved_run_and_a_comparison(saved, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(saved / "w2.json")]) == 0
    assert "<h2>Latency distributions</h2>" in (tmp_path / "report.html").read_text()
    assert main(["report", str(saved / "w2.json"), str(saved / "w4.json")]) == 0
    compare = (tmp_path / "compare.html").read_text()
    assert "w2.json vs w4.json" in compare
    out = tmp_path / "named.html"
    argv = ["report", str(saved / "w2.json"), str(saved / "w4.json"), "-o", str(out)]
    assert main([*argv, "--labels", "two", "four"]) == 0
    assert "two vs four" in out.read_text()


def test_a_json_that_is_not_a_report_exits_2_with_its_path(tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    out = tmp_path / "r.html"
    assert main(["report", str(other), "-o", str(out)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert str(other) in err and "not a dynosim report" in err
    assert not out.exists()


def test_a_report_of_another_version_exits_2(saved, tmp_path, capsys):
    data = json.loads((saved / "w2.json").read_text())
    data["format"]["version"] = 99
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    assert main(["report", str(old), "-o", str(tmp_path / "r.html")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert str(old) in err and "version 99" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_output_exits_2_before_the_replay(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert main(["replay", "--no-progress", "--html", str(locked / "r.html")]) == EXIT_BAD_INPUT
    assert str(locked) in capsys.readouterr().err


@pytest.mark.parametrize(
    ("where", "message"),
    [("missing/r.html", "does not exist"), (".", "is a directory")],
)
def test_a_bad_output_path_exits_2_before_the_replay(tmp_path, capsys, monkeypatch, where, message):
    def no_replay(*args, **kwargs):
        raise AssertionError("the replay ran before the output path was checked")

    # The command imports the replay when it runs it: patch it where it lives.
    monkeypatch.setattr(importlib.import_module("dynosim.replay"), "replay", no_replay)
    target = tmp_path / where
    argv = ["replay", "--no-progress", "--html", str(target)]
    assert main(argv) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "--html" in err and message in err


def test_the_page_may_not_overwrite_an_input(saved, capsys):
    run = saved / "w2.json"
    before = run.read_bytes()
    assert main(["report", str(run), "-o", str(run)]) == EXIT_BAD_INPUT
    assert "input of this command" in capsys.readouterr().err
    assert run.read_bytes() == before
