"""The fidelity cases: ShareGPT-like synthetic traffic replayed with AIConfigurator's vLLM 0.19.0
timing on one ``rtx_pro_6000_server`` worker, for three models at two batch limits, printing
the latency percentiles and where the time went.

The workload: 1,000 requests, Poisson arrivals at 10 requests/s, seed 1; prompt and output
lengths lognormal, prompts of mean 220 tokens with sigma 1.0 and outputs of mean 200 with sigma
0.9, "mean" being the distribution's own mean (the log-mean is ``mu = ln(mean) - sigma**2 / 2``),
each length rounded to the nearest integer and at least 1 token
(:class:`dynosim.SyntheticWorkload` with :class:`~dynosim.workload.synthetic.LognormalLength`).

Every case is what ``dynosim replay --timing aic --system rtx_pro_6000_server --backend vllm
--backend-version 0.19.0 --block-size 16 --max-num-batched-tokens 2048 --workers 1 --explain``
gives with its model, layout and ``--max-num-seqs`` (the KV blocks sized from the model and GPU
as vLLM sizes them):

* ``llama-8b-tp1-*``: meta-llama/Meta-Llama-3.1-8B (AIC's name for Llama 3.1 8B), TP 1;
* ``qwen3-30b-a3b-dp2-ep2-*``: Qwen/Qwen3-30B-A3B, TP 1, attention DP 2, experts split 2 ways;
* ``qwen3-32b-tp2-*``: Qwen/Qwen3-32B, TP 2;

each at ``max_num_seqs`` 128 (``-s128``) and 256 (``-s256``). Per case it prints the mean, p50,
p90 and p99 of TTFT, TPOT and E2E (ms), the mean TTFT split by stage (``report.breakdown()``),
and the mean priced pass by kind (over all the worker's ranks) with its largest parts; then one
table of every case run.

Run: ``python benches/fidelity_cases.py [--case NAME ...] [--json FILE]`` (``--list`` names the
cases). The JSON holds the dynosim version, the workload's settings and, per case, its model,
layout, flags, request counts, KV blocks, the four statistics of each latency, the TTFT stages
and the passes by kind with every part. Needs the ``aic`` extra (``pip install 'dynosim[aic]'``);
without it the script says so and exits 0 having run nothing. ``benches/test_fidelity_cases.py``
runs small variants.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import dynosim

#: The workload of every case.
REQUESTS = 1000
RATE = 10.0  # requests per second, Poisson
SEED = 1
ISL = {"dist": "lognormal", "mean": 220.0, "sigma": 1.0}
OSL = {"dist": "lognormal", "mean": 200.0, "sigma": 0.9}

#: The settings every case shares, as the flags of ``dynosim replay`` name them.
SYSTEM = "rtx_pro_6000_server"
BACKEND = "vllm"
BACKEND_VERSION = "0.19.0"
BLOCK_SIZE = 16
MAX_NUM_BATCHED_TOKENS = 2048
WORKERS = 1

#: Statistics printed of each latency.
STATS = ("mean", "p50", "p90", "p99")
LATENCIES = {"TTFT": "ttft_ms", "TPOT": "tpot_ms", "E2E": "e2e_ms"}
#: Pass kinds in the order shown, and how many of each kind's parts are printed.
KINDS = ("prefill_only", "mixed", "decode_only")
TOP_PARTS = 3


@dataclass(frozen=True)
class Case:
    """One deployment: an AIC model on one worker of ``tp x dp`` GPUs."""

    model: str
    tp: int
    dp: int
    ep: int
    max_num_seqs: int

    def flags(self) -> list[str]:
        """The ``dynosim replay`` flags of this case (the workload aside)."""
        return [
            *("--timing", "aic", "--system", SYSTEM, "--backend", BACKEND),
            *("--backend-version", BACKEND_VERSION, "--block-size", str(BLOCK_SIZE)),
            *("--max-num-batched-tokens", str(MAX_NUM_BATCHED_TOKENS)),
            *("--workers", str(WORKERS), "--model", self.model),
            *("--tp", str(self.tp), "--dp", str(self.dp), "--ep", str(self.ep)),
            *("--max-num-seqs", str(self.max_num_seqs), "--explain"),
        ]


_MODELS = {
    "llama-8b-tp1": ("meta-llama/Meta-Llama-3.1-8B", 1, 1, 1),
    "qwen3-30b-a3b-dp2-ep2": ("Qwen/Qwen3-30B-A3B", 1, 2, 2),
    "qwen3-32b-tp2": ("Qwen/Qwen3-32B", 2, 1, 1),
}
#: name -> case, in the order run.
CASES: dict[str, Case] = {
    f"{name}-s{seqs}": Case(model, tp, dp, ep, seqs)
    for name, (model, tp, dp, ep) in _MODELS.items()
    for seqs in (128, 256)
}


def workload(count: int = REQUESTS, seed: int = SEED) -> dynosim.SyntheticWorkload:
    """The cases' requests (``count`` of them)."""
    return dynosim.SyntheticWorkload(isl=ISL, osl=OSL, count=count, rate=RATE, seed=seed)


def config(case: Case) -> dynosim.SimConfig:
    """The configuration ``dynosim replay`` builds from ``case.flags()``."""
    return dynosim.load_config(
        {
            "cluster": {"num_workers": WORKERS},
            "engine": {
                "backend": BACKEND,
                "block_size": BLOCK_SIZE,
                "max_num_seqs": case.max_num_seqs,
                "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
                "tensor_parallel_size": case.tp,
                "data_parallel_size": case.dp,
            },
            "timing": {
                "model": "aic",
                "model_name": case.model,
                "system": SYSTEM,
                "backend_version": BACKEND_VERSION,
                "tp": case.tp,
                "dp": case.dp,
                "ep": case.ep,
            },
            "report": {"explain": True},
        }
    )


def run_case(case: Case, count: int = REQUESTS) -> dynosim.Report:
    """Replay ``count`` of the cases' requests on ``case`` (explained)."""
    return dynosim.replay(workload(count), config(case), progress=False)


def passes_by_kind(report: dynosim.Report) -> dict[str, dict[str, Any]]:
    """Per pass kind, over every rank of the replay: how many passes, their mean priced time
    and the mean of each priced part (ms; means weighted by each rank's passes), the parts
    largest first."""
    out = {}
    ranks = report.breakdown()["ranks"]
    for kind in KINDS:
        held = [r["passes"][kind] for r in ranks if kind in r["passes"]]
        count = sum(p["passes"] for p in held)
        if not count:
            continue
        names = {name for p in held for name in p["parts_mean_ms"]}
        parts = {
            name: sum(p["parts_mean_ms"].get(name, 0.0) * p["passes"] for p in held) / count
            for name in names
        }
        out[kind] = {
            "passes": count,
            "mean_ms": sum(p["mean_ms"] * p["passes"] for p in held) / count,
            "parts_mean_ms": dict(sorted(parts.items(), key=lambda kv: (-kv[1], kv[0]))),
        }
    return out


def numbers(case: Case, report: dynosim.Report) -> dict[str, Any]:
    """Everything printed of one case, as plain data (the ``--json`` entry)."""
    s = report.summary
    ranks = report.breakdown()["ranks"]
    return {
        **asdict(case),
        "flags": case.flags(),
        "requests": s["num_requests"],
        "completed": s["completed_requests"],
        "rejected": s["rejected_requests"],
        "num_gpus": s["num_gpus"],
        "dp_ranks": sorted({r["dp_rank"] for r in ranks}),
        "num_gpu_blocks": report.config["engine"]["num_gpu_blocks"],
        "preemptions": s["num_preemptions"],
        **{key: {stat: s[key][stat] for stat in STATS} for key in LATENCIES.values()},
        "ttft_stages_mean_ms": {
            st["stage"]: st["mean_ms"] for st in report.breakdown()["ttft_stages"]
        },
        "passes": passes_by_kind(report),
    }


def _ms(value: float) -> str:
    return f"{value:,.2f}"


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def render(name: str, got: dict[str, Any], seconds: float) -> str:
    """The text of one case."""
    lines = [
        f"== {name}: {got['model']}, tp {got['tp']} dp {got['dp']} ep {got['ep']}, "
        f"max_num_seqs {got['max_num_seqs']} ({_count(got['num_gpus'], 'GPU')}, "
        f"{got['num_gpu_blocks']:,} KV blocks per rank); {got['completed']:,} of "
        f"{got['requests']:,} requests completed, {got['preemptions']:,} preemptions; "
        f"replayed in {seconds:.1f} s",
        f"{'ms':<6}" + "".join(f"{stat:>11}" for stat in STATS),
    ]
    for label, key in LATENCIES.items():
        lines.append(f"{label:<6}" + "".join(f"{_ms(got[key][stat]):>11}" for stat in STATS))
    stages = {k: v for k, v in got["ttft_stages_mean_ms"].items() if v != 0.0}
    lines.append(
        "mean TTFT by stage: "
        + " + ".join(f"{stage} {_ms(ms)}" for stage, ms in stages.items())
        + f" = {_ms(sum(stages.values()))} ms"
    )
    ranks = len(got["dp_ranks"])
    over = f"{ranks} DP ranks, each rank's passes counted" if ranks > 1 else "1 rank"
    lines.append(f"mean priced pass by kind, largest parts (ms; {over}):")
    for kind, p in got["passes"].items():
        top = list(p["parts_mean_ms"].items())[:TOP_PARTS]
        lines.append(
            f"  {kind:<13}{p['passes']:>8,} x {_ms(p['mean_ms']):>7}: "
            + ", ".join(f"{part} {_ms(ms)}" for part, ms in top)
        )
    return "\n".join(lines)


def table(results: dict[str, dict[str, Any]]) -> str:
    """Mean / p90 of TTFT, TPOT and E2E of every case run."""
    width = max(len(name) for name in results)
    head = f"{'case':<{width}}" + "".join(f"{label + ' mean / p90 ms':>26}" for label in LATENCIES)
    rows = [head]
    for name, got in results.items():
        cells = [f"{_ms(got[key]['mean'])} / {_ms(got[key]['p90'])}" for key in LATENCIES.values()]
        rows.append(f"{name:<{width}}" + "".join(f"{cell:>26}" for cell in cells))
    return "\n".join(rows)


def have_aic() -> bool:
    """Whether AIConfigurator (the ``aic`` extra), which prices every case, is installed."""
    return importlib.util.find_spec("aiconfigurator_core") is not None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--case",
        action="append",
        choices=list(CASES),
        metavar="NAME",
        help="run this case only (repeatable; default: all). One of: " + ", ".join(CASES),
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="write every number to FILE")
    p.add_argument(
        "--list",
        action="store_true",
        help="print each case's name and its dynosim replay flags (the workload aside: the "
        "command line has no length distributions)",
    )
    args = p.parse_args(argv)
    if args.list:
        for name, case in CASES.items():
            print(f"{name}: dynosim replay WORKLOAD {' '.join(case.flags())}")
        return 0
    if not have_aic():
        print(
            "fidelity_cases: skipped, nothing run: the cases are priced with AIConfigurator "
            "(--timing aic), which is not installed; install it with: pip install 'dynosim[aic]'",
            file=sys.stderr,
        )
        return 0
    names = args.case or list(CASES)
    print(
        f"workload: {REQUESTS:,} requests, Poisson {RATE:g}/s, seed {SEED}; isl {ISL}; osl {OSL}\n"
    )
    results = {}
    for name in dict.fromkeys(names):
        start = time.perf_counter()
        report = run_case(CASES[name])
        seconds = time.perf_counter() - start
        results[name] = numbers(CASES[name], report)
        print(render(name, results[name], seconds) + "\n", flush=True)
    print(table(results))
    if args.json is not None:
        document = {
            "dynosim_version": dynosim.__version__,
            "workload": workload().model_dump(),
            "cases": results,
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
