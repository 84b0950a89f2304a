"""What the population-flow study adds to the law test (docs/STUDY.md section 3.4): the mechanism, the
time units, and the flow against population gradient descent where both ran.

* **Mechanism.** On the subspace a query j != j* scores key j* above another key i by the orbit values'
  difference sq - oo in expectation (the data terms average to 0), and query j* scores itself above a
  key i by ss - qs + (d - 1) beta + alpha; 1 - S[j*, j] is about (D - 1) exp(-gap) once attention has
  formed. If the gap grows like log tau, r falls as a power of tau, and the flow time to r <= exp(-c D)
  grows exponentially in D. Per run and seed, over the last ``LATE_OCTAVES`` octaves of its flow time:
  the gap's slope on log tau (b_gap), -log r's (b_r), and the exponent p of the gap's local slope in tau
  (the slope of log(d gap / d log tau) on log tau: 0 for log growth, q for a gap growing like tau^q,
  negative where it saturates). Claims: p = 0 within ``gap_growth_tolerance`` (log growth), and
  b_r - b_gap = 0 within it (r follows exp(-gap)).
* **Time units.** The flow time to each target beside gradient descent's steps to it at eta(D) (tau /
  eta(D)) and at the theorem's fixed eta = 0.5 (tau / 0.5): "T* = Theta(D^3)" in steps at a fixed eta
  is a flow time of order D^3; at a stable eta(D) = 6 / D it is D^4 / 6 steps.
* **Against gradient descent.** ``scaling.analysis.reference_by_D``: committed by-D tables of the
  population gradient-descent runs; per D both ran, r at each kappa and the flow time to each target:
  the flow's geometric mean with its interval beside gradient descent's, inside its interval or not (a
  difference is gradient descent's discretisation at eta(D) plus both runs' noise).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from ..io import files as io
from .rows import claim_row
from .scaling_laws import MIN_ATTENTION, grid_rows
from .settings import Settings
from .statements import About
from .stats import Prediction, mean_interval

LATE_OCTAVES = 4  # the mechanism's window: the last four octaves of a run's flow time, [T / 16, T]
FIXED_ETA = 0.5  # the theorem's (and the paper's) fixed step size
BY_D_QUANTITIES = {
    "gap_other": "score gap of key j* over another key, query j != j*, at flow time {kappa:g} D^3",
    "gap_own": "score gap of key j* over another key, query j*, at flow time {kappa:g} D^3",
    "b_gap": "slope of the score gap (query j != j*) on log flow time over the last 4 octaves",
    "b_r": "slope of -log(1 - min attention) on log flow time over the last 4 octaves",
    "p_gap": "exponent p of the score gap's growth (0: like log tau) over the last 4 octaves",
    "steps_eta_D": "gradient-descent steps at eta(D) until min attention >= 1 - exp(-{c:g} D)",
    "steps_eta_fixed": "gradient-descent steps at eta = 0.5 until min attention >= 1 - exp(-{c:g} D)",
}


def flow_runs(traj: pd.DataFrame) -> pd.DataFrame:
    """The flow grid's rows (algorithm flow, variant ''), in flow-time order per seed."""
    if "algorithm" not in traj.columns:
        return traj.iloc[:0]
    g = grid_rows(traj[(traj["algorithm"] == "flow") & (traj["role"] == "scaling")])
    return g.sort_values(["run", "seed", "flow_time"], kind="stable")


def gaps(rows: pd.DataFrame) -> pd.DataFrame:
    """The expected score gaps of a run's records from the subspace's coefficients (pop_*)."""
    d = rows["d"].to_numpy(float)
    other = rows["pop_pos_sq"] - rows["pop_pos_oo"]
    own = rows["pop_pos_ss"] - rows["pop_pos_qs"] + (d - 1) * rows["pop_wff_across"] + rows["pop_wff_along"]
    return rows.assign(gap_other=other, gap_own=own)


def late_rates(seed_rows: pd.DataFrame) -> dict[str, float]:
    """One seed's b_gap, b_r and p over the last LATE_OCTAVES octaves of its grid records."""
    g = gaps(seed_rows[seed_rows["record"] != "crossing"]) if "record" in seed_rows else gaps(seed_rows)
    tau = g["flow_time"].to_numpy(float)
    T = tau.max()
    late = (tau >= T / 2**LATE_OCTAVES) & (tau > 0)
    x = np.log(tau[late])
    gap = g["gap_other"].to_numpy(float)[late]
    rest = 1 - g[MIN_ATTENTION].to_numpy(float)[late]
    if x.size < 4 or not np.all(rest > 0):
        return {"b_gap": math.nan, "b_r": math.nan, "p_gap": math.nan}
    b_gap = float(np.polyfit(x, gap, 1)[0])
    b_r = float(np.polyfit(x, -np.log(rest), 1)[0])
    local = np.diff(gap) / np.diff(x)  # d gap / d log tau between consecutive records
    mid = (x[1:] + x[:-1]) / 2
    p = float(np.polyfit(mid, np.log(local), 1)[0]) if np.all(local > 0) else math.nan
    return {"b_gap": b_gap, "b_r": b_r, "p_gap": p}


def by_D_rows(traj: pd.DataFrame, crossings: pd.DataFrame, s: Settings) -> list[list]:
    """Rows of the by-D table (bound.BY_D_COLUMNS) for the flow grid: the gaps at each kappa, the late rates,
    and gradient descent's steps to each target at eta(D) and at eta = 0.5."""
    runs = flow_runs(traj)
    out = []
    for (d, D), g in runs.groupby(["d", "D"], sort=True):
        eta = float(g["eta"].iloc[0])
        seeds = sorted(g["seed"].unique())

        def row(quantity, values, log_scale=False, d=d, D=D, eta=eta):
            """A by-D row: the seeds' mean (geometric with ``log_scale``) and t interval."""
            y = np.log(values) if log_scale else np.asarray(values, float)
            m, lo, hi = mean_interval(y)
            if log_scale:
                m, lo, hi = (math.exp(v) if np.isfinite(v) else math.nan for v in (m, lo, hi))
            return ["", "flow", d, D, 0, eta, len(values), quantity, m, lo, hi, bool(~np.isfinite(y).all())]

        for kappa in s.kappas:
            at = [_at(gaps(g[g["seed"] == seed]), kappa * D**3) for seed in seeds]
            if all(a is not None for a in at):
                out.append(row(BY_D_QUANTITIES["gap_other"].format(kappa=kappa), [a["gap_other"] for a in at]))
                out.append(row(BY_D_QUANTITIES["gap_own"].format(kappa=kappa), [a["gap_own"] for a in at]))
        rates = [late_rates(g[g["seed"] == seed]) for seed in seeds]
        for key in ("b_gap", "b_r", "p_gap"):
            out.append(row(BY_D_QUANTITIES[key], [r[key] for r in rates]))
        if len(crossings):
            cr = crossings[(crossings["run"] == g["run"].iloc[0]) & (crossings["quantity"] == MIN_ATTENTION)]
            for c, h in cr.groupby("c", sort=True):
                tau = h["flow_time"].to_numpy(float)
                for key, step in (("steps_eta_D", eta), ("steps_eta_fixed", FIXED_ETA)):
                    r = row(BY_D_QUANTITIES[key].format(c=c), tau / step, log_scale=True)
                    r[-1] = bool(h["censored"].any())
                    out.append(r)
    return out


def _at(rows: pd.DataFrame, tau: float) -> dict | None:
    """The gaps at flow time ``tau`` (linear between the two records around it), None beyond the run."""
    t = rows["flow_time"].to_numpy(float)
    if tau > t.max():
        return None
    return {k: float(np.interp(tau, t, rows[k].to_numpy(float))) for k in ("gap_other", "gap_own")}


def mechanism_claims(traj: pd.DataFrame, s: Settings) -> list[dict]:
    """Per D of the flow grid: the gap grows like log tau (p = 0 within the tolerance), and -log r follows the
    gap (b_r - b_gap = 0 within it); the seeds' t intervals."""
    runs = flow_runs(traj)
    tol = s.gap_growth_tolerance
    rows = []
    for (d, D), g in runs.groupby(["d", "D"], sort=True):
        rates = [late_rates(g[g["seed"] == seed]) for seed in sorted(g["seed"].unique())]
        about = About(algorithm="flow", d=float(d), D=float(D), replicates=float(len(rates)))
        about = replace(about, samples=float(g["samples"].iloc[0]), rtol=float(g["rtol"].iloc[0]))
        p = np.array([r["p_gap"] for r in rates])
        diff = np.array([r["b_r"] - r["b_gap"] for r in rates])
        config = (
            f"d = {d}, D = {D}, {len(rates)} seeds; over flow time [T / 16, T], T = {g['flow_time'].max():g}: "
            f"b_gap = {np.nanmean([r['b_gap'] for r in rates]):.3g}, b_r = {np.nanmean([r['b_r'] for r in rates]):.3g} "
            f"(means over seeds); seeds' t interval; tolerance +-{tol:g} (scaling.analysis.gap_growth_tolerance)"
        )
        for statement, values, theory in (
            (
                "gap_log_growth",
                p,
                "if the score gap between j* and the other keys grows like log tau, r ~ D exp(-gap) falls as a "
                "power of tau and the flow time to 1 - exp(-c D) grows exponentially in D",
            ),
            ("rest_follows_gap", diff, "1 - S[j*, j] ~ (D - 1) exp(-gap) once attention has formed"),
        ):
            m, lo, hi = mean_interval(values)
            blocker = "" if np.isfinite(values).all() else "a seed's late window has too few records or no growth"
            rows.append(
                claim_row(statement, about, Prediction("within", 0.0, tol), m, lo, hi, blocker, config,
                          len(values), theory)
            )  # fmt: skip
    return rows


def reference_claims(flow_by_D: pd.DataFrame, s: Settings) -> list[dict]:
    """The flow against population gradient descent's committed by-D tables (``reference_by_D``): per D both
    ran and quantity, the flow's geometric mean over seeds (``flow_by_D``: bound.by_D of the flow runs)
    beside gradient descent's, inside its interval or not."""
    if not s.reference_by_D:
        return []
    ref = pd.concat(
        [io.read_csv_table(p, ["group", "algorithm", "D", "quantity", "value", "low", "high"], "by-D table")
         for p in s.reference_by_D],
        ignore_index=True,
    )  # fmt: skip
    ref = ref[(ref["group"].astype(object).fillna("").astype(str) == "") & (ref["algorithm"] == "population")]
    ref = ref.drop_duplicates(["D", "quantity"], keep="last")  # a D in two tables: the later one (a slice)
    flow = flow_by_D
    flow = flow[(flow["group"] == "") & (flow["algorithm"] == "flow")]
    both = flow.merge(ref, on=["D", "quantity"], suffixes=("", "_gd"))
    rows = []
    for _, r in both.sort_values(["quantity", "D"]).iterrows():
        if not (np.isfinite(r["value"]) and np.isfinite(r["value_gd"])):
            continue
        about = About(
            algorithm="flow",
            reference="population",
            quantity=r["quantity"],
            d=float(r["d"]),
            D=float(r["D"]),
            eta=float(r["eta_gd"]),
            batch=float(r["batch_gd"]),
            replicates=float(r["seeds"]),
        )
        inside = bool(r["low_gd"] <= r["value"] <= r["high_gd"])
        row = claim_row(
            "flow_vs_gd",
            about,
            None,
            float(r["value"]),
            float(r["low"]),
            float(r["high"]),
            "censored" if (r["censored"] or r["censored_gd"]) else "",
            f"gradient descent (batch {r['batch_gd']:.0f}, eta {r['eta_gd']:.4g}, {r['seeds_gd']:.0f} seeds): "
            f"{r['value_gd']:.4g} [{r['low_gd']:.4g}, {r['high_gd']:.4g}]; the flow: {r['value']:.4g} "
            f"[{r['low']:.4g}, {r['high']:.4g}] ({r['seeds']:.0f} seeds); ratio flow / GD "
            f"{r['value'] / r['value_gd']:.3g}",
            int(r["seeds"]),
            "population gradient descent at eta(D) is the Euler discretisation of the flow: where both ran they "
            "agree up to that discretisation and the runs' noise",
        )
        # typed: agrees where the flow's value lies inside gradient descent's interval (no tolerance test: GD's
        # discretisation is a real difference); gradient descent's value as the row's predicted value
        censored = bool(r["censored"] or r["censored_gd"])
        row["verdict"] = "inconclusive" if censored else ("agrees" if inside else "differs")
        row["predicted_value"] = float(r["value_gd"])
        row["why"] = (
            "censored"
            if censored
            else (
                "inside gradient descent's interval"
                if inside
                else f"outside gradient descent's interval (ratio {r['value'] / r['value_gd']:.3g}): its "
                f"discretisation at eta = {r['eta_gd']:.4g} and the runs' noise"
            )
        )
        rows.append(row)
    return rows
