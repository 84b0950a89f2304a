"""Downstream tasks, the data identity of every draw, and the checkpoint check.

A downstream task keeps the pretraining task's D, positions and relevant groups and
changes the direction (``transfer``), or also moves j* to another group
(``negative_control``). All tasks are made by :func:`make_downstream_tasks`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config.seeding import task_identity, torch_generator, transfer_identity
from ..config.specs import ConfigError, RunSpec
from ..data import kinds
from ..io.files import InputError
from ..model.transformer import init_params, token_width
from .spec import TransferSpec


def pretrain_task(run_spec: RunSpec, seed: int):
    """The pretraining task of repetition ``seed``, rebuilt from its hashed identity."""
    return kinds.make_task(run_spec.task, *task_identity(run_spec, seed))


def train_generator(run_spec: RunSpec, seed: int, downstream: str, n: int) -> torch.Generator:
    """The n training samples of (seed, n): the same for every method."""
    return torch_generator(*transfer_identity(run_spec, seed, downstream), n, "train")


def heldout_generator(run_spec: RunSpec, seed: int, downstream: str) -> torch.Generator:
    """The test set of (seed, downstream): the same for every method and every n."""
    return torch_generator(*transfer_identity(run_spec, seed, downstream), "test")


def fit_identity(run_spec: RunSpec, seed: int, downstream: str, method: str, n: int) -> tuple:
    """Identity of a method's own randomness (initialisation, minibatch order, folds)."""
    return (*transfer_identity(run_spec, seed, downstream), method, n, "fit")


def draw(task, n: int, gen: torch.Generator, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """n i.i.d. samples (X (n, D, d), y (n,)) in float64 on the CPU.

    Not antithetic: a pair X, -X carries no more information than X for the sign-symmetric
    models compared here, so n means n independent samples.
    """
    return task.sample(n, gen, antithetic=False, dtype=torch.float64, device="cpu", split=split)


def make_downstream_tasks(run_spec: RunSpec, seed: int, spec: TransferSpec, base=None) -> dict[str, object]:
    """The downstream tasks of repetition ``seed``, by name (the names in ``spec.downstream``).

    ``transfer``: same relevant groups, new directions v~* (fresh uniform unit vectors, or at
    ``spec.angle_deg`` to v*), optionally another sigma_x. ``negative_control``: the same new
    directions, but j* moved to a group outside the relevant set, drawn from the hashed identity.
    Image tasks transfer to ``task.transfer_classes`` at the same slot j*.
    """
    base = pretrain_task(run_spec, seed) if base is None else base
    transfer = kinds.downstream_task(run_spec, seed, spec, base)
    tasks = {"transfer": transfer}
    if "negative_control" in spec.downstream:
        relevant = transfer.relevant.clone()
        relevant[0] = _moved_j_star(run_spec, seed, base.relevant)
        tasks["negative_control"] = transfer.with_relevant(relevant)
    return {name: tasks[name] for name in spec.downstream}


def _moved_j_star(run_spec: RunSpec, seed: int, relevant: torch.Tensor) -> int:
    D = run_spec.task.D
    others = [j for j in range(D) if j not in set(relevant.tolist())]
    if not others:
        raise ConfigError(
            f"transfer.downstream: negative_control moves j* to a group outside the relevant set, "
            f"but all D={D} groups are relevant; drop negative_control or lower task.relevant_groups"
        )
    gen = torch_generator(*transfer_identity(run_spec, seed, "negative_control"), "j_star")
    return others[int(torch.randint(len(others), (1,), generator=gen))]


# -- the checkpoint ----------------------------------------------------------------------


@dataclass
class Pretrained:
    seeds: list[int]
    status: list[str]  # per seed: "ok" | "diverged"
    params: dict[str, torch.Tensor]  # leading seed axis, as stored
    tasks: list  # rebuilt pretraining tasks, checked against the stored j*


def check_checkpoint(run_spec: RunSpec, tensors: dict, meta: dict, path: str | Path) -> Pretrained:
    """Refuse a checkpoint that does not belong to ``run_spec`` (InputError naming the value)."""
    if meta.get("kind") != "groupsparse.training.pretrain":
        raise InputError(f"{path}: not a pretraining checkpoint (kind {meta.get('kind')!r})")
    stored = meta.get("spec", {}).get("task", {})
    for key in ("d", "D"):
        want = getattr(run_spec.task, key)
        if stored.get(key) != want:
            raise InputError(
                f"{path}: checkpoint has task.{key} = {stored.get(key)}, but the run spec has "
                f"task.{key} = {want}; pass the checkpoint pretrained with this spec"
            )
    seeds, status = meta.get("seeds"), meta.get("status")
    if not isinstance(seeds, list) or not all(isinstance(s, int) and s >= 0 for s in seeds) or not seeds:
        raise InputError(f"{path}: its seeds {str(seeds)[:80]} are not a list of seed numbers")
    if not isinstance(status, list) or len(status) != len(seeds):
        raise InputError(f"{path}: its status list {str(status)[:80]} does not give one status per seed {seeds}")
    params = {k[len("param.") :]: t for k, t in tensors.items() if k.startswith("param.")}
    m = token_width(run_spec.model, run_spec.task.d, run_spec.task.D)
    shapes = init_params(dataclasses.replace(run_spec.model, init="zero"), 1, m, None)
    expected = {name: (len(seeds), *t.shape[1:]) for name, t in shapes.items()}
    for name, shape in expected.items():  # every parameter, not only v: a wrong W fails here, not in a matmul
        got = tuple(params[name].shape) if name in params else None
        if got != shape:
            raise InputError(
                f"{path}: parameter {name} has shape {got}, expected {shape} ({len(seeds)} seeds, "
                f"token width {m}) for this run spec's model and task"
            )
    relevant = tensors.get("task.relevant")
    if relevant is None or relevant.shape[0] != len(seeds):
        raise InputError(f"{path}: task.relevant missing or not one row per seed")
    tasks = [pretrain_task(run_spec, s) for s in seeds]
    for seed, task, row in zip(seeds, tasks, relevant):
        if task.relevant.tolist() != row.tolist():
            raise InputError(
                f"{path}: seed {seed}: checkpoint has j* = {int(row[0])} (relevant {row.tolist()}), "
                f"but the run spec's task gives j* = {task.j_star} (relevant {task.relevant.tolist()})"
            )
    if meta.get("science_hash") != run_spec.science_hash():
        raise InputError(
            f"{path}: checkpoint science_hash {meta.get('science_hash')} does not match the run spec's "
            f"{run_spec.science_hash()}: it was pretrained with another configuration"
        )
    return Pretrained(seeds, status, params, tasks)
