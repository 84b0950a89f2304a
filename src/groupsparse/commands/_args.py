"""Argument helpers and exit codes shared by the subcommands (kept out of cli.py so that no command imports it)."""

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


class CheckedSpec(dict):
    """A spec read from a file the workflow wrote from a study it had checked (study.trust): a job
    trusts it, the parse-time check being its one validation."""


def is_checked(raw) -> bool:
    """Whether the job may trust ``raw`` (a --spec value) without validating it again."""
    return isinstance(raw, CheckedSpec)


def load_spec_arg(text: str) -> dict:
    """A JSON object given inline, or as @path to a JSON/YAML file; a CheckedSpec when that file
    carries the workflow's stamp (study.trust), else a plain dict that the command validates."""
    if text.startswith("@"):
        from ..study import trust

        path = Path(text[1:])
        if not path.is_file():
            raise argparse.ArgumentTypeError(f"--spec: no such file {path}")
        data = path.read_bytes()
        raw = data.decode()
        if path.suffix in (".yaml", ".yml"):
            import yaml

            return yaml.safe_load(raw)
        spec = json.loads(raw)
        return CheckedSpec(spec) if isinstance(spec, dict) and trust.is_checked(path, data) else spec
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--spec: not valid JSON ({exc})") from exc


def set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(max(1, n))
    with contextlib.suppress(RuntimeError):  # already set in this process
        torch.set_num_interop_threads(max(1, n))
