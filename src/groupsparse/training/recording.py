"""What pretraining records: the recording grid, and the Trainer's evaluation, per-step metrics
(loss, accuracy, attention on j* averaged and minimised over queries, v and W norms) and attention
matrices. A mixin of :class:`groupsparse.training.pretrain.Trainer`, kept apart so each file does one job."""

from __future__ import annotations

import numpy as np
import torch

from ..config.specs import RunSpec
from ..model import dispatch, fastpath, population
from ..model.transformer import forward, logistic_loss

N_LOG_STEPS = 40
POP_COLUMNS = [f"pop_{name}" for name in population.COEFFICIENTS]


def record_steps(steps: int, every: int) -> list[int]:
    regular = set(range(0, steps + 1, every))
    logs = {int(round(x)) for x in np.geomspace(1, steps, N_LOG_STEPS)} if steps >= 1 else set()
    return sorted(regular | logs | {0, steps})


def attention_steps(steps: int, count: int) -> list[int]:
    if count == 1:
        return [steps]
    logs = {int(round(x)) for x in np.geomspace(1, steps, count - 1)}
    return sorted(logs | {0})


def _effective_W(params, spec: RunSpec, layer: int) -> torch.Tensor:
    if spec.model.attention == "merged":
        return params[f"layer{layer}.W"]
    return params[f"layer{layer}.WK"].transpose(1, 2) @ params[f"layer{layer}.WQ"]


def _attention_per_query(mean_attn: torch.Tensor, relevant: torch.Tensor) -> torch.Tensor:
    """The mass each query puts on the relevant keys, averaged over samples: S[j*, j]. (S, query)

    From the attention averaged over samples, mean_attn (S, key, query): averaging commutes
    with the sum over the relevant keys.
    """
    idx = relevant[:, :, None].expand(-1, -1, mean_attn.shape[-1])
    return mean_attn.gather(1, idx).sum(1)


class Recording:
    """Evaluation and metrics of a :class:`~groupsparse.training.pretrain.Trainer` (uses its attributes)."""

    # -- recording ------------------------------------------------------------------
    def eval_forward(self):
        """Outputs f (S, N) and the attention averaged over samples (S, key, query) on the evaluation set.

        The paper model goes through the fast path (same numbers as model.forward up to
        rounding, a few times faster): the evaluation runs at ~100 recorded steps per run.
        """
        if not self.closed_form:
            f, attn = forward(self.params, self.Z_eval, self.spec.model)
            return f, attn.mean(1)
        if getattr(self, "_eval_features", None) is None:
            d, N = self.spec.task.d, self.Z_eval.shape[1]
            X = self.Z_eval[..., :d]
            mirrored = N % 2 == 0 and torch.equal(X[:, N // 2 :], -X[:, : N // 2])
            self._eval_mirrored = mirrored
            self._eval_features = [fastpath.batch_inner(X[s, : N // 2] if mirrored else X[s]) for s in range(len(X))]
            self._eval_samples = [(X[s, : N // 2] if mirrored else X[s]).contiguous() for s in range(len(X))]
        W, v = self.params["layer0.W"], self.params["v"]

        def one(s):
            return dispatch.seed_forward(
                self.plan,
                W[s],
                v[s],
                self._eval_features[s],
                self._eval_samples[s],
                self.positions,
                self.scale,
                self._eval_mirrored,
            )

        fs, means = zip(*self.workers.map(one, len(self.seeds)))
        return torch.stack(fs), torch.stack(means)

    @torch.no_grad()
    def metrics(self, step: int, train_loss: torch.Tensor, active: torch.Tensor) -> list[dict]:
        f, mean_attn = self.eval_forward()
        eval_loss = logistic_loss(f, self.y_eval)
        # a tie (f = 0, as at the zero start) is a coin flip: it counts 1/2, so step 0 is at chance
        acc = ((1 + torch.sign(f) * self.y_eval) / 2).to(torch.float64).mean(-1)
        per_query = _attention_per_query(mean_attn, self.relevant)
        mass, mass_min = per_query.mean(-1), per_query.min(-1).values
        pooled = self._pooled_min(per_query) if self.coef is not None else torch.full_like(mass_min, float("nan"))
        d = self.spec.task.d
        v = self.params["v"]
        v1, v2 = v[:, :d], v[:, d:]
        if self.v_star is None:
            cos = torch.full((v1.shape[0],), float("nan"), dtype=v1.dtype, device=v1.device)
        else:
            cos = (v1 * self.v_star).sum(-1) / v1.norm(dim=-1).clamp_min(1e-30)
        W = _effective_W(self.params, self.spec, self.spec.model.layers - 1)
        concat = self.spec.model.positions == "concat"
        nan = torch.full_like(cos, float("nan"))
        blocks = {
            "W_ff_norm": W[:, :d, :d].flatten(1).norm(dim=1),
            "W_fp_norm": W[:, :d, d:].flatten(1).norm(dim=1) if concat else nan,
            "W_pf_norm": W[:, d:, :d].flatten(1).norm(dim=1) if concat else nan,
            "W_pp_norm": W[:, d:, d:].flatten(1).norm(dim=1) if concat else nan,
        }
        coef = self.coef.cpu() if self.coef is not None else None
        rows = []
        for i, seed in enumerate(self.seeds):
            if not bool(active[i]):
                continue
            rows.append(
                {
                    "seed": seed,
                    "step": step,
                    "eta": float(self.eta),
                    "flow_time": float(self.eta) * step,  # tau = eta x steps: steps at another eta compare in it
                    "train_loss": float(train_loss[i]),
                    "eval_loss": float(eval_loss[i]),
                    "eval_accuracy": float(acc[i]),
                    "attention_on_relevant": float(mass[i]),
                    "attention_min_on_relevant": float(mass_min[i]),
                    "attention_min_pooled": float(pooled[i]),
                    "cos_v1_vstar": float(cos[i]),
                    "v1_norm": float(v1[i].norm()),
                    "v2_norm": float(v2[i].norm()) if concat else float("nan"),
                    **{k: float(t[i]) for k, t in blocks.items()},
                    # population mode's state (docs/STUDY.md section 3.3); NaN for every other run
                    **{k: float(coef[i, c]) if coef is not None else float("nan") for c, k in enumerate(POP_COLUMNS)},
                }
            )
        return rows

    def _pooled_min(self, per_query: torch.Tensor) -> torch.Tensor:
        """Population mode: min(S[j*, j*], the mean over the other queries of S[j*, j]) (S,).

        On the invariant subspace every query j != j* has the same expected attention on j*, so their
        pooled mean estimates it with the D - 1 queries' evaluation noise averaged, and the minimum of
        two estimates has less of the downward bias that the minimum over D noisy ones has."""
        D = per_query.shape[-1]
        star = torch.tensor([t.j_star for t in self.tasks], device=per_query.device)
        own = per_query.gather(1, star[:, None])[:, 0]
        others = (per_query.sum(-1) - own) / (D - 1)
        return torch.minimum(own, others)

    @torch.no_grad()
    def mean_attention(self, step: int, active: torch.Tensor) -> list[dict]:
        _, mean = self.eval_forward()
        mean = mean.cpu().double()  # (S, D, D) [key, query]
        D = mean.shape[-1]
        rows = []
        for i, seed in enumerate(self.seeds):
            if not bool(active[i]):
                continue
            for key in range(D):
                for query in range(D):
                    rows.append(
                        {"seed": seed, "step": step, "key": key, "query": query, "mass": float(mean[i, key, query])}
                    )
        return rows
