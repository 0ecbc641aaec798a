"""What many candidates derive, derived once: each distinct ``aic`` timing section of a sweep
becomes its step-time tables, and each distinct KV sizing its blocks, once rather than once per
replay (resolving a section against AIC and reading its cached tables takes ~10 ms, more than a
candidate's share of a sweep)."""

from __future__ import annotations

from dynosim.config import SimConfig
from dynosim.replay import Derivations, core_config


class TimingTables:
    """The tables and sizes of every configuration met so far, or why AIC cannot derive them."""

    def __init__(self) -> None:
        self._memo = Derivations()

    def core_json(self, config: SimConfig) -> str:
        """``config`` as the JSON document the core replays (:func:`dynosim.replay.core_config`).

        Raises:
            ConfigError: AIC cannot time or size a section (the same error every time it is
                asked).
            MissingExtraError: AIConfigurator is not installed.
        """
        return core_config(config, self._memo)[0]


__all__ = ["TimingTables"]
