"""What pretraining records, and when: the recording grid, the evaluation set, the per-step metrics
(loss, accuracy, attention on j* averaged and minimised over queries, v and W norms), the mean attention
matrices at the attention checkpoints, and the tables they become.

The evaluation set is i.i.d. (an antithetic one, X with -X, gives each mirrored pair identical attention
and accuracy, halving its effective size), drawn once from a generator per seed ("eval"); image tasks
evaluate on held-out test images.
"""

from __future__ import annotations

import bisect

import numpy as np
import pandas as pd
import torch

from ..config.seeding import task_identity, torch_generator
from ..config.specs import RunSpec
from ..model import dispatch, fastpath, population
from ..model.transformer import embed, forward, logistic_loss
from .batches import Batches
from .divergence import Divergence

N_LOG_STEPS = 40
POP_COLUMNS = [f"pop_{name}" for name in population.COEFFICIENTS]
ATT_COLUMNS = ["seed", "step", "key", "query", "mass"]


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


class Recorder:
    """Evaluates the descent rule's current point on the evaluation set and keeps the rows: ``record`` at the
    steps of the recording grid and the attention checkpoints, ``tables`` at the end."""

    def __init__(
        self,
        spec: RunSpec,
        seeds: list[int],
        tasks: list,
        rule,
        plan: dispatch.Plan,
        positions: torch.Tensor | None,
        scale: float,
        batches: Batches,
    ):
        """``rule``: the descent rule whose point is recorded (``rule.DescentRule``); ``batches``: the training
        samples, whose precision, device and workers the evaluation shares."""
        self.spec, self.seeds, self.tasks, self.rule, self.plan = spec, seeds, tasks, rule, plan
        self.positions, self.scale, self.workers = positions, scale, batches.workers
        dtype, device = batches.dtype, batches.device
        p = spec.pretrain
        self.record_at = set(record_steps(p.steps, p.record_every))
        self.attention_at = set(attention_steps(p.steps, p.attention_checkpoints))
        self.events = sorted(self.record_at | self.attention_at | {p.steps})
        self.rows: list[dict] = []
        self.attention_rows: list[dict] = []
        self.relevant = torch.stack([t.relevant for t in tasks]).to(device)
        v_stars = [getattr(t, "v_star", None) for t in tasks]  # image tasks have no v*
        self.v_star = None if any(v is None for v in v_stars) else torch.stack(v_stars).to(device, dtype)
        gen_device = device if all(getattr(t, "draws_on_device", False) for t in tasks) else "cpu"
        eval_gens = [torch_generator(*task_identity(spec, s), "eval", device=gen_device) for s in seeds]
        eval_kw = {"antithetic": False, "split": "test"}  # a task of a kind with one law ignores the split
        Xe, ye = zip(
            *[
                t.sample(p.eval_size, g, **eval_kw, dtype=dtype, device=device, **batches.draw_kw)
                for t, g in zip(tasks, eval_gens)
            ]
        )
        self.Z_eval, self.y_eval = embed(torch.stack(Xe), spec.model), torch.stack(ye)
        self._eval_features = None  # the closed form's evaluation inputs, built at the first record

    def next_event(self, step: int) -> int:
        """The first step after ``step`` that records anything, or the run's end."""
        return self.events[bisect.bisect_right(self.events, step)]

    def record(self, step: int, train_loss: torch.Tensor, active: torch.Tensor) -> None:
        """The rows of step ``step`` (of the ``active`` seeds) where the grids record it."""
        if step in self.record_at:
            self.rows += self.metrics(step, train_loss, active)
        if step in self.attention_at:
            self.attention_rows += self.mean_attention(step, active)

    def eval_forward(self):
        """Outputs f (S, N) and the attention averaged over samples (S, key, query) on the evaluation set.

        The paper model goes through the fast path (same numbers as model.forward up to
        rounding, a few times faster): the evaluation runs at ~100 recorded steps per run.
        """
        params = self.rule.parameters()
        if not self.plan.closed_form:
            f, attn = forward(params, self.Z_eval, self.spec.model)
            return f, attn.mean(1)
        if self._eval_features is None:
            d, N = self.spec.task.d, self.Z_eval.shape[1]
            X = self.Z_eval[..., :d]
            mirrored = N % 2 == 0 and torch.equal(X[:, N // 2 :], -X[:, : N // 2])
            self._eval_mirrored = mirrored
            self._eval_features = [fastpath.batch_inner(X[s, : N // 2] if mirrored else X[s]) for s in range(len(X))]
            self._eval_samples = [(X[s, : N // 2] if mirrored else X[s]).contiguous() for s in range(len(X))]
        W, v = params["layer0.W"], params["v"]

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
        coef, eta = self.rule.coef, float(self.rule.eta)
        pooled = self._pooled_min(per_query) if coef is not None else torch.full_like(mass_min, float("nan"))
        d = self.spec.task.d
        params = self.rule.parameters()
        v = params["v"]
        v1, v2 = v[:, :d], v[:, d:]
        if self.v_star is None:
            cos = torch.full((v1.shape[0],), float("nan"), dtype=v1.dtype, device=v1.device)
        else:
            cos = (v1 * self.v_star).sum(-1) / v1.norm(dim=-1).clamp_min(1e-30)
        W = _effective_W(params, self.spec, self.spec.model.layers - 1)
        concat = self.spec.model.positions == "concat"
        nan = torch.full_like(cos, float("nan"))
        blocks = {
            "W_ff_norm": W[:, :d, :d].flatten(1).norm(dim=1),
            "W_fp_norm": W[:, :d, d:].flatten(1).norm(dim=1) if concat else nan,
            "W_pf_norm": W[:, d:, :d].flatten(1).norm(dim=1) if concat else nan,
            "W_pp_norm": W[:, d:, d:].flatten(1).norm(dim=1) if concat else nan,
        }
        coef = coef.cpu() if coef is not None else None
        rows = []
        for i, seed in enumerate(self.seeds):
            if not bool(active[i]):
                continue
            rows.append(
                {
                    "seed": seed,
                    "step": step,
                    "eta": eta,
                    "flow_time": eta * step,  # tau = eta x steps: steps at another eta compare in it
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

    def tables(self, guard: Divergence, algorithm: str, kernel: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The trajectory (a row per seed and recorded step) and the attention table (a row per seed,
        checkpoint, key and query), each with the run's identity and every seed's end state (``guard``)."""
        spec = self.spec
        traj = pd.DataFrame(self.rows)
        traj.insert(0, "run", spec.run)
        traj.insert(1, "task_name", spec.task_name)
        js = {s: t.j_star for s, t in zip(self.seeds, self.tasks)}
        traj.insert(2, "d", spec.task.d)
        traj.insert(3, "D", spec.task.D)
        traj.insert(5, "j_star", traj["seed"].map(js).astype("int64"))
        traj["status"] = traj["seed"].map(dict(zip(self.seeds, guard.status)))
        traj["diverged_step"] = traj["seed"].map(dict(zip(self.seeds, guard.diverged_step))).astype("int64")
        traj["last_finite_loss"] = traj["seed"].map(dict(zip(self.seeds, guard.last_finite)))
        # which algorithm the numbers are for: population GD (projected), or descent on batch gradients
        # by a closed form or by autograd; and by which implementation and optimizer
        traj["algorithm"] = algorithm
        traj["kernel"] = kernel
        traj["optimizer"] = spec.pretrain.optimizer
        attn_df = pd.DataFrame(self.attention_rows, columns=ATT_COLUMNS)
        attn_df.insert(0, "run", spec.run)
        attn_df.insert(1, "task_name", spec.task_name)
        attn_df["j_star"] = attn_df["seed"].map(js).astype("int64")
        return traj, attn_df
