"""Argument helpers and exit codes shared by the subcommands (kept out of ``groupsparse.cli``, which
no command imports)."""

from __future__ import annotations

import argparse
import contextlib
import json
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
    """A JSON object given inline, or as @path to a JSON/YAML file (the command validates it)."""
    if text.startswith("@"):
        path = Path(text[1:])
        if not path.is_file():
            raise argparse.ArgumentTypeError(f"--spec: no such file {path}")
        raw = path.read_bytes().decode()
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
    with contextlib.suppress(RuntimeError):  # already set in this process
        torch.set_num_interop_threads(max(1, n))
