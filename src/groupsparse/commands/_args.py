"""Argument checks and exit codes shared by the subcommands (kept out of ``groupsparse.cli``, which no
command imports).

Every argument of every command is checked before any work, by the same rules as the workflow:

- its **domain**, at parse time: each argument's ``type`` is a :class:`Domain` (a number in a range, a
  setting of the study's schema by its key, an output file whose folder exists and is writable, an input
  file that exists, ...) or it has ``choices``; a bad value is one line naming the argument and what it
  accepts (``tests/unit/test_cli_arguments.py`` feeds every argument of every command bad values drawn
  from its domain, and fails on an argument without one);
- its **run spec**, before the command's work: a command that builds run specs from its arguments
  declares how (``set_defaults(specs_of=...)``), and ``_specs.check_specs`` validates each as the workflow
  validates a job's, with the memory estimate (``commands/_specs.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import tempfile
from pathlib import Path

EXIT_CONFIG, EXIT_INPUT, EXIT_DIVERGED = 2, 4, 3


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a refused command line is one line (``groupsparse <command>: argument --x: ...``),
    exit 2, not a usage block: the line the workflow's logs and a user's terminal show."""

    def error(self, message: str):
        self.exit(EXIT_CONFIG, f"{self.prog}: {' '.join(message.split())} (see {self.prog} --help)\n")


# -- domains: an argument's type that knows what it accepts -----------------------------------


class Domain:
    """An argparse ``type``: parses a value or refuses it with one line saying what is allowed; and
    lists values it refuses (:meth:`bad_values`), for the tests."""

    what = "a value"

    def __call__(self, text: str):
        try:
            return self.parse(text)
        except (ValueError, TypeError, OSError) as exc:
            raise argparse.ArgumentTypeError(" ".join(str(exc).split())[:300]) from None

    def parse(self, text: str):
        return text

    def bad_values(self, tmp: Path) -> list[str]:
        """Values this domain refuses; ``tmp``: a scratch folder (for paths)."""
        return []

    def __repr__(self) -> str:  # argparse names the type in some messages
        return self.what


class Number(Domain):
    """An integer or a finite number in a range (bounds inclusive unless ``exclusive``)."""

    def __init__(
        self,
        kind=int,
        minimum=None,
        maximum=None,
        exclusive_minimum=False,
        exclusive_maximum=False,
        nullable=False,
        key: str | None = None,
    ):
        self.kind, self.minimum, self.maximum = kind, minimum, maximum
        self.exclusive_minimum, self.exclusive_maximum, self.nullable, self.key = (
            exclusive_minimum,
            exclusive_maximum,
            nullable,
            key,
        )
        bounds = []
        if minimum is not None:
            bounds.append(f"{'>' if exclusive_minimum else '>='} {minimum:g}")
        if maximum is not None:
            bounds.append(f"{'<' if exclusive_maximum else '<='} {maximum:g}")
        self.what = ("an integer" if kind is int else "a finite number") + (
            f" {' and '.join(bounds)}" if bounds else ""
        )
        if key:
            self.what += f" (the study's {key})"

    def parse(self, text: str):
        if self.nullable and text.strip().lower() in ("none", "null"):
            return None
        try:
            value = int(text) if self.kind is int else float(text)
        except ValueError:
            raise ValueError(f"got {text!r}; allowed: {self.what}") from None
        if self.kind is float and not math.isfinite(value):
            raise ValueError(f"got {text!r}; allowed: {self.what}")
        low_bad = self.minimum is not None and (
            value <= self.minimum if self.exclusive_minimum else value < self.minimum
        )
        high_bad = self.maximum is not None and (
            value >= self.maximum if self.exclusive_maximum else value > self.maximum
        )
        if low_bad or high_bad:
            raise ValueError(f"got {text}; allowed: {self.what}")
        return value

    def bad_values(self, tmp: Path) -> list[str]:
        bad = ["", "abc", "1e999" if self.kind is float else "1.5", "nan", "-inf"]
        if self.minimum is not None:
            bad.append(str(self.minimum if self.exclusive_minimum else self.minimum - (1 if self.kind is int else 0.5)))
        if self.maximum is not None:
            bad.append(str(self.maximum if self.exclusive_maximum else self.maximum + 1))
        return bad


def setting(key: str) -> Number:
    """The domain of a study setting (a dotted key of the schema: ``task.D``, ``pretrain.eta``,
    ``jobs.pretrain_threads``): its type and range, as the workflow checks the key in a config."""
    from ..config.schema import schema_property

    prop = schema_property(key)
    types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
    kind = int if "integer" in types else float
    low = prop.get("exclusiveMinimum", prop.get("minimum"))
    high = prop.get("exclusiveMaximum", prop.get("maximum"))
    return Number(kind, low, high, "exclusiveMinimum" in prop, "exclusiveMaximum" in prop, "null" in types, key)


POSITIVE_INT = Number(int, 1)
NONNEGATIVE_INT = Number(int, 0)
POSITIVE = Number(float, 0, exclusive_minimum=True)


def threads() -> Number:
    """Torch threads of a command: the range of the study's jobs.pretrain_threads."""
    return setting("jobs.pretrain_threads")


class OutputFile(Domain):
    """A file to write: not a folder, at a place that can be written (checked before any work: a run must
    not compute for minutes and then find nowhere to put its result). Missing folders on its path are made
    when the file is written (every writer makes them), so they must be makeable: below a folder that can
    be written, never below a file."""

    what = "a file to write"

    def parse(self, text: str):
        if not text:
            raise ValueError("got an empty path; allowed: a file to write")
        path = Path(text)
        if path.is_dir():
            raise ValueError(f"{text} is a folder; allowed: a file to write")
        problem = place_problem(path.parent)
        if problem:
            raise ValueError(f"{text}: {problem}")
        return text

    def bad_values(self, tmp: Path) -> list[str]:
        (tmp / "a_folder").mkdir(exist_ok=True)
        (tmp / "a_file").write_text("x")
        return ["", str(tmp / "a_folder"), str(tmp / "a_file" / "x.csv"), str(tmp / "a_file" / "below" / "x.csv")]


def place_problem(folder: Path) -> str | None:
    """None if ``folder`` is, or can be made as, a folder that can be written; else why not."""
    nearest = folder.resolve()
    while not nearest.exists():
        nearest = nearest.parent
    if not nearest.is_dir():
        return f"{nearest} is a file, not a folder"
    return write_problem(nearest)


class OutputFolder(Domain):
    """A folder to write into: a folder, or a path to make one at (below a folder that can be written)."""

    what = "a folder to write into"

    def __init__(self, none_allowed: bool = False):
        self.none_allowed = none_allowed

    def parse(self, text: str):
        if self.none_allowed and text == "none":
            return text
        if not text:
            raise ValueError("got an empty path; allowed: a folder to write into")
        path = Path(text)
        if path.exists() and not path.is_dir():
            raise ValueError(f"{text} is a file; allowed: a folder to write into")
        problem = place_problem(path)
        if problem:
            raise ValueError(f"{text}: {problem}")
        return text

    def bad_values(self, tmp: Path) -> list[str]:
        (tmp / "a_file").write_text("x")
        return ["", str(tmp / "a_file"), str(tmp / "a_file" / "below")]


class InputFile(Domain):
    """A file to read that exists (what it holds is checked where it is read, naming the file).
    ``named``: the value may be RUN=PATH."""

    what = "an existing file"

    def __init__(self, named: bool = False):
        self.named = named

    def parse(self, text: str):
        path = text.split("=", 1)[1] if self.named and "=" in text else text
        if not path:
            raise ValueError("got an empty path; allowed: an existing file")
        if Path(path).is_dir():
            raise ValueError(f"{path} is a folder; allowed: an existing file")
        if not Path(path).is_file():
            raise ValueError(f"{path}: no such file")
        return text

    def bad_values(self, tmp: Path) -> list[str]:
        (tmp / "a_folder").mkdir(exist_ok=True)
        return ["", str(tmp / "no_such_file.parquet"), str(tmp / "a_folder")]


class InputFolder(Domain):
    """A folder to read that exists; ``missing_ok``: one that does not exist yet is accepted (the
    command says what that means), a file never is."""

    what = "an existing folder"

    def __init__(self, missing_ok: bool = False):
        self.missing_ok = missing_ok

    def parse(self, text: str):
        if not text:
            raise ValueError("got an empty path; allowed: a folder")
        path = Path(text)
        if path.exists() and not path.is_dir():
            raise ValueError(f"{text} is a file; allowed: a folder")
        if not path.exists() and not self.missing_ok:
            raise ValueError(f"{text}: no such folder")
        return text

    def bad_values(self, tmp: Path) -> list[str]:
        (tmp / "a_file").write_text("x")
        return ["", str(tmp / "a_file")] + ([] if self.missing_ok else [str(tmp / "no_such_folder")])


class Text(Domain):
    """A string matching ``pattern`` (a name, a hex digest, a URL, ...)."""

    def __init__(self, pattern: str, what: str):
        self.pattern, self.what = re.compile(pattern), what

    def parse(self, text: str):
        if not self.pattern.fullmatch(text):
            raise ValueError(f"got {text!r}; allowed: {self.what}")
        return text

    def bad_values(self, tmp: Path) -> list[str]:
        return ["", "bad value; with $(shell)"]


NAME = Text(r"[A-Za-z][A-Za-z0-9_]*", "a name matching ^[A-Za-z][A-Za-z0-9_]*$")


class Listed(Domain):
    """A comma-separated list of ``item`` values (at least one, no repeats)."""

    def __init__(self, item: Domain, what: str):
        self.item, self.what = item, what

    def parse(self, text: str):
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if not parts:
            raise ValueError(f"got {text!r}; allowed: {self.what}")
        values = [self.item.parse(p) for p in parts]
        if len(set(map(str, values))) != len(values):
            raise ValueError(f"got {text!r}: a value repeats; allowed: {self.what}")
        return values

    def bad_values(self, tmp: Path) -> list[str]:
        return ["", ","] + [f"{b}" for b in self.item.bad_values(tmp) if b and "," not in b][:3]


class Choice(Domain):
    """One of a list known when the parser is built (``noun``: what each is, e.g. "method")."""

    def __init__(self, allowed, noun: str):
        self.allowed, self.noun = list(allowed), noun
        self.what = f"a {noun}: {', '.join(self.allowed)}"

    def parse(self, text: str):
        if text not in self.allowed:
            raise ValueError(f"unknown {self.noun} {text!r}; allowed: {', '.join(self.allowed)}")
        return text

    def bad_values(self, tmp: Path) -> list[str]:
        return ["", "no_such_thing"]


class Seeds(Domain):
    """Repetitions: '0-4' -> [0..4]; '0,2,5' -> [0, 2, 5]."""

    what = "distinct non-negative integers, e.g. 0-4 or 0,2,5"

    def parse(self, text: str) -> list[int]:
        seeds: list[int] = []
        try:
            for part in text.split(","):
                part = part.strip()
                if "-" in part[1:]:
                    lo, hi = part.split("-", 1) if not part.startswith("-") else (part, part)
                    seeds += list(range(int(lo), int(hi) + 1))
                elif part:
                    seeds.append(int(part))
        except ValueError:
            seeds = []
        if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
            raise ValueError(f"got {text!r}; allowed: {self.what}")
        return seeds

    def bad_values(self, tmp: Path) -> list[str]:
        return ["", "-1", "3-1", "0,0", "a"]


class JsonObject(Domain):
    """A JSON object given inline, or ``@path`` to a JSON/YAML file (``file_only``: only ``@path``);
    ``validate`` (a spec's from_dict) runs on it, so that a bad spec is refused with the argument named."""

    what = "a JSON object, or @file.json / @file.yaml"

    def __init__(
        self, validate=None, inline: bool = True, text: bool = False, bare_files: bool = False, checked_later=False
    ):
        # text: return the given text itself; bare_files: a path without the @ names a file too;
        # checked_later: the command's check() validates the object (a run spec), before any work
        self.validate, self.inline, self.text, self.bare_files = validate, inline, text, bare_files
        self.checked_later = checked_later

    def parse(self, text: str) -> dict | str:
        if text.startswith("@") or (self.bare_files and not text.lstrip().startswith(("{", "["))):
            path = Path(text[1:] if text.startswith("@") else text)
            if not path.is_file():
                raise ValueError(f"{path}: no such file")
            raw = path.read_bytes().decode(errors="replace")
            try:
                if path.suffix in (".yaml", ".yml"):
                    import yaml

                    value = yaml.safe_load(raw)
                else:
                    value = json.loads(raw)
            except ValueError as exc:  # json.JSONDecodeError and yaml.YAMLError are ValueErrors or not:
                raise ValueError(f"{path}: not valid JSON/YAML ({exc})") from None
            except Exception as exc:  # noqa: BLE001  (yaml's errors)
                raise ValueError(f"{path}: not valid YAML ({' '.join(str(exc).split())[:200]})") from None
        elif self.inline:
            try:
                value = json.loads(text)
            except ValueError as exc:
                raise ValueError(f"not valid JSON ({exc})") from None
        else:
            raise ValueError(f"got {text[:60]!r}; allowed: @file.json")
        if not isinstance(value, dict):
            raise ValueError(f"got a {type(value).__name__}; allowed: {self.what}")
        if self.validate is not None:
            from ..config.errors import ConfigError

            try:
                self.validate(value)
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return text if self.text else value

    def bad_values(self, tmp: Path) -> list[str]:
        (tmp / "broken.json").write_text("{")
        bad = ["@" + str(tmp / "no_such_spec.json"), "@" + str(tmp / "broken.json"), "[]"]
        bad += ["{", "not json"] if self.inline else ["{}"]
        return bad + (['{"task": 7}'] if self.validate is not None or self.checked_later else [])


def parse_seeds(text: str) -> list[int]:
    """'0-4' -> [0..4]; '0,2,5' -> [0, 2, 5] (the form snakemake's chunk wildcards take)."""
    return Seeds()(text)


def load_spec_arg(text: str) -> dict:
    """A JSON object given inline, or as @path to a JSON/YAML file (the command validates it)."""
    return JsonObject()(text)


def write_problem(folder: Path) -> str | None:
    """None if a file can be created in ``folder``, else why not (a real write: os.access says yes to root
    on a read-only filesystem)."""
    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".groupsparse-write-probe."):
            pass
    except OSError as exc:
        return f"cannot write in {folder} ({exc.strerror})"
    return None


def set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(max(1, n))
    with contextlib.suppress(RuntimeError):  # already set in this process
        torch.set_num_interop_threads(max(1, n))
