"""The ``aic`` timing model: AIConfigurator's tables, their cache, their errors, and parity with
AIConfigurator's own static estimate."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import have, make_columns, needs_aic

import dynosim
import dynosim.config
from dynosim import aic
from dynosim.aic import AicTarget, AicTiming, aic_table_timing
from dynosim.aic import tables as aic_tables
from dynosim.capacity import aic_kv_capacity
from dynosim.config import OpTables, TableTiming, save_timing_table
from dynosim.errors import ConfigError, MissingExtraError

QWEN = {"model_name": "Qwen/Qwen3-32B", "system": "h200_sxm", "backend": "trtllm"}


def multilinear(axes: list[list[float]], values: Any, point: list[float]) -> float:
    """The core's table lookup (multilinear inside, linear past the edges, >= 0), mirrored to
    measure how well a grid follows AIC between its points."""

    def segment(axis: list[float], v: float) -> tuple[int, int, float]:
        if len(axis) == 1:
            return 0, 0, 0.0
        i = int(np.clip(np.searchsorted(axis, v, side="right"), 1, len(axis) - 1)) - 1
        return i, i + 1, (v - axis[i]) / (axis[i + 1] - axis[i])

    def at(values: Any, depth: int) -> float:
        if depth == len(axes):
            return values
        lo, hi, w = segment(axes[depth], point[depth])
        a, b = at(values[lo], depth + 1), at(values[hi], depth + 1)
        return a + (b - a) * w

    return at(values, 0)


def work(n: float, p: float) -> float:
    return n * (p + (n + 1) / 2)


def pass_ms(t: OpTables, chunks: list[tuple[int, int]], decodes: int = 0, context: float = 0):
    """The core's price of a pass (mirrored): non-attention over all its tokens, the chunks'
    attention (equal chunks of the mean size, scaled by the work), the decodes' attention."""
    tokens = sum(n for n, _ in chunks) + decodes
    ms = multilinear([t.tokens], t.non_attention_ms, [tokens])
    if chunks:
        b = len(chunks)
        n, p = sum(c[0] for c in chunks) / b, sum(c[1] for c in chunks) / b
        equal = multilinear(
            [t.chunk_batch, t.chunk_tokens, t.chunk_prefix], t.context_attention_ms, [b, n, p]
        )
        ms += equal * sum(work(*c) for c in chunks) / (b * work(n, p))
    if decodes:
        ms += multilinear(
            [t.decode_batch, t.decode_context], t.decode_attention_ms, [decodes, context]
        )
    return max(ms, 0.0)


def test_multilinear_mirror_by_hand():
    # Guards the measuring stick itself: inside, past an edge, a single-point axis, 3 axes.
    z = [[0.0, 10.0], [100.0, 110.0]]
    assert multilinear([[0, 10], [0, 1]], z, [5, 0.5]) == pytest.approx(55.0)
    assert multilinear([[0, 10], [0, 1]], z, [20, 0]) == pytest.approx(200.0)
    assert multilinear([[3], [0, 1]], [[4.0, 8.0]], [99, 0.25]) == pytest.approx(5.0)
    cube = [[[x + 10 * y + 100 * z for z in (0, 1)] for y in (0, 1)] for x in (0, 1)]
    assert multilinear([[0, 1]] * 3, cube, [0.5, 0.25, 0.75]) == pytest.approx(78.0)


@pytest.fixture(scope="session")
def aic_cache(tmp_path_factory) -> Path:
    """One tables cache for the whole session: every configuration is built once."""
    return tmp_path_factory.mktemp("dynosim-cache")


def tables(aic_cache: Path, **spec: Any) -> tuple[OpTables, dict[str, Any]]:
    if not have("aiconfigurator_core"):
        pytest.skip("needs the aic extra")
    return aic_table_timing(AicTiming(**{**QWEN, **spec}), cache_dir=aic_cache)


@pytest.fixture(scope="session")
def qwen_table(aic_cache) -> OpTables:
    """Qwen3-32B, h200_sxm, trtllm, TP1 tables (built once per session, ~3 s)."""
    return tables(aic_cache, tp=1)[0]


@pytest.fixture(scope="session")
def aic_engine():
    """AIC's engine for Qwen3-32B on h200_sxm, trtllm, TP1, and its operator indices."""
    if not have("aiconfigurator_core"):
        pytest.skip("needs the aic extra")
    from aiconfigurator_core.sdk.engine import EngineHandle

    h = EngineHandle.compile("Qwen/Qwen3-32B", "h200_sxm", "trtllm", tp_size=1)
    context = [op[0] for op in h.run_static_per_op(batch_size=1, isl=8, osl=1)[0]]
    return h, [i for i, n in enumerate(context) if n != "context_attention"]


# ---- the tables -------------------------------------------------------------------------------


@needs_aic
@pytest.mark.parametrize(
    ("tp", "prefill_1x1024", "decode_64_at_4096"), [(1, 102.1, 35.9), (2, 55.9, 20.2)]
)
def test_tables_hold_known_step_times(aic_cache, tp, prefill_1x1024, decode_64_at_4096):
    # AIConfigurator's step times (ms) for Qwen3-32B bf16 on h200_sxm with trtllm: one
    # 1024-token prefill, and a decode pass of 64 requests at 4096 tokens of context. The
    # decode is priced as AIC prices a mixed step (its non-attention operators as context
    # operators over 64 tokens), 0.3 % below AIC's decode step at TP2.
    t = tables(aic_cache, tp=tp)[0]
    assert pass_ms(t, [(1024, 0)]) == pytest.approx(prefill_1x1024, abs=0.05)
    assert pass_ms(t, [], 64, 4096) == pytest.approx(decode_64_at_4096, rel=0.005)


@needs_aic
def test_grid_points_are_aic_queries_by_operator_group(qwen_table, aic_engine):
    h, non_attention = aic_engine
    t = qwen_table
    i = t.tokens.index(1024)
    ops = h.evaluate_context_ops(non_attention, batch_size=1, s=1024)
    assert t.non_attention_ms[i] == pytest.approx(sum(op[1] for op in ops), rel=1e-12)
    # Split by part (what Report.breakdown shows), summing to the whole.
    parts = {name: values[i] for name, values in t.non_attention_parts.items()}
    assert set(parts) == {"gemm", "all_reduce", "p2p", "elementwise"}
    gemms = sum(op[1] for op in ops if op[0].endswith("_gemm"))
    assert parts["gemm"] == pytest.approx(gemms, rel=1e-12)
    assert sum(parts.values()) == pytest.approx(t.non_attention_ms[i], rel=1e-12)
    # A whole prefill is its non-attention operators plus its attention, exactly.
    b, n = t.chunk_batch.index(1), t.chunk_tokens.index(1024)
    assert t.non_attention_ms[i] + t.context_attention_ms[b][n][0] == pytest.approx(
        h.predict_prefill_latency(1, 1024), rel=1e-12
    )
    # A chunk after a prefix: AIC's prefill with the prefix cached, less the non-attention.
    p = t.chunk_prefix.index(4096)
    with_prefix = h.predict_prefill_latency(1, 1024 + 4096, prefix=4096)
    assert t.non_attention_ms[i] + t.context_attention_ms[b][n][p] == pytest.approx(
        with_prefix, rel=1e-12
    )
    assert t.chunk_prefix[0] == 0


@needs_aic
def test_passes_follow_aic_between_grid_points(qwen_table, aic_engine):
    # Random off-grid passes of the kinds a replay produces, priced by the tables (through the
    # core's formula) and by AIC's own whole-pass calls. Measured on this sample (mean / max):
    # a chunk after a prefix 0.10 / 0.68 %, batches of equal prompts 0.11 / 2.5 %, decodes
    # 0.27 / 1.5 % (AIC's decode step prices non-attention operators at the decode batch, the
    # mixed step as context operators: ~0.3 % of the difference), mixed passes 0.08 / 0.5 %.
    # Over 1,500 points (seed 7): p99 0.67 / 0.64 / 1.27 / 0.53 %, max 3.2 / 4.1 / 3.0 / 3.5 %.
    h, _ = aic_engine
    rng = np.random.default_rng(4)
    err: dict[str, list[float]] = {"prefix": [], "batch": [], "decode": [], "mixed": []}
    for _ in range(150):
        n = int(np.exp(rng.uniform(0, np.log(16384))))
        p = int(np.exp(rng.uniform(0, np.log(32768))))
        truth = h.predict_prefill_latency(1, n + p, prefix=p)
        err["prefix"].append(abs(pass_ms(qwen_table, [(n, p)]) / truth - 1))
        b = int(np.exp(rng.uniform(0, np.log(64))))
        isl = int(np.exp(rng.uniform(0, np.log(8192 // b))))
        truth = h.predict_prefill_latency(b, isl)
        err["batch"].append(abs(pass_ms(qwen_table, [(isl, 0)] * b) / truth - 1))
        b = int(np.exp(rng.uniform(0, np.log(512))))
        c = int(np.exp(rng.uniform(np.log(2), np.log(40960))))
        truth = h.decode_step_latency(b, c - 1, 1)
        err["decode"].append(abs(pass_ms(qwen_table, [], b, c) / truth - 1))
        # AIC's mixed step: one chunk of ctx = isl tokens and gen decodes at isl + osl // 2 + 1.
        ctx, gen = int(np.exp(rng.uniform(np.log(16), np.log(8192)))), int(rng.integers(1, 256))
        truth = h.mixed_step_latency(ctx, gen, ctx, 2)
        err["mixed"].append(abs(pass_ms(qwen_table, [(ctx, 0)], gen, ctx + 2) / truth - 1))
    for kind, errors in err.items():
        assert np.mean(errors) < 0.01, (kind, np.mean(errors))
        assert max(errors) < 0.06, (kind, max(errors))


@needs_aic
def test_a_mixed_pass_reads_the_weights_once(qwen_table, aic_engine):
    # AIC prices a pass of a 512-token chunk and 32 decodes below the sum of a prefill pass and
    # a decode pass (the weights are read once); the tables do too, within their error.
    h, _ = aic_engine
    mixed = h.mixed_step_latency(512, 32, 512, 256)
    apart = h.predict_prefill_latency(1, 512) + h.decode_step_latency(32, 512, 256)
    ours = pass_ms(qwen_table, [(512, 0)], 32, 512 + 256 // 2 + 1)
    assert mixed < 0.95 * apart
    assert ours == pytest.approx(mixed, rel=0.02)


@needs_aic
def test_the_core_prices_passes_as_the_mirror_does(qwen_table):
    # One 1024-token prompt wanting one token: its TTFT is exactly one pass with one chunk.
    rows = [(0.0, 1024, 1, [1, 2])]
    config = {"cluster": {"num_workers": 1}, "timing": qwen_table.model_dump()}
    s = dynosim.replay(make_columns(rows), config).summary
    assert s["ttft_ms"]["mean"] == pytest.approx(pass_ms(qwen_table, [(1024, 0)]), rel=1e-12)


@needs_aic
def test_axes_span_the_grid(qwen_table):
    for axis in (qwen_table.tokens, qwen_table.chunk_tokens, qwen_table.decode_context):
        assert axis[0] == 1 and axis[-1] == aic_tables.MAX_TOKENS
        assert all(a < b for a, b in itertools.pairwise(axis))
    assert qwen_table.chunk_prefix[0] == 0 and qwen_table.chunk_prefix[-1] == aic_tables.MAX_TOKENS
    assert len(qwen_table.decode_batch) <= aic_tables.MAX_AXIS_POINTS
    assert len(qwen_table.chunk_tokens) <= aic_tables.MAX_CHUNK_AXIS_POINTS


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
    again, _ = aic_table_timing(AicTiming(**QWEN), cache_dir=aic_cache)
    assert again == qwen_table
    files = list((aic_cache / "aic").glob("Qwen--Qwen3-32B_h200_sxm_trtllm-1.3.0rc20_tp1_*.npz"))
    assert len(files) == 1


@needs_aic
def test_cache_key_holds_every_input(tmp_path):
    target = aic.resolve_aic_timing(AicTiming(**QWEN), tmp_path)
    assert target.backend_version == "1.3.0rc20"  # AIC's "current" slot for trtllm on h200_sxm
    assert target.aic_version == aic.aic_version()
    assert dict(target.pricing)["gemm"] == "1.3.0rc20"
    names = {
        AicTarget(**{**target.__dict__, field: value}).file_name()
        for field, value in [
            ("model_name", "Qwen/Qwen3-8B"),
            ("system", "h100_sxm"),
            ("backend", "vllm"),
            ("backend_version", "1.3.0rc23"),
            ("tp", 2),
            ("dp", 2),
            ("ep", 2),
            ("pricing", (("comm", "1.3.0rc20"), ("gemm", "1.2.0"))),
            ("aic_version", "0.12.1"),
            ("grid_version", aic.GRID_VERSION + 1),
        ]
    }
    assert len(names | {target.file_name()}) == 11


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("DYNOSIM_CACHE_DIR", str(tmp_path / "c"))
    assert aic.default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("DYNOSIM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert aic.default_cache_dir() == tmp_path / "xdg" / "dynosim"
    monkeypatch.setenv("HOME", str(tmp_path))
    for ignored in ("", "relative/cache"):  # unset or relative: the XDG default
        monkeypatch.setenv("XDG_CACHE_HOME", ignored)
        assert aic.default_cache_dir() == tmp_path / ".cache" / "dynosim"


def _tiny_ops(scale: float = 1.0) -> OpTables:
    return OpTables(
        tokens=[1.0, 100.0],
        non_attention_ms=[1.0 * scale, 2.0 * scale],
        chunk_batch=[1.0],
        chunk_tokens=[1.0, 100.0],
        chunk_prefix=[0.0],
        context_attention_ms=[[[0.5 * scale], [1.5 * scale]]],
        decode_batch=[1.0, 8.0],
        decode_context=[10.0, 20.0, 30.0],
        decode_attention_ms=np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]) * scale,
    )


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
@pytest.mark.parametrize("damage", ["not an npz", "truncated", "empty"])
def test_unreadable_cache_file_is_rebuilt(tmp_path, monkeypatch, damage):
    spec = AicTiming(**QWEN)
    path = aic.table_cache_path(aic.resolve_aic_timing(spec, tmp_path / "aic"), tmp_path)
    monkeypatch.setattr(aic_tables, "build_tables", lambda target: (_tiny_ops(3.0), {}))
    aic_table_timing(spec, cache_dir=tmp_path)  # a real cache file, then damaged
    whole = path.read_bytes()
    # A truncated zip (a run killed mid-copy) raised BadZipFile, an empty one EOFError.
    cut = {"not an npz": b"not an npz", "truncated": whole[: len(whole) // 2], "empty": b""}
    path.write_bytes(cut[damage])
    monkeypatch.setattr(aic_tables, "build_tables", lambda target: (_tiny_ops(2.0), {}))
    with pytest.warns(UserWarning, match="unreadable cached AIC table"):
        assert aic_table_timing(spec, cache_dir=tmp_path)[0] == _tiny_ops(2.0)
    monkeypatch.setattr(aic_tables, "build_tables", lambda target: pytest.fail("rebuilt twice"))
    assert aic_table_timing(spec, cache_dir=tmp_path)[0] == _tiny_ops(2.0)


# ---- versions and layouts ---------------------------------------------------------------------

RTX = {"model_name": "Qwen/Qwen3-32B", "system": "rtx_pro_6000_server", "backend": "vllm"}


@needs_aic
def test_each_operation_is_priced_with_the_closest_version(aic_cache):
    # rtx_pro_6000_server has vLLM 0.19.0 all-reduce measurements only; GEMM and attention
    # come from 0.24.0, the closest version that has them.
    assert aic.pricing_versions("rtx_pro_6000_server", "vllm", "0.19.0")["gemm"] == "0.24.0"
    t19, prov = tables(aic_cache, **RTX, tp=2, backend_version="0.19.0")
    assert prov["priced_by"]["comm"] == "0.19.0"
    assert prov["priced_by"]["gemm"] == prov["priced_by"]["attention"] == "0.24.0"
    t24, prov24 = tables(aic_cache, **RTX, tp=2)
    assert prov24["backend_version"] == "0.24.0" and prov24["priced_by"]["comm"] == "0.24.0"
    # vLLM's custom all-reduce of a 2-GPU rank costs more with 0.19.0's measurements (0.158 ms
    # against 0.056 ms at 1 M elements): below 8 MiB (512 tokens of 5,120 bf16 values), the
    # non-attention operators, which hold it, cost more; from 8 MiB (4,096 tokens) NCCL takes
    # the all-reduce in both, priced by the system's NCCL measurements; the attention, priced
    # by the same 0.24.0 data, is the same.
    at = {n: (t19.tokens.index(n), t24.tokens.index(n)) for n in (512, 4096)}
    assert t19.non_attention_ms[at[512][0]] > t24.non_attention_ms[at[512][1]]
    assert t19.non_attention_ms[at[4096][0]] == t24.non_attention_ms[at[4096][1]]
    assert t19.decode_attention_ms == t24.decode_attention_ms
    # AIC's own engine over the private systems folder gives the same prefill of 4 x 1024.
    from aiconfigurator_core.sdk.engine import EngineHandle

    target = aic.resolve_aic_timing(AicTiming(**RTX, tp=2, backend_version="0.19.0"), aic_cache)
    h = EngineHandle.compile(
        RTX["model_name"],
        RTX["system"],
        "vllm",
        backend_version="0.19.0",
        tp_size=2,
        systems_path=target.systems_path,
    )
    assert h.predict_prefill_latency(4, 1024) == pytest.approx(713.58, abs=0.05)


@needs_aic
def test_moe_layouts_split_the_experts(aic_cache):
    moe = {**RTX, "model_name": "Qwen/Qwen3-30B-A3B"}
    tp1, _ = tables(aic_cache, **moe, tp=1)
    dpep, prov = tables(aic_cache, **moe, tp=1, dp=2, ep=2)
    assert prov["layout"] == {"tp": 1, "dp": 2, "ep": 2}
    # A rank of a DP2+EP2 worker decoding 64 requests at 4,096 tokens: the same attention as
    # one GPU alone, half the experts (over both ranks' tokens) plus their dispatch: AIC gives
    # 43.26 ms against 57.14 ms on one GPU holding every expert.
    assert pass_ms(dpep, [], 64, 4096) == pytest.approx(43.26, rel=0.02)
    assert pass_ms(tp1, [], 64, 4096) == pytest.approx(57.14, rel=0.02)
    assert dpep.decode_attention_ms == tp1.decode_attention_ms


@needs_aic
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ep": 2}, r"timing.ep \(--ep\): expert parallelism .* Qwen/Qwen3-32B is dense"),
        (
            {"model_name": "Qwen/Qwen3-30B-A3B", "dp": 3, "ep": 3},
            r"AIConfigurator cannot .* at tp=1 dp=3 ep=3 \(--tp/--dp/--ep\)",
        ),
        (
            {"backend_version": "0.18.0"},
            r'no vllm version "0.18.0" .*measurements: .*0.19.0, 0.24.0',
        ),
    ],
)
def test_layouts_and_versions_aic_cannot_price_are_named(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message):
        aic_table_timing(AicTiming(**{**RTX, **change}), cache_dir=tmp_path)


@needs_aic
def test_kv_capacity_as_vllm_sizes_it(tmp_path):
    # Qwen3-32B at TP2 on rtx_pro_6000_server (102,641,958,912 B a GPU), vLLM, 0.9 of memory:
    # AIC's memory model takes 32.76 GB of weights, 0.22 GB of activations for a 2,048-token
    # pass, 3.76 GB for the runtime and 0.36 GB of all-reduce buffers per GPU, leaving
    # 55,281,503,436 B of KV at 131,072 B a token per GPU: 26,360 blocks of 16 tokens, one of
    # which vLLM keeps as its null block.
    cap = aic_kv_capacity(
        AicTiming(**RTX, tp=2),
        block_size=16,
        max_num_batched_tokens=2048,
        max_num_seqs=128,
        cache_dir=tmp_path,
    )
    assert cap.source == "aic" and cap.kv_bytes_per_token_per_gpu == 131_072
    assert cap.weights_bytes_per_gpu == pytest.approx(32.761e9, rel=1e-4)
    assert cap.num_gpu_blocks == int(cap.kv_memory_bytes_per_gpu // (131_072 * 16)) - 1 == 26_359
    # More memory for the engine, more blocks; a bigger pass budget, a bigger activation peak.
    more = aic_kv_capacity(
        AicTiming(**RTX, tp=2),
        block_size=16,
        max_num_batched_tokens=8192,
        max_num_seqs=128,
        gpu_memory_utilization=0.92,
        cache_dir=tmp_path,
    )
    assert more.activation_bytes > cap.activation_bytes
    assert more.num_gpu_blocks > cap.num_gpu_blocks


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
        ({"model_name": "Foo/Bar"}, r'no model "Foo/Bar"; supported models: .*Qwen/Qwen3-32B'),
        ({"system": "h999"}, r'system "h999" is unknown to AIC; systems with data: .*h200_sxm'),
        ({"system": "h100_pcie"}, r'"h100_pcie" has a spec but no performance data'),
        ({"system": "b60"}, r'no trtllm data for system "b60"; backends there: vllm'),
        ({"backend_version": "9.9"}, r'no trtllm version "9.9" .*measurements: .*1.3.0rc20'),
        ({"backend_version": "previous"}, r'version "previous" .*aliases: current=1.3.0rc20'),
        ({"tp": 16}, r"no all-reduce measurement over 16 GPUs .*measured: 1, 2, 4, 8"),
        ({"tp": 3}, r"over 3 GPUs .*measured: 1, 2, 4, 8"),
    ],
)
def test_unsupported_combinations_fail_naming_the_value(no_engine, tmp_path, change, message):
    with pytest.raises(ConfigError, match=message):
        aic_table_timing(AicTiming(**{**QWEN, **change}), cache_dir=tmp_path)


def test_spec_fields_are_checked():
    with pytest.raises(ConfigError, match=r"backend: Input should be 'trtllm', 'vllm' or 'sglang'"):
        AicTiming(**{**QWEN, "backend": "tgi"})
    with pytest.raises(
        ConfigError, match=r"^timing.tp: must be between 1 and 1,024, got 0"
    ):  # the core's rule
        dynosim.SimConfig(timing=AicTiming(**QWEN, tp=0))
    with pytest.raises(ConfigError, match=r"extra_field: unknown field"):
        AicTiming(**QWEN, extra_field=1)
    assert AicTiming(**QWEN).model_dump()["model"] == "aic"


@needs_aic
def test_version_aliases_resolve_to_a_version(tmp_path):
    target = aic.resolve_aic_timing(AicTiming(**QWEN, backend_version="next"), tmp_path)
    assert target.backend_version == "1.3.0rc23"
    assert aic.supported_tp("gb200", "vllm", "0.24.0") == [1, 2, 4]  # a 4-GPU node


# ---- the configuration hook and parity --------------------------------------------------------


@needs_aic
def test_aic_sections_become_tables(aic_cache, qwen_table):
    config = {
        "cluster": {"mode": "disaggregated"},
        "engine": {"backend": "trtllm", "tensor_parallel_size": 1},
        "timing": {"model": "aic", **QWEN},
        "decode": {"timing": {"model": "aic", **QWEN, "tp": 1}, "engine": None},
        "prefill": {"timing": None},
    }
    out, priced = aic.aic_sections_to_tables(config, cache_dir=aic_cache)
    assert out["timing"] == qwen_table.model_dump() == out["decode"]["timing"]
    assert sorted(priced) == ["decode.timing", "timing"]
    assert priced["timing"]["backend_version"] == "1.3.0rc20"
    assert out["prefill"] == {"timing": None}
    assert config["timing"]["model"] == "aic"  # the input is not modified
    if "tensor_parallel_size" not in dynosim.EngineConfig.model_fields:
        out["engine"] = {}
    cfg = dynosim.SimConfig.model_validate(out)
    assert cfg.decode.timing.model == "op_tables"


def test_aic_section_prices_its_engines_backend():
    # One setting: the engine's backend; an aic section naming another is an error naming both.
    with pytest.raises(ConfigError, match=r"timing.backend: trtllm differs from engine.backend"):
        dynosim.SimConfig.model_validate({"timing": {"model": "aic", **QWEN}})
    unset = {k: v for k, v in QWEN.items() if k != "backend"}
    config = dynosim.SimConfig.model_validate(
        {"engine": {"backend": "sglang"}, "timing": {"model": "aic", **unset}}
    )
    assert config.timing.backend is None  # prices sglang, the engine's
    with pytest.raises(ConfigError, match=r"timing\.backend: unset; in a configuration"):
        aic.resolve_aic_timing(config.timing, Path("unused"))


def test_aic_section_tp_must_match_its_engine():
    # Checked by the core with the configuration, before any table is built.
    config = {
        "cluster": {"mode": "disaggregated"},
        "engine": {"backend": "trtllm", "tensor_parallel_size": 1},
        "prefill": {"timing": {"model": "aic", **QWEN, "tp": 2}},
    }
    with pytest.raises(
        ConfigError, match=r"prefill.timing.tp: 2 differs from engine.tensor_parallel_size=1"
    ):
        dynosim.SimConfig.model_validate(config)
    config["prefill"]["engine"] = {"backend": "trtllm", "tensor_parallel_size": 4}
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
    if not have("aiconfigurator"):
        pytest.skip("needs the aic extra")
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
        backend_version="1.3.0rc20",
        isl=isl,
        osl=osl,
        batch_size=batch,
        tp_size=1,
    ).raw
    assert s["ttft_ms"]["mean"] == pytest.approx(ref["ttft"], rel=0.05)
    assert s["tpot_ms"]["mean"] == pytest.approx(ref["tpot"], rel=0.05)
    assert s["output_token_throughput_tps"] == pytest.approx(ref["tokens/s"], rel=0.05)
    assert s["request_throughput_rps"] == pytest.approx(ref["seq/s"], rel=0.05)
