"""The paper's model as a transfer method: online SGD from the pretrained (or a fresh) start, with
the average online error of its iterates, and the converged probe of the pretrained features."""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
import torch.nn.functional as F

from ..model.transformer import attention_scores, embed, forward, init_params, loss_and_grads_closed_form, token_width
from .fitting import EVAL_CHUNK, Context, FitOutput, OnlineEval, chunked, per_entry, per_seed, shared_settings


def online_iterates(n: int, points: int) -> list[int]:
    """Iterates t (parameters after t updates, t = 0 .. n-1) whose test error is measured:
    all of them when n <= points, else t = 0, n-1 and log-spaced t in between (``points`` at most)."""
    if n <= points:
        return list(range(n))
    grid = np.unique(np.round(np.geomspace(1, n - 1, points - 1)).astype(int))
    return [0] + [int(t) for t in grid]


def average_online_error(ts: list[int], errors: np.ndarray, n: int) -> np.ndarray:
    """(1/n) sum_{t=0}^{n-1} e(t) from e at the measured iterates ``ts`` (errors (len(ts), S)),
    e linearly interpolated in t between them (exact when every iterate is measured)."""
    full = np.stack([np.interp(np.arange(n), ts, errors[:, s]) for s in range(errors.shape[1])], axis=1)
    return full.mean(0)


def features(params: dict, Z: torch.Tensor, ms) -> torch.Tensor:
    """u(X) = df/dv, (S, B, m): f = v . u(X) with u = sum_i r_i z_i (r: the read-out attention's
    row sums over queries, z_i the last layer's input tokens); for the paper model u = Z S 1."""
    for layer in range(ms.layers - 1):
        attn = torch.softmax(attention_scores(params, layer, Z, ms), dim=-2)
        Z = Z + attn.transpose(-1, -2) @ Z
    attn = torch.softmax(attention_scores(params, ms.layers - 1, Z, ms), dim=-2)
    return (Z * attn.sum(-1)[..., None]).sum(-2)


def step_scale(params: dict, Z: torch.Tensor, ms) -> torch.Tensor:
    """mean_i |u(X_i)|^2 per entry (S,), at ``params``: 1 / it is the per-sample stability scale of a
    step in v (the logistic loss has curvature <= |u|^2 / 4 along v)."""
    with torch.no_grad():
        return torch.cat(
            [
                (features({k: t[s : s + 1] for k, t in params.items()}, Z[s : s + 1], ms) ** 2).sum(-1).mean(-1)
                for s in range(Z.shape[0])
            ]
        )


def _paper_sgd(
    ctx: Context, X, y, evals, hps, gens, params, trainable: tuple[str, ...], online: OnlineEval | None = None
) -> FitOutput:
    """``passes`` passes of online SGD, one sample per step, each entry with its own step size.

    Step: ``eta_rel`` / mean_i |u(X_i)|^2 over the entry's n samples at its starting parameters
    when ``eta_rel`` is set, else ``eta``. Pass 1 visits the samples in their drawn (i.i.d.)
    order; later passes in a fresh permutation from each entry's generator. Entries are
    independent batch entries. With ``online``, the iterates of pass 1 (t = 0 .. n-1 updates)
    are scored on its test batch and their average error is returned (``average_online_error``).
    """
    ms = ctx.run_spec.model
    Z = embed(X.to(ctx.device, ctx.dtype), ms)
    yy = y.to(ctx.device, ctx.dtype)
    S, n = yy.shape
    params = {k: t.to(ctx.device, ctx.dtype).clone() for k, t in params.items()}
    v_start = params["v"].to("cpu", torch.float64)
    hp = shared_settings(hps, "eta", "eta_rel")
    closed_form = ms.is_paper_model
    scale = 1.0 / math.sqrt(Z.shape[-1]) if ms.score_scale == "sqrt" else 1.0
    extras = [{} for _ in range(S)]
    if all(h["eta_rel"] is not None for h in hps):
        u2 = step_scale(params, Z, ms)
        eta = per_entry(hps, "eta_rel", ctx)[:, 0] / u2
        for s in range(S):
            extras[s] = {"eta": float(eta[s]), "u_sq_mean": float(u2[s])}
    elif any(h["eta_rel"] is not None for h in hps):
        raise ValueError("a batch mixes absolute and relative step sizes")
    else:
        eta = per_entry(hps, "eta", ctx)[:, 0]
    etas = {k: eta.reshape(-1, *([1] * (params[k].dim() - 1))) for k in trainable}
    rows = torch.arange(S, device=ctx.device)[:, None]
    measure, errs = [], []
    if online is not None:
        measure = online_iterates(n, online.points)
        Z_on = embed(online.X.to(ctx.device, ctx.dtype), ms)
        y_on = online.y.to(ctx.device, ctx.dtype)
    next_m = 0
    for p in range(hp["passes"]):
        Zp, yp = Z, yy
        if p > 0:
            perm = torch.stack([torch.randperm(n, generator=g) for g in gens]).to(ctx.device)
            Zp, yp = Z[rows, perm], yy[rows, perm]
        for t in range(n):
            if p == 0 and next_m < len(measure) and measure[next_m] == t:
                with torch.no_grad():
                    f_on = forward(params, Z_on, ms)[0]
                errs.append(((y_on * f_on) <= 0).to(torch.float64).mean(-1).cpu().numpy())
                next_m += 1
            grads = _sgd_grads(params, Zp[:, t : t + 1], yp[:, t : t + 1], ms, closed_form, scale, trainable)
            for k in trainable:
                params[k] = params[k] - etas[k] * grads[k]
    out = FitOutput(
        [chunked(lambda E: forward(params, embed(E, ms), ms)[0], E, ctx) for E in evals],
        [None] * S,
        extras,
        readout=(v_start, params["v"].detach().to("cpu", torch.float64)),
    )
    if online is not None:
        out.online = [float(e) for e in average_online_error(measure, np.stack(errs), n)]
    return out


def _sgd_grads(params, Z, y, ms, closed_form: bool, scale: float, trainable):
    if closed_form:
        _, gW, gv, _, _ = loss_and_grads_closed_form(params["layer0.W"], params["v"], Z, y, scale)
        return {"layer0.W": gW, "v": gv}
    leaves = {k: t.detach().requires_grad_(k in trainable) for k, t in params.items()}
    f, _ = forward(leaves, Z, ms)
    loss = F.softplus(-y * f).mean(-1).sum()  # seeds are independent: the sum separates them
    grads = torch.autograd.grad(loss, [leaves[k] for k in trainable])
    return dict(zip(trainable, grads))


def fit_pretrained_sgd(ctx, X, y, evals, hps, gens, start, online=None) -> FitOutput:
    """Online SGD from the pretrained W; v from the checkpoint or 0 (``v_start``); every parameter
    updated or v only (``train``). The output records v at the start and fitted (``readout``)."""
    shared = shared_settings(hps, "eta", "eta_rel")
    params = start | {"v": torch.zeros_like(start["v"])} if shared["v_start"] == "zero" else start
    trainable = tuple(start) if shared["train"] == "W_and_v" else ("v",)
    return _paper_sgd(ctx, X, y, evals, hps, gens, params, trainable, online)


def fit_scratch_transformer(ctx, X, y, evals, hps, gens, start=None, online=None) -> FitOutput:
    """The same model and SGD protocol from the run's initialisation (zero in the paper)."""
    ms, ts = ctx.run_spec.model, ctx.run_spec.task
    m = token_width(ms, ts.d, ts.D)
    params = init_params(ms, X.shape[0], m, gens if ms.init == "random" else None, ctx.dtype, ctx.device)
    return _paper_sgd(ctx, X, y, evals, hps, gens, params, tuple(params), online)


def fit_pretrained_probe(ctx, X, y, evals, hps, gens, start, online=None) -> FitOutput:
    """scikit-learn L2 LogisticRegression (lbfgs, intercept) on u(X) = Z S 1 at the pretrained W:
    v fitted to convergence with the attention frozen (float64 features)."""
    from sklearn.linear_model import LogisticRegression

    ms = ctx.run_spec.model
    params = {k: t.to("cpu", torch.float64) for k, t in start.items()}

    def feats(E):  # (S, m, D, d) -> (S, m, width), chunked
        with torch.no_grad():
            return torch.cat(
                [
                    features(params, embed(E[:, lo : lo + EVAL_CHUNK].to(torch.float64), ms), ms)
                    for lo in range(0, E.shape[1], EVAL_CHUNK)
                ],
                dim=1,
            )

    U, U_evals = feats(X), [feats(E) for E in evals]

    def fit_one(s, Us, ys):
        model = LogisticRegression(C=hps[s]["C"], max_iter=hps[s]["max_iter"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(Us, ys)
        return model.decision_function, {}

    return per_seed(fit_one, U, y, U_evals, flat=False)


# -- linear models on vec(X) ---------------------------------------------------------------
