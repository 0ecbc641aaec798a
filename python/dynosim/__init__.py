"""dynosim: a fast, exact, deterministic LLM-serving simulator.

Replay a request trace on a simulated GPU cluster and read what the deployment would do::

    import dynosim
    report = dynosim.replay(dynosim.load_trace("trace.jsonl"), {"cluster": {"num_workers": 4}})
    print(report.summary["ttft_ms"]["p99"])

The package is layered, data flowing one way: ``workload`` (traces and synthetic traffic, as
columns) and ``config`` (typed settings) feed ``replay``, which runs the Rust core and returns a
``report``; ``aic`` (the one place that calls AIConfigurator) builds timing tables and model
data; ``deploy`` turns a simulated candidate into a Kubernetes manifest; ``compare``, ``bench``
and ``cli`` sit on top. Every public name is imported on first use.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from dynosim._lazy import lazy_names

if TYPE_CHECKING:
    __version__: str
    VERSION: str
    from dynosim.compare.measured import compare_measured
    from dynosim.config import (
        ClusterConfig,
        EngineConfig,
        FixedTiming,
        KvShape,
        KvTransferConfig,
        OffloadConfig,
        PolynomialTiming,
        ReportConfig,
        RoleConfig,
        SimConfig,
        SlaConfig,
        TableTiming,
        load_config,
        load_timing_table,
    )
    from dynosim.deploy import (
        Candidate,
        LoweredWorkload,
        Problem,
        RenderedManifest,
        RenderOptions,
        WorkerRole,
        load_candidate,
        lower_workload,
        render_dgd,
        validate_manifest,
    )
    from dynosim.errors import (
        ConfigError,
        DynosimError,
        ManifestError,
        MissingExtraError,
        OutputError,
        ReportError,
        SimulationError,
        WorkloadError,
    )
    from dynosim.links import max_min_rates
    from dynosim.plan import PlanResult, Sla, Space, SweepResult, plan, sweep
    from dynosim.replay import replay
    from dynosim.report import REJECT_REASONS, Report, load_report
    from dynosim.workload import (
        MeasuredRun,
        SyntheticWorkload,
        TraceColumns,
        TraceWorkload,
        load_measured,
        load_trace,
        sample_trace_path,
    )

#: Every public name, imported on first use from the module that defines it: ``import
#: dynosim`` (which every command line start runs) then costs nothing of pydantic, numpy or
#: AIConfigurator until a name is used.
_LAZY = {
    **dict.fromkeys(
        (
            "ClusterConfig",
            "EngineConfig",
            "FixedTiming",
            "KvShape",
            "KvTransferConfig",
            "OffloadConfig",
            "PolynomialTiming",
            "ReportConfig",
            "RoleConfig",
            "SimConfig",
            "SlaConfig",
            "TableTiming",
            "load_config",
            "load_timing_table",
        ),
        "dynosim.config",
    ),
    **dict.fromkeys(
        (
            "Candidate",
            "LoweredWorkload",
            "Problem",
            "RenderOptions",
            "RenderedManifest",
            "WorkerRole",
            "load_candidate",
            "lower_workload",
            "render_dgd",
            "validate_manifest",
        ),
        "dynosim.deploy",
    ),
    **dict.fromkeys(
        (
            "ConfigError",
            "DynosimError",
            "ManifestError",
            "MissingExtraError",
            "OutputError",
            "ReportError",
            "SimulationError",
            "WorkloadError",
        ),
        "dynosim.errors",
    ),
    **dict.fromkeys(("PlanResult", "Sla", "Space", "SweepResult", "plan", "sweep"), "dynosim.plan"),
    **dict.fromkeys(("REJECT_REASONS", "Report", "load_report"), "dynosim.report"),
    **dict.fromkeys(
        (
            "MeasuredRun",
            "SyntheticWorkload",
            "TraceColumns",
            "TraceWorkload",
            "load_measured",
            "load_trace",
            "sample_trace_path",
        ),
        "dynosim.workload",
    ),
    "__version__": "dynosim._version",
    "VERSION": "dynosim._version",
    "compare_measured": "dynosim.compare.measured",
    "max_min_rates": "dynosim.links",
    "replay": "dynosim.replay",
}


class _Package(ModuleType):
    """This package's module type: ``dynosim.replay`` and ``dynosim.plan`` name functions, so
    importing the submodules of the same names (which sets them as attributes) leaves the
    functions in place, as when they were imported up front."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("replay", "plan") and isinstance(value, ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())


__all__ = [
    "REJECT_REASONS",
    "Candidate",
    "ClusterConfig",
    "ConfigError",
    "DynosimError",
    "EngineConfig",
    "FixedTiming",
    "KvShape",
    "KvTransferConfig",
    "LoweredWorkload",
    "ManifestError",
    "MeasuredRun",
    "MissingExtraError",
    "OffloadConfig",
    "OutputError",
    "PlanResult",
    "PolynomialTiming",
    "Problem",
    "RenderOptions",
    "RenderedManifest",
    "Report",
    "ReportConfig",
    "ReportError",
    "RoleConfig",
    "SimConfig",
    "SimulationError",
    "Sla",
    "SlaConfig",
    "Space",
    "SweepResult",
    "SyntheticWorkload",
    "TableTiming",
    "TraceColumns",
    "TraceWorkload",
    "WorkerRole",
    "WorkloadError",
    "compare_measured",
    "load_candidate",
    "load_config",
    "load_measured",
    "load_report",
    "load_timing_table",
    "load_trace",
    "lower_workload",
    "max_min_rates",
    "plan",
    "render_dgd",
    "replay",
    "sample_trace_path",
    "sweep",
    "validate_manifest",
]
