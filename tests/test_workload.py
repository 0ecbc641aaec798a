"""Tests of dynosim.workload: trace loading, validation, the workload rule, synthetic arrivals."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import re
import warnings
from datetime import datetime
from pathlib import Path

import numpy as np
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynosim.errors import WorkloadError
from dynosim.workload import (
    SyntheticWorkload,
    TraceColumns,
    TraceWorkload,
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
    "not an object": ("[1, 2]", 2, ["expected a JSON object", "[1, 2]"]),
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
    "NaN timestamp": (
        '{"timestamp": NaN, "input_length": 1, "output_length": 1, "hash_ids": [1]}',
        2,
        ["field 'timestamp'", "got NaN"],
    ),
    "blank lines still count": ("\n\n" + json.dumps(row(input_length=-7)), 4, ["got -7"]),
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
        ["field 'TIMESTAMP'", "'yesterday'"],
    ),
    "out-of-range timestamp": (
        [AZURE_HEADER, GOOD_CSV_ROW, GOOD_CSV_ROW, "2023-13-16 18:15:46.6805900,374,44"],
        4,
        ["field 'TIMESTAMP'", "'2023-13-16 18:15:46.6805900'"],
    ),
    "NaT timestamp": ([AZURE_HEADER, "NaT,374,44"], 2, ["field 'TIMESTAMP'", "'NaT'"]),
    "fractional tokens": (
        [AZURE_HEADER, "2023-11-16 18:15:46.6805900,12.0,44"],
        2,
        ["field 'ContextTokens': expected a non-negative integer, got '12.0'"],
    ),
    "negative tokens": (
        [AZURE_HEADER, "2023-11-16 18:15:46.6805900,12,-5"],
        2,
        ["field 'GeneratedTokens': expected a non-negative integer, got '-5'"],
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
        row(timestamp=t, input_length=100 + i, hash_ids=[10 * i + j for j in range(i + 1)])
        for i, t in enumerate(times)
    ]
    path = write_rows(tmp_path / "unsorted.jsonl", rows)
    with pytest.warns(UserWarning, match=r"unsorted\.jsonl: 2 of 5 rows .*first at line 2"):
        cols = load_trace(path).columns()
    # Rows 1 and 3 (t=5) come first, then 0 and 2 (t=10) in file order, then 4.
    assert requests(cols) == [
        (0.0, 101, 5, [10, 11]),
        (0.0, 103, 5, [30, 31, 32, 33]),
        (5.0, 100, 5, [0]),
        (5.0, 102, 5, [20, 21, 22]),
        (15.0, 104, 5, [40, 41, 42, 43, 44]),
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
        ({"output_length": np.array([1, 0, 3], dtype=np.uint32)}, "output_length[1]"),
        ({"input_length": np.array([10, 0, 1], dtype=np.uint32)}, "input_length[1]"),
        ({"arrival_ms": np.array([1.0, 1.5, 1.5])}, "first arrival must be 0"),
        ({"arrival_ms": np.array([0.0, 1.5, 1.0])}, "arrival_ms[2]"),
        ({"arrival_ms": np.array([0.0, 1.5, np.inf])}, "arrival_ms[2]"),
        ({"hash_offsets": np.array([0, 1, 3], dtype=np.uint64)}, "hash_offsets"),
        ({"hash_offsets": np.array([0, 3, 1, 4], dtype=np.uint64)}, "hash_offsets[2]"),
        ({"hash_offsets": np.array([0, 1, 3, 3], dtype=np.uint64)}, "hash_offsets"),
        ({"hash_offsets": np.array([0, 2, 3, 4], dtype=np.uint64)}, "too few hash ids"),
        ({"trace_block_size": 0}, "trace_block_size"),
        (
            {
                name: np.array([], dtype=dtype)
                for name, dtype in [
                    ("arrival_ms", np.float64),
                    ("input_length", np.uint32),
                    ("output_length", np.uint32),
                    ("hash_ids", np.uint64),
                ]
            }
            | {"hash_offsets": np.zeros(1, dtype=np.uint64)},
            "at least one request",
        ),
    ],
)
def test_trace_columns_validate(changes, fragment):
    with pytest.raises(WorkloadError) as info:
        small_columns(**changes)
    assert fragment in str(info.value)


def test_trace_columns_replace_revalidates():
    cols = small_columns()
    with pytest.raises(WorkloadError, match="too few hash ids"):
        dataclasses.replace(cols, trace_block_size=16)


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
        blocks = -(-input_length // block) + draw(st.integers(0, 2))
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
