"""Tests of dynosim.workload: trace loading, validation, the workload rule, synthetic arrivals."""

from __future__ import annotations

import copy
import csv
import dataclasses
import gc
import hashlib
import json
import math
import pickle
import random
import re
import warnings
from datetime import datetime
from pathlib import Path

import numpy as np
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dynosim
from dynosim.errors import WorkloadError
from dynosim.workload import (
    EmpiricalLength,
    LognormalLength,
    NormalLength,
    SyntheticWorkload,
    TraceColumns,
    TraceWorkload,
    UniformLength,
    Workload,
    load_trace,
)

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def row(**fields) -> dict:
    base = {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
    base.update(fields)
    return base


def write_rows(path: Path, rows: list[dict]) -> Path:
    return write(path, [json.dumps(r) for r in rows])


def requests(cols: TraceColumns) -> list[tuple[float, int, int, list[int]]]:
    """Each request as (arrival ms, input tokens, output tokens, hash ids)."""
    return [
        (
            float(cols.arrival_ms[i]),
            int(cols.input_length[i]),
            int(cols.output_length[i]),
            cols.hash_ids[cols.hash_offsets[i] : cols.hash_offsets[i + 1]].tolist(),
        )
        for i in range(len(cols))
    ]


def assert_same_columns(a: TraceColumns, b: TraceColumns) -> None:
    assert a.trace_block_size == b.trace_block_size
    for field in ("arrival_ms", "input_length", "output_length", "hash_offsets", "hash_ids"):
        x, y = getattr(a, field), getattr(b, field)
        assert x.dtype == y.dtype, field
        np.testing.assert_array_equal(x, y, err_msg=field)


def assert_well_formed(cols: TraceColumns) -> None:
    """The TraceColumns contract, checked independently of __post_init__."""
    n = len(cols)
    assert cols.arrival_ms.dtype == np.float64 and cols.arrival_ms.shape == (n,)
    assert cols.input_length.dtype == np.uint32 and cols.input_length.shape == (n,)
    assert cols.output_length.dtype == np.uint32 and cols.output_length.shape == (n,)
    assert cols.hash_offsets.dtype == np.uint64 and cols.hash_offsets.shape == (n + 1,)
    assert cols.hash_ids.dtype == np.uint64
    for field in ("arrival_ms", "input_length", "output_length", "hash_offsets", "hash_ids"):
        assert getattr(cols, field).flags.c_contiguous, field
    assert cols.arrival_ms[0] == 0.0
    assert (np.diff(cols.arrival_ms) >= 0).all()
    assert (cols.output_length >= 1).all()
    offsets = cols.hash_offsets.astype(np.int64)
    assert offsets[0] == 0 and offsets[-1] == len(cols.hash_ids)
    counts = np.diff(offsets)
    assert (counts >= 0).all()
    assert (counts * cols.trace_block_size >= cols.input_length).all()


# Real traces


@pytest.mark.parametrize(
    ("name", "rows", "span_s"),
    [
        ("mooncake_conversation.jsonl", 12_031, 3_537),
        ("mooncake_synthetic.jsonl", 3_993, 1_022),
        ("azure_2023_conv.csv", 19_366, 3_502),
        ("azure_2023_code.csv", 8_819, 3_436),
    ],
)
def test_real_trace_loads(real_trace, name, rows, span_s):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the published traces are sorted: no warning
        workload = load_trace(real_trace(name))
    cols = workload.columns()
    assert len(cols) == rows
    assert_well_formed(cols)
    assert round(cols.arrival_ms[-1] / 1000) == span_s  # spans from SOURCES.md
    assert workload.columns() is cols  # read once, then cached


def test_mooncake_conversation_matches_independent_parse(real_trace):
    path = real_trace("mooncake_conversation.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    cols = load_trace(path).columns()
    assert int(cols.input_length.sum(dtype=np.int64)) == sum(r["input_length"] for r in rows)
    assert cols.output_length.tolist() == [r["output_length"] for r in rows]
    assert cols.hash_ids.tolist() == [h for r in rows for h in r["hash_ids"]]
    assert np.diff(cols.hash_offsets).tolist() == [len(r["hash_ids"]) for r in rows]
    first = rows[0]["timestamp"]
    assert cols.arrival_ms.tolist() == [r["timestamp"] - first for r in rows]


@pytest.mark.parametrize(
    "name", ["mooncake_conversation.jsonl", "mooncake_synthetic.jsonl", "azure_2023_conv.csv"]
)
def test_a_shuffled_file_is_sorted_back_to_the_file_in_arrival_order(real_trace, name, tmp_path):
    # The file in arrival order skips the reordering; the same rows with their timestamp groups
    # shuffled (rows of one timestamp keep their order, so a stable sort restores the file)
    # take it, and must give the same arrays and the same report.
    path = real_trace(name)
    lines = path.read_text().splitlines()
    header, rows = (lines[:1], lines[1:]) if name.endswith(".csv") else ([], lines)

    def stamp(line: str) -> str:
        return line.split(",")[0] if header else str(json.loads(line)["timestamp"])

    groups: dict[str, list[str]] = {}
    for line in rows:
        groups.setdefault(stamp(line), []).append(line)
    order = list(groups)
    random.Random(7).shuffle(order)
    shuffled = tmp_path / path.name
    shuffled.write_text("\n".join(header + [line for key in order for line in groups[key]]))
    in_order = load_trace(path)
    with pytest.warns(UserWarning, match="rows arrive earlier than a row above them"):
        sorted_back = load_trace(shuffled)
    for field in dataclasses.fields(TraceColumns):
        a = getattr(in_order.columns(), field.name)
        b = getattr(sorted_back.columns(), field.name)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), field.name
        else:
            assert a == b, field.name
    config = {"cluster": {"num_workers": 2}}
    assert dynosim.replay(in_order, config).summary == dynosim.replay(sorted_back, config).summary


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-(2**62), 2**62) | st.sampled_from([0, 1, 2]), max_size=40))
def test_the_cores_arrival_order_is_numpys_stable_sort(times):
    # The core's order against numpy's stable argsort, and its late rows against the running
    # maximum of the rows above (the slow reference).
    stamps = np.array(times, dtype=np.int64)
    got = dynosim._core.arrival_order(stamps)
    late = np.zeros(len(stamps), dtype=bool)
    late[1:] = stamps[1:] < np.maximum.accumulate(stamps)[:-1]
    if not late.any():
        assert got is None
        return
    order, count, first = got
    assert order.tolist() == np.argsort(stamps, kind="stable").tolist()
    assert (count, first) == (int(late.sum()), int(np.argmax(late)))


def test_a_mooncake_files_columns_are_read_only_views_of_the_requests_the_core_holds(tmp_path):
    path = write_rows(tmp_path / "t.jsonl", [row(timestamp=5), row(timestamp=9)])
    workload = load_trace(path)
    requests = workload.requests()
    assert len(requests) == 2 and requests.trace_block_size == 512
    cols = workload.columns()
    base = cols.arrival_ms.base
    assert base is not None and not base.flags.writeable
    with pytest.raises(ValueError):
        base.flags.writeable = True  # the core's memory cannot be made writable
    # The views keep the core's requests alive after everything else is gone.
    arrivals = cols.arrival_ms
    del workload, requests, cols, base
    gc.collect()
    assert arrivals.tolist() == [0.0, 4.0]


def test_a_loaded_trace_pickles_and_copies_with_its_requests(tmp_path):
    # The core's requests ship as their columns; the copy replays to the same report.
    path = write_rows(
        tmp_path / "t.jsonl",
        [row(timestamp=9, session_id="s"), row(timestamp=5), row(timestamp=12, session_id="s")],
    )
    with pytest.warns(UserWarning):
        workload = load_trace(path)
    for copied in (pickle.loads(pickle.dumps(workload)), copy.deepcopy(workload)):
        assert copied.sha256() == workload.sha256()
        for field in ("arrival_ms", "hash_ids", "session", "delay_ms"):
            a, b = getattr(copied.columns(), field), getattr(workload.columns(), field)
            assert a.tobytes() == b.tobytes(), field
        assert dynosim.replay(copied).to_json() == dynosim.replay(workload).to_json()


@pytest.mark.parametrize("name", ["azure_2023_conv.csv", "azure_2023_code.csv"])
def test_azure_matches_independent_parse(real_trace, name):
    path = real_trace(name)
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    cols = load_trace(path).columns()
    assert cols.input_length.tolist() == [int(r["ContextTokens"]) for r in rows]
    assert cols.output_length.tolist() == [int(r["GeneratedTokens"]) for r in rows]
    # strptime takes 6 fractional digits; the file has 7, so allow 1 us of truncation.
    stamps = [datetime.strptime(r["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f") for r in rows]
    expected_ms = [(t - stamps[0]).total_seconds() * 1000 for t in stamps]
    np.testing.assert_allclose(cols.arrival_ms, expected_ms, rtol=0, atol=2e-3)
    # No prefix information: ceil(input / 512) fresh ids per request, none shared.
    counts = np.diff(cols.hash_offsets.astype(np.int64))
    assert counts.tolist() == [math.ceil(int(r["ContextTokens"]) / 512) for r in rows]
    assert len(np.unique(cols.hash_ids)) == len(cols.hash_ids)


def test_azure_keeps_nanosecond_precision(tmp_path):
    path = write(
        tmp_path / "ns.csv",
        [AZURE_HEADER, "2023-11-16 18:15:46.0000000,10,1", "2023-11-16 18:15:46.0000001,10,1"],
    )
    assert load_trace(path).columns().arrival_ms.tolist() == [0.0, 1e-4]


# Mooncake field names


def test_aliases_load_like_canonical_names(tmp_path):
    canonical = [
        row(timestamp=5, input_length=1000, output_length=7, hash_ids=[3, 4]),
        row(timestamp=9.5, input_length=10, output_length=1, hash_ids=[3]),
    ]
    aliased = [
        {
            "created_time": r["timestamp"],
            "input_tokens": r["input_length"],
            "output_tokens": r["output_length"],
            "hash_ids": r["hash_ids"],
            "session_id": "s1",
            "request_id": i,
            "something_else": None,
        }
        for i, r in enumerate(canonical)
    ]
    a = load_trace(write_rows(tmp_path / "canonical.jsonl", canonical)).columns()
    b = load_trace(write_rows(tmp_path / "aliased.jsonl", aliased)).columns()
    assert_same_columns(a, b)
    assert requests(a) == [(0.0, 1000, 7, [3, 4]), (4.5, 10, 1, [3])]
    # The session_id makes the two rows turns of one session; the canonical file has none.
    assert a.session is None and a.delay_ms is None and a.num_sessions == 0
    assert b.session.tolist() == [0, 0] and np.isnan(b.delay_ms).all() and b.num_sessions == 1


def test_field_and_alias_together_is_an_error(tmp_path):
    path = write_rows(tmp_path / "both.jsonl", [row(input_tokens=600)])
    with pytest.raises(WorkloadError, match=r"both\.jsonl:1: field 'input_length'.*'input_tokens'"):
        load_trace(path)


# Malformed inputs: every message names file, line, field and value.

MALFORMED_JSONL = {
    "bad JSON": (
        '{"timestamp": 1, "input_length": 600',
        2,
        ["invalid JSON", '"input_length": 600'],
    ),
    "not an object": ("[1, 2]", 2, ["expected a JSON object", "got [1,2]"]),
    "missing field": (
        json.dumps({"timestamp": 1, "input_length": 600, "hash_ids": [1, 2]}),
        2,
        ["field 'output_length' (or 'output_tokens') is missing", '"hash_ids"'],
    ),
    "missing hash_ids": (
        json.dumps({"timestamp": 1, "input_length": 600, "output_length": 5}),
        2,
        ["field 'hash_ids'", "missing"],
    ),
    "negative length": (
        json.dumps(row(input_length=-5)),
        2,
        ["field 'input_length': expected a non-negative integer, got -5"],
    ),
    "fractional length": (
        json.dumps(row(input_length=12.5)),
        2,
        ["field 'input_length': expected a non-negative integer, got 12.5"],
    ),
    "string length": (
        json.dumps(row(output_length="12")),
        2,
        ["field 'output_length': expected a non-negative integer, got \"12\""],
    ),
    "integral float length": (
        json.dumps(row(output_length=12.0)),
        2,
        ["field 'output_length': expected a non-negative integer, got 12.0"],
    ),
    "bool length": (
        json.dumps(row(output_length=True)),
        2,
        ["field 'output_length': expected a non-negative integer, got true"],
    ),
    "zero output": (json.dumps(row(output_length=0)), 2, ["field 'output_length'", "got 0"]),
    "length too big": (
        json.dumps(row(input_length=2**32)),
        2,
        ["field 'input_length'", f"got {2**32}"],
    ),
    "alias named in error": (
        json.dumps({"created_time": 1, "input_tokens": -3, "output_tokens": 1, "hash_ids": []}),
        2,
        ["field 'input_tokens': expected a non-negative integer, got -3"],
    ),
    "too few hash ids": (
        json.dumps(row(input_length=1500, hash_ids=[1, 2])),
        2,
        ["field 'hash_ids'", "too few hash ids", "got 2", "1500"],
    ),
    "negative hash id": (json.dumps(row(hash_ids=[1, -1])), 2, ["field 'hash_ids'", "got -1"]),
    "float hash id": (json.dumps(row(hash_ids=[1.5, 2])), 2, ["field 'hash_ids'", "got 1.5"]),
    "hash id too big": (json.dumps(row(hash_ids=[1, 2**63])), 2, ["'hash_ids'", str(2**63)]),
    "hash_ids not a list": (json.dumps(row(hash_ids=7)), 2, ["field 'hash_ids'", "got 7"]),
    "negative timestamp": (json.dumps(row(timestamp=-1)), 2, ["field 'timestamp'", "got -1"]),
    "string timestamp": (json.dumps(row(timestamp="5")), 2, ["field 'timestamp'", 'got "5"']),
    # NaN and Infinity are not JSON: the Rust core's serde_json turns them down.
    "NaN timestamp": (
        '{"timestamp": NaN, "input_length": 1, "output_length": 1, "hash_ids": [1]}',
        2,
        ["invalid JSON (expected value at column 15)", '"timestamp": NaN'],
    ),
    "blank lines still count": ("\n\n" + json.dumps(row(input_length=-7)), 4, ["got -7"]),
    "float session_id": (
        json.dumps(row(session_id=1.5)),
        2,
        ["field 'session_id': expected an integer or a string, got 1.5"],
    ),
    "bool session_id": (json.dumps(row(session_id=True)), 2, ["field 'session_id'", "got true"]),
    "list session_id": (json.dumps(row(session_id=[1])), 2, ["field 'session_id'", "got [1]"]),
    "negative delay": (
        json.dumps(row(session_id="s", delay=-1)),
        2,
        ["field 'delay': expected a finite non-negative number of ms, got -1"],
    ),
    "string delay_ms": (
        json.dumps(row(session_id="s", delay_ms="5")),
        2,
        ["field 'delay_ms': expected a finite non-negative number of ms, got \"5\""],
    ),
    "bool delay": (json.dumps(row(session_id="s", delay=True)), 2, ["field 'delay'", "got true"]),
    "NaN delay": (
        '{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1], '
        '"session_id": 3, "delay_ms": NaN}',
        2,
        ["invalid JSON (expected value at column 103)"],
    ),
    "infinite delay": (
        '{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1], '
        '"session_id": 3, "delay": Infinity}',
        2,
        ["invalid JSON (expected value at column 100)"],
    ),
    "delay without session": (
        json.dumps(row(delay_ms=250)),
        2,
        ["field 'delay_ms': a delay applies between turns of a session", "no 'session_id'", "250"],
    ),
    "null session with delay": (
        json.dumps(row(session_id=None, delay=7.5)),
        2,
        ["field 'delay'", "no 'session_id'", "got 7.5"],
    ),
    "delay and its alias": (
        json.dumps(row(session_id="s", delay=1, delay_ms=1)),
        2,
        ["field 'delay_ms' is given twice", "'delay'"],
    ),
    "delay on a first turn": (
        json.dumps(row(session_id="chat-9", delay=40)),
        2,
        ["delay_ms: this request is the first turn of its session", "got 40"],
    ),
}


@pytest.mark.parametrize("case", MALFORMED_JSONL, ids=str)
def test_malformed_mooncake_row(tmp_path, case):
    bad_line, lineno, fragments = MALFORMED_JSONL[case]
    path = write(tmp_path / "bad.jsonl", [json.dumps(row()), bad_line, json.dumps(row())])
    with pytest.raises(WorkloadError) as info:
        load_trace(path)
    message = str(info.value)
    assert f"bad.jsonl:{lineno}: " in message
    for fragment in fragments:
        assert fragment in message


GOOD_CSV_ROW = "2023-11-16 18:15:46.6805900,374,44"
MALFORMED_CSV = {
    "wrong header": (
        ["TIMESTAMP,ContextTokens,GeneratedTokens,Extra", GOOD_CSV_ROW],
        1,
        [repr(AZURE_HEADER), "'TIMESTAMP,ContextTokens,GeneratedTokens,Extra'"],
    ),
    "unparseable timestamp": (
        [AZURE_HEADER, GOOD_CSV_ROW, "yesterday,374,44"],
        3,
        ["field 'TIMESTAMP'", '"yesterday"'],
    ),
    "out-of-range timestamp": (
        [AZURE_HEADER, GOOD_CSV_ROW, GOOD_CSV_ROW, "2023-13-16 18:15:46.6805900,374,44"],
        4,
        ["field 'TIMESTAMP'", '"2023-13-16 18:15:46.6805900"'],
    ),
    "NaT timestamp": ([AZURE_HEADER, "NaT,374,44"], 2, ["field 'TIMESTAMP'", '"NaT"']),
    "fractional tokens": (
        [AZURE_HEADER, "2023-11-16 18:15:46.6805900,12.0,44"],
        2,
        ["field 'ContextTokens': expected a non-negative integer, got \"12.0\""],
    ),
    "negative tokens": (
        [AZURE_HEADER, "2023-11-16 18:15:46.6805900,12,-5"],
        2,
        ["field 'GeneratedTokens': expected a non-negative integer, got \"-5\""],
    ),
    "zero tokens": (
        [AZURE_HEADER, "2023-11-16 18:15:46.6805900,12,0"],
        2,
        ["field 'GeneratedTokens'", "got 0"],
    ),
    "missing column": ([AZURE_HEADER, "2023-11-16 18:15:46.6805900,12"], 2, ["3", "got 2"]),
}


@pytest.mark.parametrize("case", MALFORMED_CSV, ids=str)
def test_malformed_azure_row(tmp_path, case):
    lines, lineno, fragments = MALFORMED_CSV[case]
    with pytest.raises(WorkloadError) as info:
        load_trace(write(tmp_path / "bad.csv", lines))
    message = str(info.value)
    assert f"bad.csv:{lineno}: " in message
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize(
    ("name", "lines"),
    [
        ("empty.jsonl", []),
        ("blank.jsonl", ["", "  "]),
        ("empty.csv", []),
        ("header_only.csv", [AZURE_HEADER]),
    ],
)
def test_trace_without_requests_is_an_error(tmp_path, name, lines):
    with pytest.raises(WorkloadError, match=re.escape(name) + ": no requests"):
        load_trace(write(tmp_path / name, lines))


def test_missing_file_is_a_workload_error(tmp_path):
    with pytest.raises(WorkloadError, match=r"nowhere\.jsonl: cannot read"):
        load_trace(tmp_path / "nowhere.jsonl")


def test_format_comes_from_extension_or_argument(tmp_path):
    with pytest.raises(WorkloadError, match="pass format="):
        load_trace(tmp_path / "trace.txt")
    path = write_rows(tmp_path / "trace.txt", [row()])
    assert len(load_trace(path, format="mooncake").columns()) == 1
    azure = write(tmp_path / "azure.log", [AZURE_HEADER, GOOD_CSV_ROW])
    assert len(load_trace(azure, format="azure").columns()) == 1
    with pytest.raises(WorkloadError, match=r"workload\.format"):
        load_trace(path, format="parquet")


def test_trace_block_size_sets_the_hash_id_check(tmp_path):
    path = write_rows(tmp_path / "t.jsonl", [row(input_length=64, hash_ids=[1, 2, 3, 4])])
    assert load_trace(path, trace_block_size=16).columns().trace_block_size == 16
    with pytest.raises(WorkloadError, match="too few hash ids"):
        load_trace(path, trace_block_size=8)
    with pytest.raises(WorkloadError, match=r"workload\.trace_block_size"):
        load_trace(path, trace_block_size=0)


def test_trace_workload_reads_lazily(tmp_path):
    path = write(tmp_path / "later.jsonl", ["not json"])
    workload = TraceWorkload(path=path)  # construction does not read the file
    with pytest.raises(WorkloadError, match=r"later\.jsonl:1: invalid JSON"):
        workload.columns()


# Unsorted timestamps


def test_unsorted_mooncake_is_sorted_stably_with_a_warning(tmp_path):
    times = [10, 5, 10, 5, 20]
    rows = [
        # Row i has i + 1 ids of 512 tokens: 100 + 512 i tokens.
        row(timestamp=t, input_length=100 + 512 * i, hash_ids=[10 * i + j for j in range(i + 1)])
        for i, t in enumerate(times)
    ]
    path = write_rows(tmp_path / "unsorted.jsonl", rows)
    with pytest.warns(UserWarning, match=r"unsorted\.jsonl: 2 of 5 rows .*first at line 2"):
        cols = load_trace(path).columns()
    # Rows 1 and 3 (t=5) come first, then 0 and 2 (t=10) in file order, then 4.
    assert requests(cols) == [
        (0.0, 612, 5, [10, 11]),
        (0.0, 1636, 5, [30, 31, 32, 33]),
        (5.0, 100, 5, [0]),
        (5.0, 1124, 5, [20, 21, 22]),
        (15.0, 2148, 5, [40, 41, 42, 43, 44]),
    ]
    assert_well_formed(cols)


def test_unsorted_azure_is_sorted_stably_with_a_warning(tmp_path):
    lines = [
        AZURE_HEADER,
        "2023-11-16 18:15:47.0000000,1,1",
        "2023-11-16 18:15:46.5000000,2,1",
        "2023-11-16 18:15:47.0000000,3,1",
        "2023-11-16 18:15:46.5000000,4,1",
    ]
    with pytest.warns(UserWarning, match=r"order\.csv: 2 of 4 rows .*first at line 3"):
        cols = load_trace(write(tmp_path / "order.csv", lines)).columns()
    assert cols.input_length.tolist() == [2, 4, 1, 3]
    assert cols.arrival_ms.tolist() == [0.0, 0.0, 500.0, 500.0]
    assert len(np.unique(cols.hash_ids)) == len(cols.hash_ids)


# The workload rule

TRACE_RULE = "a trace workload has no fixed request length; remove "
SYNTHETIC_RULE = "a synthetic workload needs workload.isl and workload.osl; missing: "


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"isl": 5}, "workload.isl"),
        ({"osl": 6}, "workload.osl"),
        ({"isl": 5, "osl": 6}, "workload.isl, workload.osl"),
    ],
)
def test_trace_workload_rejects_fixed_lengths(tmp_path, extra, named):
    with pytest.raises(WorkloadError) as info:
        TraceWorkload(path=tmp_path / "t.jsonl", **extra)
    assert str(info.value) == TRACE_RULE + named
    assert isinstance(info.value, ValueError)

    with pytest.raises(pydantic.ValidationError) as union_info:
        pydantic.TypeAdapter(Workload).validate_python(
            {"kind": "trace", "path": "t.jsonl", **extra}
        )
    (error,) = union_info.value.errors()
    assert isinstance(error["ctx"]["error"], WorkloadError)
    assert str(error["ctx"]["error"]) == TRACE_RULE + named


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ({"osl": 6}, "workload.isl"),
        ({"isl": 5}, "workload.osl"),
        ({}, "workload.isl, workload.osl"),
        ({"isl": None, "osl": 6}, "workload.isl"),
    ],
)
def test_synthetic_workload_needs_fixed_lengths(given, missing):
    with pytest.raises(WorkloadError) as info:
        SyntheticWorkload(count=10, rate=1.0, **given)
    assert str(info.value) == SYNTHETIC_RULE + missing

    with pytest.raises(pydantic.ValidationError) as union_info:
        pydantic.TypeAdapter(Workload).validate_python(
            {"kind": "synthetic", "count": 10, "rate": 1.0, **given}
        )
    (error,) = union_info.value.errors()
    assert str(error["ctx"]["error"]) == SYNTHETIC_RULE + missing


def test_union_picks_the_model_by_kind():
    adapter = pydantic.TypeAdapter(Workload)
    trace = adapter.validate_python({"kind": "trace", "path": "t.csv", "trace_block_size": 64})
    assert isinstance(trace, TraceWorkload) and trace.path == Path("t.csv")
    synthetic = adapter.validate_python(
        {"kind": "synthetic", "isl": 100, "osl": 10, "count": 5, "rate": 2.0}
    )
    assert isinstance(synthetic, SyntheticWorkload) and synthetic.seed == 0


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"path": "t.jsonl", "bogus": 1}, "workload.bogus"),
        ({"path": "t.jsonl", "trace_block_size": 0}, "workload.trace_block_size"),
        ({"path": "t.jsonl", "format": "parquet"}, "workload.format"),
        ({}, "workload.path"),
    ],
)
def test_bad_trace_workload_fields_are_workload_errors(fields, named):
    with pytest.raises(WorkloadError, match=re.escape(named)):
        TraceWorkload(**fields)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"isl": 0}, "workload.isl"),
        ({"osl": 1.5}, "workload.osl"),
        ({"count": 0}, "workload.count"),
        ({"rate": 0.0}, "workload.rate"),
        ({"rate": math.inf}, "workload.rate"),
        ({"seed": -1}, "workload.seed"),
        ({"path": "t.jsonl"}, "workload.path"),
    ],
)
def test_bad_synthetic_workload_fields_are_workload_errors(fields, named):
    with pytest.raises(WorkloadError, match=re.escape(named)):
        SyntheticWorkload(**{"isl": 10, "osl": 10, "count": 10, "rate": 1.0, **fields})


# In-memory columns


def small_columns(**changes) -> TraceColumns:
    fields = {
        "arrival_ms": np.array([0.0, 1.5, 1.5]),
        "input_length": np.array([10, 600, 1], dtype=np.uint32),
        "output_length": np.array([1, 2, 3], dtype=np.uint32),
        "hash_offsets": np.array([0, 1, 3, 4], dtype=np.uint64),
        "hash_ids": np.array([7, 7, 8, 9], dtype=np.uint64),
        "trace_block_size": 512,
    }
    fields.update(changes)
    return TraceColumns(**fields)


def test_from_columns_returns_the_given_columns():
    cols = small_columns()
    workload = TraceWorkload.from_columns(cols)
    assert workload.columns() is cols
    assert workload.path is None and workload.trace_block_size == 512
    assert len(cols) == 3
    with pytest.raises(WorkloadError, match="expected TraceColumns"):
        TraceWorkload.from_columns({"arrival_ms": [0.0]})


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"input_length": np.array([10, 600, 1], dtype=np.int64)}, "input_length"),
        ({"arrival_ms": [0.0, 1.5, 1.5]}, "arrival_ms"),
        ({"arrival_ms": np.array([[0.0, 1.5, 1.5]])}, "arrival_ms"),
        ({"arrival_ms": np.array([0.0, 9, 1.5, 9, 1.5])[::2]}, "C-contiguous"),
        ({"output_length": np.array([1, 2], dtype=np.uint32)}, "output_length"),
        # Values are checked by the core's rules, which name the request.
        (
            {"output_length": np.array([1, 0, 3], dtype=np.uint32)},
            "workload request 1: output_length must be >= 1, got 0",
        ),
        (
            {"input_length": np.array([10, 0, 1], dtype=np.uint32)},
            "workload request 1: input_length must be >= 1, got 0",
        ),
        (
            {"arrival_ms": np.array([0.0, 1.5, 1.0])},
            "workload request 2: arrival_ms must be finite and non-decreasing, got 1 after 1.5",
        ),
        ({"arrival_ms": np.array([0.0, 1.5, np.inf])}, "workload request 2: arrival_ms"),
        ({"hash_offsets": np.array([0, 1, 3], dtype=np.uint64)}, "hash_offsets"),
        (
            {
                "hash_offsets": np.array([0, 3, 1, 4], dtype=np.uint64),
                "input_length": np.array([1500, 600, 1], dtype=np.uint32),
            },
            "workload request 1: hash_offsets decrease (3 then 1)",
        ),
        ({"hash_offsets": np.array([0, 1, 3, 3], dtype=np.uint64)}, "hash_offsets"),
        (
            {
                "hash_offsets": np.array([0, 2, 3, 4], dtype=np.uint64),
                "input_length": np.array([1000, 600, 1], dtype=np.uint32),
            },
            "workload request 1: 1 hash ids cover 512 tokens, fewer than input_length 600",
        ),
        ({"trace_block_size": 0}, "trace_block_size"),
    ],
)
def test_trace_columns_validate(changes, fragment):
    with pytest.raises(WorkloadError) as info:
        small_columns(**changes)
    assert fragment in str(info.value)


def test_trace_columns_replace_revalidates():
    cols = small_columns()
    with pytest.raises(WorkloadError, match="fewer than input_length"):
        dataclasses.replace(cols, trace_block_size=16)


def test_trace_columns_take_any_start_and_none_at_all():
    # The core replays from the first arrival, whatever it is, and an empty table is a
    # replay of nothing: both are valid columns.
    cols = dataclasses.replace(small_columns(), arrival_ms=np.array([5.0, 6.5, 6.5]))
    shifted = dynosim.replay(cols, {"timing": {"model": "fixed", "prefill_ms": 2, "decode_ms": 1}})
    assert shifted.requests["arrival_ms"].tolist() == [0.0, 1.5, 1.5]
    empty = TraceColumns(
        arrival_ms=np.array([], dtype=np.float64),
        input_length=np.array([], dtype=np.uint32),
        output_length=np.array([], dtype=np.uint32),
        hash_offsets=np.zeros(1, dtype=np.uint64),
        hash_ids=np.array([], dtype=np.uint64),
        trace_block_size=512,
    )
    report = dynosim.replay(empty)
    assert report.num_requests == report.completed_requests == report.rejected_requests == 0


# Synthetic workloads


def test_synthetic_same_seed_same_columns():
    spec = {"isl": 1000, "osl": 20, "count": 500, "rate": 3.0}
    a = SyntheticWorkload(**spec, seed=11).columns()
    b = SyntheticWorkload(**spec, seed=11).columns()
    assert_same_columns(a, b)
    c = SyntheticWorkload(**spec, seed=12).columns()
    assert not np.array_equal(a.arrival_ms, c.arrival_ms)


def test_synthetic_arrivals_are_poisson_at_the_rate():
    rate = 20.0  # requests per second, so gaps average 50 ms
    cols = SyntheticWorkload(isl=100, osl=10, count=100_001, rate=rate, seed=3).columns()
    gaps = np.diff(cols.arrival_ms)
    # The standard error of the mean gap is 50 / sqrt(1e5) = 0.16 ms.
    assert abs(gaps.mean() - 1000 / rate) < 0.5
    # Exponential gaps: the standard deviation equals the mean.
    assert abs(gaps.std() - 1000 / rate) < 1.0
    assert cols.arrival_ms[0] == 0.0


def test_synthetic_lengths_and_unique_hash_ids():
    cols = SyntheticWorkload(isl=100, osl=7, count=1000, rate=1.0, trace_block_size=16).columns()
    assert len(cols) == 1000
    assert_well_formed(cols)
    assert (cols.input_length == 100).all() and (cols.output_length == 7).all()
    assert (np.diff(cols.hash_offsets) == 7).all()  # ceil(100 / 16)
    assert len(np.unique(cols.hash_ids)) == len(cols.hash_ids) == 7000


def test_synthetic_single_request():
    cols = SyntheticWorkload(isl=1, osl=1, count=1, rate=0.1).columns()
    assert requests(cols) == [(0.0, 1, 1, [0])]


# Property: any small valid JSONL round-trips to the columns it describes.


@st.composite
def trace_rows(draw):
    block = draw(st.sampled_from([1, 16, 512]))
    rows = []
    for _ in range(draw(st.integers(1, 8))):
        input_length = draw(st.integers(1, 8 * block))
        blocks = -(-input_length // block)
        rows.append(
            {
                "timestamp": draw(
                    st.integers(0, 10**12)
                    | st.floats(0, 1e12, allow_nan=False, allow_infinity=False)
                ),
                "input_length": input_length,
                "output_length": draw(st.integers(1, 2**32 - 1)),
                "hash_ids": draw(
                    st.lists(st.integers(0, 2**63 - 1), min_size=blocks, max_size=blocks)
                ),
            }
        )
    aliases = draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows)))
    blank_after = draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows)))
    return block, rows, aliases, blank_after


ALIASES = {
    "timestamp": "created_time",
    "input_length": "input_tokens",
    "output_length": "output_tokens",
}


@settings(max_examples=150, deadline=None)
@given(trace_rows())
def test_jsonl_round_trip(tmp_path_factory, case):
    block, rows, aliases, blank_after = case
    lines = []
    for r, alias, blank in zip(rows, aliases, blank_after, strict=True):
        lines.append(json.dumps({ALIASES.get(k, k) if alias else k: v for k, v in r.items()}))
        if blank:
            lines.append("")
    path = write(tmp_path_factory.mktemp("prop") / "trace.jsonl", lines)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cols = load_trace(path, trace_block_size=block).columns()

    times = [r["timestamp"] for r in rows]
    assert bool(caught) == (times != sorted(times))
    order = sorted(range(len(rows)), key=times.__getitem__)  # Python's sort is stable
    arrivals = np.array(times, dtype=np.float64)[order]
    expected = [
        (float(t), rows[i]["input_length"], rows[i]["output_length"], rows[i]["hash_ids"])
        for t, i in zip(arrivals - arrivals[0], order, strict=True)
    ]
    assert requests(cols) == expected
    assert cols.trace_block_size == block
    assert_well_formed(cols)


# Sessions in Mooncake traces


def assert_same_sessions(cols: TraceColumns, session: list[int], delay: list[float]) -> None:
    assert cols.session is not None and cols.delay_ms is not None
    assert cols.session.dtype == np.int64 and cols.delay_ms.dtype == np.float64
    assert cols.session.flags.c_contiguous and cols.delay_ms.flags.c_contiguous
    assert cols.session.tolist() == session
    np.testing.assert_array_equal(cols.delay_ms, np.array(delay, dtype=np.float64))


def test_sessions_are_numbered_by_first_appearance(tmp_path):
    nan = math.nan
    rows = [
        row(timestamp=0, session_id="chat-b"),
        row(timestamp=1),  # no session
        row(timestamp=2, session_id=17),
        row(timestamp=3, session_id="chat-b", delay=1500),  # `delay` is `delay_ms`'s alias
        row(timestamp=4, session_id="17"),  # a string, so not session 17
        row(timestamp=5, session_id=17, delay_ms=0.25),
        row(timestamp=6, session_id="chat-b"),  # no delay: the timestamp gap applies
        row(timestamp=7, session_id=None, delay=None),  # null counts as absent
        row(timestamp=8, session_id=17, delay_ms=0),
    ]
    cols = load_trace(write_rows(tmp_path / "chat.jsonl", rows)).columns()
    assert_same_sessions(
        cols, [0, -1, 1, 0, 2, 1, 0, -1, 1], [nan, nan, nan, 1500.0, nan, 0.25, nan, nan, 0.0]
    )
    assert cols.num_sessions == 3
    assert cols.arrival_ms.tolist() == [float(t) for t in range(9)]
    assert_well_formed(cols)


def test_session_turns_follow_the_stable_timestamp_sort(tmp_path):
    nan = math.nan
    rows = [
        row(timestamp=50, session_id="late", input_length=1, hash_ids=[1]),
        row(timestamp=10, session_id="a", input_length=2, hash_ids=[1]),
        row(timestamp=30, session_id="a", delay_ms=5, input_length=3, hash_ids=[1]),
        row(
            timestamp=20, session_id="a", delay_ms=7, input_length=4, hash_ids=[1]
        ),  # turn 2 after sorting
        row(
            timestamp=30, session_id="late", input_length=5, hash_ids=[1]
        ),  # now the first turn of "late"
        row(timestamp=10, input_length=6, hash_ids=[1]),
    ]
    with pytest.warns(UserWarning, match="5 of 6 rows"):
        cols = load_trace(write_rows(tmp_path / "turns.jsonl", rows)).columns()
    # Arrival order: t=10 (rows 1, 5), 20 (row 3), 30 (rows 2, 4), 50 (row 0).
    assert cols.input_length.tolist() == [2, 6, 4, 3, 5, 1]
    assert_same_sessions(cols, [0, -1, 0, 0, 1, 1], [nan, nan, 7.0, 5.0, nan, nan])


def test_a_delay_is_an_error_on_the_turn_the_sort_makes_first(tmp_path):
    rows = [
        row(timestamp=10, session_id=4),
        row(timestamp=0),
        row(timestamp=5, session_id=4, delay_ms=2.5),
    ]
    with pytest.warns(UserWarning), pytest.raises(WorkloadError) as info:
        load_trace(write_rows(tmp_path / "first.jsonl", rows))
    assert str(info.value) == (
        f"{tmp_path / 'first.jsonl'}:3: delay_ms: this request is the first turn of its "
        "session, which is sent at its arrival; expected NaN (no delay), got 2.5"
    )


def test_traces_without_sessions_have_no_session_columns(real_trace, tmp_path):
    cols = load_trace(real_trace("mooncake_conversation.jsonl")).columns()
    assert cols.session is None and cols.delay_ms is None and cols.num_sessions == 0
    azure = load_trace(write(tmp_path / "a.csv", [AZURE_HEADER, GOOD_CSV_ROW])).columns()
    assert azure.session is None and azure.delay_ms is None


def test_session_columns_round_trip_through_columns():
    cols = small_columns(
        session=np.array([0, -1, 0], dtype=np.int64), delay_ms=np.array([np.nan, np.nan, 3.0])
    )
    assert cols.num_sessions == 1
    assert TraceWorkload.from_columns(cols).columns().session is cols.session
    none = small_columns(
        session=np.full(3, -1, dtype=np.int64), delay_ms=np.full(3, np.nan, dtype=np.float64)
    )
    assert none.num_sessions == 0
    # Session ids need not be dense: 2 is a session of its own, and its first turn takes no
    # delay.
    with pytest.raises(
        WorkloadError, match=r"request 2: delay_ms: this request is the first turn of its session"
    ):
        dataclasses.replace(cols, session=np.array([0, -1, 2], dtype=np.int64))
    sparse = dataclasses.replace(cols, session=np.array([10**12, -1, 10**12], dtype=np.int64))
    assert sparse.num_sessions == 1


NAN3 = np.full(3, np.nan)


@pytest.mark.parametrize(
    ("session", "delay", "fragment"),
    [
        (np.zeros(3, dtype=np.int64), None, "TraceColumns.delay_ms: expected an array"),
        (None, NAN3, "TraceColumns.session: expected an array"),
        (np.zeros(3, dtype=np.int32), NAN3, "TraceColumns.session: expected a 1-D int64"),
        ([0, 0, 0], NAN3, "TraceColumns.session: expected a numpy array"),
        (np.zeros(3, dtype=np.int64), NAN3.astype(np.float32), "delay_ms: expected a 1-D float64"),
        (np.zeros(2, dtype=np.int64), NAN3, "TraceColumns.session: expected 3 values"),
        (np.zeros(3, dtype=np.int64), np.full(4, np.nan), "delay_ms: expected 3 values"),
        (np.zeros(6, dtype=np.int64)[::2], NAN3, "C-contiguous"),
        (np.array([0, -2, 0]), NAN3, "request 1: session must be >= 0, or -1 for none, got -2"),
        (
            np.zeros(3, dtype=np.int64),
            np.array([np.nan, -1.0, np.nan]),
            "request 1: delay_ms must be >= 0 ms or NaN (unset), got -1",
        ),
        (np.zeros(3, dtype=np.int64), np.array([np.nan, np.inf, np.nan]), "request 1: delay_ms"),
        (
            np.array([0, -1, 0]),
            np.array([np.nan, 1.0, np.nan]),
            "request 1: delay_ms applies between turns of a session, but this request has no",
        ),
        (np.array([0, 1, 0]), np.array([np.nan, 2.0, 3.0]), "request 1: delay_ms: this request is"),
    ],
)
def test_trace_columns_validate_sessions(session, delay, fragment):
    with pytest.raises(WorkloadError) as info:
        small_columns(session=session, delay_ms=delay)
    assert fragment in str(info.value)


# Synthetic workloads: lengths, arrivals, size, prefix groups

DISTRIBUTIONS = [
    # (spec, mean of the lengths it gives, standard deviation)
    ({"dist": "normal", "mean": 1000.0, "std": 200.0}, 1000.0, 200.0),
    # Mean 2000 tokens: mu = ln(2000) - 1/2; the std is mean * sqrt(e - 1).
    ({"dist": "lognormal", "mean": 2000.0, "sigma": 1.0}, 2000.0, 2000.0 * math.sqrt(math.e - 1)),
    ({"dist": "uniform", "low": 100, "high": 300}, 200.0, math.sqrt((201**2 - 1) / 12)),
    ({"dist": "empirical", "values": [10, 20, 60]}, 30.0, math.sqrt(1400 / 3)),
]


@pytest.mark.parametrize(("spec", "mean", "std"), DISTRIBUTIONS, ids=lambda v: str(v))
@pytest.mark.parametrize("field", ["isl", "osl"])
def test_length_distributions_give_the_asked_mean(spec, mean, std, field):
    fixed = {"isl": 500, "osl": 50}
    work = SyntheticWorkload(**{**fixed, field: spec}, count=100_000, rate=10.0, seed=5)
    cols = work.columns()
    lengths = (cols.input_length if field == "isl" else cols.output_length).astype(np.float64)
    other = cols.output_length if field == "isl" else cols.input_length
    assert (other == fixed["osl" if field == "isl" else "isl"]).all()
    assert abs(lengths.mean() / mean - 1) < 0.01
    assert abs(lengths.std() / std - 1) < 0.03
    assert (lengths >= 1).all() and (lengths == np.round(lengths)).all()
    assert_well_formed(cols)


def test_uniform_lengths_include_both_ends():
    cols = SyntheticWorkload(
        isl={"dist": "uniform", "low": 7, "high": 9}, osl=1, count=3000, seed=2
    ).columns()
    assert sorted(set(cols.input_length.tolist())) == [7, 8, 9]
    single = SyntheticWorkload(isl=UniformLength(low=4, high=4), osl=1, count=9).columns()
    assert (single.input_length == 4).all()


def test_lognormal_median_is_exp_mu():
    mean, sigma = 3000.0, 1.2
    cols = SyntheticWorkload(
        isl=LognormalLength(mean=mean, sigma=sigma), osl=1, count=100_000, seed=8
    ).columns()
    expected_median = math.exp(math.log(mean) - sigma**2 / 2)
    assert abs(np.median(cols.input_length) / expected_median - 1) < 0.02


def test_draws_are_rounded_half_to_even_and_clipped_to_one():
    # Replays the documented draw order: arrival gaps, then isl, then osl.
    count, rate, seed = 20_000, 4.0, 13
    work = SyntheticWorkload(
        isl={"dist": "normal", "mean": 3.0, "std": 4.0},
        osl={"dist": "lognormal", "mean": 2.0, "sigma": 1.5},
        count=count,
        rate=rate,
        seed=seed,
    )
    cols = work.columns()
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1000.0 / rate, count - 1)
    isl = np.clip(np.rint(rng.normal(3.0, 4.0, count)), 1, None)
    osl = np.clip(np.rint(rng.lognormal(math.log(2.0) - 1.5**2 / 2, 1.5, count)), 1, None)
    np.testing.assert_array_equal(cols.arrival_ms[1:], np.cumsum(gaps))
    np.testing.assert_array_equal(cols.input_length, isl.astype(np.uint32))
    np.testing.assert_array_equal(cols.output_length, osl.astype(np.uint32))
    assert (cols.input_length == 1).mean() > 0.25  # clipping is doing work here
    assert {1, 2, 3}.issubset(set(cols.output_length.tolist()))


def test_fixed_lengths_keep_the_original_poisson_stream():
    cols = SyntheticWorkload(isl=700, osl=9, count=1000, rate=25.0, seed=21).columns()
    gaps = np.random.default_rng(21).exponential(40.0, 999)
    np.testing.assert_array_equal(cols.arrival_ms, np.concatenate([[0.0], np.cumsum(gaps)]))


def test_empirical_lengths_sample_the_real_trace(real_trace):
    path = real_trace("mooncake_conversation.jsonl")
    trace = load_trace(path).columns()
    work = SyntheticWorkload(
        isl={"dist": "empirical", "trace": str(path)},
        osl=EmpiricalLength(trace=path),
        count=100_000,
        rate=5.0,
        seed=4,
    )
    cols = work.columns()
    # isl samples the trace's input lengths, osl its output lengths, with replacement.
    assert set(cols.input_length.tolist()) <= set(trace.input_length.tolist())
    assert set(cols.output_length.tolist()) <= set(trace.output_length.tolist())
    assert len(np.unique(cols.input_length)) > 0.5 * len(np.unique(trace.input_length))
    assert abs(cols.input_length.mean() / trace.input_length.mean() - 1) < 0.01
    assert abs(cols.output_length.mean() / trace.output_length.mean() - 1) < 0.01
    assert_well_formed(cols)


def test_empirical_trace_errors_name_the_field(tmp_path):
    work = SyntheticWorkload(
        isl=10, osl={"dist": "empirical", "trace": tmp_path / "gone.jsonl"}, count=3
    )
    with pytest.raises(WorkloadError, match=r"^workload\.osl: empirical trace: .*gone\.jsonl"):
        work.columns()


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 1.0, 2.0, 4.0])
def test_gamma_burstiness_sets_the_cv_of_gaps(burstiness):
    rate = 40.0
    cols = SyntheticWorkload(
        isl=10, osl=1, count=100_001, rate=rate, arrival="gamma", burstiness=burstiness, seed=9
    ).columns()
    gaps = np.diff(cols.arrival_ms)
    assert abs(gaps.mean() / (1000 / rate) - 1) < 0.01
    cv2 = gaps.var() / gaps.mean() ** 2
    assert abs(cv2 * burstiness - 1) < 0.05  # CV^2 = 1 / k


def test_poisson_gaps_have_cv_one_and_gamma_k_changes_it():
    def cv2(**arrival) -> float:
        gaps = np.diff(
            SyntheticWorkload(isl=1, osl=1, count=50_001, rate=2.0, seed=1, **arrival)
            .columns()
            .arrival_ms
        )
        return float(gaps.var() / gaps.mean() ** 2)

    poisson = cv2()
    assert abs(poisson - 1) < 0.05
    assert cv2(arrival="gamma", burstiness=0.2) > 4 * poisson  # burstier
    assert cv2(arrival="gamma", burstiness=5.0) < poisson / 4  # more regular


def test_duration_mode_generates_arrivals_until_the_duration():
    spec = {"isl": {"dist": "normal", "mean": 800.0, "std": 100.0}, "osl": 20, "seed": 4}
    cols = SyntheticWorkload(**spec, duration_s=100.0, rate=50.0).columns()
    n = len(cols)
    assert abs(n - 5000) < 4 * math.sqrt(5000)
    assert cols.arrival_ms[0] == 0.0 and cols.arrival_ms[-1] < 100_000.0
    assert_well_formed(cols)
    # The same arrival stream as count mode, cut at the first arrival at or past the end.
    longer = SyntheticWorkload(**spec, count=n + 1, rate=50.0).columns()
    np.testing.assert_array_equal(longer.arrival_ms[:n], cols.arrival_ms)
    assert longer.arrival_ms[n] >= 100_000.0


def test_duration_mode_draws_more_gaps_when_a_burst_needs_them():
    # Gamma k = 0.02 is so bursty that seed 3 needs more than the first batch of gaps
    # (expected 200 + 8 * sqrt(200) + 64 = 377 arrivals).
    spec = {"isl": 10, "osl": 1, "rate": 1.0, "arrival": "gamma", "burstiness": 0.02, "seed": 3}
    cols = SyntheticWorkload(**spec, duration_s=200.0).columns()
    n = len(cols)
    assert n > 377
    assert cols.arrival_ms[-1] < 200_000.0
    longer = SyntheticWorkload(**spec, count=n + 1).columns()
    np.testing.assert_allclose(longer.arrival_ms[:n], cols.arrival_ms, rtol=1e-12)
    assert longer.arrival_ms[n] >= 200_000.0


def test_duration_shorter_than_a_gap_still_has_the_first_request():
    cols = SyntheticWorkload(isl=5, osl=5, duration_s=0.001, rate=0.01).columns()
    assert requests(cols) == [(0.0, 5, 5, [0])]


def test_without_a_rate_every_request_arrives_at_zero():
    cols = SyntheticWorkload(
        isl={"dist": "uniform", "low": 1, "high": 9}, osl=3, count=50
    ).columns()
    assert (cols.arrival_ms == 0.0).all()
    assert_well_formed(cols)


def test_same_seed_same_columns_with_every_option(real_trace):
    spec = {
        "isl": {"dist": "lognormal", "mean": 3000.0, "sigma": 0.7},
        "osl": {"dist": "empirical", "trace": str(real_trace("mooncake_conversation.jsonl"))},
        "duration_s": 60.0,
        "rate": 30.0,
        "arrival": "gamma",
        "burstiness": 0.6,
        "prefix_groups": 5,
        "prefix_fraction": 0.4,
        "trace_block_size": 64,
    }
    a = SyntheticWorkload(**spec, seed=3).columns()
    b = SyntheticWorkload(**spec, seed=3).columns()
    assert_same_columns(a, b)
    assert a.session is None and b.session is None
    # A round trip through JSON (a config file) gives the same workload and the same columns.
    dumped = json.loads(SyntheticWorkload(**spec, seed=3).model_dump_json())
    assert_same_columns(a, SyntheticWorkload(**dumped).columns())
    c = SyntheticWorkload(**spec, seed=4).columns()
    assert len(a) != len(c) or not np.array_equal(a.input_length, c.input_length)


def shared_prefix(cols: TraceColumns, i: int, fraction: float) -> int:
    return math.floor(fraction * int(cols.input_length[i]) / cols.trace_block_size)


def test_prefix_groups_share_exactly_the_expected_ids():
    # 2000 tokens = 4 blocks of 512; floor(0.6 * 2000 / 512) = 2 shared blocks per request.
    cols = SyntheticWorkload(
        isl=2000, osl=10, count=9, rate=1.0, prefix_groups=3, prefix_fraction=0.6
    ).columns()
    ids = [r[3] for r in requests(cols)]
    for i, request_ids in enumerate(ids):
        group = i % 3
        assert request_ids[:2] == [2 * group, 2 * group + 1]
    unique = [h for request_ids in ids for h in request_ids[2:]]
    assert len(set(unique)) == len(unique) == 9 * 2
    assert min(unique) >= 3 * 2  # past every group's shared ids
    assert_well_formed(cols)


@pytest.mark.parametrize(("groups", "fraction"), [(1, 1.0), (4, 0.5), (7, 0.3), (1000, 0.9)])
def test_prefix_groups_with_varying_lengths(groups, fraction):
    block = 64
    cols = SyntheticWorkload(
        isl={"dist": "uniform", "low": 1, "high": 2000},
        osl=1,
        count=3000,
        rate=100.0,
        prefix_groups=groups,
        prefix_fraction=fraction,
        trace_block_size=block,
        seed=6,
    ).columns()
    assert_well_formed(cols)
    shared = [shared_prefix(cols, i, fraction) for i in range(len(cols))]
    width = max(shared)
    seen: dict[int, int] = {}
    unique: list[int] = []
    for i, (_, isl, _, request_ids) in enumerate(requests(cols)):
        assert len(request_ids) == math.ceil(isl / block)
        assert request_ids[: shared[i]] == [(i % groups) * width + j for j in range(shared[i])]
        unique += request_ids[shared[i] :]
        for j in range(shared[i]):
            seen[(i % groups) * width + j] = i % groups
    assert len(set(unique)) == len(unique)
    assert not set(unique) & set(seen)
    # Requests 0 and `groups` (both group 0) share their common shared blocks, and no more.
    a, b = requests(cols)[0][3], requests(cols)[groups][3]
    common = min(shared[0], shared[groups])
    assert a[:common] == b[:common]
    assert set(a[common:]).isdisjoint(b[common:])


def test_prefix_fraction_zero_shares_nothing():
    cols = SyntheticWorkload(
        isl=3000, osl=1, count=100, prefix_groups=2, prefix_fraction=0.0
    ).columns()
    plain = SyntheticWorkload(isl=3000, osl=1, count=100).columns()
    assert_same_columns(cols, plain)
    assert len(np.unique(cols.hash_ids)) == len(cols.hash_ids)


def test_one_group_full_fraction_shares_every_full_block():
    cols = SyntheticWorkload(
        isl=1100, osl=1, count=5, prefix_groups=1, prefix_fraction=1.0, trace_block_size=100
    ).columns()
    # floor(1100 / 100) = 11 full blocks, all shared; ceil gives 11 ids, so nothing is unique.
    assert [r[3] for r in requests(cols)] == [list(range(11))] * 5


def test_a_million_requests_are_generated_correctly():
    n, block, groups, fraction = 1_000_000, 512, 64, 0.5
    work = SyntheticWorkload(
        isl={"dist": "lognormal", "mean": 4000.0, "sigma": 0.8},
        osl={"dist": "normal", "mean": 500.0, "std": 150.0},
        count=n,
        rate=100.0,
        arrival="gamma",
        burstiness=0.5,
        prefix_groups=groups,
        prefix_fraction=fraction,
        seed=1,
    )
    cols = work.columns()
    assert len(cols) == n
    assert_well_formed(cols)
    assert abs(cols.input_length.mean() / 4000 - 1) < 0.01
    assert abs(cols.output_length.mean() / 500 - 1) < 0.01
    assert abs(cols.arrival_ms[-1] / (n * 10.0) - 1) < 0.01  # 100 req/s: 10 ms per gap
    # Ids by position, checked independently of the generator's slicing: shared prefix ids
    # are group * K + j, every other id is used exactly once and lies past the shared ones.
    offsets = cols.hash_offsets.astype(np.int64)
    counts = np.diff(offsets)
    assert (counts == -(-cols.input_length.astype(np.int64) // block)).all()
    row = np.repeat(np.arange(n), counts)
    pos = np.arange(len(cols.hash_ids)) - offsets[row]
    shared = np.floor(fraction * cols.input_length.astype(np.float64) / block).astype(np.int64)
    width = int(shared.max())
    is_shared = pos < shared[row]
    ids = cols.hash_ids.astype(np.int64)
    np.testing.assert_array_equal(
        ids[is_shared], (row[is_shared] % groups) * width + pos[is_shared]
    )
    rest = np.sort(ids[~is_shared], kind="stable")  # timsort: fast on the near-sorted ids
    assert rest[0] >= groups * width
    assert (np.diff(rest) > 0).all()  # each used once


# Synthetic workload validation

COUNT_RULE = (
    "a synthetic workload needs exactly one of workload.count and workload.duration_s; got "
)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rate": 1.0}, COUNT_RULE + "neither"),
        ({"count": 5, "duration_s": 10.0, "rate": 1.0}, COUNT_RULE + "both"),
        ({"duration_s": 10.0}, "workload.duration_s needs workload.rate (requests per second)"),
        (
            {"count": 5, "arrival": "gamma", "burstiness": 0.5},
            "workload.arrival 'gamma' needs workload.rate (requests per second)",
        ),
        (
            {"count": 5, "rate": 1.0, "arrival": "gamma"},
            "workload.arrival 'gamma' needs workload.burstiness "
            "(the gamma shape k: 1 is Poisson, below 1 burstier)",
        ),
        (
            {"count": 5, "rate": 1.0, "burstiness": 2.0},
            "workload.burstiness applies only to workload.arrival 'gamma', got arrival "
            "'poisson'; remove workload.burstiness or set arrival 'gamma'",
        ),
        (
            {"count": 5, "prefix_groups": 3},
            "workload.prefix_groups and workload.prefix_fraction go together; "
            "missing: workload.prefix_fraction",
        ),
        (
            {"count": 5, "prefix_fraction": 0.5},
            "workload.prefix_groups and workload.prefix_fraction go together; "
            "missing: workload.prefix_groups",
        ),
    ],
)
def test_synthetic_workload_consistency_errors(fields, message):
    with pytest.raises(WorkloadError) as info:
        SyntheticWorkload(isl=10, osl=10, **fields)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("fields", "fragments"),
    [
        ({"duration_s": 0.0}, ["workload.duration_s"]),
        ({"duration_s": math.nan}, ["workload.duration_s"]),
        ({"arrival": "uniform"}, ["workload.arrival", '"uniform"']),
        ({"arrival": "gamma", "burstiness": 0.0}, ["workload.burstiness"]),
        ({"prefix_groups": 0, "prefix_fraction": 0.5}, ["workload.prefix_groups"]),
        ({"prefix_groups": 2, "prefix_fraction": 1.5}, ["workload.prefix_fraction", "1.5"]),
        ({"prefix_groups": 2, "prefix_fraction": -0.1}, ["workload.prefix_fraction"]),
        ({"isl": {"dist": "normal", "mean": 100.0}}, ["workload.isl.std: required, but not given"]),
        ({"isl": {"dist": "normal", "mean": 0.5, "std": 1.0}}, ["workload.isl.mean", "0.5"]),
        ({"osl": {"dist": "normal", "mean": 9.0, "std": -1.0}}, ["workload.osl.std", "-1.0"]),
        ({"osl": {"dist": "lognormal", "mean": 9.0, "sigma": math.inf}}, ["workload.osl.sigma"]),
        ({"isl": {"dist": "uniform", "low": 9, "high": 3}}, ["workload.isl: expected low <= high"]),
        ({"isl": {"dist": "uniform", "low": 0, "high": 3}}, ["workload.isl.low"]),
        ({"isl": {"dist": "uniform", "low": 1.5, "high": 3}}, ["workload.isl.low", "1.5"]),
        ({"isl": {"dist": "empirical"}}, ["workload.isl: an empirical distribution needs exactly"]),
        (
            {"isl": {"dist": "empirical", "values": [3], "trace": "t.jsonl"}},
            ["workload.isl: an empirical distribution needs exactly one of 'trace' and 'values'"],
        ),
        ({"osl": {"dist": "empirical", "values": []}}, ["workload.osl.values"]),
        ({"osl": {"dist": "empirical", "values": [4, 0]}}, ["workload.osl.values[1]", "got 0"]),
        ({"isl": {"dist": "poisson", "mean": 3.0}}, ["workload.isl: expected a token count or"]),
        ({"isl": {"mean": 3.0, "std": 1.0}}, ["workload.isl: expected a token count", "'dist'"]),
        ({"isl": {"dist": "normal", "mean": 9.0, "std": 1.0, "skew": 2}}, ["workload.isl.skew"]),
        ({"isl": "100"}, ["workload.isl", '"100"']),
        ({"isl": True}, ["workload.isl"]),
    ],
)
def test_bad_synthetic_distribution_fields_are_workload_errors(fields, fragments):
    with pytest.raises(WorkloadError) as info:
        SyntheticWorkload(**{"isl": 10, "osl": 10, "count": 10, "rate": 1.0, **fields})
    for fragment in fragments:
        assert fragment in str(info.value)


def test_distribution_models_and_union_accept_the_same_specs():
    adapter = pydantic.TypeAdapter(Workload)
    work = adapter.validate_python(
        {
            "kind": "synthetic",
            "isl": {"dist": "normal", "mean": 100.0, "std": 5.0},
            "osl": {"dist": "empirical", "values": [1, 2]},
            "duration_s": 5.0,
            "rate": 2.0,
        }
    )
    assert isinstance(work, SyntheticWorkload)
    assert work.isl == NormalLength(mean=100.0, std=5.0)
    assert work.osl == EmpiricalLength(values=(1, 2))
    with pytest.raises(pydantic.ValidationError):
        UniformLength(low=5, high=2)  # on its own, a plain pydantic error (also a ValueError)
    # The workload rule still holds for distributions: a trace workload takes no isl at all.
    with pytest.raises(WorkloadError, match=r"remove workload\.isl$"):
        TraceWorkload(path="t.jsonl", isl={"dist": "normal", "mean": 5.0, "std": 1.0})
    assert SyntheticWorkload.model_json_schema()["properties"]["isl"]["oneOf"]


# --- sizes: one limit for every kind of workload, checked before anything is allocated --------


def test_synthetic_sizes_past_the_limit_are_refused_when_the_workload_is_made(monkeypatch):
    from dynosim import _core

    limit = f"more than the {_core.MAX_REQUESTS:,} one workload may hold"

    def no_generation(*args, **kwargs):
        raise AssertionError("generated before the size was checked")

    monkeypatch.setattr(np.random, "default_rng", no_generation)
    with pytest.raises(WorkloadError) as e:
        SyntheticWorkload(isl=10, osl=10, duration_s=1e12, rate=1.0)
    assert str(e.value) == (
        "workload.duration_s 1e+12 s at workload.rate 1/s would make about "
        f"1,000,000,000,000 requests, {limit}"
    )
    with pytest.raises(WorkloadError, match=rf"^workload.count: 100,000,001 requests, {limit}$"):
        SyntheticWorkload(isl=10, osl=10, count=_core.MAX_REQUESTS + 1)
    # A fixed prompt length: 2**32 - 1 tokens are 8,388,608 ids of 512 tokens, per request.
    with pytest.raises(WorkloadError) as e:
        SyntheticWorkload(isl=2**32 - 1, osl=10, count=1000)
    assert str(e.value) == (
        "workload.isl 4294967295 tokens x 1,000 requests (512 tokens per hash id) would need "
        f"8,388,608,000 prompt hash ids, more than the {_core.MAX_HASH_IDS:,} one workload may "
        "hold"
    )
    with pytest.raises(WorkloadError, match=r"workload.trace_block_size: .* less than 4294967296"):
        SyntheticWorkload(isl=10, osl=10, count=1, trace_block_size=2**40)


def test_drawn_prompt_lengths_past_the_limit_are_refused_before_their_ids_exist(monkeypatch):
    from dynosim.workload import synthetic

    def no_ids(*args, **kwargs):
        raise AssertionError("hash ids allocated before the size was checked")

    monkeypatch.setattr(synthetic, "fresh_hash_ids", no_ids)
    # 1,000 prompts of about 2**31 tokens are about 4.2 million ids each: 4.2e9 in all.
    work = SyntheticWorkload(
        isl={"dist": "uniform", "low": 2**31, "high": 2**31 + 10}, osl=1, count=1000
    )
    with pytest.raises(WorkloadError, match=r"^workload.isl: the prompts drawn need 4,19"):
        work.columns()


def test_more_prefix_groups_than_requests_leave_the_extra_groups_empty():
    # 10**30 groups used to overflow numpy's integers; past the request count every request
    # is a group of its own either way.
    huge = SyntheticWorkload(
        isl=2000, osl=1, count=5, prefix_groups=10**30, prefix_fraction=0.5
    ).columns()
    five = SyntheticWorkload(
        isl=2000, osl=1, count=5, prefix_groups=5, prefix_fraction=0.5
    ).columns()
    assert huge.hash_ids.tolist() == five.hash_ids.tolist()


def test_the_command_line_refuses_an_oversized_synthetic_workload_in_one_line(capsys):
    from dynosim.cli import main

    argv = ["replay", "--synthetic", "--isl", "10", "--osl", "10", "--duration-s", "1e12"]
    assert main([*argv, "--rate", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dynosim: error: workload.duration_s 1e+12 s at workload.rate 1/s")
    assert "1,000,000,000,000 requests" in err and len(err.splitlines()) == 1


def test_a_trace_is_identified_by_the_hash_of_the_bytes_it_replayed(tmp_path):
    path = tmp_path / "t.jsonl"
    row = '{"timestamp": %d, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
    path.write_text(row % 0 + row % 5)
    read = hashlib.sha256(path.read_bytes()).hexdigest()
    loaded, lazy = load_trace(path), TraceWorkload(path=path)
    assert lazy.sha256() == read  # asking for the hash reads the file
    path.write_text(row % 0)  # changed after the read: the identity stays the replayed bytes'
    assert loaded.sha256() == lazy.sha256() == read
    assert dynosim.replay(loaded).provenance["trace"] == {"name": "t.jsonl", "sha256": read}
