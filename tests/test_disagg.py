"""Disaggregated serving and the max-min link allocator through the Python API."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import make_columns
from hypothesis import given, settings
from hypothesis import strategies as st

import dynosim
from dynosim.cli import main
from dynosim.errors import ConfigError

GB = 1e6  # bytes per ms in one GB/s


def disagg(prefill: int, decode: int, **kv) -> dict:
    """Fixed 10 ms prefill / 1 ms decode, 1 GB/s links, 1 MB of KV per token."""
    return {
        "cluster": {
            "mode": "disaggregated",
            "num_prefill_workers": prefill,
            "num_decode_workers": decode,
        },
        "timing": {"model": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0},
        "kv_transfer": {"bandwidth_gbps": 1.0, "kv_bytes_per_token": 1e6, **kv},
    }


def two_requests():
    """Two 128-token prompts at t=0: a 128 ms transfer each on an idle 1 GB/s link."""
    return make_columns([(0.0, 128, 3, [1]), (0.0, 128, 3, [2])], 128)


def transfer_ms(report) -> list[float]:
    r = report.requests
    return (r["transfer_end_ms"] - r["transfer_start_ms"]).tolist()


@pytest.mark.parametrize(
    ("prefill", "decode", "expected"),
    [
        (2, 1, [256.0, 256.0]),  # two transfers into one decode rank
        (1, 2, [256.0, 256.0]),  # two transfers out of one prefill rank
        (2, 2, [128.0, 128.0]),  # separate ranks
    ],
)
def test_golden_link_sharing(prefill, decode, expected):
    report = dynosim.replay(two_requests(), disagg(prefill, decode))
    assert transfer_ms(report) == expected
    # The first token counts from the end of prefill (10 ms) plus the transfer.
    assert report.requests["ttft_ms"].tolist() == [10.0 + t for t in expected]
    assert report.summary["num_transfers"] == 2


def test_line_rate_prices_each_transfer_alone():
    report = dynosim.replay(two_requests(), disagg(2, 1, link_model="line_rate"))
    assert transfer_ms(report) == [128.0, 128.0]


def test_worked_example_through_max_min_rates():
    # Links P0, P1, D0 at 1 GB/s and D1 at 0.3; A: P0->D0, B: P0->D1, C: P1->D1.
    rates = dynosim.max_min_rates([[0, 2], [0, 3], [1, 3]], [1.0, 1.0, 1.0, 0.3])
    assert rates == pytest.approx([0.85, 0.15, 0.15], rel=1e-12)


def test_max_min_rates_caps_and_errors():
    # A flow capped at 0.2 leaves 0.8 of the shared link to the other.
    assert dynosim.max_min_rates([[0], [0]], [1.0], caps=[0.2, float("inf")]).tolist() == (
        pytest.approx([0.2, 0.8])
    )
    with pytest.raises(ConfigError, match="link id 5 is out of range"):
        dynosim.max_min_rates([[0, 5]], [1.0, 1.0])
    with pytest.raises(ConfigError, match="capacity"):
        dynosim.max_min_rates([[0]], [0.0])


def test_per_role_settings_and_decode_link():
    config = disagg(1, 1, decode_bandwidth_gbps=0.5)
    config["prefill"] = {"timing": {"model": "fixed", "prefill_ms": 40.0, "decode_ms": 1.0}}
    report = dynosim.replay(make_columns([(0.0, 128, 2, [1])], 128), config)
    # Prefill 40 ms (the prefill role's own timing), transfer at the 0.5 GB/s receive link.
    assert report.requests["transfer_start_ms"].tolist() == [40.0]
    assert transfer_ms(report) == [256.0]


def test_kv_bytes_from_the_model_shape():
    # Qwen3-32B: 64 layers, 8 KV heads, head dim 128, bf16 -> 262,144 bytes per token.
    config = disagg(1, 1)
    del config["kv_transfer"]["kv_bytes_per_token"]
    config["kv_transfer"]["kv_shape"] = {
        "num_layers": 64,
        "num_kv_heads": 8,
        "head_dim": 128,
        "dtype_bytes": 2,
    }
    report = dynosim.replay(make_columns([(0.0, 128, 2, [1])], 128), config)
    assert report.requests["transfer_bytes"].tolist() == [128 * 262_144]


@pytest.mark.parametrize(
    ("kv", "message"),
    [
        ({"kv_bytes_per_token": None}, "kv_transfer.kv_bytes_per_token: required with a bandwidth"),
        (
            {"bandwidth_gbps": float("inf")},
            "kv_transfer.bandwidth_gbps: expected a finite number, got Infinity",
        ),
        ({"bandwidth_gbps": None, "link_model": "max_min"}, "kv_transfer.link_model: needs"),
        ({"decode_bandwidth_gbps": 0.0}, "kv_transfer.decode_bandwidth_gbps"),
    ],
)
def test_bad_transfer_settings(kv, message):
    config = disagg(1, 1, **kv)
    with pytest.raises(ConfigError, match=message):
        dynosim.load_config(config)


def test_cli_disaggregated_flags(capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            f'{{"timestamp": 0, "input_length": 128, "output_length": 2, "hash_ids": [{i}]}}\n'
            for i in range(2)
        )
    )
    argv = [
        "replay",
        str(trace),
        "--trace-block-size",
        "128",
        "--timing",
        "fixed",
        "--prefill-ms",
        "10",
        "--decode-ms",
        "1",
        "--prefill-workers",
        "2",
        "--decode-workers",
        "1",
        "--kv-bandwidth-gbps",
        "1",
        "--kv-bytes-per-token",
        "1e6",
        "--json",
        str(tmp_path / "r.json"),
    ]
    assert main([*argv, "--link-model", "max_min"]) == 0
    assert "prefill + decode workers" in capsys.readouterr().out
    import json

    shared = json.loads((tmp_path / "r.json").read_text())
    assert main([*argv, "--link-model", "line_rate"]) == 0
    alone = json.loads((tmp_path / "r.json").read_text())
    assert shared["summary"]["transfer_ms"]["max"] == 256.0
    assert alone["summary"]["transfer_ms"]["max"] == 128.0


rows_strategy = st.lists(
    st.tuples(st.integers(0, 30), st.integers(1, 300), st.integers(1, 12), st.integers(0, 3)),
    min_size=1,
    max_size=30,
)


@settings(max_examples=50, deadline=None)
@given(
    rows=rows_strategy,
    prefill=st.integers(1, 3),
    decode=st.integers(1, 3),
    send=st.sampled_from([0.5, 1.0, 1 / 3]),
    recv=st.sampled_from([0.25, 1.0, 3.0]),
    model=st.sampled_from(["max_min", "line_rate"]),
    sizing=st.sampled_from(["full_prompt", "destination_missing"]),
)
def test_transfers_conserve_requests_and_bytes(rows, prefill, decode, send, recv, model, sizing):
    t, table = 0.0, []
    for gap, isl, osl, family in rows:
        t += gap if table else 0
        ids = [
            family * 100 + k if k < 1 else 10_000 + len(table) * 10 + k
            for k in range(-(-isl // 64))
        ]
        table.append((t, isl, osl, ids))
    config = disagg(prefill, decode, decode_bandwidth_gbps=recv, link_model=model, sizing=sizing)
    config["kv_transfer"]["bandwidth_gbps"] = send
    config["engine"] = {"block_size": 16, "num_gpu_blocks": 64}
    report = dynosim.replay(make_columns(table, 64), config)
    s, r = report.summary, report.requests
    assert s["completed_requests"] + s["rejected_requests"] == len(rows)
    done = r["status"] == 0
    assert s["num_transfers"] == int(done.sum())
    # No transfer beats its best possible rate: the slower of its two links, all to itself.
    best_ms = r["transfer_bytes"][done] / (min(send, recv) * GB)
    took = r["transfer_end_ms"][done] - r["transfer_start_ms"][done]
    assert (took >= best_ms * (1 - 1e-9) - 1e-9).all()
    if model == "max_min":
        # Bytes delivered over the send links and over the receive links equal bytes sent.
        util = np.array(s["link_utilization"])
        caps = np.array([send] * prefill + [recv] * decode) * GB
        delivered = util * caps * s["duration_ms"]
        total = r["transfer_bytes"][done].sum()
        assert delivered[:prefill].sum() == pytest.approx(total, rel=1e-9, abs=1e-3)
        assert delivered[prefill:].sum() == pytest.approx(total, rel=1e-9, abs=1e-3)
        assert (util <= 1 + 1e-9).all()


def test_order_of_flows_does_not_change_rates():
    flows = [[0, 3], [1, 3], [1, 4], [2, 4], [0, 4]]
    caps = [1.0, 0.7, 2.0, 0.9, 1.3]
    base = dynosim.max_min_rates(flows, caps)
    for perm in itertools.permutations(range(len(flows))):
        rates = dynosim.max_min_rates([flows[i] for i in perm], caps)
        assert rates == pytest.approx(base[list(perm)], rel=1e-12)


def test_handoffs_spread_over_a_decode_workers_data_parallel_ranks():
    # 1 prefill + 1 decode worker, 2 data-parallel ranks each, 2 running requests per rank,
    # instant transfers, 10 ms prefill / 1 ms decode. Four 8-token prompts arrive at 0: each
    # prefill rank takes two, all four hand off at 10 ms. A handoff waiting for its decode
    # rank counts as queued there (4 x waiting + running, as vLLM's balancer scores), so the
    # four split two and two: every first token at 10 ms, the three later tokens by 13 ms.
    # Counting only requests a rank had taken in sent all four to rank 0, and two of them
    # waited for the first two to finish (first tokens at 13 ms, last at 16 ms).
    cfg = {
        "cluster": {"mode": "disaggregated", "num_prefill_workers": 1, "num_decode_workers": 1},
        "engine": {"block_size": 4, "data_parallel_size": 2, "max_num_seqs": 2},
        "timing": {"model": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0},
    }
    rows = [(0.0, 8, 4, [i, 100 + i]) for i in range(4)]
    report = dynosim.replay(make_columns(rows, 4), cfg)
    assert report.requests["ttft_ms"].tolist() == [10.0] * 4
    assert report.requests["last_token_ms"].tolist() == [13.0] * 4
