"""Max-min fair bandwidth sharing, the allocator behind dynosim's KV-transfer links, for network
what-ifs outside a replay."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dynosim import _core


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
    return _core.max_min_rates(
        [[int(link) for link in flow] for flow in flows],
        [float(c) for c in capacities],
        None if caps is None else [float(c) for c in caps],
    )


__all__ = ["max_min_rates"]
