"""``dynosim.sweep``: replay one workload under every candidate configuration of a space and
tabulate what each showed against an SLA."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynosim import _core
from dynosim.config import SimConfig, SlaConfig, load_config, resolve
from dynosim.errors import DynosimError
from dynosim.plan.executors import Outcome, Runner
from dynosim.plan.result import SweepResult, metrics_row
from dynosim.plan.sla import Sla
from dynosim.plan.space import Space
from dynosim.plan.timing import TimingTables
from dynosim.workload import SyntheticWorkload, TraceColumns, TraceWorkload, load_trace

#: What a sweep replays: a trace, synthetic traffic, columns or a trace path.
WorkloadLike = TraceWorkload | SyntheticWorkload | TraceColumns | str | Path


def workload_columns(workload: WorkloadLike) -> TraceColumns:
    """The columns of any workload a sweep accepts (a trace file is read once, here)."""
    if isinstance(workload, TraceColumns):
        return workload
    if isinstance(workload, str | Path):
        workload = load_trace(workload)
    return workload.columns()


def with_goodput_sla(base: SimConfig, sla: Sla) -> SimConfig:
    """``base`` whose goodput thresholds are the SLA's limits when it sets none itself, so
    goodput counts the requests within the SLA's TTFT and TPOT limits."""
    if any(v is not None for v in base.sla.model_dump().values()) or not sla.limits():
        return base
    return base.model_copy(update={"sla": SlaConfig(ttft_ms=sla.ttft_ms, itl_ms=sla.tpot_ms)})


@dataclass(frozen=True)
class Trial:
    """One configuration to replay, with the settings that label its row."""

    index: int
    settings: dict[str, Any]
    config: SimConfig


class Progress:
    """A progress bar on stderr (done / total, elapsed, time left), or nothing."""

    def __init__(self, bar: Any, task: Any) -> None:
        self._bar, self._task = bar, task

    def advance(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, n)

    def total(self, total: int | None) -> None:
        if self._bar is not None:
            self._bar.update(self._task, total=total)


@contextmanager
def progress_bar(what: str, total: int | None, enabled: bool) -> Iterator[Progress]:
    """A :class:`Progress` over ``total`` steps (None: unknown), shown while the block runs
    on a terminal (a bar drawn into a log file or a pipe is noise)."""
    from rich.console import Console

    console = Console(file=sys.stderr)
    if not enabled or not console.is_terminal:
        yield Progress(None, None)
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.progress import Progress as Bar

    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        "ETA",
        TimeRemainingColumn(),
    )
    with Bar(*columns, transient=True, console=console) as bar:
        yield Progress(bar, bar.add_task(what, total=total))


def replay_candidates(
    runner: Runner,
    candidates: Iterable[Trial],
    sla: Sla,
    tables: TimingTables,
    *,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Replay every candidate on ``runner`` and return their rows (in the order they finished;
    each row carries its ``index``). A candidate that fails, from AIC refusing its timing to
    the core refusing its configuration, keeps its row with ``error`` saying why. ``on_row``
    sees each row as soon as it exists."""
    rows: list[dict[str, Any]] = []

    def finish(c: Trial, outcome: Outcome) -> None:
        view = resolve(c.config)
        summary = json.loads(outcome.summary_json) if outcome.summary_json else None
        row = {
            "index": c.index,
            **c.settings,
            **metrics_row(
                summary,
                sla,
                mode=c.config.cluster.mode,
                workers=view.num_workers,
                gpus=view.num_gpus,
                wall_ms=outcome.wall_ms,
                error=outcome.error,
            ),
        }
        rows.append(row)
        if on_row is not None:
            on_row(row)

    def tasks() -> Iterable[tuple[Trial, str]]:
        for c in candidates:
            try:
                core_json = tables.core_json(c.config)
            except DynosimError as e:  # AIC cannot time this candidate: its row says so
                finish(c, Outcome(None, f"{type(e).__name__}: {e}", float("nan")))
                continue
            yield c, core_json

    for candidate, outcome in runner.run(tasks()):
        finish(candidate, outcome)
    return rows


def sweep(
    workload: WorkloadLike,
    base: SimConfig | Mapping[str, Any] | str | Path | None = None,
    space: Space | Mapping[str, Any] | None = None,
    *,
    sla: Sla | Mapping[str, Any] | None = None,
    executor: Any = None,
    jobs: int | None = None,
    force_jobs: bool = False,
    address: str | None = None,
    progress: bool = True,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> SweepResult:
    """Replay ``workload`` under every candidate of ``space`` applied to ``base``.

    Args:
        workload: a trace (``load_trace``), a ``SyntheticWorkload``, columns, or a trace path;
            read once, its columns shared read-only by every candidate.
        base: the configuration candidates start from (SimConfig, dict, YAML/JSON path, None).
        space: a :class:`Space`, or a mapping of dotted config path -> list of values (the
            grid of every combination; a ``zip`` key pairs lists, see
            :meth:`Space.from_mapping`).
        sla: an :class:`Sla` (or a mapping of its fields): limits on TTFT and TPOT statistics
            (ms); without one a candidate "meets" it when every request completed. When
            ``base`` sets no goodput thresholds, the SLA's limits become them.
        executor: None or ``"threads"`` (a thread pool), ``"processes"``, ``"ray"`` (needs
            ``pip install 'dynosim[ray]'``), or any ``concurrent.futures.Executor``.
        jobs: workers of a named executor (default, and at most unless ``force_jobs``: the
            CPUs, or the candidates when fewer; asking for more warns). Threads and processes
            are also refused, before anything runs, when that many replays of the workload
            would not fit in the memory available (each estimated by the core for its
            candidate); ``force_jobs`` runs them anyway.
        address: with ``executor="ray"``, an existing Ray cluster's address (``ray start
            --head`` prints it); None starts Ray locally unless it is running.
        progress: show a progress bar (done / total, ETA) on stderr.
        on_row: called with each row as its replay finishes (in finishing order).

    Every candidate is validated into a SimConfig before any replay runs: an unknown path, an
    empty list or a bad value raises :class:`~dynosim.errors.ConfigError` naming it. A
    candidate that fails later keeps its row, with ``error`` saying why. The result's
    :meth:`SweepResult.to_json` is the same whatever the executor, jobs and finishing order.
    """
    if space is None:
        space = Space()
    space = Space.coerce(space)
    the_sla = Sla.coerce(sla)
    cfg = with_goodput_sla(load_config(base), the_sla)
    columns = workload_columns(workload)
    # Every candidate is checked before any replay (and the memory its replay may take
    # estimated), then made again as it is replayed: none is kept, so a space of a million
    # costs its lists, not a million configurations.
    requests, tokens = len(columns), columns.tokens
    largest = max(
        _core.replay_bytes_estimate(c.model_dump_json(), requests, tokens)
        for c in space.configs(cfg)
    )
    candidates = (
        Trial(i, settings, config)
        for i, (settings, config) in enumerate(zip(space, space.configs(cfg), strict=True))
    )
    rows: list[dict[str, Any]] = []
    runner = Runner(
        columns,
        executor,
        jobs,
        tasks=len(space),
        force=force_jobs,
        replay_bytes=largest,
        address=address,
    )
    with (
        runner,
        progress_bar("replaying candidates", len(space), progress) as bar,
    ):

        def seen(row: dict[str, Any]) -> None:
            rows.append(row)
            bar.advance()
            if on_row is not None:
                on_row(row)

        started = time.perf_counter()
        replay_candidates(runner, candidates, the_sla, TimingTables(), on_row=seen)
    return SweepResult(rows, space.paths, the_sla, wall_s=time.perf_counter() - started)


__all__ = ["Trial", "progress_bar", "replay_candidates", "sweep", "with_goodput_sla"]
