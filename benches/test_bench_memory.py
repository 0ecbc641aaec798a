"""Peak memory of replays whose size comes from their requests, not their simulated time
(pytest-benchmark records each figure in ``extra_info``).

Each replay runs in a fresh interpreter so its peak resident set is its own. The synthetic
replay's size is ``$DYNOSIM_BENCH_REQUESTS`` (default 500,000; the issue's figure is for
5,000,000 on 32 workers, about a minute). Run: ``python -m pytest benches/test_bench_memory.py
--benchmark-only``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

#: A child that replays and prints its peak resident set (MiB) and the counts.
_CHILD = """
import json, resource, sys
import dynosim
kind, arg = sys.argv[1], sys.argv[2]
if kind == "synthetic":
    work = dynosim.SyntheticWorkload(isl=200, osl=20, rate=2000.0, count=int(arg), seed=1)
    config = {"cluster": {"num_workers": 32},
              "timing": {"model": "fixed", "prefill_ms": 5.0, "decode_ms": 1.0}}
else:
    work, config = dynosim.load_trace(arg), {"report": {"sample_interval_ms": 1.0}}
report = dynosim.replay(work, config, progress=False)
report.to_json()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
buckets = len(report.timeseries["time_ms"])
print(json.dumps({"peak_mib": peak, "requests": report.num_requests,
                  "completed": report.completed_requests, "buckets": buckets}))
"""


def _peak(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, *args], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_synthetic_replay_on_32_workers(benchmark):
    n = int(os.environ.get("DYNOSIM_BENCH_REQUESTS", "500000"))
    got = benchmark.pedantic(_peak, args=("synthetic", str(n)), rounds=1, iterations=1)
    assert got["completed"] == n
    benchmark.extra_info.update(got, bytes_per_request=got["peak_mib"] * 2**20 / n)


def test_trace_with_a_year_between_rows(benchmark, tmp_path):
    # 1 ms buckets over a year would be 3e10 samples; the series stay at most 2,048 buckets.
    trace = tmp_path / "year.jsonl"
    rows = [(0, [1]), (365 * 86_400_000, [2])]
    trace.write_text(
        "".join(
            json.dumps({"timestamp": t, "input_length": 100, "output_length": 10, "hash_ids": h})
            + "\n"
            for t, h in rows
        )
    )
    got = benchmark.pedantic(_peak, args=("trace", str(trace)), rounds=1, iterations=1)
    assert got["completed"] == 2 and got["buckets"] <= 2048
    assert got["peak_mib"] < 200
    benchmark.extra_info.update(got)
