"""The schema of a saved report (``Report.to_json``), checked whole before a report is read
back: every part, field and column of the right type and shape, so a damaged or hand-edited
report is refused naming what is wrong (``summary.ttft_ms.p99: expected a number``) instead of
failing somewhere in a page it feeds. The summary mirrors the core's ``Summary`` (its fields
and their types); a test holds the two together on reports of every kind."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import ConfigDict, Field, model_validator

from dynosim import _core
from dynosim._validation import Problems, StrictModel
from dynosim.config import SimConfig
from dynosim.errors import ConfigError, ReportError

#: A count of the summary (the core's u64).
Count = Annotated[int, Field(ge=0, le=2**64 - 1, strict=True)]
#: A finite number (an integer is one; a bool or a string is not).
Real = Annotated[float, Field(strict=True, allow_inf_nan=False)]
#: A number of the summary; null where the core had NaN (the statistics of no values).
Number = Real | None


class ReportProblems(Problems, ReportError):
    """A saved report failed its schema; ``problems`` names each field."""


class _Part(StrictModel):
    _error: ClassVar[type[Problems]] = ReportProblems


class Distribution(_Part):
    count: Count
    mean: Number
    std: Number
    min: Number
    max: Number
    p50: Number
    p75: Number
    p90: Number
    p95: Number
    p99: Number


class Cdf(_Part):
    ms: list[Real]
    share: list[Real]

    @model_validator(mode="after")
    def _pairs(self) -> Cdf:
        if len(self.ms) != len(self.share):
            raise ReportProblems([("share", f"expected {len(self.ms)} values (one per ms)")])
        return self


class LaneSummary(_Part):
    flows: Count
    bytes: Real
    landed: Count
    flow_ms: Real
    mean_flow_ms: Real


class TierFlows(_Part):
    g1_to_g2: LaneSummary
    g2_to_g3: LaneSummary
    g2_to_g1: LaneSummary
    g3_to_g1: LaneSummary


class TierLinkUse(_Part):
    g1_to_g2: Real
    g2_to_g1: Real
    g2_to_g3: Real
    g3_to_g2: Real


class TierRoleSummary(_Part):
    g1_hit_blocks: Count
    g2_hit_blocks: Count
    g3_hit_blocks: Count
    g1_hit_tokens: Count
    g2_hit_tokens: Count
    g3_hit_tokens: Count
    num_onboards: Count
    onboard_ms: Distribution | None = None
    onboards_skipped: Count
    onboards_delayed: Count
    delayed_onboard_share: Real
    offload_wait_ms_mean: Real
    hits_cut_by_copies: Count
    blocks_lost_to_copies: Count
    offloaded_blocks: Count
    offloaded_g2_blocks: Count
    offloaded_g3_blocks: Count
    onboarded_blocks: Count
    onboarded_g2_blocks: Count
    onboarded_g3_blocks: Count
    offload_bytes: Real
    onboard_bytes: Real
    flows: TierFlows


class OffloadSummary(TierRoleSummary):
    dropped_blocks: Count
    rate_recomputations: Count
    link_utilization: TierLinkUse
    decode: TierRoleSummary | None = None


class Summary(_Part):
    num_requests: Count
    completed_requests: Count
    rejected_requests: Count
    rejections_by_reason: dict[str, Count]
    total_input_tokens: Count
    total_output_tokens: Count
    duration_ms: Real
    request_throughput_rps: Real
    output_token_throughput_tps: Real
    total_token_throughput_tps: Real
    ttft_ms: Distribution
    ttst_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    itl_cdf_ms: Cdf
    e2e_ms: Distribution
    reused_tokens: Count
    prefix_reuse_ratio: Real
    num_transfers: Count
    transfer_bytes: Real
    transfer_ms: Distribution
    link_utilization: list[Real]
    worker_busy_ms: list[Real]
    rate_recomputations: Count
    num_workers: Count
    num_gpus: Count
    gpu_hours: Real
    goodput_requests: Count
    goodput_rps: Real
    num_passes: Count
    num_preemptions: Count
    num_evictions: Count
    num_events: Count
    offload: OffloadSummary | None = None

    @model_validator(mode="after")
    def _counts_add_up(self) -> Summary:
        reasons = set(_core.reject_reason_names())
        unknown = sorted(set(self.rejections_by_reason) - reasons)
        if unknown:
            raise ReportProblems(
                [(f"rejections_by_reason.{unknown[0][:40]}", "not a reason a replay rejects for")]
            )
        if self.completed_requests + self.rejected_requests != self.num_requests:
            raise ReportProblems(
                [("completed_requests", "completed and rejected requests do not make num_requests")]
            )
        return self


#: The per-request columns every report has (numbers, null where a request never got there).
REQUEST_COLUMNS = (
    "arrival_ms",
    "first_admit_ms",
    "first_token_ms",
    "second_token_ms",
    "last_token_ms",
    "ttft_ms",
    "ttst_ms",
    "tpot_ms",
    "e2e_ms",
    "input_length",
    "output_length",
    "reused_tokens",
    "worker",
    "decode_worker",
    "transfer_bytes",
    "transfer_start_ms",
    "transfer_end_ms",
    "status",
    "reject_reason",
    "preemptions",
)
#: The columns a replay with offload tiers adds.
TIER_COLUMNS = (
    "g1_hit_blocks",
    "g2_hit_blocks",
    "g3_hit_blocks",
    "onboard_start_ms",
    "onboard_end_ms",
)
#: The columns an explained replay adds: each stage of a request's time to first token (ms).
EXPLAIN_COLUMNS = tuple(f"ttft_{stage}_ms" for stage in _core.ttft_stage_names())
#: Columns of whole numbers (the rest are times and bytes, null where missing).
_WHOLE = frozenset(
    {
        "input_length",
        "output_length",
        "reused_tokens",
        "worker",
        "decode_worker",
        "status",
        "reject_reason",
        "preemptions",
        "g1_hit_blocks",
        "g2_hit_blocks",
        "g3_hit_blocks",
    }
)


def _check_requests(
    requests: dict[str, Any], n: int, tiers: bool, explained: bool
) -> list[tuple[str, str]]:
    """Problems of the ``requests`` part: the columns of a replay (with tiers or without,
    explained or not), each of ``n`` numbers of its kind."""
    expected = (
        REQUEST_COLUMNS + (TIER_COLUMNS if tiers else ()) + (EXPLAIN_COLUMNS if explained else ())
    )
    problems: list[tuple[str, str]] = []
    missing = [c for c in expected if c not in requests]
    if missing:
        problems.append((f"requests.{missing[0]}", "required, but not given"))
    extra = [c for c in requests if c not in expected]
    if extra:
        problems.append((f"requests.{extra[0][:40]}", "unknown column"))
    for name in expected:
        column = requests.get(name)
        if name not in requests:
            continue
        if not isinstance(column, list):
            problems.append((f"requests.{name}", "expected a list of numbers"))
        elif len(column) != n:
            problems.append((f"requests.{name}", f"expected {n:,} values (summary.num_requests)"))
        else:
            whole = name in _WHOLE
            for i, v in enumerate(column):
                ok = type(v) is int if whole else (v is None or type(v) in (int, float))
                if not ok or (whole and not -(2**31) <= v < 2**32):
                    kind = "a whole number" if whole else "a number or null"
                    problems.append((f"requests.{name}[{i}]", f"expected {kind}"))
                    break
    return problems


def _check_series(series: dict[str, Any]) -> list[tuple[str, str]]:
    """Problems of the ``timeseries`` part: its bucket width and times, then each series as
    ``{"mean", "min", "max"}`` with one value (or one row of equal width) per bucket."""
    problems: list[tuple[str, str]] = []
    for key in ("sample_interval_ms", "interval_ms"):
        value = series.get(key)
        if type(value) not in (int, float) or not value > 0:
            problems.append((f"timeseries.{key}", "expected a number > 0"))
    times = series.get("time_ms")
    if not isinstance(times, list) or any(type(t) not in (int, float) for t in times):
        return [*problems, ("timeseries.time_ms", "expected a list of numbers")]
    for name, part in series.items():
        if name in ("sample_interval_ms", "interval_ms", "time_ms"):
            continue
        where = f"timeseries.{name[:40]}"
        if not isinstance(part, dict) or sorted(part) != ["max", "mean", "min"]:
            problems.append((where, 'expected {"mean", "min", "max"}'))
            continue
        for stat, values in part.items():
            if not isinstance(values, list) or len(values) != len(times):
                problems.append((f"{where}.{stat}", f"expected {len(times):,} values (time_ms)"))
                break
            rows = values if values and isinstance(values[0], list) else [values]
            width = len(rows[0]) if rows is not values else None
            bad = any(
                not isinstance(row, list)
                or (width is not None and len(row) != width)
                or any(v is not None and type(v) not in (int, float) for v in row)
                for row in rows
            )
            if bad:
                problems.append((f"{where}.{stat}", "expected numbers, or rows of one width"))
                break
    return problems


class KindSummary(_Part):
    passes: Count
    mean_ms: Real
    p99_ms: Real
    parts_mean_ms: dict[str, Real]


class RankBreakdown(_Part):
    role: str
    worker: Count
    dp_rank: Count
    passes: dict[str, KindSummary]


class StageMean(_Part):
    stage: str
    mean_ms: Real


class Breakdown(_Part):
    """Where an explained replay's time went (the core's ``Breakdown``)."""

    parts: dict[str, list[str]]
    ranks: list[RankBreakdown]
    ttft_stages: list[StageMean]


class Provenance(_Part):
    """What made the report; fields it does not know are kept (derived settings' details)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    dynosim_version: str | None = None
    config_sha256: str | None = None
    trace: dict[str, str] | None = None
    timing: dict[str, Any] | None = None
    kv_capacity: dict[str, Any] | None = None


def check_report(data: dict[str, Any]) -> SimConfig:
    """Check a saved report of this format version against the schema (the ``format`` part
    is checked by the caller); ReportError naming every part found wrong, at most one problem
    per column or series. Returns the report's configuration, validated."""
    problems: list[tuple[str | None, str]] = []
    parts = ("format", "summary", "config", "requests", "timeseries", "provenance", "breakdown")
    extra = [k for k in data if k not in parts]
    if extra:
        problems.append((str(extra[0])[:40], "unknown part"))
    summary = None
    try:
        summary = Summary.model_validate(data.get("summary"))
    except ReportProblems as e:
        problems += [(f"summary.{p}" if p else "summary", m) for p, m in e.problems]
    try:
        config = SimConfig.model_validate(data.get("config"))
    except ConfigError as e:
        problems.append(("config", str(e)))
        config = None
    if "provenance" in data:
        try:
            Provenance.model_validate(data["provenance"])
        except ReportProblems as e:
            problems += [(f"provenance.{p}" if p else "provenance", m) for p, m in e.problems]
    explained = config is not None and config.report.explain
    if explained != ("breakdown" in data):
        problems.append(("breakdown", "expected exactly when config.report.explain is on"))
    elif explained:
        try:
            Breakdown.model_validate(data["breakdown"])
        except ReportProblems as e:
            problems += [(f"breakdown.{p}" if p else "breakdown", m) for p, m in e.problems]
    requests, series = data.get("requests"), data.get("timeseries")
    if not isinstance(requests, dict):
        problems.append(("requests", "expected an object of columns"))
    elif summary is not None and config is not None:
        problems += _check_requests(
            requests, summary.num_requests, config.offload.g2_blocks is not None, explained
        )
    if not isinstance(series, dict):
        problems.append(("timeseries", "expected an object of series"))
    else:
        problems += _check_series(series)
    if problems or config is None:
        raise ReportProblems(problems)
    return config


__all__ = [
    "EXPLAIN_COLUMNS",
    "REQUEST_COLUMNS",
    "TIER_COLUMNS",
    "ReportProblems",
    "Summary",
    "check_report",
]
