"""Seeds derived from an experiment's identity, never from global state.

Every random draw in the study comes from a ``torch.Generator`` whose seed is a
stable hash of *what* is being drawn (study seed, task, role, repetition, ...), so
any job can regenerate exactly the data another job saw, whatever the job split.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported lazily so torch-free analysis code can seed numpy
    import torch


def stable_seed(*identity: object) -> int:
    """A 63-bit seed from a hash of ``identity`` (stable across processes and machines)."""
    blob = json.dumps([_plain(part) for part in identity], sort_keys=True, separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(blob.encode()).digest()[:8], "little") & (2**63 - 1)


def torch_generator(*identity: object, device: str | torch.device = "cpu") -> torch.Generator:
    import torch

    gen = torch.Generator(device=device)
    gen.manual_seed(stable_seed(*identity))
    return gen


def numpy_generator(*identity: object) -> np.random.Generator:
    return np.random.default_rng(stable_seed(*identity))


# -- identity tuples: what a draw is about (one home, so data, images, pretrain and transfer agree) --


def task_identity(spec, seed: int) -> tuple:
    """Identity of one repetition's task (a RunSpec and a seed); transfer uses it to find the same j*."""
    return (spec.study_seed, spec.task_name, seed)


def transfer_identity(spec, seed: int, downstream: str) -> tuple:
    """Identity of one repetition's downstream data."""
    return (*task_identity(spec, seed), "transfer", downstream)


def _plain(part: object) -> object:
    if isinstance(part, (str, int, float, bool)) or part is None:
        return part
    if isinstance(part, (list, tuple)):
        return [_plain(p) for p in part]
    if isinstance(part, dict):
        return {str(k): _plain(v) for k, v in part.items()}
    raise TypeError(f"seed identity parts must be plain values, got {type(part).__name__}")
