"""Population gradient flow, integrated as an ODE in octaves of flow time (pretrain.solver: flow).

The flow dc/dtau = -M^-1 grad L(c) of the invariant subspace's eight coefficients (``model.flow``: the
vector field over a replicate's fixed outer sample) runs from c = 0 to the run's flow time T = steps x
eta(D), the flow time gradient descent at eta(D) would reach, by scipy.integrate's implicit adaptive
solver (BDF, Radau or LSODA): its steps are set by the tolerance, not by the stability edge 8 / D that
bounds gradient descent's, and the dynamics are stiff (the read-out relaxes at rate ~D / 4, attention
forms over flow time ~D^3).

* **Segments.** One octave of flow time each, [T 2^-(k+1), T 2^-k], the first from 0 to the smallest
  octave above 1/4. The solver starts afresh at each (its first step the last step's size), so the state
  at a segment's end (the coefficients, that step size, the records so far) is all a run needs to go on:
  a killed run resumes from its last octave with the numbers of a run never killed.
* **Records.** At flow time 0 and T 2^(-j / records_per_octave) down to 1/4 (octave ends included, so
  kappa D^3 for kappa a power of 2 up to T / D^3 is a record), each on the separate evaluation sample
  (``flow.evaluate``); and at the first crossing of each target min attention >= 1 - exp(-c D)
  (``targets_c``), located by Brent's method on the solver's dense output between the two records that
  bracket it.
* **Rows.** The trajectory table's columns (``training/recording.py``'s, the subspace's coefficients
  ``pop_*`` among them), with step = tau / eta(D) (gradient descent's steps to the same flow time, a float)
  and what the flow adds: the solver's steps, vector-field evaluations and CPU seconds so far, r_own and
  r_other (the two query kinds' 1 - attention on j*), and what made the row (grid, crossing, final).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy import integrate, optimize

from ..config.seeding import task_identity, torch_generator
from ..config.specs import RunSpec
from ..data.synthetic import make_task
from ..io.progress import stop_requested, stop_signal_name
from ..model import dispatch, flow, population
from ..model.device import TORCH_DTYPES, torch_device
from ..model.transformer import sine_positions, token_width
from . import descent
from .pretrain import PretrainResult
from .recording import ATT_COLUMNS, attention_steps
from .resume import FlowResumeFile

METHODS = {"BDF": integrate.BDF, "Radau": integrate.Radau, "LSODA": integrate.LSODA}
SMALLEST_RECORD = 0.25  # flow time of the first grid record above 0 (the read-out moves at rate ~D/4)
ROW_COLUMNS = (
    "seed", "step", "eta", "flow_time", "record", "train_loss", "eval_loss", "eval_accuracy",
    "attention_on_relevant", "attention_min_on_relevant", "attention_min_pooled", "r_own", "r_other",
    "cos_v1_vstar", "v1_norm", "v2_norm", "W_ff_norm", "W_fp_norm", "W_pf_norm", "W_pp_norm",
    *(f"pop_{c}" for c in population.COEFFICIENTS), "solver_steps", "field_evaluations", "cpu_seconds",
)  # fmt: skip
RECORD_KINDS = ("start", "grid", "crossing", "final")


def record_times(T: float, per_octave: int) -> np.ndarray:
    """The grid's flow times, increasing: 0 and T 2^(-j / per_octave) down to SMALLEST_RECORD."""
    js = np.arange(0, int(math.floor(per_octave * math.log2(T / SMALLEST_RECORD))) + 1) if T > SMALLEST_RECORD else [0]
    return np.concatenate([[0.0], np.sort(T * 2.0 ** (-np.asarray(js, dtype=float) / per_octave))])


def segment_ends(T: float) -> np.ndarray:
    """Where the solver restarts (and a resume state is written): T 2^-k down to the smallest above 1/4."""
    k = max(0, int(math.floor(math.log2(T / SMALLEST_RECORD)))) if T > SMALLEST_RECORD else 0
    return np.sort(T * 2.0 ** -np.arange(k + 1, dtype=float))


@dataclass
class SeedState:
    """One seed's flow between segments: what a resume state holds."""

    coef: np.ndarray  # (8,) at flow time ``tau``
    tau: float = 0.0
    segment: int = 0  # the next segment to integrate
    step_size: float | None = None  # the solver's last step, the next segment's first
    rows: list | None = None
    crossed: list | None = None  # per target c: the crossing's flow time (nan: not yet)
    solver_steps: int = 0
    field_evaluations: int = 0
    cpu_seconds: float = 0.0
    status: str = "ok"
    failed_at: float = -1.0  # flow time where the solver failed (status "diverged")

    def to_meta(self) -> dict:
        return {
            "coef": [float(x) for x in self.coef], "tau": self.tau, "segment": self.segment,
            "step_size": self.step_size, "crossed": self.crossed, "solver_steps": self.solver_steps,
            "field_evaluations": self.field_evaluations, "cpu_seconds": self.cpu_seconds,
            "status": self.status, "failed_at": self.failed_at,
        }  # fmt: skip

    @classmethod
    def from_meta(cls, meta: dict, rows: list) -> SeedState:
        return cls(np.array(meta["coef"], dtype=float), **{k: v for k, v in meta.items() if k != "coef"}, rows=rows)


class FlowRun:
    """The flow of every seed of a run (one after another); ``run`` returns what ``Trainer.run`` does."""

    def __init__(self, spec: RunSpec, seeds: list[int], resume_path: str | Path | None = None):
        if spec.pretrain.solver != "flow":
            raise ValueError(f"FlowRun runs pretrain.solver: flow, got {spec.pretrain.solver}")
        self.spec, self.seeds = spec, list(seeds)
        self.settings = fs = spec.pretrain.flow
        ts = spec.task
        self.d, self.D = ts.d, ts.D
        self.device = torch_device(spec.device)
        self.plan = dispatch.plan(spec)  # flow_loops or flow_torch: the one choice
        self.implementation = self.plan.kernel.removeprefix("flow_")
        self.eta = spec.pretrain.step_size(ts.D)  # the step size whose flow time this is (step = tau / eta)
        self.T = fs.flow_time or spec.pretrain.steps * self.eta
        self.scale = 1.0 / math.sqrt(token_width(spec.model, ts.d, ts.D)) if spec.model.score_scale == "sqrt" else 1.0
        self.tasks = [make_task(ts, *task_identity(spec, s)) for s in self.seeds]
        self.grid = record_times(self.T, fs.records_per_octave)
        self.ends = segment_ends(self.T)
        self.targets = [math.exp(-c * ts.D) for c in fs.targets_c]  # r = 1 - min attention at or below
        self.resume = FlowResumeFile(resume_path, spec.science_hash(), self.seeds)
        _set_numba_threads()

    @property
    def algorithm(self) -> str:
        return "flow"

    @property
    def kernel(self) -> str:
        return self.plan.kernel

    def samples(self, seed: int) -> tuple[flow.Sample, flow.Sample]:
        """The seed's outer sample and its evaluation sample, drawn from generators of its identity."""
        ident = task_identity(self.spec, seed)
        fs = self.settings
        out = []
        for role, N in (("flow_sample", fs.samples), ("flow_eval", fs.eval_samples)):
            s = flow.draw(self.d, self.D, N, torch_generator(*ident, role), fs.sampler)
            out.append(flow.Sample(s.w.to(self.device), s.across.to(self.device)))
        return out[0], out[1]

    # -- one seed ---------------------------------------------------------------------
    def _row(self, seed, state: SeedState, field: flow.Field, evaluation: flow.Sample, tau, coef, kind) -> dict:
        ev = flow.evaluate(coef, evaluation, self.scale, self.settings.nodes, self.implementation)
        train_loss = field.gradient(coef)[0]
        field.evaluations -= 1  # a record's loss is no step of the solver
        a, b, g = (float(x) for x in coef[:3])
        sizes = flow.orbit_sizes(self.d, self.D)
        return {
            "seed": seed,
            "step": tau / self.eta,
            "eta": self.eta,
            "flow_time": float(tau),
            "record": kind,
            "train_loss": train_loss,
            "eval_loss": ev["loss"],
            "eval_accuracy": ev["accuracy"],
            "attention_on_relevant": ev["mean_attention"],
            "attention_min_on_relevant": ev["min_attention"],  # the expectation is one per query kind
            "attention_min_pooled": ev["min_attention"],
            "r_own": ev["r_own"],
            "r_other": ev["r_other"],
            "cos_v1_vstar": float(np.sign(g)),
            "v1_norm": abs(g),
            "v2_norm": 0.0,
            "W_ff_norm": math.sqrt(a * a + (self.d - 1) * b * b),
            "W_fp_norm": 0.0,
            "W_pf_norm": 0.0,
            "W_pp_norm": math.sqrt(float(np.sum(sizes[3:] * np.asarray(coef[3:]) ** 2))),
            **{f"pop_{c}": float(x) for c, x in zip(population.COEFFICIENTS, coef)},
            "solver_steps": state.solver_steps,
            "field_evaluations": state.field_evaluations,
            "cpu_seconds": state.cpu_seconds,
            "_self_attention": ev["self_attention"],
        }

    def _crossings(self, seed, state, field, evaluation, dense, lo_row, rows) -> list[dict]:
        """Rows at the first crossing of each target not yet crossed, between consecutive ``rows`` (the
        segment's records, ``lo_row`` the record before them), by Brent's method on the dense output."""
        out = []
        r_of = lambda tau: 1.0 - flow.evaluate(dense(tau), evaluation, self.scale, self.settings.nodes,
                                               self.implementation)["min_attention"]  # fmt: skip
        for k, target in enumerate(self.targets):
            if not math.isnan(state.crossed[k]):
                continue
            prev = lo_row
            for row in rows:
                r_prev, r_now = 1 - prev["attention_min_on_relevant"], 1 - row["attention_min_on_relevant"]
                if r_prev > target >= r_now:
                    a, b = prev["flow_time"], row["flow_time"]
                    tol = 1e-7 * b
                    tau = optimize.brentq(lambda x, r=target: r_of(x) - r, a, b, xtol=tol, rtol=1e-12)
                    tau = min(tau + tol, b)  # on the reached side: the analysis finds the crossing at this row
                    state.crossed[k] = tau
                    out.append(self._row(seed, state, field, evaluation, tau, dense(tau), "crossing"))
                    break
                prev = row
        return out

    def _segment(self, seed, state: SeedState, field, evaluation, end: float) -> None:
        """Integrate ``state`` from its flow time to ``end``; record the grid's times in (tau, end] and the
        crossings in between; the state moves to ``end``."""
        fs = self.settings
        cpu0, cpu_base = time.process_time(), state.cpu_seconds
        first = min(state.step_size, end - state.tau) if state.step_size else None
        solver = METHODS[fs.method](
            lambda t, y: field.velocity(y), state.tau, state.coef, end, rtol=fs.rtol, atol=fs.atol,
            first_step=first,
        )  # fmt: skip
        pieces, steps = [], 0
        while solver.status == "running":
            if stop_requested():  # SIGINT or SIGTERM: stop now; the state saved at this segment's start stays
                saved = f"; state saved at flow time {state.tau:.6g}" if self.resume.path and state.segment else ""
                raise KeyboardInterrupt(f"{stop_signal_name()}{saved}")
            message = solver.step()
            if solver.status == "failed":
                state.status, state.failed_at = "diverged", float(solver.t)
                print(f"  seed {seed}: the solver failed at flow time {solver.t:.6g}: {message}", flush=True)
                break
            steps += 1
            pieces.append((solver.t_old, solver.t, solver.dense_output()))
        reached, final = float(solver.t), np.asarray(solver.y, dtype=float).copy()
        dense = _Dense(pieces, state.tau, state.coef, reached, final)
        state.solver_steps += steps
        state.field_evaluations = field.evaluations
        state.step_size = float(solver.h_abs) if getattr(solver, "h_abs", None) else state.step_size
        state.cpu_seconds = cpu_base + time.process_time() - cpu0
        times = [t for t in self.grid if state.tau < t <= reached]
        rows = [self._row(seed, state, field, evaluation, t, dense(t), "grid") for t in times]
        if rows:
            before = [r for r in state.rows if r["record"] != "crossing"][-1]  # the record at this segment's start
            rows += self._crossings(seed, state, field, evaluation, dense, before, rows)
        state.rows += rows
        state.coef, state.tau = final, reached
        state.cpu_seconds = cpu_base + time.process_time() - cpu0

    def run_seed(self, i: int, state: SeedState | None, save, progress=None) -> SeedState:
        seed = self.seeds[i]
        sample, evaluation = self.samples(seed)
        field = flow.Field(sample, self.d, self.scale, self.settings.nodes, self.implementation)
        if state is None:
            state = SeedState(np.zeros(population.N_COEF), rows=[], crossed=[math.nan] * len(self.targets))
            state.rows.append(self._row(seed, state, field, evaluation, 0.0, state.coef, "start"))
        field.evaluations = state.field_evaluations
        while state.segment < len(self.ends) and state.status == "ok":
            self._segment(seed, state, field, evaluation, float(self.ends[state.segment]))
            state.segment += 1
            save(state)
            if progress:
                progress(i, state.segment)
        if state.rows[-1]["record"] == "grid" and state.tau == self.T:
            state.rows[-1]["record"] = "final"
        return state

    def run(self, progress=None) -> PretrainResult:
        """Every seed's flow from the zero start to T, resuming from a saved state where one exists."""
        t0 = time.perf_counter()
        states = self._load()
        resumed = min((s.tau for s in states if s is not None), default=0.0)
        for i in range(len(self.seeds)):
            if states[i] is not None and (states[i].segment >= len(self.ends) or states[i].status != "ok"):
                continue
            states[i] = self.run_seed(i, states[i], lambda state, i=i: self._save_seed(states, i, state), progress)
        self.resume.remove()
        return self._result(states, resumed, time.perf_counter() - t0)

    # -- outputs ----------------------------------------------------------------------
    def _result(self, states: list[SeedState], resumed_tau: float, wall: float) -> PretrainResult:
        spec = self.spec
        rows = [r for s in states for r in s.rows]
        traj = pd.DataFrame(rows).sort_values(["seed", "flow_time"], kind="stable").reset_index(drop=True)
        self_attention = traj.pop("_self_attention")
        traj.insert(0, "run", spec.run)
        traj.insert(1, "task_name", spec.task_name)
        traj.insert(2, "d", spec.task.d)
        traj.insert(3, "D", spec.task.D)
        js = {s: t.j_star for s, t in zip(self.seeds, self.tasks)}
        traj.insert(5, "j_star", traj["seed"].map(js).astype("int64"))
        status = [s.status for s in states]
        diverged = [int(round(s.failed_at / self.eta)) if s.status != "ok" else -1 for s in states]
        traj["status"] = traj["seed"].map(dict(zip(self.seeds, status)))
        traj["diverged_step"] = traj["seed"].map(dict(zip(self.seeds, diverged))).astype("int64")
        traj["last_finite_loss"] = traj["train_loss"]
        traj["algorithm"] = self.algorithm
        traj["kernel"] = self.kernel
        traj["optimizer"] = "flow"
        traj["samples"] = self.settings.samples  # the measurement's precision: the flow check varies them
        traj["rtol"] = self.settings.rtol
        attention = self._attention(traj.assign(_self=self_attention))
        resumed = int(resumed_tau / self.eta)
        return PretrainResult(self.params(states), self.tasks, traj, attention, status, diverged, resumed, wall)

    def _attention(self, traj: pd.DataFrame) -> pd.DataFrame:
        """The expected attention matrix [key, query] at the records nearest the attention checkpoints' flow
        times, in each task's frame: it is constant on the five orbits of the pairs (key, query)."""
        p = self.spec.pretrain
        wanted = [self.eta * s for s in attention_steps(p.steps, p.attention_checkpoints)]
        rows, D = [], self.D
        for seed, g in traj.groupby("seed", sort=True):
            g = g[g["record"] != "crossing"]
            picks = sorted({int(np.abs(g["flow_time"].to_numpy() - w).argmin()) for w in wanted})
            js = int(g["j_star"].iloc[0])
            for p in picks:
                r = g.iloc[p]
                own, other, diag = float(r["r_own"]), float(r["r_other"]), float(r["_self"])
                for key in range(D):
                    for query in range(D):
                        if key == js:
                            mass = 1 - own if query == js else 1 - other
                        elif query == js:
                            mass = own / (D - 1)
                        else:
                            mass = diag if key == query else (other - diag) / (D - 2)
                        rows.append(
                            {"seed": int(seed), "step": float(r["step"]), "key": key, "query": query, "mass": mass}
                        )
        out = pd.DataFrame(rows, columns=ATT_COLUMNS)
        out.insert(0, "run", self.spec.run)
        out.insert(1, "task_name", self.spec.task_name)
        out["j_star"] = out["seed"].map({s: t.j_star for s, t in zip(self.seeds, self.tasks)}).astype("int64")
        return out

    def params(self, states: list[SeedState]) -> dict[str, torch.Tensor]:
        """W (S, m, m) and v (S, m) of each seed's final coefficients in its task's frame."""
        P = sine_positions(self.D, TORCH_DTYPES[self.spec.dtype], "cpu")
        return descent.subspace_parameters([s.coef for s in states], self.tasks, P, TORCH_DTYPES[self.spec.dtype])

    # -- resume -----------------------------------------------------------------------
    def _save_seed(self, states: list[SeedState | None], i: int, state: SeedState) -> None:
        states[i] = state  # the seed under way is saved too, not only those finished before it
        self._save(states)

    def _save(self, states: list[SeedState | None]) -> None:
        metas, rows = [], []
        for s in states:
            if s is None:
                metas.append(None)
                rows.append(None)
                continue
            cols = list(s.rows[0])
            metas.append(s.to_meta() | {"row_columns": cols})
            rows.append(torch.tensor([[_number(r[c]) for c in cols] for r in s.rows], dtype=torch.float64))
        self.resume.save(metas, rows)

    def _load(self) -> list[SeedState | None]:
        out = []
        for saved in self.resume.load():
            if saved is None:
                out.append(None)
                continue
            m, table = saved
            cols = m.pop("row_columns")
            rows = [{c: _unnumber(c, x) for c, x in zip(cols, r)} for r in table.tolist()]
            out.append(SeedState.from_meta(m, rows))
        return out


class _Dense:
    """The solver's dense output over a segment: the coefficients at any flow time in it."""

    def __init__(self, pieces, tau0: float, coef0: np.ndarray, tau1: float, coef1: np.ndarray):
        self.pieces, self.tau0, self.coef0, self.tau1, self.coef1 = pieces, tau0, coef0, tau1, coef1
        self.ends = np.array([b for _a, b, _f in pieces])

    def __call__(self, tau: float) -> np.ndarray:
        """The coefficients at ``tau``: the segment's ends exactly, the interpolant in between."""
        if tau <= self.tau0 or not self.pieces:
            return np.asarray(self.coef0, dtype=float)
        if tau >= self.tau1:
            return self.coef1
        k = min(int(np.searchsorted(self.ends, tau)), len(self.pieces) - 1)
        return np.asarray(self.pieces[k][2](tau), dtype=float)


def _number(x) -> float:
    return float(RECORD_KINDS.index(x)) if isinstance(x, str) else float(x)


def _unnumber(column: str, x: float):
    if column == "record":
        return RECORD_KINDS[int(x)]
    if column in ("seed", "solver_steps", "field_evaluations"):
        return int(x)
    return x


def _set_numba_threads() -> None:
    """The flow's loops use the job's thread count (torch's, set by the command)."""
    import numba

    numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))


__all__ = ["FlowRun", "ROW_COLUMNS", "record_times", "segment_ends"]
