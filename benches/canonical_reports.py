"""Write the canonical JSON report (``Report.to_json()``) of a fixed set of replays, one file
each, so two builds can be compared byte for byte: a change meant to make replays faster must
leave every one of these files identical.

Run: ``python benches/canonical_reports.py OUT_DIR`` on each build, then
``diff -r OLD_DIR NEW_DIR`` (or ``cmp`` file by file). The set covers every serving mode
(aggregated; disaggregated with instant, line-rate and max-min links), offload tiers, each
engine flavour, data-parallel ranks, the routers, sessions and the closed loop, fine time
series and explained replays (AIC operator tables when AIConfigurator is installed), on the
bundled sample, synthetic traffic, a session trace made from the sample and, when
``$DYNOSIM_TRACES`` (or ../shared/data/traces) holds it, the full conversation trace.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import dynosim

_TRACES = Path(
    os.environ.get("DYNOSIM_TRACES", Path(__file__).resolve().parents[2] / "shared/data/traces")
)

#: 262,144 KV bytes per token: a 64-layer model with 8 KV heads of 128 in bf16.
_KV = 262_144


def _disagg(link: str | None, gbps: float | None = 25.0, **kv) -> dict:
    transfer = {"kv_bytes_per_token": _KV, **kv}
    if link is not None:
        transfer |= {"link_model": link, "bandwidth_gbps": gbps}
    return {
        "cluster": {"mode": "disaggregated", "num_prefill_workers": 2, "num_decode_workers": 2},
        "kv_transfer": transfer,
    }


#: name -> configuration, replayed on every workload.
CONFIGS: dict[str, dict] = {
    "agg_default": {},
    "agg_explain": {"report": {"explain": True}},
    "agg_fine_series": {"report": {"sample_interval_ms": 1.0}},
    "agg_sglang": {"engine": {"backend": "sglang"}},
    "agg_sglang_lpm_explain": {
        "engine": {"backend": "sglang", "schedule_policy": "lpm", "num_gpu_blocks": 2000},
        "report": {"explain": True},
    },
    "agg_trtllm": {"engine": {"backend": "trtllm"}},
    "agg_trtllm_chunked_maxutil": {
        "engine": {
            "backend": "trtllm",
            "enable_chunked_context": True,
            "capacity_scheduler": "max_utilization",
            "num_gpu_blocks": 3000,
        },
        "report": {"explain": True},
    },
    "agg_vllm_sync_fifo_small": {
        "engine": {
            "num_gpu_blocks": 1500,
            "async_scheduling": False,
            "scheduler_reserve_full_isl": False,
            "preemption_mode": "fifo",
            "max_num_seqs": 32,
        }
    },
    "agg_kv_aware_8": {"cluster": {"num_workers": 8, "router": "kv_aware"}},
    "agg_random_speedup": {"cluster": {"router": "random", "arrival_speedup_ratio": 3.0}},
    "agg_dp2_small": {
        "cluster": {"num_workers": 2},
        "engine": {"data_parallel_size": 2, "num_gpu_blocks": 2000},
        "report": {"explain": True},
    },
    "agg_fixed_timing": {"timing": {"model": "fixed", "prefill_ms": 20.0, "decode_ms": 5.0}},
    "agg_closed_loop": {"cluster": {"concurrency": 16}},
    "agg_tiers": {
        "engine": {"num_gpu_blocks": 1500},
        "kv_transfer": {"kv_bytes_per_token": _KV},
        "offload": {"g2_blocks": 3000, "g3_blocks": 8000},
    },
    "agg_tiers_shared_wait": {
        "engine": {"num_gpu_blocks": 1500},
        "kv_transfer": {"kv_bytes_per_token": _KV},
        "offload": {"g2_blocks": 2000, "g3_blocks": 6000, "g3_shared": True, "in_flight": "wait"},
        "report": {"explain": True},
    },
    "disagg_instant": _disagg(None),
    "disagg_line_rate_25": _disagg("line_rate"),
    "disagg_max_min_25": _disagg("max_min"),
    "disagg_max_min_5_missing_fdp": _disagg(
        "max_min", 5.0, sizing="destination_missing", first_token="first_decode_pass"
    ),
    "disagg_sglang": {**_disagg("line_rate"), "engine": {"backend": "sglang"}},
    "disagg_trtllm_explain": {
        **_disagg("max_min"),
        "engine": {"backend": "trtllm", "enable_chunked_context": True},
        "report": {"explain": True},
    },
    "disagg_kv_aware_dp2": {
        **_disagg("max_min"),
        "cluster": {
            "mode": "disaggregated",
            "num_prefill_workers": 2,
            "num_decode_workers": 2,
            "router": "kv_aware",
        },
        "engine": {"data_parallel_size": 2, "num_gpu_blocks": 3000},
    },
    "disagg_tiers": {
        **_disagg("max_min", sizing="destination_missing"),
        "engine": {"num_gpu_blocks": 2000},
        "offload": {"g2_blocks": 4000, "g3_blocks": 8000, "g3_shared": True},
    },
}

#: Operator-table (AIC) replays, explained: CUDA-graph padding, DP lockstep, async scheduling.
AIC_CONFIGS: dict[str, dict] = {
    "agg_aic_llama_explain": {
        "timing": {
            "model": "aic",
            "model_name": "meta-llama/Meta-Llama-3.1-8B",
            "system": "rtx_pro_6000_server",
            "backend_version": "0.19.0",
        },
        "report": {"explain": True},
    },
    "agg_aic_moe_dp2_explain": {
        "cluster": {"num_workers": 2},
        "engine": {"data_parallel_size": 2, "max_num_seqs": 128, "max_num_batched_tokens": 2048},
        "timing": {
            "model": "aic",
            "model_name": "Qwen/Qwen3-30B-A3B",
            "system": "rtx_pro_6000_server",
            "backend_version": "0.19.0",
            "tp": 1,
            "dp": 2,
            "ep": 2,
        },
        "report": {"explain": True},
    },
}

#: Configurations replayed on the full conversation trace (slower: 12,031 rows).
_FULL = (
    "agg_default",
    "agg_explain",
    "agg_sglang",
    "agg_trtllm",
    "disagg_instant",
    "disagg_line_rate_25",
    "disagg_max_min_25",
    "disagg_tiers",
)


def _session_trace(out: Path) -> Path:
    """The sample's first 600 rows as 60 sessions of 10 turns, later turns sent a few ms
    after the one before ends."""
    rows = dynosim.sample_trace_path().read_text().splitlines()[:600]
    lines = []
    for i, line in enumerate(rows):
        row = json.loads(line)
        row["session_id"] = f"s{i % 60}"
        if i >= 60:
            row["delay_ms"] = float(i % 7)
        lines.append(json.dumps(row))
    path = out / "sessions.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    scratch = out / "_inputs"
    scratch.mkdir(exist_ok=True)
    workloads = {
        "sample": (dynosim.load_trace(dynosim.sample_trace_path()), None),
        "synthetic": (
            dynosim.SyntheticWorkload(
                isl={"dist": "lognormal", "mean": 3000, "sigma": 0.6},
                osl={"dist": "uniform", "low": 20, "high": 400},
                count=2000,
                rate=12.0,
                prefix_groups=40,
                prefix_fraction=0.5,
                seed=7,
            ),
            None,
        ),
        "sessions": (dynosim.load_trace(_session_trace(scratch)), None),
    }
    conversation = _TRACES / "mooncake_conversation.jsonl"
    if conversation.exists():
        workloads["conversation"] = (dynosim.load_trace(conversation), _FULL)
    else:
        print(f"note: {conversation} not found, the full trace is left out", file=sys.stderr)
    configs = dict(CONFIGS)
    if importlib.util.find_spec("aiconfigurator") is not None:
        configs |= AIC_CONFIGS
    else:
        print("note: AIConfigurator is not installed, the aic cases are left out", file=sys.stderr)
    for wname, (work, only) in workloads.items():
        for cname, config in configs.items():
            if only is not None and cname not in only:
                continue
            t0 = time.perf_counter()
            text = dynosim.replay(work, config).to_json()
            (out / f"{wname}__{cname}.json").write_text(text)
            print(f"{wname}__{cname}: {time.perf_counter() - t0:.2f} s", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: canonical_reports.py OUT_DIR")
    main(Path(sys.argv[1]))
