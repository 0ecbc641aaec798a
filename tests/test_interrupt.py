"""Ctrl-C: a running replay stops within a turn of the core's event loop, the command exits
130 with one line on stderr; sweeps stop their running replays and cancel the rest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import group_processes

import dynosim
from dynosim import _core
from dynosim.plan.executors import Runner
from dynosim.workload.prepared import PreparedWorkload

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")

#: Synthetic traffic whose replay takes far longer than the test waits (minutes).
LONG = ["--synthetic", "--isl", "256", "--osl", "64", "--rate", "1000", "--count", "4000000"]


def _replaying(pgid: int) -> bool:
    """Whether a process of group ``pgid`` runs a replay (the binding's thread is named)."""
    for proc in group_processes(pgid):
        try:
            comms = [(t / "comm").read_text().strip() for t in (proc / "task").iterdir()]
        except OSError:
            continue
        if "dynosim-core" in comms:
            return True
    return False


def start_replaying(argv: list[str], wait_s: float = 120) -> subprocess.Popen:
    """``dynosim ARGV`` started in a process group of its own (stderr piped), once a replay of
    it runs."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dynosim", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # A shell without job control starts background jobs with SIGINT ignored, and Python
        # then installs no KeyboardInterrupt handler: give the child the default disposition,
        # as a terminal's foreground job has.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + wait_s
    while not _replaying(proc.pid):
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
            pytest.fail(f"no replay started: {proc.communicate()[1]}")
        time.sleep(0.05)
    return proc


def _interrupt_while_replaying(argv: list[str]) -> tuple[int, str]:
    """Start ``dynosim ARGV`` in a process group of its own, send the group SIGINT (what a
    terminal's Ctrl-C does) once a replay runs; its exit code and stderr."""
    proc = start_replaying(argv)
    try:
        os.killpg(proc.pid, signal.SIGINT)
        # Not a timing assertion: a guard so a replay that ignores Ctrl-C fails the test
        # instead of hanging it (the replay itself would run for minutes).
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, err


@pytest.mark.parametrize("progress", [[], ["--no-progress"]])
def test_ctrl_c_stops_a_long_replay_with_exit_130_and_one_line(progress):
    code, err = _interrupt_while_replaying(["replay", *LONG, *progress])
    assert code == 130
    assert err == "dynosim: interrupted\n"


@pytest.mark.parametrize(
    ("executor", "progress"),
    [("threads", []), ("threads", ["--no-progress"]), ("processes", ["--no-progress"])],
)
def test_ctrl_c_stops_a_sweep_with_exit_130_and_one_line(tmp_path, executor, progress):
    space = tmp_path / "space.yaml"
    space.write_text("cluster.num_workers: [1, 2, 3, 4]\n")
    out = tmp_path / "out"
    # With the progress bar asked for, stderr (a pipe here) still gets only the one line.
    argv = ["sweep", *LONG, "--space", str(space), "-o", str(out), *progress]
    code, err = _interrupt_while_replaying([*argv, "--executor", executor, "--jobs", "2"])
    assert code == 130
    assert err == "dynosim: interrupted\n"
    # No replay finished: no rows, and no table that looks complete.
    assert not out.exists() or list(out.iterdir()) == []


def _long_columns():
    return dynosim.SyntheticWorkload(isl=64, osl=16, rate=1000.0, count=2_000_000).columns()


def test_an_interrupted_control_raises_keyboard_interrupt_at_once():
    prepared = PreparedWorkload(_long_columns())
    control = _core.Control()
    control.interrupt()
    with pytest.raises(KeyboardInterrupt, match="interrupted after 0 requests"):
        prepared.replay_summary(dynosim.SimConfig().model_dump_json(), control)


def test_interrupting_a_control_stops_replays_in_other_threads():
    prepared = PreparedWorkload(_long_columns())
    control = _core.Control()
    raised: list[BaseException] = []

    def replay() -> None:
        try:
            prepared.replay_summary(dynosim.SimConfig().model_dump_json(), control)
        except BaseException as e:  # what the thread ended with is the result
            raised.append(e)

    threads = [threading.Thread(target=replay) for _ in range(2)]
    for t in threads:
        t.start()
    while control.done == 0:  # both wait for the block names; one then replays
        time.sleep(0.01)
    control.interrupt()
    for t in threads:
        t.join(timeout=60)
    assert [type(e) for e in raised] == [KeyboardInterrupt, KeyboardInterrupt]
    assert control.interrupted


def test_closing_a_runner_stops_its_thread_replays():
    runner = Runner(_long_columns(), "threads", jobs=1)
    runner.submit("a", dynosim.SimConfig().model_dump_json())
    future = next(iter(runner._pending))
    while not future.running():
        time.sleep(0.01)
    runner.close()  # what leaving the sweep on Ctrl-C does
    with pytest.raises(KeyboardInterrupt):
        future.result(timeout=60)
