"""The profile a profile-guided build of the extension compiles with.

The extension is built once instrumented (it counts which branches are taken and which calls
are hot), replays the training set (``pgo_training.py``) to write those counts, and
``llvm-profdata`` merges them into one profile. Built again with it, the compiler lays out and
inlines the hot path for what the counts showed: the replay runs 7-14 % faster than a plain
release build, with the same results (layout and inlining change, no arithmetic does).

The counts are read only by the LLVM that wrote them, so ``llvm-profdata`` must be the
toolchain's own: rustup's ``llvm-tools`` component, added when missing. Anything that stops
a profile being made raises :class:`Unavailable` saying why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

_TRAINING = Path(__file__).with_name("pgo_training.py")
#: What the training replays may take before the build gives up on them (s).
_TRAINING_TIMEOUT_S = 600
#: What adding rustup's llvm-tools may take, a download of about 30 MB (s).
_ADD_TIMEOUT_S = 120
#: Where the instrumented build leaves the extension, by platform.
_BUILT_NAMES = ("lib_core.so", "lib_core.dylib")


class Unavailable(Exception):
    """No profile can be made here; the message says why."""


def train(root: Path, work: Path) -> Path:
    """Build the extension of the project at ``root`` instrumented under ``work``, replay the
    training set on it and return the merged profile (``work/merged.profdata``)."""
    if sys.platform not in ("linux", "darwin"):
        raise Unavailable(f"not set up on {sys.platform}")
    profdata = llvm_profdata()
    raw = work / "raw"
    shutil.rmtree(raw, ignore_errors=True)
    raw.mkdir(parents=True)
    say("building the extension instrumented")
    env = {
        **rustflags_env(os.environ, f"-Cprofile-generate={raw}"),
        "CARGO_TARGET_DIR": str(work / "instrumented"),
    }
    _run(root, ["cargo", "build", "--release", "--locked", "-p", "dynosim-py"], env, "cargo build")
    package = _stage(root, work / "instrumented" / "release", work / "python")
    say("replaying the training set")
    # First on the path, before any dynosim installed already; pip's own entries kept.
    path = os.pathsep.join(filter(None, [str(package), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    command = [sys.executable, str(_TRAINING)]
    _run(root, command, env, "the training replays", timeout=_TRAINING_TIMEOUT_S)
    merged = work / "merged.profdata"
    _run(root, [str(profdata), "merge", "-o", str(merged), str(raw)], os.environ, "llvm-profdata")
    return merged


def llvm_profdata() -> Path:
    """The active Rust toolchain's ``llvm-profdata``, its llvm-tools component added with
    rustup if missing."""
    try:
        sysroot = _output(["rustc", "--print", "sysroot"])
        host = next(
            line.split(":", 1)[1].strip()
            for line in _output(["rustc", "-vV"]).splitlines()
            if line.startswith("host:")
        )
    except (OSError, subprocess.CalledProcessError, StopIteration) as exc:
        raise Unavailable(f"cannot ask rustc for its sysroot and host ({exc})") from None
    tool = Path(sysroot) / "lib" / "rustlib" / host / "bin" / "llvm-profdata"
    if not tool.is_file() and shutil.which("rustup"):
        say("adding rustup's llvm-tools component (llvm-profdata)")
        command = ["rustup", "component", "add", "llvm-tools"]
        try:
            subprocess.run(
                command, stdout=sys.stderr, stderr=sys.stderr, timeout=_ADD_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            say(f"rustup gave no answer in {_ADD_TIMEOUT_S} s")
    if not tool.is_file():
        raise Unavailable(f"no {tool} (rustup's llvm-tools component)")
    return tool


def rustflags_env(environ: Mapping[str, str], flag: str) -> dict[str, str]:
    """``environ`` with ``flag`` added to the flags cargo passes rustc, all of them in
    ``CARGO_ENCODED_RUSTFLAGS`` (separated by 0x1f, so a path may hold spaces; cargo reads it
    before ``RUSTFLAGS``, whose flags move into it)."""
    env = dict(environ)
    encoded = env.pop("CARGO_ENCODED_RUSTFLAGS", "")
    spaced = env.pop("RUSTFLAGS", "")
    given = encoded.split("\x1f") if encoded else spaced.split()
    env["CARGO_ENCODED_RUSTFLAGS"] = "\x1f".join([*filter(None, given), flag])
    return env


def say(message: str) -> None:
    """Tell the person building (stderr: pip shows it with ``-v``, and on a failure)."""
    print(f"dynosim build: {message}", file=sys.stderr, flush=True)


def _stage(root: Path, release: Path, into: Path) -> Path:
    """A copy of the Python package with the instrumented extension in it, under ``into``."""
    built = next((release / n for n in _BUILT_NAMES if (release / n).is_file()), None)
    if built is None:
        raise Unavailable(f"the instrumented build left none of {_BUILT_NAMES} in {release}")
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(
        root / "python" / "dynosim",
        into / "dynosim",
        ignore=shutil.ignore_patterns("_core*.so", "_core*.pyd", "__pycache__"),
    )
    shutil.copy2(built, into / "dynosim" / "_core.abi3.so")
    return into


def _run(
    root: Path,
    command: list[str],
    env: Mapping[str, str],
    what: str,
    timeout: float | None = None,
) -> None:
    """Run ``command`` in ``root``, its output to stderr; a failure is Unavailable."""
    try:
        done = subprocess.run(
            command,
            cwd=root,
            env=dict(env),
            stdout=sys.stderr,
            stderr=sys.stderr,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"{what} did not run: {exc}") from None
    if done.returncode != 0:
        raise Unavailable(f"{what} failed (exit status {done.returncode})")


def _output(command: list[str]) -> str:
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()
