"""``dynosim.replay``: run a workload on a simulated cluster.

Two ways in: :func:`replay` takes any workload and a configuration that its models check
(pydantic); :func:`replay_file` takes a trace file and a configuration document the core checks
alone, which is how the command line starts without building the models (pydantic's import and
model building are most of a start)."""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynosim import _core
from dynosim._version import version
from dynosim._workload_defaults import TRACE_BLOCK_SIZE
from dynosim.errors import ConfigError, WorkloadError
from dynosim.sizing import SizeMemo, size_document
from dynosim.workload.identity import file_identity
from dynosim.workload.trace_file import read_trace_file

if TYPE_CHECKING:
    from dynosim.config import SimConfig
    from dynosim.report import Report
    from dynosim.workload import SyntheticWorkload, TraceColumns, TraceWorkload

#: Runs shorter than this (s) show no progress bar.
_PROGRESS_AFTER_S = 1.0


def _requests(
    workload: TraceWorkload | SyntheticWorkload | TraceColumns | str | Path,
) -> tuple[Any, dict[str, str]]:
    """The requests of ``workload`` as the core replays them (columns, or the requests the core
    read from a Mooncake file) and what names them (a trace's file name and hash)."""
    from dynosim.workload.base import is_columns, is_synthetic
    from dynosim.workload.identity import identity
    from dynosim.workload.trace import TraceWorkload, load_trace

    if is_columns(workload):
        return workload, identity(workload, workload)
    if isinstance(workload, str | Path):
        workload = load_trace(workload)
    if not isinstance(workload, TraceWorkload) and not is_synthetic(workload):
        raise WorkloadError(
            "workload: expected a TraceWorkload, SyntheticWorkload, TraceColumns or a trace "
            f"path, got {type(workload).__name__}"
        )
    requests = workload.requests() if isinstance(workload, TraceWorkload) else workload.columns()
    return requests, identity(workload, requests)


@dataclass
class Derivations:
    """What :func:`core_config` derived so far, kept across calls (a sweep's candidates share
    a few AIC timing sections and sizes): each distinct one is derived once, failures
    included."""

    tables: dict[Any, Any] = field(default_factory=dict)
    sizes: SizeMemo = field(default_factory=dict)
    #: Each timing table's JSON text, by the table file that holds it.
    table_json: dict[str, str] = field(default_factory=dict)


def core_config(config: SimConfig, memo: Derivations | None = None) -> tuple[str, dict[str, Any]]:
    """``config`` as the JSON document the core replays, and the provenance of what was derived
    for it. Sizes first (:func:`dynosim.sizing.resolve_sizes`: each role's KV blocks and the
    KV bytes of a token, given or derived from the model, its ``kv_capacity`` and
    ``kv_bytes_per_token``); then, as the core prices passes from tables only, ``aic`` sections
    become their ``op_tables`` timing (built once with AIConfigurator, then read from the
    on-disk cache; ``timing``: what priced each section by its dotted path)."""
    from dynosim.config import AicTiming
    from dynosim.sizing import resolve_sizes

    memo = Derivations() if memo is None else memo
    sized = resolve_sizes(config, memo.sizes)
    notes = dict(sized.provenance)
    timings = (sized.config.timing, sized.config.prefill.timing, sized.config.decode.timing)
    if not any(isinstance(t, AicTiming) for t in timings):
        return sized.config.model_dump_json(), notes
    from dynosim.aic import aic_sections_to_tables

    resolved, notes["timing"] = aic_sections_to_tables(sized.config.model_dump(), memo=memo.tables)
    return _dumps(resolved, notes["timing"], memo.table_json), notes


def _dumps(document: dict[str, Any], priced: dict[str, Any], texts: dict[str, str]) -> str:
    """``json.dumps(document)``, each of its timing tables (``priced``: their provenance by
    dotted path) turned into text once per table: a table is most of the document (~0.8 MB,
    70 ms to serialize) and a sweep's candidates share a few."""
    marks = {}
    for path, found in priced.items():
        holder = document if path == "timing" else document[path.split(".")[0]]
        key = found["tables"]
        if key not in texts:
            texts[key] = json.dumps(holder["timing"])
        holder["timing"] = mark = f"\u0000dynosim table {path}\u0000"
        marks[json.dumps(mark)] = texts[key]
    text = json.dumps(document)
    for mark, table in marks.items():
        text = text.replace(mark, table, 1)
    return text


def core_config_json(config: SimConfig) -> str:
    """``config`` as the JSON document the core replays (see :func:`core_config`)."""
    return core_config(config)[0]


def replay(
    workload: TraceWorkload | SyntheticWorkload | TraceColumns | str | Path,
    config: SimConfig | dict[str, Any] | str | Path | None = None,
    *,
    progress: bool = False,
    provenance: dict[str, Any] | None = None,
) -> Report:
    """Replay ``workload`` on the cluster ``config`` describes and return its Report.

    Args:
        workload: a trace (``load_trace``), a ``SyntheticWorkload``, columns, or a trace path.
        config: a SimConfig, a dict of its fields, a YAML/JSON file path, or None for defaults.
        progress: show a progress bar on stderr when the run takes more than a second.
        provenance: more of where settings came from, recorded in the report beside what
            the replay derived (``kv_capacity``, ``kv_bytes_per_token``, ``timing``: see
            :func:`core_config`).

    The replay runs in Rust without the GIL; Ctrl-C stops it within milliseconds
    (``KeyboardInterrupt``). The same workload and config give a byte-identical
    ``Report.to_json()``. The report's configuration holds the sizes used (given or derived,
    :mod:`dynosim.sizing`); an ``aic`` timing section in it stays as given, its
    ``provenance["timing"]`` entry naming the tables that priced it.
    """
    from dynosim.config import load_config

    cfg = load_config(config)
    requests, trace = _requests(workload)
    config_json, derived = core_config(cfg)
    raw = _replay_raw(requests, config_json, progress)
    priced = derived.get("timing")
    if priced:
        # Report the sections as given: the tables are named by their provenance.
        config_out = json.loads(raw["config_json"])
        given = cfg.model_dump(mode="json")
        for path in priced:
            holder, given_holder = config_out, given
            for part in path.split(".")[:-1]:
                holder, given_holder = holder[part], given_holder[part]
            holder["timing"] = given_holder["timing"]
        raw["config_json"] = json.dumps(config_out)
    return _report(raw, trace, {**derived, **(provenance or {})})


def replay_file(
    path: str | Path,
    document: dict[str, Any],
    *,
    trace_block_size: int = TRACE_BLOCK_SIZE,
    format: str | None = None,
    progress: bool = False,
) -> Report:
    """Replay the trace file ``path`` on the configuration ``document``, checked by the core
    alone: no configuration or workload model is built, so neither pydantic nor numpy is
    imported before the replay.

    ``document`` holds the settings as plain JSON values (finite numbers), as a configuration
    file would, any left out at their defaults (:func:`dynosim._defaults.settings_document` is
    one with none given); it is not changed. The KV blocks it leaves unset are sized as
    :mod:`dynosim.sizing` says. Timing sections are priced as written: an ``aic`` section needs
    :func:`replay`, which builds its tables. The report is the one
    ``replay(load_trace(path, trace_block_size, format), document)`` gives, byte for byte; a
    value the core refuses raises ConfigError naming its dotted path, and a bad row
    WorkloadError naming the file, line, field and value.
    """
    try:
        text = json.dumps(document, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ConfigError(
            f"configuration document: {e}; replay_file takes plain JSON values "
            "(replay takes a configuration model or a file)"
        ) from None
    data = json.loads(text)
    # Sized first: the core checks the document before a file of millions of rows is read.
    derived = size_document(data, text)
    trace = read_trace_file(Path(path), trace_block_size, format)
    raw = _replay_raw(trace.requests, json.dumps(data), progress)
    return _report(raw, file_identity(trace.path, trace.sha256), derived)


def _report(raw: dict[str, Any], trace: dict[str, str], notes: dict[str, Any]) -> Report:
    """The Report of the core's replay ``raw`` of the requests ``trace`` names, with ``notes``
    (where settings came from) in its provenance."""
    # The report's module (numpy) is imported once the replay is done: its start waits on it.
    from dynosim.report import Report, config_sha256

    provenance: dict[str, Any] = {"dynosim_version": version(), "trace": trace, **notes}
    provenance["config_sha256"] = config_sha256(json.loads(raw["config_json"]))
    return Report(raw, provenance)


def _replay_raw(requests: Any, config_json: str, progress: bool) -> dict[str, Any]:
    """The core's replay, in this thread so Ctrl-C stops it (the binding runs the signal
    handlers while it waits); a progress bar, when asked, is drawn by a thread beside it."""
    if not progress:
        return _core.replay(requests, config_json)
    control = _core.Control()
    finished = threading.Event()
    bar = threading.Thread(
        target=_show_progress, args=(control, len(requests), finished), name="dynosim-progress"
    )
    bar.start()
    try:
        return _core.replay(requests, config_json, control=control)
    finally:
        finished.set()
        bar.join()


def _show_progress(control: Any, total: int, finished: threading.Event) -> None:
    """A progress bar of ``control``'s finished requests until ``finished`` is set, shown only
    when the replay takes more than a second."""
    # The wait first: rich is imported only for a replay that lasts, not beside every start.
    if finished.wait(_PROGRESS_AFTER_S):
        return
    console = _stderr_console()
    if not console.is_terminal:
        return  # a bar drawn into a log file or a pipe is noise
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=True, console=console) as bar:
        task = bar.add_task("replaying requests", total=total)
        while not finished.wait(0.1):
            bar.update(task, completed=control.done)


def _stderr_console():
    from rich.console import Console

    return Console(file=sys.stderr)


__all__ = ["Derivations", "core_config", "core_config_json", "replay", "replay_file"]
