"""The .npz file format of table timing: one float64 array per ``TableTiming`` field."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from dynosim._files import atomic_open, read_input
from dynosim.config.models import TABLE_ARRAYS, SimConfig, TableTiming
from dynosim.errors import ConfigError


def load_timing_table(path: str | Path) -> TableTiming:
    """A TableTiming from an .npz file holding the arrays named in ``TABLE_ARRAYS``."""
    path = Path(path)
    data = io.BytesIO(read_input(path, ConfigError, "timing table"))
    try:
        with np.load(data, allow_pickle=False) as npz:
            missing = [name for name in TABLE_ARRAYS if name not in npz.files]
            if missing:
                raise ConfigError(
                    f"{path}: timing table lacks arrays {', '.join(missing)} "
                    f"(found {', '.join(npz.files) or 'none'})"
                )
            arrays = {name: npz[name] for name in TABLE_ARRAYS}
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read the timing table: {e}") from None
    try:
        table = TableTiming(**arrays)
        # The core's value rules (increasing axes, finite latencies) too, while the file is known.
        SimConfig(timing=table)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    return table


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


__all__ = ["load_timing_table", "save_timing_table", "write_npz"]
