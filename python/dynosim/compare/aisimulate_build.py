"""The ``dynosim-aisim`` binary (AISimulate's replay, the crate ``rust/dynosim-aisim``):
building it on first use, locating it, and running a program under a timeout with its own CPU
time.

The crate's sources ship in the wheel as package data (``aisimulate_harness``: in a source
checkout, links to ``rust/dynosim-aisim``): Cargo.toml, build.rs, src/ and one lock file per
``aisimulate-core`` release, ``Cargo.lock`` for :data:`DEFAULT_VERSION` and ``Cargo-VERSION.lock``
for each other. :func:`aisimulate_binary` takes ``$DYNOSIM_AISIM_BIN`` when set; else it builds
the sources with ``cargo build --release --locked`` against the release's lock file in
``<cache root>/aisimulate/VERSION`` (about 10 minutes on 2 cores) and keeps the binary there,
built again only when the sources' hash changes. Every release builds in one target
directory (:func:`target_dir`), so that each compiles only what differs.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dynosim._cache import default_cache_dir
from dynosim._files import write_atomic
from dynosim.errors import DynosimError, MissingExtraError

CRATE = "dynosim-aisim"
#: A prebuilt binary to use instead of building the crate.
BINARY_ENV = "DYNOSIM_AISIM_BIN"
#: Seconds a build may take (a clean one takes about 10 minutes on 2 cores).
BUILD_TIMEOUT_S = 3600.0
#: The crate's sources, as installed with dynosim.
HARNESS = Path(__file__).with_name("aisimulate_harness")
#: The aisimulate-core release ``Cargo.lock`` pins: the stable one, compared with by default.
DEFAULT_VERSION = "0.13.0"
#: How to get cargo where it is missing.
INSTALL_RUST = "curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh"


@dataclass(frozen=True)
class Finished:
    """A program that ran to its end: exit status, its output, wall and CPU time (ms, the
    program and the children it waited for)."""

    returncode: int
    stdout: str
    stderr: str
    wall_ms: float
    cpu_ms: float


def run_program(
    argv: Sequence[str],
    timeout_s: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Finished:
    """Run ``argv`` with its output captured (in ``cwd``, with ``env`` when given). After
    ``timeout_s`` seconds it is killed with every process it started (its own process group)
    and ``subprocess.TimeoutExpired`` is raised. The CPU time is the kernel's accounting of this
    one child (its peak memory is not: a child's ``ru_maxrss`` counts this process's memory at
    the fork)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            argv, stdout=out, stderr=err, cwd=cwd, env=env, start_new_session=True
        )
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


def lock_file(version: str) -> str:
    """The harness's lock file pinning aisimulate-core ``version``."""
    return "Cargo.lock" if version == DEFAULT_VERSION else f"Cargo-{version}.lock"


def harness_sources(version: str) -> dict[str, bytes]:
    """The crate as built on aisimulate-core ``version``, by path: Cargo.toml, build.rs, src/
    and that release's lock file as Cargo.lock. MissingExtraError when this installation lacks
    the sources or the lock file."""
    lock = HARNESS / lock_file(version)
    if not (HARNESS / "Cargo.toml").is_file():
        raise MissingExtraError(
            f"this installation of dynosim lacks AISimulate's replay sources ({HARNESS}); "
            f"reinstall dynosim, or set ${BINARY_ENV} to a built {CRATE} binary"
        )
    if not lock.is_file():
        raise MissingExtraError(f"{lock}: no lock file for aisimulate-core {version}")
    files = {"Cargo.toml": HARNESS / "Cargo.toml", "build.rs": HARNESS / "build.rs"}
    files |= {f"src/{p.name}": p for p in sorted((HARNESS / "src").glob("*.rs"))}
    sources = {name: path.read_bytes() for name, path in files.items()}
    sources["Cargo.lock"] = lock.read_bytes()
    return sources


def sources_digest(sources: Mapping[str, bytes]) -> str:
    """sha256 over the sources' paths and contents, in path order."""
    h = hashlib.sha256()
    for name in sorted(sources):
        data = sources[name]
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def build_folder(version: str) -> Path:
    """Where the binary of aisimulate-core ``version`` is built and kept."""
    return default_cache_dir() / "aisimulate" / version


def target_dir() -> Path:
    """Cargo's target directory for the builds: ``$CARGO_TARGET_DIR`` when set, else one for
    every release in the cache (they share most compiled dependencies)."""
    given = os.environ.get("CARGO_TARGET_DIR")
    return Path(given) if given else default_cache_dir() / "aisimulate" / "target"


def _kept(folder: Path) -> tuple[Path, Path]:
    """The binary kept in a build folder, and the stamp of the sources it was built from."""
    return folder / CRATE, folder / f"{CRATE}.sha256"


#: Executables found or built in this process, by aisimulate-core version.
_built: dict[str, Path] = {}


def aisimulate_binary(
    version: str = DEFAULT_VERSION, announce: Callable[[str], None] | None = None
) -> Path:
    """The ``dynosim-aisim`` executable built on aisimulate-core ``version``:
    ``$DYNOSIM_AISIM_BIN`` when set (whatever it was built on; the replay checks), else the
    one kept in :func:`build_folder`, built there with cargo first when missing or built from
    other sources. ``announce``, if given, is called with a line before a build starts and one
    with its time (s) when it ends.

    Raises MissingExtraError when neither a binary nor cargo and the sources are there,
    DynosimError when the build fails or runs past BUILD_TIMEOUT_S.
    """
    given = os.environ.get(BINARY_ENV)
    if given:
        path = Path(given)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise MissingExtraError(f"${BINARY_ENV}: {given} is not an executable file")
        return path
    if version in _built:
        return _built[version]
    sources = harness_sources(version)
    digest = sources_digest(sources)
    folder = build_folder(version)
    binary, stamp = _kept(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # One build per folder at a time: another process waits, then finds the binary built.
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (binary.is_file() and stamp.is_file() and stamp.read_text().strip() == digest):
            _build(version, sources, digest, folder, announce)
    _built[version] = binary
    return binary


def _build(
    version: str,
    sources: Mapping[str, bytes],
    digest: str,
    folder: Path,
    announce: Callable[[str], None] | None,
) -> None:
    """Build ``sources`` with cargo into ``folder``'s binary and stamp it with ``digest``."""
    binary, stamp = _kept(folder)
    cargo = shutil.which("cargo")
    if cargo is None:
        raise MissingExtraError(
            f"comparing with AISimulate builds its replay ({CRATE}) with cargo, which is not on "
            f"PATH; install a Rust toolchain >= 1.88 with `{INSTALL_RUST}` "
            f"(https://rustup.rs), or set ${BINARY_ENV} to a built {CRATE} binary"
        )
    tree = folder / "crate"
    shutil.rmtree(tree, ignore_errors=True)
    for name, data in sources.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(data)
    env = {**os.environ, "CARGO_TARGET_DIR": str(target_dir())}
    args = ["build", "--release", "--locked"]
    command = " ".join(["cargo", *args])
    where = f"in {tree}, target {env['CARGO_TARGET_DIR']}"
    if announce is not None:
        announce(
            f"building AISimulate's replay on aisimulate-core {version}: {command} ({where}; "
            "about 10 minutes on 2 cores the first time)"
        )
    argv = [cargo, *args, "--message-format=json-render-diagnostics"]
    try:
        done = run_program(argv, BUILD_TIMEOUT_S, cwd=tree, env=env)
    except subprocess.TimeoutExpired:
        raise DynosimError(
            f"{command} ({where}) did not finish within {BUILD_TIMEOUT_S:g} s; stopped"
        ) from None
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-40:])
        raise DynosimError(
            f"{command} ({where}) failed with exit status {done.returncode}:\n{tail}"
        )
    built = _executable(done.stdout)
    if built is None:
        raise DynosimError(f"{command} ({where}) reported no {CRATE} executable")
    # Copied out of the target directory, which other builds may share and overwrite.
    partial = folder / f".{CRATE}.partial"
    shutil.copy2(built, partial)
    os.replace(partial, binary)
    write_atomic(stamp, digest + "\n")
    if announce is not None:
        announce(f"built {binary} in {done.wall_ms / 1000.0:.0f} s")


__all__ = [
    "BINARY_ENV",
    "BUILD_TIMEOUT_S",
    "CRATE",
    "DEFAULT_VERSION",
    "HARNESS",
    "INSTALL_RUST",
    "Finished",
    "aisimulate_binary",
    "build_folder",
    "harness_sources",
    "lock_file",
    "run_program",
    "sources_digest",
    "target_dir",
]
