"""`groupsparse review results/<study>`: a finished study's answers, read from its tables.

Three questions a reviewer asks, one row per answer: which methods reach the target accuracy
(90% by default) at which n (sample_complexity.parquet), which claims hold and with what power
(claims.parquet; power n/a when the table has no `power` column), and which runs diverged, had
failed fits, or picked a hyperparameter at the edge of its grid (pretrain_summary.parquet,
summary.parquet, transfer.parquet). As a terminal table, or `--csv` for a spreadsheet.
"""

from __future__ import annotations

import math
from pathlib import Path

COLUMNS = ("question", "run", "downstream", "what", "answer", "detail")  # what: the method, or the claim


def register(sub) -> None:
    p = sub.add_parser("review", help="which methods reach 90% at which n, which claims hold, what went wrong")
    p.add_argument("results", help="a study's results folder, e.g. results/default")
    p.add_argument("--target", type=float, default=0.9, help="accuracy target for the n needed (default 0.9)")
    p.add_argument("--csv", action="store_true", help="write CSV to stdout instead of a terminal table")
    p.add_argument("--all", action="store_true", help="n for the target of every run (default: the named tasks)")
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


def run(args) -> int:
    import sys

    df = review(args.results, args.target, args.all)
    if args.csv:
        df.to_csv(sys.stdout, index=False)
        return 0
    if df.empty:
        print(f"{args.results}: no sample-complexity, claims or pretraining tables to review")
        return 0
    for question, g in df.groupby("question", sort=False):
        print(f"\n== {question} ==")
        shown = g.drop(columns="question")
        if (shown["downstream"].astype(str) == "").all():
            shown = shown.drop(columns="downstream")
        if (shown["run"].astype(str) == "").all():
            shown = shown.drop(columns="run")
        print(left_aligned(shown))
    if not any(q in set(df["question"]) for q in ("diverged", "fit not ok", "hp at grid edge")):
        print("\nno run diverged, no fit failed, no hyperparameter at a grid edge")
    return 0
