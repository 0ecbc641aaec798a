"""Fuzzing the readers and the configuration checks: whatever a trace file or a configuration
holds, dynosim answers with one of its own errors (a ``DynosimError``) or, for a trace, a
replay whose counts add up; never another exception, never a crash. Bounded: a few seconds
each (few examples, small inputs, a small cache that rejects the longest requests at once)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dynosim
from dynosim import SimConfig, load_trace
from dynosim.config import resolve
from dynosim.errors import DynosimError

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

#: A small cluster: a request longer than its 64 x 16-token cache is rejected when it arrives,
#: so no example simulates billions of tokens; 1 ms time-series buckets, which the core widens
#: as the span needs (at most 2,048 of them whatever the timestamps).
REPLAY_CONFIG = {
    "cluster": {"num_workers": 2},
    "engine": {"block_size": 16, "num_gpu_blocks": 64, "max_num_batched_tokens": 256},
    "timing": {"model": "fixed", "prefill_ms": 5.0, "decode_ms": 1.0},
    "report": {"sample_interval_ms": 1.0},
}

#: Values a hostile file puts anywhere: wrong types, boundaries of the integer types,
#: non-finite floats.
HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, 1, -1, 2**31, 2**32 - 1, 2**32, 2**63, 2**64, 2**70, -(2**63)]),
    st.integers(-1000, 5000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.lists(st.integers(-5, 2**64), max_size=4),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def check_replay(path: Path, **kwargs: Any) -> None:
    """Load and replay ``path``: a dynosim error, or a report whose counts add up."""
    try:
        cols = load_trace(path, **kwargs).columns()
        report = dynosim.replay(cols, REPLAY_CONFIG)
    except DynosimError:
        return
    s = report.summary
    assert s["num_requests"] == len(cols)
    assert s["completed_requests"] + s["rejected_requests"] == s["num_requests"]
    requests = report.requests
    assert len(requests["ttft_ms"]) == len(cols)


@st.composite
def mooncake_line(draw: st.DrawFn, block: int) -> bytes:
    """A JSONL line: a well-formed row, a row with hostile values, or arbitrary bytes."""
    kind = draw(st.sampled_from(["row"] * 12 + ["hostile"] * 3 + ["bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=40)).replace(b"\n", b" ")
    # Timestamps up to 1e15 ms (30,000 years): the time series stay bounded whatever the span.
    isl = draw(st.integers(1, 3000))
    row: dict[str, Any] = {
        "timestamp": draw(st.integers(0, 10**15) | st.floats(0, 1e15)),
        "input_length": isl,
        "output_length": draw(st.integers(1, 3000)),
        "hash_ids": draw(
            st.lists(st.integers(0, 30), min_size=-(-isl // block), max_size=-(-isl // block))
        ),
    }
    if draw(st.booleans()):
        row["session_id"] = draw(st.integers(0, 3) | st.text(max_size=2))
    if kind == "hostile":
        field = draw(
            st.sampled_from(
                ["input_length", "output_length", "hash_ids", "session_id", "delay_ms", "extra"]
            )
        )
        row[field] = draw(HOSTILE)
        if draw(st.booleans()):
            del row[draw(st.sampled_from(sorted(row)))]
    text = json.dumps(row, allow_nan=True)
    return text.encode()


@FUZZ
@given(data=st.data(), block=st.sampled_from([1, 16, 512]))
def test_mooncake_fuzz_gives_a_dynosim_error_or_a_consistent_report(tmp_path, data, block):
    lines = data.draw(st.lists(mooncake_line(block), min_size=0, max_size=8))
    ending = data.draw(st.sampled_from([b"\n", b"\r\n"]))
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(ending.join(lines))
    check_replay(path, trace_block_size=block)


@st.composite
def azure_line(draw: st.DrawFn) -> str:
    """A CSV line: a well-formed row within a day, a row with a hostile field, or any text."""
    kind = draw(st.sampled_from(["row"] * 12 + ["hostile"] * 3 + ["text"]))
    if kind == "text":
        return draw(st.text(max_size=40)).replace("\n", " ").replace("\r", " ")
    stamp = (
        f"2023-11-16 {draw(st.integers(0, 23)):02d}:{draw(st.integers(0, 59)):02d}:"
        f"{draw(st.integers(0, 59)):02d}.{draw(st.integers(0, 9_999_999)):07d}"
    )
    fields = [stamp, str(draw(st.integers(1, 3000))), str(draw(st.integers(1, 3000)))]
    if kind == "hostile":
        fields[draw(st.integers(0, 2))] = str(draw(HOSTILE))
    return ",".join(fields)


@FUZZ
@given(lines=st.lists(azure_line(), max_size=8), header=st.sampled_from([True] * 9 + [False]))
def test_azure_fuzz_gives_a_dynosim_error_or_a_consistent_report(tmp_path, lines, header):
    head = ["TIMESTAMP,ContextTokens,GeneratedTokens"] if header else []
    path = tmp_path / "fuzz.csv"
    path.write_text("\n".join(head + lines), encoding="utf-8")
    check_replay(path, trace_block_size=16)


DEFAULTS = SimConfig().model_dump()
#: Each section of the configuration and its keys (the defaults name them all).
SECTIONS = {
    name: sorted(value) if isinstance(value, dict) else [] for name, value in DEFAULTS.items()
}


def plausible(default: Any) -> st.SearchStrategy[Any]:
    """Values of the default's type, near and past the limits."""
    if isinstance(default, bool):
        return st.booleans()
    if isinstance(default, int):
        return st.integers(0, 300_000) | st.sampled_from([2**31, 2**32 - 1])
    if isinstance(default, float):
        return st.floats(0, 1e7) | st.sampled_from([1e-300, 1e300])
    if isinstance(default, str):
        return st.sampled_from([default, "disaggregated", "kv_aware", "fifo", "line_rate"])
    return st.integers(1, 1000) | st.floats(0.1, 1e4)


@st.composite
def config_document(draw: st.DrawFn) -> dict[str, Any]:
    """A configuration with a few keys (real ones, mostly) set to valid or hostile values."""
    doc: dict[str, Any] = {}
    for _ in range(draw(st.integers(1, 3))):
        section = draw(st.sampled_from([*SECTIONS, "bogus"]))
        keys = SECTIONS.get(section) or ["x"]
        key = draw(st.sampled_from([*keys, *keys, "model", "unknown"]))
        default = (
            DEFAULTS.get(section, {}).get(key) if isinstance(DEFAULTS.get(section), dict) else None
        )
        value = draw(plausible(default) if draw(st.integers(0, 3)) else HOSTILE)
        holder = doc.setdefault(section, {})
        if isinstance(holder, dict):
            holder[key] = value
    if draw(st.integers(0, 9)) == 0:
        doc[draw(st.sampled_from(sorted(SECTIONS)))] = draw(HOSTILE)
    return doc


@settings(max_examples=300, deadline=None)
@given(doc=config_document())
def test_config_fuzz_gives_a_config_error_or_a_valid_config(doc):
    try:
        config = SimConfig.model_validate(doc)
    except DynosimError as exc:
        # Every error names where it is: a dotted path, or the document.
        assert str(exc).strip(), doc
        return
    # A valid configuration: the core agrees (an unset num_gpu_blocks, which no model sizes
    # here, is its default), resolves it, and counts its GPUs exactly.
    normalized = json.loads(dynosim._core.normalize_config_json(config.model_dump_json()))
    expected = config.model_dump()
    for holder in (expected, expected["prefill"], expected["decode"]):
        engine = holder["engine"]
        if engine is not None and engine["num_gpu_blocks"] is None:
            engine["num_gpu_blocks"] = dynosim.config.DEFAULT_NUM_GPU_BLOCKS
    assert SimConfig.model_validate(normalized) == SimConfig.model_validate(expected)
    view = resolve(config)
    assert view.num_gpus == sum(r.workers * r.gpus_per_worker for r in view.roles.values())
    assert view.num_gpus <= dynosim.config.LIMITS["max_gpus"]
