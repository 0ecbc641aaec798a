"""Replay speed on the full Mooncake conversation trace (pytest-benchmark).

Run: ``python -m pytest benches --benchmark-only``. Reference point: Dynamo's own offline
replay needs about 5.8 s for this trace on 4 aggregated workers on a 2-core machine.
"""

from __future__ import annotations

import resource

import pytest

import dynosim


def test_conversation_trace_4_workers(benchmark, conversation):
    config = dynosim.load_config({"cluster": {"num_workers": 4}, "engine": {"block_size": 64}})
    report = benchmark(dynosim.replay, conversation, config)
    s = report.summary
    assert s["completed_requests"] + s["rejected_requests"] == len(conversation)
    if benchmark.stats:  # absent with --benchmark-disable
        mean_s = benchmark.stats.stats.mean
        benchmark.extra_info.update(
            passes=s["num_passes"],
            events=s["num_events"],
            passes_per_s=s["num_passes"] / mean_s,
            events_per_s=s["num_events"] / mean_s,
            peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        )


@pytest.mark.parametrize("chunked_context", [False, True])
def test_conversation_trace_4_workers_trtllm(benchmark, conversation, chunked_context):
    """The TensorRT-LLM-like engine flavour on the same trace (32-token blocks, no-evict
    admission), against the vLLM-like one above (its time should stay within 1.5x). Without
    chunked context, prompts longer than the 8,192-token budget are rejected."""
    config = dynosim.load_config(
        {
            "cluster": {"num_workers": 4},
            "engine": {"backend": "trtllm", "enable_chunked_context": chunked_context},
        }
    )
    report = benchmark(dynosim.replay, conversation, config)
    s = report.summary
    assert s["completed_requests"] + s["rejected_requests"] == len(conversation)
    assert s["num_preemptions"] == 0  # no-evict never preempts
    benchmark.extra_info.update(passes=s["num_passes"], completed=s["completed_requests"])


@pytest.mark.parametrize("link_model", ["max_min", "line_rate"])
def test_conversation_trace_disaggregated_2p2d(benchmark, conversation, link_model):
    """2 prefill + 2 decode workers, 64 GB/s links, Qwen3-32B bf16 KV (262,144 bytes/token).
    Dynamo's replay needs about 11 s for this at line rate."""
    config = dynosim.load_config(
        {
            "cluster": {"mode": "disaggregated", "num_prefill_workers": 2, "num_decode_workers": 2},
            "engine": {"block_size": 64},
            "kv_transfer": {
                "bandwidth_gbps": 64.0,
                "kv_bytes_per_token": 262_144,
                "link_model": link_model,
            },
        }
    )
    report = benchmark(dynosim.replay, conversation, config)
    s = report.summary
    assert s["completed_requests"] + s["rejected_requests"] == len(conversation)
    assert s["num_transfers"] == s["completed_requests"]
    benchmark.extra_info.update(
        rate_recomputations=s["rate_recomputations"],
        ttft_mean_ms=s["ttft_ms"]["mean"],
        transfer_mean_ms=s["transfer_ms"]["mean"],
    )


def test_trace_load(benchmark, conversation_path):
    cols = benchmark(lambda: dynosim.load_trace(conversation_path).columns())
    assert len(cols) == 12_031


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_conversation_trace_4_workers_by_flavour(benchmark, conversation, backend):
    """The engine flavours side by side on 4 aggregated workers (64-token blocks for both; the
    SGLang flavour's radix cache matches token by token). Compare the two rows' means: the
    SGLang-like replay should take at most 1.5x the vLLM-like one."""
    config = dynosim.load_config(
        {"cluster": {"num_workers": 4}, "engine": {"backend": backend, "block_size": 64}}
    )
    report = benchmark(dynosim.replay, conversation, config)
    s = report.summary
    assert s["completed_requests"] + s["rejected_requests"] == len(conversation)
    benchmark.extra_info.update(
        passes=s["num_passes"],
        preemptions=s["num_preemptions"],
        ttft_mean_ms=s["ttft_ms"]["mean"],
        tpot_mean_ms=s["tpot_ms"]["mean"],
    )
