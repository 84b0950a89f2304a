#!/usr/bin/env python
"""Count the places a setting's default is written outside the schema, at git revisions:

    python benchmarks/count_defaults.py d2e0e94 HEAD

(a) a config or spec value read with a literal fallback, ``.get("<key>", <literal>)``, in src/ (not
    analysis/, figures/, io/report.py) and the rules; reads of what is no config or spec are not
    counted: snakemake's wildcards, a table row (``r``), the estimate and calibration JSON files
    (``estimate``, ``cal``), a transfer method's own settings (``hp``: (c) is their count) and a
    private flag (a key starting with ``_``); (b) a literal default of a spec dataclass field
    (config/specs.py, transfer/spec.py); (c) a transfer method's hyperparameter defaults copied outside
    its own definition (costs/). The schema's own defaults are not counted: it is their one home.
"""

from __future__ import annotations

import re
import subprocess
import sys

GET = re.compile(r'(\w*)\.get\("([a-z_]+)", (?:"[^"]*"|[0-9.e-]+|True|False)\)')
NOT_CONFIG = ("wildcards", "r", "estimate", "cal", "hp")  # receivers that hold no config or spec
FIELD = re.compile(r'(?m)^    [a-z_]+: [^=\n]+ = ("|[0-9]|True|False|None\b|\()')
COPY = re.compile(r"(?m)^(DEFAULT_FIT|_NET) = ")
SPECS = ("src/groupsparse/config/specs.py", "src/groupsparse/transfer/spec.py")


def count(rev: str) -> tuple[int, int, int]:
    names = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", rev, "src", "workflow/rules", "Snakefile"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    a = b = c = 0
    for name in names:
        if not name.endswith((".py", ".smk")) and name != "Snakefile":
            continue
        text = subprocess.run(["git", "show", f"{rev}:{name}"], capture_output=True, text=True, check=True).stdout
        if not re.search(r"/(analysis|figures)/|io/report", name):
            a += sum(1 for who, key in GET.findall(text) if who not in NOT_CONFIG and not key.startswith("_"))
        b += len(FIELD.findall(text)) if name in SPECS else 0
        c += len(COPY.findall(text)) if name.startswith("src/groupsparse/costs/") else 0
    return a, b, c


if __name__ == "__main__":
    for rev in sys.argv[1:] or ["HEAD"]:
        a, b, c = count(rev)
        print(
            f"{rev}: (a) .get with a literal default {a}, (b) literal spec-field defaults {b}, "
            f"(c) copied method defaults {c}; total {a + b + c}"
        )
