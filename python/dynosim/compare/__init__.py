"""Side by side comparisons: with Dynamo's own offline replay (:mod:`~dynosim.compare.dynamo`,
the ``compare`` extra), with AISimulate's replay (:mod:`~dynosim.compare.aisimulate`, built
from this checkout with cargo), both through what they share (:mod:`~dynosim.compare.peer`),
and with a measured benchmark run (:mod:`~dynosim.compare.measured`)."""

from typing import TYPE_CHECKING

from dynosim._lazy import lazy_names

if TYPE_CHECKING:
    from dynosim._dependencies import DYNAMO_VERSION
    from dynosim.compare.aisimulate import AisimulateReplay, aisimulate_args
    from dynosim.compare.aisimulate_build import aisimulate_binary
    from dynosim.compare.dynamo import DynamoReplay, dynamo_replay_kwargs
    from dynosim.compare.measured import (
        ComparisonRow,
        MeasuredComparison,
        compare_measured,
        measured_summary,
    )
    from dynosim.compare.peer import METRICS, PeerRun, metric_rows, relative_difference
    from dynosim.compare.releases import AISIMULATE_VERSION

#: The public names, imported on first use from the module that defines them
#: (offline_replay_bench --help reads the releases without the configuration models).
_LAZY = {
    "DYNAMO_VERSION": "dynosim._dependencies",
    "AISIMULATE_VERSION": "dynosim.compare.releases",
    "AisimulateReplay": "dynosim.compare.aisimulate",
    "aisimulate_args": "dynosim.compare.aisimulate",
    "aisimulate_binary": "dynosim.compare.aisimulate_build",
    "DynamoReplay": "dynosim.compare.dynamo",
    "dynamo_replay_kwargs": "dynosim.compare.dynamo",
    **dict.fromkeys(
        ("ComparisonRow", "MeasuredComparison", "compare_measured", "measured_summary"),
        "dynosim.compare.measured",
    ),
    **dict.fromkeys(
        ("METRICS", "PeerRun", "metric_rows", "relative_difference"), "dynosim.compare.peer"
    ),
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())


__all__ = [
    "AISIMULATE_VERSION",
    "DYNAMO_VERSION",
    "METRICS",
    "AisimulateReplay",
    "ComparisonRow",
    "DynamoReplay",
    "MeasuredComparison",
    "PeerRun",
    "aisimulate_args",
    "aisimulate_binary",
    "compare_measured",
    "dynamo_replay_kwargs",
    "measured_summary",
    "metric_rows",
    "relative_difference",
]
