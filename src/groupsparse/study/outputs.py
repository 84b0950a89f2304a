"""The paths a study writes, checked at parse time: each must be absent or of the type the study
writes there (a file, or a folder on the way to one), else the study stops before any job with
one line naming the path (instead of a traceback from snakemake or a job half an hour in)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def wrong_type_problem(results: str | os.PathLike, files: Iterable[str | os.PathLike]) -> str | None:
    """None if every path of ``files`` (all under ``results``) and every folder between ``results``
    and them is absent or of the right type; else one line naming the first that is not."""
    root = Path(results)
    folders: set[Path] = set()
    for file in files:
        path = Path(file)
        if path.is_dir():
            return f"{path.resolve()}: the study writes a file here, but it is a folder; move it away"
        for parent in path.parents:
            if parent == root or parent in folders or root not in parent.parents:
                break
            folders.add(parent)
    for folder in sorted(folders, key=lambda p: len(p.parts)):  # the outermost first
        if folder.exists() and not folder.is_dir():
            return f"{folder.resolve()}: the study writes into this folder, but it is a file; move it away"
    if root.exists() and not root.is_dir():
        return f"{root.resolve()}: the results folder is a file, not a folder; move it away"
    return None
