"""Sample complexity over the (d, D) grid (docs/STUDY.md section 4.3): n* and the average online error.

The paper's downstream theorem is an upper bound: online SGD from the pretrained model on n
samples has average online test error (1/n) sum_i P(y f(Z; W~(i), v~(i)) <= 0)
<= O((d + D) log^2 n / (gamma^2 n)). So every test of a pretrained method here is one-sided
("grows no faster than"), by :data:`.stats.VERDICT_RULE`.

* n*: the smallest n at which a method's seed-mean test accuracy reaches a target, at each grid
  point (:func:`.fits.curve_crossing_stat`, censoring-aware).
* Joint fit ``log n* = c + a log d + b log D`` over the grid (:func:`.fits.fit_design`, bootstrap
  over seeds within each grid point). d + D is homogeneous of degree 1 in (d, D), d D of degree
  2, so a + b separates them: a + b = 1 for d + D (a = d/(d + D), b = D/(d + D) locally), 2 for
  d D. Pretrained methods: a <= 1, b <= 1 and a + b <= 1, one-sided; the bound's own form
  n* / log^2 n* (the log^2 n it carries lets n* itself grow a little faster) is tested on
  a + b <= 1 as well. Logistic regression on vec(X) (d D features): a = 1, b = 1, a + b = 2.
  Other methods (group lasso, the nets): fitted, no claim.
* Average online error of the online-SGD methods: ``log err = c + alpha log n + beta log(d + D)``
  over (grid point, n) levels, the sizes of one grid point resampled together (they share the
  pretrained seeds): measured rates, no verdict. The test that can fail, the bound's form with
  d + D against d D and a constant as fitted models, is :mod:`.online_form`; the shape of n* worded
  from (a, b) against the regions d + D and d D give on the grid is :mod:`.n_star_shape`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..config.seeding import numpy_generator
from .fits import Coefficient, DesignFit, LevelStat, curve_crossing_stat, fit_design
from .inputs import BASELINE_METHOD, downstreams, transfer_curves, with_role
from .pipeline_power import Level, anchored, fit_curve_model, simulate_power
from .power import add_power
from .rows import claim_row
from .settings import Settings
from .statements import About, claim_text
from .stats import CONFIDENCE, EXPONENT_TOLERANCE, Prediction, bootstrap_generator, fmt_values


def uses_pretraining(method: str) -> bool:
    """Methods that start from the pretrained checkpoint: held to the theorem's d + D."""
    return method.startswith("pretrained_")


@dataclass
class Test:
    """A coefficient (or a combination) of a joint fit, and what the theory says about it."""

    coefficient: Coefficient
    prediction: Prediction | None = None
    statement: str = ""  # the claim (analysis.statements), '' for none
    about: About | None = None
    theory: str = ""
    alternative: tuple[str, float] | None = None  # the named alternative the verdict's power is against

    @property
    def claim(self) -> str:
        return claim_text(self.statement, self.about) if self.statement else ""


@dataclass
class JointRecord:
    """One joint fit over the grid, the observations behind it, and the tests on its coefficients."""

    analysis: str  # sample_complexity | online_error
    label: str  # "accuracy >= 0.9", "average online error"
    group: dict  # method, downstream, threshold, form
    y_name: str
    fit: DesignFit
    points: pd.DataFrame  # per level: level, d, D, n, x (log D), y, censored, reason
    tests: list[Test] = field(default_factory=list)
    pipeline: dict = field(default_factory=dict)  # claim -> power by simulation of the pipeline

    @property
    def x_name(self) -> str:  # the x of the points table (a joint fit has several)
        return "log D" if self.analysis == "sample_complexity" else "log n"

    def rows(self) -> list[dict]:
        f = self.fit
        common = {
            "role": "scaling",
            "analysis": self.analysis,
            "label": self.label,
            **{k: self.group.get(k) for k in ("d", "D", "method", "downstream", "quantity", "threshold", "c", "at")},
            "law": self.group.get("form"),
            "x": " + ".join(c.name for c in f.coefficients[1:]) + " (joint)",
            "y": self.y_name,
            "confidence": CONFIDENCE,
            "r2": f.r2,
            "local_slopes": "",
            "n_levels": int(f.used.sum()),
            "n_levels_censored": int(f.censored.sum()),
            "levels": "; ".join(f.names),
            "seeds_min": int(f.seeds.min()) if f.seeds.size else 0,
            "bootstrap": int(f.boot_y.shape[0]),
            "bootstrap_valid": f.valid_fraction,
            "usable": f.blocker() == "",
            "blocker": f.blocker(),
        }
        intercept = f.coefficients[0].value
        return [
            common
            | {
                "coefficient": t.coefficient.name,
                "slope": t.coefficient.value,
                "intercept": intercept,
                "low": t.coefficient.low,
                "high": t.coefficient.high,
                "one_sided_low": t.coefficient.one_sided()[0],
            }
            for t in self.tests
        ]

    def test_rows(self) -> list[tuple[Test, dict]]:
        """(test, claims row) of every test with a claim, power not yet added: the verdict code the
        simulated studies of :mod:`.pipeline_power` run too."""
        f = self.fit
        config = (
            ", ".join(f"{k} = {v}" for k, v in self.group.items())
            + f"; y = {self.y_name}; {int(f.used.sum())} levels ({'; '.join(f.names)}); "
            f"seeds per level {fmt_values(np.unique(f.seeds))}; r2 {f.r2:.3f}"
        )
        rows = []
        for t in self.tests:
            if not t.claim:
                continue
            c = t.coefficient
            one_sided = t.prediction.kind == "at_most"
            row = claim_row(
                t.statement,
                t.about,
                t.prediction,
                c.value,
                c.one_sided()[0] if one_sided else c.low,
                math.inf if one_sided else c.high,
                f.blocker(),
                config + f"; two-sided {CONFIDENCE:.0%} interval [{c.low:.3g}, {c.high:.3g}], dof {c.dof:.3g}",
                int(f.seeds[f.used].sum()) if f.used.any() else 0,
                t.theory,
            )
            rows.append((t, row))
        return rows

    def claims(self, s: Settings) -> list[dict]:
        rows = []
        for t, row in self.test_rows():
            if t.alternative is not None:
                c = t.coefficient
                pipeline = self.pipeline.get(t.claim, math.nan)
                row = add_power(row, t.prediction, *t.alternative, c.se, c.dof, s, pipeline=pipeline)
            rows.append(row)
        return rows


def _grid_points(transfer: pd.DataFrame, downstream: str, method: str):
    """(run, d, D, n grid, seeds, accuracy curves) of every scaling run that has the method, by (d, D)."""
    scaled = with_role(transfer, "scaling")
    configs = scaled[["run", "d", "D"]].drop_duplicates().sort_values(["d", "D"]).to_numpy().tolist()
    for run, d, D in configs:
        grid, seeds, curves = transfer_curves(scaled, run, downstream, method)
        if seeds.size:
            yield run, int(d), int(D), grid, seeds, curves


def _points(fit: DesignFit, levels: list[tuple], reasons: list[str]) -> pd.DataFrame:
    """The points table of a joint fit: per level (d, D, n), its statistic (the bound where censored), and
    the reason it is censored; x is log n where the levels have sizes, else log D."""
    d, D, n = (np.asarray(col, dtype=float) for col in zip(*levels))
    return pd.DataFrame(
        {
            "level": fit.names,
            "d": d.astype(int),
            "D": D.astype(int),
            "n": n,
            "x": np.log(np.where(np.isnan(n), D, n)),
            "y": fit.values,
            "censored": fit.censored,
            "seed": -1,
            "reason": [r if c else "" for r, c in zip(reasons, fit.censored)],
        }
    )


def _log2_corrected(stat: LevelStat) -> LevelStat:
    """log(n* / log^2 n*) from log n*: the bound's own form, n / log^2 n ~ (d + D)."""

    def corrected(idx):
        value, censored = stat(idx)
        with np.errstate(invalid="ignore", divide="ignore"):
            return value - 2 * np.log(value), censored

    return corrected


N_STAR_THEORY = (
    "downstream bound: average online error O((d + D) log^2 n / (gamma^2 n)), an upper bound: samples for a "
    "target accuracy grow no faster than d + D (up to log^2 n); d + D has degree 1 in (d, D), d D degree 2"
)


# named alternatives: a pretrained method's bound d + D against d D (a = b = 1 locally); logistic
# regression's d D against d + D (a = b = 1/2 at d = D, a + b = 1)
D_TIMES_D = "n* ~ d D"
D_PLUS_D = "n* ~ d + D"


def _n_star_tests(fit: DesignFit, method: str, target: float, downstream: str, form: str, s: Settings) -> list[Test]:
    a, b, total = fit.coefficient("log d"), fit.coefficient("log D"), fit.combine("a + b", {"log d": 1, "log D": 1})
    about = About(
        subject=method,
        downstream=str(downstream),
        target=float(target),
        form=form,
        replicates=float(fit.seeds.min()) if fit.seeds.size else math.nan,
    )
    if uses_pretraining(method) and form == s.n_star_form:
        at_most = Prediction("at_most", 1.0)
        return [
            Test(a, at_most, "n_star_a_at_most", about, N_STAR_THEORY, (D_TIMES_D, 1)),
            Test(b, at_most, "n_star_b_at_most", about, N_STAR_THEORY, (D_TIMES_D, 1)),
            Test(total, at_most, "n_star_sum_at_most", about, N_STAR_THEORY, (D_TIMES_D, 2.0)),
        ]
    if method == BASELINE_METHOD and form == "n*":
        equal = lambda v: Prediction("equal", v, EXPONENT_TOLERANCE)
        theory = "logistic regression on vec(X) has d D features: n* ~ d D (a = b = 1, a + b = 2)"
        return [
            Test(a, equal(1.0), "n_star_a_equals", about, theory, (D_PLUS_D, 0.5)),
            Test(b, equal(1.0), "n_star_b_equals", about, theory, (D_PLUS_D, 0.5)),
            Test(total, equal(2.0), "n_star_sum_equals", about, theory, (D_PLUS_D, 1.0)),
        ]
    return [Test(a), Test(b), Test(total)]


def n_star_record(points, method: str, downstream: str, target: float, form: str, s: Settings, n_boot: int, rng):
    """The joint fit of log n* (or the bound's form) on log d and log D over ``points`` ((run, d, D, n
    grid, seeds, accuracy curves) per grid point) with its tests."""
    X = np.array([[1.0, math.log(d), math.log(D)] for _, d, D, *_ in points])
    names = [f"d={d}, D={D}" for _, d, D, *_ in points]
    stats = [curve_crossing_stat(grid, curves, target) for *_, grid, _, curves in points]
    if form != "n*":
        stats = [_log2_corrected(st) for st in stats]
    seeds = [seed_ids.size for *_, seed_ids, _ in points]
    fit = fit_design(
        X, stats, seeds, n_boot=n_boot, rng=rng, names=names, coefficient_names=("intercept", "log d", "log D")
    )
    reasons = [f"not reached within n <= {p[3].max():g}" for p in points]
    pts = _points(fit, [(p[1], p[2], math.nan) for p in points], reasons)
    group = {"method": method, "downstream": downstream, "threshold": float(target), "form": form}
    tests = _n_star_tests(fit, method, target, downstream, form, s)
    y_name = "log n*" if form == "n*" else "log(n* / log^2 n*)"
    return JointRecord("sample_complexity", f"accuracy >= {target:g}", group, y_name, fit, pts, tests)


# the named alternatives as shapes of n* over the grid (the simulated studies draw them)
ALTERNATIVE_SHAPES = {D_TIMES_D: lambda d, D: d * D, D_PLUS_D: lambda d, D: d + D}


def _pipeline_power(record: JointRecord, points, s: Settings) -> dict:
    """{claim: power} of the record's tests, by studies drawn under their alternative (:mod:`.pipeline_power`)."""
    tests = [t for t in record.tests if t.claim and t.alternative is not None]
    if not tests or s.pipeline_power_simulations <= 0:
        return {}
    g = record.group
    target, form = g["threshold"], g["form"]
    levels = [Level(grid, seeds.size, fit_curve_model(grid, curves, s.test_size)) for *_, grid, seeds, curves in points]
    out = {}
    for name in dict.fromkeys(t.alternative[0] for t in tests):
        shape = np.array([ALTERNATIVE_SHAPES[name](d, D) for _, d, D, *_ in points], dtype=float)
        kinds = {t.claim: t.prediction.kind for t in tests if t.alternative[0] == name}

        def judge(curves, rng, name=name):
            sim = [(p[0], p[1], p[2], p[3], np.arange(c.shape[0]), c) for p, c in zip(points, curves)]
            rec = n_star_record(sim, g["method"], g["downstream"], target, form, s, s.pipeline_power_boot, rng)
            return {t.claim: row["verdict"] for t, row in rec.test_rows()}

        identity = ("n_star", g["downstream"], g["method"], target, form, name)
        rng = numpy_generator("pipeline-power", s.study_seed, *identity)
        log_n = anchored(levels, target, shape)
        out |= simulate_power(levels, log_n, target, judge, kinds, s.pipeline_power_simulations, s.test_size, rng)
    return out


def n_star_fits(transfer: pd.DataFrame, s: Settings) -> list[JointRecord]:
    """Joint fits of log n* on log d and log D per downstream, method and target (see the module's doc)."""
    records = []
    if not len(with_role(transfer, "scaling")):
        return records
    for downstream in downstreams(transfer, s.downstream):
        for method in s.methods:
            points = list(_grid_points(transfer, downstream, method))
            if not points:
                continue
            for target in s.accuracy_targets:
                forms = ["n*"] + (["n*/log^2 n*"] if uses_pretraining(method) else [])  # a verdict on one only
                for form in forms:
                    rng = bootstrap_generator(s.study_seed, "n_star_joint", downstream, method, float(target), form)
                    record = n_star_record(points, method, downstream, float(target), form, s, s.n_boot, rng)
                    record.pipeline = _pipeline_power(record, points, s)
                    records.append(record)
    return records


def online_stat(values: np.ndarray) -> LevelStat:
    """Level statistic: log of the seeds' mean online error; censored if it is 0 (no log)."""

    def stat(idx):
        mean = values[idx].mean(axis=1)
        with np.errstate(divide="ignore"):
            return np.log(mean), ~(mean > 0)

    return stat


ONLINE_THEORY = (
    "average online test error of online SGD from the pretrained model <= O((d + D) log^2 n / (gamma^2 n)): "
    "an upper bound, growing like d + D at fixed n"
)


def online_error_fits(transfer: pd.DataFrame, s: Settings) -> list[JointRecord]:
    """log(average online error) on log n and log(d + D), per downstream and online-SGD method."""
    records = []
    scaled = with_role(transfer, "scaling")
    if not len(scaled) or "online_error" not in scaled.columns:
        return records
    online = scaled[scaled["online_error"].notna() & (scaled["status"] == "ok")]
    for downstream in downstreams(transfer, s.downstream):
        for method in sorted(online.loc[online["downstream"] == downstream, "method"].unique()):
            g = online[(online["downstream"] == downstream) & (online["method"] == method)]
            rows, stats, seeds, clusters, names = [], [], [], [], []
            for (run, d, D), h in g.groupby(["run", "d", "D"], sort=True):
                table = h.pivot_table(index="seed", columns="n", values="online_error").dropna(axis=0)
                for n in table.columns:
                    values = table[n].to_numpy(float)
                    rows.append((int(d), int(D), float(n)))
                    stats.append(online_stat(values))
                    seeds.append(values.size)
                    clusters.append(run)
                    names.append(f"d={int(d)}, D={int(D)}, n={int(n)}")
            if not rows:
                continue
            X = np.array([[1.0, math.log(n), math.log(d + D)] for d, D, n in rows])
            rng = bootstrap_generator(s.study_seed, "online_error_joint", downstream, method)
            fit = fit_design(
                X,
                stats,
                seeds,
                n_boot=s.n_boot,
                rng=rng,
                names=names,
                coefficient_names=("intercept", "log n", "log(d+D)"),
                clusters=clusters,
            )
            pts = _points(fit, rows, ["mean online error 0"] * len(rows))
            # descriptive: a fitted exponent of d + D cannot test the bound (a saturating error law whose
            # scale grows like d D gives one below 1 too); the test is :mod:`.online_form`
            tests = [Test(fit.coefficient("log n")), Test(fit.coefficient("log(d+D)"))]
            group = {"method": method, "downstream": downstream, "form": "average online error"}
            records.append(
                JointRecord("online_error", "average online error", group, "log average online error", fit, pts, tests)
            )
    return records
