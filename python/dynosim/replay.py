"""``dynosim.replay``: run a workload on a simulated cluster."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from dynosim import _core
from dynosim.config import AicTiming, SimConfig, load_config
from dynosim.report import Report
from dynosim.workload import SyntheticWorkload, TraceColumns, TraceWorkload, load_trace

#: Runs shorter than this (s) show no progress bar.
_PROGRESS_AFTER_S = 1.0


def _columns(
    workload: TraceWorkload | SyntheticWorkload | TraceColumns | str | Path,
) -> TraceColumns:
    if isinstance(workload, TraceColumns):
        return workload
    if isinstance(workload, str | Path):
        workload = load_trace(workload)
    return workload.columns()


def core_config_json(config: SimConfig) -> str:
    """``config`` as the JSON document the core replays: its ``aic`` timing sections become
    their ``table`` timing (built once with AIConfigurator, then read from the on-disk cache),
    since the core prices passes from tables only."""
    timings = (config.timing, config.prefill.timing, config.decode.timing)
    if not any(isinstance(t, AicTiming) for t in timings):
        return config.model_dump_json()
    from dynosim.aic import aic_sections_to_tables

    return json.dumps(aic_sections_to_tables(config.model_dump()))


def replay(
    workload: TraceWorkload | SyntheticWorkload | TraceColumns | str | Path,
    config: SimConfig | dict[str, Any] | str | Path | None = None,
    *,
    progress: bool = False,
) -> Report:
    """Replay ``workload`` on the cluster ``config`` describes and return its Report.

    Args:
        workload: a trace (``load_trace``), a ``SyntheticWorkload``, columns, or a trace path.
        config: a SimConfig, a dict of its fields, a YAML/JSON file path, or None for defaults.
        progress: show a progress bar on stderr when the run takes more than a second.

    The replay runs in Rust without the GIL; the same workload and config give a
    byte-identical ``Report.to_json()``.
    """
    cfg = load_config(config)
    cols = _columns(workload)
    args = (cols, core_config_json(cfg))
    if not progress:
        return Report(_core.replay(*args))
    return Report(_run_with_progress(args, len(cols)))


def _run_with_progress(args: tuple[Any, ...], total: int) -> dict[str, Any]:
    counter = _core.Progress()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["raw"] = _core.replay(*args, progress=counter)
        except BaseException as e:  # re-raised in the caller's thread
            outcome["error"] = e

    worker = threading.Thread(target=run, name="dynosim-replay", daemon=True)
    worker.start()
    worker.join(_PROGRESS_AFTER_S)
    if worker.is_alive():
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        columns = (
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, transient=True, console=_stderr_console()) as bar:
            task = bar.add_task("replaying requests", total=total)
            while worker.is_alive():
                bar.update(task, completed=counter.done)
                time.sleep(0.1)
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["raw"]


def _stderr_console():
    from rich.console import Console

    return Console(file=sys.stderr)


__all__ = ["core_config_json", "replay"]
