"""dynosim.plan: the search over worker counts (bisection, its monotonicity check and the
linear-scan fallback) on hand-made oracles, and plans of a real model with AIConfigurator:
bisection against the full grid, bad input, rendering the pick, DP/EP layouts of a
mixture-of-experts model, a base's own role engines."""

from __future__ import annotations

import math

import pytest
import yaml
from conftest import make_columns, needs_aic

import dynosim
from dynosim.cli import main
from dynosim.deploy.lowering import LoweredWorkload
from dynosim.errors import ConfigError
from dynosim.plan.engines import EngineSettings, engine_ladder, layout_search, moves
from dynosim.plan.search import Probe, cost, search, within


def drive(gen, oracle):
    """Run a search against ``oracle(point) -> (met, metric)``; (outcome, points asked)."""
    asked = []
    try:
        batch = next(gen)
        while True:
            asked += batch
            got = {}
            for pt in batch:
                met, metric = oracle(pt)
                got[pt] = Probe(met, 0.0, {"ttft_ms": metric}, {"ttft_ms": 100.0})
            batch = gen.send(got)
    except StopIteration as stop:
        return stop.value, asked


def monotone(need):
    """Meets the SLA from ``need`` workers of every role on; the metric falls with workers."""

    def oracle(pt):
        short = sum(max(0, n - x) for x, n in zip(pt, need, strict=True))
        return short == 0, 50.0 + 30.0 * short + 10.0 / sum(pt)

    return oracle


def test_points_within_the_limit_cheapest_first():
    assert within(5, [2]) == [(1,), (2,)]
    pts = within(6, [1, 2])
    assert pts == [(1, 1), (2, 1), (1, 2), (3, 1), (2, 2), (4, 1)]
    assert all(cost(p, [1, 2]) <= 6 for p in pts)


def test_bisection_on_one_role():
    # 16 counts (32 GPUs of 2): top 16, then 8, 4, 6, 5 -> 5 replays instead of 16.
    outcome, asked = drive(search(32, [2]), monotone([5]))
    assert outcome.best == (5,) and outcome.method == "bisection" and not outcome.violations
    assert asked == [(16,), (8,), (4,), (6,), (5,)]


def test_no_count_meets_rests_on_two_replays():
    outcome, asked = drive(search(8, [1]), monotone([9]))
    assert outcome.best is None and asked == [(8,), (4,)]


def test_bisection_on_two_roles():
    # Prefill 2 GPUs, decode 4; 32 GPUs: at most 14 prefill (with 1 decode) and 7 decode.
    # Bisections along d=7 and p=14 find p >= 3 and d >= 2; (3, 2) costs 14 GPUs and meets.
    outcome, asked = drive(search(32, [2, 4]), monotone([3, 2]))
    assert outcome.best == (3, 2) and outcome.method == "bisection"
    assert len(asked) == 9 and len(within(32, [2, 4])) == 56


def test_interaction_between_roles_is_searched_by_cost():
    # Meets only with p + d >= 9 on top of p >= 2, d >= 2: (2, 2) misses, then cost levels.
    def oracle(pt):
        p, d = pt
        met = p >= 2 and d >= 2 and p + d >= 9
        return met, 200.0 - 10 * (p + d)

    outcome, _ = drive(search(16, [1, 1]), oracle)
    assert outcome.best == (2, 7) and cost(outcome.best, [1, 1]) == 9


def test_a_broken_monotonicity_falls_back_to_a_linear_scan():
    # Meets the SLA at even worker counts only, and odd counts get worse with more workers
    # (as when round robin splits what pairs of workers would share): bisection over 1..7
    # sees 7 miss and would conclude that none meets; 3 (= 7 // 2) misses with a better TTFT
    # than 7 (103 against 107 ms) -> the check fails, and the scan finds 2.
    def oracle(pt):
        (n,) = pt
        return n % 2 == 0, 80.0 if n % 2 == 0 else 100.0 + n

    outcome, asked = drive(search(7, [1]), oracle)
    assert outcome.method == "linear scan" and outcome.best == (2,)
    assert any("ttft_ms" in v for v in outcome.violations)
    assert asked[:2] == [(7,), (3,)] and (1,) in asked and (2,) in asked
    # A count far better than the ones above it (TTFT 0 ms at 2, 52.5 at 4) is a violation.
    oracle2 = monotone([4])
    outcome, _ = drive(search(16, [1]), lambda pt: (True, 0.0) if pt == (2,) else oracle2(pt))
    assert outcome.best == (2,) and outcome.method == "linear scan"
    assert "ttft_ms 52.5 at (4,) > 0.0 at (2,)" in outcome.violations


def test_small_wiggles_within_the_tolerance_are_not_violations():
    def oracle(pt):
        (n,) = pt
        # 6 workers: 96 ms, 1 ms (1 % of the limit) worse than 5 workers' 95.
        return n >= 5, 120.0 - 5 * n + (6.0 if n == 6 else 0.0)

    assert drive(search(16, [1], tolerance=0.02), oracle)[0].method == "bisection"
    assert drive(search(16, [1], tolerance=0.0), oracle)[0].method == "linear scan"


MODEL = {"model": "Qwen/Qwen3-32B", "system": "h200_sxm", "backend": "trtllm"}


@pytest.fixture(scope="module")
def small_trace():
    # 400 requests of 3,000 prompt and 100 output tokens, 8 a second (Poisson).
    return dynosim.SyntheticWorkload(isl=3000, osl=100, count=400, rate=8.0, seed=1)


#: One engine setting (chunked prefill on, TensorRT-LLM's default budget and batch cap): plans
#: that search worker counts only.
ONE_SETTING = {"chunked_prefill": [True], "token_budgets": [8192], "max_batch_size": [256]}

#: The small plans' problem: the model, TTFT p90 <= 400 ms and mean TPOT <= 25 ms on at most 6
#: GPUs, TP 1 and 2.
SMALL_PLAN = dict(
    **MODEL, sla={"ttft_ms": 400, "tpot_ms": 25}, max_gpus=6, tp=(1, 2), progress=False
)


@needs_aic
def test_bisection_agrees_with_the_full_grid(small_trace):
    kwargs = dict(**SMALL_PLAN, **ONE_SETTING)
    bisected = dynosim.plan(small_trace, **kwargs)
    grid = dynosim.plan(small_trace, search="grid", **kwargs)
    assert bisected.grid_size == grid.grid_size == grid.replays_run
    assert bisected.replays_run < grid.replays_run
    assert [(r.name, r.best) for r in bisected.layouts] == [(r.name, r.best) for r in grid.layouts]
    assert [r["layout"] for r in bisected.ranked] == [r["layout"] for r in grid.ranked]
    assert bisected.pick is not None and bisected.pick["gpus"] == grid.pick["gpus"]
    # The candidate to render is read back from the configuration replayed.
    c, pick = bisected.candidate, bisected.pick
    assert c.mode == pick["mode"] and c.backend == "trtllm"
    for role, spec in c.roles().items():
        workers = pick["replicas"] if role == "aggregated" else pick[f"{role}_workers"]
        assert spec.replicas == workers
        assert (spec.chunked_prefill, spec.max_num_tokens, spec.max_batch_size) == (True, 8192, 256)


@needs_aic
def test_plan_bad_input(small_trace):
    with pytest.raises(
        ConfigError,
        match=r"max_gpus 1 is below one worker of every layout: "
        r"the smallest, aggregated tp2, needs 2 GPUs",
    ):
        dynosim.plan(
            small_trace, **MODEL, sla={"ttft_ms": 1000}, max_gpus=1, tp=(2, 4), progress=False
        )
    with pytest.raises(ConfigError, match="max_gpus: expected a positive integer, got 0"):
        dynosim.plan(small_trace, **MODEL, sla={"ttft_ms": 1000}, max_gpus=0, progress=False)
    with pytest.raises(ConfigError, match=r"tp: expected a non-empty list"):
        dynosim.plan(small_trace, **MODEL, sla={"ttft_ms": 1000}, max_gpus=4, tp=(), progress=False)


@needs_aic
def test_no_layout_meets_an_impossible_sla(small_trace):
    res = dynosim.plan(
        small_trace,
        **MODEL,
        sla={"ttft_ms": 1.0},
        max_gpus=4,
        tp=(1, 2),
        modes=("aggregated",),
        progress=False,
    )
    assert res.pick is None and res.ranked == [] and res.candidate is None
    closest = res.closest(3)
    assert closest and all("TTFT p90" in r["sla_misses"] for r in closest)
    # Why none exists: the closest replays, each with TTFT p90 binding, over its limit.
    assert [w.label for w in res.why] == ["closest", "next closest"]
    assert [w.row for w in res.why] == closest[:2]
    for why in res.why:
        assert why.binding.name == "TTFT p90" and why.binding.ratio > 1
        assert why.binding.describe().endswith("% over")


@needs_aic
def test_plan_renders_and_validates_the_pick(small_trace):
    res = dynosim.plan(
        small_trace,
        **MODEL,
        sla={"ttft_ms": 400, "tpot_ms": 25},
        max_gpus=6,
        tp=(2,),
        modes=("aggregated",),
        render=True,
        progress=False,
    )
    assert res.pick is not None and res.rendered is not None and res.problems == []
    assert f"replicas: {res.pick['replicas']}" in res.rendered.text
    assert res.candidate.aggregated.replicas == res.pick["replicas"] == 3


@needs_aic
def test_plan_picks_and_renders_a_data_and_expert_parallel_deployment(tmp_path, capsys):
    # A mixture-of-experts model with attention DP 2 and its experts split 2 ways on vLLM.
    out = tmp_path / "plan"
    argv = [
        "plan",
        *("--synthetic", "--isl", "3000", "--osl", "200", "--rate", "8", "--count", "400"),
        *("--model", "Qwen/Qwen3-30B-A3B", "--system", "h200_sxm", "--backend", "vllm"),
        *("--tp", "1", "--dp", "2", "--ep", "2"),
        *("--sla-ttft-ms", "1000", "--sla-tpot-ms", "30", "--max-gpus", "8"),
        *("--no-progress", "-o", str(out)),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "pick: aggregated tp1 dp2 ep2, chunked on, " in printed and ", 2 GPUs" in printed
    picked = yaml.safe_load((out / "candidate.yaml").read_text())
    engine = {k: picked["aggregated"].pop(k) for k in ("max_batch_size", "max_num_tokens")}
    assert picked["aggregated"] == {
        "replicas": 1,
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "data_parallel_size": 2,
        "expert_parallel_size": 2,
        "chunked_prefill": True,
        "chunk_size": None,
    }
    # The engine settings picked are rungs of the ladder around vLLM's defaults.
    assert engine["max_batch_size"] in (64, 128, 256)
    assert engine["max_num_tokens"] in (4096, 8192, 16384, 32768)
    manifest = (out / "k8s_deploy.yaml").read_text()
    assert "gpu: '2'" in manifest and "--enable-expert-parallel" in manifest
    candidate = str(out / "candidate.yaml")
    assert main(["validate", str(out / "k8s_deploy.yaml"), "--candidate", candidate]) == 0
    assert "no problems" in capsys.readouterr().out
    # Every replay ran the layout: two ranks of one GPU each, the experts split 2 ways.
    rows = (out / "replays.csv").read_text().splitlines()
    header = rows[0].split(",")
    for line in rows[1:]:
        row = dict(zip(header, line.split(","), strict=False))
        assert (row["dp"], row["ep"]) == ("2", "2")


@needs_aic
def test_plan_keeps_the_base_roles_own_engines(small_trace):
    # The decode role's own engine (a smaller pass budget) is kept by every candidate, the
    # searched budget applying to the prefill role only, and its KV blocks are derived for it
    # (the budget sets the activation peak), not the shared one's.
    base = {
        "cluster": {"mode": "disaggregated"},
        "engine": {"backend": "trtllm"},
        "decode": {"engine": {"backend": "trtllm", "max_num_tokens": 1024}},
    }
    res = dynosim.plan(
        small_trace,
        **MODEL,
        sla={"ttft_ms": 400, "tpot_ms": 25},
        max_gpus=6,
        tp=(1,),
        modes=("disaggregated",),
        base=base,
        progress=False,
    )
    assert res.pick is not None
    decode, prefill = res.config.decode.engine, res.config.prefill.engine
    assert decode.max_num_tokens == 1024 and prefill.max_num_tokens in (4096, 8192, 16384, 32768)
    assert res.candidate.decode.max_num_tokens == 1024
    assert decode.num_gpu_blocks is not None and prefill.num_gpu_blocks is not None
    assert decode.num_gpu_blocks > prefill.num_gpu_blocks  # a smaller activation peak


# --- the engine settings: the ladder, its pruning, the moves (hand-made oracles) -----------


def facts(longest_prompt: int, concurrency: int | None) -> LoweredWorkload:
    """A workload's facts as the lowering gives them."""
    return LoweredWorkload(
        kind="trace",
        isl=1000,
        osl=100,
        context_length=longest_prompt + 100,
        longest_prompt=longest_prompt,
        longest_request=longest_prompt + 100,
        requests=1000,
        concurrency=concurrency,
    )


def test_the_trace_facts_prune_the_ladder():
    # TensorRT-LLM: budgets 4,096-32,768 around its 8,192, caps 64/128/256 around 256, chunked
    # context on and off: 24 settings. A 20,000-token prompt rejects chunking off below 20,000
    # (625 blocks of 32), and 100 requests in flight at most make every cap above 128 alike.
    ladder = engine_ladder("trtllm", dynosim.SimConfig(), facts(20_000, 100))
    assert ladder.full == 2 * 4 * 3
    off = sorted({s.budget for s in ladder.settings if s.chunked is False})
    on = sorted({s.budget for s in ladder.settings if s.chunked})
    assert (off, on) == ([20_000, 32_768], [4096, 8192, 16384, 32768])
    assert sorted({s.max_num_seqs for s in ladder.settings}) == [64, 128]
    assert len(ladder.settings) == (2 + 4) * 2
    assert "would reject the longest prompt (20,000 tokens); searched at 20,000" in ladder.pruned[0]
    assert "max_num_seqs 256: at most 100 requests are in flight" in ladder.pruned[1]
    # The reference is the closest to the engine's own (chunking off at 8,192, 256 seqs) that
    # rejects nothing: on at 8,192 with the largest cap kept.
    assert ladder.settings[0] == EngineSettings(True, 8192, 128)
    unpruned = engine_ladder("trtllm", dynosim.SimConfig(), facts(20_000, 100), prune=False)
    assert len(unpruned.settings) == unpruned.full == 24 and unpruned.pruned == []


def test_each_backend_has_its_own_switches():
    vllm = engine_ladder("vllm", dynosim.SimConfig(), facts(1000, None), budgets=[2048])
    assert {s.chunked for s in vllm.settings} == {True}  # AIC renders no chunking off
    sglang = engine_ladder("sglang", dynosim.SimConfig(), facts(1000, None), max_num_seqs=[8])
    assert {s.chunked for s in sglang.settings} == {None}
    assert sglang.settings[0].role_fields("sglang") == {"max_batch_size": 8, "chunk_size": 8192}
    with pytest.raises(ConfigError, match=r"chunked_prefill: SGLang's engine is simulated always"):
        engine_ladder("sglang", dynosim.SimConfig(), facts(1000, None), chunked=[False])
    with pytest.raises(ConfigError, match=r"chunked_prefill: AIC's generator .* renders no chunk"):
        engine_ladder("vllm", dynosim.SimConfig(), facts(1000, None), chunked=[False])
    with pytest.raises(ConfigError, match=r"token_budgets: expected a non-empty list of positive"):
        engine_ladder("vllm", dynosim.SimConfig(), facts(1000, None), budgets=[0])


def missed(ttft: float, tpot: float) -> Probe:
    return Probe(
        False, 0.0, {"ttft_ms": ttft, "tpot_ms": tpot}, {"ttft_ms": 100.0, "tpot_ms": 10.0}
    )


def test_moves_relieve_the_statistic_over_by_the_most():
    grid = [E(c, b, n) for c in (True, False) for b in (4096, 8192, 16384) for n in (64, 128)]
    here = E(True, 8192, 64)
    # TTFT 1.5x over, TPOT within: a larger budget, a larger cap, then chunking off.
    assert moves(grid, here, missed(150, 5)) == [
        E(True, 16384, 64),
        E(True, 8192, 128),
        E(False, 8192, 64),
    ]
    # TPOT 1.5x over: a smaller budget (no smaller cap; chunking is on already).
    assert moves(grid, here, missed(50, 15)) == [E(True, 4096, 64)]
    assert moves(grid, E(False, 8192, 128), missed(50, 15)) == [
        E(False, 4096, 128),
        E(False, 8192, 64),
        E(True, 8192, 128),
    ]
    assert moves(grid, here, missed(90, 9)) == []  # nothing over


E = EngineSettings

#: Workers one role needs per budget (a layout of 1-GPU workers): 16,384 needs 3.
NEED = {4096: 6, 8192: 5, 16384: 3}


def budget_oracle(settings: list[EngineSettings], rejecting: frozenset[int] = frozenset()):
    """TTFT falls with workers and a larger budget; setting indices in ``rejecting`` reject."""

    def probe(key):
        k, (n,) = key
        if k in rejecting:
            return Probe(False, 1.0, {"ttft_ms": math.nan}, {"ttft_ms": 100.0})
        short = NEED[settings[k].budget] - n
        return Probe(short <= 0, 0.0, {"ttft_ms": 95.0 + 10.0 * max(short, 0)}, {"ttft_ms": 100.0})

    return probe


def drive_layout(gen, oracle, bound=None):
    """Run a layout search; the bound sent is its own reference's (or ``bound``)."""
    asked = []
    sent = None
    try:
        while True:
            batch = gen.send(sent)
            if batch == []:
                sent = bound if bound is not None else 10**6
                continue
            asked += batch
            sent = {key: oracle(key) for key in batch}
    except StopIteration as stop:
        return stop.value, asked


def test_settings_are_searched_where_the_constraint_binds():
    settings = [E(True, b, n) for b in (8192, 4096, 16384) for n in (64, 128)]
    oracle = budget_oracle(settings)
    found, asked = drive_layout(layout_search(8, [1], settings), oracle, bound=5)
    # The reference (8,192 tokens) needs 5 workers; at 4, TTFT binds: a larger budget meets
    # the SLA there, and its own bisection finds 3.
    assert found.best == (settings.index(E(True, 16384, 64)), (3,))
    every, every_asked = drive_layout(layout_search(8, [1], settings, every_setting=True), oracle)
    assert every.best == found.best  # the unpruned reference agrees, with more replays
    assert len(set(asked)) < len(set(every_asked))
    # A bound at or below the cheapest point found leaves the other settings untried.
    found, asked = drive_layout(layout_search(8, [1], settings), oracle, bound=2)
    assert found.best == (0, (5,)) and {k for k, _ in asked} == {0}


def test_a_rejecting_reference_is_passed_over():
    settings = [E(False, 8192, 64), E(True, 8192, 64), E(True, 16384, 64)]
    oracle = budget_oracle(settings, rejecting=frozenset({0}))
    found, asked = drive_layout(layout_search(8, [1], settings), oracle)
    assert found.best is not None and found.best[0] != 0
    assert all(not oracle(key).met for key in asked if key[0] == 0)


# --- plans of a real model with engine settings, links and reasons (AIC) -------------------


def one_long_prompt(long: int = 20_000) -> dynosim.TraceColumns:
    """60 requests of 1,000 prompt and 50 output tokens, 10 a second, and one of ``long``
    prompt tokens, all of distinct prefixes (512-token hash blocks)."""
    rows, next_id = [], 0
    for i in range(61):
        isl = long if i == 30 else 1000
        blocks = -(-isl // 512)
        rows.append((100.0 * i, isl, 50, list(range(next_id, next_id + blocks))))
        next_id += blocks
    return make_columns(rows)


AGG_TP1 = {**MODEL, "tp": (1,), "modes": ("aggregated",), "progress": False}


@needs_aic
def test_a_prompt_longer_than_the_budget_makes_the_plan_chunk():
    # TensorRT-LLM's default (chunked context off, 8,192 tokens) rejects the 20,000-token
    # prompt; searched unpruned, those candidates are replayed and reject it every time, and
    # the pick chunks it.
    trace = one_long_prompt()
    unpruned = dynosim.plan(
        trace,
        **AGG_TP1,
        sla={"ttft_ms": 5000, "tpot_ms": 100},
        max_gpus=2,
        chunked_prefill=[True, False],
        token_budgets=[8192],
        max_batch_size=[64],
        prune=False,
    )
    off = [r for r in unpruned.replays.rows if r["chunked_prefill"] is False]
    assert off and all(r["rejected"] == 1 and not r["sla_met"] for r in off)
    assert unpruned.pick["chunked_prefill"] is True and unpruned.pick["rejected"] == 0
    assert unpruned.candidate.aggregated.chunked_prefill is True
    assert unpruned.probes == 0
    # Pruned, chunking off is searched at the longest prompt in whole blocks of 32 (625), and
    # no candidate that rejects a request is ever replayed.
    pruned = dynosim.plan(
        trace,
        **AGG_TP1,
        sla={"ttft_ms": 5000, "tpot_ms": 100},
        max_gpus=2,
        chunked_prefill=[False],
        token_budgets=[8192],
        max_batch_size=[64],
    )
    assert [s.budget for s in pruned.ladder.settings] == [20_000]
    assert all(r["rejected"] == 0 for r in pruned.replays.rows)
    assert pruned.pick["max_num_tokens"] == 20_000 and pruned.pick["chunked_prefill"] is False


@needs_aic
def test_a_setting_that_rejects_the_longest_requests_is_never_replayed():
    # 100 blocks of 32 tokens hold no 20,000-token prompt: every setting is rejected by its
    # probe of the two longest requests, nothing is replayed in full, and the plan says why.
    res = dynosim.plan(
        one_long_prompt(),
        **AGG_TP1,
        sla={"ttft_ms": 5000},
        max_gpus=2,
        base={"engine": {"backend": "trtllm", "num_gpu_blocks": 100}},
        token_budgets=[8192],
        max_batch_size=[64],
    )
    assert res.pick is None and res.replays_run == 0 and res.probes == len(res.ladder.settings)
    (layout,) = res.layouts
    assert len(layout.rejecting) == len(res.ladder.settings)
    assert all("prompt_exceeds_kv_cache" in why for why in layout.rejecting)


def _key(row):
    return (row["layout"], row["prefill_workers"], row["decode_workers"])


@needs_aic
def test_disaggregated_candidates_move_kv_over_the_systems_links(small_trace):
    from dynosim.aic.database import gpu_links_gbps

    kwargs = dict(**SMALL_PLAN, **ONE_SETTING, modes=("disaggregated",))
    res = dynosim.plan(small_trace, **kwargs)
    c, link = res.candidate, gpu_links_gbps("h200_sxm")["inter_node"]
    transfer = res.config.kv_transfer
    assert transfer.bandwidth_gbps == c.prefill.tensor_parallel_size * link
    assert transfer.decode_bandwidth_gbps == c.decode.tensor_parallel_size * link
    assert res.config.kv_transfer.kv_shape is not None  # the model's KV bytes size the moves
    assert 0 < res.transfer["share"] < 1 and res.transfer["mean_ms"] > 0
    # A slower link (a flag): every candidate replayed by both plans waits longer for its KV.
    slow = dynosim.plan(small_trace, kv_link_gbps=5.0, **kwargs)
    fast = {_key(r): r["ttft_mean_ms"] for r in res.replays.rows}
    both = [(fast[_key(r)], r["ttft_mean_ms"]) for r in slow.replays.rows if _key(r) in fast]
    assert both and all(s > f for f, s in both)
    # A base that sets the link keeps it.
    base = {"kv_transfer": {"bandwidth_gbps": 400.0, "kv_bytes_per_token": 262144}}
    kept = dynosim.plan(small_trace, base=base, **kwargs)
    assert kept.config.kv_transfer.bandwidth_gbps == 400.0
    # Offload tiers: a rank's G1<->G2 link is its GPUs' PCIe links, the smallest rank's.
    tiers = dynosim.plan(small_trace, base={"offload": {"g2_blocks": 4096}}, **kwargs)
    tps = [s.tensor_parallel_size for s in tiers.candidate.roles().values()]
    pcie = gpu_links_gbps("h200_sxm")["pcie"]
    assert tiers.config.offload.g2_blocks == 4096
    assert tiers.config.offload.g1_g2_gbps == min(tps) * pcie


@needs_aic
def test_the_plan_says_which_constraint_binds_and_by_how_much(small_trace):
    res = dynosim.plan(small_trace, **SMALL_PLAN, **ONE_SETTING)
    labels = [w.label for w in res.why]
    assert labels[:2] == ["pick", "runner-up"] and res.why[1].row is res.runner_up
    for why in res.why:
        names = [c.name for c in why.constraints]
        assert names[:3] == ["rejections", "TTFT p90", "TPOT mean"] and names[-1] == "memory"
        ratios = {c.name: c.ratio for c in why.constraints}
        assert ratios["TTFT p90"] == pytest.approx(why.row["ttft_p90_ms"] / 400)
        assert ratios["TPOT mean"] == pytest.approx(why.row["tpot_mean_ms"] / 25)
        assert why.binding.ratio == max(ratios.values())
        met = why.label != "pick at fewer GPUs"
        assert (why.binding.ratio <= 1) == met == why.row["sla_met"]
    _, rows = res.why_table()
    assert rows[0][0] == "pick" and rows[0][5] == res.why[0].binding.describe()
    assert ("headroom" in rows[0][5]) and (
        rows[-1][0] != "pick at fewer GPUs" or "over" in rows[-1][5]
    )


@needs_aic
def test_the_pruned_search_finds_what_every_setting_finds(small_trace):
    # The slow reference: every setting of the whole ladder searched for its fewest GPUs.
    kwargs = dict(
        **SMALL_PLAN,
        modes=("aggregated",),
        token_budgets=[2048, 8192],
        max_batch_size=[16, 256],
    )
    pruned = dynosim.plan(small_trace, **kwargs)
    every = dynosim.plan(small_trace, prune=False, **kwargs)
    assert pruned.pick is not None and every.pick is not None
    assert pruned.pick["gpus"] == every.pick["gpus"]
    assert pruned.replays_run < every.replays_run
    assert pruned.grid_size == every.grid_size
