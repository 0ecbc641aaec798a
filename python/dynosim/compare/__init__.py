"""Side by side with other simulators: Dynamo's own offline replay (:mod:`~dynosim.compare.dynamo`,
the ``compare`` extra)."""

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

__all__ = [
    "DYNAMO_VERSION",
    "METRICS",
    "DynamoReplay",
    "DynamoRun",
    "dynamo_replay_kwargs",
    "kv_bytes_per_token",
    "metric_rows",
    "relative_difference",
]
