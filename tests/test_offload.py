"""KV offload tiers (G2 in host memory, G3 on disk) through the Python API and the CLI."""

from __future__ import annotations

import json
import math

import pytest
from conftest import make_columns

import dynosim
from dynosim.cli import main
from dynosim.errors import ConfigError


def tiny(g2_blocks: int | None = 8, **offload) -> dict:
    """One worker, 16-token blocks, a 5-block G1, fixed 10 ms prefill, 1e6 KV bytes per token
    (a block is 16e6 bytes: 16 ms on a 1 GB/s link)."""
    config: dict = {
        "cluster": {"num_workers": 1},
        "engine": {"block_size": 16, "num_gpu_blocks": 5},
        "timing": {"model": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0},
        "kv_transfer": {"kv_bytes_per_token": 1e6},
    }
    if g2_blocks is not None:
        config["offload"] = {"g2_blocks": g2_blocks, "g1_g2_gbps": 1.0, **offload}
    return config


def evicted_prefix():
    """A [1 2 3] at 0 ms; B [11..14] (63 tokens: its last block partial, never cached) at 20 ms
    evicts a3 and a2 from G1; B again at 40 ms (a G1 hit of its 3 full blocks, its last block
    recomputed in the free fifth block); C [1 2 3 31] at 100 ms finds a1 in G1 and a2 a3 in
    G2."""
    return make_columns(
        [
            (0.0, 48, 1, [1, 2, 3]),
            (20.0, 63, 1, [11, 12, 13, 14]),
            (40.0, 63, 1, [11, 12, 13, 14]),
            (100.0, 64, 1, [1, 2, 3, 31]),
        ],
        16,
    )


def test_evicted_prefix_is_onboarded_from_g2_with_its_delay():
    report = dynosim.replay(evicted_prefix(), tiny())
    r = report.requests
    assert (r["g1_hit_blocks"][3], r["g2_hit_blocks"][3], r["g3_hit_blocks"][3]) == (1, 2, 0)
    # 2 blocks, 32e6 bytes at 1 GB/s: 32 ms; then the last block's 10 ms prefill.
    assert (r["onboard_start_ms"][3], r["onboard_end_ms"][3]) == (100.0, 132.0)
    assert r["ttft_ms"][3] == 42.0
    assert r["reused_tokens"][3] == 48
    o = report.summary["offload"]
    assert o["num_onboards"] == 1
    assert o["onboard_ms"]["mean"] == 32.0
    assert o["onboard_bytes"] == o["onboarded_blocks"] * 16e6 == 32e6
    assert o["offload_bytes"] == o["offloaded_blocks"] * 16e6
    ts = report.timeseries
    assert len(ts["g2_blocks_used"]["max"]) == len(ts["time_ms"])
    # Request 3 waited for its blocks to come up from G2 at some point.
    assert ts["onboarding"]["max"].max() == 1.0


def test_g3_hits_stage_through_g2():
    # A 1-block G2: B's evictions push a3 to G3; C then finds a2 in G2 and a3 in G3. The G3
    # flow crosses G3->G2 (0.5 GB/s) and G2->G1 (1 GB/s, shared with the G2 flow): both run
    # at 0.5 GB/s, so 16e6 bytes each take 32 ms. Free copies down: onboarding alone (costed,
    # C's read of a3 would share the half-duplex G3 link with the copies its hold sends down).
    config = tiny(1, g3_blocks=8, g2_g3_gbps=0.5, writes="free")
    report = dynosim.replay(evicted_prefix(), config)
    r = report.requests
    assert (r["g1_hit_blocks"][3], r["g2_hit_blocks"][3], r["g3_hit_blocks"][3]) == (1, 1, 1)
    assert r["onboard_end_ms"][3] - r["onboard_start_ms"][3] == 32.0
    assert report.summary["offload"]["onboarded_g3_blocks"] == 1


def test_no_tiers_add_nothing_to_the_report():
    report = dynosim.replay(evicted_prefix(), tiny(None))
    assert "offload" not in report.summary
    assert report.config["offload"]["g2_blocks"] is None
    assert "g2_hit_blocks" not in report.requests
    assert "g2_blocks_used" not in report.timeseries
    assert math.isclose(report.requests["ttft_ms"][3], 10.0)


def test_offload_settings_default_from_the_core_and_name_their_field():
    o = dynosim.SimConfig().offload
    assert (o.g2_blocks, o.g3_blocks, o.g3_shared) == (None, None, False)
    assert (o.g1_g2_gbps, o.g2_g3_gbps) == (14.0, 7.0)
    assert (o.g3_duplex, o.writes, o.g2_g3_read_gbps, o.g1_g2_write_gbps) == (
        "half",
        "flows",
        None,
        None,
    )
    with pytest.raises(ConfigError, match=r"offload.g2_g3_write_gbps"):
        dynosim.SimConfig.model_validate({"offload": {"g2_g3_write_gbps": 0.0}})
    with pytest.raises(ConfigError, match=r"offload: needs kv_transfer.kv_bytes_per_token"):
        dynosim.SimConfig.model_validate({"offload": {"g2_blocks": 8}})
    with pytest.raises(ConfigError, match=r"offload.g3_blocks: needs offload.g2_blocks"):
        dynosim.SimConfig.model_validate(
            {"offload": {"g3_blocks": 8}, "kv_transfer": {"kv_bytes_per_token": 1.0}}
        )
    with pytest.raises(ConfigError, match=r"offload.g2_g3_gbps"):
        dynosim.SimConfig.model_validate({"offload": {"g2_g3_gbps": -1.0}})


def test_g2_raises_reuse_and_lowers_ttft_on_the_conversation_trace(real_trace, tmp_path):
    rows = real_trace("mooncake_conversation.jsonl").read_text().splitlines()[:2000]
    path = tmp_path / "conversation_2000.jsonl"
    path.write_text("\n".join(rows) + "\n")
    workload = dynosim.load_trace(path)
    base = {
        "cluster": {"num_workers": 4},
        "engine": {"num_gpu_blocks": 2048, "block_size": 64},
        "kv_transfer": {"kv_bytes_per_token": 160_000.0},
    }
    g1 = dynosim.replay(workload, base)
    g2 = dynosim.replay(workload, {**base, "offload": {"g2_blocks": 8192}})
    assert g2.summary["prefix_reuse_ratio"] > g1.summary["prefix_reuse_ratio"]
    assert g2.summary["ttft_ms"]["mean"] < g1.summary["ttft_ms"]["mean"]
    o = g2.summary["offload"]
    block_bytes = 64 * 160_000.0
    assert o["g2_hit_blocks"] > 0 and o["num_onboards"] > 0
    assert o["offload_bytes"] == o["offloaded_blocks"] * block_bytes
    assert o["onboard_bytes"] == o["onboarded_blocks"] * block_bytes
    # Every onboarded block was a G2 hit of a request that onboarded.
    r = g2.requests
    onboarded = ~(r["onboard_end_ms"] != r["onboard_end_ms"])  # not NaN
    assert o["onboarded_g2_blocks"] == int(r["g2_hit_blocks"][onboarded].sum())
    # Same inputs, same bytes.
    again = dynosim.replay(workload, {**base, "offload": {"g2_blocks": 8192}})
    assert again.to_json() == g2.to_json()


def test_cli_offload_flags(capsys):
    args = ["replay", "--no-progress", "--num-gpu-blocks", "64", "--kv-bytes-per-token", "1e5"]
    tiers = ["--g2-blocks", "256", "--g3-blocks", "1024", "--g3-shared", "--g2-g3-gbps", "5"]
    assert main([*args, *tiers]) == 0
    assert "hit blocks G1 / G2 / G3" in capsys.readouterr().out
    assert main([*args, *tiers, "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["config"]["offload"]["g3_shared"] is True
    assert report["config"]["offload"]["g2_g3_gbps"] == 5.0
    assert "offload" in report["summary"]
    costs = ["--g3-duplex", "full", "--g2-g3-write-gbps", "2", "--offload-writes", "free"]
    assert main([*args, *tiers, *costs, "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    o = report["config"]["offload"]
    assert (o["g3_duplex"], o["g2_g3_write_gbps"], o["writes"]) == ("full", 2.0, "free")
    assert report["summary"]["offload"]["flows"]["g1_to_g2"]["flows"] == 0
    assert main([*args]) == 0
    assert "hit blocks" not in capsys.readouterr().out


def test_a_copy_still_in_flight_delays_the_onboard():
    # G1->G2 writes at 0.25 GB/s: B's evictions at 20 ms (a3 a2, 32e6 bytes) still have 12e6
    # bytes to go at 100 ms; C waits 48 ms for them (the copy its own hold starts queues behind),
    # then reads them (1 GB/s) until 180 ms.
    report = dynosim.replay(evicted_prefix(), tiny(g1_g2_write_gbps=0.25, in_flight="wait"))
    r = report.requests
    assert (r["onboard_start_ms"][3], r["onboard_end_ms"][3]) == (100.0, pytest.approx(180.0))
    o = report.summary["offload"]
    assert (o["onboards_delayed"], o["delayed_onboard_share"]) == (1, 1.0)
    assert o["offload_wait_ms_mean"] == pytest.approx(48.0)
    # Two copies started (a3 a2; at 148 ms b3, which C's hold evicted besides taking the free
    # block), 48e6 bytes; the replay ends with C at 190 ms, the write link busy from 20 ms on.
    assert o["flows"]["g1_to_g2"]["bytes"] == 3 * 16e6
    assert report.summary["duration_ms"] == 190.0
    assert o["link_utilization"]["g1_to_g2"] == pytest.approx(170 / 190)
    assert "decode" not in o
    # Recomputing blocks in flight instead: C's hit ends at a1 and it prefills at once.
    again = dynosim.replay(evicted_prefix(), tiny(g1_g2_write_gbps=0.25, in_flight="recompute"))
    o = again.summary["offload"]
    assert (o["hits_cut_by_copies"], o["blocks_lost_to_copies"], o["num_onboards"]) == (1, 2, 0)
    assert again.requests["ttft_ms"][3] == 10.0
