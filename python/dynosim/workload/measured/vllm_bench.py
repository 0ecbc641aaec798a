"""``vllm bench serve --save-result --save-detailed`` JSON: one object whose per-request lists
(one entry per request, in request order) are read:

* ``input_lens``, ``output_lens`` (tokens; 0 for a failed request);
* ``ttfts`` (SECONDS, from sending the request to its first chunk);
* ``itls`` (a list per request of the gaps between streamed chunks, SECONDS);
* ``errors`` (``""`` for a request that succeeded);
* ``start_times`` (when the request was sent, ``time.perf_counter()`` seconds; vLLM 0.19 and
  later) and ``latencies`` (E2E seconds; later versions), when present.

E2E is ``latencies`` when present, else ``ttft + sum(itl)`` (vLLM's own ``latency``). TPOT is
``(E2E - TTFT) / (output_len - 1)``, as vLLM and dynosim compute it; the ITL samples are the
chunk gaps, as vLLM's ITL statistics take them. Failed requests are counted and not replayed.

Without ``start_times`` the arrivals are rebuilt, not measured: ``vllm bench serve`` draws its
whole schedule up front (``get_request`` in ``vllm/benchmarks/serve.py``) as gaps
gamma(shape=burstiness, scale=1/(rate * burstiness)) from numpy's global generator seeded with
the run's ``--seed`` (default 0; saved only through ``--metadata seed=N``), cumulated and
rescaled so the last arrival is N / rate (a constant 1 / rate gap for an infinite burstiness;
every arrival at 0 for an infinite rate; with a ramp-up the rate of request i goes linearly or
exponentially from the start to the end rate, without the rescaling). This is vLLM's schedule
exactly when nothing else drew from numpy's global generator before it, and a schedule of the
same law otherwise.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import ConfigDict

from dynosim._shown import shown
from dynosim._validation import Problems, StrictModel, WorkloadProblems
from dynosim.errors import WorkloadError
from dynosim.workload.measured.run import (
    MeasuredRun,
    Replayed,
    build_run,
    check_schema,
    finite,
    measured_value,
    parse_json,
    read_measured,
)
from dynosim.workload.reading import token_count

#: The per-request lists every detailed result has.
REQUIRED = ("input_lens", "output_lens", "ttfts", "itls", "errors")
_OPTIONAL = ("start_times", "latencies")


class VllmBenchResult(StrictModel):
    """The schema of a ``--save-detailed`` result, checked whole before it is read: the
    per-request lists are lists (``errors`` too: null is no list), the optional ones lists
    or absent. Each entry is checked as it is read (a failed request's other entries are not
    read). Other fields of the result are kept, unchecked."""

    model_config = ConfigDict(extra="allow", frozen=True)
    _error: ClassVar[type[Problems]] = WorkloadProblems

    input_lens: list[Any]
    output_lens: list[Any]
    ttfts: list[Any]
    itls: list[Any]
    errors: list[Any]
    start_times: list[Any] | None = None
    latencies: list[Any] | None = None


def _rate(path: Path, data: dict[str, Any], key: str) -> float:
    value = data.get(key)
    if value == "inf":
        return math.inf
    rate = finite(value)
    if rate is None or not rate > 0:
        raise WorkloadError(
            f"{path}: field {key!r}: expected a rate > 0 (requests/s) or 'inf' to rebuild the "
            f"arrivals (the file has no start_times), got {shown(value, 80)}"
        )
    return rate


def vllm_schedule_s(
    n: int,
    request_rate: float,
    burstiness: float = 1.0,
    seed: int = 0,
    ramp_up: tuple[str, float, float] | None = None,
) -> np.ndarray:
    """When ``vllm bench serve`` sends each of ``n`` requests (s from the benchmark start), as
    its ``get_request`` schedules them: gamma gaps of mean 1 / rate from numpy's legacy
    generator seeded with ``seed``, cumulated, rescaled so the last is ``n / request_rate``.
    ``ramp_up`` is (``"linear"`` or ``"exponential"``, start rate, end rate)."""
    if ramp_up is None:
        rates = np.full(n, request_rate)
    else:
        strategy, start, end = ramp_up
        progress = np.arange(n) / max(n - 1, 1)
        if strategy == "linear":
            rates = start + (end - start) * progress
        else:
            rates = start * (end / start) ** progress
    # One generator, drawn in request order: the draws vLLM's loop makes from the global one.
    rng = np.random.RandomState(seed)
    delays = np.zeros(n)
    for i, rate in enumerate(rates.tolist()):
        if math.isinf(rate):
            delays[i] = 0.0
        elif math.isinf(burstiness):
            delays[i] = 1.0 / rate
        else:
            delays[i] = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness))
    delays = np.cumsum(delays)
    if ramp_up is None and delays[-1] != 0:
        delays = delays * ((n / request_rate) / delays[-1])
    return delays


def _lists(path: Path, data: dict[str, Any]) -> dict[str, list[Any]]:
    missing = [key for key in REQUIRED if key not in data]
    if missing:
        raise WorkloadError(
            f"{path}: field {missing[0]!r}: missing (vllm bench serve writes the per-request "
            "lists with --save-result --save-detailed)"
        )
    check_schema(VllmBenchResult, str(path), data)
    lists = {key: data[key] for key in (*REQUIRED, *_OPTIONAL) if data.get(key) is not None}
    n = len(lists["input_lens"])
    for key, value in lists.items():
        if len(value) != n:
            raise WorkloadError(
                f"{path}: field {key!r}: {len(value)} entries, but 'input_lens' has {n} "
                "(every per-request list has one entry per request)"
            )
    if n == 0:
        raise WorkloadError(f"{path}: no requests: the per-request lists are empty")
    return lists


def _seed(path: Path, data: dict[str, Any], seed: int | None) -> tuple[int, str]:
    """The run's seed and where it came from: the argument, ``--metadata seed=N``, or 0."""
    if seed is not None:
        return seed, "given"
    if "seed" not in data:
        return 0, "vllm's default; the file does not record it"
    value = data["seed"]
    try:
        return int(value), "from the file's metadata"  # --metadata values are strings
    except (TypeError, ValueError):
        raise WorkloadError(
            f"{path}: field 'seed': expected an integer, got {shown(value, 80)}"
        ) from None


def _arrivals(path: Path, data: dict[str, Any], n: int, seed: int | None) -> tuple[Any, str]:
    """Send times (s) of all ``n`` requests rebuilt from the run's settings, and a note."""
    given = data.get("burstiness", 1.0)
    # Infinite burstiness is vLLM's constant rate.
    burstiness = math.inf if type(given) is float and given == math.inf else finite(given)
    if burstiness is None or not burstiness > 0:
        raise WorkloadError(
            f"{path}: field 'burstiness': expected a number > 0, got {shown(given, 80)}"
        )
    run_seed, origin = _seed(path, data, seed)
    ramp_up = None
    if data.get("ramp_up_strategy") is not None:
        strategy = data["ramp_up_strategy"]
        if strategy not in ("linear", "exponential"):
            raise WorkloadError(
                f"{path}: field 'ramp_up_strategy': expected 'linear' or 'exponential', "
                f"got {shown(strategy, 80)}"
            )
        ends = [_rate(path, data, key) for key in ("ramp_up_start_rps", "ramp_up_end_rps")]
        ramp_up = (strategy, ends[0], ends[1])
        rate, what = math.inf, f"a {strategy} ramp-up from {ends[0]:g} to {ends[1]:g} req/s"
    else:
        rate = _rate(path, data, "request_rate")
        what = f"request_rate {rate:g} req/s, burstiness {burstiness:g}"
    note = (
        f"arrivals rebuilt, not measured (the file has no start_times): vllm bench serve's "
        f"schedule for {what}, seed {run_seed} ({origin})"
    )
    if data.get("max_concurrency") is not None:
        most = shown(data["max_concurrency"])
        note += (
            f"; the run held at most {most} requests in flight and sent later ones when a "
            f"slot freed (--concurrency {most} replays that limit)"
        )
    return vllm_schedule_s(n, rate, float(burstiness), run_seed, ramp_up), note


def read_vllm_bench(path: Path, seed: int | None = None, text: str | None = None) -> MeasuredRun:
    """The measured run in the ``vllm bench serve`` result JSON at ``path`` (see the module's
    description for the fields read; ``text``: its content, when already read). ``seed`` is
    the benchmark's ``--seed``, used only to rebuild arrivals when the file has no
    ``start_times`` (None: the file's ``--metadata seed=N``, else vLLM's default 0). A file of
    the wrong shape raises WorkloadError naming the file and the field (``ttfts[3]``: the
    fourth request's)."""
    text = read_measured(path) if text is None else text
    if not text.strip():
        raise WorkloadError(f"{path}: no records: the file is empty")
    return read_vllm_result(path, parse_json(str(path), text), seed)


def read_vllm_result(path: Path, data: Any, seed: int | None = None) -> MeasuredRun:
    """:func:`read_vllm_bench` of the result's parsed JSON ``data``."""
    if not isinstance(data, dict):
        raise WorkloadError(
            f"{path}: expected a JSON object (a vllm bench serve result), got {shown(data, 80)}"
        )
    lists = _lists(path, data)
    n = len(lists["input_lens"])
    where = str(path)
    done = Replayed()
    rows: list[int] = []  # the replayed requests' indices
    counts = {"failed": 0, "no output tokens": 0}
    notes: list[str] = []
    for i in range(n):
        error = lists["errors"][i]
        if error is not None and not isinstance(error, str):
            raise WorkloadError(
                f"{path}: field 'errors[{i}]': expected a string, got {shown(error, 80)}"
            )
        if error:
            counts["failed"] += 1
            continue
        output = lists["output_lens"][i]
        if type(output) is int and output == 0:  # succeeded without a token: nothing to replay
            counts["no output tokens"] += 1
            continue
        output = token_count(where, f"output_lens[{i}]", output)
        ttft = measured_value(where, f"ttfts[{i}]", lists["ttfts"][i], "s") * 1e3
        itl = lists["itls"][i]
        if not isinstance(itl, list):
            raise WorkloadError(
                f"{path}: field 'itls[{i}]': expected a list of gaps (s), got {shown(itl, 80)}"
            )
        gaps = [measured_value(where, f"itls[{i}][{j}]", x, "s") * 1e3 for j, x in enumerate(itl)]
        if "latencies" in lists:
            e2e = measured_value(where, f"latencies[{i}]", lists["latencies"][i], "s") * 1e3
            if e2e < ttft:
                raise WorkloadError(
                    f"{path}: field 'latencies[{i}]': {lists['latencies'][i]} s is shorter "
                    f"than the time to first token ({lists['ttfts'][i]} s)"
                )
        else:
            e2e = ttft + sum(gaps)
        inputs = token_count(where, f"input_lens[{i}]", lists["input_lens"][i])
        done.add(inputs, output, ttft, e2e, gaps)
        rows.append(i)
    duration_ms = None
    if "start_times" in lists:
        sent = lists["start_times"]
        starts = [measured_value(where, f"start_times[{i}]", sent[i], "s") * 1e3 for i in rows]
    else:
        schedule_s, note = _arrivals(path, data, n, seed)
        starts = (schedule_s[rows] * 1e3).tolist()
        notes.append(note)
        duration_s = finite(data.get("duration"))
        if duration_s is not None:
            duration_ms = duration_s * 1e3
            notes.append(
                "measured throughput over the run's own duration (from the benchmark start; "
                "its first request was sent a gap later)"
            )
    return build_run(path, "vllm-bench", done, starts, n, counts, notes, duration_ms)


__all__ = [
    "REQUIRED",
    "VllmBenchResult",
    "read_vllm_bench",
    "read_vllm_result",
    "vllm_schedule_s",
]
