"""The ``aic`` timing model: step-time tables from AIConfigurator's performance database.

AIConfigurator (AIC, the optional ``aic`` extra) predicts a GPU forward pass from kernels measured
per system, backend and version. Querying it inside the event loop would cost 3-400 us a pass, so
this module asks it once, on grids, and hands the simulator ``op_tables`` timing
(:class:`dynosim.config.OpTables`) that the core interpolates. Tables are cached on disk keyed by
everything that changes them, so a second run with the same inputs makes no AIC call.

A pass is priced as AIC prices a step that mixes prefill chunks and decodes (its
``mixed_step_breakdown``), split into three operator groups of the compiled engine:

- ``non_attention_ms[T]``: every context operator but attention (GEMMs, MoE and its dispatch,
  norms, embedding, all-reduce) at batch 1 over ``T`` tokens, T being the prefill chunk tokens
  plus one per decoding request of the pass. One pass reads the weights once, which is why a
  mixed pass costs less than a prefill pass plus a decode pass.
- ``context_attention_ms[b][n][p]``: AIC's context attention of ``b`` chunks of ``n`` new
  tokens each, after ``p`` earlier tokens each (a cached prefix, or earlier chunks of the same
  prompt). The core scales it by the pass's actual attention work over that of equal chunks.
- ``decode_attention_ms[b][c]``: AIC's generation attention of ``b`` requests at ``c`` KV
  positions (this step's token included).

AIC's own whole-pass answers decompose the same way: a prefill of ``n`` tokens is
``non_attention(n) + context_attention(1, n, 0)`` exactly, a decode step of ``b`` requests is
``non_attention(b) + decode_attention(b, c)`` (AIC's decode step prices its non-attention
operators at the decode batch, a few hundredths of a ms apart).

Layouts: a worker is ``dp`` data-parallel ranks of ``tp`` GPUs. For a mixture-of-experts model
the ranks are attention-DP ranks and the experts are split ``ep`` ways (each expert over
``tp x dp / ep`` GPUs), priced by AIC with ``attention_dp_size``, ``moe_ep_size`` and
``moe_tp_size``; tables are per rank (AIC's batch is one rank's). For a dense model DP ranks are
replicas and the tables are those of one rank.

Grids (``GRID_VERSION`` 2). Each axis starts from the ladder 1, 2, 3, 4, 6, 8, 12, ... (powers
of two and 1.5 times them; the prefix axis also has 0) and is refined greedily against AIC along
probe lines of the other axes: the candidate whose linear interpolation is worst is added until
every probe is within ``REFINE_TOLERANCE`` (1 %) or the axis has its most points. Past the
edges the core extrapolates linearly. Measured against AIC's whole-pass calls on 1,500 random
passes (Qwen3-32B, h200_sxm, trtllm; ``tests/test_aic.py``), mean / p99 / max error: a chunk
after a prefix 0.10 / 0.67 / 3.2 %, batches of equal prompts 0.09 / 0.64 / 4.1 %, decodes
0.26 / 1.27 / 3.0 %, mixed passes 0.10 / 0.53 / 3.5 %. Cold, the tables take about 3 s to
build (AIC's engine and data load included).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from dynosim._cache import default_cache_dir
from dynosim._dependencies import aic_core
from dynosim.aic.database import bundled_model_config, system_spec, text_config
from dynosim.aic.target import AicTarget, resolve_aic_timing
from dynosim.config import OP_TABLE_ARRAYS, AicTiming, OpTables, SimConfig, resolve
from dynosim.config.timing_table import (
    load_mixed_decode_profile,
    mixed_decode_slice,
    write_npz,
)
from dynosim.errors import ConfigError, warn

#: Largest decode batch on the axes (requests): past vLLM's default max_num_seqs of 256.
MAX_BATCH = 512
#: Largest chunk batch on the axes (prefill chunks in one pass).
MAX_CHUNK_BATCH = 256
#: Largest token count on the axes (tokens): past an unchunked long prompt and the longest
#: context of the bundled models.
MAX_TOKENS = 131_072
#: Refinement stops once linear interpolation along every probe line is within this (relative).
REFINE_TOLERANCE = 0.01
#: Most points of an axis of the 1-D and 2-D tables, and of the 3-D chunk-attention table.
MAX_AXIS_POINTS = 96
MAX_CHUNK_AXIS_POINTS = 40
#: Probe lines of the refinement: the values of the other axes an axis is refined along.
DECODE_CONTEXT_PROBES = (256, 4096, 32768)
DECODE_BATCH_PROBES = (1, 32, 256)
CHUNK_BATCH_PROBES = ((64, 0), (1024, 0), (256, 8192))  # (tokens, prefix)
CHUNK_TOKEN_PROBES = ((1, 0), (8, 0), (1, 8192))  # (batch, prefix)
CHUNK_PREFIX_PROBES = ((1, 256), (1, 4096), (8, 512))  # (batch, tokens)


#: Which family of AIC's measurements prices each part of a pass (``None``: AIC's own formula,
#: no measurement), for the version each part was priced with (Report.breakdown). ``nccl``
#: is the system's NCCL measurements, versioned by NCCL.
PART_FAMILIES: dict[str, str | None] = {
    "gemm": "gemm",
    "moe": "moe",
    "moe_dispatch": "nccl",
    "all_reduce": "comm",
    "all_reduce_nccl": "nccl",
    "p2p": None,
    "elementwise": None,
    "other": None,
    "graph_padding": "gemm",
    "moe_other_ranks": "moe",
    "prefill_attention": "attention",
    "decode_attention": "attention",
    "decode_spread": "attention",
    "mixed_decode_attention": "attention",
}

#: vLLM's custom all-reduce takes messages smaller than this (bytes); larger ones go to NCCL.
CUSTOM_ALL_REDUCE_MAX_BYTES = 8 * 1024 * 1024


def part_of(op: str) -> str:
    """The part of a pass an AIC context operator belongs to: ``gemm`` (every matrix multiply:
    projections, feed-forward, router, logits), ``moe`` (the experts), ``moe_dispatch`` (their
    tokens gathered from and scattered back to every rank), ``all_reduce`` (tensor-parallel
    all-reduces), ``p2p`` (pipeline sends), ``elementwise`` (norms, activations, embedding
    lookup) or ``other``."""
    name = op.removeprefix("context_")
    if name.endswith("_gemm"):
        return "gemm"
    if name.endswith("dispatch"):
        return "moe_dispatch"
    if name.endswith("_ar") or name.startswith("ar_"):
        return "all_reduce"
    if name == "p2p":
        return "p2p"
    if name == "moe":
        return "moe"
    if "norm" in name or name.startswith("act") or name == "embedding":
        return "elementwise"
    return "other"


def nccl_from_tokens(target: AicTarget, hidden_size: int) -> int | None:
    """From how many tokens a pass's tensor-parallel all-reduces go to NCCL (``None``: never;
    1: always). vLLM (the ``vllm`` backend) all-reduces a rank's bf16 activations (tokens x
    hidden size x 2 bytes) with its custom kernel when the message is below 8 MiB and the
    rank's GPUs are two, or all NVLink-connected (a system whose GPUs reach each other faster
    than over PCIe); otherwise with NCCL. AIC prices every all-reduce with its custom-kernel
    measurements; the other backends are left as AIC prices them."""
    if target.backend != "vllm" or target.tp == 1:
        return None
    node = system_spec(target.system).get("node", {})
    nvlink = node.get("intra_node_bw", 0) > node.get("pcie_bw", 0)
    if target.tp > 2 and not nvlink:
        return 1
    return -(-CUSTOM_ALL_REDUCE_MAX_BYTES // (2 * hidden_size))


def mixed_decode_factor(target: AicTarget) -> float:
    """What the decode rows of a pass that also prefills cost over their price in a pass of
    decodes only, where no measured profile says (``timing.mixed_decode_profile``).

    vLLM (the ``vllm`` backend) runs the attention of a whole pass in one FlashAttention-2
    varlen call on GPUs where it uses FlashAttention 2 (compute capability other than 9.x,
    which has FlashAttention 3, and 10.x, which has FlashInfer). In a pass of decodes only that
    kernel packs the G query heads sharing a KV head (G = attention heads / KV heads) into one
    read of it and splits long contexts over thread blocks; with a prefill row in the call it
    does neither, so each query head reads its KV head again. The decode rows then read
    between 1 time (the repeats all served by the L2 cache) and G times (none) the KV bytes
    of a pure decode, and decode attention is bound by those reads: the price here is the
    geometric middle of the bounds, sqrt(G), off by at most a factor sqrt(G) either way (2 for
    G = 4, 2.83 for G = 8). 1 for the other backends and GPUs, an MLA model, or G = 1.
    """
    if target.backend != "vllm":
        return 1.0
    if system_spec(target.system)["gpu"].get("sm_version", 0) // 10 in (9, 10):
        return 1.0
    config = text_config(bundled_model_config(target.model_name))
    heads = config.get("num_attention_heads")
    kv_heads = config.get("num_key_value_heads", heads)
    if "kv_lora_rank" in config or not heads or not kv_heads:
        return 1.0
    return math.sqrt(heads / kv_heads)


def ladder(top: int) -> list[int]:
    """1, 2, 3, 4, 6, 8, 12, ... up to ``top``: powers of two and 1.5 times them."""
    out: set[int] = set()
    p = 1
    while p <= top:
        out.add(p)
        if p >= 2 and p * 3 // 2 <= top:
            out.add(p * 3 // 2)
        p *= 2
    return sorted(out)


def candidates(top: int, every: int, step: float) -> list[int]:
    """Every integer to ``every``, then ``step`` (relative) apart, up to ``top``: the values
    refinement may add to an axis."""
    out = set(range(1, min(top, every) + 1))
    x = float(every)
    while x < top:
        x *= 1.0 + step
        out.add(min(round(x), top))
    return sorted(out)


def refine_axis(
    seed: list[int],
    candidates: list[int],
    probes: list[Callable[[int], float]],
    tolerance: float = REFINE_TOLERANCE,
    max_points: int = MAX_AXIS_POINTS,
) -> list[int]:
    """Grow the axis ``seed`` with the candidates where piecewise-linear interpolation of the
    probe functions (axis value -> ms) is worst, until every probe is within ``tolerance``
    (relative) at every candidate or the axis has ``max_points`` points."""
    axis = sorted(set(seed))
    cands = sorted(set(candidates) | set(axis))
    at = {c: i for i, c in enumerate(cands)}
    xs = np.array(cands, dtype=float)
    truth = [np.array([probe(c) for c in cands]) for probe in probes]
    while len(axis) < max_points:
        worst, where = tolerance, None
        idx = [at[a] for a in axis]
        for t in truth:
            err = np.abs(np.interp(xs, xs[idx], t[idx]) / np.maximum(t, 1e-12) - 1.0)
            k = int(np.argmax(err))
            if err[k] > worst:
                worst, where = float(err[k]), cands[k]
        if where is None:
            break
        axis = sorted({*axis, where})
    return axis


def table_cache_path(target: AicTarget, cache_dir: Path | None = None) -> Path:
    """Where the tables of ``target`` are cached: ``<cache dir>/aic/<inputs>_<hash>.npz``."""
    return Path(cache_dir or default_cache_dir()) / "aic" / target.file_name()


def provenance(target: AicTarget, path: Path) -> dict[str, Any]:
    """What priced a timing section, for the report: model, system, engine and version, the
    layout, the version whose measurements price each family of operations, AIC's version,
    and the cached tables."""
    # NCCL's measurements are versioned by NCCL's release, the system's.
    nccl = system_spec(target.system).get("misc", {}).get("nccl_version")
    versions = {**dict(target.pricing), "nccl": nccl}
    return {
        "model_name": target.model_name,
        "system": target.system,
        "backend": target.backend,
        "backend_version": target.backend_version,
        "layout": {"tp": target.tp, "dp": target.dp, "ep": target.ep},
        "priced_by": dict(target.pricing),
        "parts": {
            part: {"family": family, "version": versions.get(family)}
            for part, family in PART_FAMILIES.items()
        },
        "aic_version": target.aic_version,
        "tables": path.name,
    }


def aic_table_timing(
    spec: AicTiming, *, cache_dir: Path | None = None
) -> tuple[OpTables, dict[str, Any]]:
    """The ``op_tables`` timing of ``spec`` (from the disk cache, or built once with AIC) and
    its provenance (:func:`provenance`).

    Args:
        spec: model, system, backend, backend version and layout.
        cache_dir: cache root (default :func:`default_cache_dir`); tables go to ``<root>/aic``.

    Raises:
        MissingExtraError: AIConfigurator is not installed.
        ConfigError: AIC does not support the combination, or cannot build or price it.
    """
    root = Path(cache_dir or default_cache_dir()) / "aic"
    target = resolve_aic_timing(spec, root)
    path = table_cache_path(target, cache_dir)
    tables = _read_cache(path, target)
    if tables is None:
        tables, tiers = build_tables(target)
        _write_cache(path, tables, target, tiers)
    made = provenance(target, path)
    if spec.mixed_decode_profile is None:
        factor = mixed_decode_factor(target)
        made["mixed_decode"] = {"factor": factor}
        return tables.model_copy(update={"mixed_decode_factor": factor}), made
    table, made["mixed_decode"] = _mixed_decode_table(target, Path(spec.mixed_decode_profile))
    return tables.model_copy(update={"mixed_decode_attention": table}), made


def _mixed_decode_table(target: AicTarget, profile: Path) -> tuple[Any, dict[str, Any]]:
    """The decode rows' attention in a mixed pass of ``target``'s model, from a measured
    ``profile`` (:func:`dynosim.config.load_mixed_decode_profile`): its one-layer times at the
    rank's query heads (the model's over its TP), times the model's layers; and its
    provenance (the file, its sha256, the heads and layers used)."""
    arrays = load_mixed_decode_profile(profile)
    config = text_config(bundled_model_config(target.model_name))
    heads = config["num_attention_heads"] / target.tp
    layers = config["num_hidden_layers"]
    one = mixed_decode_slice(arrays, float(heads))
    table = one.model_copy(update={"ms": (np.asarray(one.ms) * layers).tolist()})
    digest = hashlib.sha256(profile.read_bytes()).hexdigest()
    made = {"profile": profile.name, "sha256": digest, "heads": heads, "layers": layers}
    return table, made


@contextmanager
def _quiet_aic() -> Iterator[None]:
    # AIC logs benign warnings while building an engine (no attention-lane defaults for trtllm,
    # which has one lane; fallback rows loaded for op families the model may not use). What
    # matters, data that is not a silicon measurement, is caught per query via provenance.
    logger = logging.getLogger("aiconfigurator_core")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


class _Engine:
    """AIC's compiled engine for a target, queried by operator group (ms): memoised, checked,
    provenance tiers counted."""

    def __init__(self, target: AicTarget) -> None:
        engine = aic_core("sdk.engine").EngineHandle
        self.target = target
        try:
            self.handle = engine.compile(
                target.model_name,
                target.system,
                target.backend,
                backend_version=target.backend_version,
                systems_path=target.systems_path,
                **target.aic_layout(),
            )
            context = [op[0] for op in self.handle.run_static_per_op(batch_size=1, isl=8, osl=1)[0]]
            generation = [op[0] for op in self.handle.decode_step_per_op(8, 1000, 1)]
        except Exception as e:  # AIC raises bare ValueError/AssertionError for unsupported inputs
            raise self._cannot("build", e) from None
        self.non_attention = [i for i, name in enumerate(context) if name != "context_attention"]
        self.part_of = {context[i]: part_of(context[i]) for i in self.non_attention}
        self.hidden_size = int(text_config(bundled_model_config(target.model_name))["hidden_size"])
        self.nccl_from = nccl_from_tokens(target, self.hidden_size)
        self.context_attention = [context.index("context_attention")]
        self.decode_attention = [generation.index("generation_attention")]
        self.tiers: dict[str, int] = {}
        self._memo: dict[tuple[Any, ...], float] = {}

    def _cannot(self, what: str, e: Exception) -> ConfigError:
        t = self.target
        return ConfigError(
            f"timing: AIConfigurator cannot {what} {t.model_name} on {t.system} with "
            f"{t.backend} {t.backend_version} at {t.layout()} (--tp/--dp/--ep): {e}"
        )

    def _ask_ops(self, key: tuple[Any, ...], query: Callable[[], list[Any]]) -> dict[str, float]:
        """Each operator's time in a query's answer (ms), by operator name."""
        if key in self._memo:
            return self._memo[key]
        try:
            ops = {str(op[0]): float(op[1]) for op in query()}
        except Exception as e:
            raise self._cannot(f"price {key}", e) from None
        bad = {name: ms for name, ms in ops.items() if not math.isfinite(ms) or ms < 0.0}
        if bad:
            raise self._cannot(f"price {key}", ValueError(f"got {bad} ms"))
        tier = self.handle.last_provenance()
        if tier is not None:
            self.tiers[tier] = self.tiers.get(tier, 0) + 1
        self._memo[key] = ops
        return ops

    def _ask(self, key: tuple[Any, ...], query: Callable[[], list[Any]]) -> float:
        return float(sum(self._ask_ops(key, query).values()))

    def non_attention_parts_ms(self, tokens: int) -> dict[str, float]:
        """Every operator but attention over ``tokens`` tokens (ms), summed by part
        (:func:`part_of`)."""
        h, ops = self.handle, self.non_attention
        answer = self._ask_ops(
            ("na", tokens), lambda: h.evaluate_context_ops(ops, batch_size=1, s=tokens)
        )
        parts = dict.fromkeys(sorted(set(self.part_of.values())), 0.0)
        nccl = self.nccl_from is not None and tokens >= self.nccl_from
        if self.nccl_from is not None:
            parts["all_reduce_nccl"] = 0.0
        for name, ms in answer.items():
            part = self.part_of[name]
            if nccl and part == "all_reduce" and ms > 0.0:
                part, ms = "all_reduce_nccl", self._nccl_all_reduce_ms(name, ms, tokens)
            parts[part] += ms
        return dict(sorted(parts.items()))

    def _nccl_all_reduce_ms(self, name: str, custom_ms: float, tokens: int) -> float:
        """The all-reduces of AIC operator ``name`` (``custom_ms`` with the custom kernel) over
        ``tokens`` tokens with NCCL instead (ms): as many, each priced with the system's NCCL
        all-reduce measurements for the rank's GPUs."""
        ops = aic_core("sdk.operations")
        engine = aic_core("sdk.engine")
        half = aic_core("sdk.common").CommQuantMode.half
        h, tp = self.hidden_size, self.target.tp

        def one(op: Any) -> float:
            j = engine.build_ops_json([op])
            return self._ask(
                ("op", name, type(op).__name__, tokens),
                lambda: self.handle.evaluate_ops_json(j, is_context=True, batch_size=1, s=tokens),
            )

        single = one(ops.CustomAllReduce(name, 1, h, tp))
        count = round(custom_ms / single) if single > 0 else 0
        nccl = ops.NCCL(
            name, 1, "all_reduce", num_elements_per_token=h, num_gpus=tp, comm_quant_mode=half
        )
        return count * one(nccl)

    def non_attention_ms(self, tokens: int) -> float:
        """Every operator but attention over ``tokens`` tokens (ms)."""
        return float(sum(self.non_attention_parts_ms(tokens).values()))

    def context_attention_ms(self, batch: int, tokens: int, prefix: int) -> float:
        """Attention of ``batch`` chunks of ``tokens`` new tokens after ``prefix`` (ms)."""
        h, ops = self.handle, self.context_attention
        return self._ask(
            ("ca", batch, tokens, prefix),
            lambda: h.evaluate_context_ops(ops, batch_size=batch, s=tokens, prefix=prefix),
        )

    def decode_attention_ms(self, batch: int, context: int) -> float:
        """Attention of ``batch`` decodes at ``context`` KV positions each (ms)."""
        h, ops = self.handle, self.decode_attention
        return self._ask(
            ("da", batch, context),
            lambda: h.evaluate_generation_ops(ops, batch_size=batch, s=context),
        )


def build_tables(target: AicTarget) -> tuple[OpTables, dict[str, int]]:
    """Query AIC on the grids (no cache). Returns the tables and, per AIC provenance tier other
    than silicon measurements, how many queries it answered (warned about when non-empty)."""
    with _quiet_aic():
        aic = _Engine(target)
        tokens_cands = candidates(MAX_TOKENS, 1024, 0.01)
        # Decode attention is smooth and costs ~0.4 ms a query: coarser candidates there.
        context_cands = candidates(MAX_TOKENS, 64, 0.02)
        batch_cands = candidates(MAX_BATCH, 64, 0.02)
        tokens = refine_axis(ladder(MAX_TOKENS), tokens_cands, [aic.non_attention_ms])
        decode_batch = refine_axis(
            ladder(MAX_BATCH),
            batch_cands,
            [partial(lambda c, b: aic.decode_attention_ms(b, c), c) for c in DECODE_CONTEXT_PROBES],
        )
        decode_context = refine_axis(
            ladder(MAX_TOKENS),
            context_cands,
            [partial(aic.decode_attention_ms, b) for b in DECODE_BATCH_PROBES],
        )
        chunk = {"max_points": MAX_CHUNK_AXIS_POINTS}
        chunk_batch = refine_axis(
            ladder(MAX_CHUNK_BATCH),
            list(range(1, MAX_CHUNK_BATCH + 1)),
            [
                partial(lambda n, p, b: aic.context_attention_ms(b, n, p), n, p)
                for n, p in CHUNK_BATCH_PROBES
            ],
            **chunk,
        )
        chunk_tokens = refine_axis(
            ladder(MAX_TOKENS),
            tokens_cands,
            [
                partial(lambda b, p, n: aic.context_attention_ms(b, n, p), b, p)
                for b, p in CHUNK_TOKEN_PROBES
            ],
            **chunk,
        )
        chunk_prefix = refine_axis(
            [0, *ladder(MAX_TOKENS)],
            [0, *tokens_cands],
            [partial(aic.context_attention_ms, b, n) for b, n in CHUNK_PREFIX_PROBES],
            **chunk,
        )
        parts = [aic.non_attention_parts_ms(t) for t in tokens]
        tables = OpTables(
            tokens=tokens,
            non_attention_ms=[float(sum(p.values())) for p in parts],
            non_attention_parts={name: [p[name] for p in parts] for name in parts[0]},
            chunk_batch=chunk_batch,
            chunk_tokens=chunk_tokens,
            chunk_prefix=chunk_prefix,
            context_attention_ms=[
                [[aic.context_attention_ms(b, n, p) for p in chunk_prefix] for n in chunk_tokens]
                for b in chunk_batch
            ],
            decode_batch=decode_batch,
            decode_context=decode_context,
            decode_attention_ms=[
                [aic.decode_attention_ms(b, c) for c in decode_context] for b in decode_batch
            ],
        )
    if aic.tiers:
        warn(
            f"AIConfigurator priced part of the {target.model_name} / {target.system} grid from "
            f"data other than silicon measurements: {aic.tiers} queries by tier"
        )
    return tables, aic.tiers


#: The cached array of each part of the non-attention operators is named by this prefix.
_PART_ARRAY = "non_attention_part_"


def _write_cache(path: Path, tables: OpTables, target: AicTarget, tiers: dict[str, int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = json.dumps({"key": json.loads(target.key()), "tiers": tiers}, sort_keys=True)
    arrays = {name: np.asarray(getattr(tables, name), dtype=np.float64) for name in OP_TABLE_ARRAYS}
    for part, values in tables.non_attention_parts.items():
        arrays[_PART_ARRAY + part] = np.asarray(values, dtype=np.float64)
    # Written beside, then renamed: a concurrent run never reads a half-written file. The cache
    # is dynosim's own directory: a link planted there is replaced, not followed.
    write_npz(path, {**arrays, "aic_meta": np.array(meta)}, fresh=True)


def _read_cache(path: Path, target: AicTarget) -> OpTables | None:
    """The cached tables of ``target``, or None when absent or unusable (then rebuilt)."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            meta = json.loads(str(npz["aic_meta"]))
            if meta.get("key") != json.loads(target.key()):
                return None
            parts = {
                name.removeprefix(_PART_ARRAY): npz[name]
                for name in npz.files
                if name.startswith(_PART_ARRAY)
            }
            return OpTables(
                **{name: npz[name] for name in OP_TABLE_ARRAYS}, non_attention_parts=parts
            )
    # A truncated or damaged file (a run killed while another copied it in, a full disk) is
    # no zip, an early end, or a member that does not inflate: rebuilt like a missing one.
    except (
        OSError,
        ValueError,
        KeyError,
        EOFError,
        zipfile.BadZipFile,
        zlib.error,
        ConfigError,
    ) as e:
        warn(f"{path}: ignoring an unreadable cached AIC table ({type(e).__name__}: {e})")
        return None


#: Tables (and provenance) of timing sections already resolved, or why AIC cannot build them.
TableMemo = dict[AicTiming, "tuple[OpTables, dict[str, Any]] | ConfigError"]


def aic_sections_to_tables(
    config: dict[str, Any], *, cache_dir: Path | None = None, memo: TableMemo | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A copy of a configuration dict (``SimConfig.model_dump()``) whose ``aic`` timing sections
    (``timing``, ``prefill.timing``, ``decode.timing``) are replaced by their ``op_tables``
    timing, the only form the core replays, and the provenance of each replaced section by its
    dotted path. ``memo``, kept across calls (a sweep's many candidates), resolves each
    distinct section once, failures included. Raises what :func:`aic_table_timing` raises."""
    out = dict(config)
    # An aic section without a backend prices the engine it times.
    parsed = SimConfig(**config)
    timed = {v.timing_path: v.engine.backend for v in resolve(parsed).roles.values()}
    holders = {"timing": out}
    for role in ("prefill", "decode"):
        if isinstance(out.get(role), dict):
            out[role] = dict(out[role])
            holders[f"{role}.timing"] = out[role]
    priced = {}
    for path, holder in holders.items():
        timing = holder.get("timing")
        if isinstance(timing, dict) and timing.get("model") == "aic":
            backend = timing.get("backend") or timed.get(path, parsed.engine.backend)
            spec = AicTiming(**{**timing, "backend": backend})
            memo = {} if memo is None else memo
            if spec not in memo:
                try:
                    memo[spec] = aic_table_timing(spec, cache_dir=cache_dir)
                except ConfigError as e:
                    memo[spec] = e
            found = memo[spec]
            if isinstance(found, ConfigError):
                raise found
            tables, priced[path] = found
            holder["timing"] = tables.model_dump()
    return out, priced


__all__ = [
    "PART_FAMILIES",
    "TableMemo",
    "aic_sections_to_tables",
    "aic_table_timing",
    "build_tables",
    "candidates",
    "default_cache_dir",
    "ladder",
    "mixed_decode_factor",
    "nccl_from_tokens",
    "part_of",
    "provenance",
    "refine_axis",
    "table_cache_path",
]
