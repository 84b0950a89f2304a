"""groupsparse: the commands behind the study's Snakemake workflow, and tools to read its results.

Each workflow rule calls one subcommand (write-spec, pretrain, transfer, check-tables, aggregate,
plot, predict, scaling, image-figures, fetch); the others are for people: `population` (one
trajectory of population gradient descent, by hand), `transverse` (its transverse stability per D),
`review` (a finished study's answers), `status` (how far a running study is, time left),
`estimate` (how long a study will take), `calibrate` (the cost model against this machine),
`summary` (print a result table),
`check-predictions` (the theorem test's predictions against runs made outside the study),
`snapshot` (docs/results.md), `choices` (docs/STUDY.md's table of choices). Run a study with
`snakemake --cores all`; see README.md.
"""

# Heavy imports (torch, sklearn) happen inside the subcommands so that --help is fast.

from __future__ import annotations

import argparse
import importlib
import sys

# re-exported: tests read the exit codes here, benchmarks/bench.py imports set_threads from here
from .commands._args import EXIT_CONFIG, EXIT_DIVERGED, EXIT_INPUT, OneLineParser, set_threads  # noqa: F401

# Each module in groupsparse.commands has register(subparsers) adding its subcommand.
COMMANDS = (
    "write_spec",
    "pretrain",
    "transfer",
    "check_tables",
    "aggregate",
    "plot",
    "summary",
    "scaling",
    "predict",
    "check_predictions",
    "population",
    "transverse",
    "image_figures",
    "snapshot",
    "choices",
    "status",
    "estimate",
    "fetch",
    "review",
    "calibrate",
)


def build_parser() -> argparse.ArgumentParser:
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("groupsparse")
    except PackageNotFoundError:  # run from a checkout without installing
        release = "unknown (not installed)"
    parser = OneLineParser(
        prog="groupsparse",
        description=__doc__.strip(),
        epilog="Errors print one line; add --debug (or set GROUPSPARSE_DEBUG=1) for the traceback.",
    )
    parser.add_argument("--version", action="version", version=f"groupsparse {release}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for name in COMMANDS:
        importlib.import_module(f"groupsparse.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand. Every error is one line `groupsparse <command>: <problem>` and a
    non-zero exit; --debug (or GROUPSPARSE_DEBUG=1) re-raises it with its traceback.

    Called with no ``argv`` this process is the command (the console script): it exits here, skipping the
    interpreter's teardown of torch, numba and sklearn, about 0.7 CPU-seconds a process (median of 8 here: a
    tiny study's transfer job computes for 0.3 s). Every output is whole before it (atomic renames);
    the exit handlers still run and the streams are flushed."""
    code = _command(argv)
    if argv is None:
        _exit_without_teardown(code)
    return code


def _exit_without_teardown(code: int | None) -> None:
    import atexit
    import contextlib
    import os

    atexit._run_exitfuncs()  # logging's flush, tempfile's clean-up: what an exit runs before the teardown
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            stream.flush()
    os._exit(0 if code is None else code if isinstance(code, int) else 1)  # as sys.exit reads it


def _command(argv: list[str] | None) -> int:
    import os

    from .io.progress import handle_stop_signals, ignore_stop_signals, stop_signal_name

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as refused:  # a refused argument: its one line is printed; --help and --version exit 0
        if refused.code in (0, None):
            raise
        return refused.code
    debug = args.debug or os.environ.get("GROUPSPARSE_DEBUG", "") not in ("", "0")
    # SIGINT and SIGTERM alike: a job that saves its state (stops_at_a_step) stops at its next step, saved
    try:
        # before any work: the run specs the arguments build (the workflow's checks), the command's own
        if getattr(args, "specs_of", None) is not None:
            from .commands._specs import check_specs

            check_specs(args)
        if getattr(args, "check", None) is not None:
            args.check(args)
        # argv None: this process is the command (not a caller's test): its handlers need not come back
        with handle_stop_signals(poll=getattr(args, "stops_at_a_step", False), restore=argv is not None):
            code = args.func(args)
            if argv is None:  # done: a stop asked for as it exits must not kill it (snakemake would take the
                ignore_stop_signals()  # finished job for failed and delete its outputs)
        return code
    except KeyboardInterrupt as exc:
        why = f" ({exc})" if str(exc) else ""
        print(f"groupsparse {args.command}: interrupted{why}", file=sys.stderr, flush=True)
        if stop_signal_name():  # stopped by a signal: skip the interpreter's teardown of torch and numba
            sys.stdout.flush()  # (seconds on a loaded machine); every file written is whole (atomic renames)
            os._exit(130)
        return 130
    except BrokenPipeError:  # the output piped into a command that stopped reading (| head): nothing wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush goes nowhere
        return 0
    except Exception as exc:
        if debug:
            raise
        from .config.errors import ConfigError
        from .io.files import InputError

        if isinstance(exc, ConfigError):
            line, code = f"bad setting: {exc}", EXIT_CONFIG
        elif isinstance(exc, InputError):
            line, code = f"bad input: {exc}", EXIT_INPUT
        elif isinstance(exc, MemoryError) or "can't allocate memory" in str(exc) or "DefaultCPUAllocator" in str(exc):
            line, code = f"out of memory ({type(exc).__name__}: {exc}); a smaller run, or a machine with more", 1
        elif isinstance(exc, OSError):  # a folder that is a file, a full disk, no permission...
            where = f" {exc.filename}" if exc.filename else ""
            line, code = f"cannot use{where}: {exc.strerror or exc}", EXIT_INPUT
        else:
            line, code = f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", 1
        print(f"groupsparse {args.command}: " + " ".join(line.split())[:1000], file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
