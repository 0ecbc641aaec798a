"""Workloads: the requests a simulation replays, from a trace file or generated synthetically.

A workload turns into :class:`TraceColumns`, the columnar form the Rust core consumes: one arrival
time (ms), input length and output length (tokens) per request, plus the prefix hash ids of each
request's prompt blocks in CSR layout. Two trace formats are read: Mooncake JSONL
(:mod:`dynosim.workload.mooncake`) and Azure CSV (:mod:`dynosim.workload.azure`). A measured
benchmark run (:mod:`dynosim.workload.measured`: AIPerf or ``vllm bench serve`` records) gives
columns to replay and the latencies it measured.
"""

from typing import Annotated

from pydantic import Field

from dynosim.workload.columns import TraceColumns
from dynosim.workload.measured import MeasuredRun, load_measured
from dynosim.workload.sample import sample_trace_path
from dynosim.workload.synthetic import (
    EmpiricalLength,
    LengthSpec,
    LognormalLength,
    NormalLength,
    SyntheticWorkload,
    UniformLength,
)
from dynosim.workload.trace import TraceWorkload, load_trace

#: A workload of either kind, told apart by ``kind``.
Workload = Annotated[TraceWorkload | SyntheticWorkload, Field(discriminator="kind")]

__all__ = [
    "EmpiricalLength",
    "LengthSpec",
    "LognormalLength",
    "MeasuredRun",
    "NormalLength",
    "SyntheticWorkload",
    "TraceColumns",
    "TraceWorkload",
    "UniformLength",
    "Workload",
    "load_measured",
    "load_trace",
    "sample_trace_path",
]
