"""Command line: one subcommand per workflow step, so each Snakemake rule is one line.

Heavy imports (torch, sklearn) happen inside the subcommands so that ``--help`` is fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EXIT_CONFIG, EXIT_INPUT, EXIT_DIVERGED = 2, 4, 3


def parse_seeds(text: str) -> list[int]:
    """'0-4' -> [0..4]; '0,2,5' -> [0, 2, 5]."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part[1:]:
            lo, hi = part.split("-", 1) if not part.startswith("-") else (part, part)
            seeds += list(range(int(lo), int(hi) + 1))
        elif part:
            seeds.append(int(part))
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"--seeds: need distinct non-negative integers, got {text!r}")
    return seeds


def load_spec_arg(text: str) -> dict:
    """A JSON object given inline, or as @path to a JSON/YAML file."""
    if text.startswith("@"):
        path = Path(text[1:])
        if not path.is_file():
            raise argparse.ArgumentTypeError(f"--spec: no such file {path}")
        raw = path.read_text()
        if path.suffix in (".yaml", ".yml"):
            import yaml
            return yaml.safe_load(raw)
        return json.loads(raw)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--spec: not valid JSON ({exc})") from exc


def set_threads(n: int) -> None:
    import torch
    torch.set_num_threads(max(1, n))
    try:
        torch.set_num_interop_threads(max(1, n))
    except RuntimeError:  # already set in this process
        pass


# Each module in groupsparse.commands has register(subparsers) adding its subcommand.
COMMANDS = ("pretrain", "transfer", "check_tables", "aggregate", "plot", "summary", "scaling", "image_figures",
            "snapshot", "status", "estimate")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="groupsparse", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    import importlib
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"groupsparse.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"groupsparse.commands.{name}":
                raise
            continue  # not written yet
        module.register(sub)
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
