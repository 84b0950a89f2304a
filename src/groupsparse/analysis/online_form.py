"""The downstream bound's form, d + D against d D, as two fitted models (docs/STUDY.md section 4.7).

The bound: average online error <= C (d + D) log^2 n / n. Its form with the size s = d + D, and the
same form with s = d D, are fitted to log(average online error) over the (grid point, n) levels
where the bound is not vacuous ((d + D) log^2 n / n < 1): log err = c + alpha log n + log s, the
exponent of s fixed to the bound's 1 (an offset), c and alpha fitted. The criterion is
delta = RSS(d D) - RSS(d + D) of the two fits through the same level statistics, with a t interval
from one bootstrap over seeds (:func:`.fits.fit_design`, the sizes of one grid point resampled
together). 'holds' (d + D fits better) if the interval lies above 0, 'does not hold' (d D fits
better) if below: unlike a fitted exponent of d + D, this can fail. Its power is the share of
studies simulated from the fitted d D model, with the bootstrap's measured noise, that the
criterion would have judged 'does not hold'.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .fits import fit_design
from .inputs import downstreams, with_role
from .rows import claim_row
from .sample_complexity import online_stat
from .settings import Settings
from .stats import Prediction, bootstrap_generator, t_quantile

THEORY = (
    "average online test error of online SGD from the pretrained model <= O((d + D) log^2 n / (gamma^2 n)): "
    "the bound's form with d + D should fit the error better than the same form with d D"
)


def _rss(Y: np.ndarray, X: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """Residual sums of squares of each row of Y - offset regressed on X."""
    R = Y - offset
    beta = R @ np.linalg.pinv(X).T
    return ((R - beta @ X.T) ** 2).sum(axis=-1)


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
            if len({(d, D) for d, D, _ in levels}) < 3:
                continue
            d, D, n = (np.array(col, dtype=float) for col in zip(*levels))
            X = np.column_stack([np.ones_like(n), np.log(n)])
            rng = bootstrap_generator(s.study_seed, "online_form", downstream, method)
            fit = fit_design(X, stats, seeds, n_boot=s.n_boot, rng=rng, clusters=clusters)
            used = fit.used
            plus, times = np.log(d + D)[used], np.log(d * D)[used]
            Xu, y, Yb = X[used], fit.y[used], fit.boot_y
            delta = float(_rss(y, Xu, times) - _rss(y, Xu, plus))
            boot = _rss(Yb, Xu, times) - _rss(Yb, Xu, plus) if Yb.shape[0] > 1 else np.empty(0)
            dof = float(min(seeds) - 1)
            se = float(boot.std(ddof=1)) if boot.size > 1 else math.nan
            half = t_quantile(dof) * se if dof >= 1 else math.nan
            blocker = fit.blocker(min_levels=3)
            row = claim_row(
                f"{method}: the bound's form with d + D fits the average online error better than with d D "
                f"(downstream {downstream})",
                THEORY,
                Prediction("greater", 0.0),
                delta,
                delta - half,
                delta + half,
                blocker,
                f"{int(used.sum())} levels (grid point, n) with (d + D) log^2 n / n < 1; log err = c + alpha log n "
                f"+ log s, s = d + D or d D; measured = RSS(d D) - RSS(d + D); dof {dof:g}",
                "online_error_form",
                int(sum(seeds)),
            )
            # power against d D: studies drawn from the fitted d D model with the bootstrap's noise
            if boot.size > 1 and np.isfinite(half):
                beta = (y - times) @ np.linalg.pinv(Xu).T
                mu = beta @ Xu.T + times
                sims = mu + (Yb - y)
                sim_delta = _rss(sims, Xu, times) - _rss(sims, Xu, plus)
                row["power"] = float(np.mean(sim_delta + half < 0))
                row["alternative"] = "average online error ~ d D log^2 n / n (fitted)"
                if row["verdict"] == "holds" and row["power"] < s.min_power:
                    row["why"] = f"undecided (power {row['power']:.2f} against d D); " + row["why"]
                    row["verdict"] = "undecided"
            rows.append(row)
    return rows
