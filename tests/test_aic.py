"""The ``aic`` timing model: AIConfigurator's tables, their cache, their errors, and parity with
AIConfigurator's own static estimate."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import have, make_columns, needs_aic

import dynosim
import dynosim.config
from dynosim import aic
from dynosim.aic import AicTarget, AicTiming, aic_table_timing
from dynosim.aic import tables as aic_tables
from dynosim.config import TableTiming, save_timing_table
from dynosim.errors import ConfigError, MissingExtraError

QWEN = {"model_name": "Qwen/Qwen3-32B", "system": "h200_sxm", "backend": "trtllm"}


def bilinear(x: list[float], y: list[float], z: list[list[float]], a: float, b: float) -> float:
    """The core's table lookup (bilinear inside, linear past the edges, >= 0), mirrored to
    measure how well a grid follows AIC between its points."""

    def segment(axis: list[float], v: float) -> tuple[int, float]:
        if len(axis) == 1:
            return 0, 0.0
        i = int(np.clip(np.searchsorted(axis, v, side="right"), 1, len(axis) - 1)) - 1
        return i, (v - axis[i]) / (axis[i + 1] - axis[i])

    i, wx = segment(x, a)
    j, wy = segment(y, b)
    i1, j1 = min(i + 1, len(x) - 1), min(j + 1, len(y) - 1)
    lo = z[i][j] + (z[i1][j] - z[i][j]) * wx
    hi = z[i][j1] + (z[i1][j1] - z[i][j1]) * wx
    return max(lo + (hi - lo) * wy, 0.0)


def test_bilinear_mirror_by_hand():
    # Guards the measuring stick itself: inside, past an edge, and a single-point axis.
    z = [[0.0, 10.0], [100.0, 110.0]]
    assert bilinear([0, 10], [0, 1], z, 5, 0.5) == pytest.approx(55.0)
    assert bilinear([0, 10], [0, 1], z, 20, 0) == pytest.approx(200.0)
    assert bilinear([0, 10], [0, 1], z, -20, 0) == 0.0
    assert bilinear([3], [0, 1], [[4.0, 8.0]], 99, 0.25) == pytest.approx(5.0)


@pytest.fixture(scope="session")
def aic_cache(tmp_path_factory) -> Path:
    """One tables cache for the whole session: every configuration is built once."""
    return tmp_path_factory.mktemp("dynosim-cache")


@pytest.fixture(scope="session")
def qwen_table(aic_cache):
    """Qwen3-32B, h200_sxm, trtllm, TP1 tables (built once per session, ~2 s)."""
    if not have("aiconfigurator_core"):
        pytest.skip("needs the aic extra")
    return aic_table_timing(AicTiming(**QWEN, tp=1), cache_dir=aic_cache)


@pytest.fixture(scope="session")
def aic_engine():
    """AIC's engine for Qwen3-32B on h200_sxm, trtllm, TP1, to check the tables against."""
    if not have("aiconfigurator_core"):
        pytest.skip("needs the aic extra")
    from aiconfigurator_core.sdk.engine import EngineHandle

    return EngineHandle.compile("Qwen/Qwen3-32B", "h200_sxm", "trtllm", tp_size=1)


def _at(table: TableTiming, phase: str, a: float, b: float) -> float:
    if phase == "prefill":
        return bilinear(table.prefill_tokens, table.prefill_batch, table.prefill_ms, a, b)
    return bilinear(table.decode_batch, table.decode_context, table.decode_ms, a, b)


# ---- the tables -------------------------------------------------------------------------------


@needs_aic
@pytest.mark.parametrize(
    ("tp", "prefill_1x1024", "decode_64_at_4096"), [(1, 102.1, 35.9), (2, 55.9, 20.2)]
)
def test_tables_hold_known_step_times(aic_cache, qwen_table, tp, prefill_1x1024, decode_64_at_4096):
    # AIConfigurator's step times (ms) for Qwen3-32B bf16 on h200_sxm with trtllm: one
    # 1024-token prefill, and a decode pass of 64 requests at 4096 tokens of context.
    table = (
        qwen_table if tp == 1 else aic_table_timing(AicTiming(**QWEN, tp=tp), cache_dir=aic_cache)
    )
    assert _at(table, "prefill", 1024, 1) == pytest.approx(prefill_1x1024, abs=0.05)
    assert _at(table, "decode", 64, 4096) == pytest.approx(decode_64_at_4096, abs=0.05)


@needs_aic
def test_grid_points_are_aic_queries_in_grid_terms(qwen_table, aic_engine):
    t = qwen_table
    # Prefill: T tokens over b requests is b prompts of T / b tokens each.
    assert _at(t, "prefill", 8 * 1024, 8) == aic_engine.predict_prefill_latency(8, 1024)
    # b does not divide T (1024 / 3 = 341.33): a third of the way from 341 to 342 tokens.
    lo, hi = (aic_engine.predict_prefill_latency(3, n) for n in (341, 342))
    assert 3 in t.prefill_batch and 1024 in t.prefill_tokens
    assert _at(t, "prefill", 1024, 3) == pytest.approx(lo + (hi - lo) / 3, rel=1e-12)
    # T < b cannot happen; those points repeat b = T so the edge interpolates smoothly.
    row = t.prefill_ms[t.prefill_tokens.index(2)]
    assert row[t.prefill_batch.index(8)] == row[t.prefill_batch.index(2)]
    # Decode context c counts this step's token: AIC's step at s = isl + 1, so isl = c - 1.
    assert _at(t, "decode", 64, 4096) == aic_engine.decode_step_latency(64, 4095, 1)
    assert _at(t, "decode", 64, 4096) != aic_engine.decode_step_latency(64, 4096, 1)


@needs_aic
def test_tables_follow_aic_between_grid_points(qwen_table, aic_engine):
    # Random off-grid shapes of the kind a replay produces. The refinement targets 1 % along its
    # probe lines; AIC's own steps (decode +13 % from batch 160 to 161) bound the rest. This
    # sample: prefill mean 0.24 %, max 2.5 %; decode mean 0.12 %, max 1.8 %. Over 3,000 points
    # with batches to 512: prefill max 8.2 % (p99 3.0 %), decode max 2.6 % (p99 1.1 %).
    rng = np.random.default_rng(4)
    prefill, decode = [], []
    for _ in range(400):
        b = int(np.exp(rng.uniform(0, np.log(256))))
        isl = int(np.exp(rng.uniform(0, np.log(32768 // b))))
        truth = aic_engine.predict_prefill_latency(b, isl)
        prefill.append(abs(_at(qwen_table, "prefill", b * isl, b) / truth - 1))
        c = int(np.exp(rng.uniform(np.log(2), np.log(40960))))
        truth = aic_engine.decode_step_latency(b, c - 1, 1)
        decode.append(abs(_at(qwen_table, "decode", b, c) / truth - 1))
    assert np.mean(prefill) < 0.005 and np.percentile(prefill, 95) < 0.02
    assert max(prefill) < 0.05
    assert np.mean(decode) < 0.003 and max(decode) < 0.03


@needs_aic
def test_axes_gain_points_on_both_sides_of_aic_steps(qwen_table):
    # AIC's GEMM tables step between 160 and 161 tokens; the refinement brackets the step.
    assert {160, 161} <= {int(b) for b in qwen_table.decode_batch}
    for axis in (qwen_table.prefill_tokens, qwen_table.decode_context):
        assert axis[0] == 1 and axis[-1] == aic_tables.MAX_TOKENS
        assert all(a < b for a, b in itertools.pairwise(axis))
    assert len(qwen_table.decode_batch) <= aic_tables.MAX_AXIS_POINTS


def test_refine_axis_by_hand():
    # A step of 1 -> 2 between 5 and 6 on 1..10: the seed 1, 10 gains 5 and 6 and nothing else
    # is needed to be exact; a linear function adds nothing.
    step = [lambda x: 1.0 if x <= 5 else 2.0]
    assert aic.refine_axis([1, 10], list(range(1, 11)), step, 0.01) == [1, 5, 6, 10]
    assert aic.refine_axis([1, 10], list(range(1, 11)), [lambda x: 3.0 * x], 0.01) == [1, 10]
    assert len(aic.refine_axis([1, 10], list(range(1, 11)), step, 0.01, max_points=3)) == 3


def test_ladder():
    assert aic.ladder(64) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]


# ---- the cache --------------------------------------------------------------------------------


@needs_aic
def test_second_identical_call_makes_no_aic_call(aic_cache, qwen_table, monkeypatch):
    from aiconfigurator_core.sdk.engine import EngineHandle

    def forbidden(*args, **kwargs):
        raise AssertionError("AIConfigurator was called on a cache hit")

    monkeypatch.setattr(EngineHandle, "compile", classmethod(forbidden))
    monkeypatch.setattr(EngineHandle, "__init__", forbidden)
    monkeypatch.setattr(aic_tables, "build_tables", forbidden)
    again = aic_table_timing(AicTiming(**QWEN), cache_dir=aic_cache)
    assert again == qwen_table
    files = list((aic_cache / "aic").glob("Qwen--Qwen3-32B_h200_sxm_trtllm-1.3.0rc20_tp1_*.npz"))
    assert len(files) == 1


@needs_aic
def test_cache_key_holds_every_input(monkeypatch):
    target = aic.resolve_aic_timing(AicTiming(**QWEN))
    assert target.backend_version == "1.3.0rc20"  # AIC's "current" slot for trtllm on h200_sxm
    assert target.aic_version == aic.aic_version()
    names = {
        AicTarget(**{**target.__dict__, field: value}).file_name()
        for field, value in [
            ("model_name", "Qwen/Qwen3-8B"),
            ("system", "h100_sxm"),
            ("backend", "vllm"),
            ("backend_version", "1.3.0rc23"),
            ("tp", 2),
            ("aic_version", "0.12.1"),
            ("grid_version", aic.GRID_VERSION + 1),
        ]
    }
    assert len(names | {target.file_name()}) == 8


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("DYNOSIM_CACHE_DIR", str(tmp_path / "c"))
    assert aic.default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("DYNOSIM_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert aic.default_cache_dir() == tmp_path / ".cache" / "dynosim"


def _tiny_table(scale: float = 1.0) -> TableTiming:
    return TableTiming(
        prefill_tokens=np.array([1.0, 100.0]),
        prefill_batch=np.array([1.0]),
        prefill_ms=np.array([[1.0], [2.0]]) * scale,
        decode_batch=np.array([1.0, 8.0]),
        decode_context=np.array([10.0, 20.0, 30.0]),
        decode_ms=np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]) * scale,
    )


@needs_aic
def test_unreadable_cache_file_is_rebuilt(tmp_path, monkeypatch):
    spec = AicTiming(**QWEN)
    path = aic.table_cache_path(aic.resolve_aic_timing(spec), tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not an npz")
    monkeypatch.setattr(aic_tables, "build_tables", lambda target: (_tiny_table(2.0), {}))
    with pytest.warns(UserWarning, match="unreadable cached AIC table"):
        assert aic_table_timing(spec, cache_dir=tmp_path) == _tiny_table(2.0)
    monkeypatch.setattr(aic_tables, "build_tables", lambda target: pytest.fail("rebuilt twice"))
    assert aic_table_timing(spec, cache_dir=tmp_path) == _tiny_table(2.0)


# ---- the .npz format --------------------------------------------------------------------------


def test_save_timing_table_writes_the_field_arrays(tmp_path):
    path = save_timing_table(_tiny_table(), tmp_path / "grid")  # no suffix added
    assert path == tmp_path / "grid" and path.exists()
    with np.load(path) as npz:
        assert sorted(npz.files) == sorted(dynosim.config.TABLE_ARRAYS)
        assert npz["decode_ms"].shape == (2, 3)
        assert npz["prefill_ms"].dtype == np.float64
        np.testing.assert_array_equal(npz["decode_context"], [10.0, 20.0, 30.0])


def test_saved_table_loads_back_equal(tmp_path):
    if not hasattr(dynosim.config, "load_timing_table"):
        pytest.skip("dynosim.config.load_timing_table has not landed")
    path = save_timing_table(_tiny_table(), tmp_path / "grid.npz")
    assert dynosim.config.load_timing_table(path) == _tiny_table()


# ---- errors -----------------------------------------------------------------------------------


def test_missing_extra_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'dynosim\[aic\]'"):
        aic_table_timing(AicTiming(**QWEN))
    with pytest.raises(ImportError):  # MissingExtraError is an ImportError too
        aic.supported_models()


@pytest.fixture
def no_engine(monkeypatch):
    """Unsupported inputs must be refused before any AIC engine is built."""
    if not have("aiconfigurator_core"):
        pytest.skip("needs the aic extra")
    from aiconfigurator_core.sdk.engine import EngineHandle

    def forbidden(*args, **kwargs):
        raise AssertionError("an engine was built for an unsupported input")

    monkeypatch.setattr(EngineHandle, "compile", classmethod(forbidden))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_name": "Foo/Bar"}, r"no model 'Foo/Bar'; supported models: .*Qwen/Qwen3-32B"),
        ({"system": "h999"}, r"system 'h999' is unknown to AIC; systems with data: .*h200_sxm"),
        ({"system": "h100_pcie"}, r"'h100_pcie' has a spec but no performance data"),
        ({"system": "b60"}, r"no trtllm data for system 'b60'; backends there: vllm"),
        ({"backend_version": "9.9"}, r"no trtllm version '9.9' .*versions: 1.3.0rc20, 1.3.0rc23"),
        ({"backend_version": "previous"}, r"version 'previous' .*aliases: current=1.3.0rc20"),
        ({"tp": 16}, r"no all-reduce data for tp=16 .*supported tp: 1, 2, 4, 8"),
        ({"tp": 3}, r"tp=3 .*supported tp: 1, 2, 4, 8"),
    ],
)
def test_unsupported_combinations_fail_naming_the_value(no_engine, change, message):
    with pytest.raises(ConfigError, match=message):
        aic_table_timing(AicTiming(**{**QWEN, **change}))


def test_spec_fields_are_checked():
    with pytest.raises(ConfigError, match=r"backend: Input should be 'trtllm', 'vllm' or 'sglang'"):
        AicTiming(**{**QWEN, "backend": "tgi"})
    with pytest.raises(ConfigError, match=r"^timing.tp: must be >= 1, got 0"):  # the core's rule
        dynosim.SimConfig(timing=AicTiming(**QWEN, tp=0))
    with pytest.raises(ConfigError, match=r"extra_field: unknown field"):
        AicTiming(**QWEN, extra_field=1)
    assert AicTiming(**QWEN).model_dump()["model"] == "aic"


@needs_aic
def test_version_aliases_resolve_to_a_version():
    target = aic.resolve_aic_timing(AicTiming(**QWEN, backend_version="next"))
    assert target.backend_version == "1.3.0rc23"
    assert aic.supported_tp("gb200", "vllm", "0.24.0") == [1, 2, 4]  # a 4-GPU node


# ---- the configuration hook and parity --------------------------------------------------------


@needs_aic
def test_aic_sections_become_tables(aic_cache, qwen_table):
    config = {
        "engine": {"tensor_parallel_size": 1},
        "timing": {"model": "aic", **QWEN},
        "decode": {"timing": {"model": "aic", **QWEN, "tp": 1}, "engine": None},
        "prefill": {"timing": None},
    }
    out = aic.aic_sections_to_tables(config, cache_dir=aic_cache)
    assert out["timing"] == qwen_table.model_dump() == out["decode"]["timing"]
    assert out["prefill"] == {"timing": None}
    assert config["timing"]["model"] == "aic"  # the input is not modified
    if "tensor_parallel_size" not in dynosim.EngineConfig.model_fields:
        out["engine"] = {}
    cfg = dynosim.SimConfig.model_validate({**out, "cluster": {"mode": "disaggregated"}})
    assert cfg.decode.timing.model == "table"


def test_aic_section_tp_must_match_its_engine():
    # Checked by the core with the configuration, before any table is built.
    config = {
        "cluster": {"mode": "disaggregated"},
        "engine": {"tensor_parallel_size": 1},
        "prefill": {"timing": {"model": "aic", **QWEN, "tp": 2}},
    }
    with pytest.raises(
        ConfigError, match=r"prefill.timing.tp: 2 differs from engine.tensor_parallel_size=1"
    ):
        dynosim.SimConfig.model_validate(config)
    config["prefill"]["engine"] = {"tensor_parallel_size": 4}
    with pytest.raises(ConfigError, match=r"differs from prefill.engine.tensor_parallel_size=4"):
        dynosim.SimConfig.model_validate(config)


@needs_aic
@pytest.mark.parametrize("isl", [256, 1024, 4096])
def test_static_batch_matches_aiconfigurator(qwen_table, isl):
    """dynosim with aic timing vs AIConfigurator's static estimate (InferenceSession.run_static
    through its public ``cli_estimate(mode="static")``): 8 requests of ISL tokens arriving at once,
    OSL 128, Qwen3-32B on h200_sxm, trtllm, TP1; TTFT, TPOT and throughput within 5 %.

    TTFT: AIC's static TTFT is the context phase alone (``ttft = encoder + context latency``),
    the whole batch prefilled at once; its generation phase holds the other OSL - 1 steps and
    ``tpot = generation / (osl - 1)``. Here the budget lets all 8 prompts prefill in one pass
    (T = 8 x ISL tokens, b = 8), and a request's first token comes at the end of the pass that
    finishes its prefill, so dynosim's TTFT is that pass and likewise includes no decode step.
    Both then run OSL - 1 decode steps of batch 8; AIC prices them with a stride-32 quadrature
    (steps at context ISL + 1, + 33, + 65, + 97, each standing for 32 steps), dynosim at every
    step's own context, hence TPOT agrees to ~0.1 % rather than exactly. Throughput is
    8 x OSL / (TTFT + 127 x TPOT) on both sides (AIC's ``tokens/s`` = ``seq/s`` x OSL).
    """
    if not (hasattr(dynosim.config, "TableTiming") and have("aiconfigurator")):
        pytest.skip("needs dynosim.config.TableTiming and the aic extra")
    from aiconfigurator.cli.api import cli_estimate

    osl, batch = 128, 8
    rows = [(0.0, isl, osl, list(range(100 * i, 100 * i + -(-isl // 512)))) for i in range(batch)]
    config = {
        "cluster": {"num_workers": 1},
        "engine": {"max_num_seqs": batch, "max_num_batched_tokens": batch * isl},
        "timing": qwen_table.model_dump(),
    }
    s = dynosim.replay(make_columns(rows), config).summary
    assert s["completed_requests"] == batch and s["num_passes"] == osl  # 1 prefill + 127 decode
    assert s["ttft_ms"]["min"] == s["ttft_ms"]["max"]  # one prefill pass for all 8
    ref = cli_estimate(
        "Qwen/Qwen3-32B",
        "h200_sxm",
        mode="static",
        backend_name="trtllm",
        backend_version=aic.resolve_aic_timing(AicTiming(**QWEN)).backend_version,
        isl=isl,
        osl=osl,
        batch_size=batch,
        tp_size=1,
    ).raw
    assert s["ttft_ms"]["mean"] == pytest.approx(ref["ttft"], rel=0.05)
    assert s["tpot_ms"]["mean"] == pytest.approx(ref["tpot"], rel=0.05)
    assert s["output_token_throughput_tps"] == pytest.approx(ref["tokens/s"], rel=0.05)
    assert s["request_throughput_rps"] == pytest.approx(ref["seq/s"], rel=0.05)
