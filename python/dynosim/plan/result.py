"""The result of a sweep: one row per candidate, its settings and what its replay showed, with
the Pareto front, the best pick, tables (numpy, pandas, CSV) and canonical JSON."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dynosim._dependencies import pandas
from dynosim._files import write_atomic
from dynosim._shown import shown
from dynosim.plan.sla import Sla

#: Latency metrics of a row, each with these statistics: ``ttft_p90_ms`` and so on (ms).
LATENCIES = ("ttft", "tpot", "itl", "e2e")
LATENCY_STATS = ("mean", "p50", "p90", "p99")

#: What every row holds after its settings, in column order.
METRICS = (
    "mode",
    "workers",
    "gpus",
    "completed",
    "rejected",
    "output_tps",
    "output_tps_per_gpu",
    "tps_per_user",
    *(f"{m}_{s}_ms" for m in LATENCIES for s in LATENCY_STATS),
    "goodput_rps",
    "sla_met",
    "sla_ratio",
    "sla_misses",
    "wall_ms",
    "error",
)

#: Columns that are not numbers.
_TEXT = ("mode", "sla_met", "sla_misses", "error")

#: The one column that depends on the machine (left out of the canonical JSON).
WALL = "wall_ms"


def metrics_row(
    summary: Mapping[str, Any] | None,
    sla: Sla,
    *,
    mode: str,
    workers: int,
    gpus: int,
    wall_ms: float,
    error: str = "",
) -> dict[str, Any]:
    """The metric columns of one candidate from its replay's summary (None: the candidate
    failed with ``error``; its metrics are NaN and it does not meet the SLA).

    ``output_tps_per_gpu`` is output tokens/s over the GPUs; ``tps_per_user`` is
    1000 / mean TPOT (tokens/s one request sees while decoding); latencies are ms.
    """
    row: dict[str, Any] = {"mode": mode, "workers": workers, "gpus": gpus}
    if summary is None:
        row |= {"completed": None, "rejected": None}
        row |= {k: math.nan for k in METRICS if k not in row and k not in _TEXT}
        row |= {"sla_met": False, "sla_ratio": math.inf, "sla_misses": "", WALL: wall_ms}
        row["error"] = error
        return row
    tps = float(summary["output_token_throughput_tps"])
    tpot = _num(summary["tpot_ms"]["mean"])
    row |= {
        "completed": int(summary["completed_requests"]),
        "rejected": int(summary["rejected_requests"]),
        "output_tps": tps,
        "output_tps_per_gpu": tps / gpus,
        "tps_per_user": 1000.0 / tpot if tpot > 0 else math.nan,
    }
    for m in LATENCIES:
        for s in LATENCY_STATS:
            row[f"{m}_{s}_ms"] = _num(summary[f"{m}_ms"][s])
    violations = sla.violations(summary)
    row |= {
        "goodput_rps": float(summary["goodput_rps"]),
        "sla_met": not violations,
        "sla_ratio": sla.ratio(summary),
        WALL: wall_ms,
        "sla_misses": "; ".join(violations),
        "error": error,
    }
    return row


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def _plain(value: Any) -> Any:
    """JSON-ready: NaN and infinity to null, numpy scalars to Python."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class SweepResult:
    """One row per candidate, in candidate order (``index`` 0, 1, ...).

    A row holds the candidate's settings (its dotted paths, or the planner's layout fields),
    then :data:`METRICS`: serving mode, workers and GPUs, completed and rejected requests,
    output tokens/s (and per GPU), tokens/s/user (1000 / mean TPOT), TTFT/TPOT/ITL/E2E mean,
    p50, p90 and p99 (ms), goodput (requests/s), whether it meets the SLA and its worst
    limited statistic over the limit (``sla_ratio``), how it misses the SLA (``sla_misses``,
    "" when it meets it), the replay's wall time (ms), and ``error``: why the candidate could
    not be replayed ("" when it was).
    """

    def __init__(
        self,
        rows: Iterable[Mapping[str, Any]],
        settings: Sequence[str],
        sla: Sla,
        *,
        wall_s: float | None = None,
    ) -> None:
        self.rows: list[dict[str, Any]] = sorted((dict(r) for r in rows), key=lambda r: r["index"])
        self.settings: tuple[str, ...] = tuple(settings)
        self.sla = sla
        #: Wall time of the whole sweep (s), when it was run.
        self.wall_s = wall_s

    @property
    def columns(self) -> tuple[str, ...]:
        """Column names, in order: ``index``, the settings, then :data:`METRICS`."""
        return ("index", *self.settings, *METRICS)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def _subset(self, rows: Iterable[Mapping[str, Any]]) -> SweepResult:
        return SweepResult(rows, self.settings, self.sla)

    def feasible(self) -> SweepResult:
        """The rows that meet the SLA."""
        return self._subset(r for r in self.rows if r["sla_met"])

    def failed(self) -> SweepResult:
        """The rows whose candidate could not be replayed (``error`` says why)."""
        return self._subset(r for r in self.rows if r["error"])

    def pareto(
        self,
        x: str = "tps_per_user",
        y: str = "output_tps_per_gpu",
        *,
        maximize: tuple[bool, bool] = (True, True),
        feasible: bool = True,
    ) -> SweepResult:
        """The Pareto front over columns ``x`` and ``y`` (both maximised by default: tokens/s
        per user against tokens/s per GPU, as AIConfigurator draws it), sorted by ``x``
        ascending. A row is on it when no other row is at least as good in both and better in
        one. ``feasible``: only rows meeting the SLA compete; failed rows never do."""
        for col in (x, y):
            if col not in self.columns:
                raise KeyError(f"unknown column {shown(col)}; columns: {', '.join(self.columns)}")
        sx, sy = (1.0 if m else -1.0 for m in maximize)
        pts = [
            r
            for r in self.rows
            if not r["error"]
            and (r["sla_met"] or not feasible)
            and not math.isnan(float(r[x]))
            and not math.isnan(float(r[y]))
        ]

        def dominated(r: Mapping[str, Any]) -> bool:
            a, b = sx * r[x], sy * r[y]
            return any(
                sx * o[x] >= a and sy * o[y] >= b and (sx * o[x] > a or sy * o[y] > b) for o in pts
            )

        front = [r for r in pts if not dominated(r)]
        front.sort(key=lambda r: (r[x], r["index"]))
        out = self._subset([])
        out.rows = front
        return out

    def best(self, by: str = "gpus", *, minimize: bool = True) -> dict[str, Any] | None:
        """The row meeting the SLA with the least (``minimize``) or most ``by``; ties go to
        the larger SLA margin (smaller ``sla_ratio``), then the lower index. None when no row
        meets the SLA."""
        if by not in self.columns:
            raise KeyError(f"unknown column {shown(by)}; columns: {', '.join(self.columns)}")
        sign = 1.0 if minimize else -1.0
        rows = self.feasible().rows
        if not rows:
            return None
        return dict(min(rows, key=lambda r: (sign * r[by], r["sla_ratio"], r["index"])))

    def closest(self, n: int = 5) -> list[dict[str, Any]]:
        """The ``n`` rows that miss the SLA by the least: replayed before failed, fewest
        rejected requests, then the smallest ``sla_ratio``."""
        misses = [r for r in self.rows if not r["sla_met"]]
        misses.sort(
            key=lambda r: (bool(r["error"]), r["rejected"] or 0, r["sla_ratio"], r["index"])
        )
        return [dict(r) for r in misses[:n]]

    def to_dict(self) -> dict[str, Any]:
        """The SLA and the rows as plain data, without the machine-dependent ``wall_ms``."""
        return {
            "sla": self.sla.model_dump(),
            "columns": [c for c in self.columns if c != WALL],
            "rows": [
                {k: _plain(v) for k, v in r.items() if k != WALL}
                for r in sorted(self.rows, key=lambda r: r["index"])
            ],
        }

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, no whitespace, null for NaN, rows by index, no wall
        times): the same whatever the executor, the job count or the order candidates
        finished in."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)

    def to_numpy(self) -> np.ndarray:
        """A structured array, one record per row: numbers as int64 / float64 (NaN where
        missing), ``sla_met`` as bool, text (and settings that are mappings, as JSON) as
        unicode."""
        cols = self.columns
        dtypes = [(c, _dtype([r.get(c) for r in self.rows])) for c in cols]
        records = [tuple(_cell(r.get(c), dt) for c, dt in dtypes) for r in self.rows]
        return np.array(records, dtype=np.dtype(dtypes))

    def to_pandas(self) -> Any:
        """A pandas DataFrame of the rows (needs pandas: ``pip install pandas``)."""
        pd = pandas("SweepResult.to_pandas", "pandas")
        return pd.DataFrame(self.to_numpy())

    def csv_text(self, *, wall: bool = True) -> str:
        """The rows as CSV: a header of :attr:`columns` (without ``wall_ms``, the one column
        that depends on the machine, when ``wall`` is False), empty cells for NaN and missing
        values, settings that are mappings as JSON."""
        columns = [c for c in self.columns if wall or c != WALL]
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        for r in self.rows:
            w.writerow([_csv_cell(r.get(c)) for c in columns])
        return buf.getvalue()

    def jsonl_text(self) -> str:
        """One JSON object per row (keys sorted, NaN as null), rows by index."""
        return "".join(
            json.dumps({k: _plain(v) for k, v in r.items()}, sort_keys=True) + "\n"
            for r in self.rows
        )

    def to_csv(self, path: str | os.PathLike[str], *, wall: bool = True) -> Path:
        """Write :meth:`csv_text` to ``path`` (through a temporary file renamed at the end, so
        an interrupted write leaves no partial file under that name)."""
        return write_atomic(path, self.csv_text(wall=wall))

    def __repr__(self) -> str:
        met = sum(1 for r in self.rows if r["sla_met"])
        failed = sum(1 for r in self.rows if r["error"])
        return f"SweepResult({len(self.rows)} candidates, {met} meet the SLA, {failed} failed)"


def _dtype(values: list[Any]) -> str:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool | np.bool_) for v in present):
        return "?" if len(present) == len(values) else "U5"
    if all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in present):
        return "i8" if present and len(present) == len(values) else "f8"
    if all(isinstance(v, int | float | np.number) and not isinstance(v, bool) for v in present):
        return "f8"
    width = max((len(_text(v)) for v in values), default=1)
    return f"U{max(width, 1)}"


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(_plain(value), sort_keys=True)


def _cell(value: Any, dtype: str) -> Any:
    if dtype == "f8":
        return math.nan if value is None else float(value)
    if dtype.startswith("U"):
        return _text(value)
    return value


def _csv_cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return _text(value)


__all__ = ["LATENCIES", "LATENCY_STATS", "METRICS", "SweepResult", "metrics_row"]
