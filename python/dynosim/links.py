"""Max-min fair bandwidth sharing, the allocator behind dynosim's KV-transfer links, for network
what-ifs outside a replay."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from dynosim import _core
from dynosim._shown import shown
from dynosim.errors import ConfigError

#: Link ids travel to the core as unsigned 64-bit integers.
_MAX_ID = 2**64


def max_min_rates(
    flows: Sequence[Sequence[int]],
    capacities: Sequence[float],
    caps: Sequence[float] | None = None,
) -> np.ndarray:
    """The max-min fair rate of each flow.

    Args:
        flows: each flow as the ids of the links it crosses (indices into ``capacities``).
        capacities: capacity of each link, in any rate unit (GB/s, bytes/ms, ...), finite, > 0.
        caps: optional per-flow rate limit in the same unit (``inf`` for none).

    Returns:
        float64 array of rates, in the capacities' unit. Progressive filling: every flow rises
        together until a link saturates or a flow hits its cap; capacity a flow cannot use goes
        to the others. Raises ConfigError naming a bad link id, capacity or cap.
    """
    n_links = len(capacities)
    ids = [
        [_link_id(i, link, n_links) for link in _items(f"flow {i}", flow)]
        for i, flow in enumerate(_items("flows", flows))
    ]
    return _core.max_min_rates(
        ids,
        [_number(f"link {i}: capacity", c) for i, c in enumerate(_items("capacities", capacities))],
        None
        if caps is None
        else [_number(f"flow {i}: cap", c) for i, c in enumerate(_items("caps", caps))],
    )


def _items(what: str, value: Any) -> list[Any]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence | np.ndarray):
        raise ConfigError(f"{what}: expected a sequence, got {shown(value)}")
    return list(value)


def _link_id(flow: int, value: Any, n_links: int) -> int:
    """A link id as an integer (0.7 or true is no link id); the core checks it names a link,
    ids no integer type of the core holds are refused here in the core's words."""
    try:
        link = operator.index(value) if not isinstance(value, bool) else None
    except TypeError:
        link = None
    if link is None:
        raise ConfigError(f"flow {flow}: link id {shown(value)} is not an integer")
    if not 0 <= link < _MAX_ID:
        raise ConfigError(
            f"flow {flow}: link id {link} is out of range (there are {n_links} links)"
        )
    return link


def _number(what: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{what}: expected a number, got {shown(value)}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{what}: expected a number, got {shown(value)}") from None


__all__ = ["max_min_rates"]
