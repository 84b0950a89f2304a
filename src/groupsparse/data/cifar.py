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


def cifar_folder_problem(path: str, where: str) -> str | None:
    """None if ``path`` is (or holds) a complete cifar-10-batches-py folder, else why not."""
    folder = cifar_folder(path)
    if not folder.is_dir():
        return (
            f"{where}: {path!r} is not a folder (resolved from {Path.cwd()}); allowed: the extracted "
            f"{CIFAR_FOLDER} folder or its parent (download cifar-10-python.tar.gz yourself; "
            "the workflow never downloads)"
        )
    missing = [name for name in CIFAR_FILES if not (folder / name).is_file()]
    if missing:
        return f"{where}: {folder} is an incomplete {CIFAR_FOLDER} folder, missing {', '.join(missing)}"
    return None
