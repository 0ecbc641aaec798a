"""The Python API end to end: replay, configuration, report, errors."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import make_columns, requests_strategy
from hypothesis import given, settings
from hypothesis import strategies as st

import dynosim
from dynosim import _core
from dynosim.errors import ConfigError, DynosimError, WorkloadError

FIXED = {"model": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0}


def small(**engine) -> dict:
    """One worker, 4-token blocks, fixed 10 ms prefill / 1 ms decode."""
    return {
        "cluster": {"num_workers": 1},
        "engine": {"block_size": 4, **engine},
        "timing": FIXED,
    }


def test_eight_token_request_polynomial_ttft(columns):
    report = dynosim.replay(columns([(0.0, 8, 1, [7])]))
    assert f"{report.requests['ttft_ms'][0]:.4f}" == "16.6229"
    assert report.summary["ttft_ms"]["count"] == 1


def test_chunked_prefill_across_passes(columns):
    # Budget 4: chunks of 4, 4, 2 tokens, each a 10 ms pass; then one 1 ms decode.
    report = dynosim.replay(columns([(0.0, 10, 2, [1, 2, 3])], 4), small(max_num_batched_tokens=4))
    assert report.requests["ttft_ms"].tolist() == [30.0]
    assert report.requests["e2e_ms"].tolist() == [31.0]
    assert report.summary["num_passes"] == 4


def test_shared_prefix_is_reused(columns):
    rows = [(0.0, 8, 2, [1, 2]), (100.0, 8, 2, [1, 3])]
    report = dynosim.replay(columns(rows, 4), small())
    assert report.requests["reused_tokens"].tolist() == [0, 4]
    assert report.summary["prefix_reuse_ratio"] == pytest.approx(4 / 16)


def test_small_cache_preempts_and_recomputes(columns):
    rows = [(0.0, 4, 8, [1]), (0.0, 4, 8, [2])]
    report = dynosim.replay(columns(rows, 4), small(num_gpu_blocks=4))
    assert report.completed_requests == 2
    assert report.requests["preemptions"].tolist() == [0, 1]
    assert report.requests["e2e_ms"].tolist() == [17.0, 29.0]


def test_request_that_never_fits_is_rejected_with_reason(columns):
    rows = [(0.0, 4, 2, [1]), (0.0, 16, 1, [2, 3, 4, 5]), (1.0, 4, 2, [6])]
    report = dynosim.replay(columns(rows, 4), small(num_gpu_blocks=4))
    assert report.rejections() == [(1, "prompt_exceeds_kv_cache")]
    assert report.completed_requests == 2
    assert report.summary["rejections_by_reason"] == {"prompt_exceeds_kv_cache": 1}
    assert np.isnan(report.requests["ttft_ms"][1])
    assert json.loads(report.to_json())["requests"]["ttft_ms"][1] is None


def test_full_conversation_trace_is_accounted_for_and_deterministic(real_trace):
    workload = dynosim.load_trace(real_trace("mooncake_conversation.jsonl"))
    config = {"cluster": {"num_workers": 4}, "engine": {"block_size": 64}}
    first = dynosim.replay(workload, config)
    second = dynosim.replay(workload, config)
    s = first.summary
    assert s["num_requests"] == 12_031
    assert s["completed_requests"] + s["rejected_requests"] == 12_031
    status = first.requests["status"]
    assert set(np.unique(status).tolist()) <= {0, 1}
    assert int((status == 0).sum()) == s["completed_requests"]
    assert s["total_output_tokens"] == int(
        first.requests["output_length"][status == 0].sum(dtype=np.int64)
    )
    assert first.to_json() == second.to_json()
    # The exact percentile agrees with numpy's over the per-request column.
    ttft = first.requests["ttft_ms"][status == 0]
    assert s["ttft_ms"]["p99"] == pytest.approx(np.percentile(ttft, 99), rel=1e-12)
    assert s["ttft_ms"]["mean"] == pytest.approx(ttft.mean(), rel=1e-12)


def test_report_contents(columns):
    rows = [(0.0, 600, 3, [1, 2]), (2500.0, 100, 1, [3])]
    report = dynosim.replay(columns(rows), {"report": {"sample_interval_ms": 1000.0}})
    ts = report.timeseries
    assert ts["time_ms"].tolist()[:3] == [0.0, 1000.0, 2000.0]
    assert ts["kv_blocks_used"]["max"].shape == (len(ts["time_ms"]), 4)
    assert report.requests["worker"].tolist() == [0, 1]
    assert report.summary["gpu_hours"] == pytest.approx(4 * report.summary["duration_ms"] / 3.6e6)
    with pytest.raises(ValueError):
        report.requests["ttft_ms"][0] = 1.0  # read-only views
    assert report.config["cluster"]["num_workers"] == 4


def test_time_series_keep_each_buckets_mean_min_and_max(columns):
    # 4-token prompts, fixed 10 ms prefill / 1 ms decode, 10 ms buckets. Request 0 (3 tokens
    # out) prefills over [0, 10) in 1 block, decodes over [10, 12) in 2 blocks; request 1
    # (1 token out) arrives at 15 and prefills over [15, 25) in 1 block.
    cfg = {**small(), "report": {"sample_interval_ms": 10.0}}
    report = dynosim.replay(columns([(0.0, 4, 3, [1]), (15.0, 4, 1, [2])], 4), cfg)
    ts = report.timeseries
    assert ts["time_ms"].tolist() == [0.0, 10.0, 20.0]
    # Bucket [10, 20): running over [10, 12) and [15, 20): 7 of 10 ms; the last bucket
    # covers [20, 25) only.
    assert ts["running"]["mean"].tolist() == [1.0, 0.7, 1.0]
    assert ts["running"]["min"].tolist() == [1.0, 0.0, 1.0]
    assert ts["busy"]["mean"][:, 0].tolist() == [1.0, 0.7, 1.0]
    # KV blocks in [10, 20): 2 for 2 ms, 0 for 3 ms, 1 for 5 ms: mean 0.9, max 2.
    assert ts["kv_blocks_used"]["mean"][:, 0].tolist() == [1.0, 0.9, 1.0]
    assert ts["kv_blocks_used"]["max"][:, 0].tolist() == [1.0, 2.0, 1.0]
    # Busy 12 ms for request 0, then 10 ms for request 1.
    assert report.summary["worker_busy_ms"] == [22.0]


def test_a_year_long_gap_keeps_the_time_series_bounded(columns):
    # One row a year after the first: 1 ms buckets would be 3e10 of them.
    year_ms = 365 * 86_400_000.0
    rows = [(0.0, 4, 2, [1]), (year_ms, 4, 2, [2])]
    report = dynosim.replay(columns(rows, 4), {**small(), "report": {"sample_interval_ms": 1.0}})
    ts = report.timeseries
    assert len(ts["time_ms"]) <= 2048
    assert ts["interval_ms"] >= year_ms / 2048
    # The 11 ms of work at the start stays visible in the first bucket's max.
    assert ts["running"]["max"][0] == 1.0
    assert report.completed_requests == 2


def test_goodput_counts_requests_within_sla(columns):
    rows = [(0.0, 4, 2, [1]), (0.0, 4, 2, [2])]
    # Both prefill together (10 ms) then decode (1 ms): TTFT 10, E2E 11 for both.
    loose = dynosim.replay(columns(rows, 4), {**small(), "sla": {"ttft_ms": 10.0}})
    tight = dynosim.replay(columns(rows, 4), {**small(), "sla": {"ttft_ms": 9.9}})
    assert loose.summary["goodput_requests"] == 2
    assert tight.summary["goodput_requests"] == 0


def test_progress_run_gives_the_same_report(columns):
    cols = columns([(float(i), 700, 20, [i, i + 1]) for i in range(0, 200, 2)])
    assert dynosim.replay(cols, progress=True).to_json() == dynosim.replay(cols).to_json()


def test_synthetic_workload_replays():
    work = dynosim.SyntheticWorkload(isl=1000, osl=50, count=200, rate=20.0, seed=3)
    report = dynosim.replay(work, {"cluster": {"num_workers": 2}})
    assert report.completed_requests == 200
    assert report.summary["total_input_tokens"] == 200 * 1000


def test_config_sources_agree(tmp_path):
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text(
        "engine:\n  block_size: 32\ntiming:\n  model: fixed\n  prefill_ms: 5\n  decode_ms: 1\n"
    )
    from_yaml = dynosim.load_config(yaml_file)
    from_dict = dynosim.load_config(
        {
            "engine": {"block_size": 32},
            "timing": {"model": "fixed", "prefill_ms": 5, "decode_ms": 1},
        }
    )
    assert from_yaml == from_dict
    assert (
        from_yaml.engine.max_num_seqs
        == json.loads(_core.default_config_json())["engine"]["max_num_seqs"]
    )
    # Unset, the KV blocks are sized at the replay (the core's default without a model).
    assert from_yaml.engine.num_gpu_blocks is None
    assert (
        dynosim.config.DEFAULT_NUM_GPU_BLOCKS
        == json.loads(_core.default_config_json())["engine"]["num_gpu_blocks"]
    )
    schema = dynosim.config.config_json_schema()
    assert "engine" in schema["properties"]


def test_the_settings_document_is_the_models_with_nothing_given():
    # The command line builds its settings on this document without building the models;
    # both must start from the same settings, the KV blocks unset (sized at the replay).
    from dynosim._defaults import settings_document

    assert settings_document() == dynosim.SimConfig().model_dump()
    assert settings_document()["engine"]["num_gpu_blocks"] is None


def _azure_file(tmp_path):
    # 300 rows, 40 ms apart, of varied lengths: an Azure CSV read into columns.
    rows = [
        f"2023-11-16 18:17:{3 + i * 40 // 1000:02d}.{i * 40 % 1000:03d}0000,"
        f"{200 + i * 37 % 3000},{5 + i % 40}"
        for i in range(300)
    ]
    path = tmp_path / "code.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize(
    ("trace", "document"),
    [
        ("azure", {"cluster": {"num_workers": 2}, "engine": {"block_size": 16}}),
        (
            "sample",
            {
                "cluster": {"mode": "disaggregated", "num_decode_workers": 2},
                "kv_transfer": {"kv_bytes_per_token": 1e5, "bandwidth_gbps": 10.0},
                "decode": {"engine": {"num_gpu_blocks": 3000}},
            },
        ),
    ],
)
def test_a_trace_file_replays_on_a_document_as_on_its_models(tmp_path, trace, document):
    # replay_file: the core alone checks the settings, and the file is read without the
    # workload models; the report is the models' own, byte for byte, sizes' provenance too.
    from dynosim.replay import replay_file

    path = _azure_file(tmp_path) if trace == "azure" else dynosim.sample_trace_path()
    expected = dynosim.replay(dynosim.load_trace(path), document).to_json()
    assert json.loads(expected)["summary"]["completed_requests"] == (
        300 if trace == "azure" else 3000
    )
    given = json.loads(json.dumps(document))
    assert replay_file(path, given).to_json() == expected
    assert given == document  # sized on a copy
    with pytest.raises(ConfigError, match=r"cluster\.num_workers: must be between 1"):
        replay_file(path, {"cluster": {"num_workers": 0}})
    # Not a JSON value: named as such, before anything is read.
    with pytest.raises(ConfigError, match=r"Out of range float values.*plain JSON values"):
        replay_file(path, {"cluster": {"arrival_speedup_ratio": float("inf")}})
    with pytest.raises(ConfigError, match=r"PosixPath is not JSON serializable"):
        replay_file(path, {"cluster": {"router_seed": path}})


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"engine": {"block_size": 0}}, "engine.block_size: must be between 1 and 65,536, got 0"),
        ({"cluster": {"arrival_speedup_ratio": -2}}, "cluster.arrival_speedup_ratio"),
        ({"engine": {"blok_size": 3}}, "engine.blok_size: unknown field"),
        (
            {"timing": {"model": "fixed", "prefill_ms": 1}},
            "timing.decode_ms: required, but not given",
        ),
        ({"engine": {"block_size": "big"}}, "engine.block_size"),
        (
            {"engine": {"backend": "trtllm", "preemption_mode": "fifo"}},
            "engine.preemption_mode: a vllm setting; the trtllm engine (engine.backend) has no "
            "such setting",
        ),
        ({"engine": {"backend": "tgi"}}, "engine.backend"),
    ],
)
def test_bad_config_names_the_field(config, message):
    with pytest.raises(ConfigError) as err:
        dynosim.load_config(config)
    assert message in str(err.value)
    assert isinstance(err.value, ValueError)


def test_unset_engine_settings_read_their_flavours_defaults_from_the_core():
    trt = dynosim.load_config({"engine": {"backend": "trtllm", "max_num_tokens": 4096}})
    assert trt.engine.setting("block_size") == 32  # TensorRT-LLM's tokens_per_block
    assert trt.engine.setting("max_num_tokens") == 4096
    assert trt.engine.setting("capacity_scheduler") == "guaranteed_no_evict"
    assert trt.engine.pass_token_budget == 4096
    vllm = dynosim.SimConfig().engine
    assert (vllm.setting("block_size"), vllm.pass_token_budget) == (64, 8192)
    # The resolved view carries every setting of the role's flavour, and none of another's.
    engine = dynosim.config.resolve(trt).roles["aggregated"].engine
    assert (engine.block_size, engine.enable_chunked_context) == (32, False)
    assert engine.max_num_batched_tokens is None


def test_the_backend_names_are_the_cores_engine_flavours():
    # engine.backend's choices (and every command's --backend) are typed once in Python, as
    # a Literal; the core holds the flavours themselves.
    from dynosim._defaults import BACKENDS, ENGINE_DEFAULTS

    assert sorted(BACKENDS) == sorted(ENGINE_DEFAULTS)


def test_the_resolved_view_carries_the_tiers_rates_each_unset_one_from_its_link():
    assert dynosim.config.resolve(dynosim.SimConfig()).offload is None
    config = dynosim.load_config(
        {
            "kv_transfer": {"kv_bytes_per_token": 2},
            "offload": {"g2_blocks": 8, "g1_g2_gbps": 10, "g1_g2_write_gbps": 4, "g2_g3_gbps": 3},
        }
    )
    rates = dynosim.config.resolve(config).offload
    assert (rates.g1_g2_read_gbps, rates.g1_g2_write_gbps) == (10.0, 4.0)
    assert (rates.g2_g3_read_gbps, rates.g2_g3_write_gbps) == (3.0, 3.0)


def test_bad_config_file(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("engine: [1, 2\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: line 2, column 1: not valid YAML"):
        dynosim.load_config(bad)
    with pytest.raises(ConfigError, match="cannot read the configuration"):
        dynosim.load_config(tmp_path / "missing.yaml")


def columns_of(n_arrivals: int, n_rows: int) -> SimpleNamespace:
    """Request columns as the core reads them (any object with these attributes), unchecked."""
    return SimpleNamespace(
        arrival_ms=np.zeros(n_arrivals, np.float64),
        input_length=np.ones(n_rows, np.uint32),
        output_length=np.ones(n_rows, np.uint32),
        hash_offsets=np.arange(n_rows + 1, dtype=np.uint64),
        hash_ids=np.arange(n_rows, dtype=np.uint64),
        trace_block_size=512,
        session=None,
        delay_ms=None,
    )


def test_core_errors_map_to_dynosim_exceptions():
    # Two rows of lengths but one arrival: the core names the mismatch.
    with pytest.raises(WorkloadError, match="arrival_ms has 1 rows"):
        _core.replay(columns_of(1, 2), "{}")
    with pytest.raises(ConfigError, match="invalid configuration"):
        _core.replay(columns_of(1, 1), "{not json")
    assert issubclass(dynosim.SimulationError, DynosimError)


@settings(max_examples=60, deadline=None)
@given(
    rows=requests_strategy,
    blocks=st.integers(2, 40),
    workers=st.integers(1, 3),
    seqs=st.integers(1, 8),
)
def test_every_request_completes_or_is_rejected(rows, blocks, workers, seqs):
    t, table = 0.0, []
    for gap, isl, osl, family in rows:
        t += gap if table else 0  # the first arrival is at 0 ms
        ids = [
            family * 1000 + k if k < 2 else 10**6 + len(table) * 100 + k
            for k in range(-(-isl // 4))
        ]
        table.append((t, isl, osl, ids))
    config = {
        "cluster": {"num_workers": workers},
        "engine": {"block_size": 4, "num_gpu_blocks": blocks, "max_num_seqs": seqs},
        "timing": FIXED,
    }
    report = dynosim.replay(make_columns(table, 4), config)
    s = report.summary
    assert s["completed_requests"] + s["rejected_requests"] == len(rows)
    done = report.requests["status"] == 0
    assert (report.requests["first_token_ms"][done] >= report.requests["arrival_ms"][done]).all()
    assert s["itl_ms"]["count"] == int((report.requests["output_length"][done] - 1).sum())


@pytest.mark.parametrize(
    "settings",
    [
        {"cluster": {"num_workers": 3, "router": "kv_aware"}},
        {"cluster": {"num_workers": 2, "router": "random"}, "engine": {"num_gpu_blocks": 2_000}},
        {
            "cluster": {"num_workers": 2},
            "engine": {"num_gpu_blocks": 2_000},
            "kv_transfer": {"kv_bytes_per_token": 131_072},
            "offload": {"g2_blocks": 2_000, "g3_blocks": 4_000},
        },
        {
            "cluster": {"mode": "disaggregated", "num_prefill_workers": 2, "num_decode_workers": 2},
            "engine": {"num_gpu_blocks": 1_200},
            "kv_transfer": {"bandwidth_gbps": 25.0, "kv_bytes_per_token": 131_072},
        },
    ],
)
@pytest.mark.parametrize("capacity", ["guaranteed_no_evict", "max_utilization"])
def test_trtllm_flavour_serves_every_mode_router_and_tier(settings, capacity):
    workload = dynosim.load_trace(dynosim.sample_trace_path())
    engine = {"backend": "trtllm", "capacity_scheduler": capacity, "enable_chunked_context": True}
    config = dynosim.load_config({**settings, "engine": {**settings.get("engine", {}), **engine}})
    report = dynosim.replay(workload, config)
    s = report.summary
    assert s["completed_requests"] + s["rejected_requests"] == s["num_requests"]
    assert s["completed_requests"] > 0.9 * s["num_requests"]
    if capacity == "guaranteed_no_evict":
        assert s["num_preemptions"] == 0
    assert dynosim.replay(workload, config).to_json() == report.to_json()


@pytest.mark.parametrize(
    ("case", "rows", "config"),
    [
        # A row dated centuries after the first, as late as an arrival may be (2^43 ms).
        ("arrival 2^43 ms", [(0.0, 4, 2, [1]), (2.0**43, 4, 2, [2])], {}),
        ("1e-9 ms buckets", [(0.0, 4, 2, [1]), (5000.0, 4, 2, [2])], {"sample_interval_ms": 1e-9}),
        ("a day of 1 ms buckets", [(0.0, 4, 2, [1]), (86_400_000.0, 4, 2, [2])], {}),
    ],
)
def test_time_series_stay_bounded_whatever_the_span(columns, case, rows, config):
    # The series hold at most 2,048 buckets however long the replay or fine the interval, so
    # memory follows the requests: each of these once grew a sample per interval until the
    # process ran out of memory.
    report_config = {"sample_interval_ms": 1.0, **config}
    report = dynosim.replay(columns(rows, 4), {**small(), "report": report_config})
    ts = report.timeseries
    assert 1 <= len(ts["time_ms"]) <= 2048, case
    assert ts["interval_ms"] * len(ts["time_ms"]) >= report.summary["duration_ms"]
    assert report.completed_requests + report.rejected_requests == len(rows)


def test_a_session_turn_a_long_delay_later_keeps_the_series_bounded():
    # Two turns of one session, the second sent 2^43 ms (the longest delay) after the first.
    from dynosim.workload import TraceColumns

    cols = TraceColumns(
        arrival_ms=np.array([0.0, 1.0]),
        input_length=np.array([4, 4], dtype=np.uint32),
        output_length=np.array([2, 2], dtype=np.uint32),
        hash_offsets=np.array([0, 1, 2], dtype=np.uint64),
        hash_ids=np.array([1, 2], dtype=np.uint64),
        trace_block_size=4,
        session=np.array([0, 0], dtype=np.int64),
        delay_ms=np.array([np.nan, 2.0**43]),
    )
    report = dynosim.replay(cols, {**small(), "report": {"sample_interval_ms": 1.0}})
    assert report.summary["duration_ms"] > 2.0**43
    assert len(report.timeseries["time_ms"]) <= 2048
    assert report.completed_requests == 2


def _over_the_replay(report, series: np.ndarray) -> np.ndarray:
    """The time-weighted mean of a series' bucket means over the whole replay."""
    ts, end = report.timeseries, report.summary["duration_ms"]
    start = ts["time_ms"]
    covered = np.minimum(start + ts["interval_ms"], end) - start
    weights = covered if series.ndim == 1 else covered[:, None]
    return (series * weights).sum(axis=0) / end


def test_link_use_over_time_adds_up_to_the_summarys():
    # The series sample each link's rate at every change; integrated over the buckets they
    # give the bytes each link carried, the summary's utilization. A flow due within the link
    # network's time tolerance (1e-9 of the clock) of an event ends with it, its last bytes
    # credited at once: tier links, with many such ends, agree within 1e-6.
    sample = dynosim.sample_trace_path()
    disagg = dynosim.replay(
        sample,
        {
            "cluster": {"mode": "disaggregated", "num_prefill_workers": 2, "num_decode_workers": 2},
            "kv_transfer": {"kv_bytes_per_token": 160_000, "bandwidth_gbps": 5.0},
        },
    )
    got = _over_the_replay(disagg, disagg.timeseries["link_utilization"]["mean"])
    assert got == pytest.approx(disagg.summary["link_utilization"], rel=1e-9)
    tiers = dynosim.replay(
        sample,
        {
            "engine": {"num_gpu_blocks": 2048},
            "kv_transfer": {"kv_bytes_per_token": 160_000},
            "offload": {"g2_blocks": 4096, "g3_blocks": 65536, "g3_shared": True, "g2_g3_gbps": 1},
        },
    )
    use = tiers.summary["offload"]["link_utilization"]
    ts = tiers.timeseries
    for series, total in (
        ("g1_g2_link_use", use["g1_to_g2"]),
        ("g2_g1_link_use", use["g2_to_g1"]),
        ("g3_link_use", use["g2_to_g3"]),
    ):
        assert _over_the_replay(tiers, ts[series]["mean"]) == pytest.approx(total, rel=1e-6)
    assert use["g3_to_g2"] == use["g2_to_g3"]  # one half-duplex link carries both
