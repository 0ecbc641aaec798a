"""``offline_replay_bench``: dynosim's replay timed, checked for determinism, and optionally run
beside Dynamo's or AISimulate's replay (:mod:`~dynosim.bench.offline_replay_bench`)."""

from dynosim.bench.offline_replay_bench import (
    EXIT_NONDETERMINISTIC,
    IterationTiming,
    PeakRss,
    Peer,
    build_config,
    comparison_table,
    first_difference,
    main,
    make_peer,
    run_iteration,
    timing_table,
)

__all__ = [
    "EXIT_NONDETERMINISTIC",
    "IterationTiming",
    "PeakRss",
    "Peer",
    "build_config",
    "comparison_table",
    "first_difference",
    "main",
    "make_peer",
    "run_iteration",
    "timing_table",
]
