"""The package's layout: layers (no import from a lower layer to a higher one), no import circle, no
command importing cli, no module over ~400 lines, and the README's layout map matching the tree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "src" / "groupsparse"
MAX_LINES = 420


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + [node.module] if node.module else base) if node.level else node.module
                candidates = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {c for c in candidates if c in modules and c != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    assert cycles(import_graph()) == []


# The layers, lowest first: a package may import its own layer and those before it, never one after.
# Settings and files at the bottom; the data, the model and its training above them; the transfer
# comparison and its costs above training; the study's run table and parse-time checks above the
# costs they consult; then analysis of the tables, the figures, the findings (the README's text and the
# review's summary), the CLI commands and the CLI itself.
LAYERS = (
    ("config",),
    ("io",),
    ("data",),
    ("model",),
    ("training",),
    ("transfer",),
    ("costs",),
    ("study",),
    ("analysis",),
    ("figures",),
    ("findings",),
    ("commands",),
    ("cli",),
)


def layer_of(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"{module}: its package {top!r} is in no layer of LAYERS; add it there")


def test_every_package_has_a_layer():
    tops = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()} | {"cli"}
    assert tops == {name for names in LAYERS for name in names}


def test_no_import_runs_up_a_layer():
    graph = import_graph()
    upward = sorted(
        f"{a} -> {b}"
        for a, targets in graph.items()
        if a != "groupsparse"
        for b in targets
        if b != "groupsparse" and layer_of(b) > layer_of(a)
    )
    assert upward == []


def test_the_layer_check_sees_an_upward_import():
    """The check above can fail: an arrow from config to cli is found."""
    graph = import_graph()
    graph["groupsparse.config.schema"] = graph["groupsparse.config.schema"] | {"groupsparse.cli"}
    assert any(layer_of(b) > layer_of("groupsparse.config.schema") for b in graph["groupsparse.config.schema"])
    assert cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b"]]


def test_commands_never_import_cli():
    graph = import_graph()
    assert not [m for m in graph if m.startswith("groupsparse.commands") and "groupsparse.cli" in graph[m]]


def test_no_module_over_about_400_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_every_test_file_the_docs_and_scripts_name_exists():
    """A path like tests/unit/test_x.py in the README, the study, the code, the benchmarks or .ci must exist
    (the GPU script once ran tests from paths removed by a re-layout)."""
    repo = PACKAGE.parents[1]
    sources = [repo / "README.md", repo / "docs" / "STUDY.md", repo / ".ci" / "run", *(repo / "benchmarks").glob("*")]
    sources += [*PACKAGE.rglob("*.py"), *(repo / "workflow").rglob("*.smk"), repo / "Snakefile"]
    named = {
        (src.name, m)
        for src in sources
        if src.is_file() and src.suffix in ("", ".md", ".py", ".sh", ".smk")
        for m in re.findall(r"tests/[\w/]+\.py", src.read_text())
    }
    assert [(src, path) for src, path in sorted(named) if not (repo / path).is_file()] == []


def test_the_readme_layout_map_names_every_package_folder_and_only_real_paths():
    """The lines between the README's layout markers name each package folder under src/groupsparse
    (one line each, like "- `src/groupsparse/config/`: ...") and no path that does not exist."""
    text = (REPO / "README.md").read_text()
    start, end = "<!-- layout:start -->", "<!-- layout:end -->"
    assert start in text and end in text, f"README.md has no layout map between {start} and {end}"
    block = text.split(start, 1)[1].split(end, 1)[0]
    named = set(re.findall(r"`([\w./-]+)`", block))
    missing_paths = sorted(p for p in named if "/" in p and not (REPO / p).exists())
    assert missing_paths == [], f"the layout map names paths that do not exist: {missing_paths}"
    folders = {f"src/groupsparse/{p.name}/" for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    listed = {p if p.endswith("/") else p + "/" for p in named if p.startswith("src/groupsparse/")}
    assert sorted(folders - listed) == [], "package folders the layout map does not name"
