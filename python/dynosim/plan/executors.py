"""Where a sweep's replays run: a thread pool (the default: the core releases the GIL, and
every thread shares one prepared copy of the workload), a process pool, Ray tasks, or any
``concurrent.futures.Executor``. Each replay returns its summary and wall time, or why it
failed; results come back as they finish.

Ctrl-C (and SIGTERM, which the command line handles as Ctrl-C) stops a sweep within
milliseconds: the replays of a thread pool share one
``_core.Control`` that the runner interrupts when the sweep is interrupted; the workers of a
process pool it owns are terminated (each ignores SIGINT, so the Ctrl-C a terminal sends to the
whole process group prints no traceback from an idle worker). Replays not started are
cancelled."""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from dynosim import _core, _dependencies
from dynosim._plan_defaults import DEFAULT_EXECUTOR, EXECUTORS
from dynosim._shown import shown
from dynosim.errors import ConfigError, DynosimError
from dynosim.plan.resources import PROCESS_BYTES, check_memory, parallel_jobs
from dynosim.workload import TraceColumns
from dynosim.workload.prepared import PreparedWorkload


@dataclass(frozen=True)
class Outcome:
    """What one replay gave: its summary JSON, or the reason it failed; wall time (ms)."""

    summary_json: str | None
    error: str
    wall_ms: float


def _replay(workload: PreparedWorkload, core_json: str, control: Any = None) -> Outcome:
    start = time.perf_counter()
    try:
        summary = workload.replay_summary(core_json, control)
    except DynosimError as e:  # a candidate the core refuses or cannot finish: its row says why
        return Outcome(None, f"{type(e).__name__}: {e}", (time.perf_counter() - start) * 1e3)
    return Outcome(summary, "", (time.perf_counter() - start) * 1e3)


# One prepared workload per worker process (process pools, Ray workers, foreign executors),
# keyed by the sweep that shipped it; only the latest is kept.
_SHIPPED: dict[str, PreparedWorkload] = {}


def _start_worker(token: str, columns: TraceColumns) -> None:
    """A process pool worker's start: SIGINT ignored (the Ctrl-C a terminal sends the whole
    process group is the sweep's to handle: it terminates its workers), SIGTERM back to its
    default (a forked worker inherits the command's handler, but the sweep ends it with
    SIGTERM), and the workload installed."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _install(token, columns)


def _install(token: str, columns: TraceColumns) -> PreparedWorkload:
    if token not in _SHIPPED:
        _SHIPPED.clear()
        _SHIPPED[token] = PreparedWorkload(columns)
    return _SHIPPED[token]


def _replay_installed(token: str, core_json: str) -> Outcome:
    """A task of a process pool whose initializer installed the workload."""
    return _replay(_SHIPPED[token], core_json)


def _terminate_workers(pool: cf.ProcessPoolExecutor) -> None:
    """End the worker processes of ``pool`` now, their replays with them."""
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
    if terminate is not None:
        terminate()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()


def _replay_shipped(token: str, columns: TraceColumns, core_json: str) -> Outcome:
    """A task that carries its workload (prepared once per worker process)."""
    return _replay(_install(token, columns), core_json)


class Runner:
    """Runs replays of one workload on an executor.

    ``executor``: None or ``"threads"`` (a thread pool of ``jobs`` threads, default the CPU
    count), ``"processes"`` (a process pool, the workload shipped to each process once),
    ``"ray"`` (Ray tasks, the workload put in Ray's object store once, so each node fetches
    it once and each worker process prepares it once; Ray is started locally unless already
    initialised, or joined at ``address``, an existing cluster's, as ``ray start --head``
    prints it), or a ``concurrent.futures.Executor`` (its own workers;
    ``jobs`` must be None). Close it (or use it as a context manager) to stop a pool it owns
    and the replays still running in its threads (after Ctrl-C, say).

    Threads and processes run at most as many replays at once as there are CPUs and
    ``tasks`` (when given), and are refused before they start when that many replays of
    ``replay_bytes`` each would not fit in memory; ``force`` lifts both (see
    :mod:`dynosim.plan.resources`).
    """

    def __init__(
        self,
        columns: TraceColumns,
        executor: Any = None,
        jobs: int | None = None,
        *,
        tasks: int | None = None,
        force: bool = False,
        replay_bytes: int = 0,
        address: str | None = None,
    ):
        if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
            raise ConfigError(f"jobs: expected a positive integer, got {shown(jobs)}")
        if address is not None and executor != "ray":
            raise ConfigError(
                f"address: the Ray cluster to run on, for executor 'ray'; got executor "
                f"{shown(executor)}"
            )
        self.columns = columns
        self.token = uuid.uuid4().hex
        self._ray: Any = None
        self._owned: cf.Executor | None = None
        self._shared: PreparedWorkload | None = None
        self._submit: Any = None
        self._pending: dict[Any, Any] = {}
        self._control = _core.Control()  # shared by the replays of a thread pool
        if isinstance(executor, cf.Executor):
            if jobs is not None:
                raise ConfigError(
                    f"jobs: applies to the named executors ({', '.join(EXECUTORS)}); an "
                    "Executor instance has its own workers"
                )
            self._use(executor)
            self.jobs = getattr(executor, "_max_workers", None) or os.cpu_count() or 1
            return
        name = DEFAULT_EXECUTOR if executor is None else executor
        if name not in EXECUTORS:
            raise ConfigError(
                f"executor: expected one of {', '.join(EXECUTORS)} or a "
                f"concurrent.futures.Executor, got {shown(executor)}"
            )
        if name != "ray":  # a Ray cluster's CPUs and memory are its own
            self.jobs = parallel_jobs(jobs, tasks, force=force)
            if not force:
                # Threads share one prepared copy of the workload; each process holds the
                # columns it was sent and its prepared copy, besides the interpreter.
                workload = columns.nbytes
                if name == "threads":
                    check_memory(self.jobs, replay_bytes, workload, 0)
                else:
                    check_memory(self.jobs, replay_bytes, 0, PROCESS_BYTES + 2 * workload)
        if name == "threads":
            self._owned = cf.ThreadPoolExecutor(self.jobs, thread_name_prefix="dynosim-sweep")
            self._use(self._owned)
        elif name == "processes":
            self._owned = cf.ProcessPoolExecutor(
                self.jobs, initializer=_start_worker, initargs=(self.token, columns)
            )
            self._submit = lambda core_json: self._owned.submit(  # type: ignore[union-attr]
                _replay_installed, self.token, core_json
            )
        else:
            ray = _dependencies.ray("executor='ray'")
            if not ray.is_initialized():
                # A running cluster's (address), else one started here.
                options = (
                    {"num_cpus": jobs, "include_dashboard": False}
                    if address is None
                    else {"address": address}
                )
                try:
                    ray.init(log_to_driver=False, **options)
                except Exception as e:  # Ray's many ways of failing to start, in its words
                    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                    where = "did not start" if address is None else f"found no cluster at {address}"
                    raise DynosimError(
                        f"executor 'ray': Ray {where} ({type(e).__name__}: {first[:300]})"
                    ) from None
            self._ray = ray
            self._ray_columns = ray.put(columns)
            self._ray_task = ray.remote(_replay_shipped).options(num_cpus=1)
            self.jobs = jobs or max(1, int(ray.cluster_resources().get("CPU", 1)))

    def _use(self, executor: cf.Executor) -> None:
        if isinstance(executor, cf.ThreadPoolExecutor):
            # Threads share one prepared workload (the block identities it caches included).
            self._shared = PreparedWorkload(self.columns)
            shared, control = self._shared, self._control
            self._submit = lambda core_json: executor.submit(_replay, shared, core_json, control)
        else:
            self._submit = lambda core_json: executor.submit(
                _replay_shipped, self.token, self.columns, core_json
            )

    def submit(self, key: Any, core_json: str) -> None:
        """Start replaying ``core_json``; :meth:`wait` returns it under ``key``."""
        if self._ray is not None:
            ref = self._ray_task.remote(self.token, self._ray_columns, core_json)
            self._pending[ref] = key
        else:
            self._pending[self._submit(core_json)] = key

    @property
    def in_flight(self) -> int:
        """Replays submitted and not yet returned by :meth:`wait`."""
        return len(self._pending)

    def wait(self) -> list[tuple[Any, Outcome]]:
        """Block until at least one replay in flight finishes; its ``(key, Outcome)`` pairs
        (a replay the executor lost, a worker dying, comes back as a failure)."""
        if not self._pending:
            return []
        if self._ray is not None:
            ready, _ = self._ray.wait(list(self._pending), num_returns=1)
            get = self._ray.get
        else:
            ready, _ = cf.wait(self._pending, return_when=cf.FIRST_COMPLETED)

            def get(future: Any) -> Outcome:
                return future.result()

        out = []
        for handle in ready:
            key = self._pending.pop(handle)
            try:
                outcome = get(handle)
            except Exception as e:
                outcome = Outcome(None, f"{type(e).__name__}: {e}", float("nan"))
            out.append((key, outcome))
        return out

    def run(self, tasks: Iterable[tuple[Any, str]]) -> Iterator[tuple[Any, Outcome]]:
        """Replay each ``(key, core JSON)`` and yield ``(key, Outcome)`` as replays finish,
        at most twice the job count in flight."""
        for key, core_json in tasks:
            self.submit(key, core_json)
            if self.in_flight >= 2 * self.jobs:
                yield from self.wait()
        while self.in_flight:
            yield from self.wait()

    def cancel(self) -> None:
        """Cancel the replays in flight that have not started, and stop those running in this
        process's threads or in the worker processes it started (after an interrupt)."""
        self._control.interrupt()
        if self._pending and isinstance(self._owned, cf.ProcessPoolExecutor):
            _terminate_workers(self._owned)
        for handle in self._pending:
            if self._ray is not None:
                self._ray.cancel(handle)
            else:
                handle.cancel()
        self._pending.clear()

    def close(self) -> None:
        """Cancel what has not started, stop what runs in this process's threads, and stop
        the pool this runner started (a caller's executor is left running)."""
        self.cancel()
        if self._owned is not None:
            self._owned.shutdown(wait=True, cancel_futures=True)
            self._owned = None

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Outcome", "Runner"]
