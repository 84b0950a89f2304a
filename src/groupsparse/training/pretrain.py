"""Pretraining for several seeds at once (docs/STUDY.md section 3): gradient descent on fresh batches.

Each seed has its own task (j*, v*), data stream and evaluation set, all drawn from
generators seeded by the seed's identity; the seeds are stacked on a leading axis so
one process trains them as one batched computation, with the same numbers as alone.
Which implementation computes a step is ``model.dispatch.plan``'s choice; how the step moves the
parameters (gradient descent at the run's step size, Adam, population mode's descent on the
invariant subspace) is ``descent.py``'s.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from ..config.seeding import task_identity, torch_generator
from ..config.specs import RunSpec
from ..data.synthetic import GroupSparseTask, make_task
from ..io import files as io
from ..io.progress import stop_here, stop_requested
from ..model import cpu, dispatch, fastpath
from ..model.device import TORCH_DTYPES as DTYPES
from ..model.device import torch_device
from ..model.transformer import embed, forward, init_params, logistic_loss, sine_positions, token_width
from . import descent
from .many_steps import ManySteps
from .recording import Recording, attention_steps, record_steps  # noqa: F401 (re-exported)

# A seed has diverged when its training loss is not finite, or exceeds this many times its loss at
# step 0 (log 2 from the zero start): a stable run's logistic loss stays below its start, while a
# step size far too large gives losses of order |f|, far above it, long before they overflow.
DIVERGE_FACTOR = 10.0
# ... for this many consecutive steps: a single spike (heavy-tailed or image batches, one bad step of
# an oscillation that recovers) is not a divergence; a blow-up stays above the bound step after step.
DIVERGE_PATIENCE = 5
# A resume state at least this often (wall time), besides every ``resume_every`` steps: a killed D = 64 run
# (seconds per step with 5 seeds) loses at most this much work whatever resume_every says.
RESUME_SECONDS = 120.0


ATT_COLUMNS = ["seed", "step", "key", "query", "mass"]


def _rows(table: torch.Tensor, columns: list[str], ints: set[str]) -> list[dict]:
    """Rows saved as a float64 matrix back as dicts, the integer columns as int."""
    return [{c: int(x) if c in ints else x for c, x in zip(columns, r)} for r in table.tolist()]


class DivergedError(RuntimeError):
    pass


@dataclass
class PretrainResult:
    params: dict[str, torch.Tensor]
    tasks: list[GroupSparseTask]
    trajectory: pd.DataFrame
    attention: pd.DataFrame
    status: list[str]
    diverged_step: list[int]
    resumed_from_step: int = 0
    wall_seconds: float = 0.0


class Trainer(Recording, ManySteps):
    """Holds the batched state; ``run`` performs gradient descent with recording and resume."""

    params = descent.Parameters()  # per seed; population mode on the loops builds W and v when they are read

    def __init__(
        self,
        spec: RunSpec,
        seeds: list[int],
        resume_path: str | Path | None = None,
        resume_every: int = 500,
        draw_dtype: torch.dtype | None = None,
        resume_seconds: float | None = RESUME_SECONDS,
        plan: dispatch.Plan | None = None,
    ):
        """``draw_dtype`` (tests, benchmark): draw the samples in this precision instead of the run's
        own (float32 samples fed to float64 arithmetic, to compare the two precisions on the same data).
        ``plan`` (benchmarks, tests): the implementation, if not ``dispatch.plan(spec)``'s."""
        self.spec, self.seeds = spec, list(seeds)
        self.dtype = DTYPES[spec.dtype]
        self.draw_dtype = draw_dtype or self.dtype
        self.device = torch_device(spec.device)
        ts, ms = spec.task, spec.model
        self.tasks = [make_task(ts, *task_identity(spec, s)) for s in self.seeds]
        self.relevant = torch.stack([t.relevant for t in self.tasks]).to(self.device)
        v_stars = [getattr(t, "v_star", None) for t in self.tasks]  # image tasks have no v*
        self.v_star = None if any(v is None for v in v_stars) else torch.stack(v_stars).to(self.device, self.dtype)
        self.m = token_width(ms, ts.d, ts.D)
        init_gens = [torch_generator(*task_identity(spec, s), "init") for s in self.seeds]
        self.params = init_params(ms, len(self.seeds), self.m, init_gens, self.dtype, self.device)
        # Synthetic tasks draw on the run's device, from a generator of that device (CUDA: Philox), so
        # the numbers are reproducible per (config, dtype, device); image tasks index images with CPU draws.
        gen_device = self.device if all(getattr(t, "draws_on_device", False) for t in self.tasks) else "cpu"
        self.train_gens = [torch_generator(*task_identity(spec, s), "train", device=gen_device) for s in self.seeds]
        eval_gens = [torch_generator(*task_identity(spec, s), "eval", device=gen_device) for s in self.seeds]
        # an i.i.d. evaluation set (an antithetic one, X with -X, gives each mirrored pair identical
        # attention and accuracy, halving its effective size); images: held-out test images
        eval_kw = {"antithetic": False, "split": "test"}  # a task of a kind with one law ignores the split
        self._draw_kw = {} if self.draw_dtype == self.dtype else {"draw_dtype": self.draw_dtype}
        Xe, ye = zip(
            *[
                t.sample(spec.pretrain.eval_size, g, **eval_kw, dtype=self.dtype, device=self.device, **self._draw_kw)
                for t, g in zip(self.tasks, eval_gens)
            ]
        )
        self.Z_eval, self.y_eval = embed(torch.stack(Xe), ms), torch.stack(ye)
        if spec.pretrain.gradient == "closed_form" and not ms.is_paper_model:
            raise ValueError(
                "pretrain.gradient: closed_form exists only for the paper model "
                "(positions: concat, attention: merged, layers: 1); use auto or autograd"
            )
        self.plan = plan or dispatch.plan(spec)
        self.closed_form = self.plan.closed_form
        self.scale = 1.0 / math.sqrt(self.m) if ms.score_scale == "sqrt" else 1.0
        self.antithetic = spec.pretrain.sampling == "antithetic"
        # the hot path: draw straight into the kernel's layout, no (S, B, D, d) batch in between
        self.inner_draws = self.closed_form and all(hasattr(t, "sample_inner") for t in self.tasks)
        self.positions = sine_positions(ts.D, self.dtype, self.device) if self.closed_form else None
        self._mirror_checked = False
        self.descent = descent.make(spec, self.plan, self.tasks, self.positions, self.dtype, self.device, self.scale)
        cpu.keep_freed_memory()  # a step's temporaries would otherwise cost thousands of page faults
        self.workers = cpu.SeedWorkers(torch.get_num_threads(), len(self.seeds), self.device)
        self.resume_path = Path(resume_path) if resume_path else None
        self.resume_every = resume_every
        self.resume_seconds = resume_seconds
        self._saved_rows: dict[str, tuple[int, torch.Tensor]] = {}  # see _rows_table

    @property
    def algorithm(self) -> str:
        """population (GD on the invariant subspace), batch (closed-form batch gradients) or autograd."""
        return "population" if self.plan.projected else ("batch" if self.closed_form else "autograd")

    # -- one step -------------------------------------------------------------------
    def batch(self):
        """This step's fresh samples of every seed: X (S, B, D, d) and labels y (S, B).

        The same samples as :meth:`draw` (a task's ``sample`` is laid out from its ``sample_inner``),
        as plain tensors; ``run`` uses ``draw``, which skips building them.
        """
        p = self.spec.pretrain
        Xs, ys = zip(
            *self.workers.map(
                lambda s: self.tasks[s].sample(
                    p.batch,
                    self.train_gens[s],
                    antithetic=self.antithetic,
                    dtype=self.dtype,
                    device=self.device,
                    **self._draw_kw,
                ),
                len(self.seeds),
            )
        )
        return torch.stack(Xs), torch.stack(ys)

    def draw(self):
        """This step's samples for the loop: per seed (X (d, D, H), y (H,)) in the fast kernel's layout
        (H = B/2 with antithetic batches: the mirror half is implicit), or ``batch()`` off the fast path."""
        if not self.inner_draws:
            return self.batch()
        p = self.spec.pretrain

        def one(s):
            X, y = self.tasks[s].sample_inner(
                p.batch, self.train_gens[s], antithetic=self.antithetic, dtype=self.draw_dtype
            )
            return X.to(self.device, self.dtype), y.to(self.device, self.dtype)

        return self.workers.map(one, len(self.seeds))

    def step_grads(self, drawn):
        """Loss and gradients from what :meth:`draw` returned (as ``loss_and_grads`` on ``batch()``)."""
        if not self.inner_draws:
            return self.loss_and_grads(*drawn)
        return self._closed_form_grads(lambda s: drawn[s])

    def _closed_form_grads(self, inputs):
        """Loss and gradients of every seed by the plan's closed form; ``inputs(s)``: seed s's X (d, D, H), y (H,).
        The gradients are what the descent needs of them (population mode: the subspace's coefficients')."""
        if self.plan.from_coefficients:  # no W: the coefficients in, their gradient out
            out = self.workers.map(lambda s: self.descent.loss_and_gradient(s, *inputs(s)), len(self.seeds))
            return torch.stack([loss for loss, _ in out]), self.descent.stack([g for _, g in out])
        W, v = self.params["layer0.W"], self.params["v"]

        def one(s):
            X, y = inputs(s)
            loss, gW, gv = dispatch.loss_and_grads(
                self.plan, W[s], v[s], X, y, self.positions, self.scale, self.antithetic
            )
            return loss, self.descent.gradient(s, gW, gv)

        losses, grads = zip(*self.workers.map(one, len(self.seeds)))
        return torch.stack(losses), self.descent.stack(list(grads))

    @property
    def eta(self) -> float:
        return self.descent.eta

    @property
    def coef(self):
        """Population mode's coefficients (S, N_COEF), float64; None for every other run."""
        return self.descent.coef

    def step(self, active: torch.Tensor | None = None):
        """One training step without recording (draw, gradients, descent); returns the loss (S,)."""
        loss, grads = self.step_grads(self.draw())
        self.descend(grads, torch.ones(len(self.seeds), dtype=torch.bool) if active is None else active)
        return loss

    def loss_and_grads(self, X, y):
        """Mean training loss per seed (S,) and the gradient of every parameter, from samples X, y."""
        if self.closed_form:
            return self._loss_and_grads_fast(X, y)
        params = {k: t.detach().requires_grad_(True) for k, t in self.params.items()}
        f, _ = forward(params, embed(X, self.spec.model), self.spec.model)
        loss = logistic_loss(f, y)
        grads = torch.autograd.grad(loss.sum(), list(params.values()))  # seeds are independent
        return loss.detach(), dict(zip(params.keys(), grads))

    def _loss_and_grads_fast(self, X, y):
        """The paper model's exact gradients, seed by seed (see fastpath.py).

        Antithetic batches are [X, -X] with labels [y, -y]; the kernel takes the first half and
        folds the mirror into its algebra, so check once that the task really sampled that way.
        """
        half = X.shape[1] // 2 if self.antithetic else X.shape[1]
        if self.antithetic and not self._mirror_checked:
            if not (torch.equal(X[:, half:], -X[:, :half]) and torch.equal(y[:, half:], -y[:, :half])):
                raise ValueError(
                    "pretrain.sampling: antithetic, but the task's batches are not [X, -X] "
                    "with labels [y, -y]; use sampling: iid for this task"
                )
            self._mirror_checked = True
        return self._closed_form_grads(lambda s: (fastpath.batch_inner(X[s, :half]), y[s, :half]))

    def descend(self, grads: dict[str, torch.Tensor], active: torch.Tensor) -> None:
        """One step for the seeds still ``active`` (S,) bool; the others stay frozen."""
        self._params = self.descent.step(self._params, grads, active)

    # -- resume ---------------------------------------------------------------------
    def _save_resume(self, step, rows, att_rows, status, diverged_step, last_finite, initial_loss, above):
        if not self.resume_path:
            return
        tensors = {f"param.{k}": t for k, t in self.params.items()}
        tensors |= {f"gen.{i}": g.get_state() for i, g in enumerate(self.train_gens)}
        extra, extra_meta = self.descent.state()
        tensors |= extra
        # the recorded rows as float64 matrices (exact for their floats and integer ids), not JSON: a D = 64
        # run records some 10^5 rows, which as JSON would near safetensors' 100 MB header limit
        cols = list(rows[0]) if rows else []
        tensors["rows"] = self._rows_table("rows", rows, cols)
        tensors["attention_rows"] = self._rows_table("attention_rows", att_rows, ATT_COLUMNS)
        meta = {
            "science_hash": self.spec.science_hash(),
            "seeds": self.seeds,
            "step": step,
            "row_columns": cols,
            "int_columns": [c for c in cols if isinstance(rows[0][c], int)],
            "status": status,
            "diverged_step": diverged_step,
            "last_finite_loss": last_finite,
            "initial_loss": initial_loss,
            "steps_above_bound": above,
            **extra_meta,
        }
        io.save_checkpoint(self.resume_path, tensors, meta)

    def _rows_table(self, key: str, rows: list[dict], cols: list[str]) -> torch.Tensor:
        """``rows`` as a float64 matrix, converting only the rows added since the last call: the lists only
        grow, and converting a D = 64 run's 10^5 rows anew would take seconds at every save."""
        done, table = self._saved_rows.get(key, (0, torch.zeros(0, len(cols), dtype=torch.float64)))
        if done > len(rows) or table.shape[1] != len(cols):
            done, table = 0, torch.zeros(0, len(cols), dtype=torch.float64)
        new = torch.tensor([[row[c] for c in cols] for row in rows[done:]], dtype=torch.float64)
        table = torch.cat([table, new.reshape(len(rows) - done, len(cols))])
        self._saved_rows[key] = (len(rows), table)
        return table

    def _load_resume(self):
        if not (self.resume_path and self.resume_path.exists()):
            return None
        try:
            tensors, meta = io.load_checkpoint(self.resume_path)
        except io.InputError:
            return None  # a state we cannot read is discarded: training restarts from scratch
        if meta.get("science_hash") != self.spec.science_hash() or meta.get("seeds") != self.seeds:
            return None
        for k in self.params:
            self.params[k] = tensors[f"param.{k}"].to(self.device, self.dtype)
        for i, g in enumerate(self.train_gens):
            g.set_state(tensors[f"gen.{i}"])
        self.descent.load(tensors, meta, self.device)
        if "rows" not in meta:  # rows stored as tensors (a state written before they were is JSON)
            ints = set(meta["int_columns"])
            meta["rows"] = _rows(tensors["rows"], meta["row_columns"], ints)
            meta["attention_rows"] = _rows(tensors["attention_rows"], ATT_COLUMNS, {"seed", "step", "key", "query"})
        return meta

    def _resume_due(self, saved: float) -> bool:
        return self.resume_seconds is not None and time.perf_counter() - saved >= self.resume_seconds

    # -- the loop -------------------------------------------------------------------
    def run(self, progress=None) -> PretrainResult:
        t0 = time.perf_counter()
        p = self.spec.pretrain
        rec = set(record_steps(p.steps, p.record_every))
        att = set(attention_steps(p.steps, p.attention_checkpoints))
        n = len(self.seeds)
        rows, att_rows = [], []
        status, diverged_step, last_finite = ["ok"] * n, [-1] * n, [float("nan")] * n
        initial_loss: list[float] | None = None
        above = [0] * n  # consecutive steps with the loss above DIVERGE_FACTOR x its start
        bound: list[float] | None = None
        active, active_for = None, None
        start = 0
        state = self._load_resume()
        if state is not None:
            start, rows, att_rows = state["step"], state["rows"], state["attention_rows"]
            rows = [{c: row[c] for c in state["row_columns"]} for row in rows]
            status, diverged_step, last_finite = state["status"], state["diverged_step"], state["last_finite_loss"]
            initial_loss = state.get("initial_loss")
            above = state.get("steps_above_bound", above)
        resumed_from = start
        saved = time.perf_counter()  # wall time of the last resume state (or the start)
        events = sorted(rec | att | {p.steps}) if self.fusable else []  # where take_many stops
        step = start - 1
        while (step := step + 1) <= p.steps:
            stop = stop_requested()  # SIGINT or SIGTERM (io.progress.handle_stop_signals): stop here, saved
            due = step < p.steps and (step % self.resume_every == 0 or self._resume_due(saved))
            if self.resume_path and start < step and (due or stop):
                self._save_resume(step, rows, att_rows, status, diverged_step, last_finite, initial_loss, above)
                saved = time.perf_counter()
            stop_here(stop, step if self.resume_path and start < step else None)  # KeyboardInterrupt if stop
            loss, grads = self.step_grads(self.draw())
            # the checks on Python floats (exactly the float64 comparisons): a few tensor calls a step, not one a seed
            losses = loss.detach().cpu().double().tolist()
            finite = torch.stack([torch.isfinite(g).flatten(1).all(1) for g in grads.values()]).all(0).tolist()
            if initial_loss is None:
                initial_loss = list(losses)
            if bound is None:  # once per run (or resume), not per step
                bound = [DIVERGE_FACTOR * x for x in initial_loss]
            above = [a + 1 if x > b else 0 for a, x, b in zip(above, losses, bound)]
            for i in range(n):
                if status[i] == "ok" and not (math.isfinite(losses[i]) and finite[i] and above[i] < DIVERGE_PATIENCE):
                    status[i], diverged_step[i] = "diverged", step
                elif status[i] == "ok":
                    last_finite[i] = losses[i]
            if active is None or status != active_for:  # a new tensor only when a seed's status changes
                active, active_for = torch.tensor([s == "ok" for s in status]), list(status)
            if step in rec:
                rows += self.metrics(step, loss, active)
            if step in att:
                att_rows += self.mean_attention(step, active)
            if step == p.steps or (p.on_diverge == "fail" and "diverged" in status):
                break
            self.descend(grads, active)
            if progress:  # the callback throttles its own output
                progress(step, loss)
            taken, last = self.take_many(step, events, status, bound, progress)
            if taken:  # steps step + 1 ... step + taken in calls of many, every loss within its bound
                step, last_finite, above = step + taken, last, [0] * n
        self.workers.close()
        if self.resume_path and self.resume_path.exists():
            self.resume_path.unlink()
        traj = pd.DataFrame(rows)
        traj.insert(0, "run", self.spec.run)
        traj.insert(1, "task_name", self.spec.task_name)
        js = {s: t.j_star for s, t in zip(self.seeds, self.tasks)}
        traj.insert(2, "d", self.spec.task.d)
        traj.insert(3, "D", self.spec.task.D)
        traj.insert(5, "j_star", traj["seed"].map(js).astype("int64"))
        st = dict(zip(self.seeds, status))
        traj["status"] = traj["seed"].map(st)
        traj["diverged_step"] = traj["seed"].map(dict(zip(self.seeds, diverged_step))).astype("int64")
        traj["last_finite_loss"] = traj["seed"].map(dict(zip(self.seeds, last_finite)))
        # which algorithm the numbers are for: population GD (projected), or descent on batch gradients
        # by a closed form or by autograd; and by which implementation and optimizer
        traj["algorithm"] = self.algorithm
        traj["kernel"] = self.plan.kernel
        traj["optimizer"] = self.spec.pretrain.optimizer
        attn_df = pd.DataFrame(att_rows, columns=ATT_COLUMNS)
        attn_df.insert(0, "run", self.spec.run)
        attn_df.insert(1, "task_name", self.spec.task_name)
        attn_df["j_star"] = attn_df["seed"].map(js).astype("int64")
        return PretrainResult(
            self.params,
            self.tasks,
            traj,
            attn_df,
            status,
            diverged_step,
            resumed_from_step=resumed_from,
            wall_seconds=time.perf_counter() - t0,
        )


def checkpoint_payload(spec: RunSpec, res: PretrainResult, seeds: list[int]):
    """Tensors and metadata of a pretraining checkpoint (final parameters and tasks)."""
    tensors = {f"param.{k}": t for k, t in res.params.items()}
    tensors["task.relevant"] = torch.stack([t.relevant for t in res.tasks])
    if all(hasattr(t, "directions") for t in res.tasks):  # image tasks have none
        tensors["task.directions"] = torch.stack([t.directions for t in res.tasks])
    meta = {
        "kind": "groupsparse.training.pretrain",
        "spec": spec.to_dict(),
        "science_hash": spec.science_hash(),
        "seeds": seeds,
        "status": res.status,
        "diverged_step": res.diverged_step,
    }
    return tensors, meta
