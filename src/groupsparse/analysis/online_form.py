"""The downstream bound's form, d + D against d D and against a constant, as fitted models (docs/STUDY.md
section 4.7).

The bound: average online error <= C (d + D) log^2 n / n. Over the (grid point, n) levels where it is
not vacuous ((d + D) log^2 n / n < 1), three models of log(average online error) are fitted, the
exponents free (the bound's exponent 1 of the size is not imposed, so a size that enters more weakly
or more strongly is not forced into either form):

* d + D: log err = c + alpha log n + beta log(d + D);
* d D: log err = c + alpha log n + beta log(d D);
* constant: log err = c + alpha log n, no dependence on (d, D) (a method that does not learn, or one
  whose error the size does not move).

The criterion, the same for the three, is the leave-one-grid-point-out prediction error (sum of
squares, each grid point's levels predicted by the fit on the others), which does not favour the
larger model. delta = CV(other) - CV(d + D), with a t interval from one bootstrap over seeds
(:func:`.fits.fit_design`, the sizes of one grid point resampled together). Against d D and against
the constant: 'holds' (d + D predicts better) if the interval lies above 0, 'does not hold' if below.
The power against each is the share of studies simulated from that fitted model, with the bootstrap's
measured noise, that the criterion judges 'does not hold'.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .fits import fit_design
from .inputs import downstreams, with_role
from .rows import alternative_text, claim_row
from .sample_complexity import online_stat
from .settings import Settings
from .statements import About
from .stats import Prediction, bootstrap_generator, t_quantile

THEORY = (
    "average online test error of online SGD from the pretrained model <= O((d + D) log^2 n / (gamma^2 n)): "
    "the bound's form with d + D should predict the error better than with d D, and than no size at all"
)
MIN_GRID_POINTS = 4  # leave-one-out over grid points: every fold still fits 3 coefficients


def _cv(Y: np.ndarray, X: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Leave-one-group-out squared prediction error of each row of Y regressed on X."""
    Y = np.atleast_2d(Y)
    err = np.zeros(Y.shape[0])
    for g in np.unique(groups):
        test = groups == g
        beta = Y[:, ~test] @ np.linalg.pinv(X[~test]).T
        err += ((Y[:, test] - beta @ X[test].T) ** 2).sum(axis=1)
    return err


def _row(method, downstream, other, delta, half, blocker, config, seeds, power):
    about = About(subject=method, reference=other, downstream=str(downstream))
    row = claim_row(
        "online_form_dD" if other == "d D" else "online_form_constant",
        about,
        Prediction("greater", 0.0),
        delta,
        delta - half,
        delta + half,
        blocker,
        config,
        seeds,
        THEORY,
    )
    if np.isfinite(power):
        row["power"] = row["power_pipeline"] = power
        name = (
            "average online error ~ (d D)^beta n^alpha (fitted)"
            if other == "d D"
            else "average online error ~ n^alpha, no size (fitted)"
        )
        row["alternative"] = row["alternative_name"] = alternative_text(name, math.nan)
    return row


def online_form_claims(transfer: pd.DataFrame, s: Settings) -> list[dict]:
    rows = []
    scaled = with_role(transfer, "scaling") if len(transfer) else transfer
    if not len(scaled) or "online_error" not in scaled.columns:
        return rows
    online = scaled[scaled["online_error"].notna() & (scaled["status"] == "ok")]
    for downstream in downstreams(transfer, s.downstream):
        for method in sorted(online.loc[online["downstream"] == downstream, "method"].unique()):
            g = online[(online["downstream"] == downstream) & (online["method"] == method)]
            levels, stats, seeds, clusters = [], [], [], []
            for (run, d, D), h in g.groupby(["run", "d", "D"], sort=True):
                table = h.pivot_table(index="seed", columns="n", values="online_error").dropna(axis=0)
                for n in table.columns:
                    if (d + D) * math.log(n) ** 2 / n >= 1:
                        continue  # the bound is vacuous here: it says nothing to test
                    levels.append((int(d), int(D), float(n)))
                    stats.append(online_stat(table[n].to_numpy(float)))
                    seeds.append(int(table.shape[0]))
                    clusters.append(run)
            if len({(d, D) for d, D, _ in levels}) < MIN_GRID_POINTS:
                continue
            d, D, n = (np.array(col, dtype=float) for col in zip(*levels))
            X1 = np.column_stack([np.ones_like(n), np.log(n)])
            rng = bootstrap_generator(s.study_seed, "online_form", downstream, method)
            fit = fit_design(X1, stats, seeds, n_boot=s.n_boot, rng=rng, clusters=clusters)
            used = fit.used
            groups = np.asarray(clusters)[used]
            designs = {
                "d + D": np.column_stack([X1[used], np.log(d + D)[used]]),
                "d D": np.column_stack([X1[used], np.log(d * D)[used]]),
                "constant": X1[used],
            }
            y, Yb = fit.y[used], fit.boot_y
            cv = {k: float(_cv(y, X, groups)[0]) for k, X in designs.items()}
            betas = {k: np.linalg.lstsq(X, y, rcond=None)[0] for k, X in designs.items()}
            dof = float(min(seeds) - 1)
            blocker = fit.blocker(min_levels=3)
            per_n = ", ".join(f"n={int(v)}: {int((n[used] == v).sum())}" for v in np.unique(n[used]))
            config = (
                f"{int(used.sum())} levels (grid point, n) with (d + D) log^2 n / n < 1 ({per_n}); "
                "log err = c + alpha log n + beta log s, s = d + D (alpha {:.3g}, beta {:.3g}) or d D (alpha {:.3g}, "
                "beta {:.3g}), or c + alpha log n (alpha {:.3g}); criterion leave-one-grid-point-out squared "
                "prediction error: d + D {:.3g}, d D {:.3g}, constant {:.3g}; measured = CV(other) - CV(d + D); "
                "dof {:g}"
            ).format(
                betas["d + D"][1],
                betas["d + D"][2],
                betas["d D"][1],
                betas["d D"][2],
                betas["constant"][1],
                cv["d + D"],
                cv["d D"],
                cv["constant"],
                dof,
            )
            for other in ("d D", "constant"):
                delta = cv[other] - cv["d + D"]
                boot = _cv(Yb, designs[other], groups) - _cv(Yb, designs["d + D"], groups) if Yb.shape[0] > 1 else []
                se = float(np.std(boot, ddof=1)) if len(boot) > 1 else math.nan
                half = t_quantile(dof) * se if dof >= 1 else math.nan
                power = math.nan
                if np.isfinite(half):
                    # studies drawn from the fitted alternative with the bootstrap's noise, judged alike
                    Xo = designs[other]
                    sims = Xo @ betas[other] + (Yb - y)
                    sim_delta = _cv(sims, Xo, groups) - _cv(sims, designs["d + D"], groups)
                    power = float(np.mean(sim_delta + half < 0))
                row = _row(method, downstream, other, delta, half, blocker, config, int(sum(seeds)), power)
                if row["verdict"] == "holds" and not power >= s.min_power:
                    row["why"] = f"undecided (power {power:.2f} against {other}); " + row["why"]
                    row["verdict"], row["power_veto"] = "undecided", True
                rows.append(row)
    return rows
