"""The performance gate CI runs: instructions the core executes to replay fixed workloads,
counted by valgrind's callgrind, against the counts kept in ``perf_baseline.json``.

A timing on a shared machine moves with whatever else runs; an instruction count does not:
callgrind counts the same instructions for the same binary and inputs whatever the load, so a
change of more than ``TOLERANCE`` is the code's, not the machine's. Only the core's replay is
counted (``dynosim_core::replay::run`` and what it calls: the event loop, engines, caches and
the report's statistics), not Python or the trace parse. A compiler upgrade can move the counts
by a few percent; a slower hot path moves them more. A profile-guided build (what the build
backend makes where it can, ``dynosim._core.PROFILE_GUIDED``) runs 5-8 % fewer instructions
than a plain one, so each kind of build keeps its own baseline.

Run: ``python benches/perf_gate.py`` (exit 1 when a case takes more than ``TOLERANCE`` over
its baseline, 2 without valgrind); ``--update`` writes the counts measured as the new baseline
(after a change that is meant to cost more, or to lock in a gain).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BASELINE = Path(__file__).with_name("perf_baseline.json")
#: The most a case may exceed its baseline (a fraction).
TOLERANCE = 0.10

_DISAGG = {
    "cluster": {"mode": "disaggregated", "num_prefill_workers": 2, "num_decode_workers": 2},
    "kv_transfer": {"kv_bytes_per_token": 262144, "bandwidth_gbps": 25.0, "link_model": "max_min"},
}
#: Case name -> (workload, configuration): the bundled sample (3,000 conversation rows) and
#: synthetic traffic on 32 workers, each replayed once.
CASES: dict[str, tuple[str, dict]] = {
    "sample_aggregated_4": ("sample", {"cluster": {"num_workers": 4}}),
    "sample_disaggregated_2p2d_max_min": ("sample", _DISAGG),
    "synthetic_200k_32_workers": (
        "synthetic",
        {"cluster": {"num_workers": 32}},
    ),
}

_CHILD = """
import json, sys
import dynosim
kind, config = sys.argv[1], json.loads(sys.argv[2])
if kind == "sample":
    work = dynosim.load_trace(dynosim.sample_trace_path())
else:
    work = dynosim.SyntheticWorkload(isl=200, osl=20, rate=2000.0, count=200_000, seed=1)
dynosim.replay(work, config)
"""


def count(kind: str, config: dict) -> int:
    """Instructions callgrind counts inside the core's replay of ``kind`` under ``config``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                "--toggle-collect=*dynosim_core*replay*run*",
                sys.executable,
                "-c",
                _CHILD,
                kind,
                json.dumps(config),
            ],
            check=True,
            capture_output=True,
        )
        totals = re.search(r"^(?:summary|totals):\s*(\d+)", out.read_text(), re.MULTILINE)
        if totals is None:
            raise RuntimeError(f"{out}: no instruction total in callgrind's output")
        return int(totals.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help="write the counts as the baseline")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("perf gate: valgrind is not installed (Debian: apt-get install valgrind)")
        return 2
    from dynosim._core import PROFILE_GUIDED

    build = "profile_guided" if PROFILE_GUIDED else "plain"
    print(f"perf gate: a {build.replace('_', '-')} build")
    baselines = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    baseline = baselines.get(build, {})
    measured, failed = {}, []
    for name, (kind, config) in CASES.items():
        measured[name] = got = count(kind, config)
        want = baseline.get(name)
        if want is None:
            print(f"{name}: {got:,} instructions (no baseline)")
            continue
        ratio = got / want
        verdict = "ok" if ratio <= 1 + TOLERANCE else "REGRESSED"
        print(f"{name}: {got:,} instructions, {ratio:.3f}x the baseline {want:,}: {verdict}")
        if verdict != "ok":
            failed.append(name)
    if args.update:
        baselines[build] = measured
        BASELINE.write_text(json.dumps(baselines, indent=2, sort_keys=True) + "\n")
        print(f"the {build} baseline written to {BASELINE}")
        return 0
    if failed:
        print(
            f"perf gate: {', '.join(failed)} over {TOLERANCE:.0%} above the baseline; find "
            "the cause (callgrind_annotate on the case), or run --update if the cost is meant"
        )
        return 1
    missing = [name for name in CASES if name not in baseline]
    if missing:
        print(f"perf gate: no {build} baseline for {', '.join(missing)}: run --update")
        return 1
    print(f"perf-gate: {len(CASES)} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
