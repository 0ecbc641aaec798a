"""AIPerf's per-request export ``profile_export.jsonl`` (NVIDIA's benchmark client used with
Dynamo): one JSON object per line with ``metadata``, ``metrics`` and ``error``.

Both spellings AIPerf has written are read:

* current (0.13): ``metadata.request_start_ns``, ``metadata.benchmark_phase``,
  ``metadata.was_cancelled``, metrics ``time_to_first_token``;
* older (2025): ``metadata.timestamp_ns`` (the request start), ``metadata.credit_phase``,
  metrics ``ttft``; cancellation shows only as error 499 ``RequestCancellationError``.

Each metric is ``{"value": ..., "unit": ...}`` in AIPerf's display units (times in ms; a
``unit`` of ns, us or s is converted, none means ms). What is read, per record:

* start: ``request_start_ns`` or ``timestamp_ns`` (ns, wall clock), else
  ``metrics.min_request_timestamp``;
* ``input_sequence_length`` and ``output_sequence_length`` (tokens; the output counts
  reasoning tokens, as AIPerf's does);
* TTFT: ``time_to_first_token`` (or ``ttft``), from the request start to the first response;
* E2E: ``request_latency``, from the request start to the last response;
* ITL samples: ``inter_chunk_latency``, the gaps between streamed chunks, when present.

TPOT is ``(request_latency - TTFT) / (output_sequence_length - 1)``: AIPerf's
``inter_token_latency`` as it computes it by default (without ``--per-chunk-usage``), and
dynosim's TPOT. Warmup records are skipped; cancelled and failed records (``was_cancelled``,
or an ``error``; they have no output length) are counted and not replayed. Turns of a
multi-turn session are replayed as independent requests at their measured starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dynosim._files import MAX_LINE_BYTES
from dynosim._shown import shown
from dynosim.errors import WorkloadError
from dynosim.workload.measured.run import (
    MeasuredRun,
    Replayed,
    build_run,
    check_lines,
    measured_value,
    parse_json,
    read_measured,
)
from dynosim.workload.reading import token_count

#: A time metric's unit -> ms.
_TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3}
#: AIPerf's cancellation error.
_CANCELLED_CODE = 499
_CANCELLED_TYPE = "RequestCancellationError"


def _object(where: str, parent: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    value = parent.get(key)
    if value is None:
        raise WorkloadError(f"{where}: field {path!r}: missing (an AIPerf record has it)")
    if not isinstance(value, dict):
        raise WorkloadError(
            f"{where}: field {path!r}: expected a JSON object, got {shown(value, 80)}"
        )
    return value


def _first(where: str, parent: dict[str, Any], keys: tuple[str, ...], prefix: str) -> str:
    """The first of ``keys`` present (not null) in ``parent``; missing: an error naming them."""
    for key in keys:
        if parent.get(key) is not None:
            return key
    names = " or ".join(repr(f"{prefix}.{k}") for k in keys)
    raise WorkloadError(f"{where}: field {names}: missing")


def _metric(where: str, metrics: dict[str, Any], tag: str) -> tuple[Any, str | None, str]:
    """(value, unit, field path of the value) of metric ``tag``."""
    entry = _object(where, metrics, tag, f"metrics.{tag}")
    if "value" not in entry:
        raise WorkloadError(f"{where}: field 'metrics.{tag}.value': missing")
    unit = entry.get("unit")
    if unit is not None and not isinstance(unit, str):
        raise WorkloadError(
            f"{where}: field 'metrics.{tag}.unit': expected a string, got {shown(unit, 80)}"
        )
    return entry["value"], unit, f"metrics.{tag}.value"


def _scale_to_ms(where: str, tag: str, unit: str | None) -> float:
    if unit is None:
        return 1.0  # AIPerf exports times in ms
    if unit not in _TO_MS:
        raise WorkloadError(
            f"{where}: field 'metrics.{tag}.unit': expected a time unit "
            f"({', '.join(_TO_MS)}), got {shown(unit)}"
        )
    return _TO_MS[unit]


def _time_ms(where: str, metrics: dict[str, Any], tag: str) -> float:
    value, unit, field = _metric(where, metrics, tag)
    return measured_value(where, field, value, unit or "ms") * _scale_to_ms(where, tag, unit)


def _tokens(where: str, metrics: dict[str, Any], tag: str) -> int:
    value, unit, field = _metric(where, metrics, tag)
    if unit not in (None, "tokens"):
        raise WorkloadError(
            f"{where}: field 'metrics.{tag}.unit': expected 'tokens', got {shown(unit)}"
        )
    return token_count(where, field, value)


def _gaps_ms(where: str, metrics: dict[str, Any]) -> list[float] | None:
    if metrics.get("inter_chunk_latency") is None:
        return None
    value, unit, field = _metric(where, metrics, "inter_chunk_latency")
    if not isinstance(value, list):
        raise WorkloadError(
            f"{where}: field {field!r}: expected a list of gaps (ms), got {shown(value, 80)}"
        )
    scale = _scale_to_ms(where, "inter_chunk_latency", unit)
    return [measured_value(where, f"{field}[{i}]", x, "ms") * scale for i, x in enumerate(value)]


def _start_ns(where: str, metadata: dict[str, Any], metrics: dict[str, Any]) -> int:
    for key in ("request_start_ns", "timestamp_ns"):
        value = metadata.get(key)
        if value is not None:
            field = f"metadata.{key}"
            break
    else:
        if metrics.get("min_request_timestamp") is None:
            raise WorkloadError(
                f"{where}: field 'metadata.request_start_ns': missing (nor "
                "'metadata.timestamp_ns' or 'metrics.min_request_timestamp')"
            )
        value, unit, field = _metric(where, metrics, "min_request_timestamp")
        if unit not in (None, "ns"):
            raise WorkloadError(
                f"{where}: field 'metrics.min_request_timestamp.unit': expected 'ns', got "
                f"{shown(unit)}"
            )
    # A 64-bit ns clock (time.time_ns()); a larger integer is no time and no float holds it.
    if type(value) is not int or not 0 <= value < 2**63:
        raise WorkloadError(
            f"{where}: field {field!r}: expected a wall-clock time in integer ns "
            f"(0 .. 2**63 - 1), got {shown(value, 80)}"
        )
    return value


def _cancelled(where: str, metadata: dict[str, Any], error: Any) -> bool:
    flag = metadata.get("was_cancelled", False)
    if not isinstance(flag, bool):
        raise WorkloadError(
            f"{where}: field 'metadata.was_cancelled': expected true or false, "
            f"got {shown(flag, 80)}"
        )
    return flag or (
        isinstance(error, dict)
        and (error.get("code") == _CANCELLED_CODE or error.get("type") == _CANCELLED_TYPE)
    )


def read_aiperf(path: Path, text: str | None = None) -> MeasuredRun:
    """The measured run in AIPerf's ``profile_export.jsonl`` at ``path`` (see the module's
    description for the fields read; ``text``: its content, when already read); a record of
    the wrong shape raises WorkloadError naming the file, line and field."""
    lines = (read_measured(path) if text is None else text).split("\n")
    check_lines(path, lines, MAX_LINE_BYTES, "an AIPerf record")
    done = Replayed()
    starts_ns: list[int] = []
    counts = {"warmup": 0, "cancelled": 0, "failed": 0}
    records = 0
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        record = parse_json(where, line)
        if not isinstance(record, dict):
            raise WorkloadError(
                f"{where}: expected a JSON object (an AIPerf record), got {shown(record, 80)}"
            )
        records += 1
        metadata = _object(where, record, "metadata", "metadata")
        metrics = _object(where, record, "metrics", "metrics")
        phase_key = _first(where, metadata, ("benchmark_phase", "credit_phase"), "metadata")
        phase = metadata[phase_key]
        if not isinstance(phase, str) or phase.lower() not in ("warmup", "profiling"):
            raise WorkloadError(
                f"{where}: field 'metadata.{phase_key}': expected 'warmup' or 'profiling', "
                f"got {shown(phase, 80)}"
            )
        if phase.lower() == "warmup":
            counts["warmup"] += 1
            continue
        error = record.get("error")
        if _cancelled(where, metadata, error):
            counts["cancelled"] += 1
            continue
        if error is not None:
            counts["failed"] += 1
            continue
        ttft_tag = _first(where, metrics, ("time_to_first_token", "ttft"), "metrics")
        ttft = _time_ms(where, metrics, ttft_tag)
        e2e = _time_ms(where, metrics, "request_latency")
        if e2e < ttft:
            raise WorkloadError(
                f"{where}: field 'metrics.request_latency.value': {e2e} ms is shorter than "
                f"the time to first token ({ttft} ms)"
            )
        starts_ns.append(_start_ns(where, metadata, metrics))
        output = _tokens(where, metrics, "output_sequence_length")
        gaps = _gaps_ms(where, metrics)
        if gaps is None and output == 1:
            gaps = []  # one token, no gap: AIPerf writes no inter_chunk_latency
        done.add(_tokens(where, metrics, "input_sequence_length"), output, ttft, e2e, gaps)
    if records == 0:
        raise WorkloadError(f"{path}: no records: the file is empty")
    # Wall-clock ns lose sub-microsecond digits as floats; subtract the first start exactly.
    first = min(starts_ns, default=0)
    start_ms = [(ns - first) / 1e6 for ns in starts_ns]
    notes = []
    if counts["warmup"]:
        notes.append(f"{counts['warmup']} warmup records skipped (not part of the measurement)")
    return build_run(path, "aiperf", done, start_ms, records, counts, notes)


__all__ = ["read_aiperf"]
