"""How long ``dynosim replay`` takes to start: from the interpreter's start until the core's
replay is called, on the bundled sample and the default cluster, wall-clock, beside a bare
interpreter's start and the whole command (start, replay, printed summary).

The replay is reached through the command's own ``main`` with ``dynosim._core.replay`` replaced
by a probe that ends the process (``os._exit``) as it is called, so the figure holds every
import, the configuration's checks and the trace's read, and nothing of the replay. The three
commands run in turn, one of each per round, so a machine that drifts moves all three alike;
the medians are printed.

Run: ``python benches/cli_start.py [ROUNDS]`` (default 21). ``--instructions`` also counts the
instructions of each command once with valgrind's callgrind (a count that does not move with
the machine's load).
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PROBE = """\
import os
import dynosim._core as core
def probe(*args, **kwargs):
    os._exit(0)
core.replay = probe
from dynosim.cli import main
main(["replay", "--no-progress"])
"""

COMMANDS = {
    "interpreter (python -c pass)": [sys.executable, "-c", "pass"],
    "dynosim replay, to its replay": [sys.executable, "-c", PROBE],
    "dynosim replay, whole": [sys.executable, "-m", "dynosim", "replay", "--no-progress"],
}


def _wall_s(argv: list[str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def _instructions(argv: list[str], cwd: str) -> int:
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg", *argv],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        )
    return int(re.search(r"Collected : (\d+)", done.stderr).group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rounds", nargs="?", type=int, default=21)
    parser.add_argument("--instructions", action="store_true", help="count with callgrind too")
    args = parser.parse_args()
    if args.instructions and shutil.which("valgrind") is None:
        print("valgrind is not installed", file=sys.stderr)
        return 2
    # An empty working directory: no file there shadows a module or is read as configuration.
    with tempfile.TemporaryDirectory() as cwd:
        for argv in COMMANDS.values():  # warm the file cache and the bytecode cache
            _wall_s(argv, cwd)
        times: dict[str, list[float]] = {name: [] for name in COMMANDS}
        for _ in range(args.rounds):
            for name, argv in COMMANDS.items():
                times[name].append(_wall_s(argv, cwd))
        for name, argv in COMMANDS.items():
            ms = sorted(1e3 * t for t in times[name])
            line = (
                f"{name:32s} median {statistics.median(ms):7.1f} ms "
                f"(min {ms[0]:.1f}, max {ms[-1]:.1f})"
            )
            if args.instructions:
                line += f"  {_instructions(argv, cwd) / 1e6:,.0f} M instructions"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
