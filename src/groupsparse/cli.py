"""Command line: one subcommand per workflow step, so each Snakemake rule is one line.

Heavy imports (torch, sklearn) happen inside the subcommands so that ``--help`` is fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# re-exported: tests read the exit codes here, benchmarks/bench.py imports set_threads from here
from .commands._args import EXIT_CONFIG, EXIT_DIVERGED, EXIT_INPUT, set_threads  # noqa: F401

# Each module in groupsparse.commands has register(subparsers) adding its subcommand.
COMMANDS = (
    "pretrain",
    "transfer",
    "check_tables",
    "aggregate",
    "plot",
    "summary",
    "scaling",
    "image_figures",
    "snapshot",
    "status",
    "estimate",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="groupsparse", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    for name in COMMANDS:
        importlib.import_module(f"groupsparse.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except Exception as exc:  # known input problems get one clear line, not a traceback
        from .io import InputError
        from .specs import ConfigError

        if isinstance(exc, ConfigError):
            print(f"groupsparse {args.command}: bad setting: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        if isinstance(exc, InputError):
            print(f"groupsparse {args.command}: bad input: {exc}", file=sys.stderr)
            return EXIT_INPUT
        raise


if __name__ == "__main__":
    sys.exit(main())
