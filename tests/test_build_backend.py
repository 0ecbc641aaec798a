"""The profile-guided build (build_backend/): how it hands cargo its flags, and that its
training set stays valid and spans what dynosim runs (a training replay that no longer
validates would quietly leave every install on a plain build)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import dynosim

BACKEND = Path(__file__).resolve().parents[1] / "build_backend"
sys.path.insert(0, str(BACKEND))

import pgo  # noqa: E402  (the backend's directory is not a package)
import pgo_training  # noqa: E402


def test_a_flag_joins_the_spaced_rustflags_and_a_path_may_hold_spaces():
    env = pgo.rustflags_env(
        {"RUSTFLAGS": " -Ctarget-cpu=native  -Dwarnings", "HOME": "/h"}, "-Cx=/a b"
    )
    assert env == {
        "HOME": "/h",
        "CARGO_ENCODED_RUSTFLAGS": "-Ctarget-cpu=native\x1f-Dwarnings\x1f-Cx=/a b",
    }


def test_encoded_rustflags_win_over_spaced_ones_as_cargo_reads_them():
    given = {"CARGO_ENCODED_RUSTFLAGS": "-Ca=1 2\x1f-Cb", "RUSTFLAGS": "-Cignored"}
    env = pgo.rustflags_env(given, "-Cc")
    assert env == {"CARGO_ENCODED_RUSTFLAGS": "-Ca=1 2\x1f-Cb\x1f-Cc"}


def test_no_flags_given_leaves_only_the_new_one():
    assert pgo.rustflags_env({}, "-Cprofile-use=/p") == {
        "CARGO_ENCODED_RUSTFLAGS": "-Cprofile-use=/p"
    }


def test_the_staged_package_holds_the_instrumented_extension_and_no_other(tmp_path):
    root, release = tmp_path / "root", tmp_path / "release"
    (root / "python" / "dynosim").mkdir(parents=True)
    (root / "python" / "dynosim" / "__init__.py").write_text("x = 1\n")
    (root / "python" / "dynosim" / "_core.abi3.so").write_bytes(b"an installed build")
    release.mkdir()
    (release / "lib_core.so").write_bytes(b"instrumented")
    staged = pgo._stage(root, release, tmp_path / "staged")
    assert (staged / "dynosim" / "__init__.py").read_text() == "x = 1\n"
    assert [p.name for p in (staged / "dynosim").glob("_core*")] == ["_core.abi3.so"]
    assert (staged / "dynosim" / "_core.abi3.so").read_bytes() == b"instrumented"


def test_a_build_that_left_no_extension_is_unavailable_not_a_crash(tmp_path):
    with pytest.raises(pgo.Unavailable, match="left none of"):
        pgo._stage(tmp_path, tmp_path, tmp_path / "staged")


def test_a_failing_step_says_which_and_how():
    with pytest.raises(pgo.Unavailable, match=r"the step failed \(exit status 3\)"):
        pgo._run(Path.cwd(), [sys.executable, "-c", "raise SystemExit(3)"], {}, "the step")


def test_the_training_set_validates_and_spans_engines_and_modes():
    configs = [dynosim.load_config(c) for c in pgo_training.CONFIGS]
    assert {c.engine.backend for c in configs} == {"vllm", "sglang", "trtllm"}
    assert {c.cluster.mode for c in configs} == {"aggregated", "disaggregated"}
    links = {c.kv_transfer.link_model for c in configs if c.kv_transfer.bandwidth_gbps}
    assert links == {"line_rate", "max_min"}
    assert any(c.offload.g2_blocks for c in configs)


def test_without_llvm_profdata_or_rustup_to_add_it_the_build_is_told_why(tmp_path, monkeypatch):
    answers = {("rustc", "--print", "sysroot"): str(tmp_path), ("rustc", "-vV"): "host: h-x\n"}
    monkeypatch.setattr(pgo, "_output", lambda command: answers[tuple(command)])
    monkeypatch.setattr(pgo.shutil, "which", lambda name: None)
    missing = tmp_path / "lib" / "rustlib" / "h-x" / "bin" / "llvm-profdata"
    with pytest.raises(pgo.Unavailable, match=f"no {missing} "):
        pgo.llvm_profdata()
    missing.parent.mkdir(parents=True)
    missing.write_text("")
    assert pgo.llvm_profdata() == missing


def test_a_toolchain_that_cannot_be_asked_is_unavailable(monkeypatch):
    def fail(command):
        raise FileNotFoundError(command[0])

    monkeypatch.setattr(pgo, "_output", fail)
    with pytest.raises(pgo.Unavailable, match="cannot ask rustc for its sysroot and host"):
        pgo.llvm_profdata()
