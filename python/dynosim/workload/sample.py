"""The real trace sample bundled with the package (see data/ATTRIBUTION.md)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def sample_trace_path() -> Path:
    """Path of the bundled sample: the first 3,000 rows of the Mooncake conversation trace
    (Apache-2.0, Qin et al., FAST 2025), 512 tokens per hash id."""
    return Path(str(files("dynosim") / "data" / "mooncake_conversation_sample.jsonl"))


__all__ = ["sample_trace_path"]
