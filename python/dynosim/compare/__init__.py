"""Side by side comparisons: with Dynamo's own offline replay (:mod:`~dynosim.compare.dynamo`,
the ``compare`` extra) and with a measured benchmark run (:mod:`~dynosim.compare.measured`)."""

from dynosim._dependencies import DYNAMO_VERSION
from dynosim.compare.dynamo import (
    METRICS,
    DynamoReplay,
    DynamoRun,
    dynamo_replay_kwargs,
    kv_bytes_per_token,
    metric_rows,
    relative_difference,
)
from dynosim.compare.measured import (
    ComparisonRow,
    MeasuredComparison,
    compare_measured,
    measured_summary,
)

__all__ = [
    "DYNAMO_VERSION",
    "METRICS",
    "ComparisonRow",
    "DynamoReplay",
    "DynamoRun",
    "MeasuredComparison",
    "compare_measured",
    "dynamo_replay_kwargs",
    "kv_bytes_per_token",
    "measured_summary",
    "metric_rows",
    "relative_difference",
]
