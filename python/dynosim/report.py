"""The result of a replay: per-request arrays, time series, the summary, canonical JSON, and
reading a saved one back."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import IO, Any

import numpy as np

from dynosim import _core
from dynosim._documents import DocumentError, json_document
from dynosim._files import MAX_DOCUMENT_BYTES, read_input
from dynosim._shown import shown
from dynosim.errors import ReportError

#: Machine names of rejection reasons, indexed by ``Report.requests["reject_reason"]``.
REJECT_REASONS: tuple[str, ...] = tuple(_core.reject_reason_names())

#: ``Report.requests["status"]`` codes.
STATUS_COMPLETED = 0
STATUS_REJECTED = 1

_LATENCIES = ("ttft_ms", "ttst_ms", "tpot_ms", "itl_ms", "e2e_ms")

#: What a saved report says it is. A report of another format version is refused on reading:
#: bump the version whenever a field is renamed, removed or changes meaning.
REPORT_FORMAT = "dynosim-report"
REPORT_VERSION = 1


def config_sha256(config: Mapping[str, Any]) -> str:
    """The sha256 (hex) of a configuration as canonical JSON (sorted keys, no whitespace):
    equal for equal configurations, whatever file or order they were written in."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _array(values: list[Any]) -> np.ndarray:
    """A JSON list back as a numpy array: null to NaN (so that column is float)."""
    if any(v is None for v in values):
        return np.array([math.nan if v is None else v for v in values], dtype=float)
    return np.array(values)


def _arrays(part: Any, where: str) -> Any:
    """A saved ``requests`` or ``timeseries`` part with its lists back as numpy arrays."""
    if isinstance(part, list):
        try:
            return _array(part)
        except (TypeError, ValueError) as exc:
            raise ReportError(f"{where}: not a column of numbers ({exc})") from None
    if isinstance(part, dict):
        return {k: _arrays(v, f"{where}.{k}") for k, v in part.items()}
    return part


#: Column entries encoded at a time by :func:`_canonical_chunks`.
_SLICE = 1 << 16


def _canonical_chunks(value: Any) -> Iterator[str]:
    """``json.dumps(_plain(value), sort_keys=True, separators=(",", ":"), allow_nan=False)`` in
    pieces: a mapping key by key, an array a slice at a time (a JSON list is its items joined
    by commas, so the slices joined are the whole list)."""
    if isinstance(value, dict):
        yield "{"
        for k, key in enumerate(sorted(value)):
            yield ("," if k else "") + json.dumps(key) + ":"
            yield from _canonical_chunks(value[key])
        yield "}"
    elif isinstance(value, np.ndarray) and value.ndim > 1:
        yield "["
        for k, row in enumerate(value):
            if k:
                yield ","
            yield from _canonical_chunks(row)
        yield "]"
    elif isinstance(value, np.ndarray):
        yield "["
        for start in range(0, len(value), _SLICE):
            text = _dumps(_plain(value[start : start + _SLICE]))
            yield ("," if start else "") + text[1:-1]
        yield "]"
    else:
        yield _dumps(_plain(value))


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _freeze(part: dict[str, Any]) -> None:
    """Make every array in ``part`` (and the parts it nests) read-only."""
    for value in part.values():
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
        elif isinstance(value, dict):
            _freeze(value)


def _plain(value: Any) -> Any:
    """JSON-ready: arrays to lists, NaN to null (JSON has no NaN)."""
    if isinstance(value, np.ndarray):
        missing = np.isnan(value) if value.dtype.kind == "f" else None
        if missing is not None and missing.any():
            out = value.astype(object)
            out[missing] = None
            return out.tolist()
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


class Report:
    """What one replay produced.

    Attributes:
        summary: counts (completed + rejected = requests), token totals, ``duration_ms``,
            throughputs in requests/s and tokens/s, latency distributions in ms with mean, std,
            min, max, p50, p75, p90, p95, p99, prefix reuse, GPU-hours, goodput.
        config: the full configuration that ran, defaults filled in.
        requests: one numpy array per field, one entry per workload row in row order: times in
            ms (NaN where a request never got there), token counts, ``worker``, ``status``
            (0 completed, 1 rejected), ``reject_reason`` (index into ``REJECT_REASONS``).
        timeseries: the cluster's state over time in at most 2,048 buckets ``interval_ms``
            wide starting at ``time_ms`` (the width starts at ``sample_interval_ms`` and
            doubles while the replay spans more buckets). Each series is ``{"mean", "min",
            "max"}`` over its buckets (time-weighted mean; a spike shorter than a bucket stays in
            its max): ``queued`` and ``running`` requests, ``kv_blocks_used`` and ``busy``
            (buckets x workers; busy is the share of the bucket a worker ran passes),
            ``link_utilization`` (buckets x KV-transfer links, prefill send links first) with a
            bandwidth, ``g2_blocks_used``, ``g3_blocks_used``, ``onboarding`` (requests
            waiting for tier blocks) and the used share of each kind of tier link
            (``g1_g2_link_use`` copies down, ``g2_g1_link_use`` reads up, ``g3_link_use`` or
            ``g2_g3_link_use`` and ``g3_g2_link_use`` by G3's duplex) with offload tiers.
        provenance: what produced the report: ``dynosim_version``, ``config_sha256`` (of the
            configuration as canonical JSON, :func:`config_sha256`), ``trace`` (``name`` and
            ``sha256``: a trace file's name and the hash of its bytes, or ``synthetic`` /
            ``columns`` and the hash of the requests), and where derived settings came from:
            ``timing`` (per AIC timing section, the
            model, system, engine version, layout and the version whose measurements priced
            each family of operations) and ``kv_capacity`` (how ``num_gpu_blocks`` was
            derived), when they were.
    """

    def __init__(self, raw: dict[str, Any], provenance: dict[str, Any] | None = None) -> None:
        self.summary: dict[str, Any] = json.loads(raw["summary_json"])
        self.config: dict[str, Any] = json.loads(raw["config_json"])
        self.requests: dict[str, np.ndarray] = raw["requests"]
        self.timeseries: dict[str, Any] = raw["timeseries"]
        self.provenance: dict[str, Any] = provenance or {}
        explained = raw.get("breakdown_json")
        self._breakdown: dict[str, Any] | None = json.loads(explained) if explained else None
        _freeze(self.requests)
        _freeze(self.timeseries)

    @classmethod
    def from_dict(cls, data: Any, where: str = "report") -> Report:
        """A report from :meth:`to_dict`'s data (or its JSON, parsed), checking it is a dynosim
        report of this format version; a ReportError names ``where`` and what is wrong."""
        if not isinstance(data, dict) or "format" not in data:
            raise ReportError(
                f"{where}: not a dynosim report (a JSON object with a 'format' field "
                f"{{'name': {REPORT_FORMAT!r}, ...}} was expected)"
            )
        form = data["format"]
        if not isinstance(form, dict) or form.get("name") != REPORT_FORMAT:
            raise ReportError(f"{where}: not a dynosim report (format {shown(form)})")
        if form.get("version") != REPORT_VERSION:
            made = data.get("provenance") or {}
            by = made.get("dynosim_version", "unknown") if isinstance(made, dict) else "unknown"
            raise ReportError(
                f"{where}: a report of format version {shown(form.get('version'))} (dynosim {by}); "
                f"this dynosim reads version {REPORT_VERSION}: replay the trace again to get a "
                "current report"
            )
        # The schema's models are built on first use: a replay makes its report without them.
        from dynosim.report_schema import check_report

        try:
            config = check_report(data)
        except ReportError as e:
            raise ReportError(f"{where}: {e}") from None
        raw = {
            "summary_json": json.dumps(data["summary"]),
            # As the core writes it: every setting there, defaults filled in.
            "config_json": _core.normalize_config_json(config.model_dump_json()),
            "requests": _arrays(data["requests"], f"{where}: requests"),
            "timeseries": _arrays(data["timeseries"], f"{where}: timeseries"),
        }
        if "breakdown" in data:
            raw["breakdown_json"] = json.dumps(data["breakdown"])
        return cls(raw, data.get("provenance"))

    @property
    def num_requests(self) -> int:
        return int(self.summary["num_requests"])

    @property
    def completed_requests(self) -> int:
        return int(self.summary["completed_requests"])

    @property
    def rejected_requests(self) -> int:
        return int(self.summary["rejected_requests"])

    def rejections(self) -> list[tuple[int, str]]:
        """Every rejected request as (row index, reason name)."""
        rows = np.flatnonzero(self.requests["status"] == STATUS_REJECTED)
        codes = self.requests["reject_reason"][rows]
        return [(int(i), REJECT_REASONS[c]) for i, c in zip(rows, codes, strict=True)]

    def _parts(self) -> dict[str, Any]:
        """The report's parts, its columns as the arrays they are."""
        out = {
            "format": {"name": REPORT_FORMAT, "version": REPORT_VERSION},
            "summary": self.summary,
            "config": self.config,
            "requests": self.requests,
            "timeseries": self.timeseries,
        }
        if self.provenance:
            out["provenance"] = self.provenance
        if self._breakdown is not None:
            out["breakdown"] = self._breakdown
        return out

    def to_dict(self) -> dict[str, Any]:
        """Summary, configuration, per-request columns and time series as plain Python data."""
        return _plain(self._parts())

    @cached_property
    def _canonical(self) -> str:
        return "".join(self.json_chunks())

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, no whitespace, null for NaN. Same inputs, same bytes."""
        return self._canonical

    def json_chunks(self) -> Iterator[str]:
        """:meth:`to_json` in pieces, each column encoded a slice at a time, for writing a
        report of millions of requests without ever holding its JSON, or its columns as Python
        numbers, whole (the pieces joined are :meth:`to_json`)."""
        return _canonical_chunks(self._parts())

    def write_json(self, fh: IO[str]) -> None:
        """Write :meth:`to_json` and a newline to the text handle ``fh``, piece by piece."""
        for piece in self.json_chunks():
            fh.write(piece)
        fh.write("\n")

    def to_pandas(self) -> Any:
        """The per-request columns as a pandas DataFrame, one row per workload row (needs
        pandas), with ``reject_reason`` as its name (empty for a completed request)."""
        from dynosim._dependencies import pandas

        pd = pandas("Report.to_pandas", "pandas")
        frame = pd.DataFrame({k: np.asarray(v) for k, v in self.requests.items()})
        names = np.array(REJECT_REASONS, dtype=object)[self.requests["reject_reason"]]
        rejected = np.asarray(self.requests["status"]) == STATUS_REJECTED
        frame["reject_reason"] = np.where(rejected, names, "")
        frame.index.name = "request"
        return frame

    def plot(self, kind: str = "latency") -> Any:
        """One picture of the replay as a matplotlib Figure (needs ``dynosim[plot]``):
        ``latency`` (CDFs of TTFT, TPOT, ITL and E2E with the SLA limits), ``rates`` (arrivals
        and completions per second), ``state`` (queue, running requests, KV blocks per worker,
        offload tiers), ``load`` (per-worker requests, tokens and busy time; rejections by
        reason) or ``links`` (KV-transfer link use)."""
        from dynosim.views.figures import REPORT_FIGURES

        if kind not in REPORT_FIGURES:
            raise ValueError(f"unknown plot kind {kind!r}; choose one of {list(REPORT_FIGURES)}")
        return REPORT_FIGURES[kind](self)

    def to_html(self, path: str | os.PathLike[str] | None = None) -> str:
        """The self-contained HTML page of this report (no network needed to view it; needs
        ``dynosim[plot]``): summary, configuration, provenance and every plot. Written to
        ``path`` when given (through a temporary file renamed at the end); returns the HTML."""
        from dynosim.views.pages import replay_page

        return replay_page(self, path)

    def _repr_html_(self) -> str:
        """A compact summary card for notebooks."""
        from dynosim.views.card import summary_card

        return summary_card(self)

    def latency(self, metric: str) -> dict[str, Any]:
        """The distribution of one latency metric (ms): one of ttft_ms, ttst_ms, tpot_ms,
        itl_ms, e2e_ms."""
        if metric not in _LATENCIES:
            raise KeyError(f"unknown latency metric {metric!r}; choose one of {_LATENCIES}")
        return self.summary[metric]

    def breakdown(self) -> dict[str, Any]:
        """Where the replay's time went (a replay run with ``report.explain`` on, ``dynosim
        replay --explain``):

        - ``ranks``: per rank (``role``, ``worker`` in the role's numbering, ``dp_rank``), its
          passes by kind (``prefill_only``, ``decode_only``, ``mixed``): how many, mean and p99
          priced time (ms), and the mean of each part of the price (ms);
        - ``parts``: per role, the parts its prices split into, each with ``family`` (the AIC
          family of measurements that priced it; ``None``: AIC's own formula) and
          ``version`` (the engine version whose measurements priced it) when AIC timed it;
        - ``ttft_stages``: in order, each stage of the time to first token (``queue``,
          ``prefill_passes``, ``between_chunks``, ``handoff``, ``transfer``,
          ``after_transfer``) with its mean over completed requests (``mean_ms``; they add up
          to the mean TTFT); each request's stages are the columns
          ``requests["ttft_<stage>_ms"]``.

        Raises:
            ValueError: the replay was not explained.
        """
        if self._breakdown is None:
            raise ValueError(
                "this replay kept no breakdown: replay with report.explain on (dynosim replay "
                "--explain, or config {'report': {'explain': True}})"
            )
        from dynosim.config import SimConfig, resolve

        timing = self.provenance.get("timing", {})
        paths = {role: v.timing_path for role, v in resolve(SimConfig(**self.config)).roles.items()}
        parts = {}
        for role, names in self._breakdown["parts"].items():
            priced = timing.get(paths[role], {}).get("parts", {})
            parts[role] = {
                name: priced.get(name, {"family": None, "version": None}) for name in names
            }
        return {**self._breakdown, "parts": parts}

    def __repr__(self) -> str:
        s = self.summary
        return (
            f"Report(requests={s['num_requests']}, completed={s['completed_requests']}, "
            f"rejected={s['rejected_requests']}, duration_ms={s['duration_ms']:.1f})"
        )


def load_report(path: str | os.PathLike[str]) -> Report:
    """Read a report saved as JSON (``Report.to_json``, ``dynosim replay --json``); a file that
    is not a dynosim report of this format version, or whose content does not fit the
    report's schema (:mod:`dynosim.report_schema`), raises ReportError naming the file."""
    text = read_input(path, ReportError, "report", max_bytes=MAX_DOCUMENT_BYTES)
    try:
        data = json_document(text)
    except UnicodeDecodeError as exc:
        raise ReportError(f"{path}: not a dynosim report (not UTF-8 text: {exc})") from None
    except DocumentError as exc:
        raise ReportError(f"{path}: not a dynosim report (not JSON: {exc})") from None
    return Report.from_dict(data, str(path))


__all__ = [
    "REJECT_REASONS",
    "REPORT_FORMAT",
    "REPORT_VERSION",
    "STATUS_COMPLETED",
    "STATUS_REJECTED",
    "Report",
    "config_sha256",
    "load_report",
]
