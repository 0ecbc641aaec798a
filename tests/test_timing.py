"""Table timing, data-parallel ranks and tensor parallelism through the Python API."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import make_columns

import dynosim
from dynosim.cli import EXIT_BAD_INPUT, main
from dynosim.errors import ConfigError


def table(**override) -> dict:
    """Prefill: 100 ms per 1,000 tokens at batch 1, 120 at batch 2, linear in tokens.
    Decode: 5 ms + 1 ms per request + 10 ms per 1,000 context tokens."""
    base = {
        "model": "table",
        "prefill_tokens": [0.0, 1000.0],
        "prefill_batch": [1.0, 2.0],
        "prefill_ms": [[0.0, 0.0], [100.0, 120.0]],
        "decode_batch": [1.0, 9.0],
        "decode_context": [0.0, 1000.0],
        "decode_ms": [[6.0, 16.0], [14.0, 24.0]],
    }
    return {**base, **override}


def one_worker(timing: dict) -> dict:
    return {"cluster": {"num_workers": 1}, "engine": {"block_size": 16}, "timing": timing}


def test_table_interpolates_prefill_and_decode():
    # 500-token prompt alone: 50 ms; then one decode at context 501: 6 + 10 * 0.501 = 11.01.
    report = dynosim.replay(make_columns([(0.0, 500, 2, [1])]), one_worker(table()))
    assert report.requests["ttft_ms"][0] == pytest.approx(50.0)
    assert report.requests["tpot_ms"][0] == pytest.approx(11.01)


def test_table_extrapolates_past_the_edges():
    # 3,000 tokens is past the last point: the 0..1000 segment continues (300 ms).
    report = dynosim.replay(make_columns([(0.0, 3000, 1, [1, 2, 3, 4, 5, 6])]), one_worker(table()))
    assert report.requests["ttft_ms"][0] == pytest.approx(300.0)


def test_table_from_npz_matches_inline(tmp_path):
    path = tmp_path / "t.npz"
    t = table()
    np.savez(path, **{k: np.asarray(v) for k, v in t.items() if k != "model"})
    loaded = dynosim.load_timing_table(path)
    assert loaded == dynosim.TableTiming(**t)
    cols = make_columns([(0.0, 700, 5, [1, 2])])
    a = dynosim.replay(cols, one_worker(loaded.model_dump()))
    b = dynosim.replay(cols, one_worker(t))
    assert a.to_json() == b.to_json()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            {"prefill_tokens": [0.0, 0.0]},
            "timing.prefill_tokens[1]: axis must be strictly increasing",
        ),
        ({"decode_context": []}, "timing.decode_context: needs at least one point"),
        ({"prefill_ms": [[0.0, 0.0]]}, "timing.prefill_ms: needs 2 rows"),
        (
            {"decode_ms": [[6.0, 16.0], [14.0]]},
            "timing.decode_ms[1]: needs 2 values (one per axis point), got 1",
        ),
        ({"decode_ms": [[6.0, -1.0], [14.0, 24.0]]}, "timing.decode_ms[0][1]: must be a finite"),
        (
            {"decode_ms": [[6.0, float("nan")], [14.0, 24.0]]},
            "timing.decode_ms[0][1]: expected a finite number, got NaN",
        ),
    ],
)
def test_bad_tables_name_the_cell(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        dynosim.load_config(one_worker(table(**override)))


def test_npz_missing_arrays(tmp_path):
    path = tmp_path / "bad.npz"
    np.savez(path, prefill_tokens=np.arange(3.0))
    with pytest.raises(ConfigError, match="lacks arrays prefill_batch, prefill_ms"):
        dynosim.load_timing_table(path)


def test_cli_table_timing(tmp_path, capsys):
    path = tmp_path / "t.npz"
    np.savez(path, **{k: np.asarray(v) for k, v in table().items() if k != "model"})
    assert main(["replay", "--timing", "table", "--timing-table", str(path), "--json", "-"]) == 0
    import json

    config = json.loads(capsys.readouterr().out)["config"]
    assert config["timing"]["model"] == "table"
    assert main(["replay", "--timing", "table"]) == EXIT_BAD_INPUT
    assert "--timing table needs --timing-table" in capsys.readouterr().err


def test_data_parallel_and_tensor_parallel_gpu_count():
    config = {
        "cluster": {"num_workers": 2},
        "engine": {"tensor_parallel_size": 4, "data_parallel_size": 2},
        "timing": {"model": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0},
    }
    cols = make_columns([(0.0, 100, 2, [i]) for i in range(4)])
    report = dynosim.replay(cols, config)
    assert report.summary["num_gpus"] == 16
    # Round robin over workers, then over each worker's ranks: four requests, four ranks,
    # all prefilled in the first grouped pass.
    assert report.requests["worker"].tolist() == [0, 1, 0, 1]
    assert report.requests["ttft_ms"].tolist() == [10.0] * 4
    assert report.timeseries["kv_blocks_used"]["max"].shape[1] == 2  # per worker, ranks summed
