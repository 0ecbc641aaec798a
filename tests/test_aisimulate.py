"""The comparison with AISimulate (dynosim.compare.aisimulate): mapping settings to the
``dynosim-aisim`` binary's flags, refusing what AISimulate cannot model, building and running
the binary, and agreement with AISimulate itself on the conversation trace."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import TRACES, peer_config, ticking

import dynosim
from dynosim.bench import build_config
from dynosim.bench import main as bench_main
from dynosim.bench.offline_replay_bench import _parser
from dynosim.cli import EXIT_BAD_INPUT
from dynosim.compare import AISIMULATE_VERSION, AisimulateReplay, aisimulate_args, metric_rows
from dynosim.compare import aisimulate as aisim
from dynosim.compare import aisimulate_build as binary
from dynosim.config import DEFAULT_NUM_GPU_BLOCKS, EngineConfig, resolve
from dynosim.errors import ConfigError, DynosimError, MissingExtraError, WorkloadError

CONVERSATION = TRACES / "mooncake_conversation.jsonl"
#: The development release whose links are shared max-min fairly.
DEV = "0.13.0-dev.202611020000000092"


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    """The first 300 rows of the bundled Mooncake sample."""
    lines = dynosim.sample_trace_path().read_text().splitlines()[:300]
    path = tmp_path / "small.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def flags(args: list[str]) -> dict[str, str]:
    """The binary's flags as a dict (every flag takes one value)."""
    assert len(args) % 2 == 0
    return dict(zip(args[::2], args[1::2], strict=True))


# --- mapping dynosim settings to the binary's flags (no binary needed) -----------------------


def test_aggregated_settings_map_to_flags():
    config = peer_config(
        {
            "cluster": {"num_workers": 3, "arrival_speedup_ratio": 2.5, "concurrency": 16},
            "engine": {
                "block_size": 32,
                "num_gpu_blocks": 1000,
                "max_num_seqs": 64,
                "max_num_batched_tokens": 4096,
                "enable_chunked_prefill": False,
                "preemption_mode": "fifo",
                "tensor_parallel_size": 2,
            },
            "timing": {"model": "polynomial", "speedup_ratio": 2.0, "decode_speedup_ratio": 1.5},
        }
    )
    assert flags(aisimulate_args(config, 256)) == {
        "--trace-block-size": "256",
        "--arrival-speedup": "2.5",
        "--concurrency": "16",
        "--mode": "aggregated",
        "--workers": "3",
        "--backend": "vllm",
        "--block-size": "32",
        "--num-gpu-blocks": "1000",
        "--max-num-seqs": "64",
        "--max-num-batched-tokens": "4096",
        "--chunked-prefill": "false",
        "--preemption-mode": "fifo",
        "--tensor-parallel-size": "2",
        "--speedup-ratio": "2.0",
        "--decode-speedup-ratio": "1.5",
    }


def test_disaggregated_settings_map_to_role_flags():
    config = peer_config(
        {
            "cluster": {"mode": "disaggregated", "num_prefill_workers": 2, "num_decode_workers": 3},
            "decode": {"engine": {"block_size": 64, "num_gpu_blocks": 4096}},
            "kv_transfer": {
                "bandwidth_gbps": 64.0,
                "decode_bandwidth_gbps": 32.0,
                "link_model": "line_rate",
                "first_token": "first_decode_pass",
                "sizing": "destination_missing",
                "kv_shape": {
                    "num_layers": 64,
                    "num_kv_heads": 8,
                    "head_dim": 128,
                    "dtype_bytes": 2,
                },
            },
        }
    )
    got = flags(aisimulate_args(config, 512))
    assert (got["--mode"], got["--prefill-workers"], got["--decode-workers"]) == (
        "disaggregated",
        "2",
        "3",
    )
    assert "--workers" not in got and "--block-size" not in got  # every engine flag per role
    assert got["--kv-bytes-per-token"] == str(64 * 2 * 8 * 128 * 2)
    assert got["--kv-bandwidth-gbps"] == "32.0"  # line rate: the slower end
    assert got["--kv-sizing"] == "destination_missing"
    default = config.engine
    assert default.num_gpu_blocks is None  # unset: the core's default, without a model
    assert got["--prefill.num-gpu-blocks"] == str(DEFAULT_NUM_GPU_BLOCKS)
    assert got["--decode.num-gpu-blocks"] == "4096"
    for role in ("prefill", "decode"):
        assert got[f"--{role}.backend"] == "vllm"
        assert got[f"--{role}.max-num-seqs"] == str(default.max_num_seqs)


def test_instant_transfers_pass_no_transfer_flags():
    config = peer_config(
        {"cluster": {"mode": "disaggregated"}, "kv_transfer": {"first_token": "first_decode_pass"}}
    )
    got = flags(aisimulate_args(config, 512))
    assert not [f for f in got if f.startswith("--kv-")]


def _disagg(**kv: Any) -> dict:
    return {
        "cluster": {"mode": "disaggregated"},
        "kv_transfer": {"bandwidth_gbps": 8.0, "kv_bytes_per_token": 2, **kv},
    }


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"timing": {"model": "fixed", "prefill_ms": 1, "decode_ms": 1}},
            "timing.model: AISimulate's replay times passes with the polynomial model only, "
            "got 'fixed'",
        ),
        (
            {
                "cluster": {"mode": "disaggregated"},
                "decode": {"timing": {"model": "fixed", "prefill_ms": 1, "decode_ms": 1}},
                "kv_transfer": {"first_token": "first_decode_pass"},
            },
            "decode.timing.model: AISimulate's replay",
        ),
        (
            {"cluster": {"router": "kv_aware"}},
            "cluster.router: AISimulate's published replay places requests round robin only",
        ),
        (
            {"offload": {"g2_blocks": 64}, "kv_transfer": {"kv_bytes_per_token": 2}},
            "offload.g2_blocks: AISimulate 0.13.0's offload tiers are another model (FIFO "
            f"transfer lanes per rank, a latency to G3's first byte); compare without offload "
            f"tiers, or with --aisimulate-version {DEV}, got 64",
        ),
        (
            {"engine": {"data_parallel_size": 2}},
            "engine.data_parallel_size: AISimulate spreads requests round robin over every "
            "data-parallel rank",
        ),
        (
            _disagg(first_token="first_decode_pass"),
            "kv_transfer.link_model: AISimulate 0.13.0 moves every transfer at full bandwidth; "
            "compare with link_model 'line_rate', got 'max_min'",
        ),
        (
            _disagg(link_model="line_rate"),
            "kv_transfer.first_token: AISimulate 0.13.0 counts a first token after the decode "
            "worker's first pass",
        ),
        (
            _disagg(
                link_model="line_rate", first_token="first_decode_pass", kv_bytes_per_token=2.5
            ),
            "kv_transfer.kv_bytes_per_token: AISimulate 0.13.0 takes a whole number of bytes, "
            "got 2.5",
        ),
    ],
)
def test_settings_aisimulate_cannot_model_are_refused(config, message):
    with pytest.raises(ConfigError) as info:
        aisimulate_args(peer_config(config), 512)
    assert message in str(info.value)


class _NewerEngine(EngineConfig):
    """An engine section with a setting the mapping does not know (as a later dynosim may add)."""

    capacity_policy: str = "no_evict"


def test_an_engine_setting_the_mapping_does_not_know_is_refused_unless_default():
    role = resolve(peer_config()).roles["aggregated"]
    base = role.engine.model_dump()
    at_default = dataclasses.replace(role, engine=_NewerEngine(**base))
    assert "--block-size" in aisim._engine_flags(at_default, "")
    newer = dataclasses.replace(role, engine=_NewerEngine(**base, capacity_policy="max_util"))
    with pytest.raises(ConfigError, match=r"engine\.capacity_policy: the comparison with"):
        aisim._engine_flags(newer, "")


def test_csv_traces_are_refused(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,8,2\n")
    with pytest.raises(WorkloadError, match="AISimulate's replay reads Mooncake JSONL traces only"):
        AisimulateReplay(trace, peer_config(), 512)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--compare-timeout", "5"], "--compare-timeout: only with --compare aisimulate"),
        (["--compare", "aisimulate", "--compare-timeout", "0"], "--compare-timeout must be pos"),
        (
            ["--serving-mode", "disagg", "--link-model", "max_min", "--compare", "aisimulate"],
            "--link-model max_min: AISimulate 0.13.0 moves every transfer at full bandwidth; "
            "--compare aisimulate needs --link-model line_rate",
        ),
        (
            "--serving-mode disagg --link-model line_rate --compare aisimulate "
            f"--aisimulate-version {DEV}".split(),
            f"--link-model line_rate: AISimulate {DEV} shares each prefill rank's send link and "
            "each decode rank's receive link max-min fairly; --compare aisimulate needs "
            "--link-model max_min",
        ),
        (["--aisimulate-version", DEV], "--aisimulate-version: only with --compare aisimulate"),
        (
            ["--compare", "aisimulate", "--aisimulate-version", "0.12.0"],
            "--aisimulate-version: invalid choice: '0.12.0'",
        ),
    ],
)
def test_conflicting_compare_flags_exit_2(small_trace, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench_main([str(small_trace), *argv])
    assert exit_info.value.code == EXIT_BAD_INPUT
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("version", "links"), [(None, "line_rate"), (DEV, "max_min")])
def test_compare_defaults_to_the_releases_links_and_first_decode_pass(version, links):
    parser = _parser()
    argv = ["t.jsonl", "--serving-mode", "disagg", "--kv-transfer-bandwidth", "5"]
    argv += ["--kv-bytes-per-token", "262144", "--compare", "aisimulate"]
    if version is not None:
        argv += ["--aisimulate-version", version]
    kv = build_config(parser.parse_args(argv), parser).kv_transfer
    assert (kv.link_model, kv.first_token) == (links, "first_decode_pass")


def test_the_development_release_shares_links_with_each_end_its_bandwidth():
    config = peer_config(
        _disagg(
            link_model="max_min",
            first_token="first_decode_pass",
            decode_bandwidth_gbps=2.0,
        )
    )
    got = flags(aisimulate_args(config, 512, DEV))
    assert (got["--kv-bandwidth-gbps"], got["--kv-recv-bandwidth-gbps"]) == ("8.0", "2.0")
    # 0.13.0 delays each transfer at the slower end's bandwidth.
    line_rate = config.model_copy(
        update={"kv_transfer": config.kv_transfer.model_copy(update={"link_model": "line_rate"})}
    )
    got = flags(aisimulate_args(line_rate, 512))
    assert got["--kv-bandwidth-gbps"] == "2.0" and "--kv-recv-bandwidth-gbps" not in got


def _tiers(**offload: Any) -> dict:
    return {
        "cluster": {"num_workers": 4},
        "kv_transfer": {"kv_bytes_per_token": 262_144},
        "offload": {"g2_blocks": 4096, "g3_duplex": "full", "in_flight": "wait", **offload},
    }


def test_offload_tiers_map_to_the_development_releases_host_and_g3_tiers():
    config = peer_config(
        _tiers(g3_blocks=65_536, g3_shared=True, g1_g2_read_gbps=12.0, g2_g3_write_gbps=5.0)
    )
    got = flags(aisimulate_args(config, 512, DEV))
    assert {
        k: v for k, v in got.items() if k not in flags(aisimulate_args(_plain(config), 512, DEV))
    } == {
        "--kv-cache-bytes-per-token": "262144",
        "--host-blocks": "4096",
        "--h2d-gbps": "12.0",  # G2 -> G1: onboards
        "--d2h-gbps": "14.0",  # G1 -> G2: offloads, g1_g2_gbps
        "--g3-blocks": "65536",
        "--g3-scope": "cluster_shared",
        # The pool link's capacities; no cap per worker, as dynosim has none.
        "--g3-read-gbps": "0",
        "--g3-write-gbps": "0",
        "--g3-shared-read-gbps": "7.0",
        "--g3-shared-write-gbps": "5.0",
    }
    own = flags(aisimulate_args(peer_config(_tiers(g3_blocks=1024)), 512, DEV))
    assert (own["--g3-scope"], own["--g3-read-gbps"], own["--g3-write-gbps"]) == (
        "worker_local",
        "7.0",
        "7.0",
    )


def _plain(config: dynosim.SimConfig) -> dynosim.SimConfig:
    return config.model_copy(update={"offload": dynosim.SimConfig().offload})


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {**_tiers(g3_blocks=1024), "cluster": {"mode": "disaggregated"}},
            f"offload.g3_blocks: AISimulate {DEV} models G3 offload for aggregated workers only",
        ),
        (
            _tiers(g3_blocks=1024, g3_duplex="half"),
            f"offload.g3_duplex: AISimulate {DEV}'s G3 reads and writes have a capacity each",
        ),
        (_tiers(writes="free"), f"offload.writes: AISimulate {DEV} models 'flows' only"),
        (_tiers(in_flight="recompute"), f"offload.in_flight: AISimulate {DEV} models 'wait' only"),
    ],
)
def test_tiers_the_development_release_cannot_model_are_refused(config, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        aisimulate_args(peer_config(config), 512, DEV)


def test_an_unknown_release_is_refused_naming_the_known_ones():
    with pytest.raises(
        ConfigError,
        match=r"aisimulate version '0\.12\.0': the comparison builds on "
        r"aisimulate-core 0\.13\.0, 0\.13\.0-dev",
    ):
        aisimulate_args(dynosim.SimConfig(), 512, "0.12.0")


# --- finding, building and running the binary (no real build) --------------------------------


@pytest.fixture
def no_built_binary(monkeypatch, tmp_path):
    """Forget the binaries found in this process and any $DYNOSIM_AISIM_BIN; an empty cache."""
    monkeypatch.delenv(binary.BINARY_ENV, raising=False)
    monkeypatch.delenv("CARGO_TARGET_DIR", raising=False)
    monkeypatch.setenv("DYNOSIM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(binary, "_built", {})


def test_missing_cargo_names_the_install(no_built_binary, monkeypatch, small_trace, capsys):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(MissingExtraError, match=r"builds its replay \(dynosim-aisim\) with cargo"):
        binary.aisimulate_binary()
    assert bench_main([str(small_trace), "--compare", "aisimulate"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"install a Rust toolchain >= 1.88 with `{binary.INSTALL_RUST}`" in err


def test_an_installation_without_the_sources_says_so(no_built_binary, monkeypatch, tmp_path):
    monkeypatch.setattr(binary, "HARNESS", tmp_path / "nothing")
    with pytest.raises(MissingExtraError, match=r"lacks AISimulate's replay sources"):
        binary.aisimulate_binary()


CRATE_DIR = Path(__file__).resolve().parents[1] / "rust" / "dynosim-aisim"


def crate_files() -> dict[str, bytes]:
    """rust/dynosim-aisim's files (a build's target directory left out), by path."""
    return {
        p.relative_to(CRATE_DIR).as_posix(): p.read_bytes()
        for p in CRATE_DIR.rglob("*")
        if p.is_file() and "target" not in p.relative_to(CRATE_DIR).parts
    }


def test_the_packaged_sources_are_the_crate():
    """The package data dynosim builds from is rust/dynosim-aisim, file for file (in a source
    checkout, links to it; the wheel test checks the wheel's copies)."""
    packaged = {
        p.relative_to(binary.HARNESS).as_posix(): p.read_bytes()
        for p in binary.HARNESS.rglob("*")
        if p.is_file()
    }
    assert packaged == crate_files()


def _pinned(lock: bytes) -> dict[str, str]:
    tomllib = pytest.importorskip("tomllib")
    return {p["name"]: p["version"] for p in tomllib.loads(lock.decode())["package"]}


def test_each_release_has_a_lock_file_pinning_it_and_the_same_dependencies():
    stable = _pinned(binary.harness_sources(AISIMULATE_VERSION)["Cargo.lock"])
    assert stable["aisimulate-core"] == AISIMULATE_VERSION
    locks = {p.name for p in binary.HARNESS.glob("Cargo*.lock")}
    assert locks == {binary.lock_file(v) for v in aisim.RELEASES}
    for version in aisim.RELEASES:
        pinned = _pinned(binary.harness_sources(version)["Cargo.lock"])
        assert pinned["aisimulate-core"] == version
        # Each release resolves its dependencies as the stable one does, adding only its own.
        assert {k: v for k, v in pinned.items() if k in stable and k != "aisimulate-core"} == {
            k: v for k, v in stable.items() if k != "aisimulate-core"
        }


def fake_cargo(tmp_path: Path) -> Path:
    """A directory holding a ``cargo`` that logs its calls and "builds" a binary printing the
    crate's main.rs digest, in $CARGO_TARGET_DIR, with cargo's JSON message for it."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    cargo = bin_dir / "cargo"
    cargo.write_text(
        f"""#!{sys.executable}
import hashlib, json, os, sys
from pathlib import Path
with open(os.environ["FAKE_CARGO_LOG"], "a") as log:
    log.write(json.dumps([sys.argv[1:], os.getcwd(), os.environ["CARGO_TARGET_DIR"]]) + "\\n")
out = Path(os.environ["CARGO_TARGET_DIR"]) / "release" / "dynosim-aisim"
out.parent.mkdir(parents=True, exist_ok=True)
digest = hashlib.sha256(Path("src/main.rs").read_bytes()).hexdigest()
out.write_text("#!/bin/sh\\necho " + digest + "\\n")
out.chmod(0o755)
target = {{"name": "dynosim-aisim"}}
print(json.dumps({{"reason": "compiler-artifact", "target": target, "executable": str(out)}}))
"""
    )
    cargo.chmod(0o755)
    return bin_dir


def test_the_binary_is_built_once_in_the_cache_and_again_when_the_sources_change(
    no_built_binary, monkeypatch, tmp_path
):
    log = tmp_path / "cargo.log"
    monkeypatch.setenv("FAKE_CARGO_LOG", str(log))
    monkeypatch.setenv("PATH", str(fake_cargo(tmp_path)))
    harness = tmp_path / "harness"
    shutil.copytree(binary.HARNESS, harness)
    monkeypatch.setattr(binary, "HARNESS", harness)
    lines: list[str] = []

    def build() -> Path:
        binary._built.clear()  # a new process
        return binary.aisimulate_binary(DEV, announce=lines.append)

    path = build()
    folder = tmp_path / "cache" / "aisimulate" / DEV
    assert path == folder / "dynosim-aisim"
    ((argv, cwd, target),) = (json.loads(line) for line in log.read_text().splitlines())
    assert argv[:3] == ["build", "--release", "--locked"]
    assert (cwd, target) == (str(folder / "crate"), str(tmp_path / "cache/aisimulate/target"))
    # The tree built is the release's: its lock file as Cargo.lock.
    assert (folder / "crate/Cargo.lock").read_bytes() == (
        harness / binary.lock_file(DEV)
    ).read_bytes()
    assert lines[0].startswith(
        f"building AISimulate's replay on aisimulate-core {DEV}: cargo build"
    )
    assert lines[1].startswith(f"built {path} in ") and lines[1].endswith(" s")
    first = subprocess.run([path], capture_output=True, text=True).stdout
    assert build() == path and len(log.read_text().splitlines()) == 1  # reused
    (harness / "src/main.rs").write_text("// changed\n" + (harness / "src/main.rs").read_text())
    assert build() == path and len(log.read_text().splitlines()) == 2  # rebuilt
    assert subprocess.run([path], capture_output=True, text=True).stdout != first
    # A target directory given is used (builds may share compiled dependencies).
    monkeypatch.setenv("CARGO_TARGET_DIR", str(tmp_path / "shared"))
    binary._built.clear()
    binary.aisimulate_binary(AISIMULATE_VERSION)
    assert json.loads(log.read_text().splitlines()[-1])[2] == str(tmp_path / "shared")


def test_a_given_binary_must_be_executable(monkeypatch, tmp_path):
    monkeypatch.setenv(binary.BINARY_ENV, str(tmp_path / "nope"))
    with pytest.raises(MissingExtraError, match=r"\$DYNOSIM_AISIM_BIN: .*nope is not an exec"):
        binary.aisimulate_binary()


def fake_binary(monkeypatch, tmp_path: Path, body: str) -> None:
    """$DYNOSIM_AISIM_BIN set to a shell script with ``body``."""
    script = tmp_path / "fake-aisim"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setenv(binary.BINARY_ENV, str(script))


def test_a_run_past_its_timeout_is_stopped(monkeypatch, tmp_path, small_trace):
    fake_binary(monkeypatch, tmp_path, "sleep 30")
    replay = AisimulateReplay(small_trace, peer_config(), 512, timeout_s=0.3)
    start = time.perf_counter()
    with pytest.raises(DynosimError, match=r"did not finish within 0.3 s and was stopped"):
        replay.run()
    assert time.perf_counter() - start < 10


def test_a_failed_run_raises_its_message(monkeypatch, tmp_path, small_trace):
    fake_binary(monkeypatch, tmp_path, 'echo "replay invariant violated" >&2; exit 1')
    with pytest.raises(DynosimError, match="exited with status 1: replay invariant violated"):
        AisimulateReplay(small_trace, peer_config(), 512).run()
    fake_binary(monkeypatch, tmp_path, "echo not json")
    with pytest.raises(DynosimError, match="dynosim-aisim printed no summary"):
        AisimulateReplay(small_trace, peer_config(), 512).run()


def test_a_binary_built_on_another_release_is_refused(monkeypatch, tmp_path, small_trace):
    out = {"summary": {}, "wall": {"replay_ms": 1, "trace_load_ms": 1}, "version": "0.12.0"}
    fake_binary(monkeypatch, tmp_path, f"echo '{json.dumps(out)}'")
    with pytest.raises(DynosimError, match=r"fake-aisim is built on aisimulate-core 0\.12\.0, "):
        AisimulateReplay(small_trace, peer_config(), 512).run()


def test_a_timeout_kills_the_programs_children_too(tmp_path):
    pid_file = tmp_path / "pid"
    argv = ["/bin/sh", "-c", f"sleep 30 & echo $! > {pid_file}; wait"]
    with pytest.raises(subprocess.TimeoutExpired):
        binary.run_program(argv, 0.5)
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        # A killed orphan can linger as a zombie until its new parent reaps it.
        if Path(f"/proc/{child}/stat").read_text().split(") ")[1].startswith("Z"):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the timed-out program's child {child} still runs")


def test_run_program_measures_the_child():
    done = binary.run_program([sys.executable, "-c", "print(sum(range(3_000_000)))"], 60)
    assert done.returncode == 0
    assert done.stdout.strip() == str(sum(range(3_000_000)))
    assert done.wall_ms > 0 and done.cpu_ms > 0


# --- against AISimulate itself (builds rust/dynosim-aisim with cargo) ------------------------

HAVE_BINARY = bool(os.environ.get(binary.BINARY_ENV)) or shutil.which("cargo") is not None
needs_aisimulate = pytest.mark.skipif(
    not HAVE_BINARY,
    reason="cargo is not on PATH: comparing with AISimulate builds rust/dynosim-aisim with it",
)


@pytest.fixture(scope="module")
def aisim_bin(progress) -> Path:
    """The built binary (a clean build takes about 10 minutes on 2 cores; CI builds it first)."""
    with ticking(progress, "building AISimulate's replay"):
        return binary.aisimulate_binary(announce=progress)


@needs_aisimulate
def test_binary_takes_help_and_its_crate_admits_every_release(aisim_bin):
    tomllib = pytest.importorskip("tomllib")
    manifest = tomllib.loads(binary.harness_sources(AISIMULATE_VERSION)["Cargo.toml"].decode())
    # Each release's lock file pins it exactly; the manifest's range admits them all.
    assert manifest["dependencies"]["aisimulate-core"] == f">={DEV}, <={AISIMULATE_VERSION}"
    assert manifest["package"]["rust-version"] == "1.88"
    help_run = subprocess.run([aisim_bin, "--help"], capture_output=True, text=True)
    assert help_run.returncode == 0 and "usage: dynosim-aisim TRACE" in help_run.stdout


@needs_aisimulate
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--backend", "tgi"], "--backend: unknown variant `tgi`"),
        (["--workers", "two"], '--workers: invalid value "two"'),
        (["--decode.block-size", "16"], "--decode.block-size: only with --mode disaggregated"),
        (["--prefill.workers", "2", "--mode", "disaggregated"], "workers is no engine flag"),
    ],
)
def test_binary_bad_flags_exit_2_naming_the_flag(aisim_bin, small_trace, argv, message):
    done = subprocess.run([aisim_bin, small_trace, *argv], capture_output=True, text=True)
    assert done.returncode == 2
    assert message in done.stderr


@needs_aisimulate
def test_binary_failure_names_the_trace(aisim_bin, tmp_path):
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 2}\n')
    done = subprocess.run([aisim_bin, trace], capture_output=True, text=True)
    assert done.returncode == 1
    assert f"{trace}: AISimulate's replay failed" in done.stderr
    assert "missing hash_ids" in done.stderr


@needs_aisimulate
def test_binary_summary_is_deterministic(aisim_bin, small_trace, tmp_path):
    config = peer_config({"cluster": {"num_workers": 2}})
    command = [aisim_bin, small_trace, *aisimulate_args(config, 512)]
    first, second = (
        json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
        for _ in range(2)
    )
    # Only what measures this machine's speed differs: wall time and processed tokens per s.
    differing = {k for k in first["summary"] if first["summary"][k] != second["summary"][k]}
    assert differing <= {
        "wall_time_ms",
        "processed_tokens_per_s",
        "processed_output_tokens_per_s",
    }
    assert first["summary"]["mean_ttft_ms"] > 0
    assert first["requests"] == {
        "arrived": 300,
        "completed": 300,
        "rejected": 0,
        "canceled": 0,
        "failed": 0,
    }
    assert first["version"] == AISIMULATE_VERSION
    assert first["engine"]["rank"]["timing_model"] == {"type": "polynomial"}
    assert first["peak_rss_mib"] > 1


@needs_aisimulate
def test_compare_prints_the_side_by_side_table(aisim_bin, small_trace, tmp_path, capsys):
    timings = tmp_path / "t.jsonl"
    argv = [str(small_trace), "--compare", "aisimulate", "--timings-jsonl", str(timings)]
    assert bench_main([*argv, "--iterations", "2"]) == 0
    out = capsys.readouterr().out
    assert f"dynosim vs AISimulate (aisimulate-core {AISIMULATE_VERSION}) replay" in out
    assert "AISimulate 2" in out
    for label in ("wall: trace load + replay (ms)", "TTFT mean (ms)", "prefix reuse ratio"):
        assert label in out
    rows = [json.loads(line) for line in timings.read_text().splitlines()]
    assert [r["simulator"] for r in rows] == ["dynosim", "dynosim", "aisimulate", "aisimulate"]
    for r in rows[2:]:
        assert r["wall_ms"] > r["replay_ms"] > 0 and r["trace_load_ms"] > 0


@needs_aisimulate
def test_a_zero_delay_turn_joins_the_pass_starting_as_its_previous_turn_ends(aisim_bin, tmp_path):
    """Session a keeps the worker busy decoding; session b's second turn is sent when its first
    ends, plus the delay. With a delay of 0 the turn arrives at the instant a pass starts:
    AISimulate admits it into that pass, dynosim into the next (one decode pass later, 5.8 ms
    here). With any positive delay the two agree exactly."""
    rows = [
        {"timestamp": 0, "input_length": 512, "output_length": 400, "hash_ids": [1]},
        {"timestamp": 0, "input_length": 512, "output_length": 10, "hash_ids": [2]},
        {"timestamp": 0, "input_length": 512, "output_length": 10, "hash_ids": [3]},
    ]
    for row, session in zip(rows, ("a", "b", "b"), strict=True):
        row["session_id"] = session
    ttft = {}
    for delay in (0.0, 0.5):
        rows[2]["delay_ms"] = delay
        trace = tmp_path / f"delay{delay}.jsonl"
        trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
        config = peer_config({"cluster": {"num_workers": 1}})
        ours = dynosim.replay(dynosim.load_trace(trace), config).requests["ttft_ms"][2]
        per_request = tmp_path / "per_request.jsonl"
        command = [aisim_bin, trace, *aisimulate_args(config, 512), "--per-request", per_request]
        subprocess.run(command, capture_output=True, check=True)
        records = [json.loads(line) for line in per_request.read_text().splitlines()]
        (theirs,) = [r["ttft_ms"] for r in records if r["session_id"] == "b" and r["turn_index"]]
        ttft[delay] = (ours, theirs)
    assert ttft[0.5][0] == pytest.approx(ttft[0.5][1], abs=1e-6)
    ours, theirs = ttft[0.0]
    assert ours - theirs == pytest.approx(5.77, abs=0.05)  # one decode pass of one request


ROOT = Path(__file__).resolve().parents[1]


def _mean_differences(table: str) -> dict[str, float]:
    """The relative differences (%) of the side-by-side table's mean rows, by label."""
    out = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 2 and cells[1].endswith("mean (ms)") and cells[-2].endswith(" %"):
            out[cells[1]] = float(cells[-2].removesuffix(" %"))
    return out


@needs_aisimulate
def test_a_wheel_installed_outside_the_checkout_builds_and_compares(aisim_bin, tmp_path):
    """The wheel carries the crate's sources; installed in a fresh venv outside the checkout,
    ``offline_replay_bench SAMPLE --compare aisimulate`` builds them into its cache (sharing
    this process's target directory, where the checkout's build compiled AISimulate) and prints
    the side-by-side table. Builds the wheel (the extension in release) and installs its
    dependencies from the package index."""
    if not (ROOT / "pyproject.toml").is_file():
        pytest.skip("not a source checkout: no wheel to build")
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", wheels, ROOT], check=True, timeout=1800)
    (wheel,) = wheels.glob("dynosim-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        prefix = "dynosim/compare/aisimulate_harness/"
        shipped = {n[len(prefix) :]: zf.read(n) for n in zf.namelist() if n.startswith(prefix)}
    assert shipped == crate_files()

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    python = venv / "bin" / "python"
    subprocess.run([python, *pip[1:], "install", wheel], check=True, timeout=1800)
    run = tmp_path / "run"
    run.mkdir()
    where = subprocess.run(
        [python, "-c", "import dynosim; print(dynosim.__file__, dynosim.sample_trace_path())"],
        cwd=run,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert Path(where[0]).is_relative_to(venv)  # the wheel's dynosim, not the checkout's
    shutil.copy(where[1], run / "mooncake_conversation_sample.jsonl")
    env = {k: v for k, v in os.environ.items() if k != binary.BINARY_ENV}
    env |= {
        "DYNOSIM_CACHE_DIR": str(tmp_path / "cache"),
        "CARGO_TARGET_DIR": str(binary.target_dir()),
    }
    bench = venv / "bin" / "offline_replay_bench"
    done = subprocess.run(
        [bench, "mooncake_conversation_sample.jsonl", "--compare", "aisimulate"],
        cwd=run,
        env=env,
        capture_output=True,
        text=True,
        timeout=binary.BUILD_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    assert f"building AISimulate's replay on aisimulate-core {AISIMULATE_VERSION}" in done.stderr
    assert (tmp_path / "cache" / "aisimulate" / AISIMULATE_VERSION / "dynosim-aisim").is_file()
    means = _mean_differences(done.stdout)
    assert set(means) >= {"TTFT mean (ms)", "TPOT mean (ms)", "E2E mean (ms)"}, done.stdout
    assert all(abs(d) <= 0.5 for d in means.values()), means


#: The conversation trace through both simulators (block 64, trace block 512, polynomial
#: timing, round robin, arrival speedup 1). Disaggregation: 2 prefill + 2 decode workers,
#: 262,144 KV bytes per token (64 layers x 8 KV heads x 128 x bf16: the conversation trace
#: then offers about 10.7 GB/s of KV), line-rate links, first token after the first decode pass.
def disaggregated(gbps: float, link_model: str = "line_rate") -> dict:
    return {
        "cluster": {"mode": "disaggregated", "num_prefill_workers": 2, "num_decode_workers": 2},
        "engine": {"block_size": 64},
        "kv_transfer": {
            "bandwidth_gbps": gbps,
            "kv_bytes_per_token": 262_144,
            "link_model": link_model,
            "first_token": "first_decode_pass",
        },
    }


RUNS = {
    "aggregated vLLM": {"cluster": {"num_workers": 4}, "engine": {"block_size": 64}},
    # AISimulate's TensorRT-LLM engine chunks contexts (TensorRT-LLM's default is not to).
    "aggregated TRT-LLM": {
        "cluster": {"num_workers": 4},
        "engine": {"backend": "trtllm", "enable_chunked_context": True},
    },
    "disaggregated 25 GB/s": disaggregated(25.0),
    "disaggregated 5 GB/s": disaggregated(5.0),
}


@pytest.fixture(scope="module")
def conversation() -> Any:
    if not CONVERSATION.exists():
        pytest.skip(f"{CONVERSATION} is not available")
    return dynosim.load_trace(CONVERSATION)


@pytest.fixture(scope="module")
def head_to_head(aisim_bin, conversation):
    """Each run through both simulators, once: (dynosim report, AISimulate's summary)."""
    cache: dict[str, tuple[Any, dict]] = {}

    def get(run: str) -> tuple[Any, dict]:
        if run not in cache:
            config = peer_config(RUNS[run])
            report = dynosim.replay(conversation, config)
            cache[run] = (report, AisimulateReplay(CONVERSATION, config, 512).run().summary)
        return cache[run]

    return get


@needs_aisimulate
@pytest.mark.parametrize("run", RUNS)
def test_mean_latency_within_half_a_percent_of_aisimulate(head_to_head, run):
    report, theirs = head_to_head(run)
    assert report.completed_requests == theirs["completed_requests"] == 12_031
    rows = {row[0]: row for row in metric_rows(report, theirs)}
    for label in ("TTFT mean (ms)", "TPOT mean (ms)", "E2E mean (ms)"):
        _, ours, their_value, rel = rows[label]
        assert abs(rel) <= 0.005, f"{run} {label}: dynosim {ours:.3f}, AISimulate {their_value:.3f}"


@needs_aisimulate
def test_at_5_gbps_shared_links_queue_where_aisimulate_does_not(head_to_head, conversation):
    """The offered KV traffic (about 10.7 GB/s) exceeds the two prefill send links' 10 GB/s:
    links shared max-min fairly queue transfers for the whole trace, while AISimulate's
    fixed-delay transfers (dynosim's line rate) never wait for a link."""
    _, theirs = head_to_head("disaggregated 5 GB/s")
    shared = dynosim.replay(conversation, peer_config(disaggregated(5.0, "max_min")))
    ttft = shared.requests["ttft_ms"]
    assert shared.summary["ttft_ms"]["mean"] > 50 * theirs["mean_ttft_ms"]
    # The queue grows through the trace: the last thousand requests wait far longer.
    assert ttft[-1000:].mean() > 5 * ttft[:1000].mean()


# --- against AISimulate's development release: links shared max-min fairly ------------------


@pytest.fixture(scope="module")
def dev_bin(progress) -> Path:
    """The binary built on the development release (built here whatever $DYNOSIM_AISIM_BIN
    says: that names one release's binary)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(binary.BINARY_ENV, raising=False)
        with ticking(progress, "building AISimulate's development replay"):
            return binary.aisimulate_binary(DEV, announce=progress)


def run_dev(dev_bin: Path, trace: Path, config: dynosim.SimConfig, tmp_path: Path) -> tuple:
    """AISimulate's development release on ``trace``: its output and per-request records, in
    trace order."""
    records = tmp_path / "per_request.jsonl"
    command = [dev_bin, trace, *aisimulate_args(config, 512, DEV), "--per-request", records]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    rows.sort(key=lambda r: int(r["uuid"].replace("-", ""), 16))  # numbered in trace order
    return json.loads(done.stdout), rows


def _links_case(tmp_path: Path, lengths: list[int], prefill: int, send: float, recv: float):
    rows = [
        {
            "timestamp": 0,
            "input_length": n,
            "output_length": 4,
            "hash_ids": [10 * i + b for b in range(n // 512)],
        }
        for i, n in enumerate(lengths)
    ]
    trace = tmp_path / "links.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = peer_config(
        {
            "cluster": {
                "mode": "disaggregated",
                "num_prefill_workers": prefill,
                "num_decode_workers": 1,
            },
            "engine": {"block_size": 64},
            "kv_transfer": {
                "bandwidth_gbps": send,
                "decode_bandwidth_gbps": recv,
                "kv_bytes_per_token": 262_144,
                "link_model": "max_min",
                "first_token": "first_decode_pass",
            },
        }
    )
    return trace, config


@needs_aisimulate
def test_dev_links_share_as_a_hand_computed_case(dev_bin, tmp_path):
    """Two transfers of 2048 and 3072 prompt tokens x 262,144 B (536,870,912 and 805,306,368
    B) from two prefill workers into one decode worker: send links 10 GB/s, the receive link
    5 GB/s (5e6 B/ms), the bottleneck. The short prompt's prefill ends first (t0) and its
    transfer runs alone at 5e6 B/ms until the long one's starts (t1); then the receive link
    is split 2.5e6 B/ms each until the first lands, and the second finishes alone at 5e6 B/ms.
    With t0 = 49.3629 and t1 = 67.118 ms (the polynomial prefill times): the first lands at
    t1 + (536,870,912 - 5e6 x 17.7551) / 2.5e6 = 246.356 ms, the second at 246.356 +
    (805,306,368 - 2.5e6 x 179.238) / 5e6 = 317.798 ms. A second case: one prefill worker's
    send link (5 GB/s) carries 1024- and 3072-token transfers started together: 2.5e6 B/ms
    each, the first lands after 268,435,456 / 2.5e6 = 107.374 ms, the second 107.374 ms
    later."""
    for lengths, prefill, send, recv in (([2048, 3072], 2, 10.0, 5.0), ([1024, 3072], 1, 5.0, 5.0)):
        trace, config = _links_case(tmp_path, lengths, prefill, send, recv)
        ours = dynosim.replay(dynosim.load_trace(trace), config).requests
        _, theirs = run_dev(dev_bin, trace, config, tmp_path)
        (t0, t1) = ours["transfer_start_ms"]
        assert [r["destination_reserved_ms"] for r in theirs] == pytest.approx([t0, t1], abs=1e-6)
        a, b = (n * 262_144 for n in lengths)
        fast = min(send, recv) * 1e6  # B/ms of a lone transfer
        a_left = a - fast * (t1 - t0)
        first = t1 + a_left / (fast / 2)
        second = first + (b - (fast / 2) * (first - t1)) / fast
        expected = [first, second]
        assert list(ours["transfer_end_ms"]) == pytest.approx(expected, rel=1e-9)
        # AISimulate activates a transfer when it lands (its decode worker is idle here); its
        # records round times to the ns.
        landed = [r["destination_activated_ms"] for r in theirs]
        assert landed == pytest.approx(expected, abs=1e-5)
        assert [r["ttft_ms"] for r in theirs] == pytest.approx(list(ours["ttft_ms"]), abs=1e-5)


@pytest.fixture(scope="module")
def dev_head_to_head(dev_bin, conversation, tmp_path_factory):
    """Each run through dynosim and the development release, once: (dynosim report, its
    output, its per-request records)."""
    cache: dict[str, tuple[Any, dict, list]] = {}

    def get(run: str, config: dict) -> tuple[Any, dict, list]:
        if run not in cache:
            loaded = peer_config(config)
            report = dynosim.replay(conversation, loaded)
            out, rows = run_dev(dev_bin, CONVERSATION, loaded, tmp_path_factory.mktemp(run))
            cache[run] = (report, out, rows)
        return cache[run]

    return get


def _means(report: Any, summary: dict) -> dict[str, float]:
    rows = {row[0]: row for row in metric_rows(report, summary)}
    return {
        label: rows[label][3] for label in ("TTFT mean (ms)", "TPOT mean (ms)", "E2E mean (ms)")
    }


@needs_aisimulate
def test_dev_max_min_means_at_25_gbps_within_1_percent(dev_head_to_head):
    report, out, _ = dev_head_to_head("25", disaggregated(25.0, "max_min"))
    assert report.completed_requests == out["requests"]["completed"] == 12_031
    means = _means(report, out["summary"])
    assert all(abs(rel) <= 0.01 for rel in means.values()), means


@needs_aisimulate
def test_at_5_gbps_the_development_release_holds_preempted_decodes_behind_handoffs(
    dev_head_to_head,
):
    """At 5 GB/s the send links are oversubscribed, transfers queue for minutes and hold
    their decode blocks while they move, so decode ranks run out of KV and preempt. AISimulate
    retries pending handoff reservations whenever blocks free up, before its waiting queue, so
    a preempted decode request (which needs room for its whole context) waits until the
    handoffs stop, near the trace's end; dynosim readmits it at its next pass (vLLM's waiting
    queue, preempted requests at its front). Mean TPOT then differs tenfold. With KV enough
    that nothing is preempted, TPOT agrees, and TTFT within a few percent: simultaneous
    prefill completions reach the round-robin decode placement in another order when the two
    prefill pass times differ by a few hundredths of a ms, and the links then pair other
    transfers."""
    report, out, rows = dev_head_to_head("5", disaggregated(5.0, "max_min"))
    last_arrival = max(r["arrival_time_ms"] for r in rows)
    readmitted = [
        h["at_ms"]
        for r in rows
        for h in r["admission_history"]
        if h["pool"] == "decode" and h["is_readmission"]
    ]
    assert len(readmitted) > 100
    assert sum(at > last_arrival for at in readmitted) > 0.9 * len(readmitted)
    assert out["summary"]["max_tpot_ms"] > 100_000  # minutes between two tokens
    assert np.nanmax(report.requests["tpot_ms"]) < 1_000
    assert out["summary"]["mean_tpot_ms"] > 10 * report.summary["tpot_ms"]["mean"]
    roomy = disaggregated(5.0, "max_min")
    roomy["engine"]["num_gpu_blocks"] = 400_000
    report, out, _ = dev_head_to_head("5 roomy", roomy)
    assert report.summary["num_preemptions"] == 0
    means = _means(report, out["summary"])
    assert abs(means["TPOT mean (ms)"]) <= 0.005 and abs(means["TTFT mean (ms)"]) <= 0.05, means


def _rows(lengths: list[int]) -> list[dict]:
    """Requests arriving together, one output token each, no shared prefix."""
    return [
        {
            "timestamp": 0,
            "input_length": n,
            "output_length": 1,
            "hash_ids": [1000 * i + b for b in range(-(-n // 512))],
        }
        for i, n in enumerate(lengths)
    ]


@needs_aisimulate
def test_a_pass_time_difference_reorders_decode_placement(dev_bin, tmp_path):
    """The residual TTFT difference at 5 GB/s without preemption, traced to its start. Both
    releases of AISimulate price some prefill passes a few hundredths of a ms apart from
    dynosim (a pass of 3000 + 3000 + 2192 prompt tokens: 169.093 against 169.137 ms; one of
    4000 + 4192 tokens agrees to the ns); the cause is AISimulate's and not found. In the
    first eight requests of the conversation trace on 2 prefill + 2 decode workers, prefill
    worker 1's second pass ends 0.044 ms apart, so AISimulate places requests 3 and 5 on
    decode workers before request 2 (which ends on worker 0 in the meantime), where dynosim
    has the three end at one instant and places them in trace order."""
    trace = tmp_path / "pass.jsonl"
    for lengths, apart in (([3000, 3000, 2192], True), ([4000, 4192], False)):
        trace.write_text("".join(json.dumps(r) + "\n" for r in _rows(lengths)))
        config = peer_config({"cluster": {"num_workers": 1}, "engine": {"block_size": 64}})
        ours = dynosim.replay(dynosim.load_trace(trace), config).requests["ttft_ms"][0]
        _, theirs = run_dev(dev_bin, trace, config, tmp_path)
        assert abs(ours - theirs[0]["ttft_ms"]) == (
            pytest.approx(0.0441, abs=1e-3) if apart else pytest.approx(0.0, abs=1e-5)
        )
    if not CONVERSATION.exists():
        pytest.skip(f"{CONVERSATION} is not available")
    head = CONVERSATION.read_text().splitlines()[:8]
    trace.write_text("\n".join(head) + "\n")
    config = peer_config(
        {
            **disaggregated(5.0, "max_min"),
            "engine": {"block_size": 64, "num_gpu_blocks": 400_000},
        }
    )
    ours = dynosim.replay(dynosim.load_trace(trace), config).requests
    _, theirs = run_dev(dev_bin, trace, config, tmp_path)
    assert list(ours["transfer_start_ms"][[2, 3, 5]]) == pytest.approx([338.2738] * 3, abs=1e-4)
    assert [theirs[i]["destination_reserved_ms"] for i in (2, 3, 5)] == pytest.approx(
        [338.2738, 338.2297, 338.2297], abs=1e-4
    )
    assert list(ours["decode_worker"][[2, 3, 5]]) == [0, 1, 0]
    assert [theirs[i]["decode_worker_idx"] for i in (2, 3, 5)] == [0, 0, 1]


@needs_aisimulate
def test_with_a_shared_g3_pool_the_tier_models_part(dev_head_to_head):
    """Aggregated, 4 workers, 4,096 G2 blocks per rank, one shared 65,536-block G3 pool at
    7 GB/s per direction: both saturate the pool's write side, but AISimulate keeps a block's
    G2 copy pinned until its G3 write lands (a block in the write backlog stays a G2 hit),
    where dynosim's G2 lets it go and a request needing it waits for the copy to land."""
    config = {
        "cluster": {"num_workers": 4},
        "engine": {"block_size": 64},
        "kv_transfer": {"kv_bytes_per_token": 262_144},
        "offload": {
            **{"g2_blocks": 4096, "g3_blocks": 65_536, "g3_shared": True},
            **{"g3_duplex": "full", "in_flight": "wait"},
        },
    }
    report, out, _ = dev_head_to_head("g3", config)
    assert report.completed_requests == out["requests"]["completed"] == 12_031
    ours, theirs = report.summary["offload"], out["summary"]
    # The pool's write side saturated in both: over 20 TB at 7 GB/s in a 3,545 s trace.
    assert theirs["g3_offload"]["write"]["completed_bytes"] > 20e12
    assert ours["flows"]["g2_to_g3"]["bytes"] > 20e12
    # dynosim's onboards wait behind the backlog for minutes; AISimulate's G2 serves them.
    assert ours["delayed_onboard_share"] > 0.5 and ours["offload_wait_ms_mean"] > 60_000
    assert report.summary["ttft_ms"]["mean"] > 20_000 > 2_000 > theirs["mean_ttft_ms"]
