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


#: A child that runs a command line and prints its peak resident set (MiB) last: the kernel's
#: high-water mark of its own memory (``ru_maxrss`` keeps the parent's across exec).
_COMMAND = """
import sys
from dynosim.bench.offline_replay_bench import PeakRss
from dynosim.cli import main
code = main(sys.argv[1:])
print(PeakRss().peak_mib())
sys.exit(code)
"""


def _command_peak_mib(*argv: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _COMMAND, *argv], check=True, capture_output=True, text=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def test_replay_json_of_10m_requests(benchmark, tmp_path):
    # dynosim replay --synthetic --isl 200 --osl 20 --count 10000000 --rate 2000 --workers 32
    # --json x.json: its JSON took 9.8 GB (the columns as Python numbers, then one string)
    # and died; streamed, the goal is under 3 GB. $DYNOSIM_BENCH_JSON_REQUESTS sets the count.
    n = os.environ.get("DYNOSIM_BENCH_JSON_REQUESTS", "10000000")
    argv = ["replay", "--synthetic", "--isl", "200", "--osl", "20", "--count", n, "--rate"]
    argv += ["2000", "--workers", "32", "--no-progress"]
    without = _command_peak_mib(*argv)
    out = tmp_path / "x.json"
    peak = benchmark.pedantic(
        _command_peak_mib, args=(*argv, "--json", str(out)), rounds=1, iterations=1
    )
    benchmark.extra_info.update(
        requests=int(n),
        json_peak_mib=peak,
        replay_peak_mib=without,
        json_to_replay_peak_ratio=peak / without,
        json_bytes=out.stat().st_size,
    )


#: A child that sweeps a space of N candidates and stops at its first replay, printing its
#: peak resident set (MiB) then.
_SWEEP_CHILD = """
import sys
import dynosim
from dynosim.bench.offline_replay_bench import PeakRss
from dynosim.plan import executors

class FirstReplay(Exception):
    pass

def first(self, key, core_json):
    print(PeakRss().peak_mib())
    raise FirstReplay

executors.Runner.submit = first
n = int(sys.argv[1])
side = int(n ** 0.5)
space = {"sla.ttft_ms": [float(v) for v in range(1, side + 1)],
         "cluster.router_seed": list(range(n // side))}
work = dynosim.SyntheticWorkload(isl=200, osl=20, count=1000, rate=100.0)
try:
    dynosim.sweep(work, None, space, jobs=1, progress=False)
except FirstReplay:
    pass
"""


def _sweep_peak_mib(candidates: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _SWEEP_CHILD, str(candidates)],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def test_million_candidate_sweep_before_its_first_replay(benchmark):
    # A 1,000,000-candidate space (1,000 x 1,000) died with a MemoryError before any replay
    # (all candidates and their configurations listed, ~10 KB each). Lazy, its peak before the
    # first replay is that of a 1-candidate sweep. $DYNOSIM_BENCH_CANDIDATES sets the size
    # (every candidate is validated first: about 0.2 ms each).
    n = int(os.environ.get("DYNOSIM_BENCH_CANDIDATES", "1000000"))
    one = _sweep_peak_mib(1)
    peak = benchmark.pedantic(_sweep_peak_mib, args=(n,), rounds=1, iterations=1)
    benchmark.extra_info.update(
        candidates=n, peak_mib=peak, one_candidate_peak_mib=one, peak_ratio=peak / one
    )
