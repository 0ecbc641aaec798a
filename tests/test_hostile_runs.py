"""Hostile runs (issue 32): links planted in an output directory, documents that expand past a
bound, sweeps larger than the machine, SIGTERM, times past f64's millisecond resolution,
damaged reports and measured files, and the settings and flags that did nothing or leaked a
traceback. Each test is one example of a class the code handles by one mechanism."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import group_processes, needs_aic

from dynosim.cli import EXIT_BAD_INPUT, main

SYNTH = ["--synthetic", "--isl", "64", "--osl", "4", "--rate", "10", "--count", "20"]


def cli_error(
    argv: list[str], capsys: pytest.CaptureFixture[str], code: int = EXIT_BAD_INPUT
) -> str:
    """The one error line of a command that must exit ``code``."""
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert err.startswith("dynosim: error: ") and "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    return err.removeprefix("dynosim: error: ")


# --- links planted in an output directory (item 1) -------------------------------------------


def plant(out: Path, names: list[str], victims: Path) -> dict[str, Path]:
    """A link in ``out`` under each of ``names``, to a victim file of its own in ``victims``."""
    out.mkdir(parents=True, exist_ok=True)
    victims.mkdir(exist_ok=True)
    planted = {}
    for name in names:
        victim = victims / f"{name}.victim"
        victim.write_text("keep me\n")
        (out / name).symlink_to(victim)
        planted[name] = victim
    return planted


def assert_untouched(out: Path, planted: dict[str, Path], written: list[str]) -> None:
    for name, victim in planted.items():
        assert victim.read_text() == "keep me\n", name
    for name in written:
        assert not (out / name).is_symlink() and (out / name).is_file(), name


def test_a_link_planted_in_a_sweep_directory_is_replaced_not_followed(tmp_path, monkeypatch):
    from dynosim.cli.sweep import COMPLETE, PARTIAL

    space = tmp_path / "space.yaml"
    space.write_text("cluster.num_workers: [1, 2]\n")
    out = tmp_path / "o1"
    planted = plant(out, [PARTIAL, *COMPLETE], tmp_path / "victims")
    argv = ["sweep", *SYNTH, "--space", str(space), "--no-progress", "-o", str(out)]
    # Cut short after the rows: the partial file is the sweep's own, the victim untouched.
    from dynosim.plan import result

    def cut(self):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(result.SweepResult, "jsonl_text", cut)
        assert main(argv) == 130
    assert_untouched(out, planted, [PARTIAL])
    assert len((out / PARTIAL).read_text().splitlines()) == 2
    # A complete sweep: every table written fresh, the partial rows gone.
    (out / PARTIAL).unlink()
    planted = plant(out, [PARTIAL], tmp_path / "victims2")
    assert main(argv) == 0
    assert_untouched(out, planted, [n for n in COMPLETE if n != "pareto.html" or have_plot()])
    assert not (out / PARTIAL).exists()


def have_plot() -> bool:
    from conftest import have

    return have("matplotlib")


def test_a_link_to_a_directory_in_a_sweep_directory_is_replaced(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("cluster.num_workers: [1]\n")
    out = tmp_path / "o"
    out.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (out / "results.csv").symlink_to(tmp_path / "elsewhere")
    assert main(["sweep", *SYNTH, "--space", str(space), "--no-progress", "-o", str(out)]) == 0
    assert (out / "results.csv").is_file() and list((tmp_path / "elsewhere").iterdir()) == []


@needs_aic
def test_a_link_planted_in_a_plan_directory_is_replaced_not_followed(tmp_path, capsys):
    out = tmp_path / "plan"
    names = ["replays.csv", "pareto.csv", "pareto.html", "candidate.yaml", "k8s_deploy.yaml"]
    planted = plant(out, names, tmp_path / "victims")
    argv = ["plan", "--synthetic", "--isl", "2000", "--osl", "100", "--rate", "4"]
    argv += ["--count", "300", "--model", "Qwen/Qwen3-32B", "--system", "h200_sxm"]
    argv += ["--no-progress", "--sla-ttft-ms", "600", "--sla-tpot-ms", "30", "--max-gpus", "2"]
    argv += ["--tp", "1", "--modes", "aggregated", "-o", str(out)]
    assert main(argv) == 0, capsys.readouterr()
    assert_untouched(out, planted, [n for n in names if n != "pareto.html" or have_plot()])


@needs_aic
def test_a_link_planted_in_a_render_directory_is_replaced_not_followed(tmp_path, capsys):
    candidate = tmp_path / "candidate.yaml"
    candidate.write_text(
        "mode: aggregated\nmodel: Qwen/Qwen3-32B\nsystem: h200_sxm\nbackend: vllm\n"
        "backend_version: 0.24.0\nblock_size: 64\naggregated: {replicas: 1, max_batch_size: 8}\n"
    )
    out = tmp_path / "deploy"
    planted = plant(out, ["k8s_deploy.yaml"], tmp_path / "victims")
    argv = ["render", "--candidate", str(candidate), "--isl", "100", "--osl", "10"]
    assert main([*argv, "-o", str(out)]) == 0, capsys.readouterr()
    assert_untouched(out, planted, ["k8s_deploy.yaml"])
    assert "DynamoGraphDeployment" in (out / "k8s_deploy.yaml").read_text()


def test_a_file_the_user_names_is_still_written_through_its_link(tmp_path):
    from dynosim._files import write_atomic

    real = tmp_path / "real.txt"
    real.write_text("old\n")
    (tmp_path / "link.txt").symlink_to(real)
    write_atomic(tmp_path / "link.txt", "new\n")
    assert real.read_text() == "new\n" and (tmp_path / "link.txt").is_symlink()
    write_atomic(tmp_path / "link.txt", "fresh\n", fresh=True)
    assert real.read_text() == "new\n" and not (tmp_path / "link.txt").is_symlink()
    assert (tmp_path / "link.txt").read_text() == "fresh\n"


def test_a_temporary_name_planted_beside_an_output_is_never_opened(tmp_path, monkeypatch):
    import secrets

    from dynosim._files import write_atomic

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    # The name the first draw gives is taken by a link: the write draws another.
    draws = iter(["0" * 16, "1" * 16])
    monkeypatch.setattr(secrets, "token_hex", lambda n: next(draws))
    (tmp_path / f".out.json.{'0' * 16}.tmp").symlink_to(victim)
    write_atomic(tmp_path / "out.json", "{}\n")
    assert victim.read_text() == "keep me\n" and (tmp_path / "out.json").read_text() == "{}\n"


# --- YAML alias expansion, and messages that never serialise more than they show (item 2) ----


def alias_bomb(levels: int = 9, tail: str = "cluster: {num_workers: *i}\n") -> str:
    """A few hundred bytes of nested aliases standing for 10^levels nodes."""
    lines = ["a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for i in range(1, levels):
        name, inner = chr(97 + i), chr(96 + i)
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{inner}"] * 10) + "]")
    return "\n".join(lines) + "\n" + tail


def test_a_config_of_nested_aliases_is_refused_before_it_is_walked(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    assert len(path.read_bytes()) < 500
    started = time.perf_counter()
    err = cli_error(["replay", "--no-progress", "--config", str(path)], capsys)
    assert err == (
        f"{path}: line 5, column 36: aliases expand the document by more than 100,000 nodes; "
        "write the repeated values out, or repeat them less"
    )
    assert time.perf_counter() - started < 30  # it took 224 s and 2.5 GB


@pytest.mark.parametrize("kind", ["space", "candidate", "manifest"])
def test_every_document_kind_bounds_its_aliases(tmp_path, capsys, kind):
    from dynosim.deploy import load_candidate, validate_manifest
    from dynosim.errors import ConfigError
    from dynosim.plan import Space

    path = tmp_path / f"{kind}.yaml"
    path.write_text(alias_bomb(tail="kind: x\n"))
    message = "line 5, column 36: aliases expand the document by more than 100,000 nodes"
    if kind == "manifest":
        started = time.perf_counter()
        assert main(["validate", str(path)]) == 1
        assert message in capsys.readouterr().out
        assert time.perf_counter() - started < 30  # 118 s and 5.5 GB before
        (problem,) = validate_manifest(path)
        assert str(problem).startswith(message)
        return
    with pytest.raises(ConfigError) as info:
        (Space.load if kind == "space" else load_candidate)(path)
    assert str(info.value).startswith(f"{path}: {message}")


def test_aliases_within_the_bound_still_read(tmp_path):
    from dynosim.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text(
        "cluster: {mode: disaggregated}\ndecode:\n  engine: &e {max_num_seqs: 8}\n"
        "prefill:\n  engine: *e\n"
    )
    config = load_config(path)
    assert config.prefill.engine.max_num_seqs == 8 == config.decode.engine.max_num_seqs


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: &a [*a]\n", "line 1, column 8: alias *a refers to a node it is inside"),
        ("[" * 200 + "]" * 200, "line 1, column 101: nested deeper than 100 levels"),
        ("cluster:\n  num_workers: " + "9" * 5000 + "\n", "line 2, column 16: an integer of 5,000"),
        (
            "cluster: {num_workers: 2}\nengine: {}\ncluster: {num_workers: 3}\n",
            "line 3, column 1: duplicate key 'cluster' (first at line 1, column 1)",
        ),
    ],
    ids=["recursive", "deep", "digits", "duplicate key"],
)
def test_hostile_yaml_is_refused_naming_line_and_column(tmp_path, text, message):
    from dynosim.config import load_config
    from dynosim.errors import ConfigError

    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: {message}")


def test_a_message_shows_a_bounded_part_of_a_huge_value(tmp_path):
    from dynosim import SimConfig
    from dynosim._shown import shown
    from dynosim.errors import ConfigError

    # A value of 10^9 elements that is only 9 levels of shared lists.
    value: list = [1] * 10
    for _ in range(8):
        value = [value] * 10
    started = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        SimConfig.model_validate({"cluster": {"router": value}})
    assert len(str(info.value)) < 200 and time.perf_counter() - started < 30
    assert shown("x" * 10**8) == '"' + "x" * 56 + "..."
    assert shown(10**4000) == "<an integer of ~4,000 digits>"
    loop: list = []
    loop.append(loop)
    assert shown(loop) == "[[...]]"
    # Many bad fields: the message lists five, and counts the rest.
    bad = {f"k{i}": 1 for i in range(1000)}
    with pytest.raises(ConfigError) as info:
        SimConfig.model_validate({"cluster": bad})
    assert str(info.value).endswith("; and 995 more problems") and len(info.value.problems) == 1000


# --- sweeps bounded by the machine (item 3) ---------------------------------------------------


def million() -> dict[str, list]:
    """A grid of 1,000 x 1,000 = 1,000,000 candidates (the documented limit)."""
    return {
        "sla.ttft_ms": [float(v) for v in range(1, 1001)],
        "cluster.router_seed": list(range(1000)),
    }


def test_a_million_candidate_space_is_never_listed():
    import tracemalloc

    from dynosim.plan import Space

    tracemalloc.start()
    try:
        space = Space(million()) * Space.zip({"engine.max_num_seqs": [64]})
        assert len(space) == 1_000_000
        assert space[999_999] == {
            "sla.ttft_ms": 1000.0,
            "cluster.router_seed": 999,
            "engine.max_num_seqs": 64,
        }
        assert space[-1] == space[999_999] and space[1234] == next(
            itertools.islice(space, 1234, None)
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Listed, the candidates alone took hundreds of MB (and their configurations 10 GB).
    assert peak < 50 << 20, peak


def test_a_sweep_holds_no_candidate_list_before_its_first_replay(monkeypatch):
    import tracemalloc

    import dynosim
    from dynosim.plan import executors

    class FirstReplay(Exception):
        pass

    seen = {}

    def first(self, key, core_json):
        seen["peak"] = tracemalloc.get_traced_memory()[1]
        raise FirstReplay

    monkeypatch.setattr(executors.Runner, "submit", first)
    work = dynosim.SyntheticWorkload(isl=64, osl=4, count=10, rate=10.0)
    peaks = []
    for n in (500, 4000):
        space = {"sla.ttft_ms": [float(v) for v in range(1, n + 1)]}
        tracemalloc.start()
        try:
            with pytest.raises(FirstReplay):
                dynosim.sweep(work, None, space, jobs=1, progress=False)
        finally:
            tracemalloc.stop()
        peaks.append(seen["peak"])
    # 3,500 more candidates cost nothing before the first replay (listed: ~10 KB each).
    assert peaks[1] < peaks[0] + (5 << 20), peaks


def test_more_jobs_than_cpus_or_candidates_are_capped_with_a_warning():
    import dynosim
    from dynosim.plan import resources
    from dynosim.plan.executors import Runner

    cols = dynosim.SyntheticWorkload(isl=64, osl=4, count=10, rate=10.0).columns()
    for executor in ("threads", "processes"):
        with pytest.warns(UserWarning, match=r"^jobs: 48 replays at once would only wait"):
            runner = Runner(cols, executor, 48, tasks=4)
        with runner:
            assert runner.jobs == min(4, resources.cpus())
    with Runner(cols, "threads", 3, tasks=2, force=True) as runner:
        assert runner.jobs == 3
    with Runner(cols, "threads", None, tasks=1) as runner:
        assert runner.jobs == 1
    # A sweep of 4 candidates with --executor processes --jobs 48 forks at most 4 workers.
    with pytest.warns(UserWarning, match="running"):
        result = dynosim.sweep(
            cols,
            None,
            {"cluster.num_workers": [1, 2, 3, 4]},
            executor="processes",
            jobs=48,
            progress=False,
        )
    assert len(result) == 4 and not result.failed().rows


def test_jobs_past_the_memory_are_refused_before_anything_starts(monkeypatch):
    import dynosim
    from dynosim.errors import ConfigError
    from dynosim.plan import resources

    cols = dynosim.SyntheticWorkload(isl=64, osl=4, count=100, rate=10.0).columns()
    space = {"cluster.num_workers": [16, 32], "engine.max_num_seqs": [8, 16]}
    # The core's estimate of the largest candidate (32 workers) sizes each job.
    biggest = dynosim.SimConfig.model_validate({"cluster": {"num_workers": 32}})
    each = dynosim._core.replay_bytes_estimate(biggest.model_dump_json(), 100, cols.tokens)
    available = cols.nbytes + 3 * each - 1  # room for 2 replays, not 3
    monkeypatch.setattr(resources, "cpus", lambda: 64)
    monkeypatch.setattr(resources, "available_memory", lambda: available)
    with pytest.raises(ConfigError) as info:
        dynosim.sweep(cols, None, space, jobs=4, progress=False)
    message = str(info.value)
    assert message.startswith("jobs: 4 replays at once may need ")
    assert message.endswith(
        "available; run 2 at once (jobs / --jobs 2), or force_jobs / --force-jobs"
    )
    assert len(dynosim.sweep(cols, None, space, jobs=2, progress=False)) == 4
    assert len(dynosim.sweep(cols, None, space, jobs=4, force_jobs=True, progress=False)) == 4


def test_ray_failing_to_start_is_one_error(monkeypatch):
    ray = pytest.importorskip("ray")
    import dynosim
    from dynosim.errors import DynosimError

    def broken(**kwargs):
        raise RuntimeError("Failed to start the GCS server.\nsee /tmp/ray/session_latest/logs")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", broken)
    cols = dynosim.SyntheticWorkload(isl=64, osl=4, count=10, rate=10.0).columns()
    with pytest.raises(DynosimError) as info:
        dynosim.sweep(cols, None, {"cluster.num_workers": [1]}, executor="ray", progress=False)
    assert str(info.value) == (
        "executor 'ray': Ray did not start (RuntimeError: Failed to start the GCS server.)"
    )


_GROWTH = """
import json, re, sys
import dynosim
from dynosim.bench.offline_replay_bench import PeakRss
extra = json.loads(sys.argv[1])
cols = dynosim.SyntheticWorkload(isl=500, osl=20, count=100_000, rate=2000.0, seed=1).columns()
config = dynosim.SimConfig.model_validate(extra)
estimate = dynosim._core.replay_bytes_estimate(config.model_dump_json(), len(cols), cols.tokens)
status = open("/proc/self/status").read()
before = int(re.search(r"^VmRSS:\\s+(\\d+) kB", status, re.MULTILINE).group(1)) * 1024
peak = PeakRss()
peak.reset()  # the replay's own high-water mark, from here
dynosim.replay(cols, config, progress=False)
print(json.dumps([estimate, peak.peak_mib() * 2**20 - before]))
"""


@pytest.mark.parametrize(
    "extra",
    [
        {"cluster": {"num_workers": 16}},
        {"engine": {"backend": "trtllm", "num_gpu_blocks": 200_000}},
        {"engine": {"backend": "sglang"}},
        {
            "cluster": {"mode": "disaggregated", "num_prefill_workers": 2, "num_decode_workers": 6},
            "offload": {"g2_blocks": 50_000},
            "kv_transfer": {"kv_bytes_per_token": 1000},
        },
    ],
    ids=["16 workers", "trtllm, big cache", "sglang", "disaggregated with tiers"],
)
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_the_memory_estimate_bounds_what_a_replay_takes(extra):

    out = subprocess.run(
        [sys.executable, "-c", _GROWTH, json.dumps(extra)],
        check=True,
        capture_output=True,
        text=True,
    )
    estimate, grew = json.loads(out.stdout)
    # An upper bound (the whole report included, which a sweep's replay never builds), and
    # not a wild one (SGLang's radix cache takes less than the block caches counted).
    assert grew <= estimate <= 5 * grew, (grew, estimate)


# --- SIGTERM ends a sweep or a plan as Ctrl-C does (item 4) -----------------------------------


def _group(pgid: int) -> list[Path]:
    """The processes of group ``pgid`` still alive (zombies are dead)."""
    alive = []
    for proc in group_processes(pgid):
        try:
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            alive.append(proc)
    return alive


def _terminate_while_replaying(argv: list[str]) -> tuple[int, str, int]:
    """Start ``dynosim ARGV`` in a process group of its own, send SIGTERM to it alone (not its
    workers: what ``kill PID`` does) once a replay runs; its exit code, stderr, and how many
    processes of its group are left a moment after it ended."""
    from test_interrupt import start_replaying

    proc = start_replaying(argv, wait_s=300)
    try:
        proc.send_signal(signal.SIGTERM)
        # Guards, not timing assertions: a command that ignores SIGTERM, or workers left
        # running (holding stderr open, they would also stall reading it), fail the test.
        proc.wait(timeout=60)
        deadline = time.monotonic() + 10
        while _group(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = len(_group(proc.pid))
        if left:
            os.killpg(proc.pid, signal.SIGKILL)
        err = proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None or _group(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, err, left


LONG = ["--synthetic", "--isl", "256", "--osl", "64", "--rate", "1000", "--count", "4000000"]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("executor", ["processes", "threads"])
def test_sigterm_ends_a_sweep_and_its_workers_with_exit_143(tmp_path, executor):
    space = tmp_path / "space.yaml"
    space.write_text("cluster.num_workers: [1, 2, 3, 4]\n")
    out = tmp_path / "out"
    argv = ["sweep", *LONG, "--space", str(space), "-o", str(out), "--no-progress"]
    code, err, left = _terminate_while_replaying([*argv, "--executor", executor, "--jobs", "2"])
    assert (code, err, left) == (143, "dynosim: terminated\n", 0)
    # No replay finished: no rows, and no table that looks complete.
    assert not out.exists() or list(out.iterdir()) == []


@needs_aic
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_sigterm_ends_a_plan_and_its_workers_with_exit_143(tmp_path):
    out = tmp_path / "plan"
    argv = ["plan", *LONG, "--model", "Qwen/Qwen3-32B", "--system", "h200_sxm"]
    argv += ["--sla-ttft-ms", "600", "--max-gpus", "4", "--tp", "1", "--modes", "aggregated"]
    argv += ["--executor", "processes", "--jobs", "2", "--no-progress", "-o", str(out)]
    code, err, left = _terminate_while_replaying(argv)
    assert (code, err, left) == (143, "dynosim: terminated\n", 0)
    assert not out.exists() or list(out.iterdir()) == []


# --- times past the clock's resolution (item 5) -----------------------------------------------


CLOCK = (
    "8,796,093,022,208 ms (2^43 ms, about 278 years), beyond which the replay's clock (f64 ms) "
    "no longer resolves a microsecond and step times round away"
)


def test_synthetic_arrivals_past_the_clock_bound_are_refused(capsys):
    # A rate of 1e-300 requests/s gave TTFT and E2E of 0: each pass rounded away.
    argv = ["replay", "--no-progress", "--synthetic", "--isl", "10", "--osl", "10"]
    err = cli_error([*argv, "--count", "5", "--rate", "1e-300"], capsys)
    assert err.startswith("workload request 1: arrival_ms - first arrival = ")
    assert err.endswith(f" ms is past {CLOCK}")


def test_trace_arrivals_past_the_clock_bound_name_the_line(tmp_path, capsys):
    rows = [
        {"timestamp": t, "input_length": 10, "output_length": 2, "hash_ids": [i]}
        for i, t in enumerate([0, 1e17])
    ]
    path = tmp_path / "late.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    err = cli_error(["replay", "--no-progress", str(path)], capsys)
    assert err == f"{path}:2: arrival_ms - first arrival = 1e17 ms is past {CLOCK}"
    # Within the bound, but past it once arrivals are 1,000,000 times slower.
    rows[1]["timestamp"] = 1e10
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    err = cli_error(["replay", "--no-progress", str(path), "--arrival-speedup", "1e-6"], capsys)
    assert err == (
        "workload request 1: (arrival_ms - first arrival) / cluster.arrival_speedup_ratio "
        f"0.000001 = 1e16 ms is past {CLOCK}"
    )


def test_a_date_outside_what_ns_hold_is_refused_not_wrapped(tmp_path, capsys):
    # 2323 read as nanoseconds wrapped around to 1739, sorting the row first.
    path = tmp_path / "late.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,10,2\n"
        "2323-11-16 18:15:46.6805900,10,2\n"
    )
    err = cli_error(["replay", "--no-progress", str(path)], capsys)
    assert err == (
        f"{path}:3: field 'TIMESTAMP': outside the years 1678 to 2261 a timestamp in ns holds, "
        'got "2323-11-16 18:15:46.6805900"'
    )


# --- settings that did nothing, flags that leaked tracebacks (item 8) -------------------------


TIERS = {"offload": {"g2_blocks": 8}, "kv_transfer": {"kv_bytes_per_token": 2}}
DISAGGREGATED = {"cluster": {"mode": "disaggregated"}}


@pytest.mark.parametrize(
    ("settings", "message", "making_it_apply"),
    [
        (
            {"offload": {"g1_g2_gbps": 5}},
            "offload.g1_g2_gbps: applies to the offload tiers, and there are none: set "
            "offload.g2_blocks (--g2-blocks) to have them, or leave it at its default",
            TIERS,
        ),
        (
            {"offload": {"in_flight": "wait"}},
            "offload.in_flight: applies to the offload tiers",
            TIERS,
        ),
        (
            {"offload": {"g2_g3_read_gbps": 1.0}},
            "offload.g2_g3_read_gbps: applies to the offload tiers",
            TIERS,
        ),
        (
            {"prefill": {"engine": {"max_num_seqs": 3}}},
            "prefill.engine: a role's own section applies to disaggregated serving, and "
            "cluster.mode is aggregated: move its settings to the shared section, or set "
            "cluster.mode: disaggregated",
            DISAGGREGATED,
        ),
        (
            {"decode": {"timing": {"model": "fixed", "prefill_ms": 1, "decode_ms": 1}}},
            "decode.timing: a role's own section applies to disaggregated serving",
            DISAGGREGATED,
        ),
    ],
)
def test_settings_that_would_do_nothing_are_errors_naming_them(settings, message, making_it_apply):
    import dynosim
    from dynosim.errors import ConfigError

    work = dynosim.SyntheticWorkload(isl=64, osl=4, count=4, rate=10.0)
    # A document alone is fine: another source (a flag) may give the mode or the tiers.
    dynosim.SimConfig.model_validate(settings)
    with pytest.raises(ConfigError) as info:
        dynosim.replay(work, settings, progress=False)
    assert str(info.value).startswith(message)
    # With what makes it apply, the same setting replays.
    merged = {
        k: {**making_it_apply.get(k, {}), **settings.get(k, {})}
        for k in {*settings, *making_it_apply}
    }
    dynosim.replay(work, merged, progress=False)
    # At its default, a setting changes nothing either way.
    dynosim.replay(work, {"offload": {"g1_g2_gbps": 14.0, "in_flight": "recompute"}})


def test_offload_flags_without_tiers_are_refused(tmp_path, capsys):
    err = cli_error(["replay", "--no-progress", "--g1-g2-gbps", "5"], capsys)
    assert err.startswith("offload.g1_g2_gbps: applies to the offload tiers, and there are none")
    # A file's tier rates with the tiers a flag gives: what runs has tiers, so they apply.
    config = tmp_path / "c.yaml"
    config.write_text("offload: {g1_g2_gbps: 5}\n")
    argv = ["replay", *SYNTH, "--no-progress", "--config", str(config)]
    assert main([*argv, "--g2-blocks", "16", "--kv-bytes-per-token", "2"]) == 0


def test_a_space_zip_that_is_no_mapping_is_refused(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text("cluster.num_workers: [1, 2]\nzip: 5\n")
    err = cli_error(["sweep", *SYNTH, "--space", str(space), "-o", str(tmp_path / "o")], capsys)
    assert err == (
        f"{space}: space: zip: expected a mapping of path -> list (or a list of them), got 5"
    )


# --- reports and measured runs checked whole before use (item 6) ------------------------------


def saved_report(tmp_path: Path, config: dict | None = None) -> dict:
    import dynosim

    work = dynosim.SyntheticWorkload(isl=100, osl=5, count=20, rate=10.0)
    return json.loads(dynosim.replay(work, config or {}, progress=False).to_json())


@pytest.mark.parametrize(
    "config",
    [
        {},
        {
            "cluster": {"mode": "disaggregated"},
            "kv_transfer": {"bandwidth_gbps": 8.0, "kv_bytes_per_token": 4096},
        },
        {
            "offload": {"g2_blocks": 8, "g3_blocks": 8, "g3_shared": True},
            "kv_transfer": {"kv_bytes_per_token": 2},
        },
        {
            "cluster": {"mode": "disaggregated"},
            "offload": {"g2_blocks": 8},
            "kv_transfer": {"kv_bytes_per_token": 2},
            "engine": {"backend": "sglang"},
        },
        {"engine": {"backend": "trtllm", "data_parallel_size": 2}},
    ],
    ids=["aggregated", "disaggregated links", "shared G3", "decode tiers, sglang", "trtllm dp"],
)
def test_every_kind_of_report_fits_the_schema(tmp_path, config):
    from dynosim.report import load_report

    data = saved_report(tmp_path, config)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")))
    assert load_report(path).to_json() == path.read_text()


def _damage(data: dict, where: str, value: object) -> dict:
    *parents, last = where.split(".")
    node = data
    for key in parents:
        node = node[key]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return data


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        # Each of these was a KeyError, a RecursionError or a page built from nonsense.
        ("summary.ttft_ms", KeyError, "summary.ttft_ms: required, but not given"),
        ("summary.ttft_ms.p99", "slow", 'summary.ttft_ms.p99: expected a number, got "slow"'),
        ("summary.num_requests", 10**400, "summary.num_requests: Input should be less than"),
        ("summary.duration_ms", 10**400, "summary.duration_ms: expected a number, got 10000000"),
        ("config.cluster.mode", "sideways", "config: cluster.mode: Input should be"),
        ("requests.ttft_ms", [[1]] * 20, "requests.ttft_ms[0]: expected a number or null"),
        ("requests.status", [True] * 20, "requests.status[0]: expected a whole number"),
        ("requests.worker", KeyError, "requests.worker: required, but not given"),
        ("timeseries.queued.mean", [1.0], "timeseries.queued.mean: expected "),
        ("timeseries.time_ms", None, "timeseries.time_ms: expected a list of numbers"),
        ("summary.rejections_by_reason", {"bored": 1}, "summary.rejections_by_reason.bored: not"),
        ("provenance.trace", [1], "provenance.trace: expected a mapping"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None,
)
def test_a_damaged_report_names_what_is_wrong(tmp_path, capsys, where, value, message):
    pytest.importorskip("matplotlib")
    data = _damage(saved_report(tmp_path), where, value)
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(data))
    err = cli_error(["report", str(path), "-o", str(tmp_path / "r.html")], capsys)
    assert err.startswith(f"{path}: {message}"), err
    assert len(err) < 1000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[" * 100_000 + "]" * 100_000,
            "not a dynosim report (not JSON: not valid JSON here: nested too deeply)",
        ),
        ('{"a": ' + "1" * 5000 + "}", "not a dynosim report (not JSON: an integer of more than"),
        ('{"format": 1, "format": 2}', "not a dynosim report (not JSON: duplicate key 'format'"),
    ],
    ids=["deep", "digits", "duplicate key"],
)
def test_a_report_that_is_hostile_json_is_refused(tmp_path, text, message):
    from dynosim.errors import ReportError
    from dynosim.report import load_report

    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ReportError) as info:
        load_report(path)
    assert str(info.value).startswith(f"{path}: {message}")


def vllm_detailed(n: int = 4, **changes: object) -> dict:
    data = {
        "input_lens": [100] * n,
        "output_lens": [10] * n,
        "ttfts": [0.05] * n,
        "itls": [[0.01] * 9 for _ in range(n)],
        "errors": [""] * n,
        "start_times": [100.0 + i for i in range(n)],
    }
    return {**data, **changes}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"ttfts": [10**400, 0.05, 0.05, 0.05]}, "field 'ttfts[0]': expected a finite number"),
        ({"errors": None}, "field 'errors': expected a list, got null"),
        ({"itls": [[10**400]] * 4}, "field 'itls[0][0]': expected a finite number >= 0 (s)"),
        ({"start_times": None, "request_rate": 10**400}, "field 'request_rate': expected a rate"),
        (
            {"start_times": None, "request_rate": 1.0, "burstiness": 10**400},
            "field 'burstiness': expected a number > 0",
        ),
    ],
    ids=["huge ttft", "null errors", "huge itl", "huge rate", "huge burstiness"],
)
def test_a_measured_file_of_huge_numbers_or_nulls_is_refused(tmp_path, changes, message):
    from dynosim.errors import WorkloadError
    from dynosim.workload.measured import load_measured

    data = vllm_detailed(**changes)
    data = {k: v for k, v in data.items() if v is not None or k == "errors"}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    with pytest.raises(WorkloadError) as info:
        load_measured(path)
    assert str(info.value).startswith(f"{path}: {message}"), str(info.value)
    assert len(str(info.value)) < 300


def test_a_huge_aiperf_number_is_refused_naming_its_line(tmp_path):
    from dynosim.errors import WorkloadError
    from dynosim.workload.measured import load_measured

    record = {
        "metadata": {"benchmark_phase": "profiling", "request_start_ns": 1},
        "metrics": {
            "time_to_first_token": {"value": 10**400, "unit": "ms"},
            "request_latency": {"value": 20.0, "unit": "ms"},
            "input_sequence_length": {"value": 10, "unit": "tokens"},
            "output_sequence_length": {"value": 1, "unit": "tokens"},
        },
    }
    path = tmp_path / "profile_export.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(WorkloadError) as info:
        load_measured(path)
    assert str(info.value).startswith(
        f"{path}:1: field 'metrics.time_to_first_token.value': expected a finite number >= 0"
    )


def test_a_measured_file_through_a_pipe_is_read_once_and_told_by_content(tmp_path):
    import threading

    from dynosim.workload.measured import load_measured

    fifo = tmp_path / "run.fifo"
    os.mkfifo(fifo)
    text = json.dumps(vllm_detailed()).encode()

    def write() -> None:
        with open(fifo, "wb") as fh:
            fh.write(text)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    run = load_measured(fifo)  # no format given: told from what the pipe held
    writer.join(10)
    assert run.format == "vllm-bench" and len(run) == 4


def test_a_vllm_result_over_64_mib_on_one_line_is_read(tmp_path):
    from dynosim.workload.measured import load_measured

    # 4,000 requests of 2,000 streamed tokens: about 75 MB of one-line JSON, as vLLM writes.
    n, tokens = 4000, 2000
    data = vllm_detailed(n, output_lens=[tokens] * n, itls=[[0.012345678901234] * (tokens - 1)] * n)
    path = tmp_path / "detailed.json"
    path.write_text(json.dumps(data))
    assert path.stat().st_size > 64 << 20 and b"\n" not in path.read_bytes()
    run = load_measured(path)
    assert len(run) == n and run.itl_ms is not None and len(run.itl_ms) == n * (tokens - 1)


def test_an_aiperf_line_past_64_mib_is_refused(tmp_path):
    from dynosim.errors import WorkloadError
    from dynosim.workload.measured import load_measured

    path = tmp_path / "profile_export.jsonl"
    record = {"metadata": {}, "metrics": {}, "pad": "x" * (65 << 20)}
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(WorkloadError, match=r"profile_export\.jsonl:1: line longer than 64 MiB"):
        load_measured(path, format="aiperf")


# --- the JSON of a large replay is written a column slice at a time (item 7) ------------------


@pytest.mark.parametrize(
    "config",
    [
        {},
        {
            "cluster": {"mode": "disaggregated"},
            "offload": {"g2_blocks": 8},
            "kv_transfer": {"kv_bytes_per_token": 2, "bandwidth_gbps": 4.0},
        },
        {"engine": {"data_parallel_size": 2, "num_gpu_blocks": 8, "block_size": 16}},
    ],
    ids=["aggregated", "disaggregated with tiers", "dp, rejections"],
)
def test_the_streamed_json_is_the_canonical_json_byte_for_byte(tmp_path, config, monkeypatch):
    import dynosim
    from dynosim import report as report_module

    # Slices of 7 entries: every column crosses slice boundaries.
    monkeypatch.setattr(report_module, "_SLICE", 7)
    work = dynosim.SyntheticWorkload(isl=100, osl=5, count=50, rate=10.0)
    report = dynosim.replay(work, config, progress=False)
    # What to_json() was: the whole document through one json.dumps.
    canonical = json.dumps(report.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)
    assert report.to_json() == canonical
    assert "".join(report.json_chunks()) == canonical
    out = tmp_path / "r.json"
    argv = ["replay", "--no-progress", "--synthetic", "--isl", "100", "--osl", "5", "--count"]
    assert main([*argv, "50", "--rate", "10", "--json", str(out)]) == 0
    assert out.read_text() == dynosim.replay(work, {}, progress=False).to_json() + "\n"


@needs_aic
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--timing", "aic", "--ep", "0"], "timing.ep: must be between 1 and 1,024, got 0"),
        (["--timing", "aic", "--ep", "3"], "timing.ep: must divide the worker's tp x dp = 1 GPUs"),
        (
            ["--timing", "aic", "--ep", "100000000000"],
            "timing: invalid value: integer `100000000000`",
        ),
    ],
    ids=["zero", "not dividing", "past u32"],
)
def test_ep_is_range_checked_before_aic_is_asked(flags, message, capsys):
    # --ep 0 divided by zero inside the AIC layout (a ZeroDivisionError traceback).
    argv = ["replay", "--no-progress", "--model", "Qwen/Qwen3-30B-A3B", "--system", "h200_sxm"]
    assert cli_error([*argv, *flags], capsys).startswith(message)


def test_json_at_a_symlink_loop_is_an_error_naming_it(tmp_path, capsys):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    err = cli_error(["replay", *SYNTH, "--no-progress", "--json", str(tmp_path / "a")], capsys)
    assert err == f"{tmp_path / 'a'}: cannot write: Too many levels of symbolic links"


@pytest.mark.parametrize("flags", [["--html", "-"], ["--json", "r.json", "--html", "-"]])
def test_html_to_a_dash_is_refused_not_written_as_a_file(tmp_path, monkeypatch, capsys, flags):
    monkeypatch.chdir(tmp_path)
    err = cli_error(["replay", *SYNTH, "--no-progress", *flags], capsys)
    assert (
        err == "--html -: standard output takes only --json; give a file name (./- for one named -)"
    )
    assert list(tmp_path.iterdir()) == []


def test_math_notation_in_labels_is_drawn_as_written(tmp_path):
    pytest.importorskip("matplotlib")
    import dynosim
    from dynosim.views.pages import compare_page

    report = dynosim.replay(dynosim.SyntheticWorkload(isl=64, osl=4, count=20, rate=10.0))
    # "$\frac$" raised matplotlib's ParseSyntaxException.
    page = compare_page(report, report, ("$\\frac$ run", "cost $5 to $6"))
    assert "$\\frac$ run" in page and "cost $5 to $6" in page


@needs_aic
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tp", "1", "1"], "tp: 1 is given twice; give each value once"),
        (["--modes", "aggregated", "aggregated"], "modes: aggregated is given twice"),
        (["--max-batch-size", "8", "8"], "max_batch_size: 8 is given twice"),
    ],
)
def test_a_value_given_twice_to_plan_is_refused(tmp_path, capsys, flags, message):
    argv = ["plan", *SYNTH, "--model", "Qwen/Qwen3-32B", "--system", "h200_sxm"]
    argv += ["--sla-ttft-ms", "100", "--max-gpus", "4", "--no-progress", "-o", str(tmp_path)]
    assert cli_error([*argv, *flags], capsys).startswith(message)


def test_render_of_lengths_past_a_context_length_is_refused_before_aic(tmp_path, capsys):
    candidate = tmp_path / "candidate.yaml"
    candidate.write_text(
        "mode: aggregated\nmodel: Qwen/Qwen3-32B\nsystem: h200_sxm\nbackend: vllm\n"
        "backend_version: 0.24.0\nblock_size: 64\naggregated: {replicas: 1, max_batch_size: 8}\n"
    )
    # 2 x 4,294,967,295 tokens: AIC wrote --max-model-len 8589934590, no engine's.
    argv = ["render", "--candidate", str(candidate), "--isl", "4294967295", "--osl"]
    err = cli_error([*argv, "4294967295", "-o", str(tmp_path / "out")], capsys)
    assert err == (
        "workload: the longest request, prompt plus output, is the deployment's context "
        "length: expected 1 to 4,294,967,295 tokens, got 8589934590"
    )
    assert not (tmp_path / "out" / "k8s_deploy.yaml").exists()
