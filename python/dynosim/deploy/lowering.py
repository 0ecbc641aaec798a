"""Lowering a workload for AIConfigurator: the request lengths and engine limits AIC needs,
derived from the workload as it is (a synthetic workload's own lengths, a trace's real rows);
nothing invented, and the one place this happens."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dynosim._shown import shown
from dynosim.deploy.candidate import context_length_problem
from dynosim.errors import ConfigError, WorkloadError
from dynosim.workload import SyntheticWorkload, TraceWorkload


@dataclass(frozen=True)
class LoweredWorkload:
    """What a workload tells AIC, all in tokens.

    ``isl`` / ``osl`` are the request lengths AIC's SLA section takes (a synthetic workload's
    own; a trace's mean, rounded half up). ``context_length`` is the engine's per-request token
    limit (``max_seq_len``): the candidate's, else ``longest_request``. ``longest_prompt`` sizes
    TensorRT-LLM's KV transfer buffer. ``requests`` counts the workload's requests.
    ``concurrency`` (given an SLA) is the most requests in flight at once were each to take
    its SLA time: the TTFT limit plus (output - 1) x the TPOT limit from its arrival; a batch
    cap (max_num_seqs) at or above it never binds while requests keep to the SLA.
    """

    kind: Literal["trace", "synthetic"]
    isl: int
    osl: int
    context_length: int
    longest_prompt: int
    longest_request: int
    requests: int
    concurrency: int | None = None

    def longest_prompt_blocks(self, block_size: int) -> int:
        """The longest prompt rounded up to whole KV blocks of ``block_size`` tokens: the
        smallest pass token budget (or transfer buffer) that takes every prompt whole."""
        return -(-self.longest_prompt // block_size) * block_size


def _as_workload(workload: Any) -> TraceWorkload | SyntheticWorkload:
    if isinstance(workload, TraceWorkload | SyntheticWorkload):
        return workload
    if isinstance(workload, Mapping):
        data = dict(workload)
        kind = data.pop("kind", None)
        # The models apply the workload rule: a trace with isl/osl is refused, by name.
        if kind == "trace":
            return TraceWorkload(**data)
        if kind == "synthetic":
            return SyntheticWorkload(**data)
        raise WorkloadError(f"workload.kind: expected 'trace' or 'synthetic', got {shown(kind)}")
    raise WorkloadError(
        "workload: expected a TraceWorkload, a SyntheticWorkload or a mapping with a kind, "
        f"got {type(workload).__name__}"
    )


def _mean_half_up(tokens: np.ndarray) -> int:
    return int(np.floor(tokens.mean() + 0.5))


def _sla_concurrency(columns: Any, ttft_ms: float, tpot_ms: float) -> int:
    arrival = columns.arrival_ms
    end = arrival + ttft_ms + np.maximum(columns.output_length.astype(np.float64) - 1, 0) * tpot_ms
    # Ends sort before starts at the same instant: a request done then is not in flight.
    times = np.concatenate([end, arrival])
    steps = np.concatenate([np.full(len(end), -1), np.ones(len(arrival), dtype=np.int64)])
    order = np.lexsort((steps, times))
    return int(np.cumsum(steps[order]).max())


def lower_workload(
    workload: TraceWorkload | SyntheticWorkload | Mapping[str, Any],
    context_length: int | None = None,
    *,
    sla_ms: tuple[float, float] | None = None,
) -> LoweredWorkload:
    """Derive what AIC needs from a workload, exactly as given; the one place this happens.

    A synthetic workload with fixed lengths and count supplies its own ``isl`` and ``osl``. A
    trace workload (which has no fixed length; one given isl/osl is refused by the workload
    rule), or a synthetic one with drawn lengths or a duration, is lowered from its rows:

    * ``isl`` / ``osl``: the mean prompt and output length, rounded half up. With the generator
      keeping the engine limits passed in, AIC uses these lengths only for its benchmark
      artifacts, which send requests of that length; the mean makes such a benchmark carry the
      trace's token volume per request (so tokens/s at a request rate match), where the median
      would understate a heavy-tailed trace (Mooncake conversation: mean 12,035, median 6,909).
    * ``context_length``: ``context_length`` if given, else the longest request's prompt plus
      output tokens, so the engine admits every request the simulation served.
    * ``longest_prompt``: the longest prompt, for buffers that must hold one prompt's KV.
    * ``concurrency``: with ``sla_ms`` (the TTFT and TPOT limits, ms), the most requests in
      flight at once were each to take its SLA time, from the rows' arrivals and outputs.

    A ``context_length`` shorter than the longest request raises
    :class:`~dynosim.errors.ConfigError`: the deployment would reject requests the simulation
    served. All lengths are tokens.
    """
    wl = _as_workload(workload)
    kind: Literal["trace", "synthetic"] = (
        "synthetic" if isinstance(wl, SyntheticWorkload) else "trace"
    )
    fixed = (
        isinstance(wl, SyntheticWorkload)
        and isinstance(wl.isl, int)
        and isinstance(wl.osl, int)
        and wl.count is not None
    )
    # The rows (generated once for synthetic traffic), unless fixed lengths say all.
    cols = None if fixed and sla_ms is None else wl.columns()
    if fixed:
        isl, osl, requests = wl.isl, wl.osl, wl.count
        longest_prompt = wl.isl
        totals = np.array([wl.isl + wl.osl], dtype=np.int64)
    else:
        # Lengths drawn from distributions (or a duration) are lowered from the generated rows
        # like a trace's: the same statistics of real, not invented, lengths.
        assert cols is not None
        prompts = cols.input_length.astype(np.int64)
        outputs = cols.output_length.astype(np.int64)
        totals = prompts + outputs  # int64: uint32 sums could wrap
        isl, osl, requests = _mean_half_up(prompts), _mean_half_up(outputs), len(cols)
        longest_prompt = int(prompts.max())
    longest = int(totals.max())
    problem = context_length_problem(longest) if context_length is None else None
    if problem is not None:  # the engine's token limit would be one no deployment has
        raise ConfigError(
            f"workload: the longest request, prompt plus output, is the deployment's context "
            f"length: {problem}"
        )
    concurrency = None if cols is None or sla_ms is None else _sla_concurrency(cols, *sla_ms)
    if context_length is not None and context_length < longest:
        over = requests if fixed else int((totals > context_length).sum())
        raise ConfigError(
            f"candidate.context_length {context_length} is shorter than the longest request of "
            f"the {kind} workload ({longest} tokens, prompt plus output); the deployment would "
            f"reject {over} of {requests} requests that the simulation served"
        )
    return LoweredWorkload(
        kind=kind,
        isl=isl,
        osl=osl,
        context_length=longest if context_length is None else context_length,
        longest_prompt=longest_prompt,
        longest_request=longest,
        requests=requests,
        concurrency=concurrency,
    )


__all__ = ["LoweredWorkload", "lower_workload"]
