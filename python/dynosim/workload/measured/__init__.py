"""Measured runs: the per-request records of a real benchmark, read to replay the same
arrivals and lengths and to compare the simulated latencies with the measured ones.

Two formats: AIPerf's ``profile_export.jsonl`` (:mod:`~dynosim.workload.measured.aiperf`)
and ``vllm bench serve --save-result --save-detailed`` JSON
(:mod:`~dynosim.workload.measured.vllm_bench`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from dynosim._lazy import lazy_names
from dynosim.errors import WorkloadError

if TYPE_CHECKING:
    from dynosim.workload.measured.aiperf import read_aiperf
    from dynosim.workload.measured.run import MeasuredRun
    from dynosim.workload.measured.vllm_bench import read_vllm_bench, vllm_schedule_s

#: The formats ``load_measured`` reads. Known without importing the readers (numpy), so the
#: command line's flags name them at once.
MeasuredFormat = Literal["aiperf", "vllm-bench"]
MEASURED_FORMATS: tuple[str, ...] = get_args(MeasuredFormat)

#: The readers' names, imported on first use.
_LAZY = {
    "read_aiperf": "dynosim.workload.measured.aiperf",
    "MeasuredRun": "dynosim.workload.measured.run",
    "read_vllm_bench": "dynosim.workload.measured.vllm_bench",
    "vllm_schedule_s": "dynosim.workload.measured.vllm_bench",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())


def _json(text: str) -> Any:
    from dynosim._documents import DocumentError, json_document

    try:
        return json_document(text)
    except DocumentError:
        return None


def detect_format(path: Path) -> MeasuredFormat:
    """The format of the measured run at ``path``, told by its content: JSON lines whose
    first record has ``metadata`` and ``metrics`` are AIPerf's, a JSON object with
    ``input_lens`` or ``ttfts`` is ``vllm bench``'s. Anything else raises WorkloadError
    saying what the file looks like instead."""
    from dynosim.workload.measured.run import read_measured

    return _detect(path, read_measured(path))[0]


def _detect(path: Path, text: str) -> tuple[MeasuredFormat, Any]:
    """:func:`detect_format` of the content ``text`` of ``path``, and the whole document
    parsed when it is one (a ``vllm bench`` result), so it is parsed once."""
    from dynosim._files import MAX_LINE_BYTES

    first = next((line for line in text.split("\n") if line.strip()), None)
    if first is None:
        raise WorkloadError(f"{path}: no records: the file is empty")
    record = _json(first) if len(first) <= MAX_LINE_BYTES else None
    if isinstance(record, dict) and "metadata" in record and "metrics" in record:
        return "aiperf", None
    whole = _json(text)
    if isinstance(whole, dict):
        if "input_lens" in whole or "ttfts" in whole:
            return "vllm-bench", whole
        if "records" in whole or "aiperf_version" in whole:
            raise WorkloadError(
                f"{path}: this is AIPerf's aggregate profile_export_aiperf.json; pass its "
                "per-request profile_export.jsonl"
            )
        if "mean_ttft_ms" in whole:
            raise WorkloadError(
                f"{path}: a vllm bench serve result without the per-request lists "
                "(input_lens, ttfts, ...); run it with --save-result --save-detailed"
            )
    if isinstance(record, dict) and "input_length" in record:
        raise WorkloadError(
            f"{path}: this looks like a request trace, not a measured run; replay it "
            "without --measured"
        )
    raise WorkloadError(
        f"{path}: cannot tell the measured format: expected AIPerf's profile_export.jsonl "
        "(one JSON object with metadata and metrics per line) or a vllm bench serve "
        "--save-detailed result (a JSON object with input_lens and ttfts); "
        f"or pass the format ({', '.join(MEASURED_FORMATS)})"
    )


def load_measured(
    path: str | os.PathLike[str], format: str | None = None, seed: int | None = None
) -> MeasuredRun:
    """Read the measured benchmark run at ``path``: the completed requests to replay (as
    :attr:`MeasuredRun.columns`) and what was measured for each (ms).

    ``format`` is ``"aiperf"`` or ``"vllm-bench"``, or None to tell it by the content (the
    file is read once, so a pipe works). ``seed`` is a ``vllm bench serve`` run's ``--seed``,
    used only to rebuild its arrivals when the file has none (see
    :mod:`~dynosim.workload.measured.vllm_bench`). A file of the wrong shape raises
    :class:`~dynosim.errors.WorkloadError` naming the file, line (JSON lines) and field.
    Replay ``run.columns`` on a deployment, then compare with
    :func:`dynosim.compare_measured`.
    """
    from dynosim._shown import shown
    from dynosim.workload.measured.aiperf import read_aiperf
    from dynosim.workload.measured.run import read_measured
    from dynosim.workload.measured.vllm_bench import read_vllm_bench, read_vllm_result

    path = Path(path)
    if format is not None and format not in MEASURED_FORMATS:
        raise WorkloadError(
            f"unknown measured format {shown(format)}; choose one of {', '.join(MEASURED_FORMATS)}"
        )
    text = read_measured(path)
    parsed = None
    if format is None:
        format, parsed = _detect(path, text)
    if format == "aiperf":
        if seed is not None:
            raise WorkloadError(
                "seed rebuilds the arrivals of a vllm-bench run; an AIPerf export has them"
            )
        return read_aiperf(path, text)
    if parsed is None:
        return read_vllm_bench(path, seed, text)
    return read_vllm_result(path, parsed, seed)


__all__ = [
    "MEASURED_FORMATS",
    "MeasuredFormat",
    "MeasuredRun",
    "detect_format",
    "load_measured",
    "read_aiperf",
    "read_vllm_bench",
    "vllm_schedule_s",
]
