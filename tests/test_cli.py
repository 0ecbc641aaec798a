"""The ``dynosim`` command line."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dynosim
from dynosim._defaults import BACKENDS, LINK_MODELS, ROUTERS, TRANSFER_SIZINGS
from dynosim.cli import EXIT_BAD_INPUT, main


def test_replay_bundled_sample_prints_summary(capsys):
    assert main(["replay", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "bundled sample (mooncake_conversation_sample.jsonl)" in out
    assert "completed / rejected" in out
    assert "TTFT" in out


def test_json_to_stdout_matches_the_api(capsys, tmp_path):
    assert main(["replay", "--workers", "2", "--block-size", "32", "--json", "-"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert "TTFT" in captured.err  # the table moves to stderr
    expected = dynosim.replay(
        dynosim.load_trace(dynosim.sample_trace_path()),
        {"cluster": {"num_workers": 2}, "engine": {"block_size": 32}},
    )
    assert captured.out.strip() == expected.to_json()
    assert report["summary"]["num_requests"] == 3000
    assert report["config"]["engine"]["block_size"] == 32


def test_json_file_and_flags(tmp_path, capsys):
    out = tmp_path / "r.json"
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [1]}\n'
        '{"timestamp": 1000, "input_length": 8, "output_length": 2, "hash_ids": [1]}\n'
    )
    argv = [
        "replay",
        str(trace),
        "--timing",
        "fixed",
        "--prefill-ms",
        "10",
        "--decode-ms",
        "2",
        "--arrival-speedup",
        "2",
        "--block-size",
        "4",
        "--workers",
        "1",
        "--json",
        str(out),
    ]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["requests"]["arrival_ms"] == [0.0, 500.0]
    # The second prompt is fully cached (two 4-token blocks), but a pass computes at least its
    # last token: it reuses the first block and prefills the second, 10 ms, then decodes 2 ms.
    assert report["requests"]["ttft_ms"] == [10.0, 10.0]
    assert report["requests"]["e2e_ms"] == [12.0, 12.0]


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--workers", "3", "--router", "kv-aware", "--block-size", "32", "--explain"],
        "--prefill-workers 2 --decode-workers 1 --kv-bandwidth-gbps 25 "
        "--kv-bytes-per-token 100000 --link-model line_rate".split(),
        "--timing fixed --prefill-ms 30 --decode-ms 10 --backend sglang "
        "--num-gpu-blocks 2000 --sla-ttft-ms 500".split(),
        "--backend trtllm --max-num-batched-tokens 4096 --g2-blocks 4000 "
        "--kv-bytes-per-token 160000 --g1-g2-gbps 20 --concurrency 8".split(),
    ],
    ids=["defaults", "aggregated", "disaggregated", "fixed-sglang", "trtllm-offload"],
)
def test_flags_alone_replay_as_the_models_would(tmp_path, capsys, flags):
    # Settings that all come from flags are checked by the core alone (no pydantic model is
    # built); an empty --config file sends the same settings the models' way. Both must give
    # the same report, byte for byte.
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    reports = []
    for extra in ([], ["--config", str(empty)]):
        assert main(["replay", "--no-progress", "--json", "-", *flags, *extra]) == 0
        reports.append(capsys.readouterr().out)
    assert reports[0] == reports[1]
    assert json.loads(reports[0])["summary"]["num_requests"] == 3000


#: Flags and values to draw from, a few out of range (the core refuses them, and the models
#: then name them): for every mode, then for disaggregated serving only.
_FLAG_VALUES = {
    "--block-size": ["16", "64"],
    "--num-gpu-blocks": ["600", "5000", "0"],
    "--max-num-seqs": ["8", "256"],
    "--max-num-batched-tokens": ["512", "8192"],
    "--router": list(ROUTERS),
    "--concurrency": ["4", "64"],
    "--backend": list(BACKENDS),
    "--dp": ["1", "2"],
    "--sla-ttft-ms": ["500", "-5"],
    "--arrival-speedup": ["2", "0.5", "inf"],
    "--g2-blocks": ["2000"],
}
_DISAGGREGATED_VALUES = {
    "--kv-bandwidth-gbps": ["10", "25", "-1"],
    "--kv-bytes-per-token": ["100000", "300000"],
    "--transfer-sizing": list(TRANSFER_SIZINGS),
}


def _drawn(table, chosen):
    return [
        x for flag, k in sorted(chosen.items()) for x in (flag, table[flag][k % len(table[flag])])
    ]


@settings(max_examples=25, deadline=None)
@given(
    common=st.dictionaries(st.sampled_from(sorted(_FLAG_VALUES)), st.integers(0, 2), max_size=5),
    disaggregated=st.one_of(
        st.none(),
        st.dictionaries(
            st.sampled_from(sorted(_DISAGGREGATED_VALUES)), st.integers(0, 2), max_size=3
        ),
    ),
    workers=st.sampled_from([1, 2, 3, 0]),
    link_model=st.sampled_from([None, *LINK_MODELS]),
    fixed=st.booleans(),
)
def test_any_flags_alone_replay_or_fail_as_the_models_would(
    tmp_path_factory, common, disaggregated, workers, link_model, fixed
):
    # The core-only route (flags alone) against its reference, the models' route (the same
    # flags with an empty --config file): the same exit code, report, summary and error, byte
    # for byte.
    flags = _drawn(_FLAG_VALUES, common)
    if disaggregated is None:
        flags += ["--workers", str(workers)]
    else:
        flags += ["--prefill-workers", str(max(workers, 1)), "--decode-workers", "2"]
        flags += _drawn(_DISAGGREGATED_VALUES, disaggregated)
        if link_model and "--kv-bandwidth-gbps" in disaggregated:
            flags += ["--link-model", link_model]
    if "--g2-blocks" in common:
        flags += ["--g1-g2-gbps", "20"]
        if "--kv-bytes-per-token" not in (disaggregated or {}):
            flags += ["--kv-bytes-per-token", "100000"]
    if fixed:
        flags += ["--timing", "fixed", "--prefill-ms", "12", "--decode-ms", "3"]
    empty = tmp_path_factory.mktemp("config") / "empty.yaml"
    empty.write_text("")
    runs = [
        _run_main(["replay", "--no-progress", "--json", "-", *flags, *extra])
        for extra in ([], ["--config", str(empty)])
    ]
    assert runs[0] == runs[1], flags


def _run_main(argv):
    """(exit code, stdout, stderr) of the command line's ``main`` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_a_flag_the_core_refuses_is_named_as_the_models_name_it(capsys):
    # inf cannot travel as JSON: the core refuses the document, and the models then say why.
    assert main(["replay", "--arrival-speedup", "inf"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "--arrival-speedup Infinity (cluster.arrival_speedup_ratio): expected a finite" in err
    assert main(["replay", "--workers", "0"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "--workers 0 (cluster.num_workers): must be between 1 and 16,384, got 0" in err


def test_config_file_with_flag_override(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cluster:\n  num_workers: 3\nengine:\n  num_gpu_blocks: 4096\n")
    assert main(["replay", "--config", str(cfg), "--workers", "5", "--json", "-"]) == 0
    config = json.loads(capsys.readouterr().out)["config"]
    assert config["cluster"]["num_workers"] == 5
    assert config["engine"]["num_gpu_blocks"] == 4096


def test_backend_flag_picks_the_engine_flavour(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("engine:\n  preemption_mode: fifo\n")
    argv = ["replay", "--backend", "trtllm", "--max-num-batched-tokens", "4096", "--json", "-"]
    assert main(argv) == 0
    engine = json.loads(capsys.readouterr().out)["config"]["engine"]
    assert (engine["backend"], engine["max_num_tokens"]) == ("trtllm", 4096)
    assert engine["max_num_batched_tokens"] is None
    # A vLLM setting from the file does not exist on the TensorRT-LLM engine: named, refused.
    assert main(["replay", "--config", str(cfg), "--backend", "trtllm"]) == EXIT_BAD_INPUT
    assert "engine.preemption_mode: a vllm setting; the trtllm engine" in capsys.readouterr().err


def test_bad_trace_exits_with_file_and_line(tmp_path, capsys):
    trace = tmp_path / "bad.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [1]}\n'
        '{"timestamp": 1, "input_length": -3, "output_length": 2, "hash_ids": [1]}\n'
    )
    assert main(["replay", str(trace)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "bad.jsonl:2" in err and "input_length" in err and "-3" in err


def test_bad_flags_exit_with_a_message(capsys):
    assert main(["replay", "--timing", "fixed", "--prefill-ms", "3"]) == EXIT_BAD_INPUT
    assert "--timing fixed needs --decode-ms" in capsys.readouterr().err
    assert main(["replay", "--block-size", "0"]) == EXIT_BAD_INPUT
    assert "--block-size 0 (engine.block_size): must be between 1 and 65,536, got 0" in (
        capsys.readouterr().err
    )


def test_schema_command(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    sections = {"cluster", "engine", "timing", "kv_transfer", "sla", "report"}
    assert sections <= set(schema["properties"])


def test_console_script_runs_as_a_module():
    done = subprocess.run(
        [sys.executable, "-m", "dynosim", "replay", "--no-progress", "--workers", "8"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "8 x 1" in done.stdout


def test_an_azure_row_dated_1970_replays_with_bounded_series(tmp_path):
    # 53 years between the first row and the others: the series once took one sample per
    # second of that span (past 24 GB); now at most 2,048 buckets.
    trace = tmp_path / "gap.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "1970-01-01 00:00:00.0000000,100,10\n"
        "2023-11-16 18:15:46.6805900,200,20\n"
        "2023-11-16 18:15:47.6805900,300,30\n"
    )
    out = tmp_path / "run.json"
    assert main(["replay", str(trace), "--no-progress", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["summary"]["completed_requests"] == 3
    assert len(report["timeseries"]["time_ms"]) <= 2048
    assert report["summary"]["duration_ms"] > 53 * 365 * 86_400_000
