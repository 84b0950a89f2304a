"""The baselines, evaluated like the paper's model: logistic regression and group lasso on vec(X)
(scikit-learn, skglm), an MLP and a standard multi-head softmax transformer (torch, AdamW)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
import torch.nn.functional as F

from .fitting import Context, FitOutput, chunked, per_entry, per_seed, shared_settings
from .methods import method
from .methods._shared import net_steps


def fit_logreg(ctx, X, y, evals, hps, gens, start=None, online=None) -> FitOutput:
    """scikit-learn LogisticRegression (L2, lbfgs, intercept) on vec(X)."""
    from sklearn.linear_model import LogisticRegression

    def fit_one(s, Xs, ys):
        model = LogisticRegression(C=hps[s]["C"], max_iter=hps[s]["max_iter"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a separable small sample never "converges"; the fit is still used
            model.fit(Xs, ys)
        return model.decision_function, {}

    return per_seed(fit_one, X, y, evals)


def group_lasso_alpha(Xs: np.ndarray, d: int, D: int, alpha_scale: float) -> float:
    """alpha_scale * sigma (sqrt(d) + sqrt(2 log D)) / (2 sqrt(n)).

    At w = 0 the logistic gradient of a pure-noise group is X_g^T y / (2n), whose norm is
    about sigma sqrt(d) / (2 sqrt(n)); the largest of D such norms exceeds that by about
    sigma sqrt(2 log D) / (2 sqrt(n)). At this "universal threshold" noise groups stay out
    while a group carrying signal enters once n is large enough. sigma: the pooled std of X.
    """
    n = Xs.shape[0]
    sigma = float(Xs.std())
    return alpha_scale * sigma * (math.sqrt(d) + math.sqrt(2 * math.log(D))) / (2 * math.sqrt(n))


def fit_group_lasso(ctx, X, y, evals, hps, gens, start=None, online=None) -> FitOutput:
    """skglm group-lasso logistic regression on vec(X); groups = the D groups of d features."""
    from skglm import GeneralizedLinearEstimator
    from skglm.datafits import LogisticGroup
    from skglm.penalties import WeightedGroupL2
    from skglm.solvers import GroupBCD, GroupProxNewton
    from skglm.utils.data import grp_converter

    D, d = X.shape[2], X.shape[3]
    grp_indices, grp_ptr = grp_converter(d, D * d)

    def fit_one(s, Xs, ys):
        hp = hps[s]
        solver_cls = {"GroupBCD": GroupBCD, "GroupProxNewton": GroupProxNewton}[hp["solver"]]
        alpha = group_lasso_alpha(Xs, d, D, hp["alpha_scale"])
        model = GeneralizedLinearEstimator(
            datafit=LogisticGroup(grp_ptr=grp_ptr, grp_indices=grp_indices),
            penalty=WeightedGroupL2(alpha=alpha, weights=np.ones(D), grp_ptr=grp_ptr, grp_indices=grp_indices),
            solver=solver_cls(fit_intercept=True, tol=hp["tol"], max_iter=hp["max_iter"]),
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(np.ascontiguousarray(Xs), ys)
        coef, intercept = model.coef_.ravel().copy(), float(np.ravel(model.intercept_)[0])
        # skglm maps the labels to -1/+1 by sorted class; ours already are -1/+1 in that order
        selected = int(sum(np.any(coef[g * d : (g + 1) * d] != 0) for g in range(D)))
        return (lambda E: E @ coef + intercept), {"alpha": alpha, "groups_selected": selected}

    return per_seed(fit_one, X, y, evals)


def warm_up_group_lasso(solvers: tuple[str, ...] = ("GroupProxNewton",)) -> None:
    """Compile skglm's numba kernels on a small problem so that fit times exclude compilation."""
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(1, 32, 4, 3, generator=gen, dtype=torch.float64)
    y = torch.where(X[:, :, 0, 0] + 0.5 * torch.randn(1, 32, generator=gen, dtype=torch.float64) > 0, 1.0, -1.0)
    for solver in solvers:
        hp = method("group_lasso").defaults | {"solver": solver}
        fit_group_lasso(None, X, y, [X], [hp], [])


# -- torch nets on a seed axis, trained with AdamW ----------------------------------------


def _linear(gens, fan_in: int, fan_out: int, ctx: Context, bias: bool = True):
    """Per-seed weights (S, fan_in, fan_out) and bias (S, fan_out), initialised as torch.nn.Linear."""
    bound = 1.0 / math.sqrt(fan_in)
    W = torch.stack([(torch.rand(fan_in, fan_out, generator=g, dtype=torch.float64) * 2 - 1) * bound for g in gens])
    out = [W.to(ctx.device, ctx.dtype)]
    if bias:
        b = torch.stack([(torch.rand(fan_out, generator=g, dtype=torch.float64) * 2 - 1) * bound for g in gens])
        out.append(b.to(ctx.device, ctx.dtype))
    return out


def _apply(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """x (S, ..., k) @ W (S, k, p) + b (S, p), seed by seed."""
    S = x.shape[0]
    out = torch.bmm(x.reshape(S, -1, x.shape[-1]), W).reshape(*x.shape[:-1], W.shape[-1])
    if b is not None:
        out = out + b.reshape(S, *([1] * (x.dim() - 2)), -1)
    return out


def _train_net(ctx, net, params: dict[str, torch.Tensor], X, y, evals, hps, gens) -> FitOutput:
    """AdamW on the summed per-entry mean logistic losses, each entry with its own learning rate and
    weight decay (AdamW is elementwise: entries stay independent)."""
    X = X.to(ctx.device, ctx.dtype)
    y = y.to(ctx.device, ctx.dtype)
    S, n = y.shape
    hp = shared_settings(hps, "lr", "weight_decay")
    batch, steps = net_steps(n, hp)
    epochs = math.ceil(steps * batch / n)
    order = torch.stack([torch.cat([torch.randperm(n, generator=g) for _ in range(epochs)]) for g in gens])
    order = order.to(ctx.device)
    leaves = {k: t.requires_grad_(True) for k, t in params.items()}
    opt = _AdamW(list(leaves.values()), per_entry(hps, "lr", ctx, 0), per_entry(hps, "weight_decay", ctx, 0))
    rows = torch.arange(S, device=ctx.device)[:, None]
    for t in range(steps):
        idx = order[:, t * batch : (t + 1) * batch]
        f = net(leaves, X[rows, idx])
        loss = F.softplus(-y[rows, idx] * f).mean(-1).sum()
        grads = torch.autograd.grad(loss, list(leaves.values()))
        opt.step(grads)
    with torch.no_grad():
        return FitOutput([chunked(lambda E: net(leaves, E), E, ctx) for E in evals])


class _AdamW:
    """torch.optim.AdamW's update (betas 0.9, 0.999, eps 1e-8, decoupled weight decay), with a
    learning rate and weight decay per entry of the leading axis (tensors (S,))."""

    def __init__(
        self, params: list[torch.Tensor], lr: torch.Tensor, wd: torch.Tensor, betas=(0.9, 0.999), eps: float = 1e-8
    ):
        self.params, self.betas, self.eps, self.t = params, betas, eps, 0
        self.lr = [lr.reshape(-1, *([1] * (p.dim() - 1))) for p in params]
        self.decay = [
            1 - lr.reshape(-1, *([1] * (p.dim() - 1))) * wd.reshape(-1, *([1] * (p.dim() - 1))) for p in params
        ]
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def step(self, grads) -> None:
        b1, b2 = self.betas
        self.t += 1
        c1, c2 = 1 - b1**self.t, math.sqrt(1 - b2**self.t)
        torch._foreach_lerp_(self.m, list(grads), 1 - b1)
        torch._foreach_mul_(self.v, b2)
        torch._foreach_addcmul_(self.v, list(grads), list(grads), 1 - b2)
        torch._foreach_mul_(self.params, self.decay)
        denom = torch._foreach_div(torch._foreach_sqrt(self.v), c2)
        torch._foreach_add_(denom, self.eps)
        upd = torch._foreach_div(self.m, denom)
        torch._foreach_mul_(upd, self.lr)
        torch._foreach_add_(self.params, upd, alpha=-1.0 / c1)


def fit_mlp(ctx, X, y, evals, hps, gens, start=None, online=None) -> FitOutput:
    """ReLU MLP on vec(X): ``depth`` hidden layers of ``width``, a linear read-out."""
    hp = hps[0]
    S, n, D, d = X.shape
    dims = [D * d] + [hp["width"]] * hp["depth"] + [1]
    params = {}
    for i, (a, b) in enumerate(zip(dims, dims[1:])):
        params[f"W{i}"], params[f"b{i}"] = _linear(gens, a, b, ctx)
    layers = len(dims) - 1

    def net(p, Xb):
        h = Xb.reshape(*Xb.shape[:2], -1)
        for i in range(layers):
            h = _apply(h, p[f"W{i}"], p[f"b{i}"])
            if i < layers - 1:
                h = F.relu(h)
        return h[..., 0]

    return _train_net(ctx, net, params, X, y, evals, hps, gens)


def sinusoidal_positions(D: int, width: int) -> torch.Tensor:
    """The sine/cosine positions of Vaswani et al. (2017), (D, width)."""
    pos = torch.arange(D, dtype=torch.float64)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, width, 2, dtype=torch.float64) / width)
    P = torch.zeros(D, width, dtype=torch.float64)
    P[:, 0::2] = torch.sin(pos * freq)
    P[:, 1::2] = torch.cos(pos * freq)[:, : width // 2]
    return P


def encoder_layer(p: dict, prefix: str, x: torch.Tensor, heads: int) -> torch.Tensor:
    """One pre-norm transformer encoder layer on (S, B, T, h), seed by seed.

    The same computation as torch.nn.TransformerEncoderLayer(norm_first=True,
    activation="gelu", dropout=0) with weights transposed (tests check this); written out so
    that several seeds' parameters train as one batched computation.
    """
    S, B, T, h = x.shape
    a = F.layer_norm(x, (h,)) * p[f"{prefix}.ln1.w"][:, None, None] + p[f"{prefix}.ln1.b"][:, None, None]
    qkv = _apply(a, p[f"{prefix}.in.W"], p[f"{prefix}.in.b"]).reshape(S, B, T, 3, heads, h // heads)
    q, k, v = qkv.permute(3, 0, 1, 4, 2, 5).reshape(3, S * B, heads, T, h // heads).unbind(0)
    o = F.scaled_dot_product_attention(q, k, v)  # softmax(q k^T / sqrt(h/heads)) v
    o = o.reshape(S, B, heads, T, h // heads).permute(0, 1, 3, 2, 4).reshape(S, B, T, h)
    x = x + _apply(o, p[f"{prefix}.out.W"], p[f"{prefix}.out.b"])
    a = F.layer_norm(x, (h,)) * p[f"{prefix}.ln2.w"][:, None, None] + p[f"{prefix}.ln2.b"][:, None, None]
    hidden = F.gelu(_apply(a, p[f"{prefix}.ff1.W"], p[f"{prefix}.ff1.b"]))
    return x + _apply(hidden, p[f"{prefix}.ff2.W"], p[f"{prefix}.ff2.b"])


def fit_std_transformer(ctx, X, y, evals, hps, gens, start=None, online=None) -> FitOutput:
    """A standard softmax transformer from scratch: each group linearly embedded, positions added
    (learned, or fixed sinusoids), ``layers`` pre-norm multi-head encoder layers, a final
    LayerNorm, mean pooling over the D tokens, a linear read-out. Initialised as torch's modules.
    """
    S, n, D, d = X.shape
    hp = hps[0]
    h, ff, heads = hp["width"], hp["ff_width"], hp["heads"]
    params = {}
    params["embed.W"], params["embed.b"] = _linear(gens, d, h, ctx)
    if hp["positions"] == "learned":
        pos = torch.stack([0.02 * torch.randn(D, h, generator=g, dtype=torch.float64) for g in gens])
        params["pos"] = pos.to(ctx.device, ctx.dtype)
        positions = None
    else:
        positions = sinusoidal_positions(D, h).to(ctx.device, ctx.dtype)
    ones = torch.ones(S, h, dtype=ctx.dtype, device=ctx.device)
    for layer in range(hp["layers"]):
        pre = f"layer{layer}"
        xavier = math.sqrt(6.0 / (h + 3 * h))  # torch.nn.MultiheadAttention: xavier_uniform_ on (3h, h)
        W_in = torch.stack([(torch.rand(h, 3 * h, generator=g, dtype=torch.float64) * 2 - 1) * xavier for g in gens])
        params[f"{pre}.in.W"] = W_in.to(ctx.device, ctx.dtype)
        params[f"{pre}.in.b"] = torch.zeros(S, 3 * h, dtype=ctx.dtype, device=ctx.device)
        params[f"{pre}.out.W"] = _linear(gens, h, h, ctx, bias=False)[0]
        params[f"{pre}.out.b"] = torch.zeros(S, h, dtype=ctx.dtype, device=ctx.device)
        params[f"{pre}.ff1.W"], params[f"{pre}.ff1.b"] = _linear(gens, h, ff, ctx)
        params[f"{pre}.ff2.W"], params[f"{pre}.ff2.b"] = _linear(gens, ff, h, ctx)
        for ln in ("ln1", "ln2"):
            params[f"{pre}.{ln}.w"], params[f"{pre}.{ln}.b"] = ones.clone(), torch.zeros_like(ones)
    params["final_ln.w"], params["final_ln.b"] = ones.clone(), torch.zeros_like(ones)
    params["head.W"], params["head.b"] = _linear(gens, h, 1, ctx)

    def net(p, Xb):
        z = _apply(Xb, p["embed.W"], p["embed.b"])
        z = z + (p["pos"][:, None] if positions is None else positions)
        for layer in range(hp["layers"]):
            z = encoder_layer(p, f"layer{layer}", z, heads)
        z = F.layer_norm(z, (h,)) * p["final_ln.w"][:, None, None] + p["final_ln.b"][:, None, None]
        return _apply(z.mean(2), p["head.W"], p["head.b"])[..., 0]

    return _train_net(ctx, net, params, X, y, evals, hps, gens)
