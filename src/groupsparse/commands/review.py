"""`groupsparse review results/<study>`: a finished study's answers, read from its tables.

By default one screen (at most SCREEN lines): per question of the README, its answer with the
claims' verdicts and power (groupsparse.findings, one module per question), then the claims'
verdict counts and what went wrong: runs that diverged, fits that failed, hyperparameters chosen
at the edge of their grid. `--all` prints the full tables instead, one row per answer: the n needed
for the target accuracy (90% by default) of every run (sample_complexity.parquet), every claim
with its power (claims.parquet; n/a where the table has no `power` column), every problem
(pretrain_summary.parquet, summary.parquet, transfer.parquet); `--csv` writes them as CSV. The
workflow's `review` rule writes the summary as the HTML report's front page (:func:`front_page`).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

SCREEN = 50  # lines of the default summary: one terminal screen
COLUMNS = ("question", "run", "downstream", "what", "answer", "detail")  # what: the method, or the claim


def register(sub) -> None:
    from ._args import InputFile, InputFolder, Number, OutputFile

    FRACTION = Number(float, 0, 1, exclusive_minimum=True, exclusive_maximum=True)
    p = sub.add_parser("review", help="a study's answers on one screen: per README question, verdicts, what failed")
    p.add_argument(
        "results",
        type=InputFolder(),
        help="a study's results folder, e.g. results/default (or a docs page: docs/results)",
    )
    p.add_argument("--target", type=FRACTION, default=0.9, help="accuracy target for the n needed (default 0.9)")
    p.add_argument("--all", action="store_true", help="the full tables: every run's n, every claim, every problem")
    p.add_argument("--csv", action="store_true", help="the full tables as CSV")
    p.add_argument(
        "--out", type=OutputFile(), default=None, help="write to this file (atomically) instead of the terminal"
    )
    p.add_argument(
        "--intro",
        type=InputFile(),
        default=None,
        help="a reStructuredText file: write it, then the summary as a section (the HTML report's front page)",
    )
    p.set_defaults(func=run)


def _table(tables: Path, name: str):
    from ..io import files as io

    path = tables / f"{name}.parquet"
    return io.read_parquet(path) if path.is_file() else None


def _n(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return "beyond the grid" if math.isinf(value) else f"{value:.0f}"


def sample_complexity_rows(sc, target: float, all_runs: bool = False) -> list[dict]:
    """Per (run, downstream, method): n needed for ``target``; the named tasks only unless
    ``all_runs`` (scaling points and ablations are summarised by the claims)."""
    if sc is None:
        return []
    rows = []
    hit = sc[(sc["target_accuracy"] - target).abs() < 1e-9]
    if not all_runs and "role" in hit:
        hit = hit[hit["role"] == "task"]
    for r in hit.itertuples(index=False):
        reached = bool(r.reached_on_grid)
        answer = _n(r.n_needed) if reached else f"not reached by n = {r.max_n_on_grid:.0f}"
        rows.append(
            {
                "question": f"n for {target:.0%}",
                "run": r.run,
                "downstream": getattr(r, "downstream", ""),
                "what": r.method,
                "answer": answer,
                "detail": f"95% interval {_n(r.ci_low)} to {_n(r.ci_high)}, {r.n_seeds} seeds" if reached else "",
            }
        )
    return sorted(rows, key=lambda r: (r["run"], str(r["downstream"]), _sort_n(r["answer"]), r["what"]))


def _sort_n(answer: str) -> float:
    try:
        return float(answer)
    except ValueError:
        return math.inf


def claim_rows(claims) -> list[dict]:
    if claims is None:
        return []
    has_power = "power" in claims.columns
    rows = []
    for r in claims.to_dict("records"):
        power = r.get("power") if has_power else None
        power_text = "n/a" if power is None or (isinstance(power, float) and math.isnan(power)) else f"{power:.2f}"
        rows.append(
            {
                "question": "claim",
                "run": r.get("run", "") or "",
                "downstream": "",
                "what": r["claim"],
                "answer": r["verdict"],
                "detail": f"power {power_text}; measured {r['measured']:.4g} [{r['low']:.4g}, {r['high']:.4g}]",
            }
        )
    return rows


def problem_rows(pretrain, summary, transfer) -> list[dict]:
    rows = []
    if pretrain is not None:
        for r in pretrain[pretrain["n_seeds_diverged"] > 0].to_dict("records"):
            total = r["n_seeds_ok"] + r["n_seeds_diverged"]
            rows.append(_problem("diverged", r["run"], "", "pretraining", f"{r['n_seeds_diverged']} of {total} seeds"))
    if summary is not None and "n_seeds_not_ok" in summary:
        bad = summary[summary["n_seeds_not_ok"] > 0]
        for (run, method), g in bad.groupby(["run", "method"], sort=True):
            statuses = ",".join(sorted({s for x in g["statuses_not_ok"] for s in str(x).split(",") if s}))
            rows.append(_problem("fit not ok", run, "", method, f"{statuses} at n = {_sizes(g['n'])}"))
    if transfer is not None and "hp_at_edge" in transfer:
        at_edge = transfer["hp_at_edge"].astype("boolean").fillna(False).astype(bool)
        for (run, method), g in transfer.assign(at_edge=at_edge).groupby(["run", "method"], sort=True):
            edge = g[g["at_edge"]]
            if len(edge):
                detail = f"{len(edge)} of {len(g)} fits, at n = {_sizes(edge['n'])}"
                rows.append(_problem("hp at grid edge", run, "", method, detail))
    return rows


def _sizes(ns) -> str:
    return ",".join(str(int(n)) for n in sorted(set(ns)))


def _problem(question, run, downstream, method, detail) -> dict:
    return {
        "question": question,
        "run": run,
        "downstream": downstream,
        "what": method,
        "answer": "yes",
        "detail": detail,
    }


def review(results: str | Path, target: float = 0.9, all_runs: bool = False):
    """The review as one DataFrame with COLUMNS."""
    import pandas as pd

    from ..io.files import InputError

    tables = Path(results) / "tables"
    if not tables.is_dir():
        raise InputError(f"{tables}: no tables yet (run the study first: snakemake --configfile <its config>)")
    rows = (
        sample_complexity_rows(_table(tables, "sample_complexity"), target, all_runs)
        + claim_rows(_table(tables, "claims"))
        + problem_rows(_table(tables, "pretrain_summary"), _table(tables, "summary"), _table(tables, "transfer"))
    )
    return pd.DataFrame(rows, columns=list(COLUMNS))


def left_aligned(df) -> str:
    """Columns padded to their widest cell, left-aligned (claims are sentences; pandas right-aligns)."""
    cells = [list(df.columns)] + [[str(v) for v in row] for row in df.itertuples(index=False)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(df.columns))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def full_text(df) -> str:
    """The full tables, one block per question, aligned."""
    if df.empty:
        return "no sample-complexity, claims or pretraining tables to review"
    out = []
    for question, g in df.groupby("question", sort=False):
        out.append(f"\n== {question} ==")
        shown = g.drop(columns="question")
        for column in ("downstream", "run"):
            if (shown[column].astype(str) == "").all():
                shown = shown.drop(columns=column)
        out.append(left_aligned(shown))
    if not any(q in set(df["question"]) for q in ("diverged", "fit not ok", "hp at grid edge")):
        out.append("\nno run diverged, no fit failed, no hyperparameter at a grid edge")
    return "\n".join(out)


def summary_lines(results: str | Path, target: float = 0.9, limit: int = SCREEN) -> list[str]:
    """The one-screen review: per README question the answers this study's tables give (the findings'
    templates, groupsparse.findings.render), the samples each task run's methods need, the claims'
    verdicts, what went wrong; trimmed to ``limit`` lines (the longest blocks first)."""
    from ..findings.render import one_study, render
    from ..findings.tables import fold, n_lines, of_results
    from ..io.files import InputError

    tables = of_results(results)
    if not tables.folder.is_dir():
        raise InputError(f"{tables.folder}: no tables yet (run the study first: snakemake --configfile <its config>)")
    text = render("review.j2", one_study(tables), at=str)
    blocks = []
    for block in [b for b in text.strip().split("\n\n") if b.strip()]:
        head, *lines = block.splitlines()
        blocks.append([head, *(w for line in lines for w in textwrap.wrap("  " + line, 110, subsequent_indent="    "))])
    ran = n_lines(tables, lambda run: True)
    if ran:
        blocks.append(["samples needed per task run:", *("  " + line for line in ran)])
    claims = tables.table("claims") if tables.has("claims") else None
    if claims is not None and len(claims):
        counts = claims["verdict"].value_counts()
        blocks.append(fold(f"claims: {len(claims)}: ", [f"{n} {v}" for v, n in counts.items()]))
    blocks.append(problem_summary(problem_rows(*(_table(tables.folder, n) for n in PROBLEM_TABLES))))
    head = f"review of {results} (per question of the README; the full tables: --all or --csv)"
    return [head, *_trimmed([b for b in blocks if b], limit - 1)]


PROBLEM_TABLES = ("pretrain_summary", "summary", "transfer")


def problem_summary(rows: list[dict]) -> list[str]:
    """What went wrong, one line per kind (the runs and methods named, counted)."""
    if not rows:
        return ["problems: no run diverged, no fit failed, no hyperparameter at a grid edge"]
    from ..findings.tables import fold

    lines = ["problems:"]
    for kind in ("diverged", "fit not ok", "hp at grid edge"):
        found = [r for r in rows if r["question"] == kind]
        if found:
            named = [f"{r['run']} {r['what']}: {r['detail']}" for r in found[:4]]
            more = [f"and {len(found) - 4} more"] if len(found) > 4 else []
            lines += fold(f"  {kind} ({len(found)}): ", named + more, sep="; ")
    return lines


def _trimmed(blocks: list[list[str]], limit: int) -> list[str]:
    """The blocks' lines, the longest block cut (with a line saying so) until all fit in ``limit``."""
    blocks = [list(b) for b in blocks]
    while sum(map(len, blocks)) > limit:
        longest = max(blocks, key=len)
        if len(longest) <= 2:
            break
        cut = longest[:-2] if not longest[-1].endswith("(--all)") else longest[:-3]
        blocks[blocks.index(longest)] = cut + ["  ... (the rest: --all)"]
    return [line for b in blocks for line in b][:limit]


# The report's landing view centres its content in a full-height box (blank above a short page, the top cut
# off a tall one) and keeps the description to a narrow column: the front page sets it to start at the top
# and use the window's width.
FRONT_STYLE = """.. raw:: html

   <style>
   .h-screen.overflow-auto.items-center { align-items: flex-start; justify-content: flex-start; }
   .prose.max-w-lg { max-width: min(110ch, 100%); }
   </style>
"""


def front_page(intro: str, summary: str) -> str:
    """The HTML report's front page (reStructuredText): the study's description, then this run's summary as
    line blocks, which keep the summary's lines and wrap them to the window (a literal block cut them)."""
    lines = [f"| {line.rstrip()}" if line.strip() else "|" for line in summary.splitlines()]
    return intro.rstrip() + "\n\nThis run\n--------\n\n" + "\n".join(lines) + "\n\n" + FRONT_STYLE


def check_tables_readable(results: str | Path) -> None:
    """Every table the review may read (results/<study>/tables/, or a docs folder's tables) opens: a corrupt
    one is refused naming the file and what is wrong with it, before any is read."""
    import pandas as pd
    import pyarrow.parquet as pq

    from ..io.files import InputError

    results = Path(results)
    folders = [results / "tables" if (results / "tables").is_dir() else results]
    for path in sorted(p for folder in folders for p in folder.iterdir() if p.suffix in (".csv", ".parquet")):
        try:
            if path.suffix == ".parquet":
                pq.read_schema(path)
            else:
                pd.read_csv(path, nrows=100_000)
        except Exception as exc:  # noqa: BLE001  (pandas and pyarrow raise many types for a corrupt file)
            what = " ".join(str(exc).split())[:200]
            raise InputError(
                f"{path}: not a readable {path.suffix[1:].upper()} table ({type(exc).__name__}: {what}); "
                "delete it and rerun the rule that makes it"
            ) from None


def run(args) -> int:
    import sys

    from ..io.files import write_text_atomic

    check_tables_readable(args.results)
    if args.csv or args.all:
        df = review(args.results, args.target, all_runs=True)
        text = df.to_csv(index=False) if args.csv else full_text(df) + "\n"
    else:
        text = "\n".join(summary_lines(args.results, args.target)) + "\n"
    if args.intro:
        text = front_page(Path(args.intro).read_text(), text)
    if args.out:
        write_text_atomic(args.out, text)
    else:
        sys.stdout.write(text)
    return 0
