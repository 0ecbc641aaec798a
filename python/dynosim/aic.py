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

import hashlib
import importlib.metadata
import json
import logging
import math
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from dynosim.config import TABLE_ARRAYS, AicTiming, TableTiming
from dynosim.errors import ConfigError, MissingExtraError

#: Bumped whenever the axes or the query mapping change, so old cached tables are not reused.
GRID_VERSION = 1

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

_INSTALL = "pip install 'dynosim[aic]'"


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


@dataclass(frozen=True)
class AicTarget:
    """An :class:`AicTiming` with every input resolved: the cache key of its tables."""

    model_name: str
    system: str
    backend: str
    backend_version: str
    tp: int
    aic_version: str
    grid_version: int = GRID_VERSION

    def key(self) -> str:
        """The canonical JSON of the key (stored in the cache file and hashed into its name)."""
        return json.dumps(asdict(self), sort_keys=True)

    def file_name(self) -> str:
        """Cache file name: readable inputs plus a hash of the full key."""
        digest = hashlib.sha256(self.key().encode()).hexdigest()[:16]
        model = self.model_name.replace("/", "--")
        return (
            f"{model}_{self.system}_{self.backend}-{self.backend_version}_tp{self.tp}_{digest}.npz"
        )


def _import_aic() -> Any:
    """``aiconfigurator_core.sdk.perf_database``, or MissingExtraError saying what to install."""
    try:
        import aiconfigurator_core  # noqa: F401
        from aiconfigurator_core.sdk import perf_database
    except ImportError as e:
        raise MissingExtraError(
            f"the aic timing model needs AIConfigurator, which is not installed ({e}); "
            f"install it with: {_INSTALL}"
        ) from None
    return perf_database


def aic_version() -> str:
    """The installed ``aiconfigurator-core`` version (part of the cache key)."""
    _import_aic()
    return importlib.metadata.version("aiconfigurator-core")


def _model_configs_dir() -> Path:
    # AIC's own lookup (sdk.utils._get_model_config_path): an env override, else the package data.
    if configured := os.environ.get("AICONFIGURATOR_MODEL_CONFIGS_PATH"):
        return Path(configured)
    from importlib.resources import files

    return Path(str(files("aiconfigurator_core") / "model_configs"))


def supported_models() -> list[str]:
    """AIC model names with a bundled config (the models AIC can build without downloading)."""
    _import_aic()
    names = []
    for path in _model_configs_dir().glob("*_config.json"):
        stem = path.name.removesuffix("_config.json")
        if stem.endswith("_hf_quant"):  # a quantization sidecar, not a model
            continue
        org, sep, name = stem.partition("--")
        names.append(f"{org}/{name}" if sep else stem)
    return sorted(names)


def bundled_model_config(model_name: str) -> dict[str, Any]:
    """The Hugging Face ``config.json`` AIC bundles for ``model_name``.

    Raises:
        ConfigError: the model is not among AIC's bundled models (the message lists them).
    """
    models = supported_models()
    if model_name not in models:
        raise ConfigError(
            f"AIConfigurator has no model {model_name!r}; supported models: {', '.join(models)}"
        )
    path = _model_configs_dir() / f"{model_name.replace('/', '--')}_config.json"
    return json.loads(path.read_text())


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    # Vision-language configs nest the language model's fields under text_config.
    return {**config.get("text_config", {}), **config}


def supported_backends(system: str) -> dict[str, list[str]]:
    """``{backend: [versions]}`` AIC has performance data for on ``system``.

    Raises:
        ConfigError: the system has no performance data (the message lists the systems that do).
    """
    pdb = _import_aic()
    databases = pdb.get_supported_databases()
    if system not in databases:
        spec_only = system in _system_specs()
        why = "has a spec but no performance data in AIC" if spec_only else "is unknown to AIC"
        raise ConfigError(
            f"system {system!r} {why}; systems with data: {', '.join(sorted(databases))}"
        )
    return {b: list(v) for b, v in sorted(databases[system].items())}


def _system_specs() -> list[str]:
    pdb = _import_aic()
    names = set()
    for root in pdb.get_systems_paths():
        for path in Path(root).glob("*.yaml"):
            if "gpu" in (pdb.load_system_spec(path.stem) or {}):
                names.add(path.stem)
    return sorted(names)


def system_spec(system: str) -> dict[str, Any]:
    """AIC's hardware spec of ``system`` (``gpu.mem_capacity`` in bytes, ``node``, ...).

    Raises:
        ConfigError: AIC has no spec for the system (the message lists the systems it has).
    """
    pdb = _import_aic()
    spec = pdb.load_system_spec(system) if system else {}
    if not spec or "gpu" not in spec:
        raise ConfigError(f"AIC has no system {system!r}; systems: {', '.join(_system_specs())}")
    return spec


def _resolve_version(system: str, backend: str, requested: str | None) -> str:
    pdb = _import_aic()
    # The version slots are cheap to read; AIC's full database listing parses hundreds of YAML
    # files (seconds), so it is only consulted to explain a failure or when there are no slots.
    slots = pdb.get_version_slots(system, backend) or {}
    versions = sorted(set(slots.values()))
    if not versions:
        backends = supported_backends(system)
        if backend not in backends:
            raise ConfigError(
                f"AIC has no {backend} data for system {system!r}; backends there: "
                f"{', '.join(backends)}"
            )
        versions = backends[backend]
    if requested is None:
        # AIC's own default (get_latest_database_version): the "current" slot when slots exist.
        version = slots.get("current") or pdb.get_latest_database_version(system, backend)
    elif requested in ("current", "previous", "next"):
        version = slots.get(requested)
    else:
        version = requested
    if version is None or version not in versions:
        aliases = ", ".join(f"{k}={v}" for k, v in slots.items())
        raise ConfigError(
            f"AIC has no {backend} version {requested!r} for system {system!r}; versions: "
            f"{', '.join(versions)}" + (f" (aliases: {aliases})" if aliases else "")
        )
    return version


def _version_tuple(version: str) -> tuple[int, ...]:
    # "1.3.0rc20" -> (1, 3, 0, 0, 20); a final release sorts after its release candidates.
    head, _, rc = version.partition("rc")
    nums = [int(p) for p in head.replace("post", ".").split(".") if p.isdigit()]
    return (*nums, 0, int(rc)) if rc.isdigit() else (*nums, 1, 0)


def supported_tp(system: str, backend: str, backend_version: str) -> list[int]:
    """Tensor-parallel sizes AIC has measured all-reduce data for (plus 1, which needs none).

    AIC prices the TP all-reduce from ``comm/<backend>/<version>/custom_allreduce_perf.parquet``
    of the system, filling a version without its own file from the newest older one; beyond the
    GPU counts measured there (2, 4, 8 on an 8-GPU node) it would extrapolate, so those sizes are
    refused rather than trusted.
    """
    import pandas as pd

    pdb = _import_aic()
    spec = system_spec(system)
    want = _version_tuple(backend_version)
    best: tuple[tuple[int, ...], Path] | None = None
    for root in pdb.get_systems_paths():
        comm = Path(root) / spec.get("data_dir", "") / "comm" / backend
        for path in comm.glob("*/custom_allreduce_perf.parquet"):
            v = _version_tuple(path.parent.name)
            if v <= want and (best is None or v > best[0]):
                best = (v, path)
    sizes = {1}
    if best is not None:
        sizes |= {int(n) for n in pd.read_parquet(best[1], columns=["num_gpus"])["num_gpus"]}
    return sorted(sizes)


def resolve_aic_timing(spec: AicTiming) -> AicTarget:
    """Check that AIC supports ``spec`` and resolve its backend version; no engine is built.

    Raises:
        MissingExtraError: AIConfigurator is not installed.
        ConfigError: the model, system, backend, version or TP is not supported (the message
            names the value and lists the supported ones).
    """
    _import_aic()
    config = _text_config(bundled_model_config(spec.model_name))
    version = _resolve_version(spec.system, spec.backend, spec.backend_version)
    # tp=1 needs no all-reduce data; reading it (pandas, parquet) costs half a second.
    sizes = [1] if spec.tp == 1 else supported_tp(spec.system, spec.backend, version)
    if spec.tp not in sizes:
        raise ConfigError(
            f"AIC has no all-reduce data for tp={spec.tp} on {spec.system} with {spec.backend} "
            f"{version}; supported tp: {', '.join(map(str, sizes))}"
        )
    heads = config.get("num_attention_heads")
    if isinstance(heads, int) and heads % spec.tp:
        raise ConfigError(
            f"tp={spec.tp} does not divide the {heads} attention heads of {spec.model_name}"
        )
    return AicTarget(
        model_name=spec.model_name,
        system=spec.system,
        backend=spec.backend,
        backend_version=version,
        tp=spec.tp,
        aic_version=aic_version(),
    )


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
    _import_aic()
    from aiconfigurator_core.sdk.engine import EngineHandle

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


def save_timing_table(table: TableTiming, path: str | Path) -> Path:
    """Write ``table`` to an .npz file holding one float64 array per field (``TABLE_ARRAYS``),
    the format ``dynosim.config.load_timing_table`` reads. Returns the path."""
    path = Path(path)
    _write_npz(path, table, {})
    return path


def _write_npz(path: Path, table: TableTiming, extra: dict[str, np.ndarray]) -> None:
    arrays = {name: np.asarray(getattr(table, name), dtype=np.float64) for name in TABLE_ARRAYS}
    # Through a file object: np.savez would append ".npz" to a path lacking it.
    with open(path, "wb") as f:
        np.savez_compressed(f, **arrays, **extra)


def _write_cache(
    path: Path, table: TableTiming, target: AicTarget, provenance: dict[str, int]
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = json.dumps({"key": json.loads(target.key()), "provenance": provenance}, sort_keys=True)
    # Written beside, then renamed: a concurrent run never reads a half-written file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        _write_npz(tmp, table, {"aic_meta": np.array(meta)})
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
    the only form the Rust core reads.

    Raises:
        ConfigError: an ``aic`` section's ``tp`` differs from the ``tensor_parallel_size`` of the
            engine it times (the role's own engine section, else the shared one); the tables
            are for one TP size, so the two must agree. Also what :func:`aic_table_timing` raises.
    """
    out = dict(config)
    sections = [("", out)]
    for role in ("prefill", "decode"):
        if isinstance(out.get(role), dict):
            out[role] = dict(out[role])
            sections.append((f"{role}.", out[role]))
    for where, holder in sections:
        timing = holder.get("timing")
        if not (isinstance(timing, dict) and timing.get("model") == "aic"):
            continue
        spec = AicTiming(**timing)
        engine_where, engine = f"{where}engine", holder.get("engine")
        if not isinstance(engine, dict):
            engine_where, engine = "engine", out.get("engine")
        engine_tp = engine.get("tensor_parallel_size") if isinstance(engine, dict) else None
        if engine_tp is not None and engine_tp != spec.tp:
            raise ConfigError(
                f"{where}timing.tp={spec.tp} differs from {engine_where}.tensor_parallel_size="
                f"{engine_tp}; AIC's tables are for one TP size, set both to the same value"
            )
        holder["timing"] = aic_table_timing(spec, cache_dir=cache_dir).model_dump()
    return out


__all__ = [
    "GRID_VERSION",
    "AicTarget",
    "AicTiming",  # re-exported from dynosim.config
    "aic_sections_to_tables",
    "aic_table_timing",
    "aic_version",
    "build_tables",
    "bundled_model_config",
    "default_cache_dir",
    "ladder",
    "refine_axis",
    "resolve_aic_timing",
    "save_timing_table",
    "supported_backends",
    "supported_models",
    "supported_tp",
    "system_spec",
    "table_cache_path",
]
