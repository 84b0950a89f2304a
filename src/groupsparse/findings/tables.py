"""What a finding reads: a study's tables and config, its claims selected by their typed columns, and
the number formats.

A study's tables are its committed copies (docs/<page>/tables/<name>.csv, written by `groupsparse
snapshot`) or a results folder's (results/<study>/tables/<name>.parquet, else .csv); both carry the
workflow's column names. Claims are selected by their typed columns (analysis/statements.py: the
statement, the variant, kappa, c, the method...), never by their text; a claim a finding needs and
does not find stops the generator naming the columns it asked for and the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..io import tables as names
from ..io.files import InputError

COMMITTED = names.CSV_TABLES  # the tables a snapshot commits, as CSV
# Beside committed tables: the config that made them (the shipped config may have moved on since)
MADE_BY = "config.yaml"


@dataclass(frozen=True)
class Shipped:
    """A study whose tables are committed: its name, config and page folder (figures; tables in
    <page>/tables)."""

    name: str
    config: str
    page: str
    same_as: str | None = None  # the shipped study this one reruns on another CPU (findings.cpus)

    @property
    def tables(self) -> str:
        return f"{self.page}/tables"


# The findings (docs/findings.md, the README's answers) read these studies' committed tables.
SHIPPED = (
    Shipped("default", "config.yaml", "docs/results"),
    # the decisive test: population gradient flow, committed a level at a time as its runs finish
    Shipped("population", "configs/population.yaml", "docs/population"),
    Shipped("population_gd", "configs/population_gd.yaml", "docs/population_gd"),
    Shipped("theorem", "configs/theorem.yaml", "docs/theorem"),
    # configs/population_gd.yaml's D = 64 on 2 cores (the fit levels rerun bit for bit, D = 64 added)
    Shipped("population_D64", "configs/slices/population_D64.yaml", "docs/population_D64"),
    # configs/practitioners.yaml's levels 2 cores afford: D = 6, 8, 12 (eta(D) = 0.5 there), D = 16, and D = 24
    # (at eta(D) for two of its starts, then the other eight variants)
    Shipped("practitioners_small_D", "configs/slices/practitioners_small_D.yaml", "docs/practitioners_small_D"),
    Shipped("practitioners_D16", "configs/slices/practitioners_D16.yaml", "docs/practitioners_D16"),
    Shipped(
        "practitioners_D24_stable", "configs/slices/practitioners_D24_stable.yaml", "docs/practitioners_D24_stable"
    ),
    Shipped("practitioners_D24", "configs/slices/practitioners_D24.yaml", "docs/practitioners_D24"),
    # config.yaml again, on an Intel Xeon with AVX-512 (the README's default run is on an AMD EPYC without it;
    # the Xeon's ran at an earlier commit: the comparison says so and uses the current verdict rule)
    Shipped("default_intel_xeon", "config.yaml", "docs/results_intel_xeon", same_as="default"),
)


def cpu_of(folder) -> dict:
    """The CPU a committed folder's run was made on (its provenance.json's "cpu"; {} when unrecorded)."""
    import json

    path = Path(folder) / "provenance.json"
    return (json.loads(path.read_text()).get("cpu") or {}) if path.is_file() else {}


def cpu_text(folder) -> str:
    """'AMD EPYC (sse4_2, avx, avx2, fma)': the model and instruction set of a committed folder's run."""
    cpu = cpu_of(folder)
    return f"{cpu.get('model', 'an unrecorded CPU')} ({', '.join(cpu.get('isa') or []) or 'instruction set unknown'})"


class FindingsError(InputError):
    """A table, row or claim that a finding needs is missing (one line naming it)."""


class Tables:
    """One study's tables and config. ``folder`` holds <name>.parquet or <name>.csv; ``link``, where
    the README links them (the repository-relative folder); ``config_file``, the config that made them."""

    def __init__(self, folder, config_file: str | None = None, link: str | None = None, root=None, config=None):
        self.folder = Path(folder)
        self.config_file = config_file
        self.link = link or str(folder)
        self.root = Path(root) if root is not None else Path(".")
        self._cache: dict = {}
        self._config = config  # a filled config already at hand (a run's provenance), else read from config_file

    def path(self, name: str) -> Path | None:
        for suffix in (".parquet", ".csv"):
            path = self.folder / f"{name}{suffix}"
            if path.is_file():
                return path
        return None

    def has(self, name: str) -> bool:
        return self.path(name) is not None

    def table(self, name: str):
        if name not in self._cache:
            import pandas as pd

            path = self.path(name)
            if path is None:
                raise FindingsError(f"{self.folder}/{name}.csv: no such table")
            self._cache[name] = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
        return self._cache[name]

    @property
    def config(self) -> dict:
        """The config with the schema's defaults filled in (what the run used)."""
        if self._config is None:
            import yaml

            from ..config.schema import fill_defaults, study_schema

            made_by = self.folder / MADE_BY  # the config that made the tables, copied beside them
            if not made_by.is_file() and self.config_file is None:
                raise FindingsError(f"{self.folder}: no config file given for these tables")
            config = yaml.safe_load((made_by if made_by.is_file() else self.root / self.config_file).read_text())
            fill_defaults(config, study_schema())
            self._config = config
        return self._config

    @property
    def design(self) -> dict:
        """The study's config file as shipped: its whole design, where the tables' own config (``config``) may
        be a slice of it run so far; the tables' config where no file is named."""
        if self.config_file is None or not (self.root / self.config_file).is_file():
            return self.config
        import yaml

        return yaml.safe_load((self.root / self.config_file).read_text())

    def claims(self, **where):
        """The claims whose typed columns have these values (:func:`select`); empty without a claims table."""
        if not self.has("claims"):
            return _empty()
        c = self.table("claims")
        if "statement" not in c.columns:
            raise FindingsError(
                f"{self.folder}/claims: written before the typed claim columns (run tools/upgrade_claims.py)"
            )
        return select(c, **where)

    def claim(self, **where):
        """The one claim with these typed columns."""
        hit = self.claims(**where)
        if len(hit) != 1:
            shown = ", ".join(f"{k} = {v!r}" for k, v in where.items())
            raise FindingsError(f"{self.folder}/claims: {len(hit)} claims with {shown} (want one)")
        return hit.iloc[0]

    def rows(self, name: str, **where):
        """The rows of table ``name`` with these column values (:func:`select`)."""
        return select(self.table(name), **where)

    def row(self, name: str, **where):
        """The one row of table ``name`` with these column values."""
        rows = self.rows(name, **where)
        if len(rows) != 1:
            shown = ", ".join(f"{k} = {v!r}" for k, v in where.items())
            raise FindingsError(f"{self.folder}/{name}: {len(rows)} rows with {shown} (want one)")
        return rows.iloc[0]

    @property
    def page(self) -> str:
        """The study's page, docs-relative ('population.md'), from its tables' folder link."""
        return self.link.removesuffix("/tables").removeprefix("docs/") + ".md"


def select(df, **where):
    """The rows of ``df`` whose columns have these values: a float compared to 1e-9, '' matching an empty cell
    (NaN), a list or tuple any of its values."""
    for key, value in where.items():
        column = df[key]
        if isinstance(value, list | tuple):
            df = df[column.isin(value)]
        elif isinstance(value, float | int) and not isinstance(value, bool):
            df = df[(column.astype(float) - float(value)).abs() < 1e-9]
        elif value == "":
            df = df[column.isna() | (column.astype(str) == "")]
        else:
            df = df[column.astype(str) == str(value)]
    return df


def _empty():
    import pandas as pd

    return pd.DataFrame(columns=["claim", "statement", "measured", "low", "high", "verdict", "power"])


def of_results(results) -> Tables:
    """A results folder's tables (results/<study>/tables, or a docs page folder with its committed
    tables/), with the config that made them: the run's provenance, else the committed provenance's file."""
    import json

    results = Path(results)
    folder = results / "tables"
    for prov in (results / "provenance.json", folder / "provenance.json"):
        if prov.is_file():
            data = json.loads(prov.read_text())
            if isinstance(data.get("study"), dict):
                return Tables(folder, data.get("config"), config=data["study"])
            if data.get("config"):
                return Tables(folder, data["config"])
    return Tables(folder)


def committed(root=".") -> dict[str, Tables]:
    """The shipped studies' committed tables, by study name (``root``: the repository)."""
    root = Path(root)
    return {s.name: Tables(root / s.tables, s.config, s.tables, root) for s in SHIPPED}


def commit_tables(results, folder) -> list[str]:
    """Copy a finished study's CSV tables (the workflow's own, io.tables.CSV_TABLES) to ``folder`` with
    its provenance; a committed table the run did not make is removed. -> the names written."""
    import json

    from ..io.files import write_text_atomic

    results, folder = Path(results), Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in COMMITTED:
        source, target = results / "tables" / f"{name}.csv", folder / f"{name}.csv"
        if source.is_file():
            write_text_atomic(target, source.read_text())
            written.append(name)
        elif target.is_file():
            target.unlink()
    prov = json.loads((results / "provenance.json").read_text())
    study = (prov.get("study") or {}).get("study_name")
    shipped = {s.name: s.config for s in SHIPPED}
    kept = {
        "study_name": study,
        "config": shipped.get(study),
        "config_hash": prov.get("config_hash"),
        "git_commit": prov.get("git_commit"),
        "torch": (prov.get("versions") or {}).get("torch"),
        "host": prov.get("host"),
        "cpu": prov.get("cpu"),
    }
    write_text_atomic(folder / "provenance.json", json.dumps(kept, indent=1) + "\n")
    if isinstance(prov.get("study"), dict):
        import yaml

        header = f"# The config that made these tables (git commit {kept['git_commit']}), defaults filled in.\n"
        write_text_atomic(folder / MADE_BY, header + yaml.safe_dump(prov["study"], sort_keys=False))
    elif (folder / MADE_BY).is_file():
        (folder / MADE_BY).unlink()
    return written


# --- number formats: a README number is a table's value at the precision shown --------------------


def num(x, digits: int = 3) -> str:
    x = float(x)
    if math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}f}"


def interval(row, digits: int = 3, cols=("measured", "low", "high")) -> str:
    """'0.565 [0.548, 0.583]'."""
    value, low, high = (row[c] for c in cols)
    return f"{num(value, digits)} [{num(low, digits)}, {num(high, digits)}]"


def count(x) -> str:
    """A sample size or step count, rounded: '43', 'not reached'."""
    x = float(x)
    return "not reached" if math.isinf(x) else ("n/a" if math.isnan(x) else f"{x:.0f}")


def n_interval(row) -> str:
    """'43 [30, 61]' of a sample_complexity row (its interval's open end as '> grid')."""
    ends = ["> grid" if math.isinf(float(row[c])) else count(row[c]) for c in ("ci_low", "ci_high")]
    ends = ["–" if e == "n/a" else e for e in ends]
    return f"{count(row['n_needed'])} [{ends[0]}, {ends[1]}]"


# simulated and plug-in powers further apart than this are both shown (docs/STUDY.md section 7)
POWERS_DISAGREE = 0.1


def method_label(name: str) -> str:
    """A method's words for a reader: the label it declares (else its one-line description)."""
    from ..transfer.methods import registry

    method = registry().get(name)
    if method is None:
        return name
    return getattr(method, "label", None) or method.description


def listing(values, digits: int | None = None) -> str:
    """'4, 6, 8 and 12' (numbers at ``digits`` decimals, else as given)."""
    items = [num(v, digits) if digits is not None else f"{v:g}" if isinstance(v, float) else str(v) for v in values]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def fold(head: str, items: list[str], width: int = 100, sep: str = ", ") -> list[str]:
    """``head`` then ``items`` joined by ``sep``, in lines of at most about ``width`` characters
    (continuations indented two spaces past ``head``'s own indent): the review's long lists on a terminal."""
    lines, current = [], head
    indent = " " * (len(head) - len(head.lstrip()) + 2)
    for i, item in enumerate(items):
        piece = item + (sep if i < len(items) - 1 else "")
        if len(current) + len(piece) > width and current.strip():
            lines.append(current.rstrip())
            current = indent
        current += piece
    lines.append(current.rstrip())
    return lines


def image_tasks(config: dict) -> list[str]:
    """The tasks on real images: those of a kind that reads a dataset (data.kinds)."""
    from ..data.kinds import kind_of

    return [name for name, entry in config["tasks"].items() if kind_of(entry["task"]).loads_dataset]


def _verdict_target(t: Tables) -> float:
    """The config's one accuracy target of the transfer verdicts; 0.9, the schema's default, without a config."""
    try:
        return float(t.config["scaling"]["analysis"]["verdict_target"])
    except FindingsError:
        from ..config.schema import study_schema

        return float(study_schema()["$defs"]["scaling_analysis"]["properties"]["verdict_target"]["default"])


def n_lines(t: Tables, keep) -> list[str]:
    """'n for 90%, <run>: method n, ...' per task run that ``keep`` accepts, and the methods that never get there."""
    if not t.has("sample_complexity"):
        return []
    sc = t.table("sample_complexity")
    target = _verdict_target(t)
    sc = sc[((sc["target_accuracy"] - target).abs() < 1e-9) & (sc["downstream"] == "transfer")]
    if "role" in sc:
        sc = sc[sc["role"] == "task"]
    lines = []
    for run, g in sc.groupby("run", sort=False):
        if not keep(run):
            continue
        g = g.assign(sort=g["n_needed"].astype(float)).sort_values("sort")
        got = [f"{r['method']} {count(r['n_needed'])}" for _, r in g.iterrows() if math.isfinite(r["sort"])]
        miss = [r["method"] for _, r in g.iterrows() if not math.isfinite(r["sort"])]
        lines += fold(f"n for {target:.0%}, {run}: ", got or ["no method"])
        if miss:
            lines += fold("  not reached on the grid: ", miss)
    return lines
