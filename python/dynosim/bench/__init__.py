"""``offline_replay_bench``: dynosim's replay timed, checked for determinism, and optionally run
beside Dynamo's own offline replay (:mod:`~dynosim.bench.offline_replay_bench`)."""

from dynosim.bench.offline_replay_bench import (
    EXIT_NONDETERMINISTIC,
    IterationTiming,
    PeakRss,
    build_config,
    comparison_table,
    first_difference,
    main,
    run_iteration,
    timing_table,
)

__all__ = [
    "EXIT_NONDETERMINISTIC",
    "IterationTiming",
    "PeakRss",
    "build_config",
    "comparison_table",
    "first_difference",
    "main",
    "run_iteration",
    "timing_table",
]
