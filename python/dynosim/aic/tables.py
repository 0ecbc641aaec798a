"""The ``aic`` timing model: step-time tables from AIConfigurator's performance database.

AIConfigurator (AIC, the optional ``aic`` extra) predicts a GPU forward pass from kernels measured
per system, backend and version. Querying it inside the event loop would cost 3-400 us a pass, so
this module asks it once, on a fixed grid, and hands the simulator a ``table`` timing
(:class:`dynosim.config.TableTiming`) that the core interpolates. Tables are cached on disk keyed
by everything that changes them, so a second run with the same inputs makes no AIC call.

How the grid maps onto AIC's queries (read from ``aiconfigurator_core`` 0.12: ``Engine::
predict_prefill_latency`` and ``decode_step_latency`` in the compiled engine):

- ``prefill_ms[T][b]``: one pass prefilling ``b`` requests with ``T`` uncached tokens in total.
  AIC's ``predict_prefill_latency(bs, isl)`` is a static context phase of ``bs`` requests of
  ``isl`` tokens *each* (T = bs * isl). When b does not divide T, the value is interpolated
  linearly between the two integer prompt lengths around T / b. Grid points with T < b cannot
  occur (every prefilling request has a token); they hold the value at b = T so that
  interpolation next to that edge stays continuous.
- ``decode_ms[b][c]``: one decode step of ``b`` requests whose mean context, this step's token
  included, is ``c``. AIC's ``decode_step_latency(bs, isl, osl=1)`` is one step at
  ``s = isl + osl // 2 + 1`` KV positions, the same convention as its static generation phase
  (step i of a request at ``s = isl + i + 1``); so context c is queried with ``isl = c - 1``.

Grid (``GRID_VERSION`` 1). Each axis starts from the ladder 1, 2, 3, 4, 6, 8, 12, ... (powers of two
and 1.5 times them): batches to 512 (past vLLM's default ``max_num_seqs`` of 256), prefill tokens
and decode contexts to 131,072 (past the default 8,192-token pass budget, an unchunked long prompt
and the longest context of the bundled models); past the edges the core extrapolates linearly.
AIC's curves are not smooth, though: its GEMM tables step at fixed token counts (a Qwen3-32B
decode step on h200 jumps 13 % from batch 160 to 161) and its context attention changes regime
past 256 requests (+50 % from 256 to 257). So each axis is then refined greedily against AIC
itself: along three probe lines of the other axis, the candidate value whose linear
interpolation is worst is added until every probe is within ``REFINE_TOLERANCE`` (1 %) or the
axis has ``MAX_AXIS_POINTS`` points. Steps thus get a point on each side. Candidates are every
batch 1..512 and every token count to 1,024, then 1 % apart.
"""

from __future__ import annotations

import json
import logging
import math
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from dynosim._dependencies import aic_core
from dynosim.aic.database import AicTarget, resolve_aic_timing
from dynosim.config import TABLE_ARRAYS, AicTiming, TableTiming
from dynosim.config.timing_table import write_timing_table
from dynosim.errors import ConfigError

#: Largest batch on the batch axes (requests).
MAX_BATCH = 512
#: Largest prefill-token and decode-context value on the axes (tokens).
MAX_TOKENS = 131_072
#: Refinement stops once linear interpolation along every probe line is within this (relative).
REFINE_TOLERANCE = 0.01
#: Refinement stops at this many points on an axis.
MAX_AXIS_POINTS = 96
#: Probe lines of the refinement: the values of the other axis an axis is refined along.
DECODE_CONTEXT_PROBES = (256, 4096, 32768)
DECODE_BATCH_PROBES = (1, 32, 256)
PREFILL_BATCH_PROBES = (1, 8, 64)
PREFILL_TOKEN_PROBES = (1024, 8192, 65536)


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


def _token_candidates(top: int) -> list[int]:
    """Every token count to 1,024, then 1 % apart, up to ``top`` (refinement candidates)."""
    out = set(range(1, min(top, 1024) + 1))
    x = 1024.0
    while x < top:
        x *= 1.01
        out.add(min(round(x), top))
    return sorted(out)


def refine_axis(
    seed: list[int],
    candidates: list[int],
    probes: list[Any],
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
            err = np.abs(np.interp(xs, xs[idx], t[idx]) / t - 1.0)
            k = int(np.argmax(err))
            if err[k] > worst:
                worst, where = float(err[k]), cands[k]
        if where is None:
            break
        axis = sorted({*axis, where})
    return axis


def default_cache_dir() -> Path:
    """``$DYNOSIM_CACHE_DIR``, else ``~/.cache/dynosim``."""
    env = os.environ.get("DYNOSIM_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "dynosim"


def table_cache_path(target: AicTarget, cache_dir: Path | None = None) -> Path:
    """Where the tables of ``target`` are cached: ``<cache dir>/aic/<inputs>_<hash>.npz``."""
    return Path(cache_dir or default_cache_dir()) / "aic" / target.file_name()


def aic_table_timing(spec: AicTiming, *, cache_dir: Path | None = None) -> TableTiming:
    """The ``table`` timing of ``spec``, from the disk cache or built once with AIC.

    Args:
        spec: model, system, backend, backend version and TP.
        cache_dir: cache root (default :func:`default_cache_dir`); tables go to ``<root>/aic``.

    Raises:
        MissingExtraError: AIConfigurator is not installed.
        ConfigError: AIC does not support the combination, or cannot build or price it.
    """
    target = resolve_aic_timing(spec)
    path = table_cache_path(target, cache_dir)
    table = _read_cache(path, target)
    if table is None:
        table, provenance = build_tables(target)
        _write_cache(path, table, target, provenance)
    return table


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


def build_tables(target: AicTarget) -> tuple[TableTiming, dict[str, int]]:
    """Query AIC on the grid (no cache). Returns the tables and, per AIC provenance tier other
    than silicon measurements, how many queries it answered (warned about when non-empty)."""
    EngineHandle = aic_core("sdk.engine").EngineHandle

    with _quiet_aic():
        try:
            handle = EngineHandle.compile(
                target.model_name,
                target.system,
                target.backend,
                backend_version=target.backend_version,
                tp_size=target.tp,
            )
        except Exception as e:  # AIC raises bare ValueError/AssertionError for unsupported inputs
            raise ConfigError(
                f"AIConfigurator cannot build {target.model_name} on {target.system} with "
                f"{target.backend} {target.backend_version} at tp={target.tp}: {e}"
            ) from None
        aic = _Queries(handle, target)
        batches = list(range(1, MAX_BATCH + 1))
        tokens = _token_candidates(MAX_TOKENS)
        decode_batch = refine_axis(
            ladder(MAX_BATCH),
            batches,
            [partial(_along_first, aic.decode, c) for c in DECODE_CONTEXT_PROBES],
        )
        decode_context = refine_axis(
            ladder(MAX_TOKENS), tokens, [partial(aic.decode, b) for b in DECODE_BATCH_PROBES]
        )
        prefill_tokens = refine_axis(
            ladder(MAX_TOKENS),
            tokens,
            [partial(_along_first, aic.prefill, b) for b in PREFILL_BATCH_PROBES],
        )
        prefill_batch = refine_axis(
            ladder(MAX_BATCH), batches, [partial(aic.prefill, t) for t in PREFILL_TOKEN_PROBES]
        )
        prefill = [[aic.prefill(t, b) for b in prefill_batch] for t in prefill_tokens]
        decode = [[aic.decode(b, c) for c in decode_context] for b in decode_batch]
    if aic.provenance:
        warnings.warn(
            f"AIConfigurator priced part of the {target.model_name} / {target.system} grid from "
            f"data other than silicon measurements: {aic.provenance} queries by tier",
            stacklevel=2,
        )
    table = TableTiming(
        prefill_tokens=np.array(prefill_tokens, dtype=float),
        prefill_batch=np.array(prefill_batch, dtype=float),
        prefill_ms=np.array(prefill),
        decode_batch=np.array(decode_batch, dtype=float),
        decode_context=np.array(decode_context, dtype=float),
        decode_ms=np.array(decode),
    )
    return table, aic.provenance


def _along_first(fn: Any, fixed: int, value: int) -> float:
    """``fn(value, fixed)``: a probe line along the first argument of ``fn``."""
    return fn(value, fixed)


class _Queries:
    """AIC queries in the grid's terms (ms): memoised, checked, provenance counted."""

    def __init__(self, handle: Any, target: AicTarget) -> None:
        self.handle = handle
        self.target = target
        self.provenance: dict[str, int] = {}
        self._memo: dict[tuple[str, int, int], float] = {}

    def _ask(self, what: str, batch: int, length: int) -> float:
        key = (what, batch, length)
        if key in self._memo:
            return self._memo[key]
        t = self.target
        try:
            if what == "prefill":
                ms = float(self.handle.predict_prefill_latency(batch, length))
            else:
                ms = float(self.handle.decode_step_latency(batch, length, 1))
        except Exception as e:
            raise ConfigError(
                f"AIConfigurator cannot price a {what} of batch {batch}, length {length} for "
                f"{t.model_name} on {t.system}: {e}"
            ) from None
        if not math.isfinite(ms) or ms <= 0.0:
            raise ConfigError(
                f"AIConfigurator returned {ms} ms for a {what} of batch {batch}, length {length} "
                f"({t.model_name} on {t.system}); expected a positive latency"
            )
        tier = self.handle.last_provenance()
        if tier is not None:
            self.provenance[tier] = self.provenance.get(tier, 0) + 1
        self._memo[key] = ms
        return ms

    def prefill(self, tokens: int, batch: int) -> float:
        """One pass prefilling ``batch`` requests with ``tokens`` tokens in total (ms)."""
        batch = min(batch, tokens)  # T < b cannot happen; hold the b = T value (module doc)
        lo, rem = divmod(tokens, batch)
        at_lo = self._ask("prefill", batch, lo)
        if rem == 0:
            return at_lo
        # b does not divide T: between the two uniform prompt lengths around T / b.
        return at_lo + (self._ask("prefill", batch, lo + 1) - at_lo) * rem / batch

    def decode(self, batch: int, context: int) -> float:
        """One step of ``batch`` requests at mean context ``context``, its token included (ms).

        AIC's step is at s = isl + osl // 2 + 1 positions: osl = 1 and isl = context - 1."""
        return self._ask("decode", batch, max(context - 1, 0))


def _write_cache(
    path: Path, table: TableTiming, target: AicTarget, provenance: dict[str, int]
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = json.dumps({"key": json.loads(target.key()), "provenance": provenance}, sort_keys=True)
    # Written beside, then renamed: a concurrent run never reads a half-written file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write_timing_table(tmp, table, {"aic_meta": np.array(meta)})
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _read_cache(path: Path, target: AicTarget) -> TableTiming | None:
    """The cached tables of ``target``, or None when absent or unusable (then rebuilt)."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            meta = json.loads(str(npz["aic_meta"]))
            if meta.get("key") != json.loads(target.key()):
                return None
            return TableTiming(**{name: npz[name] for name in TABLE_ARRAYS})
    except (OSError, ValueError, KeyError, ConfigError) as e:
        warnings.warn(f"{path}: ignoring an unreadable cached AIC table ({e})", stacklevel=3)
        return None


def aic_sections_to_tables(config: dict[str, Any], *, cache_dir: Path | None = None) -> dict:
    """A copy of a configuration dict (``SimConfig.model_dump()``) whose ``aic`` timing sections
    (``timing``, ``prefill.timing``, ``decode.timing``) are replaced by their ``table`` timing,
    the only form the core replays. Raises what :func:`aic_table_timing` raises."""
    out = dict(config)
    holders = [out]
    for role in ("prefill", "decode"):
        if isinstance(out.get(role), dict):
            out[role] = dict(out[role])
            holders.append(out[role])
    for holder in holders:
        timing = holder.get("timing")
        if isinstance(timing, dict) and timing.get("model") == "aic":
            spec = AicTiming(**timing)
            holder["timing"] = aic_table_timing(spec, cache_dir=cache_dir).model_dump()
    return out


__all__ = [
    "aic_sections_to_tables",
    "aic_table_timing",
    "build_tables",
    "default_cache_dir",
    "ladder",
    "refine_axis",
    "table_cache_path",
]
