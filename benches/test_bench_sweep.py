"""Sweep speed and memory on the full Mooncake conversation trace (pytest-benchmark).

Run: ``python -m pytest benches/test_bench_sweep.py --benchmark-only``. Each benchmark sets its
ratio against a peer measured in the same run in ``extra_info`` (timings are not asserted):

- ``ratio_to_one_by_one``: 64 candidates swept with 2 threads over the same candidates replayed
  one by one with ``dynosim.replay`` (goal <= 0.6);
- ``overhead_ms_per_candidate``: a sweep's wall time beyond the sum of its replays' wall times,
  per candidate, on one thread (goal < 5 ms);
- ``peak_ratio``: peak RSS of a process sweeping the 64 candidates on 2 threads over that of a
  process replaying one of them (goal < 2).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import dynosim

#: 8 worker counts x 2 batch caps x 2 block sizes x 2 routers = 64 candidates.
SPACE = {
    "cluster.num_workers": [2, 3, 4, 5, 6, 7, 8, 9],
    "engine.max_num_seqs": [64, 256],
    "engine.block_size": [32, 64],
    "cluster.router": ["round_robin", "kv_aware"],
}
SLA = {"ttft_ms": 2000.0, "tpot_ms": 50.0}


def test_sweep_64_candidates_two_threads(benchmark, conversation):
    configs = list(dynosim.Space(SPACE).configs(dynosim.load_config(None)))
    start = time.perf_counter()
    one_by_one = [dynosim.replay(conversation, c).summary for c in configs]
    serial_s = time.perf_counter() - start
    result = benchmark.pedantic(
        dynosim.sweep,
        args=(conversation, None, SPACE),
        kwargs={"sla": SLA, "jobs": 2, "progress": False},
        rounds=1,
        iterations=1,
    )
    assert len(result) == 64 and not result.failed().rows
    # The sweep replays what replay() does (goodput aside: the SLA sets its thresholds).
    assert [r["ttft_p90_ms"] for r in result.rows] == [s["ttft_ms"]["p90"] for s in one_by_one]
    if benchmark.stats:  # absent with --benchmark-disable
        benchmark.extra_info.update(
            one_by_one_s=serial_s, ratio_to_one_by_one=benchmark.stats.stats.mean / serial_s
        )


def test_sweep_overhead_per_candidate(benchmark, conversation):
    space = {"cluster.num_workers": [2, 3, 4, 5], "engine.max_num_seqs": [64, 256]}

    def run():
        start = time.perf_counter()
        result = dynosim.sweep(conversation, None, space, sla=SLA, jobs=1, progress=False)
        return result, time.perf_counter() - start

    result, wall_s = benchmark.pedantic(run, rounds=1, iterations=1)
    replays_s = sum(r["wall_ms"] for r in result.rows) / 1e3
    assert replays_s <= wall_s
    benchmark.extra_info.update(
        overhead_ms_per_candidate=(wall_s - replays_s) * 1e3 / len(result),
        replay_ms_mean=replays_s * 1e3 / len(result),
    )


_CHILD = """
import json, resource, sys
import dynosim
cols = dynosim.load_trace(sys.argv[1]).columns()
space = json.loads(sys.argv[2])
if sys.argv[3] == "one":
    config = list(dynosim.Space(space).configs(dynosim.load_config(None)))[-1]
    dynosim.replay(cols, config)
else:
    dynosim.sweep(cols, None, space, jobs=2, progress=False)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def _peak_mib(trace: str, what: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, trace, json.dumps(SPACE), what],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def test_sweep_peak_memory(benchmark, conversation_path):
    # One candidate (9 workers, the most) alone, against the whole sweep on 2 threads.
    one = _peak_mib(str(conversation_path), "one")
    sweep_mib = benchmark.pedantic(
        _peak_mib, args=(str(conversation_path), "sweep"), rounds=1, iterations=1
    )
    assert one > 0 and sweep_mib > 0
    benchmark.extra_info.update(
        one_replay_peak_mib=one, sweep_peak_mib=sweep_mib, peak_ratio=sweep_mib / one
    )
