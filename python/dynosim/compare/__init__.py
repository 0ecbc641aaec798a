"""Side by side comparisons: with Dynamo's own offline replay (:mod:`~dynosim.compare.dynamo`,
the ``compare`` extra), with AISimulate's replay (:mod:`~dynosim.compare.aisimulate`, built
from this checkout with cargo), both through what they share (:mod:`~dynosim.compare.peer`),
and with a measured benchmark run (:mod:`~dynosim.compare.measured`)."""

from dynosim._dependencies import DYNAMO_VERSION
from dynosim.compare.aisimulate import AISIMULATE_VERSION, AisimulateReplay, aisimulate_args
from dynosim.compare.aisimulate_build import aisimulate_binary
from dynosim.compare.dynamo import DynamoReplay, dynamo_replay_kwargs
from dynosim.compare.measured import (
    ComparisonRow,
    MeasuredComparison,
    compare_measured,
    measured_summary,
)
from dynosim.compare.peer import METRICS, PeerRun, metric_rows, relative_difference

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
