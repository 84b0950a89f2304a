"""Every module, file and doc section a comment or a doc names exists: the paths (costs/model.py,
benchmarks/gpu_check.py), the file names a module gives beside its own (a sibling module by its name
alone), the dotted names (groupsparse.analysis.stats.VERDICT_RULE), docs/STUDY.md's numbered sections
and the titled sections of a page (README "Reading the results"). Read: the comments and docstrings of src/, tests/ and
benchmarks/, the comments of the configs and the workflow, and the prose of the docs (code blocks left out).
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "src" / "groupsparse"
# Stale names left in files others are rewriting now (issue 31 item 2: model/, training/, the transfer
# runner and its methods), each (file, name): drop an entry once its file is mended.
ALLOWED = {
    ("src/groupsparse/transfer/runner.py", "methods.py"),
    ("src/groupsparse/transfer/methods/__init__.py", "fitting.py"),
}
# Folders of results/<study>/: a doc may name a file there (pretrain/<run>/seeds0-2.tsv) by its place in it.
RESULT_FOLDERS = ("pretrain/", "transfer/", "tables/", "figures/", "logs/", "specs/", "results/")
SKIPPED = {".venv", ".git", "results", ".snakemake", "__pycache__"}  # folders no reference points into
TOP_FOLDERS = ("src/", "tests/", "benchmarks/", "docs/", "configs/", "workflow/", ".ci/")
EXT = r"(?:py|md|yaml|smk|sh|rst|tsv|toml)"
PATH = re.compile(r"(?<![\w/.:~<-])((?:[\w.-]+/)+(?:[\w.-]*\w\." + EXT + r")?)(?![\w<{*])")
BARE = re.compile(r"(?<![\w/.<-])(\w+\.(?:py|smk|sh))\b")
DOTTED = re.compile(r"\bgroupsparse(?:\.\w+)+")
SECTION = re.compile(r"\bsections? (\d+(?:\.\d+)?)(?: and (\d+(?:\.\d+)?))?")
PAGES = "README|STUDY|usage|slurm|reliability|development|theorem"
TITLED = re.compile(r"((?:[\w/]+/)?(?:" + PAGES + r")(?:\.md)?)(?:'s)? (?:section )?\"([^\"]+)\"")


def sources() -> list[Path]:
    found = [*PACKAGE.rglob("*.py"), *(REPO / "tests").rglob("*.py"), *(REPO / "benchmarks").glob("*.py")]
    found += [REPO / "README.md", REPO / "benchmarks/README.md", REPO / "benchmarks/costs/README.md"]
    found += [p for p in (REPO / "docs").glob("*.md") if p.name != "results.md"]  # results.md: generated
    found += [*(REPO / "configs").glob("*.yaml"), REPO / "config.yaml", REPO / "Snakefile"]
    found += [*(REPO / "workflow").rglob("*.smk"), *(REPO / "workflow/report").glob("*.rst")]
    return [p for p in found if p.is_file()]


def prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of what a reader takes for words: comments and docstrings of code, prose of docs."""
    text = path.read_text()
    if path.suffix == ".py":
        lines = [
            (t.start[0], t.string)
            for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type == tokenize.COMMENT
        ]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    lines += [(node.body[0].lineno + k, line) for k, line in enumerate(doc.splitlines())]
        return lines
    if path.suffix in (".yaml", ".smk") or path.name == "Snakefile":
        return [(i, line[line.index("#") :]) for i, line in enumerate(text.splitlines(), 1) if "#" in line]
    lines, fenced = [], False
    for i, line in enumerate(text.splitlines(), 1):
        fenced ^= line.lstrip().startswith("```")
        if not fenced and not line.lstrip().startswith("```"):
            lines.append((i, line))
    return lines


def _exists(name: str, where: Path) -> bool:
    return any(p.exists() for p in (REPO / name, PACKAGE / name, where.parent / name, REPO / "src" / name))


def _module(parts: list[str]) -> Path | None:
    base = REPO / "src" / Path(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _defines(module: Path, name: str) -> bool:
    """Whether ``module`` defines, assigns or imports ``name`` (or is a package holding a module ``name``), or
    a sibling module it imports everything from (``from .work import *``) does."""
    if module.name == "__init__.py" and ((module.parent / f"{name}.py").is_file() or (module.parent / name).is_dir()):
        return True
    text = module.read_text()
    pattern = rf"(?m)^\s*(?:def|class) {name}\b|^\s*{name}\s*[:=]|\bimport\b[^\n]*\b{name}\b|^\s+{name}\b.*,$"
    starred = [module.parent / f"{m}.py" for m in re.findall(r"(?m)^from \.(\w+) import \*", text)]
    return re.search(pattern, text) is not None or any(_defines(m, name) for m in starred if m.is_file())


def _dotted_ok(dotted: str) -> bool:
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        module = _module(parts[:k])
        if module is not None:
            return k == len(parts) or _defines(module, parts[k])
    return False


def _headings(doc: Path) -> set[str]:
    text = doc.read_text()
    titles = {re.sub(r"^[\d.]+\s+", "", m) for m in re.findall(r"(?m)^#+\s+(.+?)\s*$", text)}
    return titles | set(re.findall(r"\*\*([^*]+?)\.?\*\*", text))


def _doc(name: str, where: Path) -> Path | None:
    name = name if name.endswith(".md") else f"{name}.md"
    for path in (where.parent / name, REPO / name, REPO / "docs" / name, REPO / "docs" / Path(name).name):
        if path.is_file():
            return path
    return None


def stale_references() -> list[tuple[str, int, str]]:
    study_sections = {m for m in re.findall(r"(?m)^#+ (\d+(?:\.\d+)?)[. ]", (REPO / "docs/STUDY.md").read_text())}
    file_names = set()
    for _, folders, names in os.walk(REPO):
        folders[:] = [f for f in folders if f not in SKIPPED]
        file_names |= set(names)
    found = []
    for path in sources():
        rel = str(path.relative_to(REPO))
        in_package = path.is_relative_to(PACKAGE)
        for line_no, line in prose(path):
            for m in PATH.finditer(line):
                name = m.group(1)
                is_file = not name.endswith("/")
                if not is_file and not name.startswith(TOP_FOLDERS):
                    continue  # a ratio (1/2), a data folder: not a path of the repository
                if not _exists(name, path) and not name.startswith(RESULT_FOLDERS) and "//" not in name:
                    found.append((rel, line_no, name))
            for m in BARE.finditer(line):
                name = m.group(1)
                if in_package and name.endswith(".py") and not (path.parent / name).exists():
                    found.append((rel, line_no, name))  # a sibling module: name it by its folder if elsewhere
                elif name not in file_names:
                    found.append((rel, line_no, name))
            for m in DOTTED.finditer(line):
                if not _dotted_ok(m.group(0)):
                    found.append((rel, line_no, m.group(0)))
            for m in SECTION.finditer(line):  # a numbered section is docs/STUDY.md's
                for number in filter(None, m.groups()):
                    if number not in study_sections:
                        found.append((rel, line_no, f"section {number}"))
            for m in TITLED.finditer(line):
                doc = _doc(m.group(1), path)
                if doc is None or m.group(2).rstrip(".") not in _headings(doc):
                    found.append((rel, line_no, f'{m.group(1)} "{m.group(2)}"'))
    return [f for f in found if (f[0], f[2]) not in ALLOWED]


def test_every_module_file_and_section_a_comment_or_doc_names_exists():
    assert stale_references() == []


def test_the_check_sees_a_stale_path_a_stale_name_and_a_missing_section(tmp_path, monkeypatch):
    fake = PACKAGE / "io" / "files.py"
    text = '"""See costs/gone.py, gone.py, groupsparse.io.files.gone, section 42 and README "No such part"."""\n'
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: text if self == fake else _read(self, *a, **k))
    monkeypatch.setattr(__import__(__name__), "sources", lambda: [fake])
    names = {name for _, _, name in stale_references()}
    assert {"costs/gone.py", "gone.py", "groupsparse.io.files.gone", "section 42", 'README "No such part"'} <= names


_read = Path.read_text
