"""The SGLang-like engine flavour (``engine.backend: sglang``): every trace completes with its
counts adding up, invariants under random workloads, and the comparison with Dynamo's mocker."""

from __future__ import annotations

import json

import pytest
from conftest import have, make_columns, requests_strategy
from hypothesis import given, settings
from hypothesis import strategies as st

import dynosim
from dynosim.workload.sample import sample_trace_path

FIXED = {"model": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0}


def assert_accounted_for(report: dynosim.Report, n: int) -> None:
    """Every request ended completed or rejected, and the token counts add up."""
    s = report.summary
    assert s["num_requests"] == n
    assert s["completed_requests"] + s["rejected_requests"] == n
    status = report.requests["status"]
    done = status == 0
    assert int(done.sum()) == s["completed_requests"]
    assert s["total_output_tokens"] == int(report.requests["output_length"][done].sum())
    assert s["itl_ms"]["count"] == int((report.requests["output_length"][done] - 1).sum())
    assert (report.requests["first_token_ms"][done] >= report.requests["arrival_ms"][done]).all()


@pytest.mark.parametrize(
    "name",
    [
        "bundled sample",
        "mooncake_conversation.jsonl",
        "mooncake_synthetic.jsonl",
        "azure_2023_conv.csv",
        "azure_2023_code.csv",
    ],
)
def test_every_trace_completes(real_trace, name):
    path = sample_trace_path() if name == "bundled sample" else real_trace(name)
    workload = dynosim.load_trace(path)
    config = {"cluster": {"num_workers": 4}, "engine": {"backend": "sglang"}}
    report = dynosim.replay(workload, config)
    assert_accounted_for(report, len(workload.columns()))
    assert report.summary["completed_requests"] > 0


def test_disaggregated_with_kv_aware_router_completes():
    workload = dynosim.load_trace(sample_trace_path())
    config = {
        "cluster": {
            "mode": "disaggregated",
            "num_prefill_workers": 2,
            "num_decode_workers": 2,
            "router": "kv_aware",
        },
        "engine": {"backend": "sglang", "num_gpu_blocks": 2048},
    }
    report = dynosim.replay(workload, config)
    assert_accounted_for(report, len(workload.columns()))
    assert report.summary["reused_tokens"] > 0


@settings(max_examples=80, deadline=None)
@given(
    rows=requests_strategy,
    tokens=st.integers(8, 160),
    page=st.sampled_from([1, 2, 4]),
    policy=st.sampled_from(["fcfs", "lpm"]),
    workers=st.integers(1, 3),
    seqs=st.integers(1, 8),
    disaggregated=st.booleans(),
    router=st.sampled_from(["round_robin", "kv_aware"]),
    g2_blocks=st.sampled_from([None, 16]),
)
def test_every_request_completes_or_is_rejected(
    rows, tokens, page, policy, workers, seqs, disaggregated, router, g2_blocks
):
    # Tight caches (8 to 160 tokens) make retractions common.
    t, table = 0.0, []
    for gap, isl, osl, family in rows:
        t += gap if table else 0
        ids = [
            family * 1000 + k if k < 2 else 10**6 + len(table) * 100 + k
            for k in range(-(-isl // 4))
        ]
        table.append((t, isl, osl, ids))
    cluster: dict = {"router": router}
    if disaggregated:
        cluster.update(mode="disaggregated", num_prefill_workers=workers, num_decode_workers=1)
    else:
        cluster.update(num_workers=workers)
    config: dict = {
        "cluster": cluster,
        "engine": {
            "backend": "sglang",
            "block_size": 4,
            "num_gpu_blocks": -(-tokens // 4),
            "max_num_seqs": seqs,
            "page_size": page,
            "schedule_policy": policy,
            "chunked_prefill_size": 16,
            "max_prefill_tokens": 32,
        },
        "timing": FIXED,
        "kv_transfer": {"kv_bytes_per_token": 1e3},
    }
    if g2_blocks is not None:
        config["offload"] = {"g2_blocks": g2_blocks, "g1_g2_gbps": 1.0}
    report = dynosim.replay(make_columns(table, 4), config)
    assert_accounted_for(report, len(rows))


def test_offload_tiers_onboard_an_evicted_prompt():
    """One worker, 16-token blocks, 80 tokens of KV, 1 GB/s G2 link, 1e6 bytes per token."""
    rows = [
        (0.0, 48, 1, [1, 2, 3]),  # A
        (20.0, 64, 1, [11, 12, 13, 14]),  # B: needs 64 of 80 tokens
        (40.0, 64, 1, [11, 12, 13, 14]),  # B again: 63 tokens cached
        (100.0, 64, 1, [1, 2, 3, 31]),  # C: A's prompt, then one more block
    ]
    config = {
        "cluster": {"num_workers": 1},
        "engine": {"backend": "sglang", "block_size": 16, "num_gpu_blocks": 5},
        "timing": FIXED,
        "kv_transfer": {"kv_bytes_per_token": 1e6},
        "offload": {"g2_blocks": 8, "g1_g2_gbps": 1.0},
    }
    r = dynosim.replay(make_columns(rows, 16), config).requests
    # B evicts A's prompt, one radix leaf of 48 tokens, whole (its 3 blocks go to G2). C finds
    # nothing in G1 and A's 3 blocks in G2: 48e6 bytes at 1 GB/s, 100 -> 148 ms (holding them
    # evicts B), then its last 16 tokens prefill in 10 ms: first token at 158 ms.
    assert (r["g1_hit_blocks"][3], r["g2_hit_blocks"][3]) == (0, 3)
    assert (r["onboard_start_ms"][3], r["onboard_end_ms"][3]) == (100.0, 148.0)
    assert (r["ttft_ms"][3], r["reused_tokens"][3]) == (58.0, 48)
    assert r["reused_tokens"][2] == 63  # one token is always computed


def evenly_spaced(tmp_path, n: int, gap_ms: int, isl: int, osl: int):
    """``n`` requests of ``isl`` prompt / ``osl`` output tokens, ``gap_ms`` apart, no shared
    prefix."""
    path = tmp_path / f"spaced_{n}_{gap_ms}_{isl}_{osl}.jsonl"
    rows = [
        {
            "timestamp": gap_ms * i,
            "input_length": isl,
            "output_length": osl,
            "hash_ids": [10 * i + k for k in range(-(-isl // 512))],
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_synthetic_matches_dynamo_numbers(tmp_path):
    # Dynamo 1.6.1's SGLang mocker with its defaults (16,384 pages of one token) on this
    # workload, 1 worker: mean TTFT 32.11 ms, TPOT 9.02 ms (run_mocker_synthetic_trace_replay
    # and run_mocker_trace_replay agree). 256 blocks of 64 tokens are the same 16,384 tokens.
    config = {
        "cluster": {"num_workers": 1},
        "engine": {"backend": "sglang", "num_gpu_blocks": 256},
    }
    report = dynosim.replay(dynosim.load_trace(evenly_spaced(tmp_path, 20, 1000, 1000, 50)), config)
    s = report.summary
    assert s["completed_requests"] == 20
    assert s["ttft_ms"]["mean"] == pytest.approx(32.11, rel=0.02)
    assert s["tpot_ms"]["mean"] == pytest.approx(9.02, rel=0.02)


@pytest.mark.skipif(not have("dynamo"), reason="needs the compare extra (Dynamo)")
@pytest.mark.parametrize(
    ("n", "gap_ms", "isl", "osl"),
    [
        (20, 1000, 1000, 50),  # the synthetic case above, through Dynamo's trace replay
        (100, 20, 1000, 50),  # queueing on a full cache: admission waits, a retraction here
        (200, 10, 600, 100),  # retractions here
    ],
)
def test_side_by_side_with_dynamo(tmp_path, n, gap_ms, isl, osl):
    # Dynamo's default SGLang cache, 16,384 tokens: 256 blocks of 64 here.
    from dynosim.compare.dynamo import DynamoReplay

    config = dynosim.SimConfig.model_validate(
        {"cluster": {"num_workers": 1}, "engine": {"backend": "sglang", "num_gpu_blocks": 256}}
    )
    path = evenly_spaced(tmp_path, n, gap_ms, isl, osl)
    theirs = DynamoReplay(path, config, trace_block_size=512).run().summary
    ours = dynosim.replay(dynosim.load_trace(path), config).summary
    assert theirs["completed_requests"] == ours["completed_requests"] == n
    for metric, key in (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("e2e_latency", "e2e_ms")):
        assert ours[key]["mean"] == pytest.approx(theirs[f"mean_{metric}_ms"], rel=0.02), metric
