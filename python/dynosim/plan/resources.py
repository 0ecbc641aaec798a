"""What the machine offers replays run side by side: its CPUs and its memory, and the checks
that the jobs a sweep asks for fit them (more jobs than CPUs or than candidates only add
processes, threads and memory; more than memory holds aborts on allocation mid-sweep)."""

from __future__ import annotations

import os
from pathlib import Path

from dynosim.errors import ConfigError, warn

#: Memory of one worker process beyond its replay: the interpreter with numpy and dynosim.
PROCESS_BYTES = 128 << 20


def cpus() -> int:
    """The CPUs this process may run on (its affinity, which containers and ``taskset``
    narrow), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_available() -> int | None:
    """Memory left under this process's cgroup (v2) limit, if it has one."""
    try:
        group = Path("/proc/self/cgroup").read_text().split("::", 1)[1].strip()
        root = Path("/sys/fs/cgroup") / group.lstrip("/")
        limit = (root / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((root / "memory.current").read_text()))
    except (OSError, ValueError, IndexError):
        return None


def available_memory() -> int | None:
    """Bytes of memory this process can still take (the system's available memory, or its
    cgroup's limit less its use when lower), or None when the system does not say."""
    known = [m for m in (_meminfo_available(), _cgroup_available()) if m is not None]
    return min(known) if known else None


def parallel_jobs(jobs: int | None, tasks: int | None = None, *, force: bool = False) -> int:
    """How many replays to run at once: ``jobs`` (None: as many as fit), at most the CPUs and
    the ``tasks`` there are unless ``force``; asking for more warns and takes the most."""
    limit = min(cpus(), tasks) if tasks else cpus()
    if jobs is None:
        return max(1, limit)
    if jobs > limit and not force:
        why = f"{cpus()} CPUs" + (f", {tasks:,} candidates" if tasks else "")
        warn(
            f"jobs: {jobs} replays at once would only wait for each other ({why}); running "
            f"{limit} (force_jobs / --force-jobs runs {jobs})"
        )
        return max(1, limit)
    return jobs


def check_memory(jobs: int, replay_bytes: int, shared_bytes: int, per_job_bytes: int) -> None:
    """Refuse, before anything starts, ``jobs`` replays at once that would not fit in memory:
    each takes at most ``replay_bytes`` and ``per_job_bytes`` more (a process and its copy of
    the workload), and ``shared_bytes`` are taken once. One job is never refused: it is what
    a single replay takes anyway, and the estimate is an upper bound."""
    available = available_memory()
    if jobs <= 1 or available is None:
        return
    each = replay_bytes + per_job_bytes
    need = shared_bytes + jobs * each
    if need <= available:
        return
    fits = max(1, (available - shared_bytes) // each) if each else jobs
    raise ConfigError(
        f"jobs: {jobs} replays at once may need {_gb(need)} of memory (each up to "
        f"{_gb(each)} for this workload and candidate), more than the {_gb(available)} "
        f"available; run {fits} at once (jobs / --jobs {fits}), or force_jobs / --force-jobs"
    )


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


__all__ = ["PROCESS_BYTES", "available_memory", "check_memory", "cpus", "parallel_jobs"]
