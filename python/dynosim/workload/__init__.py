"""Workloads: the requests a simulation replays, from a trace file or generated synthetically.

A workload turns into :class:`TraceColumns`, the columnar form the Rust core consumes: one arrival
time (ms), input length and output length (tokens) per request, plus the prefix hash ids of each
request's prompt blocks in CSR layout. Two trace formats are read: Mooncake JSONL
(:mod:`dynosim.workload.mooncake`) and Azure CSV (:mod:`dynosim.workload.azure`). A measured
benchmark run (:mod:`dynosim.workload.measured`: AIPerf or ``vllm bench serve`` records) gives
columns to replay and the latencies it measured.
"""

from typing import TYPE_CHECKING, Any

from dynosim._lazy import lazy_names

if TYPE_CHECKING:
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

#: The public names, imported on first use from the module that defines them (the command
#: line reads a measured run's formats without pydantic's synthetic models).
_LAZY = {
    "TraceColumns": "dynosim.workload.columns",
    "MeasuredRun": "dynosim.workload.measured",
    "load_measured": "dynosim.workload.measured",
    "sample_trace_path": "dynosim.workload.sample",
    **dict.fromkeys(
        (
            "EmpiricalLength",
            "LengthSpec",
            "LognormalLength",
            "NormalLength",
            "SyntheticWorkload",
            "UniformLength",
        ),
        "dynosim.workload.synthetic",
    ),
    "TraceWorkload": "dynosim.workload.trace",
    "load_trace": "dynosim.workload.trace",
}


_load, _listing = lazy_names(__name__, _LAZY, globals())


def __getattr__(name: str) -> Any:
    if name != "Workload":
        return _load(name)
    from typing import Annotated

    from pydantic import Field

    value: Any = Annotated[
        _load("TraceWorkload") | _load("SyntheticWorkload"), Field(discriminator="kind")
    ]
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*_listing(), "Workload"})


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
