"""Reports saved and read back: the format header, provenance (dynosim version, configuration
hash, trace hash), refusing what is not a current dynosim report, and the pandas view."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest

import dynosim
from dynosim.report import REPORT_FORMAT, REPORT_VERSION, config_sha256, load_report

pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def report() -> dynosim.Report:
    return dynosim.replay(dynosim.sample_trace_path(), {"cluster": {"num_workers": 2}})


def test_provenance_names_the_version_config_and_trace(report):
    p = report.provenance
    assert p["dynosim_version"] == dynosim.__version__
    trace = dynosim.sample_trace_path()
    assert p["trace"] == {
        "name": trace.name,
        "sha256": hashlib.sha256(trace.read_bytes()).hexdigest(),
    }
    # The hash is of the configuration that ran, as canonical JSON: any key order, same hash.
    reordered = dict(reversed(list(report.config.items())))
    assert p["config_sha256"] == config_sha256(reordered)
    other = dynosim.replay(dynosim.sample_trace_path(), {"cluster": {"num_workers": 3}})
    assert other.provenance["config_sha256"] != p["config_sha256"]


def test_in_memory_requests_are_named_by_their_content(columns):
    a = columns([(0.0, 100, 5, [1]), (10.0, 200, 5, [1, 2])], 128)
    b = columns([(0.0, 100, 5, [1]), (10.0, 200, 6, [1, 2])], 128)
    ra, rb = dynosim.replay(a), dynosim.replay(b)
    assert ra.provenance["trace"] == {"name": "columns", "sha256": a.sha256}
    assert rb.provenance["trace"]["sha256"] != ra.provenance["trace"]["sha256"]
    synthetic = dynosim.SyntheticWorkload(isl=64, osl=4, count=5, rate=10.0)
    rs = dynosim.replay(synthetic)
    assert rs.provenance["trace"] == {
        "name": "synthetic",
        "sha256": synthetic.columns().sha256,
    }


def test_a_saved_report_reads_back_byte_identical(report, tmp_path):
    text = report.to_json()
    data = json.loads(text)
    assert data["format"] == {"name": REPORT_FORMAT, "version": REPORT_VERSION}
    path = tmp_path / "run.json"
    path.write_text(text)
    again = load_report(path)
    assert again.to_json() == text
    assert again.summary == report.summary and again.provenance == report.provenance
    # NaN (a rejected or single-token request's missing times) comes back as NaN.
    np.testing.assert_array_equal(again.requests["tpot_ms"], report.requests["tpot_ms"])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json at all", "not a dynosim report (not JSON"),
        ("[1, 2]", "not a dynosim report"),
        ('{"summary": {}}', "not a dynosim report"),
        ('{"format": {"name": "aiperf"}}', "not a dynosim report (format"),
    ],
)
def test_what_is_not_a_report_is_refused_naming_the_file(tmp_path, content, message):
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(dynosim.ReportError, match=re.escape(message)) as info:
        load_report(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_a_report_of_another_format_version_is_refused(report, tmp_path):
    data = json.loads(report.to_json())
    data["format"]["version"] = REPORT_VERSION + 1
    path = tmp_path / "future.json"
    path.write_text(json.dumps(data))
    with pytest.raises(dynosim.ReportError, match=f"format version {REPORT_VERSION + 1}"):
        load_report(path)


def test_a_truncated_column_is_refused(report, tmp_path):
    data = json.loads(report.to_json())
    data["requests"]["ttft_ms"] = data["requests"]["ttft_ms"][:-1]
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(data))
    with pytest.raises(dynosim.ReportError, match=r"requests\.ttft_ms: expected 3,000 values"):
        load_report(path)


def test_an_unreadable_report_names_the_file(tmp_path):
    with pytest.raises(dynosim.ReportError, match=r"missing\.json: cannot read"):
        load_report(tmp_path / "missing.json")


def test_to_pandas_has_a_row_per_request_with_reason_names(columns):
    # Two requests: the second asks for more KV than a worker has (8 blocks of 16 tokens).
    cols = columns([(0.0, 32, 4, [1]), (1.0, 1000, 4, [2, 3])], 512)
    r = dynosim.replay(cols, {"engine": {"block_size": 16, "num_gpu_blocks": 8}})
    frame = r.to_pandas()
    assert len(frame) == 2 and frame.index.name == "request"
    assert list(frame["status"]) == [0, 1]
    assert frame["reject_reason"].iloc[0] == ""
    assert frame["reject_reason"].iloc[1] == r.rejections()[0][1]
    np.testing.assert_array_equal(frame["ttft_ms"].to_numpy(), r.requests["ttft_ms"])
