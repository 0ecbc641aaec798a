"""Fuzzing the readers and the configuration checks: whatever a trace file or a configuration
holds, dynosim answers with one of its own errors (a ``DynosimError``) or, for a trace, a
replay whose counts add up; never another exception, never a crash. Bounded: a few seconds
each (few examples, small inputs, a small cache that rejects the longest requests at once)."""

from __future__ import annotations

import itertools
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


# --- saved reports, measured runs, space files (issue 32) -------------------------------------

#: Hostile values that are valid JSON (no NaN: the readers' JSON has none), including sizes
#: past every integer type and long text.
JSON_HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, -1, 2**32, 2**64, 10**400, -(10**400), 1e308, "", "x" * 5000]),
    st.integers(-1000, 5000),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.lists(st.integers(-5, 2**64), max_size=4),
    st.recursive(st.integers(), lambda inner: st.lists(inner, max_size=3), max_leaves=20),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path of nested mappings (lists are leaves)."""
    out = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            out += _paths(value, (*prefix, key))
    return out


def _mutate(data: Any, draw: st.DrawFn) -> Any:
    """``data`` with a few key paths set to hostile values, deleted, or given an unknown key."""
    paths = _paths(data)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        node = data
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict) or path[-1] not in node:
            continue  # replaced or removed by an earlier change
        action = draw(st.sampled_from(["set", "set", "set", "delete", "extra"]))
        if action == "delete":
            del node[path[-1]]
        elif action == "extra":
            node[draw(st.text(min_size=1, max_size=4))] = draw(JSON_HOSTILE)
        else:
            node[path[-1]] = draw(JSON_HOSTILE)
    return data


def _small_report_json() -> str:
    work = dynosim.SyntheticWorkload(isl=64, osl=4, count=6, rate=10.0)
    config = {"offload": {"g2_blocks": 8}, "kv_transfer": {"kv_bytes_per_token": 2}}
    return dynosim.replay(work, config, progress=False).to_json()


REPORT = _small_report_json()


@FUZZ
@given(data=st.data())
def test_report_fuzz_gives_a_report_error_or_a_report_that_draws(tmp_path, data):
    from dynosim.report import load_report

    doc = _mutate(json.loads(REPORT), data.draw)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    try:
        report = load_report(path)
    except DynosimError as exc:
        assert len(str(exc)) < 1000 + len(str(path)), str(exc)[:300]
        return
    # What the schema lets through reads back and serialises (the page needs matplotlib).
    assert json.loads(report.to_json())["summary"]["num_requests"] == len(report.requests["status"])


def _aiperf_record(draw: st.DrawFn) -> dict[str, Any]:
    record = {
        "metadata": {"benchmark_phase": "profiling", "request_start_ns": 1_000_000_000},
        "metrics": {
            "time_to_first_token": {"value": 12.5, "unit": "ms"},
            "request_latency": {"value": 50.0, "unit": "ms"},
            "input_sequence_length": {"value": 100, "unit": "tokens"},
            "output_sequence_length": {"value": 5, "unit": "tokens"},
            "inter_chunk_latency": {"value": [9.0, 9.5, 9.2, 9.8], "unit": "ms"},
        },
        "error": None,
    }
    return _mutate(record, draw) if draw(st.booleans()) else record


VLLM = {
    "input_lens": [100, 200, 50],
    "output_lens": [5, 3, 0],
    "ttfts": [0.05, 0.08, 0.0],
    "itls": [[0.01] * 4, [0.02] * 2, []],
    "errors": ["", "", "boom"],
    "start_times": [10.0, 10.5, 11.0],
    "request_rate": 2.0,
    "burstiness": 1.0,
}


@FUZZ
@given(data=st.data(), kind=st.sampled_from(["aiperf", "vllm-bench"]))
def test_measured_fuzz_gives_a_workload_error_or_a_consistent_run(tmp_path, data, kind):
    from dynosim.workload.measured import load_measured

    if kind == "aiperf":
        records = data.draw(st.lists(st.builds(lambda: None), min_size=1, max_size=4))
        text = "".join(json.dumps(_aiperf_record(data.draw)) + "\n" for _ in records)
    else:
        doc = json.loads(json.dumps(VLLM))
        for key in data.draw(st.lists(st.sampled_from(sorted(doc)), max_size=3)):
            doc[key] = data.draw(JSON_HOSTILE | st.lists(JSON_HOSTILE, min_size=3, max_size=3))
        text = json.dumps(doc)
    path = tmp_path / "run.json"
    path.write_text(text)
    try:
        run = load_measured(path, format=data.draw(st.sampled_from([None, kind])))
    except DynosimError as exc:
        assert len(str(exc)) < 1000 + len(str(path)), str(exc)[:300]
        return
    n = len(run)
    assert len(run.ttft_ms) == len(run.e2e_ms) == n and sum(run.not_replayed.values()) + n == (
        run.num_records
    )


SPACE_PATHS = ["cluster.num_workers", "engine.max_num_seqs", "sla.ttft_ms", "cluster.router"]


@FUZZ
@given(data=st.data())
def test_space_file_fuzz_gives_a_config_error_or_valid_candidates(tmp_path, data):
    from dynosim.plan import Space

    doc: dict[str, Any] = {}
    for path in data.draw(
        st.lists(st.sampled_from([*SPACE_PATHS, "bogus.path", "zip"]), max_size=3)
    ):
        doc[path] = data.draw(
            st.lists(JSON_HOSTILE, max_size=3)
            | JSON_HOSTILE
            | st.dictionaries(
                st.sampled_from(SPACE_PATHS), st.lists(JSON_HOSTILE, max_size=2), max_size=2
            )
        )
    path = tmp_path / "space.yaml"
    path.write_text(json.dumps(doc))
    try:
        space = Space.load(path)
        configs = list(itertools.islice(space.configs(SimConfig()), 4))
    except DynosimError as exc:
        assert len(str(exc)) < 1000 + len(str(path)), str(exc)[:300]
        return
    assert configs and all(isinstance(c, SimConfig) for c in configs)


# --- no error message is longer than a bound, whatever the input ------------------------------

#: The most characters an error message takes beyond the file name it starts with.
MESSAGE_BOUND = 2000

#: Text that is long, or long and deep, or huge as a number: what a message must not copy.
HUGE = st.sampled_from(["k" * 100_000, 10**4000, -(10**300), [[[[[[1] * 50] * 5] * 5] * 5]]])
ANY = st.one_of(JSON_HOSTILE, HUGE, st.text(max_size=50))


@st.composite
def hostile_document(draw: st.DrawFn, keys: list[str]) -> Any:
    """A mapping of real and made-up keys (long ones too) to hostile values, nested a little."""
    names = st.sampled_from([*keys, "x" * 100_000, "unknown"])
    inner = st.dictionaries(names, ANY, max_size=3)
    return draw(st.dictionaries(names, ANY | inner, max_size=4))


def _short(message: str, path: Path) -> None:
    assert len(message) <= MESSAGE_BOUND + len(str(path)), (len(message), message[:300])


READERS = {
    "configuration": (
        lambda p: dynosim.load_config(p),
        [*SECTIONS, "cluster"],
    ),
    "candidate": (
        lambda p: dynosim.load_candidate(p),
        ["mode", "model", "system", "backend", "backend_version", "block_size", "aggregated"],
    ),
    "space": (lambda p: dynosim.Space.load(p), [*SPACE_PATHS, "zip"]),
    "report": (lambda p: dynosim.load_report(p), ["format", "summary", "config", "requests"]),
    "measured": (
        lambda p: dynosim.load_measured(p),
        ["input_lens", "output_lens", "ttfts", "itls", "errors", "metadata", "metrics"],
    ),
    "mooncake trace": (
        lambda p: load_trace(p, format="mooncake").columns(),
        ["timestamp", "input_length", "output_length", "hash_ids", "session_id", "delay_ms"],
    ),
}


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)
@given(data=st.data(), kind=st.sampled_from(sorted(READERS)))
def test_no_error_message_is_longer_than_a_bound_whatever_the_input(tmp_path, data, kind):
    read, keys = READERS[kind]
    doc = data.draw(hostile_document(keys))
    if kind == "report" and data.draw(st.booleans()):
        doc = {**json.loads(REPORT), **doc}
    if kind == "report":
        doc.setdefault("format", {"name": "dynosim-report", "version": 1})
    path = tmp_path / ("doc.jsonl" if kind == "mooncake trace" else "doc.json")
    path.write_text(json.dumps(doc) + "\n")
    try:
        read(path)
    except DynosimError as exc:
        _short(str(exc), path)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)
@given(doc=hostile_document(["apiVersion", "kind", "metadata", "spec"]))
def test_no_manifest_problem_is_longer_than_a_bound(tmp_path, doc):
    from dynosim.deploy import validate_manifest

    path = tmp_path / "k8s_deploy.yaml"
    path.write_text(json.dumps({"kind": "DynamoGraphDeployment", **doc}) + "\n")
    for problem in validate_manifest(path):
        _short(str(problem), path)
