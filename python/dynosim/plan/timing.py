"""AIConfigurator timing for many candidates at once: each distinct ``aic`` timing section of a
sweep becomes its step-time table once, instead of once per replay (resolving a section against
AIC and reading its cached table takes ~10 ms, more than a candidate's share of a sweep)."""

from __future__ import annotations

from dynosim.aic import aic_table_timing
from dynosim.config import AicTiming, SimConfig, TableTiming
from dynosim.errors import ConfigError


class TimingTables:
    """The ``table`` timing of every ``aic`` section met so far, or why AIC cannot build it."""

    def __init__(self) -> None:
        self._tables: dict[AicTiming, TableTiming | ConfigError] = {}

    def _table(self, spec: AicTiming) -> TableTiming:
        if spec not in self._tables:
            try:
                self._tables[spec] = aic_table_timing(spec)
            except ConfigError as e:
                self._tables[spec] = e
        table = self._tables[spec]
        if isinstance(table, ConfigError):
            raise table
        return table

    def core_json(self, config: SimConfig) -> str:
        """``config`` as the JSON document the core replays: its ``aic`` timing sections
        (``timing``, ``prefill.timing``, ``decode.timing``) replaced by their tables.

        Raises:
            ConfigError: AIC cannot time a section (the same error every time it is asked).
            MissingExtraError: AIConfigurator is not installed.
        """
        update: dict[str, object] = {}
        if isinstance(config.timing, AicTiming):
            update["timing"] = self._table(config.timing)
        for role in ("prefill", "decode"):
            section = getattr(config, role)
            if isinstance(section.timing, AicTiming):
                table = self._table(section.timing)
                update[role] = section.model_copy(update={"timing": table})
        # The tables were validated when built; the core checks the whole document again.
        return (config.model_copy(update=update) if update else config).model_dump_json()


__all__ = ["TimingTables"]
