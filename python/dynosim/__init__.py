"""dynosim: a fast, exact, deterministic LLM-serving simulator.

Replay a request trace on a simulated GPU cluster and read what the deployment would do::

    import dynosim
    report = dynosim.replay(dynosim.load_trace("trace.jsonl"), {"cluster": {"num_workers": 4}})
    print(report.summary["ttft_ms"]["p99"])
"""

from importlib.metadata import PackageNotFoundError, version

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
    RenderedManifest,
    RenderOptions,
    WorkerRole,
    load_candidate,
    lower_workload,
    render_dgd,
)
from dynosim.errors import (
    ConfigError,
    DynosimError,
    ManifestError,
    MissingExtraError,
    SimulationError,
    WorkloadError,
)
from dynosim.links import max_min_rates
from dynosim.manifest import Problem, validate_manifest
from dynosim.replay import replay
from dynosim.report import REJECT_REASONS, Report
from dynosim.samples import sample_trace_path
from dynosim.workload import SyntheticWorkload, TraceColumns, TraceWorkload, load_trace

try:
    __version__ = version("dynosim")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0+unknown"

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
    "MissingExtraError",
    "OffloadConfig",
    "PolynomialTiming",
    "Problem",
    "RenderOptions",
    "RenderedManifest",
    "Report",
    "ReportConfig",
    "RoleConfig",
    "SimConfig",
    "SimulationError",
    "SlaConfig",
    "SyntheticWorkload",
    "TableTiming",
    "TraceColumns",
    "TraceWorkload",
    "WorkerRole",
    "WorkloadError",
    "load_candidate",
    "load_config",
    "load_timing_table",
    "load_trace",
    "lower_workload",
    "max_min_rates",
    "render_dgd",
    "replay",
    "sample_trace_path",
    "validate_manifest",
]
