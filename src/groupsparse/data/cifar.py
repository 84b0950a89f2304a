"""CIFAR-10's file layout: the files of an extracted cifar-10-python.tar.gz.

Torch-free, so the same check runs at parse time (study/preflight.py) and before loading
(data/images.py).
"""

from __future__ import annotations

import os
from pathlib import Path

CIFAR_FOLDER = "cifar-10-batches-py"
CIFAR_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)
CIFAR_FILES = ("batches.meta",) + CIFAR_BATCHES


def cifar_folder(path: str | os.PathLike) -> Path:
    """``path`` itself, or the cifar-10-batches-py folder inside it."""
    folder = Path(path).expanduser()
    return folder / CIFAR_FOLDER if (folder / CIFAR_FOLDER).is_dir() else folder


def fetch_target(path: str | os.PathLike) -> Path:
    """The folder `groupsparse fetch cifar10` creates for ``task.path``: the path itself if it
    names cifar-10-batches-py, else cifar-10-batches-py inside it (the loader accepts both)."""
    path = Path(path).expanduser()
    return path if path.name == CIFAR_FOLDER else path / CIFAR_FOLDER


def data_folder(path: str | os.PathLike) -> Path:
    """The folder a study reads for ``task.path``: the complete one there, else the one a fetch makes."""
    folder = cifar_folder(path)
    return folder if all((folder / name).is_file() for name in CIFAR_FILES) else fetch_target(path)


def cifar_folder_problem(path: str, where: str, fetchable: bool = False) -> str | None:
    """None if ``path`` is (or holds) a complete cifar-10-batches-py folder, else why not.
    ``fetchable``: also None when nothing is there yet (the workflow's fetch_cifar10 rule makes it)."""
    folder = cifar_folder(path)
    nothing_there = not fetch_target(path).exists() and not Path(path).expanduser().is_file()
    if fetchable and path and nothing_there and not any((folder / name).exists() for name in CIFAR_FILES):
        return None
    if not folder.is_dir():
        return (
            f"{where}: {path!r} is not a folder (resolved from {Path.cwd()}); allowed: the extracted "
            f"{CIFAR_FOLDER} folder or its parent (run `groupsparse fetch cifar10 --dest DIR`, or let the "
            "workflow fetch it to a path that does not exist yet)"
        )
    missing = [name for name in CIFAR_FILES if not (folder / name).is_file()]
    if missing:
        return f"{where}: {folder} is an incomplete {CIFAR_FOLDER} folder, missing {', '.join(missing)}"
    return None
