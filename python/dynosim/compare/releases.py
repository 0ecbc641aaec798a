"""The ``aisimulate-core`` releases the AISimulate comparison builds on
(:mod:`~dynosim.compare.aisimulate`), apart from the comparison itself: a light module, for
``offline_replay_bench --help`` lists them and must start fast."""

from __future__ import annotations

from dataclasses import dataclass

from dynosim.compare.aisimulate_build import DEFAULT_VERSION


@dataclass(frozen=True)
class Release:
    """An ``aisimulate-core`` release the comparison builds on, and how its KV transfers use
    links (a key of :data:`~dynosim.compare.peer.LINK_MODELS`)."""

    version: str
    link_model: str
    #: Whether its G2/G3 tiers share their links max-min fairly like dynosim's (compared), or
    #: are another model (FIFO transfer lanes per rank: refused).
    offload_tiers: bool


#: The releases ``--aisimulate-version`` takes, by version: the stable one (the default) and the
#: development build whose P/D links are shared max-min fairly.
RELEASES = {
    r.version: r
    for r in (
        Release(DEFAULT_VERSION, link_model="line_rate", offload_tiers=False),
        Release("0.13.0-dev.202611020000000092", link_model="max_min", offload_tiers=True),
    )
}
#: The release compared with by default.
AISIMULATE_VERSION = DEFAULT_VERSION

#: Seconds one replay may take (the conversation trace takes about 6 s). AISimulate's SGLang
#: engine can spin without progress on a request that never fits its cache.
RUN_TIMEOUT_S = 600.0

__all__ = ["AISIMULATE_VERSION", "RELEASES", "RUN_TIMEOUT_S", "Release"]
