"""What every transfer method shares: the batch of entries it fits (Context), its outputs
(FitOutput), the online-error request (OnlineEval), and helpers
for per-entry settings and chunked evaluation. See :mod:`.methods` for the conventions."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ..config.specs import RunSpec

EVAL_CHUNK = 2048
READOUT_COLUMNS = ("cos_v1_new_start", "cos_v1_new", "cos_v1_old")  # the paper model's read-out alignment


@dataclass
class Context:
    run_spec: RunSpec
    device: torch.device
    dtype: torch.dtype


@dataclass
class FitOutput:
    outputs: list[torch.Tensor]  # one (S, m) float64 tensor per eval set
    errors: list[str | None] = field(default_factory=list)  # per entry: why it could not be fitted
    extras: list[dict] = field(default_factory=list)  # per entry: data-dependent settings (recorded)
    online: list[float] | None = None  # per entry: average online error (online SGD)
    # the paper's model: its read-out v at the start and fitted, (S, m) float64 each (the runner
    # records their alignment with the downstream direction: the fine-tuning mechanism's test)
    readout: tuple[torch.Tensor, torch.Tensor] | None = None


@dataclass(frozen=True)
class OnlineEval:
    """The fixed test batch that scores the online iterates, and how many iterates to score."""

    X: torch.Tensor  # (S, m, D, d)
    y: torch.Tensor  # (S, m)
    points: int


def per_entry(hps: list[dict], key: str, ctx: Context, shape_like: int = 1) -> torch.Tensor:
    """The values of ``key`` across the batch entries, as a (S, 1, ..., 1) tensor (``shape_like`` ones)."""
    return torch.tensor([float(hp[key]) for hp in hps], dtype=ctx.dtype, device=ctx.device).reshape(
        -1, *([1] * shape_like)
    )


def shared_settings(hps: list[dict], *exclude: str) -> dict:
    """The settings every entry shares (all but ``exclude``); refuses a batch that mixes them."""
    first = {k: v for k, v in hps[0].items() if k not in exclude}
    for hp in hps[1:]:
        rest = {k: v for k, v in hp.items() if k not in exclude}
        if rest != first:
            raise ValueError(f"a batch of entries must share every setting but {exclude}: {first} != {rest}")
    return first


# -- the paper's transformer: online SGD (pretrained, frozen-W or from scratch) ----------


def chunked(fn, E: torch.Tensor, ctx: Context) -> torch.Tensor:
    """fn over the eval set in chunks of samples; float64 CPU output (S, m)."""
    outs = []
    with torch.no_grad():
        for lo in range(0, E.shape[1], EVAL_CHUNK):
            outs.append(fn(E[:, lo : lo + EVAL_CHUNK].to(ctx.device, ctx.dtype)).to("cpu", torch.float64))
    return torch.cat(outs, dim=1) if outs else torch.zeros(E.shape[0], 0, dtype=torch.float64)


def _flat(X: torch.Tensor) -> np.ndarray:
    """vec(X) per sample: (n, D*d), group j in columns j*d .. (j+1)*d - 1."""
    return X.reshape(X.shape[0], -1).numpy()


def per_seed(fit_one, X, y, evals, flat: bool = True) -> FitOutput:
    """Fit each entry separately with a scikit-learn-style estimator; decision values on evals.

    ``fit_one(s, Xs, ys)`` returns (decision function, dict of data-dependent settings); the
    inputs are vec(X) per sample (``flat``) or X's rows as they are (features (S, n, k)).
    """
    prep = _flat if flat else (lambda A: A.numpy())
    outs = [torch.full(E.shape[:2], float("nan"), dtype=torch.float64) for E in evals]
    errors: list[str | None] = []
    extras: list[dict] = []
    for s in range(X.shape[0]):
        Xs, ys = prep(X[s]), y[s].numpy()
        extras.append({})
        if len(np.unique(ys)) < 2:
            errors.append(f"all {len(ys)} training labels are {int(ys[0]):+d}: a classifier needs both classes")
            continue
        try:
            decision, extras[-1] = fit_one(s, Xs, ys)
        except (ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        errors.append(None)
        for out, E in zip(outs, evals):
            out[s] = torch.from_numpy(np.asarray(decision(prep(E[s])), dtype=np.float64))
    return FitOutput(outs, errors, extras)


def readout_alignment(out: FitOutput, tasks, bases, d: int) -> list[dict]:
    """Per entry: cos(v1, new v*) of the read-out's feature block v1 = v[:d] at the start and
    fitted, and the fitted v1's cos with the pretraining v* (NaN without a read-out, a synthetic
    direction, or where v1 = 0: the zero start)."""
    if out.readout is None:
        return [dict.fromkeys(READOUT_COLUMNS, math.nan) for _ in tasks]

    def cos(v: torch.Tensor, task) -> float:
        direction = getattr(task, "directions", None)
        norm = float(v.norm())
        return math.nan if direction is None or norm == 0.0 else float(v @ direction[0]) / norm

    start, fitted = (v[:, :d] for v in out.readout)
    return [
        {
            "cos_v1_new_start": cos(start[j], task),
            "cos_v1_new": cos(fitted[j], task),
            "cos_v1_old": cos(fitted[j], base),
        }
        for j, (task, base) in enumerate(zip(tasks, bases))
    ]
