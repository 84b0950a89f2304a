"""A finished job's outputs, kept beside them: a rerun of the same job gets them back at once.

Snakemake deletes a job's outputs before it runs the job, and it runs a job again whenever its
incomplete marker was left behind: a job that finished while snakemake was being interrupted, or
killed, never had its marker removed, and the next run forces it. So the long jobs (pretraining and
transfer) keep hard links to their finished outputs in a hidden folder beside them (``--kept``; a link costs
no space, and a writer never changes a file in place: every write is a new file renamed over the old),
with the key of what made them: the command, every input that decides the numbers (the spec, the
seeds, the methods and sizes, the checkpoint's bytes) and the package's code. A rerun whose key
matches, and whose kept files are whole (sizes and SHA-256 as recorded), puts them back and returns:
nothing finished is computed twice. Anything else (another spec, other code, a file changed or gone)
discards the folder and computes anew.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
from pathlib import Path

from ..io import files as io

KEY_FILE = "key.json"


@functools.lru_cache(maxsize=1)
def code_hash() -> str:
    """SHA-256 of the package's code and data files (every .py and .yaml under src/groupsparse):
    outputs made by other code are never taken for this code's."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".yaml") and p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def job_key(command: str, **inputs) -> str:
    """The key of a job: its command, the inputs that decide its numbers, and the code."""
    text = json.dumps({"command": command, "inputs": inputs, "code": code_hash()}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def kept_folder(given: str | None, first_output: str | os.PathLike) -> Path:
    """The folder of a job's kept outputs: ``given``, else ``.<name>.kept`` beside its first output."""
    first = Path(first_output)
    return Path(given) if given else first.parent / f".{first.name}.kept"


class Kept:
    """The kept outputs of one job: ``folder`` holds a hard link to each of ``outputs`` and the key."""

    def __init__(self, folder: str | os.PathLike, outputs: list[str | os.PathLike], key: str):
        self.folder, self.outputs, self.key = Path(folder), [Path(p) for p in outputs], key

    def _copy_of(self, i: int) -> Path:
        return self.folder / f"{i}.{self.outputs[i].name}"

    def restore(self) -> bool:
        """Put the kept outputs back at their paths if this key made them and they are whole, and return True;
        else discard the folder (its links would hold the space of outputs no run will take) and return False."""
        if not self._whole():
            self.discard()
            return False
        for i, path in enumerate(self.outputs):
            with io.atomic_path(path) as tmp:
                tmp.unlink()
                _link_or_copy(self._copy_of(i), tmp)
            os.utime(path)  # made now, as far as the workflow's times go
        return True

    def _whole(self) -> bool:
        try:
            record = json.loads((self.folder / KEY_FILE).read_text())
            if record["key"] != self.key or record["outputs"] != [p.name for p in self.outputs]:
                return False
            for i, (size, sha) in enumerate(zip(record["sizes"], record["sha256"], strict=True)):
                copy = self._copy_of(i)
                if copy.stat().st_size != size or file_sha256(copy) != sha:
                    return False
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return True

    def discard(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def keep(self) -> None:
        """Once every output is written: the folder anew, a link to each output, the key last (so a
        folder without its key, from a job killed while keeping, is never restored)."""
        self.discard()
        self.folder.mkdir(parents=True)
        for i, path in enumerate(self.outputs):
            _link_or_copy(path, self._copy_of(i))
        record = {
            "key": self.key,
            "outputs": [p.name for p in self.outputs],
            "sizes": [self._copy_of(i).stat().st_size for i in range(len(self.outputs))],
            "sha256": [file_sha256(self._copy_of(i)) for i in range(len(self.outputs))],
        }
        io.write_text_atomic(self.folder / KEY_FILE, json.dumps(record, indent=1) + "\n")


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # a filesystem without hard links: a copy (the space of the outputs once more)
        with contextlib.suppress(FileNotFoundError):
            target.unlink()
        shutil.copyfile(source, target)
