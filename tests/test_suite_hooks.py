"""The test command's own output: progress lines past the capture, and skipped real-trace and
browser tests named at the end."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _pytest(folder: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)],
        capture_output=True,
        text=True,
        cwd=folder,
        env={**os.environ, **env},
        timeout=300,
    )
    return done.stdout + done.stderr


def test_progress_lines_and_skipped_real_traces_are_said(tmp_path):
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_one.py").write_text(
        "import time\n"
        "from conftest import ticking\n\n"
        "def test_builds(progress):\n"
        "    progress('building the thing')\n"
        "    with ticking(progress, 'the thing', every_s=0.2):\n"
        "        time.sleep(0.5)\n\n"
        "def test_on_a_trace(real_trace):\n"
        "    real_trace('mooncake_conversation.jsonl')\n"
    )
    out = _pytest(tmp_path, {"DYNOSIM_TRACES": str(tmp_path / "none")})
    assert "dynosim tests: building the thing" in out
    assert "dynosim tests: the thing: still going after 0.0 min" in out
    assert "dynosim tests: 1 real-trace tests skipped (set $DYNOSIM_TRACES" in out
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "mooncake_conversation.jsonl").touch()
    out = _pytest(tmp_path, {"DYNOSIM_TRACES": str(traces)})
    assert "2 passed" in out and "skipped" not in out
