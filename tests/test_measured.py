"""Comparing with a measured run: the AIPerf and ``vllm bench serve`` readers, the comparison
table, and ``dynosim replay MEASURED --measured``.

Fixtures in tests/data/measured/: ``aiperf_2025_example.jsonl`` holds three records copied
verbatim from AIPerf's own example export (old field names; see README.md there),
``aiperf_hand_made.jsonl`` and ``vllm_bench_hand_made.json`` are made up with round numbers;
the expected statistics are worked out by hand in the tests.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dynosim
from dynosim.cli import EXIT_BAD_INPUT, main
from dynosim.compare import MeasuredComparison, compare_measured, measured_summary
from dynosim.errors import WorkloadError
from dynosim.workload.measured import detect_format, load_measured, vllm_schedule_s

DATA = Path(__file__).parent / "data" / "measured"
AIPERF_2025 = DATA / "aiperf_2025_example.jsonl"
AIPERF = DATA / "aiperf_hand_made.jsonl"
VLLM = DATA / "vllm_bench_hand_made.json"
#: A deployment whose passes are hand-checkable: 10 ms with any prefill, 2 ms decode only;
#: a pass that prefills and decodes costs 10 + 2 ms.
FIXED = ["--timing", "fixed", "--prefill-ms", "10", "--decode-ms", "2", "--workers", "1"]
FIXED_CONFIG = {
    "timing": {"model": "fixed", "prefill_ms": 10, "decode_ms": 2},
    "cluster": {"num_workers": 1},
}


def approx(values):
    return pytest.approx(values, rel=1e-12, abs=1e-9)


# --- AIPerf ---------------------------------------------------------------------------------


def test_aiperf_example_of_the_2025_export():
    # Line 1 and 3: cancelled (error 499, no was_cancelled in this old format). Line 2: one
    # completed request, ISL 550, OSL 193 (61 output + 132 reasoning tokens), TTFT
    # 1680.543782 ms, latency 7936.968269 ms, 192 chunk gaps.
    run = load_measured(AIPERF_2025)
    assert run.format == "aiperf"
    assert run.num_records == 3 and run.not_replayed == {"cancelled": 2}
    assert len(run) == 1
    assert run.columns.arrival_ms.tolist() == [0.0]
    assert run.columns.input_length.tolist() == [550]
    assert run.columns.output_length.tolist() == [193]
    assert run.ttft_ms.tolist() == [1680.543782]
    assert run.e2e_ms.tolist() == [7936.968269]
    # (7936.968269 - 1680.543782) / 192 = 32.585544203125, the exported inter_token_latency.
    assert run.tpot_ms.tolist() == approx([32.585544203124996])
    assert run.itl_ms is not None and len(run.itl_ms) == 192
    assert run.itl_ms.sum() == pytest.approx(7936.968269 - 1680.543782, rel=1e-12)
    assert run.duration_ms == 7936.968269  # one request: from its start to its end
    assert run.notes == ()


def test_aiperf_hand_made_current_export():
    # Six records: a warmup one (skipped), b (start t0 + 20 ms), a (t0), a cancelled one,
    # c (t0 + 10 ms) and a failed one (error 500). Sorted by start: a, c, b.
    run = load_measured(AIPERF)
    assert run.num_records == 6
    assert run.not_replayed == {"warmup": 1, "cancelled": 1, "failed": 1}
    assert len(run) + sum(run.not_replayed.values()) == run.num_records
    assert run.columns.arrival_ms.tolist() == [0.0, 10.0, 20.0]
    assert run.columns.input_length.tolist() == [100, 50, 200]
    assert run.columns.output_length.tolist() == [5, 1, 3]
    assert run.ttft_ms.tolist() == [50.0, 30.0, 80.0]
    assert run.e2e_ms.tolist() == [90.0, 30.0, 120.0]
    # TPOT: (90 - 50) / 4 = 10, none for one token, (120 - 80) / 2 = 20.
    assert run.tpot_ms[[0, 2]].tolist() == [10.0, 20.0] and math.isnan(run.tpot_ms[1])
    assert run.itl_ms is not None and run.itl_ms.tolist() == [10.0] * 4 + [20.0] * 2
    assert run.duration_ms == 140.0  # b ends last: 20 + 120
    assert any("1 warmup records skipped" in note for note in run.notes)
    assert any("sorted by start time" in note for note in run.notes)


def test_measured_statistics_by_hand():
    real = measured_summary(load_measured(AIPERF))
    # TTFT [30, 50, 80]: mean 53.33; p90 at rank 1.8: 50 + 0.8 * 30 = 74; p99: 50 + 0.98 * 30.
    assert real["ttft_ms"] == approx({"mean": 160 / 3, "p50": 50.0, "p90": 74.0, "p99": 79.4})
    # TPOT [10, 20]: p90 at rank 0.9: 19.
    assert real["tpot_ms"] == approx({"mean": 15.0, "p50": 15.0, "p90": 19.0, "p99": 19.9})
    # ITL [10, 10, 10, 10, 20, 20]: p50 at rank 2.5: 10; p90 at rank 4.5: 20.
    assert real["itl_ms"] == approx({"mean": 80 / 6, "p50": 10.0, "p90": 20.0, "p99": 20.0})
    # E2E [30, 90, 120]: p90 at rank 1.8: 90 + 0.8 * 30 = 114.
    assert real["e2e_ms"] == approx({"mean": 80.0, "p50": 90.0, "p90": 114.0, "p99": 119.4})
    assert real["completed_requests"] == 3
    assert real["request_throughput_rps"] == pytest.approx(3 / 0.140)
    assert real["output_token_throughput_tps"] == pytest.approx(9 / 0.140)


def write_lines(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def aiperf_records() -> list[dict]:
    return [json.loads(line) for line in AIPERF.read_text().splitlines()]


def test_aiperf_time_units_are_converted(tmp_path):
    records = aiperf_records()
    records[2]["metrics"]["time_to_first_token"] = {"value": 0.05, "unit": "s"}
    records[2]["metrics"]["request_latency"] = {"value": 90_000_000, "unit": "ns"}
    run = load_measured(write_lines(tmp_path / "units.jsonl", records))
    assert run.ttft_ms[0] == pytest.approx(50.0) and run.e2e_ms[0] == pytest.approx(90.0)


def test_aiperf_without_chunk_gaps_compares_no_itl(tmp_path):
    records = aiperf_records()
    del records[1]["metrics"]["inter_chunk_latency"]
    run = load_measured(write_lines(tmp_path / "gaps.jsonl", records))
    assert run.itl_ms is None
    assert (
        "1 requests have no chunk gaps in the file: the measured ITL is not compared" in run.notes
    )
    assert measured_summary(run)["itl_ms"] == dict.fromkeys(("mean", "p50", "p90", "p99"))


@pytest.mark.parametrize(
    ("line", "change", "message"),
    [
        (3, lambda r: r["metrics"].pop("request_latency"),
         "field 'metrics.request_latency': missing"),
        (3, lambda r: r["metrics"]["time_to_first_token"].update(value="fast"),
         "field 'metrics.time_to_first_token.value': expected a finite number >= 0 (ms), "
         'got "fast"'),
        (3, lambda r: r["metrics"]["input_sequence_length"].update(value=12.5),
         "field 'metrics.input_sequence_length.value': expected a non-negative integer"),
        (3, lambda r: r["metrics"]["request_latency"].update(value=40.0),
         "field 'metrics.request_latency.value': 40.0 ms is shorter than the time to first"),
        (3, lambda r: r["metrics"]["request_latency"].update(unit="parsecs"),
         "field 'metrics.request_latency.unit': expected a time unit"),
        (3, lambda r: r.pop("metrics"), "field 'metrics': missing"),
        (5, lambda r: r["metadata"].pop("request_start_ns"), "field 'metadata.request_start_ns'"),
        (5, lambda r: r["metadata"].update(request_start_ns="soon"),
         "field 'metadata.request_start_ns': expected a wall-clock time in integer ns"),
        (5, lambda r: r["metadata"].update(request_start_ns=10**400),
         "field 'metadata.request_start_ns': expected a wall-clock time in integer ns"),
        (5, lambda r: r["metadata"].update(request_start_ns=2**63),
         "field 'metadata.request_start_ns': expected a wall-clock time in integer ns"),
        (2, lambda r: r["metadata"].update(benchmark_phase="cooldown"),
         "field 'metadata.benchmark_phase': expected 'warmup' or 'profiling'"),
        (2, lambda r: r["metadata"].pop("benchmark_phase"),
         "field 'metadata.benchmark_phase' or 'metadata.credit_phase': missing"),
        (4, lambda r: r["metadata"].update(was_cancelled="yes"),
         "field 'metadata.was_cancelled': expected true or false"),
    ],
)  # fmt: skip
def test_aiperf_record_of_the_wrong_shape_names_file_line_and_field(
    tmp_path, line, change, message
):
    records = aiperf_records()
    change(records[line - 1])
    path = write_lines(tmp_path / "bad.jsonl", records)
    with pytest.raises(WorkloadError) as info:
        load_measured(path, "aiperf")
    assert str(info.value).startswith(f"{path}:{line}: {message}")


def test_aiperf_line_that_is_not_json(tmp_path):
    path = tmp_path / "torn.jsonl"
    path.write_text(AIPERF.read_text().splitlines()[1] + "\n" + '{"metadata": {\n')
    with pytest.raises(WorkloadError, match=r"torn\.jsonl:2: not valid JSON"):
        load_measured(path, "aiperf")


def test_aiperf_with_nothing_to_replay(tmp_path):
    cancelled = aiperf_records()[3]
    path = write_lines(tmp_path / "none.jsonl", [cancelled, cancelled])
    message = r"no completed requests to replay \(2 records: 2 cancelled\)"
    with pytest.raises(WorkloadError, match=message):
        load_measured(path)


# --- vllm bench serve -----------------------------------------------------------------------


def test_vllm_bench_hand_made_with_start_times():
    # Four requests: 1 failed ("Request timed out"). Replayed 0, 3, 2 by start time
    # (100.0, 100.25, 101.0 s).
    run = load_measured(VLLM)
    assert run.format == "vllm-bench"
    assert run.num_records == 4 and run.not_replayed == {"failed": 1}
    assert run.columns.arrival_ms.tolist() == approx([0.0, 250.0, 1000.0])
    assert run.columns.input_length.tolist() == [10, 40, 30]
    assert run.columns.output_length.tolist() == [3, 4, 2]
    assert run.ttft_ms.tolist() == approx([50.0, 100.0, 40.0])
    # E2E = TTFT + sum(itl): 50 + 30, 100 + 30, 40 + 30.
    assert run.e2e_ms.tolist() == approx([80.0, 130.0, 70.0])
    # TPOT = (E2E - TTFT) / (output - 1): 30 / 2, 30 / 3, 30 / 1.
    assert run.tpot_ms.tolist() == approx([15.0, 10.0, 30.0])
    assert run.itl_ms is not None and run.itl_ms.tolist() == approx([10, 20, 10, 10, 10, 30])
    # Ends at 100.08, 100.38 and 101.07 s: 1,070 ms after the first start.
    assert run.duration_ms == pytest.approx(1070.0)
    real = measured_summary(run)
    # TTFT [40, 50, 100]: p90 at rank 1.8: 50 + 0.8 * 50 = 90.
    assert real["ttft_ms"] == approx({"mean": 190 / 3, "p50": 50.0, "p90": 90.0, "p99": 99.0})
    # TPOT [10, 15, 30]: p90: 15 + 0.8 * 15 = 27.
    assert real["tpot_ms"] == approx({"mean": 55 / 3, "p50": 15.0, "p90": 27.0, "p99": 29.7})
    # ITL [10, 10, 10, 10, 20, 30]: p50 at rank 2.5: 10; p90 at rank 4.5: 25.
    assert real["itl_ms"] == approx({"mean": 15.0, "p50": 10.0, "p90": 25.0, "p99": 29.5})
    # E2E [70, 80, 130]: p90: 80 + 0.8 * 50 = 120.
    assert real["e2e_ms"] == approx({"mean": 280 / 3, "p50": 80.0, "p90": 120.0, "p99": 129.0})
    assert real["request_throughput_rps"] == pytest.approx(3 / 1.07)


def vllm_result(**changes) -> dict:
    data = json.loads(VLLM.read_text())
    data.update(changes)
    return data


def write_json(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def vllm_send_times(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """vllm bench serve's schedule as its description reads, drawn like it from numpy's
    *global* generator one request at a time (the reader uses its own generator)."""
    state = np.random.get_state()
    try:
        np.random.seed(seed)
        scale = 1.0 / (rate * burstiness)
        gaps = [float(np.random.gamma(shape=burstiness, scale=scale)) for _ in range(n)]
    finally:
        np.random.set_state(state)
    total = 0.0
    times = []
    for gap in gaps:
        total += gap
        times.append(total)
    factor = (n / rate) / times[-1]  # the last of N at N / rate
    return [t * factor for t in times]


def test_vllm_arrivals_rebuilt_as_vllm_schedules_them(tmp_path):
    data = vllm_result(request_rate=4.0, burstiness=0.5)
    del data["start_times"]
    run = load_measured(write_json(tmp_path / "old.json", data))
    sent = vllm_send_times(4, 4.0, 0.5, seed=0)
    assert sent[-1] == pytest.approx(1.0)  # the last of N at N / rate
    replayed = [sent[0], sent[2], sent[3]]  # request 1 failed
    assert run.columns.arrival_ms.tolist() == approx([(t - sent[0]) * 1e3 for t in replayed])
    assert any("arrivals rebuilt, not measured" in n and "seed 0" in n for n in run.notes)
    # No send times to end from: the throughput is over the run's own duration (1.2 s).
    assert run.duration_ms == pytest.approx(1200.0)
    assert any("run's own duration" in note for note in run.notes)
    # The run's seed, given or recorded with --metadata seed=N, changes the draws.
    seeded = load_measured(write_json(tmp_path / "seeded.json", {**data, "seed": "7"}))
    sent7 = vllm_send_times(4, 4.0, 0.5, seed=7)
    assert seeded.columns.arrival_ms[1] == pytest.approx((sent7[2] - sent7[0]) * 1e3)
    assert load_measured(tmp_path / "old.json", seed=7).columns.arrival_ms.tolist() == approx(
        seeded.columns.arrival_ms.tolist()
    )


def test_vllm_schedule_matches_the_global_generator_draw_for_draw():
    for rate, burstiness, seed in ((10.0, 1.0, 0), (2.5, 0.3, 1), (100.0, 4.0, 12345)):
        assert vllm_schedule_s(500, rate, burstiness, seed).tolist() == vllm_send_times(
            500, rate, burstiness, seed
        )


def test_vllm_schedule_special_cases():
    # An infinite rate sends everything at once; an infinite burstiness every 1 / rate.
    assert vllm_schedule_s(3, math.inf).tolist() == [0.0, 0.0, 0.0]
    assert vllm_schedule_s(4, 4.0, math.inf).tolist() == approx([0.25, 0.5, 0.75, 1.0])
    # Ramp-up 1 -> 3 req/s over 3 requests: rates 1, 2, 3; gaps 1, 1/2, 1/3; not rescaled.
    ramp = vllm_schedule_s(3, math.inf, math.inf, ramp_up=("linear", 1.0, 3.0))
    assert ramp.tolist() == approx([1.0, 1.5, 1.5 + 1 / 3])
    # Exponential: rates 1, 3, 9.
    ramp = vllm_schedule_s(3, math.inf, math.inf, ramp_up=("exponential", 1.0, 9.0))
    assert ramp.tolist() == approx([1.0, 1 + 1 / 3, 1 + 1 / 3 + 1 / 9])


def test_vllm_ramp_up_and_concurrency_are_read_from_the_file(tmp_path):
    data = vllm_result(
        request_rate="inf",
        burstiness=math.inf,
        ramp_up_strategy="linear",
        ramp_up_start_rps=1,
        ramp_up_end_rps=4,
        max_concurrency=2,
    )
    del data["start_times"]
    run = load_measured(write_json(tmp_path / "ramp.json", data))
    # Rates 1, 2, 3, 4: sent at 1, 1.5, 1.8333, 2.0833 s; requests 0, 2, 3 replayed.
    assert run.columns.arrival_ms.tolist() == approx([0.0, 1000 / 3 + 500, 1000 / 3 + 750])
    note = next(n for n in run.notes if "rebuilt" in n)
    assert "linear ramp-up from 1 to 4 req/s" in note and "--concurrency 2" in note


def test_vllm_latencies_are_used_when_saved(tmp_path):
    data = vllm_result(latencies=[0.09, 0.0, 0.08, 0.2])
    run = load_measured(write_json(tmp_path / "new.json", data))
    assert run.e2e_ms.tolist() == approx([90.0, 200.0, 80.0])
    data["latencies"][2] = 0.01
    with pytest.raises(WorkloadError, match=r"field 'latencies\[2\]': 0.01 s is shorter"):
        load_measured(write_json(tmp_path / "new.json", data))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"ttfts": None}, "field 'ttfts': missing (vllm bench serve writes the per-request"),
        ({"ttfts": [0.05, 0.0, "0.04", 0.1]},
         "field 'ttfts[2]': expected a finite number >= 0 (s), got \"0.04\""),
        ({"itls": [[0.01, 0.02], [], 0.03, [0.01]]},
         "field 'itls[2]': expected a list of gaps (s), got 0.03"),
        ({"itls": [[0.01, -0.02], [], [0.03], [0.01]]},
         "field 'itls[0][1]': expected a finite number >= 0 (s), got -0.02"),
        ({"input_lens": [10, 20, 30]},
         "field 'output_lens': 4 entries, but 'input_lens' has 3 (every per-request list"),
        ({"start_times": [100.0, 100.5]}, "field 'start_times': 2 entries, but 'input_lens' has 4"),
        ({"input_lens": [10, 20, 0, 40]}, "field 'input_lens[2]': expected between 1 and"),
        ({"errors": ["", None, 3, ""]}, "field 'errors[2]': expected a string, got 3"),
        ({"output_lens": 9}, "field 'output_lens': expected a list, got 9"),
        ({"errors": None}, "field 'errors': expected a list, got null"),
        ({k: [] for k in ("input_lens", "output_lens", "ttfts", "itls", "errors", "start_times")},
         "no requests: the per-request lists are empty"),
    ],
)  # fmt: skip
def test_vllm_result_of_the_wrong_shape_names_file_and_field(tmp_path, changes, message):
    data = vllm_result(**changes)
    if data.get("ttfts", 0) is None:
        del data["ttfts"]
    path = write_json(tmp_path / "bad.json", data)
    with pytest.raises(WorkloadError) as info:
        load_measured(path)
    assert str(info.value).startswith(f"{path}: {message}")


def test_vllm_chunks_of_several_tokens_are_noted(tmp_path):
    # Request 0 streamed its 3 tokens in 2 chunks: one gap of 30 ms, not two.
    data = vllm_result(itls=[[0.03], [], [0.03], [0.01, 0.01, 0.01]])
    run = load_measured(write_json(tmp_path / "chunks.json", data))
    assert run.itl_ms is not None and run.itl_ms.tolist() == approx([30, 10, 10, 10, 30])
    assert run.tpot_ms[0] == pytest.approx(15.0)  # (80 - 50) / (3 - 1) all the same
    assert any(n.startswith("1 requests streamed a number of chunks") for n in run.notes)


def test_vllm_rebuild_needs_a_rate(tmp_path):
    data = vllm_result(request_rate=0)
    del data["start_times"]
    with pytest.raises(WorkloadError, match="field 'request_rate': expected a rate > 0"):
        load_measured(write_json(tmp_path / "rate.json", data))


def test_vllm_success_without_a_token_is_counted_not_replayed(tmp_path):
    data = vllm_result(output_lens=[3, 0, 0, 4])  # request 2 "succeeded" with no token
    run = load_measured(write_json(tmp_path / "empty.json", data))
    assert run.not_replayed == {"failed": 1, "no output tokens": 1}
    assert len(run) == 2


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 5000),  # input tokens
            st.integers(0, 50),  # output tokens (0 with no error: nothing to replay)
            st.booleans(),  # failed
            st.floats(0, 10),  # TTFT (s)
            st.integers(0, 10**6),  # send time (ms)
        ),
        min_size=1,
        max_size=30,
    )
)
def test_vllm_counts_add_up_and_every_replayed_request_is_one_of_the_file(tmp_path_factory, rows):
    data = {
        "input_lens": [r[0] for r in rows],
        "output_lens": [0 if r[2] else r[1] for r in rows],
        "ttfts": [r[3] for r in rows],
        "itls": [[0.001] * max(r[1] - 1, 0) for r in rows],
        "errors": ["boom" if r[2] else "" for r in rows],
        "start_times": [r[4] / 1e3 for r in rows],
    }
    path = write_json(tmp_path_factory.mktemp("prop") / "run.json", data)
    replayable = [r for r in rows if not r[2] and r[1] > 0]
    if not replayable:
        with pytest.raises(WorkloadError, match="no completed requests to replay"):
            load_measured(path)
        return
    run = load_measured(path)
    assert len(run) + sum(run.not_replayed.values()) == run.num_records == len(rows)
    assert np.all(np.diff(run.columns.arrival_ms) >= 0)
    expected = sorted((r[4], r[0], r[1]) for r in replayable)
    first_ms = expected[0][0]
    sent_ms = np.rint(run.columns.arrival_ms + first_ms).astype(int).tolist()
    lengths = (run.columns.input_length.tolist(), run.columns.output_length.tolist())
    assert sorted(zip(sent_ms, *lengths, strict=True)) == expected


# --- telling the format ---------------------------------------------------------------------


def test_format_is_told_by_content(tmp_path):
    assert detect_format(AIPERF) == "aiperf"
    assert detect_format(AIPERF_2025) == "aiperf"
    assert detect_format(VLLM) == "vllm-bench"
    pretty = tmp_path / "pretty.txt"
    pretty.write_text(json.dumps(json.loads(VLLM.read_text()), indent=2))
    assert detect_format(pretty) == "vllm-bench"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "no records: the file is empty"),
        ("\n\n", "no records: the file is empty"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "cannot tell the measured format"),
        ('{"records": {"ttft": {}}, "input_config": {}}', "AIPerf's aggregate"),
        ('{"mean_ttft_ms": 3.0, "completed": 4}', "run it with --save-result --save-detailed"),
        ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n',
         "looks like a request trace"),
    ],
)  # fmt: skip
def test_unknown_content_is_named(tmp_path, content, message):
    path = tmp_path / "what.json"
    path.write_text(content)
    with pytest.raises(WorkloadError) as info:
        load_measured(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value)


def test_unknown_format_name_and_misplaced_seed():
    with pytest.raises(WorkloadError, match='unknown measured format "sglang"'):
        load_measured(VLLM, "sglang")
    with pytest.raises(WorkloadError, match="seed rebuilds the arrivals of a vllm-bench run"):
        load_measured(AIPERF, seed=3)


def test_empty_file_with_the_format_given(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text("")
    for format in ("aiperf", "vllm-bench"):
        with pytest.raises(WorkloadError, match=r"empty\.json: no records: the file is empty"):
            load_measured(path, format)


# --- the comparison -------------------------------------------------------------------------


def test_compare_measured_rows_by_hand():
    run = load_measured(VLLM)
    report = dynosim.replay(run.columns, FIXED_CONFIG)
    # Arrivals 0, 250, 1000 ms, far apart: each request prefills alone (10 ms: TTFT 10) and
    # decodes alone (2 ms a token): E2E 10 + 2 * 2 = 14, 10 + 3 * 2 = 16, 10 + 2 = 12.
    assert report.requests["e2e_ms"].tolist() == [14.0, 16.0, 12.0]
    table = dynosim.compare_measured(report, run)
    assert isinstance(table, MeasuredComparison)
    assert table == compare_measured(report, run)
    ttft = table.row("ttft_ms", "mean")
    assert (ttft.simulated, ttft.measured) == (10.0, pytest.approx(190 / 3))
    assert ttft.error_pct == pytest.approx(100 * (10 - 190 / 3) / (190 / 3))  # -84.2 %
    e2e = table.row("e2e_ms", "p50")
    assert (e2e.simulated, e2e.measured) == (14.0, pytest.approx(80.0))
    assert e2e.error_pct == pytest.approx(-82.5)
    # The last token at 1,000 + 12 ms: 3 requests in 1.012 s, against 3 in 1.07 s.
    rps = table.row("request_throughput_rps")
    assert rps.simulated == pytest.approx(3 / 1.012) and rps.measured == pytest.approx(3 / 1.07)
    assert rps.error_pct == pytest.approx(100 * (1.07 / 1.012 - 1))  # +5.7 %
    assert table.row("completed_requests").error_pct == 0.0
    # Every row's simulated value is the report's own.
    for row in table.rows:
        value = report.summary[row.metric]
        assert row.simulated == (value if row.stat is None else value[row.stat])
    assert [(r.metric, r.stat) for r in table.rows][:4] == [
        ("ttft_ms", s) for s in ("mean", "p50", "p90", "p99")
    ]
    assert len(table.rows) == 4 * 4 + 3
    assert (table.replayed, table.measured_records, table.not_replayed) == (3, 4, {"failed": 1})
    assert (table.compared, table.left_out) == (3, 0)
    plain = table.to_dict()
    assert plain["rows"][0] == {
        "metric": "ttft_ms",
        "stat": "mean",
        "simulated": 10.0,
        "measured": pytest.approx(190 / 3),
        "error_pct": pytest.approx(ttft.error_pct),
    }
    json.dumps(plain)  # plain data


def test_compare_refuses_a_report_of_other_requests():
    run = load_measured(VLLM)
    other = dynosim.replay(load_measured(AIPERF).columns, FIXED_CONFIG)
    with pytest.raises(WorkloadError, match="the report is not a replay of the 3 requests"):
        dynosim.compare_measured(other, run)


def test_compare_notes_sped_up_arrivals():
    run = load_measured(VLLM)
    report = dynosim.replay(run.columns, {**FIXED_CONFIG, "cluster": {"arrival_speedup_ratio": 2}})
    notes = dynosim.compare_measured(report, run).notes
    assert any("divided every arrival gap by 2" in n for n in notes)


def test_compare_the_requests_both_sides_completed():
    run = load_measured(VLLM)
    # Two 16-token blocks hold 32 tokens: the 40-token prompt (the second request by start)
    # cannot fit, the others (10 + 3 and 30 + 2 tokens) can.
    small = {**FIXED_CONFIG, "engine": {"block_size": 16, "num_gpu_blocks": 2}}
    report = dynosim.replay(run.columns, small)
    assert report.rejections() == [(1, "prompt_exceeds_kv_cache")]
    table = dynosim.compare_measured(report, run)
    assert (table.replayed, table.compared, table.left_out) == (3, 2, 1)
    left = "1 requests the simulated deployment rejected are left out of both sides"
    assert any(left in n for n in table.notes)
    # The measured side of requests 0 and 2 only: TTFT 50 and 40, TPOT 15 and 30, E2E 80
    # and 70, their chunk gaps 10, 20 and 30; from the first start to the last end (1,000 +
    # 70 ms): 2 requests and 5 output tokens in 1.07 s.
    assert table.row("ttft_ms", "mean").measured == approx(45.0)
    assert table.row("tpot_ms", "mean").measured == approx(22.5)
    assert table.row("e2e_ms", "p50").measured == approx(75.0)
    assert table.row("itl_ms", "mean").measured == approx(20.0)
    done = table.row("completed_requests")
    assert (done.simulated, done.measured, done.error_pct) == (2, 2, 0.0)
    assert table.row("request_throughput_rps").measured == approx(2 / 1.07)
    assert table.row("output_token_throughput_tps").measured == approx(5 / 1.07)
    # The simulated side is the report's own, over the same two requests.
    assert table.row("ttft_ms", "mean").simulated == report.summary["ttft_ms"]["mean"]
    assert report.summary["completed_requests"] == 2


# --- the command line -----------------------------------------------------------------------


def test_cli_vllm_bench_side_by_side(capsys):
    assert main(["replay", str(VLLM), "--measured", "--no-progress", *FIXED]) == 0
    out = capsys.readouterr().out
    assert "simulated vs measured (vllm-bench" in out
    assert "4 records, 3 replayed; not replayed: 1 failed" in out
    lines = out.splitlines()
    ttft = next(line for line in lines if "TTFT (ms)" in line and "mean" in line)
    assert "10.00" in ttft and "63.33" in ttft and "-84.2" in ttft
    rps = next(line for line in lines if "requests/s" in line)
    assert "2.96" in rps and "2.80" in rps and "+5.7" in rps
    words = " ".join(out.split())  # the console wraps long lines
    assert "0 rejected by the simulated deployment and left out of both sides; 3 compared" in words


def test_cli_says_how_many_requests_were_left_out(capsys):
    small = ["--block-size", "16", "--num-gpu-blocks", "2"]
    assert main(["replay", str(VLLM), "--measured", "--no-progress", *FIXED, *small]) == 0
    out = capsys.readouterr().out
    words = " ".join(out.split())  # the console wraps long lines
    assert "1 rejected by the simulated deployment and left out of both sides; 2 compared" in words
    ttft = next(line for line in out.splitlines() if "TTFT (ms)" in line and "mean" in line)
    assert "45.00" in ttft  # the measured mean of the two requests compared


def test_cli_aiperf_side_by_side(capsys):
    argv = ["replay", str(AIPERF), "--measured", "--format", "aiperf", "--no-progress", *FIXED]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "6 records, 3 replayed; not replayed: 1 warmup, 1 cancelled, 1 failed" in out
    assert "note: 1 warmup records skipped" in out
    # Arrivals 0, 10, 20 ms; vLLM's async scheduling forms each pass when the one before starts.
    # Passes: [0, 10] prefills a; [10, 12] decodes a (formed at 0, before c); [12, 24] prefills
    # c and decodes a; [24, 26] decodes a and c (formed at 12, before b); [26, 38] prefills b.
    # TTFT a 10, c 14, b 18: mean 14 against the measured 53.33 (-73.8 %).
    ttft = next(line for line in out.splitlines() if "TTFT (ms)" in line and "mean" in line)
    assert "14.00" in ttft and "53.33" in ttft and "-73.8" in ttft


def test_cli_measured_json_is_the_report(capsys):
    assert main(["replay", str(VLLM), "--measured", *FIXED, "--json", "-"]) == 0
    captured = capsys.readouterr()
    expected = dynosim.replay(load_measured(VLLM).columns, FIXED_CONFIG)
    assert captured.out.strip() == expected.to_json()
    assert "simulated vs measured" in captured.err  # the tables move to stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--format", "aiperf"], "--format aiperf reads a measured run: add --measured"),
        (["--measured", "--format", "azure"],
         "--measured reads aiperf or vllm-bench (--format), not the trace format azure"),
        (["--measured", "--synthetic", "--rate", "2"], "--synthetic, --rate do not apply"),
    ],
)  # fmt: skip
def test_cli_measured_flags_that_do_not_go_together(capsys, argv, message):
    assert main(["replay", str(AIPERF), *argv]) == EXIT_BAD_INPUT
    assert message in capsys.readouterr().err


def test_cli_measured_needs_the_file(capsys):
    assert main(["replay", "--measured"]) == EXIT_BAD_INPUT
    assert "--measured needs the measured file" in capsys.readouterr().err


def test_cli_measured_file_of_the_wrong_shape_exits_2(tmp_path, capsys):
    records = aiperf_records()
    del records[4]["metrics"]["request_latency"]
    bad = write_lines(tmp_path / "bad.jsonl", records)
    assert main(["replay", str(bad), "--measured"]) == EXIT_BAD_INPUT
    assert f"{bad}:5: field 'metrics.request_latency': missing" in capsys.readouterr().err
    uneven = write_json(tmp_path / "uneven.json", vllm_result(ttfts=[0.1]))
    assert main(["replay", str(uneven), "--measured"]) == EXIT_BAD_INPUT
    assert f"{uneven}: field 'ttfts': 1 entries" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["replay", str(empty), "--measured"]) == EXIT_BAD_INPUT
    assert f"{empty}: no records: the file is empty" in capsys.readouterr().err
    csv = tmp_path / "t.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,5,5\n")
    assert main(["replay", str(csv), "--measured"]) == EXIT_BAD_INPUT
    assert f"{csv}: cannot tell the measured format" in capsys.readouterr().err
