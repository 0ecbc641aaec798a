"""What a user sees on the command line and the page: rejections said aloud (and
``--fail-on-rejections``), what was simulated named first, one set of flag names with
"did you mean", ``--version``, SLA flags on replay, readable series with capacities and
saturation warnings."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import needs_aic

import dynosim
from dynosim.bench import offline_replay_bench as bench
from dynosim.cli import COMMANDS, EXIT_BAD_INPUT, main
from dynosim.cli.common import EXIT_REJECTED
from dynosim.views.describe import capacity, saturation, used_config
from dynosim.views.series import bucket_widths, timeseries

#: A synthetic load TensorRT-LLM's default engine (8,192-token passes, no chunked context)
#: rejects whole: every prompt is 20,000 tokens.
LONG_PROMPTS = ["--synthetic", "--isl", "20000", "--osl", "10", "--rate", "5", "--count", "30"]


def _oneline(text: str) -> str:
    """The console's text with its wrapping undone."""
    return " ".join(text.split())


# --- 1: rejections are said, and can fail a script ---------------------------------------------


def test_a_trtllm_replay_of_long_prompts_prints_the_rejection_line(tmp_path, capsys):
    page = tmp_path / "run.html"
    argv = ["replay", *LONG_PROMPTS, "--backend", "trtllm", "--html", str(page)]
    assert main(argv) == 0
    out = _oneline(capsys.readouterr().out)
    assert "warning: 30 of 30 requests rejected (100.0 %)" in out
    assert "30 prompt_exceeds_pass_token_budget: prompts of 20,000 tokens" in out
    assert "token budget (8,192)" in out
    html = page.read_text()
    assert 'id="warnings"' in html and "30 of 30 requests rejected (100.0 %)" in html
    # The same run with --fail-on-rejections writes its page, then fails.
    page.unlink()
    assert main([*argv, "--fail-on-rejections"]) == EXIT_REJECTED
    assert page.exists()


def test_no_rejection_line_and_exit_0_when_nothing_is_rejected(tmp_path, capsys):
    page = tmp_path / "run.html"
    argv = ["replay", *LONG_PROMPTS, "--isl", "2000", "--fail-on-rejections", "--html", str(page)]
    assert main(argv) == 0
    assert "rejected (" not in capsys.readouterr().out
    assert 'id="warnings"' not in page.read_text()


def test_offline_replay_bench_prints_rejections_and_fails_on_them(tmp_path, capsys):
    lines = dynosim.sample_trace_path().read_text().splitlines()[:300]
    trace = tmp_path / "small.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    argv = [str(trace), "--backend", "trtllm", "--max-num-batched-tokens", "2048"]
    longest = max(json.loads(line)["input_length"] for line in lines)
    assert longest > 2048  # some prompts do not fit one pass
    assert bench.main(argv) == 0
    out = _oneline(capsys.readouterr().out)
    found = re.search(r"warning: ([\d,]+) of 300 requests rejected", out)
    assert found and int(found.group(1).replace(",", "")) > 0
    assert "prompt_exceeds_pass_token_budget" in out
    assert bench.main([*argv, "--fail-on-rejections"]) == EXIT_REJECTED


# --- 4: say what was simulated -------------------------------------------------------------------


def test_the_first_line_says_uncalibrated_fixed_timing_engine_and_layout(capsys):
    argv = ["replay", *LONG_PROMPTS, "--isl", "200", "--timing", "fixed"]
    assert main([*argv, "--prefill-ms", "3", "--decode-ms", "1", "--workers", "2"]) == 0
    first = _oneline(capsys.readouterr().out).split("┌")[0]
    assert "uncalibrated fixed timing (3 ms a prefilling pass, 1 ms a decoding one)" in first
    assert "aggregated: 2 vllm TP1 workers (2 GPUs)" in first


@needs_aic
def test_the_first_line_names_model_system_and_aic_timing(capsys):
    argv = ["replay", *LONG_PROMPTS, "--isl", "500", "--count", "5", "--timing", "aic"]
    argv += ["--model", "Qwen/Qwen3-32B", "--system", "h200_sxm", "--tp", "2"]
    assert main(argv) == 0
    first = _oneline(capsys.readouterr().out).split("┌")[0]
    assert "Qwen/Qwen3-32B on h200_sxm (AIC timing of vllm" in first
    assert "vllm TP2 workers" in first


def test_the_configuration_shown_holds_the_values_used_not_null():
    report = dynosim.replay(
        dynosim.SyntheticWorkload(isl=200, osl=10, rate=5, count=20),
        {"engine": {"backend": "trtllm"}},
    )
    assert report.config["engine"]["max_num_tokens"] is None  # as given
    used = used_config(report)
    assert used["engine"]["max_num_tokens"] == 8192  # as run
    assert "null" not in yaml.safe_dump(used)


# --- 2: --backend applies to a --config base ----------------------------------------------------


def test_backend_flag_applies_when_the_config_file_is_validated(tmp_path, capsys):
    base = tmp_path / "base.yaml"
    base.write_text("engine:\n  max_num_tokens: 4096\n")  # a TensorRT-LLM setting
    argv = ["replay", *LONG_PROMPTS, "--isl", "200", "--config", str(base)]
    assert main(argv) == EXIT_BAD_INPUT  # the file alone is a vLLM engine
    assert "max_num_tokens" in capsys.readouterr().err
    assert main([*argv, "--backend", "trtllm", "--json", str(tmp_path / "r.json")]) == 0
    config = json.loads((tmp_path / "r.json").read_text())["config"]
    assert config["engine"]["backend"] == "trtllm"
    assert config["engine"]["max_num_tokens"] == 4096


# --- 5: one set of flag names ---------------------------------------------------------------------


def _json_config(tmp_path: Path, *flags: str) -> dict:
    out = tmp_path / "r.json"
    assert main(["replay", *LONG_PROMPTS, "--isl", "200", *flags, "--json", str(out)]) == 0
    return json.loads(out.read_text())["config"]


def test_aliases_set_what_the_flags_set(tmp_path):
    a = _json_config(tmp_path, "--workers", "3", "--router", "round_robin")
    b = _json_config(tmp_path, "--num-workers", "3", "--router-mode", "round-robin")
    assert a == b and a["cluster"]["num_workers"] == 3
    c = _json_config(tmp_path, "--prefill-workers", "1", "--decode-workers", "2")
    d = _json_config(tmp_path, "--num-prefill-workers", "1", "--num-decode-workers", "2")
    assert c == d and c["cluster"]["mode"] == "disaggregated"


@pytest.mark.parametrize(
    ("argv", "alias", "dest"),
    [
        (
            ["plan", "--synthetic", "--model", "m", "--system", "s", "-o", "x"],
            "--total-gpus",
            "max_gpus",
        ),
        (["sweep", "--synthetic", "--space", "s.yaml"], "--save-dir", "output"),
        (
            ["plan", "--synthetic", "--model", "m", "--system", "s", "--max-gpus", "8"],
            "--save-dir",
            "output",
        ),
    ],
)
def test_aiconfigurator_aliases_parse(argv, alias, dest):
    from dynosim.cli import _parser

    full = [*argv, alias, "8"]
    args = _parser(full).parse_args(full)
    assert str(getattr(args, dest)) == "8"


def test_aic_sla_aliases_reach_the_sla():
    from dynosim.cli import _parser
    from dynosim.cli.rows import sla_from_args

    argv = ["plan", "--synthetic", "--model", "m", "--system", "s", "--max-gpus", "8", "-o", "x"]
    argv += ["--ttft", "900", "--tpot", "40"]
    sla = sla_from_args(_parser(argv).parse_args(argv))
    assert (sla.ttft_ms, sla.tpot_ms) == (900.0, 40.0)


def test_a_bad_sla_limit_names_the_alias_typed(capsys):
    from dynosim.cli import _parser
    from dynosim.cli.rows import sla_from_args

    argv = ["plan", "--synthetic", "--model", "m", "--system", "s", "--max-gpus", "8", "-o", "x"]
    argv += ["--ttft", "-5"]
    with pytest.raises(dynosim.ConfigError, match=r"--ttft -5\.0 \(sla\.ttft_ms\)"):
        sla_from_args(_parser(argv).parse_args(argv))


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        (["replay", "--wrokers", "3"], "'--workers'"),
        (["replay", "--num-gpu-blcoks", "3"], "'--num-gpu-blocks'"),
        (["replay", "--router", "kv-awre"], "'kv_aware'"),
        (["replya"], "'replay'"),
    ],
)
def test_a_typo_gets_did_you_mean(argv, meant, capsys):
    with pytest.raises(SystemExit) as ended:
        main(argv)
    assert ended.value.code == EXIT_BAD_INPUT
    assert f"did you mean {meant}?" in capsys.readouterr().err


def test_an_error_names_the_flag_as_typed(capsys):
    assert main(["replay", *LONG_PROMPTS, "--num-workers", "0"]) == EXIT_BAD_INPUT
    assert "--num-workers 0 (cluster.num_workers)" in capsys.readouterr().err
    assert main(["replay", *LONG_PROMPTS, "--workers", "0"]) == EXIT_BAD_INPUT
    assert "--workers 0 (cluster.num_workers)" in capsys.readouterr().err


@needs_aic
def test_a_model_name_typo_gets_did_you_mean(capsys):
    argv = ["replay", *LONG_PROMPTS, "--timing", "aic", "--model", "Qwen/Qwen3-32b"]
    assert main([*argv, "--system", "h200_sxm"]) == EXIT_BAD_INPUT
    assert "did you mean 'Qwen/Qwen3-32B'?" in capsys.readouterr().err


# --- 8: version, SLA flags on replay -----------------------------------------------------------


def test_version_flag_and_attribute(capsys):
    with pytest.raises(SystemExit) as ended:
        main(["--version"])
    assert ended.value.code == 0
    assert capsys.readouterr().out.strip() == f"dynosim {dynosim.__version__}"
    assert re.fullmatch(r"\d+\.\d+\.\d+.*|0\+unknown", dynosim.__version__)
    assert dynosim.VERSION == dynosim.__version__  # the older name, looked up as lazily


def test_sla_flags_on_replay_set_goodput(tmp_path):
    loose = _json_config(tmp_path, "--sla-ttft-ms", "1e9")
    assert loose["sla"]["ttft_ms"] == 1e9
    out = tmp_path / "tight.json"
    argv = ["replay", *LONG_PROMPTS, "--isl", "200", "--timing", "fixed", "--prefill-ms", "50"]
    argv += ["--decode-ms", "5", "--json", str(out)]
    assert main([*argv, "--sla-ttft-ms", "1e9"]) == 0
    everything = json.loads(out.read_text())["summary"]["goodput_rps"]
    assert main([*argv, "--sla-ttft-ms", "10", "--sla-tpot-ms", "1"]) == 0
    assert everything > 0 and json.loads(out.read_text())["summary"]["goodput_rps"] == 0


# --- 7: readable series, capacities, saturation -------------------------------------------------


@pytest.fixture(scope="module")
def long_disagg():
    """An hour of synthetic traffic on disaggregated workers with slow links and small tiers."""
    config = {
        "cluster": {"mode": "disaggregated", "num_prefill_workers": 2, "num_decode_workers": 2},
        "engine": {"num_gpu_blocks": 2048},
        "kv_transfer": {"bandwidth_gbps": 0.15, "kv_bytes_per_token": 131072},
        "offload": {"g2_blocks": 256, "g1_g2_gbps": 1.0},
    }
    work = dynosim.SyntheticWorkload(isl=3000, osl=50, rate=1.0, count=3600, seed=3)
    return dynosim.replay(work, config)


def test_series_of_an_hour_merge_into_few_buckets_keeping_mean_and_spikes(long_disagg):
    raw = timeseries(long_disagg)
    merged = timeseries(long_disagg, 200)
    name = "kv_blocks_used[D0]"
    t, mean, lo, hi = raw[name]
    assert len(t) > 1000  # 1 s buckets over an hour
    mt, mmean, mlo, mhi = merged[name]
    assert len(mt) <= 200
    assert mhi.max() == hi.max() and mlo.min() == lo.min()  # spikes survive
    w = bucket_widths(long_disagg)
    k = -(-len(t) // 200)
    mw = np.add.reduceat(w, np.arange(0, len(t), k))
    # The time-weighted mean over the replay is the same either way.
    assert np.isclose((mean * w).sum(), (mmean * mw).sum())


def test_capacities_and_saturation_are_drawn_and_said(long_disagg):
    cap = capacity(long_disagg)
    assert cap.kv_blocks == {"prefill": 2048, "decode": 2048}
    assert cap.g2_blocks == 256 * 4  # per rank, 4 ranks
    lines = saturation(long_disagg)
    use = long_disagg.summary["link_utilization"]
    assert max(use) > 0.95
    assert any(line.startswith("KV-transfer link") for line in lines)
    fig = long_disagg.plot("state")
    legends = {
        ax.get_ylabel(): [t.get_text() for t in ax.get_legend().texts]
        for ax in fig.axes
        if ax.get_legend()
    }
    assert "capacity: 2,048" in legends["KV blocks in use"]
    assert "capacity: 1,024" in legends["G2 blocks held"]
    page = long_disagg.to_html()
    assert 'id="warnings"' in page and "KV-transfer link" in page


@pytest.mark.parametrize(
    ("entry", "argv"),
    [
        ("dynosim.cli", ["--help"]),
        ("dynosim.cli", ["--version"]),
        *(("dynosim.cli", [command, "--help"]) for command in COMMANDS),
        ("dynosim.bench", ["--help"]),  # offline_replay_bench
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else value,
)
def test_help_and_version_import_no_configuration_models(entry, argv):
    # What makes a start slow is what it imports (pydantic's models, numpy, the planner):
    # measured in the report as times, checked here as imports, for every command's --help.
    script = (
        "import sys\n"
        f"from {entry} import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "heavy = ('pydantic', 'numpy', 'matplotlib', 'rich', 'dynosim.plan', 'dynosim.config')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=60
    )
    assert done.stderr.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize(
    ("flags", "models"),
    [
        ([], False),
        (["--prefill-workers", "2", "--decode-workers", "2", "--kv-bytes-per-token", "1e5"], False),
        (["--timing", "fixed", "--prefill-ms", "5", "--decode-ms", "1"], False),
        (["--config", "settings.yaml"], True),
    ],
    ids=["defaults", "disaggregated", "fixed", "config-file"],
)
def test_a_replay_starts_before_what_prints_its_report_is_imported(tmp_path, flags, models):
    # `dynosim replay`'s start, up to the core's replay: none of what only prints, saves or
    # checks reports (rich, numpy, the report schema's models, the comparison), reads YAML or
    # generates synthetic requests. The core reads the trace and holds its requests, so numpy
    # is not imported; settings given by flags alone are checked by the core, so neither is
    # pydantic (its import and model building were two thirds of a start). A configuration
    # file is checked by the models (pydantic, and YAML). The core's replay is replaced by a
    # probe that lists what is loaded.
    (tmp_path / "settings.yaml").write_text("cluster:\n  num_workers: 2\n")
    script = (
        "import sys\n"
        "import dynosim._core as core\n"
        "def probe(*args, **kwargs):\n"
        "    top = {m.split('.')[0] for m in sys.modules}\n"
        "    loaded = top & {'rich', 'yaml'}\n"
        "    loaded |= {m for m in sys.modules if m in ('dynosim.report_schema', 'secrets',\n"
        "               'dynosim.compare.measured', 'dynosim.cli.summary',\n"
        "               'dynosim.workload.synthetic')}\n"
        "    print(sorted(loaded), 'numpy' in sys.modules, 'pydantic' in sys.modules,\n"
        "          file=sys.stderr)\n"
        "    raise SystemExit(0)\n"
        "core.replay = probe\n"
        "from dynosim.cli import main\n"
        "main(['replay', *sys.argv[1:]])\n"
    )
    expected = "['yaml'] False True" if models else "[] False False"
    assert _last_line_of(script, flags, tmp_path)[0] == expected


def _last_line_of(script: str, argv: list[str], cwd) -> tuple[str, str]:
    """The last line ``script`` printed to stderr, run with ``argv`` in a fresh interpreter
    (what it imported is its own), and what it printed to stdout."""
    done = subprocess.run(
        [sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=120, cwd=cwd
    )
    return done.stderr.strip().splitlines()[-1], done.stdout


@pytest.mark.parametrize(
    ("flags", "models"),
    [
        (["--json", "out.json"], False),
        (
            [
                "--prefill-workers",
                "1",
                "--decode-workers",
                "1",
                "--kv-bandwidth-gbps",
                "0.5",
                "--kv-bytes-per-token",
                "3e5",
                "--g2-blocks",
                "50",
                "--g1-g2-gbps",
                "0.05",
            ],
            True,
        ),
        (
            ["--num-gpu-blocks", "300", "--max-num-batched-tokens", "512", "--backend", "trtllm"],
            True,
        ),
    ],
    ids=["summary-and-json", "saturated-tiers", "rejections"],
)
def test_a_replay_of_flags_alone_builds_no_model_after_its_replay_unless_it_must(
    tmp_path, flags, models
):
    # The summary names the deployment from the core's view of the configuration, and the
    # report and its JSON need no model either: the whole command runs without pydantic. Only
    # a summary line that needs a model's rule (a rejection's cause, a tier's capacity) builds
    # the models, after the replay.
    script = (
        "import sys\n"
        "from dynosim.cli import main\n"
        "code = main(['replay', '--no-progress', *sys.argv[1:]])\n"
        "print(code, 'pydantic' in sys.modules, file=sys.stderr)\n"
    )
    last, printed = _last_line_of(script, flags, tmp_path)
    assert last == f"0 {models}"
    assert ("warning:" in printed) == models  # the lines that needed the models


def test_offline_replay_bench_takes_dynosims_names_and_names_the_flag_typed(capsys):
    def config(*flags: str) -> dynosim.SimConfig:
        parser = bench._parser()
        return bench.build_config(parser.parse_args(["trace.jsonl", *flags]), parser)

    assert config("--workers", "3") == config("--num-workers", "3")
    disagg = ["--serving-mode", "disagg", "--prefill-workers", "2", "--decode-workers", "1"]
    kv = ["--kv-bytes-per-token", "1000"]
    assert config(*disagg, *kv, "--kv-bandwidth-gbps", "5") == config(
        *kv,
        "--serving-mode",
        "disagg",
        "--num-prefill-workers",
        "2",
        "--num-decode-workers",
        "1",
        "--kv-transfer-bandwidth",
        "5",
    )
    with pytest.raises(SystemExit):
        config("--serving-mode", "disagg", "--workers", "2")
    assert "--workers: counts aggregated workers" in capsys.readouterr().err
    with pytest.raises(dynosim.ConfigError, match=r"--workers 0 \(cluster\.num_workers\)"):
        config("--workers", "0")
