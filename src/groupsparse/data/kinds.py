"""Task kinds (``task.kind``): what each kind changes beyond its settings, declared in one place.

A kind is its spec class (config/specs.py TASK_SPECS: keys, cross-field rules, whether antithetic
batches exist) and what its entry here declares: the functions that make its pretraining and
transfer tasks (imported when tasks are made: they may import torch), the folders its runs read
and the parse-time check of them, the workflow rules that draw its own figures per named run (each
logs to logs/figures/<run>.<rule>.log), and whether its jobs load a dataset (the cost model's fixed
memory). Nothing else tests a kind by name.

Torch-free: the workflow reads it at parse time.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config.schema import schema_defaults
from .cifar import cifar_folder_problem, data_folder

DEFAULT_KIND = schema_defaults("task")["kind"]


def _no_folders(task: dict[str, Any]) -> list[str]:
    return []


def _no_problem(task: dict[str, Any], where: str) -> str | None:
    return None


@dataclass(frozen=True)
class TaskKind:
    name: str
    make: str  # "module:function" (spec, *identity, **kw) -> the task of one repetition
    downstream: str  # "module:function" (run_spec, seed, transfer spec, pretraining task) -> its transfer task
    figure_rules: tuple[str, ...] = ()  # workflow rules drawing this kind's own figures, one job per named run
    loads_dataset: bool = False  # its pretraining jobs hold a dataset in memory (costs.yaml m_dataset_mb)
    data_folders: Callable[[dict[str, Any]], list[str]] = _no_folders  # folders a run reads (a task dict)
    input_problem: Callable[[dict[str, Any], str], str | None] = _no_problem  # why they cannot be read, or None

    def function(self, which: str) -> Callable:
        module, name = getattr(self, which).split(":")
        return getattr(importlib.import_module(module), name)


def _image_folders(task: dict[str, Any]) -> list[str]:
    return [str(data_folder(task["path"]))] if task.get("dataset") == "cifar10" else []


def _image_input_problem(task: dict[str, Any], where: str) -> str | None:
    if task.get("dataset") != "cifar10":
        return None
    return cifar_folder_problem(task["path"], f"{where}.path", fetchable=True)


KINDS = {
    "synthetic": TaskKind(
        "synthetic", "groupsparse.data.synthetic:draw_task", "groupsparse.data.synthetic:downstream_task"
    ),
    "images": TaskKind(
        "images",
        "groupsparse.data.images:make_image_task",
        "groupsparse.data.images:downstream_task",
        figure_rules=("image_figures",),
        loads_dataset=True,
        data_folders=_image_folders,
        input_problem=_image_input_problem,
    ),
}


def kind_of(task: Any) -> TaskKind:
    """The kind of a task: a spec (``task.kind``), a task dict, or a kind's name."""
    if isinstance(task, str):
        return KINDS[task]
    name = task.get("kind", DEFAULT_KIND) if isinstance(task, dict) else task.kind
    return KINDS[name]


def make_task(spec, *identity: object, **kwargs):
    """The pretraining task of one repetition, made by its kind's data module."""
    return kind_of(spec).function("make")(spec, *identity, **kwargs)


def downstream_task(run_spec, seed: int, transfer, base):
    """The transfer task of a repetition (``transfer``: the TransferSpec), made by its kind's data module."""
    return kind_of(run_spec.task).function("downstream")(run_spec, seed, transfer, base)
