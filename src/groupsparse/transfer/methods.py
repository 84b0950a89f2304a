"""The compared methods: one fit function each, and the registry ``METHODS``.

Every method fits a batch of entries at once on tensors with a leading entry axis,
X (S, n, D, d) float64 and y (S, n) in {-1, +1}, with one hyperparameter setting per entry
(``hps``, a list of S dicts: an entry is a seed, or a (grid point, fold, seed) of the
cross-validation), and returns its real-valued output f (the logit; predicted label sign(f))
on each set in ``evals`` (each (S, m, D, d)), as float64 CPU tensors (S, m). The torch methods
let only the step size (eta / eta_rel; lr / weight_decay) differ across entries. ``gens`` holds
each entry's own generator (initialisation, sample order). An entry a library cannot fit
(e.g. one class only in its n samples) gets NaN outputs and its reason in ``errors``. The
online-SGD methods, given ``online``, also return each entry's average online error.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ..model import _scores, embed, forward, init_params, loss_and_grads_closed_form, token_width
from ..specs import RunSpec
from .spec import DEFAULT_HYPERPARAMETERS
from .spec import METHODS as METHOD_NAMES

DEFAULT_GROUP_LASSO = DEFAULT_HYPERPARAMETERS["group_lasso"]

EVAL_CHUNK = 2048


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


@dataclass(frozen=True)
class Method:
    fit: Callable[..., FitOutput]
    uses_pretrained: bool = False
    description: str = ""


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


def _shared(hps: list[dict], *exclude: str) -> dict:
    """The settings every entry shares (all but ``exclude``); refuses a batch that mixes them."""
    first = {k: v for k, v in hps[0].items() if k not in exclude}
    for hp in hps[1:]:
        rest = {k: v for k, v in hp.items() if k not in exclude}
        if rest != first:
            raise ValueError(f"a batch of entries must share every setting but {exclude}: {first} != {rest}")
    return first


# -- the paper's transformer: online SGD (pretrained, frozen-W or from scratch) ----------


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
        attn = torch.softmax(_scores(params, layer, Z, ms), dim=-2)
        Z = Z + attn.transpose(-1, -2) @ Z
    attn = torch.softmax(_scores(params, ms.layers - 1, Z, ms), dim=-2)
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
    hp = _shared(hps, "eta", "eta_rel")
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
        [_chunked(lambda E: forward(params, embed(E, ms), ms)[0], E, ctx) for E in evals], [None] * S, extras
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


def _start(start: dict, hps: list[dict]) -> dict:
    """The pretrained parameters, with v zeroed if ``v_start == "zero"``."""
    if _shared(hps, "eta", "eta_rel")["v_start"] == "zero":
        return start | {"v": torch.zeros_like(start["v"])}
    return start


def fit_pretrained_finetune(ctx, X, y, evals, hps, gens, start, online=None) -> FitOutput:
    """All parameters (W, v) fine-tuned by online SGD from the pretrained W (v: pretrained or 0)."""
    return _paper_sgd(ctx, X, y, evals, hps, gens, _start(start, hps), tuple(start), online)


def fit_pretrained_frozen_W(ctx, X, y, evals, hps, gens, start, online=None) -> FitOutput:
    """Only the value vector v is fine-tuned (from the pretrained v or 0); the attention stays."""
    return _paper_sgd(ctx, X, y, evals, hps, gens, _start(start, hps), ("v",), online)


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

    return _per_seed(fit_one, U, y, U_evals, flat=False)


# -- linear models on vec(X) ---------------------------------------------------------------


def _flat(X: torch.Tensor) -> np.ndarray:
    """vec(X) per sample: (n, D*d), group j in columns j*d .. (j+1)*d - 1."""
    return X.reshape(X.shape[0], -1).numpy()


def _per_seed(fit_one, X, y, evals, flat: bool = True) -> FitOutput:
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


def fit_logreg(ctx, X, y, evals, hps, gens, start=None, online=None) -> FitOutput:
    """scikit-learn LogisticRegression (L2, lbfgs, intercept) on vec(X)."""
    from sklearn.linear_model import LogisticRegression

    def fit_one(s, Xs, ys):
        model = LogisticRegression(C=hps[s]["C"], max_iter=hps[s]["max_iter"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a separable small sample never "converges"; the fit is still used
            model.fit(Xs, ys)
        return model.decision_function, {}

    return _per_seed(fit_one, X, y, evals)


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

    return _per_seed(fit_one, X, y, evals)


def warm_up_group_lasso(solvers: tuple[str, ...] = ("GroupProxNewton",)) -> None:
    """Compile skglm's numba kernels on a small problem so that fit times exclude compilation."""
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(1, 32, 4, 3, generator=gen, dtype=torch.float64)
    y = torch.where(X[:, :, 0, 0] + 0.5 * torch.randn(1, 32, generator=gen, dtype=torch.float64) > 0, 1.0, -1.0)
    for solver in solvers:
        hp = DEFAULT_GROUP_LASSO | {"solver": solver}
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


def net_steps(n: int, hp: dict) -> tuple[int, int]:
    """(batch, steps): minibatches of min(batch, n); steps = clamp(ceil(epochs n / batch), min, max)."""
    batch = min(hp["batch"], n)
    steps = math.ceil(hp["epochs"] * n / batch)
    return batch, max(hp["min_steps"], min(hp["max_steps"], steps))


def _train_net(ctx, net, params: dict[str, torch.Tensor], X, y, evals, hps, gens) -> FitOutput:
    """AdamW on the summed per-entry mean logistic losses, each entry with its own learning rate and
    weight decay (AdamW is elementwise: entries stay independent)."""
    X = X.to(ctx.device, ctx.dtype)
    y = y.to(ctx.device, ctx.dtype)
    S, n = y.shape
    hp = _shared(hps, "lr", "weight_decay")
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
        return FitOutput([_chunked(lambda E: net(leaves, E), E, ctx) for E in evals])


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


def _chunked(fn, E: torch.Tensor, ctx: Context) -> torch.Tensor:
    """fn over the eval set in chunks of samples; float64 CPU output (S, m)."""
    outs = []
    with torch.no_grad():
        for lo in range(0, E.shape[1], EVAL_CHUNK):
            outs.append(fn(E[:, lo : lo + EVAL_CHUNK].to(ctx.device, ctx.dtype)).to("cpu", torch.float64))
    return torch.cat(outs, dim=1) if outs else torch.zeros(E.shape[0], 0, dtype=torch.float64)


METHODS: dict[str, Method] = {
    "pretrained_finetune": Method(fit_pretrained_finetune, True, "pretrained W, v; all fine-tuned by online SGD"),
    "pretrained_finetune_v0": Method(
        fit_pretrained_finetune, True, "pretrained W, v reset to 0; all fine-tuned by online SGD"
    ),
    "pretrained_frozen_W": Method(fit_pretrained_frozen_W, True, "pretrained W frozen; v fine-tuned by online SGD"),
    "pretrained_frozen_W_v0": Method(fit_pretrained_frozen_W, True, "pretrained W frozen; v from 0 by online SGD"),
    "pretrained_probe": Method(
        fit_pretrained_probe, True, "pretrained W frozen; L2 logistic regression on u(X) = Z S 1"
    ),
    "scratch_transformer": Method(fit_scratch_transformer, False, "the paper's model from its init, online SGD"),
    "logreg": Method(fit_logreg, False, "scikit-learn L2 logistic regression on vec(X)"),
    "group_lasso": Method(fit_group_lasso, False, "skglm group-lasso logistic regression on vec(X), D groups"),
    "mlp": Method(fit_mlp, False, "torch ReLU MLP on vec(X), AdamW"),
    "std_transformer": Method(fit_std_transformer, False, "standard multi-head softmax transformer, AdamW"),
}
assert tuple(METHODS) == METHOD_NAMES, "methods.METHODS must list spec.METHODS in order"
