"""Shared fixtures of the benchmark suites: the full Mooncake conversation trace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import dynosim

#: The project's shared traces sit beside the repository (CI clones it next to shared/);
#: $DYNOSIM_TRACES names their folder elsewhere (a git worktree, say).
_DIR = Path(__file__).resolve().parents[2] / "shared/data/traces"
TRACE = Path(os.environ.get("DYNOSIM_TRACES", _DIR)) / "mooncake_conversation.jsonl"


@pytest.fixture(scope="session")
def conversation_path() -> Path:
    """Path of the full conversation trace (12,031 rows); skips when it is not there."""
    if not TRACE.exists():
        pytest.skip(f"{TRACE} is not available")
    return TRACE


@pytest.fixture(scope="session")
def conversation(conversation_path):
    """The full conversation trace as columns, loaded once per session."""
    return dynosim.load_trace(conversation_path).columns()
