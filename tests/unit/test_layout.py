"""The package's layout: layers (no import from a lower layer to a higher one), no import circle, no
command importing cli, no private name used outside its module (src/ and benchmarks/), no module over
~400 lines outside training/ (which is split by concept instead: a step, a record, a resume each in one
module, composed without mixins), and the layout map of docs/development.md matching the tree."""

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


# Private names another module may use, each with the reason it is allowed (none).
PRIVATE_USES_ALLOWED: set[tuple[str, str, str]] = set()


def private_uses(scripts: dict[str, Path] | None = None) -> set[tuple[str, str, str]]:
    """(user, module, name) for each ``_name`` a module of the package or a script of benchmarks/ imports from a
    package module, or reads as ``module._name`` from one it imported: a name another module needs is part of
    its owner's interface. ``scripts``: other files to read instead of benchmarks/ (a test's)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    if scripts is None:
        scripts = {str(p.relative_to(REPO)): p for p in (REPO / "benchmarks").rglob("*.py")}
    found = set()
    for name, path in (modules | scripts).items():
        in_package = name in modules
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        imported: dict[str, str] = {}  # local name -> package module
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level and not in_package:
                    continue
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                source = ".".join(base + [node.module] if node.module else base) if node.level else node.module
                for alias in node.names:
                    if f"{source}.{alias.name}" in modules:
                        imported[alias.asname or alias.name] = f"{source}.{alias.name}"
                    elif source in modules and is_private(alias.name):
                        found.add((name, source, alias.name))
            elif isinstance(node, ast.Import):
                imported |= {a.asname or a.name: a.name for a in node.names if a.name in modules}
        for node in ast.walk(tree):
            owner = (
                imported.get(node.value.id)
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                else None
            )
            if owner is not None and owner != name and is_private(node.attr):
                found.add((name, owner, node.attr))
    return found


def test_the_private_name_check_reads_the_benchmarks(tmp_path):
    """The check above sees a benchmark script reaching into a module (as one once cut the fused kernel at its
    phases through fastpath._fused_buffers), by either form of import."""
    script = tmp_path / "case.py"
    script.write_text(
        "from groupsparse.model import fastpath\nfrom groupsparse.model.fastpath import _get\nfastpath._fused_buffers\n"
    )
    found = private_uses({"benchmarks/cases/case.py": script})
    user = "benchmarks/cases/case.py"
    assert {
        (user, "groupsparse.model.fastpath", "_fused_buffers"),
        (user, "groupsparse.model.fastpath", "_get"),
    } <= found


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_private_name_is_used_outside_its_module():
    assert sorted(private_uses() - PRIVATE_USES_ALLOWED) == []
    assert sorted(PRIVATE_USES_ALLOWED - private_uses()) == [], "an allowed use is gone: drop it from the list"


# Where a task kind may be named: its spec class and registry, its declaration, its own data module.
KIND_HOMES = {"config/specs.py", "config/schema.py", "data/kinds.py", "data/images.py"}
KIND_NAMED_ALLOWED: set[str] = set()


def test_a_task_kind_is_named_only_where_it_is_declared():
    """What a kind changes (data, transfer task, costs, figures, inputs) is declared by it (data/kinds.py),
    so no other module or rule tests ``kind == "images"``: a third kind touches its own files only."""
    from groupsparse.config.specs import TASK_SPECS

    named = re.compile("[\"'](" + "|".join(TASK_SPECS) + ")[\"']")
    sources = [*PACKAGE.rglob("*.py"), *(REPO / "workflow").rglob("*.smk"), REPO / "Snakefile"]
    found = {
        str(p.relative_to(PACKAGE)) if p.is_relative_to(PACKAGE) else str(p.relative_to(REPO))
        for p in sources
        if named.search(p.read_text())
    }
    assert sorted(found - KIND_HOMES - KIND_NAMED_ALLOWED) == []
    assert sorted(KIND_NAMED_ALLOWED - found) == [], "an allowed file no longer names a kind: drop it"


def test_every_task_kind_has_a_spec_class_and_a_declaration():
    from groupsparse.config.specs import TASK_SPECS
    from groupsparse.data.kinds import KINDS

    assert set(KINDS) == set(TASK_SPECS)
    for kind in KINDS.values():
        assert callable(kind.function("make")) and callable(kind.function("downstream")), kind.name


def test_no_module_over_about_400_lines():
    """training/ is split by concept (the test below), not by length."""
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES and p.parent.name != "training"
    }
    assert long == {}


TRAINING = PACKAGE / "training"
# Each concept of training/ and the one module that holds it, by the calls only that concept makes: a
# reader finds a step, a record, a resume each in one place.
CONCEPT_HOMES = {
    "a step's gradients": ("steps.py", {"loss_and_grads", "grad"}),
    "a step's update": ("descent.py", {"build", "project"}),
    "a record": ("recording.py", {"seed_forward", "geomspace"}),
    "a resume state": ("resume.py", {"save_checkpoint", "load_checkpoint"}),
    "a draw": ("batches.py", {"sample_inner", "sample_inner_steps"}),
}


def calls_in(path: Path) -> set[str]:
    """The names a module calls (``f(...)`` or ``x.f(...)``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def test_training_holds_each_concept_in_one_module():
    trainer_modules = [p for p in TRAINING.glob("*.py") if p.name != "transverse.py"]  # its own analysis
    strays = {
        concept: sorted(p.name for p in trainer_modules if p.name != home and calls_in(p) & marks)
        for concept, (home, marks) in CONCEPT_HOMES.items()
    }
    assert {k: v for k, v in strays.items() if v} == {}
    assert all(calls_in(TRAINING / home) & marks for home, marks in CONCEPT_HOMES.values())


def test_training_is_composed_of_objects_not_mixins_or_descriptors():
    """The Trainer owns its parts as attributes; no class of training/ inherits from more than one
    class, the Trainer from none, and none is a descriptor (state rebuilt when an attribute is read)."""
    for path in TRAINING.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [b for b in node.bases if not (isinstance(b, ast.Name) and b.id == "Protocol")]
                assert len(bases) <= (0 if node.name == "Trainer" else 1), f"{path.name}: {node.name}"
                methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
                assert not methods & {"__get__", "__set__"}, f"{path.name}: {node.name} is a descriptor"


def test_the_front_page_stays_within_150_lines():
    """README.md is the front page: details go to docs/ (the findings' generator writes there too)."""
    lines = (PACKAGE.parents[1] / "README.md").read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines: move details to docs/"


def test_every_test_file_the_docs_and_scripts_name_exists():
    """A path like tests/unit/test_<name>.py in the README, the study, the code, the benchmarks or .ci must exist
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


def test_the_layout_map_names_every_package_folder_and_only_real_paths():
    """The lines between the layout markers of docs/development.md ("Where things live") name each package
    folder under src/groupsparse (one line each, like "- `src/groupsparse/config/`: ...") and no path that
    does not exist."""
    text = (REPO / "docs" / "development.md").read_text()
    start, end = "<!-- layout:start -->", "<!-- layout:end -->"
    assert start in text and end in text, f"docs/development.md has no layout map between {start} and {end}"
    block = text.split(start, 1)[1].split(end, 1)[0]
    named = set(re.findall(r"`([\w./-]+)`", block))
    missing_paths = sorted(p for p in named if "/" in p and not (REPO / p).exists())
    assert missing_paths == [], f"the layout map names paths that do not exist: {missing_paths}"
    folders = {f"src/groupsparse/{p.name}/" for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    listed = {p if p.endswith("/") else p + "/" for p in named if p.startswith("src/groupsparse/")}
    assert sorted(folders - listed) == [], "package folders the layout map does not name"
