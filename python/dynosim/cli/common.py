"""What the ``dynosim`` commands share: exit codes, the usage error, how a command's end
becomes its exit code, and the workload flags (a trace, or synthetic traffic)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynosim.errors import DynosimError, MissingExtraError, OutputError

if TYPE_CHECKING:
    from dynosim.workload import SyntheticWorkload, TraceWorkload

#: Exit codes: bad input (trace, config, flags) or an output that cannot be written, and a
#: failed simulation.
EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
#: Interrupted (Ctrl-C), stdout closed by its reader, and terminated (SIGTERM): 128 + the
#: signal, as a shell reports a command SIGINT, SIGPIPE or SIGTERM ended.
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
EXIT_TERMINATED = 143


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a job scheduler, a container stopping), raised where Ctrl-C raises
    KeyboardInterrupt and a kind of it, so it ends a command the same way: running replays
    stopped, worker processes ended, partial files left under their partial names."""


def _terminated(signum: int, frame: Any) -> None:
    raise Terminated


#: The flags of synthetic traffic (``--isl``, ...), by their argparse names.
SYNTHETIC_FLAGS = ("isl", "osl", "rate", "count", "duration_s", "seed")


class UsageError(DynosimError, ValueError):
    """Flags that do not go together (the message names them)."""


def plain_warnings() -> None:
    """Print each warning as one ``dynosim: warning:`` line on stderr: on the command line the
    source file and line a warning comes from mean nothing to the user."""
    import warnings

    def show(message: Any, category: Any, filename: str, lineno: int, *_: Any, **__: Any) -> None:
        print(f"dynosim: warning: {message}", file=sys.stderr)

    warnings.showwarning = show


def run_command(prog: str, command: Callable[[], int]) -> int:
    """Run a command line's work and turn how it ends into its exit code, with at most one
    line on stderr and never a traceback: bad input or an unwritable output (2), a failed
    simulation (1), Ctrl-C (130), SIGTERM (143, handled as Ctrl-C is while the command runs),
    a reader that closed stdout (141, silently, as ``yes | head`` ends). Standard output is
    flushed here, so a full disk shows as an error, not at exit."""
    main = threading.current_thread() is threading.main_thread()  # where handlers can be set
    previous = signal.signal(signal.SIGTERM, _terminated) if main else None
    try:
        code = command()
        sys.stdout.flush()
        return code
    except Terminated:
        print(f"{prog}: terminated", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Python would flush stdout again at exit and complain: point it at /dev/null.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except ValueError as e:  # bad trace, config or flags (WorkloadError, ConfigError, ...)
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OutputError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except DynosimError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as e:  # writing stdout (a file names itself)
        print(
            f"{prog}: error: {e.filename or 'standard output'}: {e.strerror or e}", file=sys.stderr
        )
        return EXIT_BAD_INPUT
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def missing_extra_is_bad_input(exc: MissingExtraError) -> UsageError:
    """An extra asked for on the command line but not installed is a usage error (exit 2)."""
    return UsageError(str(exc))


def can_plot(what: str) -> bool:
    """Whether the plot extra is installed; if not, says on stderr that ``what`` is skipped."""
    from dynosim._dependencies import matplotlib

    try:
        matplotlib()
    except MissingExtraError as e:
        print(f"dynosim: {what} not written: {e}", file=sys.stderr)
        return False
    return True


def add_workload_arguments(parser: Any, extra_formats: tuple[str, ...] = ()) -> None:
    """TRACE and the flags of synthetic traffic and trace formats (``extra_formats``: more
    values ``--format`` takes, for files a command reads besides traces)."""
    parser.add_argument("trace", nargs="?", type=Path, help="trace file (.jsonl or .csv)")
    g = parser.add_argument_group("synthetic traffic (instead of a trace)")
    g.add_argument("--synthetic", action="store_true", help="replay generated requests")
    g.add_argument("--isl", type=int, help="prompt tokens per request")
    g.add_argument("--osl", type=int, help="output tokens per request")
    g.add_argument("--rate", type=float, help="arrival rate (requests/s, Poisson)")
    g.add_argument("--count", type=int, help="number of requests")
    g.add_argument("--duration-s", type=float, help="or generate arrivals for this long (s)")
    g.add_argument("--seed", type=int, help="generator seed (default 0)")
    parser.add_argument(
        "--format",
        choices=["mooncake", "azure", *extra_formats],
        help="trace format (default: by extension)"
        + ("; a measured run's with --measured (default: by content)" if extra_formats else ""),
    )
    parser.add_argument(
        "--trace-block-size", type=int, default=512, help="tokens per trace hash id"
    )


def workload_from_args(
    args: argparse.Namespace, *, sample_when_missing: bool
) -> tuple[TraceWorkload | SyntheticWorkload, str]:
    """The workload the flags describe, and a name for it. Without TRACE or --synthetic: the
    bundled sample when ``sample_when_missing``, else a usage error."""
    from dynosim.workload import SyntheticWorkload, load_trace, sample_trace_path

    if args.synthetic:
        if args.trace is not None:
            raise UsageError("give a TRACE or --synthetic, not both")
        if args.format is not None:
            raise UsageError("--format reads a TRACE; --synthetic generates its requests")
        given = {k: getattr(args, k) for k in SYNTHETIC_FLAGS if getattr(args, k) is not None}
        # Generated requests get hash ids too, one per --trace-block-size prompt tokens.
        work = SyntheticWorkload(**given, trace_block_size=args.trace_block_size)
        return work, f"synthetic (isl {args.isl}, osl {args.osl}, rate {args.rate}/s)"
    stray = [f"--{k.replace('_', '-')}" for k in SYNTHETIC_FLAGS if getattr(args, k) is not None]
    if stray:
        raise UsageError(f"{', '.join(stray)} need{'s' if len(stray) == 1 else ''} --synthetic")
    if args.trace is None and not sample_when_missing:
        raise UsageError("give a TRACE file, or --synthetic with --isl, --osl and --rate")
    path = args.trace or sample_trace_path()
    source = str(args.trace) if args.trace else f"bundled sample ({path.name})"
    return load_trace(path, trace_block_size=args.trace_block_size, format=args.format), source


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "SYNTHETIC_FLAGS",
    "Terminated",
    "UsageError",
    "add_workload_arguments",
    "can_plot",
    "missing_extra_is_bad_input",
    "plain_warnings",
    "run_command",
    "workload_from_args",
]
