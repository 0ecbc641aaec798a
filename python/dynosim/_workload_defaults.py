"""The trace formats and the workloads' defaults, read without pydantic or numpy: the workload
models (:mod:`dynosim.workload`) take them from here, and so do the commands' ``--help``, which
show them and must start fast."""

from __future__ import annotations

from typing import Literal, get_args

#: The trace file formats read: Mooncake JSONL and Azure CSV (``workload.format``).
TraceFormat = Literal["mooncake", "azure"]
TRACE_FORMATS: tuple[str, ...] = get_args(TraceFormat)

#: Prompt tokens per trace hash id unless told (512 in the public Mooncake traces).
TRACE_BLOCK_SIZE = 512

#: The seed of generated requests unless told.
SYNTHETIC_SEED = 0

__all__ = ["SYNTHETIC_SEED", "TRACE_BLOCK_SIZE", "TRACE_FORMATS", "TraceFormat"]
