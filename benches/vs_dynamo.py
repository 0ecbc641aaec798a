"""How many times faster dynosim replays the Mooncake conversation trace than Dynamo 1.6.1's
offline replay, in one process, the two runs alternating, CPU time (``time.process_time``)
compared best against best: on a shared machine the least disturbed run of each side is the
fairest figure.

Each dynosim run reads and parses the trace, then replays it (what Dynamo's
``run_mocker_trace_replay`` does in one call); both run the vLLM engine as Dynamo's mocker does
(each pass formed when the one before ends, a request admitted once its first chunk fits).

Run: ``python benches/vs_dynamo.py [ROUNDS]`` (needs ``dynosim[compare]``; the trace from
``$DYNOSIM_TRACES`` or ../shared/data/traces). Prints one line per setup: the best CPU ms of
each side and their ratio.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import dynosim
from dynosim.compare.dynamo import DynamoReplay

_TRACES = Path(
    os.environ.get("DYNOSIM_TRACES", Path(__file__).resolve().parents[2] / "shared/data/traces")
)
TRACE = _TRACES / "mooncake_conversation.jsonl"

_PEER_VLLM = {"async_scheduling": False, "scheduler_reserve_full_isl": False}
_DISAGG = {"mode": "disaggregated", "num_prefill_workers": 2, "num_decode_workers": 2}
#: 262,144 KV bytes per token: a 64-layer model with 8 KV heads of 128 in bf16.
_KV = 262_144

SETUPS = {
    "aggregated, 4 workers": {"cluster": {"num_workers": 4}},
    "disaggregated 2P+2D, instant": {
        "cluster": _DISAGG,
        "kv_transfer": {"kv_bytes_per_token": _KV, "first_token": "first_decode_pass"},
    },
    "disaggregated 2P+2D, 25 GB/s": {
        "cluster": _DISAGG,
        "kv_transfer": {
            "kv_bytes_per_token": _KV,
            "bandwidth_gbps": 25.0,
            "link_model": "line_rate",
            "first_token": "first_decode_pass",
        },
    },
}


def _dynosim_ms(config: dynosim.SimConfig) -> float:
    t0 = time.process_time()
    dynosim.replay(dynosim.load_trace(TRACE), config)
    return (time.process_time() - t0) * 1000.0


def main(rounds: int) -> None:
    from dynosim._core import PROFILE_GUIDED

    print(f"dynosim build: {'profile-guided' if PROFILE_GUIDED else 'plain (not profile-guided)'}")
    for name, data in SETUPS.items():
        config = dynosim.load_config({**data, "engine": _PEER_VLLM})
        peer = DynamoReplay(TRACE, config, trace_block_size=512)
        ours, theirs = [], []
        for _ in range(rounds):
            ours.append(_dynosim_ms(config))
            theirs.append(peer.run().cpu_ms)
        a, b = min(ours), min(theirs)
        print(
            f"{name}: dynosim {a:.0f} ms (median {sorted(ours)[rounds // 2]:.0f}), "
            f"Dynamo {b:.0f} ms (median {sorted(theirs)[rounds // 2]:.0f}), {b / a:.1f}x",
            flush=True,
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
