"""Size and build time of the HTML report of the full Mooncake conversation trace
(pytest-benchmark). The page must stay under 5 MB (time series in at most 2,048 buckets,
CDFs thinned to 2,048 points) and be built in well under the replay's own few seconds.

Run: ``python -m pytest benches/test_bench_report.py --benchmark-only``.
"""

from __future__ import annotations

import pytest

import dynosim

pytest.importorskip("matplotlib")

#: Disaggregated with links and offload tiers, so every panel of the page is drawn.
CONFIG = {
    "cluster": {"mode": "disaggregated", "num_prefill_workers": 2, "num_decode_workers": 2},
    "engine": {"block_size": 64, "num_gpu_blocks": 4096},
    "kv_transfer": {"kv_bytes_per_token": 160_000, "bandwidth_gbps": 25.0},
    "offload": {"g2_blocks": 8192},
    "sla": {"ttft_ms": 2000.0, "itl_ms": 40.0},
}


@pytest.mark.parametrize("mode", ["aggregated", "disaggregated"])
def test_conversation_report_page(benchmark, conversation, mode):
    config = CONFIG if mode == "disaggregated" else {"cluster": {"num_workers": 4}}
    report = dynosim.replay(conversation, config)
    page = benchmark(report.to_html)
    size_mb = len(page.encode()) / 1e6
    assert size_mb < 5.0
    benchmark.extra_info.update(size_mb=size_mb)
