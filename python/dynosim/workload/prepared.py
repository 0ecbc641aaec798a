"""A workload prepared for many replays: its columns handed to the core once, and the prompt
block identities computed once per block size and shared by every replay of it."""

from __future__ import annotations

from typing import Any

from dynosim import _core
from dynosim.workload.columns import TraceColumns


class PreparedWorkload:
    """Columns held by the core for many replays, from any number of threads at once.

    The first replay at a block size names the prompt blocks (a trie over the trace's hash
    ids); later replays at that size reuse the names. A replay of a prepared workload gives
    the byte-identical report of a replay of its columns. Pickling ships the columns (the
    receiving process prepares its own copy).
    """

    def __init__(self, columns: TraceColumns) -> None:
        self.columns = columns
        self._core = _core.PreparedWorkload(columns)

    def __len__(self) -> int:
        return len(self.columns)

    def replay_raw(self, core_json: str, control: Any = None) -> dict[str, Any]:
        """The core's replay of this workload under a configuration document (see
        :func:`dynosim.replay`); ``control``, a ``_core.Control``, counts and can stop it."""
        return _core.replay_prepared(self._core, core_json, control=control)

    def replay_summary(self, core_json: str, control: Any = None) -> str:
        """Only the summary JSON of a replay (no per-request arrays are built)."""
        return _core.replay_prepared_summary(self._core, core_json, control=control)

    def __reduce__(self) -> tuple[Any, ...]:
        return (PreparedWorkload, (self.columns,))


__all__ = ["PreparedWorkload"]
