"""Pretraining for several seeds at once (docs/STUDY.md section 3): gradient descent on fresh batches.

Each seed has its own task (j*, v*), data stream and evaluation set, all drawn from generators seeded
by the seed's identity; the seeds are stacked on a leading axis so one process trains them as one
batched computation, with the same numbers as alone. The trainer is composed of

    batches     every seed's training samples (``batches.py``)
    rule        the descent rule: how the state moves between events (``rule.py``; by steps, ``steps.py``:
                a step's draw, gradients by ``model.dispatch.plan``'s implementation, and update,
                ``descent.py``; many steps a call, ``many_steps.py``)
    guard       which seeds have diverged (``divergence.py``)
    recorder    the evaluation, the rows and the tables (``recording.py``)
    resume      the resume state (``resume.py``)

and ``run`` goes from event to event: a resume state where one is due, the loss at the event's step,
its rows, then the rule's advance to the next event.
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
from ..io.progress import stop_here, stop_requested
from ..model import cpu, dispatch
from ..model.device import TORCH_DTYPES as DTYPES
from ..model.device import torch_device
from ..model.transformer import init_params, sine_positions, token_width
from . import rule as rules
from .batches import Batches
from .divergence import Divergence
from .recording import Recorder
from .resume import RESUME_SECONDS, ResumeStore


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


class Trainer:
    """The batched state of a run's seeds; ``run`` trains them with recording and resume."""

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
        self.dtype, self.device = DTYPES[spec.dtype], torch_device(spec.device)
        ts, ms, p = spec.task, spec.model, spec.pretrain
        if p.gradient == "closed_form" and not ms.is_paper_model:
            raise ValueError(
                "pretrain.gradient: closed_form exists only for the paper model "
                "(positions: concat, attention: merged, layers: 1); use auto or autograd"
            )
        self.tasks = [make_task(ts, *task_identity(spec, s)) for s in self.seeds]
        m = token_width(ms, ts.d, ts.D)
        init_gens = [torch_generator(*task_identity(spec, s), "init") for s in self.seeds]
        params = init_params(ms, len(self.seeds), m, init_gens, self.dtype, self.device)
        self.plan = plan or dispatch.plan(spec)
        self.scale = 1.0 / math.sqrt(m) if ms.score_scale == "sqrt" else 1.0
        self.positions = sine_positions(ts.D, self.dtype, self.device) if self.plan.closed_form else None
        cpu.keep_freed_memory()  # a step's temporaries would otherwise cost thousands of page faults
        self.workers = cpu.SeedWorkers(torch.get_num_threads(), len(self.seeds), self.device)
        # Synthetic tasks draw on the run's device, from a generator of that device (CUDA: Philox), so
        # the numbers are reproducible per (config, dtype, device); image tasks index images with CPU draws.
        gen_device = self.device if all(getattr(t, "draws_on_device", False) for t in self.tasks) else "cpu"
        train_gens = [torch_generator(*task_identity(spec, s), "train", device=gen_device) for s in self.seeds]
        # the hot path: draw straight into the kernel's layout, no (S, B, D, d) batch in between
        inner = self.plan.closed_form and all(hasattr(t, "sample_inner") for t in self.tasks)
        draw_dtype = draw_dtype or self.dtype
        antithetic = p.sampling == "antithetic"
        self.batches = Batches(
            self.tasks, train_gens, p.batch, antithetic, self.dtype, draw_dtype, self.device, inner, self.workers
        )
        self.rule = rules.make(
            spec, self.plan, self.tasks, params, self.batches, self.positions, self.scale, self.workers
        )
        self.guard = Divergence(len(self.seeds), stop_on_divergence=p.on_diverge == "fail")
        self.recorder = Recorder(
            spec, self.seeds, self.tasks, self.rule, self.plan, self.positions, self.scale, self.batches
        )
        self.resume = ResumeStore(resume_path, resume_every, resume_seconds, spec.science_hash(), self.seeds, p.steps)

    @property
    def algorithm(self) -> str:
        """population (GD on the invariant subspace), batch (closed-form batch gradients) or autograd."""
        return "population" if self.plan.projected else ("batch" if self.plan.closed_form else "autograd")

    @property
    def eta(self) -> float:
        return self.rule.eta

    @property
    def coef(self):
        """Population mode's coefficients (S, N_COEF), float64; None for every other run."""
        return self.rule.coef

    def parameters(self) -> dict[str, torch.Tensor]:
        """Every seed's parameters at the current point."""
        return self.rule.parameters()

    def pause(self, step: int) -> bool:
        """Whether the steps stop before step ``step``: a resume state is due, or a stop was asked for."""
        return self.resume.due(step) or stop_requested()

    def run(self, progress=None) -> PretrainResult:
        """Trains to ``pretrain.steps`` from the start, or from a saved resume state; ``progress(step, loss)``
        is called as the steps go."""
        t0 = time.perf_counter()
        end = self.spec.pretrain.steps
        step = resumed_from = self.resume.load(self.rule, self.guard, self.recorder, self.device)
        while True:
            stop = stop_requested()  # SIGINT or SIGTERM (io.progress.handle_stop_signals): stop here, saved
            saving = self.resume.due(step) or (stop and self.resume.holds_work(step))
            if saving:
                self.resume.save(step, self.rule, self.guard, self.recorder)
            stop_here(stop, step if saving else None)  # KeyboardInterrupt if stop
            loss = self.rule.evaluate(step, self.guard)
            self.recorder.record(step, loss, self.guard.active)
            if step == end or self.guard.stopped:
                break
            to = min(self.recorder.next_event(step), self.resume.next_save(step))
            step = self.rule.advance(step, to, self.guard, self.pause, progress)
            if self.guard.stopped:  # between two events, under on_diverge: fail
                break
        self.workers.close()
        self.resume.remove()
        trajectory, attention = self.recorder.tables(self.guard, self.algorithm, self.plan.kernel)
        status, diverged_step = self.guard.status, self.guard.diverged_step
        wall = time.perf_counter() - t0
        return PretrainResult(
            self.parameters(), self.tasks, trajectory, attention, status, diverged_step, resumed_from, wall
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
