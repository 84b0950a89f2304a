"""docs/results.md: a finished run's tables and claims as Markdown, and its main figures in docs/results/.

Which runs are shown comes from the tables' ``role`` column (task runs; scaling points and
ablations appear in the claims table), never from run names.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

from . import files as io
from . import tables

RUN_FIGURES = (*tables.RUN_FIGURES, tables.TRANSFER_FIGURE)
IMAGE_RUN_FIGURES = (*tables.IMAGE_FIGURES, tables.TRANSFER_FIGURE)
SCALING_FIGURES = tables.SCALING_FIGURES


def _fmt(x, digits=3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c) if not isinstance(c, str) else c for c in r) + " |" for r in rows]
    return "\n".join(lines)


def task_runs(tables: Path) -> list[str]:
    """The study's named tasks (role task; scaling points and ablations are in the claims table), in table order."""
    ps = io.read_parquet(tables / "pretrain_summary.parquet")
    return list(ps.loc[ps["role"] == "task", "run"])


def run_provenance(results: Path) -> dict:
    """A study's results/<study>/provenance.json (its config, specs, commit, CPU); {} before its first run."""
    path = Path(results) / "provenance.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def names_a_placeholder_task(study: dict) -> bool:
    """Whether a study's named tasks are placeholders: it scales and transfers nothing, and names a task only
    because the schema needs one (trained briefly, no result of the study; figures.runs.placeholder)."""
    scaling, transfer = study.get("scaling") or {}, study.get("transfer") or {}
    return bool(scaling.get("enabled")) and not transfer.get("enabled", True)


def main_figures(results: Path, tables: Path) -> list[tuple[str, str]]:
    """(folder, figure) pairs shown in the README: each task run's figures (an image run's image figures
    instead of its curves), then the scaling figures, those that exist."""
    pairs = []
    placeholders = names_a_placeholder_task(run_provenance(results).get("study") or {})
    for run in [] if placeholders else task_runs(tables):
        folder = results / "figures" / run
        names = IMAGE_RUN_FIGURES if (folder / "image_attention.png").exists() else RUN_FIGURES
        pairs += [(run, name) for name in names]
    pairs += [("scaling", name) for name in SCALING_FIGURES]
    return [(sub, name) for sub, name in pairs if (results / "figures" / sub / f"{name}.png").exists()]


def pretrain_section(tables: Path) -> str:
    ps = io.read_parquet(tables / "pretrain_summary.parquet")
    ps = ps[ps["role"] == "task"]
    rows = []
    for _, r in ps.iterrows():
        rows.append(
            [
                r["run"],
                f"{r['d']}",
                f"{r['D']}",
                f"{r['n_seeds_ok']}/{r['n_seeds_ok'] + r['n_seeds_diverged']}",
                f"{r['attention_on_relevant_mean']:.3f} "
                f"[{r['attention_on_relevant_ci_low']:.3f}, {r['attention_on_relevant_ci_high']:.3f}]",
                _fmt(float(r["cos_v1_vstar_mean"]), 4),
                _fmt(float(r["v2_norm_mean"]), 3),
                f"{r['eval_loss_mean']:.4f}",
                f"{r['eval_accuracy_mean']:.3f}",
                f"{r['wall_seconds']:.0f}",
            ]
        )
    return _table(
        [
            "run",
            "d",
            "D",
            "seeds ok",
            "attention on j* [95% CI]",
            "cos(v1, v*)",
            "abs(v2)",
            "eval loss",
            "eval accuracy",
            "job wall s",
        ],
        rows,
    )


def transfer_section(tables: Path, run: str) -> str:
    s = io.read_parquet(tables / "summary.parquet")
    s = s[(s["run"] == run)]
    out = []
    for down in ("transfer", "negative_control"):
        t = s[s["downstream"] == down]
        if t.empty:
            continue
        sizes = sorted(t["n"].unique())
        rows = []
        for method, g in t.groupby("method", sort=False):
            g = g.set_index("n")
            rows.append(
                [method]
                + [
                    f"{g.loc[n, 'mean_test_accuracy']:.3f} [{g.loc[n, 'ci_low']:.2f}, {g.loc[n, 'ci_high']:.2f}]"
                    if n in g.index
                    else "–"
                    for n in sizes
                ]
            )
        out.append(
            f"*{run}, downstream {down.replace('_', ' ')}: mean test accuracy over seeds [95% t interval]*\n\n"
            + _table(["method"] + [f"n={n}" for n in sizes], rows)
        )
    sc = io.read_parquet(tables / "sample_complexity.parquet")
    sc = sc[(sc["run"] == run) & (sc["downstream"] == "transfer")]
    if len(sc):
        rows = []
        for method, g in sc.groupby("method", sort=False):
            g = g.set_index("target_accuracy")
            rows.append([method, _n_cell(g, 0.9), _n_cell(g, 0.95)])
        out.append(
            f"*{run}: samples needed for 90% and 95% test accuracy (interpolated in log n; "
            "'> grid' = not reached by the largest n) [95% t interval]*\n\n"
            + _table(["method", "n for 90%", "n for 95%"], rows)
        )
    return "\n\n".join(out)


def _n_count(x) -> str:
    return "> grid" if isinstance(x, float) and math.isinf(x) else _fmt(x, 0)


def _n_cell(g, target: float) -> str:
    """'n [low, high]' of one method's samples needed for ``target`` ('–' if not computed)."""
    if target not in g.index:
        return "–"
    r = g.loc[target]
    return f"{_n_count(r['n_needed'])} [{_n_count(r['ci_low'])}, {_n_count(r['ci_high'])}]"


def grid_section(tables: Path, target: float = 0.9) -> str:
    """The (d, D) grid: n* at ``target`` per method and grid point, then the joint fits n* ~ d^a D^b."""
    sc_path, fits_path = tables / "sample_complexity.parquet", tables / "scaling_fits.parquet"
    if not sc_path.exists() or not fits_path.exists():
        return ""
    sc = io.read_parquet(sc_path)
    sc = sc[(sc["role"] == "scaling") & (sc["downstream"] == "transfer") & (sc["target_accuracy"] == target)]
    if sc.empty:
        return ""
    points = sc[["d", "D"]].drop_duplicates().sort_values(["d", "D"]).to_numpy().tolist()
    rows = []
    for method, g in sc.groupby("method", sort=False):
        cells = {(d, D): h.set_index("target_accuracy") for (d, D), h in g.groupby(["d", "D"])}
        rows.append([method] + [_n_cell(cells[p], target) if p in cells else "–" for p in map(tuple, points)])
    out = [
        f"*Scaling grid: samples needed for {target:.0%} test accuracy per (d, D) (seed-mean curve, n up to "
        f"{sc['max_n_on_grid'].max():.0f}; '> grid' = not reached) [95% interval]*\n\n"
        + _table(["method"] + [f"d={d}, D={D}" for d, D in points], rows)
    ]
    fits = io.read_parquet(fits_path)
    if "coefficient" in fits:
        joint = fits[(fits["analysis"] == "sample_complexity") & (fits["threshold"] == target)]
        rows = []
        for (method, form), g in joint.groupby(["method", "law"], sort=False):
            g = g.set_index("coefficient")
            cell = lambda k, g=g: f"{g.loc[k, 'slope']:.2f} [{g.loc[k, 'low']:.2f}, {g.loc[k, 'high']:.2f}]"
            bound = g.loc["a + b", "one_sided_low"]
            rows.append(
                [
                    method,
                    form,
                    cell("log d"),
                    cell("log D"),
                    cell("a + b"),
                    _fmt(float(bound), 2),
                    g["blocker"].iloc[0] or "–",
                ]
            )
        out.append(
            f"*Joint fit log n\\* = c + a log d + b log D at {target:.0%} (n\\*/log^2 n\\*: the bound's own form); "
            "d + D has a + b = 1, d D has a = b = 1 [95% interval; one-sided 95% lower bound of a + b]*\n\n"
            + _table(["method", "y", "a (d)", "b (D)", "a + b", "a + b >=", "cannot decide because"], rows)
        )
    return "\n\n".join(out)


def claims_section(tables: Path) -> str:
    path = tables / "claims.parquet"
    if not path.exists():
        return ""
    c = io.read_parquet(path)
    shown = ("claim", "prediction", "measured", "low", "high", "verdict", "power", "power_plugin", "power_pipeline")
    cols = [k for k in (*shown, "alternative") if k in c]  # the plug-in beside the simulated pipeline
    rows = [[str(r[k]) if isinstance(r[k], str) else r[k] for k in cols] for _, r in c.iterrows()]
    return _table(cols, rows)


def predictions_section(tables: Path) -> str:
    """The out-of-sample predictions (fitted on D <= fit_D_max alone), as the predict rule wrote them."""
    path = tables / "predictions.parquet"
    if not path.exists():
        return ""
    p = io.read_parquet(path)
    cols = [
        k
        for k in ("d", "kappa", "law", "D", "step", "rest", "rest_low", "rest_high", "lack_of_fit_p", "batch")
        if k in p
    ]
    return _table(cols, [[r[k] for k in cols] for _, r in p.iterrows()]) if cols else ""


def settings_section(results: Path) -> str:
    """The settings the numbers above were made with, read from the run's provenance (its config with
    the schema's defaults filled in), so that no page types them by hand."""
    prov = run_provenance(results)
    if not prov:
        return ""
    study, specs = prov.get("study") or {}, prov.get("run_specs") or {}
    rows = []
    for name, entry in (study.get("tasks") or {}).items():
        pre = (specs.get(name) or {}).get("pretrain") or {}
        tr = {**(study.get("transfer") or {}), **((entry or {}).get("transfer") or {})}
        rows.append(
            [
                name,
                pre.get("steps", ""),
                pre.get("batch", ""),
                (specs.get(name) or {}).get("dtype", ""),
                tr.get("test_size", "") if tr.get("enabled", True) else "transfer off",
                tr.get("selection", "") if tr.get("enabled", True) else "",
                ", ".join(map(str, tr.get("sizes") or [])) if tr.get("enabled", True) else "",
            ]
        )
    seeds = (study.get("pretrain") or {}).get("seeds", "")
    text = _table(["task", "steps", "batch", "dtype", "transfer test_size", "tuning rule", "n"], rows) if rows else ""
    return (
        f"Study `{study.get('study_name')}`, study seed {study.get('study_seed')}, {seeds} seeds per task, "
        f"device {study.get('device')}. Intervals: a t interval over seeds for a mean (clipped to a "
        "bounded metric's range); a bootstrap-t interval (seeds resampled within levels) for a fitted "
        "slope, plane or crossing n*; prediction intervals for the out-of-sample test "
        "(docs/STUDY.md section 7).\n\n" + text
    )


def overhead_section(results: Path, wall: float | None, cores: int, benchmarks: set[Path] | None = None) -> str:
    """The study's jobs' benchmarks summed: with ``benchmarks`` (the last run's jobs' files, resolved, from jobs.json:
    study.jobstate.study_benchmarks), those only, so that a job run in the folder for another config (a check
    run ahead of its level) is not counted here; without, every file under benchmarks/. jobs.json is rewritten
    by each run: a snapshot taken after another config's run in the folder counts that run's jobs."""
    import pandas as pd

    rows, others = [], 0
    for tsv in sorted((results / "benchmarks").rglob("*.tsv")):
        if benchmarks is not None and tsv.resolve() not in benchmarks:
            others += 1
            continue
        b = pd.read_csv(tsv, sep="\t")
        rows.append(
            {
                "job": str(tsv.relative_to(results / "benchmarks")),
                "s": float(b["s"].iloc[0]),
                "max_rss": float(b["max_rss"].iloc[0]) if str(b["max_rss"].iloc[0]) != "-" else float("nan"),
            }
        )
    if not rows:
        return f"no job of the study has finished yet ({others} other benchmark file(s) in the folder)."
    df = pd.DataFrame(rows)
    total = df["s"].sum()
    big = df.loc[df["max_rss"].idxmax()] if df["max_rss"].notna().any() else None
    text = f"{len(df)} jobs; sum of job wall times {total:.0f} s (ideal on {cores} cores: {total / cores:.0f} s)"
    if wall:
        text += f"; snakemake wall time {wall:.0f} s, i.e. {wall / (total / cores):.2f}x the ideal"
    if big is not None:
        text += f"; largest peak memory {big['max_rss']:.0f} MB ({big['job']})"
    if others:
        text += f" (not counted: {others} benchmark file(s) of jobs outside the last run's config, jobs.json)"
    return text + "."


def results_commit_problem(results) -> str | None:
    """None if ``results`` was computed by a clean checkout at the current HEAD, else why not: the
    README's numbers must come from the code that is committed with them."""
    path = Path(results) / "provenance.json"
    if not path.is_file():
        return f"{path}: no provenance (run the study first)"
    made_by = json.loads(path.read_text()).get("git_commit", "unknown")
    head = io.git_commit()
    if made_by.endswith("+dirty"):
        return f"{results} was computed from uncommitted changes (commit {made_by})"
    if head.endswith("+dirty"):
        return f"the checkout has uncommitted changes ({head})"
    if made_by != head:
        return f"{results} was computed at commit {made_by}, but HEAD is {head}"
    return None


def write_snapshot(
    results: Path,
    docs: Path,
    out: Path,
    wall_seconds: float | None,
    cores: int,
    answers: str = "",
    benchmarks: set[Path] | None = None,
) -> int:
    """Copy the main figures to ``docs`` and write the results and claims as ``out`` (docs/results.md),
    a whole generated file, opening on ``answers`` (the questions this study answers, worded by the
    findings' templates) and its run time summed over ``benchmarks`` (see overhead_section); returns the
    figure count."""
    results, docs, out = Path(results), Path(docs), Path(out)
    tables = results / "tables"
    docs.mkdir(parents=True, exist_ok=True)
    figs = []
    for sub, name in main_figures(results, tables):
        dst = docs / f"{sub}_{name}.png"
        shutil.copyfile(results / "figures" / sub / f"{name}.png", dst)
        figs.append((sub, name, dst))
    # the folder's figures are this snapshot's own: one an earlier snapshot wrote and this study no longer
    # makes (a figure of a section now disabled) would stay beside the page, linked from nowhere
    for stale in set(docs.glob("*.png")) - {dst for *_, dst in figs}:
        stale.unlink()
    parts = [
        f"# Results of the study in {results}",
        "",
        f"<!-- generated by `groupsparse snapshot --results {results}`: edits here are overwritten -->",
        "",
        f"Measured by `snakemake --cores {cores}` (CPU); regenerate this file and its figures with "
        "`groupsparse snapshot --wall-seconds <wall time of the run>`. A reviewer's summary of the same "
        f"tables: `groupsparse review {results}`.",
        "",
        "**Run time.** " + overhead_section(results, wall_seconds, cores, benchmarks),
        "",
    ]
    if answers.strip():
        parts += ["## What this study answers", "", answers.strip(), ""]
    parts += [
        "## Settings (from the run's provenance)",
        "",
        settings_section(results),
        "",
        "## Pretraining (final step, mean over seeds)",
        "",
        pretrain_section(tables),
        "",
    ]
    if (tables / "summary.parquet").exists():
        for run_name in task_runs(tables):
            section = transfer_section(tables, run_name)
            if section:
                parts += [f"## Transfer: {run_name}", "", section, ""]
    grid = grid_section(tables)
    if grid:
        parts += ["## Sample complexity over the (d, D) grid", "", grid, ""]
    preds = predictions_section(tables)
    if preds:
        parts += ["## Out-of-sample predictions (fitted on the small-D runs alone)", "", preds, ""]
    claims = claims_section(tables)
    if claims:
        parts += ["## Claims (verdicts by the rule in `groupsparse.analysis.stats`)", "", claims, ""]
    parts += ["## Figures", ""]
    out_dir = out.resolve().parent
    for sub, name, path in figs:
        rel = Path(os.path.relpath(path.resolve(), out_dir))
        parts += [f"**{sub}: {name.replace('_', ' ')}**", "", f"![{sub} {name}]({rel.as_posix()})", ""]
    prov = run_provenance(results)
    if prov:
        cpu = prov.get("cpu") or {}
        parts += [
            f"Provenance: config hash `{prov.get('config_hash')}`, git commit `{prov.get('git_commit')}`, "
            f"torch {prov.get('versions', {}).get('torch')}, host `{prov.get('host')}`, CPU `{cpu.get('model')}` "
            f"({', '.join(cpu.get('isa') or []) or 'instruction set unknown'}).",
            "",
        ]
    io.write_text_atomic(out, "\n".join(parts))
    return len(figs)


def end_line(
    results: str | Path, snakemake_log, rerun: str, interrupted: bool | None = None, finished: int | None = None
) -> str:
    """The one line a stopped run ends with: interrupted or failed, what finished, how to resume.
    ``interrupted``: whether a signal stopped the run (None: read from the log); ``finished``: the jobs
    whose outputs are complete (None: the benchmark files, which snakemake writes when a job ends)."""
    results = Path(results)
    if finished is None:
        finished = len(list((results / "benchmarks").rglob("*.tsv"))) if (results / "benchmarks").is_dir() else 0
    logs = snakemake_log if isinstance(snakemake_log, list | tuple) else [snakemake_log]  # snakemake gives a list
    text = "".join(Path(p).read_text(errors="replace") for p in logs if p and Path(p).is_file())
    if interrupted is None:
        interrupted = "on user request" in text or "exit status 130" in text or "exit status -2" in text
    kept = f"{finished} finished jobs of {results} are kept"
    if interrupted:
        return f"interrupted: {kept}; run `{rerun}` again to resume (pretraining continues from its saved state)"
    return (
        f"failed: {kept}; the error is above (`groupsparse status {results}` lists failed jobs); "
        f"fix it and run `{rerun}` again to continue"
    )
