"""More replay speed on the full Mooncake conversation trace (pytest-benchmark), beside
``test_bench_replay.py`` (4 aggregated workers, 2+2 disaggregated with both link models and
the trace load, all at the trace's own pace):

* the same clusters with arrivals 4x faster (Dynamo's offline_replay_bench default), which
  overloads them: KV evictions, preemptions and many concurrent transfers;
* table timing (grids sampled from the polynomial model);
* KV offload tiers (G2, G2+G3, a shared G3) against the same replay without them, and
  against the same tiers with free copies down (``writes: free``);
* the canonical JSON report that offline_replay_bench hashes for its determinism check.

Run: ``python -m pytest benches --benchmark-only``.
"""

from __future__ import annotations

import time

import pytest

import dynosim
from dynosim import _core
from dynosim.replay import core_config_json
from dynosim.report import Report

OVERLOAD = 4.0  # arrival speedup ratio


def _disaggregated(link_model: str, speedup: float) -> dict:
    """2 prefill + 2 decode workers, 64 GB/s links, Qwen3-32B bf16 KV (262,144 bytes/token)."""
    return {
        "cluster": {
            "mode": "disaggregated",
            "num_prefill_workers": 2,
            "num_decode_workers": 2,
            "arrival_speedup_ratio": speedup,
        },
        "engine": {"block_size": 64},
        "kv_transfer": {
            "bandwidth_gbps": 64.0,
            "kv_bytes_per_token": 262_144,
            "link_model": link_model,
        },
    }


def test_aggregated_overloaded(benchmark, conversation):
    config = dynosim.load_config(
        {
            "cluster": {"num_workers": 4, "arrival_speedup_ratio": OVERLOAD},
            "engine": {"block_size": 64},
        }
    )
    report = benchmark(dynosim.replay, conversation, config)
    s = report.summary
    assert s["completed_requests"] + s["rejected_requests"] == len(conversation)
    assert s["num_preemptions"] > 0 and s["num_evictions"] > 0  # the regime this bench is for
    benchmark.extra_info.update(
        passes=s["num_passes"], preemptions=s["num_preemptions"], evictions=s["num_evictions"]
    )


@pytest.mark.parametrize("link_model", ["max_min", "line_rate"])
def test_disaggregated_overloaded(benchmark, conversation, link_model):
    config = dynosim.load_config(_disaggregated(link_model, OVERLOAD))
    report = benchmark(dynosim.replay, conversation, config)
    s = report.summary
    assert s["completed_requests"] + s["rejected_requests"] == len(conversation)
    assert s["num_transfers"] == s["completed_requests"]
    benchmark.extra_info.update(
        rate_recomputations=s["rate_recomputations"], transfer_mean_ms=s["transfer_ms"]["mean"]
    )


def _polynomial_table() -> dict:
    """Table timing sampled from the polynomial model (Dynamo mocker's) on 64 x 64 blocks of
    16,384 KV blocks per worker: prefill over tokens in the pass (batch-independent), decode
    over batch size and mean context (the polynomial's load is batch x context / capacity)."""
    capacity = 16_384 * 64
    tokens = [1, 256, 1024, 2048, 4096, 8192, 16_384]
    prefill_batch = [1, 4, 16, 64]
    decode_batch = [1, 8, 32, 64, 128, 256]
    context = [64, 1024, 4096, 16_384, 65_536, 131_072]

    def prefill_ms(t: float) -> float:
        return 4.209989e-7 * t * t + 1.518344e-2 * t + 16.50142

    def decode_ms(load: float) -> float:
        p = min(1.0, load)
        return max(1.0, -25.74 * p * p + 54.01 * p + 5.74)

    return {
        "model": "table",
        "prefill_tokens": tokens,
        "prefill_batch": prefill_batch,
        "prefill_ms": [[prefill_ms(t) for _ in prefill_batch] for t in tokens],
        "decode_batch": decode_batch,
        "decode_context": context,
        "decode_ms": [[decode_ms(b * c / capacity) for c in context] for b in decode_batch],
    }


@pytest.mark.skipif(
    not hasattr(dynosim, "TableTiming"), reason="this dynosim has no table timing model"
)
@pytest.mark.parametrize("mode", ["aggregated", "disaggregated"])
def test_table_timing(benchmark, conversation, mode):
    settings = (
        {"cluster": {"num_workers": 4}, "engine": {"block_size": 64}}
        if mode == "aggregated"
        else _disaggregated("max_min", 1.0)
    )
    config = dynosim.load_config({**settings, "timing": _polynomial_table()})
    report = benchmark(dynosim.replay, conversation, config)
    s = report.summary
    assert report.config["timing"]["model"] == "table"
    assert s["completed_requests"] + s["rejected_requests"] == len(conversation)
    benchmark.extra_info.update(passes=s["num_passes"], ttft_mean_ms=s["ttft_ms"]["mean"])


def _aic_tables(tmp_path_factory, backend: str) -> dict:
    """Qwen3-32B on h200_sxm with ``backend`` at TP1, AIC's operator tables (built once)."""
    pytest.importorskip("aiconfigurator_core")
    from dynosim.aic import aic_table_timing
    from dynosim.config import AicTiming

    spec = AicTiming(model_name="Qwen/Qwen3-32B", system="h200_sxm", backend=backend)
    tables, _ = aic_table_timing(spec, cache_dir=tmp_path_factory.mktemp("aic"))
    return tables.model_dump()


@pytest.fixture(scope="session")
def aic_timing(tmp_path_factory) -> dict:
    return _aic_tables(tmp_path_factory, "trtllm")


@pytest.fixture(scope="session")
def aic_vllm_timing(tmp_path_factory) -> dict:
    return _aic_tables(tmp_path_factory, "vllm")


def test_aic_operator_tables(benchmark, conversation, aic_timing):
    # Passes priced from AIC's operator tables: a lookup per operator group, and per pass
    # with prefill chunks the chunks' attention work.
    config = {"cluster": {"num_workers": 4}, "engine": {"block_size": 64}, "timing": aic_timing}
    report = benchmark(dynosim.replay, conversation, config)
    s = report.summary
    assert s["completed_requests"] + s["rejected_requests"] == len(conversation)
    benchmark.extra_info.update(passes=s["num_passes"], ttft_mean_ms=s["ttft_ms"]["mean"])


@pytest.mark.parametrize("explain", [False, True], ids=["plain", "explained"])
def test_aic_vllm_explained(benchmark, conversation, aic_vllm_timing, explain):
    # vLLM's passes as it runs them (async scheduling, CUDA-graph padding, decode spread), and
    # the cost of keeping where the time went (callgrind on this machine: 1.23 G instructions
    # plain, 1.35 G explained, 1.10x).
    config = {
        "cluster": {"num_workers": 4},
        "engine": {"block_size": 64, "backend": "vllm", "num_gpu_blocks": 16384},
        "timing": aic_vllm_timing,
        "report": {"explain": explain},
    }
    report = benchmark(dynosim.replay, conversation, config)
    s = report.summary
    assert s["completed_requests"] + s["rejected_requests"] == len(conversation)
    if explain:
        stages = sum(st["mean_ms"] for st in report.breakdown()["ttft_stages"])
        assert stages == pytest.approx(s["ttft_ms"]["mean"], rel=1e-9)
    benchmark.extra_info.update(passes=s["num_passes"], ttft_mean_ms=s["ttft_ms"]["mean"])
    if explain and not benchmark.disabled:
        rounds = benchmark.stats.stats.rounds
        plain = {**config, "report": {"explain": False}}
        best = min(_seconds(dynosim.replay, conversation, plain) for _ in range(rounds))
        benchmark.extra_info["x_explain_off"] = benchmark.stats.stats.min / best


_TIERS = {
    "g2": {"g2_blocks": 8192},
    "g2+g3": {"g2_blocks": 8192, "g3_blocks": 32768},
    "g2+shared_g3": {"g2_blocks": 8192, "g3_blocks": 131072, "g3_shared": True},
}


@pytest.mark.parametrize("tiers", list(_TIERS))
def test_offload_tiers(benchmark, conversation, tiers):
    base = {
        "cluster": {"num_workers": 4},
        "engine": {"block_size": 64},
        "kv_transfer": {"kv_bytes_per_token": 160_000.0},
    }
    report = benchmark(dynosim.replay, conversation, {**base, "offload": _TIERS[tiers]})
    without = dynosim.replay(conversation, base)
    s = report.summary
    assert s["prefix_reuse_ratio"] > without.summary["prefix_reuse_ratio"]
    benchmark.extra_info.update(reuse=s["prefix_reuse_ratio"], ttft_mean_ms=s["ttft_ms"]["mean"])
    if not benchmark.disabled:
        # The cost of the tiers: this bench's best over the best of as many replays without
        # them (the same statistic on both sides; the machine's noise only adds time).
        rounds = benchmark.stats.stats.rounds
        best = min(_seconds(dynosim.replay, conversation, base) for _ in range(rounds))
        benchmark.extra_info["x_tiers_off"] = benchmark.stats.stats.min / best
        # The cost of copies down being flows: the same over the tiers with free copies.
        free = {**base, "offload": {**_TIERS[tiers], "writes": "free"}}
        best = min(_seconds(dynosim.replay, conversation, free) for _ in range(rounds))
        benchmark.extra_info["x_free_writes"] = benchmark.stats.stats.min / best


def _seconds(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def test_canonical_report_json(benchmark, conversation):
    config = dynosim.load_config({"cluster": {"num_workers": 4}, "engine": {"block_size": 64}})
    raw = _core.replay(conversation, core_config_json(config))
    expected = dynosim.replay(conversation, config)
    # A fresh Report each round: to_json() caches its result.
    text = benchmark(lambda: Report(raw, expected.provenance).to_json())
    assert text == expected.to_json()
    benchmark.extra_info.update(megabytes=len(text) / 1e6)
