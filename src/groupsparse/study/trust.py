"""Which spec files a job may trust: those the workflow wrote from a study it had checked.

A study is validated once, at parse time (study.preflight.check_study: the schema, then the
cross-field rules). The workflow then writes each job's spec file, results/<study>/specs/<name>.<hash>.json,
with :func:`write_checked`, which puts a stamp beside it, ``<spec file>.checked``: the id of the
schema that checked it and the sha256 of the spec's bytes. A job given a spec file whose stamp
matches both trusts it (:func:`is_checked`) and validates nothing again; a spec file without a
stamp (written by hand, or before stamps), with a stale one (the spec edited, the schema changed)
or given inline is validated as before, so bad input still fails in one line naming the key.

The stamp is a side file, not a field of the spec nor a command-line flag: either would change
what finished jobs ran with (the spec's bytes name the run; the rule's shell line is its code)
and make Snakemake rerun them. Torch-free.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from ..config.schema import SCHEMA_PATH
from ..io.files import content_file, write_text_atomic

STAMP_SUFFIX = ".checked"


@functools.cache
def schema_id() -> str:
    """``config.schema.yaml@<sha256 of its bytes, 16 hex>``: which schema checked a spec."""
    return f"{SCHEMA_PATH.name}@{hashlib.sha256(SCHEMA_PATH.read_bytes()).hexdigest()[:16]}"


def stamp_path(spec_path: str | Path) -> Path:
    return Path(f"{spec_path}{STAMP_SUFFIX}")


def _stamp(data: bytes) -> str:
    return json.dumps({"checked_by": schema_id(), "sha256": hashlib.sha256(data).hexdigest()}, sort_keys=True)


def write_checked(folder: str | Path, stem: str, text: str) -> Path:
    """The spec file ``folder/stem.<hash>.json`` holding ``text`` (io.files.content_file: its bytes are
    exactly ``text``) and its stamp. Call only with a spec built from a study that passed the parse-time check."""
    path = content_file(folder, stem, text)
    stamp, where = _stamp(text.encode()), stamp_path(path)
    if not (where.is_file() and where.read_text() == stamp):
        write_text_atomic(where, stamp)
    return path


def is_checked(spec_path: str | Path, data: bytes) -> bool:
    """Whether ``data``, read from ``spec_path``, carries the stamp of the parse-time check by this schema."""
    try:
        return stamp_path(spec_path).read_text() == _stamp(data)
    except (OSError, UnicodeDecodeError):
        return False
