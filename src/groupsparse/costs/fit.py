"""Fitting the coefficients from benchmarks/costs/*.tsv, and measured-vs-predicted reports
(numpy/scipy imported here only, inside the functions)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from ..data.kinds import DEFAULT_KIND, kind_of
from ..model.dispatch import Plan
from .model import (
    COEFFS_PATH,
    FIT_TERMS,
    coefficients,
    fit_features,
    fit_seconds,
    pretrain_cpu_s,
    pretrain_mem_mb,
    round_significant,
    set_coefficients,
    transfer_cost,
    transfer_mem_features,
    transfer_parts,
)
from .work import (
    DTYPE_BYTES,
    Fit,
    describe_transfer,
    flow_bytes,
    measured_methods,
    pretrain_bytes,
    pretrain_work,
    transfer_fits,
)

__all__ = [
    "DEFAULT_DATA",
    "TABLES",
    "fit",
    "measured_vs_predicted",
    "read_table",
    "report",
    "write_coefficients",
]

# -- fitting (numpy/scipy imported here only) --------------------------------------------------

TABLES = ("pretrain.tsv", "transfer.tsv", "transfer_fits.tsv")
DEFAULT_DATA = Path(__file__).resolve().parents[3] / "benchmarks" / "costs"
TWO_FACTORS_FROM = 3  # measured points of a rate from which it gets a factor for its flops and one for its draws
# pretrain.tsv's rows measured before the rows named their plan: the implementation (kernel, projected) and
# the sampling (antithetic) each cost path of that time stands for
MEASURED_PATHS = {
    "antithetic": ("general", False, True),
    "iid": ("general", False, False),
    "autograd": ("autograd", False, True),
    "symmetric": ("symmetric", False, True),
    "symmetric_loops": ("symmetric_loops", False, True),
    "population_loops": ("symmetric_loops", True, True),
    "flow_loops": ("flow_loops", True, True),  # steps: the flow's vector-field evaluations, batch: its samples
}


def read_table(path: Path) -> list[dict]:
    if not Path(path).exists():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def _pre_row(r: dict) -> dict:
    """Features of a measured pretraining row, recomputed from its raw sizes and plan."""
    d, D, m, L, S = (int(r[k]) for k in ("d", "D", "m", "layers", "seeds"))
    T, B, E, R = (int(r[k]) for k in ("steps", "batch", "eval_size", "records"))
    if r.get("kernel"):
        kernel, projected, antithetic = r["kernel"], r["projected"] == "True", r["sampling"] == "antithetic"
    else:
        kernel, projected, antithetic = MEASURED_PATHS[r["path"]]
    plan = Plan(kernel, projected)
    flow = kernel.startswith("flow")  # steps: its field evaluations; batch: its outer samples
    return {
        "dtype": r["dtype"],
        "kind": r.get("kind") or DEFAULT_KIND,
        **pretrain_work(plan, S, L, d, D, m, T, B, R, E, antithetic),
        **(
            flow_bytes(B, E, d, D, int(r["threads"]))
            if flow
            else pretrain_bytes(S, int(r["threads"]), L, DTYPE_BYTES[r["dtype"]], B, E, d, D, m, not plan.closed_form)
        ),
        "cpu_s": float(r["user_s"]) + float(r["sys_s"]),
        "mem_mb": float(r["max_rss_mb"]),
    }


def _fit_row_fits(r: dict) -> list[Fit]:
    transfer = {
        "downstream": ["transfer"],
        "test_size": int(r["test_size"]),
        "selection": r["selection"],
        "cv_folds": int(r["cv_folds"]),
    }
    return transfer_fits(transfer, [r["method"]], [int(r["n"])], online=False)  # measured before online errors


def _tr_row(r: dict) -> tuple[dict, dict, list[str], list[int], int]:
    spec = {"task": {"d": int(r["d"]), "D": int(r["D"])}, "model": {}}
    transfer = {
        "test_size": int(r["test_size"]),
        "downstream": r["downstream"].split(","),
        "selection": r["selection"],
        "cv_folds": int(r["cv_folds"]),
        "_measured_without_online_error": True,  # these jobs ran before the online error was recorded
    }
    return spec, transfer, r["methods"].split(","), [int(x) for x in r["sizes"].split(",")], int(r["seeds"])


def _fit_lines(data: Path) -> list[dict]:
    """transfer_fits.tsv with ``cpu_seconds``: a line's wall seconds times its job's CPU/wall
    ratio (the lines are timed by the wall clock, which a loaded machine stretches)."""
    ratio = {
        r["name"]: (float(r["user_s"]) + float(r["sys_s"])) / float(r["wall_s"])
        for r in read_table(data / "transfer.tsv")
    }
    seen: set = set()
    out = []
    for r in read_table(data / "transfer_fits.tsv"):
        if r["name"] not in ratio:
            continue
        # a method's first fit in its job pays one-time costs (library import, torch and numba
        # warm-up): flagged, left out of the per-fit fit; the job constant j0 carries it
        warmup = (r["name"], r["method"]) not in seen
        seen.add((r["name"], r["method"]))
        out.append(r | {"cpu_seconds": float(r["seconds"]) * min(1.0, ratio[r["name"]]), "warmup": warmup})
    return out


def _nnls_relative(X, y):
    """Non-negative least squares of the relative errors (rows divided by the target)."""
    import numpy as np
    from scipy.optimize import nnls

    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    scale = X.max(axis=0)
    scale[scale == 0] = 1.0
    coef, _ = nnls((X / scale) / y[:, None], np.ones_like(y))
    return [float(c) for c in coef / scale]


def fit(data: Path = DEFAULT_DATA) -> dict:
    """Refit every coefficient from benchmarks/costs/*.tsv (deterministic; rounded to 6 digits)."""
    data = Path(data)
    coeffs = {"pretrain": _fit_pretrain(data), "transfer_fit": _fit_transfer_fits(data)}
    coeffs = _rounded(coeffs)
    saved = set_coefficients(coeffs)  # the job model predicts fits with the new coefficients
    try:
        coeffs["transfer_job"] = _fit_transfer_jobs(data)
    finally:
        set_coefficients(saved)
    return _rounded(coeffs)


def _fit_pretrain(data: Path) -> dict:
    """The machine rates (c0, seconds a FLOP per dtype, a draw) on the GEMM rate's jobs, a factor for each other
    rate measured, and the memory model, from pretrain.tsv."""
    import statistics

    pre = [_pre_row(r) for r in read_table(data / "pretrain.tsv")]
    fast = [p for p in pre if p["rate"] == "gemm"]
    X = [
        [1.0, p["flops"] * (p["dtype"] == "float32"), p["flops"] * (p["dtype"] == "float64"), p["draws"]] for p in fast
    ]
    c0, f32, f64, draw = _nnls_relative(X, [p["cpu_s"] for p in fast])
    base = {"c0_s": c0, "s_per_flop": {"float32": f32, "float64": f64}, "s_per_draw": draw}
    factors: dict[str, Any] = {"gemm": 1.0}
    for rate in sorted({p["rate"] for p in pre} - {"gemm"}):  # each other rate measured: its factor
        rows = [p for p in pre if p["rate"] == rate]
        flops = [base["s_per_flop"][p["dtype"]] * p["flops"] for p in rows]
        draws = [draw * p["draws"] for p in rows]
        if len(rows) >= TWO_FACTORS_FROM:
            # enough points for the rate's own mix: its kernels' rate against the GEMM rate, and its draws'
            a, b = _nnls_relative([list(x) for x in zip(flops, draws)], [p["cpu_s"] - c0 for p in rows])
            factors[rate] = {"flops": round_significant(a), "draws": round_significant(b)}
            continue
        ratios = [(p["cpu_s"] - c0) / (f + d) for p, f, d in zip(rows, flops, draws)]
        factors[rate] = max(statistics.median(ratios), 0.1)
    m0, mi, mp, mt = _nnls_relative(
        [
            [1.0, float(kind_of(p["kind"]).loads_dataset), p["persistent_bytes"] / 2**20, p["transient_bytes"] / 2**20]
            for p in pre
        ],
        [p["mem_mb"] for p in pre],
    )
    return base | {"rate_factor": factors, "m0_mb": m0, "m_dataset_mb": mi, "m_persistent": mp, "m_transient": mt}


def _fit_transfer_fits(data: Path) -> dict:
    """Each measured method's seconds a fit, a step, a training and an evaluation operation (transfer_fits.tsv)."""
    fits_rows = _fit_lines(data)
    per_method = {}
    for method in measured_methods():
        rows = [r for r in fits_rows if r["method"] == method and not r["warmup"]]
        if not rows:
            continue
        X, y = [], []
        for r in rows:
            feats = [0.0] * 4
            for f in _fit_row_fits(r):
                w = fit_features(f, int(r["seeds"]), int(r["d"]), int(r["D"]), int(r["d"]) + int(r["D"]), None)
                feats = [a + b for a, b in zip(feats, w)]
            X.append(feats)
            y.append(max(r["cpu_seconds"], 1e-3))
        per_method[method] = dict(zip(FIT_TERMS, _nnls_relative(X, y)))
    return per_method


def _fit_transfer_jobs(data: Path) -> dict:
    """A transfer job's constants over its fits (with the fitted per-fit model) and its memory (transfer.tsv)."""
    X, y, mem = [], [], []
    for r in read_table(data / "transfer.tsv"):
        spec, transfer, methods, sizes, seeds = _tr_row(r)
        fits_s, draws, gl, _ = transfer_parts(spec, transfer, methods, sizes, seeds)
        X.append([1.0, fits_s, draws, float(gl)])
        y.append(float(r["user_s"]) + float(r["sys_s"]))
        features = transfer_mem_features(describe_transfer(spec, transfer, methods, sizes, seeds), methods)
        mem.append((features, float(r["max_rss_mb"])))
    j0, j1, jd, jgl = _nnls_relative(X, y) if X else (0.0, 1.0, 0.0, 0.0)
    t0, tx, tz, tsk, tgl, tnet = _nnls_relative([b for b, _ in mem], [v for _, v in mem]) if mem else (0.0,) * 6
    return {
        "j0_s": j0,
        "j1": j1,
        "s_per_draw": jd,
        "group_lasso_compile_s": jgl,
        "m0_mb": t0,
        "m_x": tx,
        "m_z": tz,
        "m_sklearn_mb": tsk,
        "m_group_lasso_mb": tgl,
        "m_nets_mb": tnet,
    }


def _rounded(obj):
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return round_significant(obj) if isinstance(obj, float) else obj


def write_coefficients(coeffs: dict, path: Path = COEFFS_PATH) -> None:
    import yaml

    header = (
        "# Fitted by groupsparse.costs.fit from benchmarks/costs/*.tsv: do not edit by hand\n"
        "# (tests/unit/test_costs.py checks this file equals a refit). Refit with\n"
        "#   python benchmarks/measure_costs.py --refit\n"
        "# Units: seconds of CPU time on one thread, MB of peak resident memory; see groupsparse/costs/__init__.py.\n"
    )
    Path(path).write_text(header + yaml.safe_dump(coeffs, sort_keys=True))
    set_coefficients(None)


def measured_vs_predicted(data: Path = DEFAULT_DATA) -> list[dict]:
    """Every measured job with the model's prediction: table, name, quantity, measured, predicted."""
    data = Path(data)
    c = coefficients()
    out = []
    for r in read_table(data / "pretrain.tsv"):
        p = _pre_row(r)
        out.append(
            {
                "table": "pretrain",
                "name": r["name"],
                "what": "cpu_s",
                "measured": p["cpu_s"],
                "predicted": pretrain_cpu_s(p, c),
                "load1": float(r["load1_before"]),
            }
        )
        out.append(
            {
                "table": "pretrain",
                "name": r["name"],
                "what": "mem_mb",
                "measured": p["mem_mb"],
                "predicted": pretrain_mem_mb(p, c),
                "load1": float(r["load1_before"]),
            }
        )
    for r in read_table(data / "transfer.tsv"):
        spec, transfer, methods, sizes, seeds = _tr_row(r)
        cost = transfer_cost(spec, transfer, methods, sizes, seeds, "cpu")
        out.append(
            {
                "table": "transfer",
                "name": r["name"],
                "what": "cpu_s",
                "measured": float(r["user_s"]) + float(r["sys_s"]),
                "predicted": cost.cpu_s,
                "load1": float(r["load1_before"]),
            }
        )
        out.append(
            {
                "table": "transfer",
                "name": r["name"],
                "what": "mem_mb",
                "measured": float(r["max_rss_mb"]),
                "predicted": cost.mem_mb,
                "load1": float(r["load1_before"]),
            }
        )
    for r in _fit_lines(data):
        m = int(r["d"]) + int(r["D"])
        pred = sum(fit_seconds(f, int(r["seeds"]), int(r["d"]), int(r["D"]), m) for f in _fit_row_fits(r))
        out.append(
            {
                "table": "transfer_fits",
                "name": f"{r['name']}:{r['downstream']}:{r['method']}:n={r['n']}",
                "what": "cpu_seconds",
                "measured": r["cpu_seconds"],
                "predicted": pred,
                "load1": float("nan"),
                "warmup": r["warmup"],
            }
        )
    return out


def report(data: Path = DEFAULT_DATA) -> str:
    rows = measured_vs_predicted(data)
    lines = [f"{'table':<14} {'name':<40} {'what':<8} {'measured':>10} {'predicted':>10} {'ratio':>6} {'load1':>5}"]
    for r in rows:
        if r["table"] == "transfer_fits":
            continue
        lines.append(
            f"{r['table']:<14} {r['name']:<40} {r['what']:<8} {r['measured']:>10.1f} "
            f"{r['predicted']:>10.1f} {r['predicted'] / r['measured']:>6.2f} {r['load1']:>5.2f}"
        )
    fits = [
        r["predicted"] / r["measured"]
        for r in rows
        if r["table"] == "transfer_fits" and r["measured"] >= 0.2 and not r["warmup"]
    ]
    if fits:
        lines.append(
            f"transfer_fits: {len(fits)} lines >= 0.2 s (first fit of a method in its job left out), "
            f"predicted/measured from {min(fits):.2f} to {max(fits):.2f}"
        )
    return "\n".join(lines)
