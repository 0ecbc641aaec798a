"""The .npz file formats of table timing (one float64 array per ``TableTiming`` field) and of a
mixed-pass decode attention profile (``MIXED_DECODE_ARRAYS``)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from dynosim._files import atomic_open, read_input
from dynosim.config.models import (
    TABLE_ARRAYS,
    MixedDecodeAttention,
    OpTables,
    SimConfig,
    TableTiming,
)
from dynosim.errors import ConfigError


def _read_npz(path: Path, names: tuple[str, ...], what: str) -> dict[str, np.ndarray]:
    """The float64 arrays ``names`` of the .npz file ``path`` (a ``what``); ConfigError names
    the file and what is missing or unreadable."""
    data = io.BytesIO(read_input(path, ConfigError, what))
    try:
        with np.load(data, allow_pickle=False) as npz:
            missing = [name for name in names if name not in npz.files]
            if missing:
                raise ConfigError(
                    f"{path}: a {what} lacks arrays {', '.join(missing)} "
                    f"(found {', '.join(npz.files) or 'none'})"
                )
            return {name: np.asarray(npz[name], dtype=np.float64) for name in names}
    except (OSError, ValueError, TypeError) as e:
        raise ConfigError(f"{path}: cannot read the {what}: {e}") from None


def load_timing_table(path: str | Path) -> TableTiming:
    """A TableTiming from an .npz file holding the arrays named in ``TABLE_ARRAYS``."""
    path = Path(path)
    arrays = _read_npz(path, TABLE_ARRAYS, "timing table")
    try:
        table = TableTiming(**arrays)
        # The core's value rules (increasing axes, finite latencies) too, while the file is known.
        SimConfig(timing=table)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    return table


#: The arrays of a mixed-pass decode attention profile: four axes and the times on them.
MIXED_DECODE_ARRAYS = ("batch", "context", "prefill_tokens", "heads", "ms")


def load_mixed_decode_profile(path: str | Path) -> dict[str, np.ndarray]:
    """A profile of the attention of the decode rows in passes that also prefill, measured on
    one GPU (an .npz of float64 arrays):

    - ``batch``: decode rows in the pass; ``context``: their mean context (tokens, this step's
      included); ``prefill_tokens``: prefill tokens in the pass; ``heads``: query heads on the
      GPU (a model's attention heads over its tensor parallelism): each axis strictly
      increasing;
    - ``ms``: ``[batch][context][prefill_tokens][heads]``, the decode rows' attention in ONE
      attention layer (ms), for the head size and KV-head grouping of the model it is used with.

    Returns the arrays by name; ConfigError names the file and what is wrong.
    """
    path = Path(path)
    arrays = _read_npz(path, MIXED_DECODE_ARRAYS, "mixed decode profile")
    axes = MIXED_DECODE_ARRAYS[:4]
    shape = tuple(arrays[a].size for a in axes)
    for a in axes:
        if arrays[a].ndim != 1:
            raise ConfigError(f"{path}: array {a} must be 1-D, got shape {arrays[a].shape}")
    if arrays["ms"].shape != shape:
        raise ConfigError(
            f"{path}: array ms must have shape {shape} (batch x context x prefill_tokens x "
            f"heads), got {arrays['ms'].shape}"
        )
    heads = arrays["heads"]
    if not (np.all(np.isfinite(heads)) and np.all(heads > 0) and np.all(np.diff(heads) > 0)):
        raise ConfigError(
            f"{path}: array heads must be positive and strictly increasing, got {heads.tolist()}"
        )
    # The other axes and the times follow the core's rules for the table they become.
    for k in range(heads.size):
        try:
            SimConfig(timing=_with_mixed_decode(mixed_decode_slice(arrays, k)))
        except ConfigError as e:
            raise ConfigError(f"{path} (heads {heads[k]:g}): {e}") from None
    return arrays


def mixed_decode_slice(arrays: dict[str, np.ndarray], heads: float) -> MixedDecodeAttention:
    """The 3-D table of a profile (``load_mixed_decode_profile``) at ``heads`` query heads per
    GPU: interpolated linearly along the heads axis (extended linearly past its ends, constant
    when it has one point); an integer index picks that point."""
    h, ms = arrays["heads"], arrays["ms"]
    if isinstance(heads, int):
        table = ms[..., heads]
    elif h.size == 1:
        table = ms[..., 0]
    else:
        i = int(np.clip(np.searchsorted(h, heads, side="right") - 1, 0, h.size - 2))
        w = (heads - h[i]) / (h[i + 1] - h[i])
        table = ms[..., i] + (ms[..., i + 1] - ms[..., i]) * w
    return MixedDecodeAttention(
        batch=arrays["batch"],
        context=arrays["context"],
        prefill_tokens=arrays["prefill_tokens"],
        ms=table,
    )


def _with_mixed_decode(table: MixedDecodeAttention) -> OpTables:
    """One-point operator tables carrying ``table``: what checking it alone needs."""
    one = [1.0]
    return OpTables(
        tokens=one,
        non_attention_ms=[0.0],
        chunk_batch=one,
        chunk_tokens=one,
        chunk_prefix=[0.0],
        context_attention_ms=[[[0.0]]],
        decode_batch=one,
        decode_context=one,
        decode_attention_ms=[[0.0]],
        mixed_decode_attention=table,
    )


def write_npz(path: Path, arrays: dict[str, np.ndarray], *, fresh: bool = False) -> None:
    """Write ``arrays`` to the compressed .npz file ``path`` (exactly that name, through a
    temporary file renamed at the end; ``fresh``: a file of dynosim's own directory, created
    fresh, see :func:`dynosim._files.atomic_open`)."""
    # Through a file object: np.savez would append ".npz" to a path lacking it.
    with atomic_open(path, "wb", fresh=fresh) as f:
        np.savez_compressed(f, **arrays)


def save_timing_table(table: TableTiming, path: str | Path) -> Path:
    """Write ``table`` to an .npz file holding one float64 array per field (``TABLE_ARRAYS``),
    the format :func:`load_timing_table` reads. Returns the path."""
    path = Path(path)
    write_npz(
        path, {name: np.asarray(getattr(table, name), dtype=np.float64) for name in TABLE_ARRAYS}
    )
    return path


__all__ = [
    "MIXED_DECODE_ARRAYS",
    "load_mixed_decode_profile",
    "load_timing_table",
    "mixed_decode_slice",
    "save_timing_table",
    "write_npz",
]
