"""Plan speed on the full Mooncake conversation trace (pytest-benchmark), with AIConfigurator.

Run: ``python -m pytest benches/test_bench_plan.py --benchmark-only``. Each benchmark records in
``extra_info`` the replays run (and the probes of the trace's two longest requests) against the
full grid (layouts x engine settings x worker counts), and, for the pruned search against every
setting of the whole ladder, the ratio of their wall times and replays (timings are not
asserted):

- ``issue_command``: Qwen/Qwen3-32B on h200_sxm with TensorRT-LLM, TTFT p90 <= 2 s, mean TPOT
  <= 50 ms, at most 32 GPUs: every layout AIConfigurator's default mode considers (TP 1, 2, 4,
  8, aggregated and disaggregated), the default ladder (goal: under 60 s on 2 cores);
- ``pruned_vs_every_setting``: aggregated TP 4 and 8 only, the default ladder, searched pruned
  and unpruned (``prune=False``: every setting's worker counts bisected, none probed first).
"""

from __future__ import annotations

import time

import pytest

import dynosim

pytest.importorskip("aiconfigurator_core")

ISSUE = {
    "model": "Qwen/Qwen3-32B",
    "system": "h200_sxm",
    "backend": "trtllm",
    "sla": {"ttft_ms": 2000.0, "tpot_ms": 50.0},
    "max_gpus": 32,
    "progress": False,
}


def _counts(res) -> dict:
    return {
        "replays": res.replays_run,
        "probes": res.probes,
        "grid_size": res.grid_size,
        "replays_per_grid": res.replays_run / res.grid_size,
        "settings_searched": len(res.ladder.settings),
        "settings_in_ladder": res.ladder.full,
        "pick_gpus": None if res.pick is None else res.pick["gpus"],
    }


def test_plan_issue_command(benchmark, conversation):
    res = benchmark.pedantic(
        dynosim.plan, args=(conversation,), kwargs=ISSUE, rounds=1, iterations=1
    )
    assert res.pick is not None and res.pick["rejected"] == 0
    benchmark.extra_info.update(_counts(res), wall_s=res.wall_s)


def test_plan_pruned_vs_every_setting(benchmark, conversation):
    kwargs = {**ISSUE, "tp": (4, 8), "modes": ("aggregated",)}
    start = time.perf_counter()
    every = dynosim.plan(conversation, prune=False, **kwargs)
    every_s = time.perf_counter() - start
    pruned = benchmark.pedantic(
        dynosim.plan, args=(conversation,), kwargs=kwargs, rounds=1, iterations=1
    )
    assert pruned.pick is not None and every.pick is not None
    assert pruned.grid_size == every.grid_size
    benchmark.extra_info.update(
        pruned=_counts(pruned),
        every_setting=_counts(every),
        every_setting_s=every_s,
        pruned_s=pruned.wall_s,
        wall_ratio=pruned.wall_s / every_s,
        replay_ratio=pruned.replays_run / every.replays_run,
        same_fewest_gpus=pruned.pick["gpus"] == every.pick["gpus"],
    )
