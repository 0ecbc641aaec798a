"""Shared test helpers: where the real traces are, and small in-memory workloads."""

from __future__ import annotations

import copy
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st

from dynosim import TraceColumns


def have(module: str) -> bool:
    """Whether an optional dependency is importable."""
    try:
        __import__(module)
    except ImportError:
        return False
    return True


#: Marks tests that need AIConfigurator (the ``aic`` extra).
needs_aic = pytest.mark.skipif(
    not have("aiconfigurator_core"), reason="needs the aic extra (pip install 'dynosim[aic]')"
)

#: The project's shared traces sit beside the repository (CI clones it next to shared/);
#: $DYNOSIM_TRACES names their folder elsewhere (a git worktree, say).
TRACES = Path(
    os.environ.get("DYNOSIM_TRACES", Path(__file__).resolve().parents[2] / "shared/data/traces")
)


def group_processes(pgid: int) -> list[Path]:
    """The ``/proc`` entries of the processes of group ``pgid`` (Linux)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.getpgid(int(proc.name)) == pgid:
                found.append(proc)
        except (OSError, ProcessLookupError):
            continue
    return found


@pytest.fixture
def real_trace() -> Callable[[str], Path]:
    """Path of a real trace in shared/data/traces; skips the test when it is not there."""

    def find(name: str) -> Path:
        path = TRACES / name
        if not path.exists():
            pytest.skip(f"real trace {path} is not available")
        return path

    return find


def make_columns(
    rows: Sequence[tuple[float, int, int, Sequence[int]]], trace_block_size: int = 512
) -> TraceColumns:
    """Columns from (arrival ms, input tokens, output tokens, hash ids) rows."""
    ids = [h for *_, hashes in rows for h in hashes]
    offsets = np.cumsum([0, *(len(r[3]) for r in rows)], dtype=np.uint64)
    return TraceColumns(
        arrival_ms=np.array([r[0] for r in rows], dtype=np.float64),
        input_length=np.array([r[1] for r in rows], dtype=np.uint32),
        output_length=np.array([r[2] for r in rows], dtype=np.uint32),
        hash_offsets=offsets,
        hash_ids=np.array(ids, dtype=np.uint64),
        trace_block_size=trace_block_size,
    )


@pytest.fixture
def columns() -> Callable[..., TraceColumns]:
    """Factory of in-memory columns: ``columns([(t_ms, isl, osl, [ids...]), ...], tbs)``."""
    return make_columns


def head_columns(cols: TraceColumns, n: int) -> TraceColumns:
    """The first ``n`` requests of ``cols`` (a trace without sessions)."""
    end = int(cols.hash_offsets[n])
    return TraceColumns(
        arrival_ms=cols.arrival_ms[:n].copy(),
        input_length=cols.input_length[:n].copy(),
        output_length=cols.output_length[:n].copy(),
        hash_offsets=cols.hash_offsets[: n + 1].copy(),
        hash_ids=cols.hash_ids[:end].copy(),
        trace_block_size=cols.trace_block_size,
    )


#: Random request rows for property tests: (gap ms, prompt tokens, output tokens, prefix
#: family), 1 to 40 of them.
requests_strategy = st.lists(
    st.tuples(
        st.integers(0, 50),  # gap ms
        st.integers(1, 80),  # prompt tokens
        st.integers(1, 30),  # output tokens
        st.integers(0, 2),  # prefix family
    ),
    min_size=1,
    max_size=40,
)


#: vLLM's engine as Dynamo's mocker and AISimulate run it: each pass formed when the one before
#: ends, a request admitted once its first chunk fits (what comparing with them needs).
PEER_VLLM = {"async_scheduling": False, "scheduler_reserve_full_isl": False}


def peer_config(data: dict | None = None):
    """The configuration ``data`` describes (a dict, as ``dynosim.load_config`` takes), its vLLM
    engines (the shared one and a role's own) set as the peers run them (``PEER_VLLM``)."""
    import dynosim

    data = copy.deepcopy(data or {})
    holders = [data, *(data[role] for role in ("prefill", "decode") if data.get(role))]
    for i, holder in enumerate(holders):
        engine = holder.get("engine")
        if engine is None and i > 0:
            continue  # a role without its own engine runs the shared one
        engine = holder.setdefault("engine", {})
        if engine.get("backend", "vllm") == "vllm":
            engine.update({k: v for k, v in PEER_VLLM.items() if k not in engine})
    return dynosim.load_config(data)


@pytest.fixture(scope="session")
def progress(pytestconfig: pytest.Config) -> Callable[[str], None]:
    """A function that prints a line on the terminal at once, past pytest's output capture:
    for a fixture that works for minutes (building AISimulate's replay), so the run does not
    look hung."""

    def say(line: str) -> None:
        reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
        capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
        if reporter is None or capture is None:
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"dynosim tests: {line}")

    return say


@contextmanager
def ticking(say: Callable[[str], None], what: str, every_s: float = 60.0) -> Iterator[None]:
    """While the block runs, ``say`` a line every ``every_s`` seconds that ``what`` is still
    going, with the minutes so far (nothing when it ends sooner: a binary found built)."""
    done = threading.Event()
    start = time.monotonic()

    def tick() -> None:
        while not done.wait(every_s):
            say(f"{what}: still going after {(time.monotonic() - start) / 60.0:.1f} min")

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


#: Skips a run should say aloud whatever the -r flags: they leave a part of the suite untried.
_TOLD_SKIPS = {
    "real trace": "real-trace tests skipped (set $DYNOSIM_TRACES to the traces' folder)",
    "chromium": "browser tests skipped (headless Chromium not installed)",
}


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Name the real-trace and browser tests that were skipped, with how to run them."""
    counts = dict.fromkeys(_TOLD_SKIPS, 0)
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        for key in _TOLD_SKIPS:
            if key in reason:
                counts[key] += 1
    for key, count in counts.items():
        if count:
            terminalreporter.write_line(f"dynosim tests: {count} {_TOLD_SKIPS[key]}", yellow=True)
