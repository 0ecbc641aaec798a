"""The ``dynosim-aisim`` binary (AISimulate's replay; the workspace crate
``rust/dynosim-aisim``): finding cargo, building the binary on first use, locating it, and
running a program under a timeout with its own CPU time.

The binary is not part of the wheel, and ``pip install .`` does not build it: it compiles
AISimulate (about 10 minutes on 2 cores the first time). :func:`aisimulate_binary` takes
``$DYNOSIM_AISIM_BIN`` when set, else runs ``cargo build --release -p dynosim-aisim`` in this
source checkout (a no-op once built) and returns the executable cargo reports.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dynosim.errors import DynosimError, MissingExtraError

CRATE = "dynosim-aisim"
#: A prebuilt binary to use instead of building the crate.
BINARY_ENV = "DYNOSIM_AISIM_BIN"
#: Seconds a build may take (a clean one takes about 10 minutes on 2 cores).
BUILD_TIMEOUT_S = 3600.0
#: The source checkout holding the crate (when dynosim runs from one: python/dynosim/compare).
SOURCE_ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Finished:
    """A program that ran to its end: exit status, its output, wall and CPU time (ms, the
    program and the children it waited for)."""

    returncode: int
    stdout: str
    stderr: str
    wall_ms: float
    cpu_ms: float


def run_program(argv: Sequence[str], timeout_s: float, cwd: Path | None = None) -> Finished:
    """Run ``argv`` with its output captured. After ``timeout_s`` seconds it is killed with
    every process it started (its own process group) and ``subprocess.TimeoutExpired`` is
    raised. The CPU time is the kernel's accounting of this one child (its peak memory is not:
    a child's ``ru_maxrss`` counts this process's memory at the fork)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=cwd, start_new_session=True)
        reaped = False
        try:
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    reaped = True
                    break
                if time.perf_counter() - start > timeout_s:
                    raise subprocess.TimeoutExpired(list(argv), timeout_s)
                time.sleep(0.005)
        finally:
            if not reaped:  # timed out or interrupted: stop the whole group
                os.killpg(proc.pid, signal.SIGKILL)
                os.wait4(proc.pid, 0)
                proc.returncode = -signal.SIGKILL
        wall_ms = (time.perf_counter() - start) * 1000.0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Finished(
            returncode=proc.returncode,
            stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"),
            wall_ms=wall_ms,
            cpu_ms=(usage.ru_utime + usage.ru_stime) * 1000.0,
        )


def _executable(cargo_json: str) -> Path | None:
    """The path of the crate's binary among cargo's ``--message-format json`` messages."""
    found = None
    for line in cargo_json.splitlines():
        if not line.startswith("{"):
            continue
        message = json.loads(line)
        if (
            message.get("reason") == "compiler-artifact"
            and message.get("target", {}).get("name") == CRATE
            and message.get("executable")
        ):
            found = Path(message["executable"])
    return found


#: Executables built in this process, by source checkout.
_built: dict[Path, Path] = {}


def aisimulate_binary(announce: Callable[[str], None] | None = None) -> Path:
    """The ``dynosim-aisim`` executable: ``$DYNOSIM_AISIM_BIN`` when set, else built from this
    source checkout with cargo (once per process; cargo rebuilds only what changed).
    ``announce``, if given, is called with the build command just before cargo runs.

    Raises MissingExtraError when neither a binary nor cargo and the crate's sources are
    there, DynosimError when the build fails or runs past BUILD_TIMEOUT_S.
    """
    given = os.environ.get(BINARY_ENV)
    if given:
        path = Path(given)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise MissingExtraError(f"${BINARY_ENV}: {given} is not an executable file")
        return path
    if SOURCE_ROOT in _built:
        return _built[SOURCE_ROOT]
    manifest = SOURCE_ROOT / "rust" / CRATE / "Cargo.toml"
    if not manifest.is_file():
        raise MissingExtraError(
            f"comparing with AISimulate needs the {CRATE} binary, built from dynosim's source "
            f"checkout (rust/{CRATE}), which this installation does not include; build it there "
            f"with `cargo build --release -p {CRATE}` and set ${BINARY_ENV} to the binary"
        )
    cargo = shutil.which("cargo")
    if cargo is None:
        raise MissingExtraError(
            f"comparing with AISimulate builds rust/{CRATE} with cargo, which is not on PATH; "
            f"install a Rust toolchain >= 1.88 (https://rustup.rs), or set ${BINARY_ENV} to a "
            f"built {CRATE} binary"
        )
    argv = [cargo, "build", "--release", "-p", CRATE, "--message-format=json-render-diagnostics"]
    command = f"cargo build --release -p {CRATE}"
    if announce is not None:
        announce(f"{command} (in {SOURCE_ROOT}; about 10 minutes on 2 cores the first time)")
    try:
        done = run_program(argv, BUILD_TIMEOUT_S, cwd=SOURCE_ROOT)
    except subprocess.TimeoutExpired:
        raise DynosimError(
            f"{command} (in {SOURCE_ROOT}) did not finish within {BUILD_TIMEOUT_S:g} s; stopped"
        ) from None
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-40:])
        raise DynosimError(
            f"{command} (in {SOURCE_ROOT}) failed with exit status {done.returncode}:\n{tail}"
        )
    path = _executable(done.stdout)
    if path is None:
        raise DynosimError(f"{command} (in {SOURCE_ROOT}) reported no {CRATE} executable")
    _built[SOURCE_ROOT] = path
    return path


__all__ = [
    "BINARY_ENV",
    "BUILD_TIMEOUT_S",
    "CRATE",
    "SOURCE_ROOT",
    "Finished",
    "aisimulate_binary",
    "run_program",
]
