"""Atomic file output, Parquet tables with provenance, pickle-free checkpoints."""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

PROVENANCE_KEY = b"groupsparse.provenance"
TIMING_COLUMNS = ("fit_seconds", "wall_seconds", "mean_fit_seconds")  # vary run to run; ignored when comparing tables


class InputError(ValueError):
    """An input file is missing, truncated, corrupt, or from another configuration."""


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# When this process started: a temporary file last written before it belongs to a writer that died.
_STARTED = time.time()


def remove_leftovers(path: str | os.PathLike) -> list[Path]:
    """Remove the temporary files a killed writer of ``path`` left beside it (``.<name>.*.tmp`` last
    written before this process started: a live writer's file is newer), and return them."""
    path = Path(path)
    gone = []
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            if tmp.stat().st_mtime < _STARTED:
                tmp.unlink()
                gone.append(tmp)
    return gone


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success.

    The file gets the mode an ordinary write would (0666 less the umask): mkstemp's private
    0600 would hide every result from colleagues on a shared filesystem."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text_atomic(path, text: str) -> None:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)


def content_path(folder, stem: str, text: str) -> Path:
    """Where a spec file holding ``text`` lives: ``folder/stem.<first 12 hex digits of its sha256>.json``
    (a changed spec is a new file, so the jobs it affects rerun and no other)."""
    import hashlib

    return Path(folder) / f"{stem}.{hashlib.sha256(text.encode()).hexdigest()[:12]}.json"


@functools.lru_cache(maxsize=1)
def _static_provenance() -> dict[str, Any]:
    versions = {}
    for pkg in ("groupsparse", "torch", "numpy", "pandas", "pyarrow", "scikit-learn", "skglm", "snakemake"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    versions["python"] = platform.python_version()
    return {
        "git_commit": git_commit(),
        "versions": versions,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": cpu_info(),
    }


# Instruction-set extensions that change which kernels torch/BLAS run, so the last bits of a float result.
ISA_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "amx_tile",
    "neon",
    "asimd",
    "sve",
)


def cpu_info(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> dict[str, Any]:
    """The CPU's model, its instruction-set extensions (those of ISA_FLAGS it has, from /proc/cpuinfo's
    flags or, on ARM, Features) and logical CPU count: numbers can differ across CPUs in the last bits."""
    model, flags = platform.processor() or platform.machine(), set()
    with contextlib.suppress(OSError):
        for line in Path(cpuinfo).read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip().lower()
            if key in ("model name", "cpu model") and value.strip():
                model = value.strip()
            elif key in ("flags", "features") and not flags:
                flags = set(value.split())
    return {
        "model": model,
        "machine": platform.machine(),
        "isa": [f for f in ISA_FLAGS if f in flags],
        "logical_cpus": os.cpu_count(),
    }


def thread_info() -> dict[str, Any]:
    """Threads the numbers were computed with: torch's intra-op count (if torch is loaded) and the
    environment's limits."""
    torch = sys.modules.get("torch")
    return {
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        **{k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ},
    }


def git_commit() -> str:
    """The commit of the checkout that holds this package (``+dirty`` if it has local changes)."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        if not sha:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance(config_hash: str, device: str = "cpu", **extra: Any) -> dict[str, Any]:
    return {
        "config_hash": config_hash,
        "device": device,
        "argv": sys.argv[1:],
        **_static_provenance(),
        "threads": thread_info(),
        **extra,
    }


def machines_of(paths) -> list[dict[str, Any]]:
    """The distinct (host, CPU, instruction set, threads) the tables at ``paths`` were computed on:
    an aggregated table's provenance names every machine its numbers came from."""
    seen: list[dict[str, Any]] = []
    for path in paths:
        prov = read_provenance(path)
        machine = {"host": prov.get("host"), "cpu": prov.get("cpu"), "threads": prov.get("threads")}
        if machine not in seen:
            seen.append(machine)
    return seen


def write_parquet(df, path, prov: dict[str, Any]) -> None:
    """Write a DataFrame atomically with ``prov`` as JSON in the file's schema metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[PROVENANCE_KEY] = json.dumps(prov, sort_keys=True, default=str).encode()
    table = table.replace_schema_metadata(meta)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read_parquet(path):
    """Read a table written by :func:`write_parquet`; a truncated or foreign file is refused."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such table")
    try:
        return pq.read_table(path).to_pandas()
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise InputError(
            f"{path}: not a readable Parquet table ({exc}); delete it and rerun the rule that makes it"
        ) from exc


def read_csv_table(path, columns, what: str):
    """A committed CSV table (e.g. docs/*/tables/predictions.csv) that must have ``columns``: a missing,
    unreadable or foreign file is refused in one line naming it and what is wrong."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such {what}")
    try:
        table = pd.read_csv(path, keep_default_na=True)
    except Exception as exc:  # pandas raises several types for malformed files
        raise InputError(f"{path}: not a readable CSV {what} ({type(exc).__name__}: {exc})") from None
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise InputError(f"{path}: not a {what} (missing column(s) {', '.join(missing[:5])})")
    return table


def read_provenance(path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(path).metadata or {}
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise InputError(
            f"{path}: not a readable Parquet table ({exc}); delete it and rerun the rule that makes it"
        ) from exc
    if PROVENANCE_KEY not in meta:
        raise InputError(f"{path}: has no groupsparse provenance metadata")
    return json.loads(meta[PROVENANCE_KEY])


def save_checkpoint(path, tensors: dict, meta: dict[str, Any]) -> None:
    """safetensors file: tensors plus ``meta`` (JSON) in its header. Loading never unpickles."""
    from safetensors.torch import save_file

    with atomic_path(path) as tmp:
        save_file(
            {k: t.contiguous().cpu() for k, t in tensors.items()},
            str(tmp),
            metadata={"groupsparse": json.dumps(meta, sort_keys=True, default=str)},
        )


def load_checkpoint(path) -> tuple[dict, dict[str, Any]]:
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such checkpoint")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads((f.metadata() or {})["groupsparse"])
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not a mapping)
        if not isinstance(meta, dict):
            raise ValueError(f"its metadata is a JSON {type(meta).__name__}, not an object")
    except Exception as exc:
        raise InputError(
            f"{path}: not a readable groupsparse checkpoint ({type(exc).__name__}: {exc}); "
            "delete it and rerun pretraining"
        ) from exc
    return tensors, meta
