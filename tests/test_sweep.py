"""dynosim.sweep: spaces and their validation, SLA filtering, the Pareto front and best pick
worked out by hand, executors giving one canonical result, failures kept as rows."""

from __future__ import annotations

import concurrent.futures as cf
import json
import math

import numpy as np
import pytest
from conftest import needs_aic

import dynosim
from dynosim import Sla, Space, sweep
from dynosim._files import write_atomic
from dynosim.errors import ConfigError

# Four requests at t=0, 64-token prompts (one block each, no shared prefix), 11 output tokens.
ROWS = [(0.0, 64, 11, [i]) for i in range(4)]
BASE = {
    "engine": {"block_size": 64, "num_gpu_blocks": 64},
    "timing": {"model": "fixed", "prefill_ms": 20.0, "decode_ms": 10.0},
}
# TP 2 (2 GPUs a worker) with decode passes of 6 ms instead of 10, on 1 or 2 workers.
SPACE = Space.zip({"engine.tensor_parallel_size": [1, 2], "timing.decode_ms": [10.0, 6.0]}) * Space(
    {"cluster.num_workers": [1, 2]}
)


@pytest.fixture
def four(columns):
    return columns(ROWS, 64)


def test_a_space_worked_out_by_hand(four):
    # Every worker prefills its requests in one 20 ms pass (TTFT 20 ms), then decodes the other
    # 10 tokens in 10 passes of D ms: TPOT D, the last token at 20 + 10 D. 44 tokens in all:
    #   tp1 D=10: 120 ms, 366.67 tokens/s; 1 worker 1 GPU -> 366.67/GPU, 2 workers -> 183.33
    #   tp2 D=6:   80 ms, 550 tokens/s;    1 worker 2 GPUs -> 275/GPU,   2 workers -> 137.5
    # tokens/s/user = 1000 / D: 100 (tp1) and 166.67 (tp2).
    result = sweep(four, BASE, SPACE, progress=False)
    assert [r["index"] for r in result.rows] == [0, 1, 2, 3]
    assert [r["gpus"] for r in result.rows] == [1, 2, 2, 4]
    assert [r["ttft_p90_ms"] for r in result.rows] == [20.0] * 4
    assert [r["tpot_mean_ms"] for r in result.rows] == [10.0, 10.0, 6.0, 6.0]
    per_gpu = [r["output_tps_per_gpu"] for r in result.rows]
    assert per_gpu == pytest.approx([44000 / 120, 44000 / 240, 44000 / 160, 44000 / 320])
    assert [r["tps_per_user"] for r in result.rows] == pytest.approx([100, 100, 1000 / 6, 1000 / 6])
    # The front: 1 worker at tp1 (more tokens/s/GPU) and 1 worker at tp2 (more per user);
    # 2 workers are dominated by 1 worker of the same TP.
    assert [r["index"] for r in result.pareto().rows] == [0, 2]
    # Without an SLA every candidate meets it (all requests complete): the fewest GPUs is 0.
    assert result.best()["index"] == 0
    assert result.best("output_tps_per_gpu", minimize=False)["index"] == 0
    assert result.best("tps_per_user", minimize=False)["index"] == 2


def test_sla_filtering(four):
    result = sweep(four, BASE, SPACE, sla=Sla(tpot_ms=8.0, ttft_ms=25.0), progress=False)
    assert [r["sla_met"] for r in result.rows] == [False, False, True, True]
    assert result.rows[0]["sla_misses"] == "TPOT mean 10.0 ms > 8.0 ms"
    assert result.rows[0]["sla_ratio"] == pytest.approx(10 / 8)
    assert result.rows[2]["sla_ratio"] == pytest.approx(max(6 / 8, 20 / 25))
    # Only tp2 meets it; the fewest GPUs is one tp2 worker, the only point of the front.
    assert result.best()["index"] == 2
    assert [r["index"] for r in result.pareto().rows] == [2]
    assert [r["index"] for r in result.pareto(feasible=False).rows] == [0, 2]
    # The SLA's limits became goodput thresholds: every request of tp2 within them.
    assert result.rows[2]["goodput_rps"] == pytest.approx(4 / 0.08)
    assert result.rows[0]["goodput_rps"] == 0.0
    # A percentile SLA: TTFT p99 <= 15 ms is met by none; the closest come first.
    none = sweep(four, BASE, SPACE, sla={"ttft_ms": 15.0, "ttft_stat": "p99"}, progress=False)
    assert not none.feasible().rows and none.best() is None
    assert none.closest(2)[0]["sla_misses"] == "TTFT p99 20.0 ms > 15.0 ms"


def test_rejections_miss_the_sla(columns):
    # A 640-token prompt needs 11 blocks of 64; a cache of 8 rejects it.
    cols = columns([(0.0, 64, 2, [0]), (0.0, 640, 2, list(range(1, 3)))], 512)
    result = sweep(cols, BASE, {"engine.num_gpu_blocks": [8, 16]}, progress=False)
    assert [r["rejected"] for r in result.rows] == [1, 0]
    assert [r["sla_met"] for r in result.rows] == [False, True]
    assert result.rows[0]["sla_misses"] == "1 of 2 requests rejected"


def test_unknown_paths_and_bad_values_name_themselves(four):
    with pytest.raises(
        ConfigError,
        match=r'unknown path "cluster\.num_worker".*allowed keys: '
        r"arrival_speedup_ratio, concurrency, .*num_workers",
    ):
        sweep(four, BASE, {"cluster.num_worker": [1]}, progress=False)
    with pytest.raises(ConfigError, match=r'section "engine" has no key "tp"'):
        Space({"engine.tp": [1]})
    with pytest.raises(ConfigError, match=r"engine\.block_size is a value, not a section"):
        Space({"engine.block_size.x": [1]})
    with pytest.raises(ConfigError, match=r"cluster\.num_workers: expected at least one value"):
        Space({"cluster.num_workers": []})
    with pytest.raises(ConfigError, match=r"zipped lists must have one length"):
        Space.zip({"cluster.num_workers": [1, 2], "engine.max_num_seqs": [1]})
    with pytest.raises(
        ConfigError,
        match=r"candidate 1 \(cluster\.num_workers=\"x\"\): "
        r"cluster\.num_workers: expected an integer, got \"x\"",
    ):
        sweep(four, BASE, {"cluster.num_workers": [1, "x"]}, progress=False)
    with pytest.raises(ConfigError, match=r"candidate 0 \(cluster\.num_workers=0\).*num_workers"):
        sweep(four, BASE, {"cluster.num_workers": [0]}, progress=False)


def test_space_combinators_and_files(tmp_path):
    grid = Space({"cluster.num_workers": [1, 2], "engine.max_num_seqs": [8, 16]})
    assert list(grid) == [
        {"cluster.num_workers": 1, "engine.max_num_seqs": 8},
        {"cluster.num_workers": 1, "engine.max_num_seqs": 16},
        {"cluster.num_workers": 2, "engine.max_num_seqs": 8},
        {"cluster.num_workers": 2, "engine.max_num_seqs": 16},
    ]
    both = grid + Space.of([{"cluster.router": "kv_aware"}])
    assert len(both) == 5 and both.paths[-1] == "cluster.router"
    with pytest.raises(ConfigError, match=r"sets cluster\.num_workers on both sides"):
        grid * Space({"cluster.num_workers": [3]})
    path = tmp_path / "space.yaml"
    path.write_text(
        "cluster.num_workers: [1, 2]\n"
        "zip:\n  engine.tensor_parallel_size: [1, 2]\n  engine.max_num_seqs: [64, 128]\n"
    )
    space = Space.load(path)
    assert len(space) == 4 and space[3] == {
        "cluster.num_workers": 2,
        "engine.tensor_parallel_size": 2,
        "engine.max_num_seqs": 128,
    }
    path.write_text("cluster.num_workers: []\n")
    with pytest.raises(
        ConfigError, match=rf"{path}: space: cluster.num_workers: expected at least"
    ):
        Space.load(path)


def test_role_sections_start_from_the_shared_one(four):
    base = {**BASE, "cluster": {"mode": "disaggregated"}}
    space = Space({"decode.engine.max_num_seqs": [2]})
    (config,) = space.configs(dynosim.load_config(base))
    assert config.decode.engine.max_num_seqs == 2
    # The rest of the role's engine is the shared one's, not the defaults.
    assert config.decode.engine.num_gpu_blocks == 64 and config.prefill.engine is None


def test_tables_numpy_csv_json(four, tmp_path):
    result = sweep(four, BASE, SPACE, sla={"tpot_ms": 8.0}, progress=False)
    arr = result.to_numpy()
    assert arr.dtype["engine.tensor_parallel_size"] == np.int64
    assert arr.dtype["sla_met"] == np.bool_ and arr["sla_met"].tolist() == [0, 0, 1, 1]
    assert arr["gpus"].tolist() == [1, 2, 2, 4]
    path = result.to_csv(tmp_path / "r.csv")
    lines = path.read_text().splitlines()
    assert lines[0].startswith("index,engine.tensor_parallel_size,timing.decode_ms,cluster.")
    assert len(lines) == 5 and ",true," in lines[3]
    assert not list(tmp_path.glob(".*tmp"))
    doc = json.loads(result.to_json())
    assert "wall_ms" not in doc["columns"] and "wall_ms" not in doc["rows"][0]
    assert doc["sla"]["tpot_ms"] == 8.0 and len(doc["rows"]) == 4
    pd = pytest.importorskip("pandas")
    frame = result.to_pandas()
    assert isinstance(frame, pd.DataFrame) and frame["gpus"].tolist() == [1, 2, 2, 4]


def test_an_interrupted_write_leaves_no_file(tmp_path):
    target = tmp_path / "out.csv"
    with pytest.raises(TypeError):
        write_atomic(target, 123)  # type: ignore[arg-type]
    assert not target.exists() and not list(tmp_path.iterdir())


@pytest.fixture(scope="module")
def sample():
    return dynosim.load_trace(dynosim.sample_trace_path()).columns()


SAMPLE_SPACE = {"cluster.num_workers": [1, 2, 3, 4], "engine.max_num_seqs": [16, 256]}


@pytest.fixture(scope="module")
def reference(sample):
    return sweep(sample, None, SAMPLE_SPACE, sla={"ttft_ms": 2000}, jobs=1, progress=False)


@pytest.mark.parametrize(
    "executor, jobs",
    [("threads", 2), ("processes", 2), (cf.ThreadPoolExecutor(3), None)],
    ids=["threads", "processes", "thread-executor"],
)
def test_every_executor_gives_the_same_canonical_result(sample, reference, executor, jobs):
    got = sweep(
        sample,
        None,
        SAMPLE_SPACE,
        sla={"ttft_ms": 2000},
        executor=executor,
        jobs=jobs,
        progress=False,
    )
    assert got.to_json() == reference.to_json()
    assert all(r["wall_ms"] > 0 for r in got.rows)


def test_a_process_pool_executor_instance(sample, reference):
    with cf.ProcessPoolExecutor(2) as pool:
        got = sweep(
            sample, None, SAMPLE_SPACE, sla={"ttft_ms": 2000}, executor=pool, progress=False
        )
    assert got.to_json() == reference.to_json()


def test_a_prepared_workload_replays_byte_identically(sample):
    from dynosim.workload.prepared import PreparedWorkload

    config = dynosim.load_config({"cluster": {"num_workers": 3}, "engine": {"block_size": 32}})
    prepared = PreparedWorkload(sample)
    fresh = dynosim.Report(dynosim._core.replay(sample, config.model_dump_json()))
    for _ in range(2):
        again = dynosim.Report(prepared.replay_raw(config.model_dump_json()))
        assert again.to_json() == fresh.to_json()
    assert prepared._core.tables_held == 1
    assert json.loads(prepared.replay_summary(config.model_dump_json())) == fresh.summary


class FlakyExecutor(cf.Executor):
    """Runs tasks inline; the second one is lost as if its worker died."""

    def __init__(self):
        self.calls = 0

    def submit(self, fn, /, *args, **kwargs):
        self.calls += 1
        future: cf.Future = cf.Future()
        if self.calls == 2:
            future.set_exception(RuntimeError("worker died"))
        else:
            future.set_result(fn(*args, **kwargs))
        return future


def test_a_failed_candidate_keeps_its_row_and_nothing_else_is_lost(four):
    seen = []
    result = sweep(four, BASE, SPACE, executor=FlakyExecutor(), progress=False, on_row=seen.append)
    assert len(result) == 4 and len(seen) == 4
    assert result.rows[1]["error"] == "RuntimeError: worker died"
    assert math.isnan(result.rows[1]["ttft_p90_ms"]) and not result.rows[1]["sla_met"]
    assert [r["error"] for r in result.rows if r["index"] != 1] == ["", "", ""]
    assert result.failed().rows[0]["index"] == 1
    assert result.best()["index"] == 0
    doc = json.loads(result.to_json())
    assert doc["rows"][1]["ttft_p90_ms"] is None


def test_bad_executor_arguments(four):
    with pytest.raises(ConfigError, match="executor: expected one of threads, processes, ray"):
        sweep(four, BASE, SPACE, executor="dask", progress=False)
    with pytest.raises(ConfigError, match="jobs: applies to the named executors"):
        sweep(four, BASE, SPACE, executor=cf.ThreadPoolExecutor(1), jobs=2, progress=False)
    with pytest.raises(ConfigError, match="jobs: expected a positive integer, got 0"):
        sweep(four, BASE, SPACE, jobs=0, progress=False)


def test_ray_gives_the_thread_pool_result(sample, reference):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        got = sweep(
            sample, None, SAMPLE_SPACE, sla={"ttft_ms": 2000}, executor="ray", progress=False
        )
    finally:
        ray.shutdown()
    assert got.to_json() == reference.to_json()


@needs_aic
def test_timing_tables_are_serialized_once_and_the_document_is_the_same():
    # The fast path (each table's text reused by later candidates) against json.dumps of the
    # whole document: a disaggregated configuration, each role timed at its own TP.
    from dynosim.aic import aic_sections_to_tables
    from dynosim.replay import Derivations, core_config
    from dynosim.sizing import resolve_sizes

    def timing(tp):
        return {"model": "aic", "model_name": "Qwen/Qwen3-32B", "system": "h200_sxm", "tp": tp}

    config = dynosim.SimConfig.model_validate(
        {
            "cluster": {"mode": "disaggregated"},
            "engine": {"backend": "trtllm"},
            "prefill": {
                "engine": {"backend": "trtllm", "tensor_parallel_size": 2},
                "timing": timing(2),
            },
            "decode": {"engine": {"backend": "trtllm"}, "timing": timing(1)},
        }
    )
    memo = Derivations()
    first, _ = core_config(config, memo)
    assert len(memo.table_json) == 2  # one text per table
    again, _ = core_config(config, memo)
    whole, _ = aic_sections_to_tables(resolve_sizes(config).config.model_dump())
    assert first == again == json.dumps(whole)
