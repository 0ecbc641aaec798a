"""The replays a profile-guided build trains on: what the compiler learns here about which
branches are taken and which calls are hot decides how it lays out the core's code.

Run as ``python pgo_training.py`` against an instrumented build (its counts are written when
the process exits). The set spans what dynosim is used for, not one benchmark: the bundled
sample on aggregated and disaggregated clusters (links instant, at line rate and shared max-min),
each engine flavour, the vLLM engine both with and without async scheduling, a cache small
enough to preempt, a host-memory offload tier, and synthetic traffic on many workers, and on
enough workers that their caches' share of the identity-index memory is too small for an
array, so they find blocks through the hashed index (as long traces on large clusters do).
"""

from __future__ import annotations

import dynosim

_DISAGG = {"mode": "disaggregated", "num_prefill_workers": 2, "num_decode_workers": 2}
_KV = {"kv_bytes_per_token": 262_144}
#: vLLM as Dynamo's mocker runs it: each pass formed when the one before ends.
_SYNC_VLLM = {"async_scheduling": False, "scheduler_reserve_full_isl": False}

CONFIGS: list[dict] = [
    {"cluster": {"num_workers": 4}},
    {"cluster": {"num_workers": 4}, "engine": _SYNC_VLLM},
    {"cluster": {"num_workers": 2}, "engine": {"num_gpu_blocks": 3_000}},
    {"cluster": {"num_workers": 2}, "kv_transfer": _KV, "offload": {"g2_blocks": 20_000}},
    {"cluster": {"num_workers": 4}, "engine": {"backend": "sglang"}},
    {"cluster": {"num_workers": 4}, "engine": {"backend": "trtllm"}},
    {"cluster": _DISAGG, "kv_transfer": {**_KV, "first_token": "first_decode_pass"}},
    {
        "cluster": _DISAGG,
        "kv_transfer": {**_KV, "bandwidth_gbps": 25.0, "link_model": "line_rate"},
        "engine": _SYNC_VLLM,
    },
    {"cluster": _DISAGG, "kv_transfer": {**_KV, "bandwidth_gbps": 25.0, "link_model": "max_min"}},
    {"cluster": _DISAGG, "kv_transfer": _KV, "engine": {"backend": "sglang"}},
]


def main() -> None:
    sample = dynosim.load_trace(dynosim.sample_trace_path())
    for config in CONFIGS:
        dynosim.replay(sample, config)
    synthetic = dynosim.SyntheticWorkload(isl=200, osl=20, rate=2000.0, count=50_000, seed=1)
    dynosim.replay(synthetic, {"cluster": {"num_workers": 32}})
    # 20,000 prompts of 2,000 tokens name over 600,000 blocks; 256 caches share 256 MiB of
    # identity index, 1 MiB each: 524,288 two-byte entries, too few.
    long = dynosim.SyntheticWorkload(isl=2000, osl=20, rate=200.0, count=20_000, seed=1)
    dynosim.replay(long, {"cluster": {"num_workers": 256}})


if __name__ == "__main__":
    main()
