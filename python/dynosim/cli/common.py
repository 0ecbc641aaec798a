"""What the ``dynosim`` commands share: exit codes, the usage error, the argument parser (which
suggests the flag or value meant and remembers the flag typed), how a command's end becomes its
exit code, and the workload flags (a trace, or synthetic traffic)."""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynosim._shown import shown, suggestion
from dynosim._workload_defaults import SYNTHETIC_SEED, TRACE_BLOCK_SIZE, TRACE_FORMATS
from dynosim.errors import ConfigError, DynosimError, MissingExtraError, OutputError

if TYPE_CHECKING:
    from dynosim.workload import SyntheticWorkload, TraceWorkload

#: Exit codes: bad input (trace, config, flags) or an output that cannot be written, and a
#: failed simulation.
EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
#: ``--fail-on-rejections``: the replay ran, but rejected requests (its outputs are written).
EXIT_REJECTED = 4
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


class _Store(argparse.Action):
    """argparse's ``store``, remembering which of an option's names the user typed (an alias
    or the flag's own name), for messages to name it as typed (:func:`typed`)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        setattr(namespace, self.dest, values)
        if option_string is not None:
            flags = vars(namespace).setdefault("typed_flags", {})
            flags[self.dest] = option_string


class VersionAction(argparse.Action):
    """``--version``: prints ``<prog> <dynosim's version>`` on stdout, as argparse's own
    version action, but looks the version up only when asked (it costs a start ~35 ms)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show the version and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from dynosim._version import version

        print(f"{parser.prog} {version()}")
        parser.exit()


def typed(args: argparse.Namespace, dest: str) -> str:
    """The flag the user typed for ``dest`` (its alias, if that is what was typed), else the
    flag's own name."""
    return getattr(args, "typed_flags", {}).get(dest, "--" + dest.replace("_", "-"))


#: Lines of usage an error shows in full.
_USAGE_LINES = 6


class Parser(argparse.ArgumentParser):
    """The command lines' parser: an unknown flag or a value outside a flag's choices is
    answered with the closest one ("did you mean"), and every option records the name it was
    typed under (:func:`typed`). Subcommands' parsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", None, _Store)
        self.register("action", "store", _Store)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is not None and value not in choices:
            listed = ", ".join(repr(c) for c in choices)
            hint = suggestion(str(value), (str(c) for c in choices))
            raise argparse.ArgumentError(
                action, f"invalid choice: {value!r} (choose from {listed}){hint}"
            )

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            parser = self._command_parser(parsed)
            flags = [s for a in parser._actions for s in a.option_strings]
            hints = "".join(
                suggestion(word.split("=")[0], flags) for word in extra if word.startswith("-")
            )
            parser.error(f"unrecognized arguments: {' '.join(extra)}{hints}")
        return parsed

    def error(self, message: str) -> Any:  # type: ignore[override]
        """Exit 2 with the message; a usage of many lines (a command of many flags) is
        replaced by a pointer to ``--help``, so the message is not lost above it."""
        usage = self.format_usage()
        if usage.count("\n") > _USAGE_LINES:
            usage = f"usage: {self.prog} [options] (every flag: {self.prog} --help)\n"
        self.exit(EXIT_BAD_INPUT, f"{usage}{self.prog}: error: {message}\n")

    def _command_parser(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The parser of the subcommand ``parsed`` chose (this one when it has none)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = getattr(parsed, action.dest, None)
                if chosen in action.choices:
                    return action.choices[chosen]
        return self


def name_flags(error: ConfigError, given: Iterable[tuple[str, str, Any]]) -> ConfigError:
    """``error`` (a configuration's, whose problems start with a dotted path) with each problem
    at a path a flag set naming that flag and the value typed: ``given`` holds (dotted path,
    flag as typed, value). ``--workers 0 (cluster.num_workers): must be ...``."""
    text = str(error)
    for path, flag, value in given:
        text = re.sub(
            rf"(?<![\w.]){re.escape(path)}:",
            lambda _, f=flag, v=value, p=path: f"{f} {shown(v)} ({p}):",
            text,
        )
    return ConfigError(text)


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
    g.add_argument("--seed", type=int, help=f"generator seed (default {SYNTHETIC_SEED})")
    parser.add_argument(
        "--format",
        choices=[*TRACE_FORMATS, *extra_formats],
        help="trace format (default: by extension)"
        + ("; a measured run's with --measured (default: by content)" if extra_formats else ""),
    )
    parser.add_argument(
        "--trace-block-size", type=int, default=TRACE_BLOCK_SIZE, help="tokens per trace hash id"
    )


def workload_from_args(
    args: argparse.Namespace, *, sample_when_missing: bool
) -> tuple[TraceWorkload | SyntheticWorkload, str]:
    """The workload the flags describe, and a name for it. Without TRACE or --synthetic: the
    bundled sample when ``sample_when_missing``, else a usage error."""
    from dynosim.workload import load_trace

    if args.synthetic:
        from dynosim.workload import SyntheticWorkload

        if args.trace is not None:
            raise UsageError("give a TRACE or --synthetic, not both")
        if args.format is not None:
            raise UsageError("--format reads a TRACE; --synthetic generates its requests")
        given = {k: getattr(args, k) for k in SYNTHETIC_FLAGS if getattr(args, k) is not None}
        # Generated requests get hash ids too, one per --trace-block-size prompt tokens.
        work = SyntheticWorkload(**given, trace_block_size=args.trace_block_size)
        return work, f"synthetic (isl {args.isl}, osl {args.osl}, rate {args.rate}/s)"
    path, source = trace_from_args(args, sample_when_missing=sample_when_missing)
    return load_trace(path, trace_block_size=args.trace_block_size, format=args.format), source


def trace_from_args(args: argparse.Namespace, *, sample_when_missing: bool) -> tuple[Path, str]:
    """The trace file the flags name (without --synthetic) and a name for it, not yet read:
    TRACE, or the bundled sample when it is missing and ``sample_when_missing``."""
    from dynosim.workload.sample import sample_trace_path

    stray = [f"--{k.replace('_', '-')}" for k in SYNTHETIC_FLAGS if getattr(args, k) is not None]
    if stray:
        raise UsageError(f"{', '.join(stray)} need{'s' if len(stray) == 1 else ''} --synthetic")
    if args.trace is None and not sample_when_missing:
        raise UsageError("give a TRACE file, or --synthetic with --isl, --osl and --rate")
    path = args.trace or sample_trace_path()
    return path, str(args.trace) if args.trace else f"bundled sample ({path.name})"


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_REJECTED",
    "EXIT_TERMINATED",
    "SYNTHETIC_FLAGS",
    "Parser",
    "Terminated",
    "UsageError",
    "VersionAction",
    "add_workload_arguments",
    "can_plot",
    "missing_extra_is_bad_input",
    "name_flags",
    "plain_warnings",
    "run_command",
    "trace_from_args",
    "typed",
    "workload_from_args",
]
