"""What the benchmark's cases time, shared by them and the other scripts here: a run spec of the benchmark's
study, the project's step as a run takes it, the plain reference (the paper's formula in an ``nn.Module``,
autograd, SGD), a kernel run in the trainer's draw and descent, the population studies' runs (gradient descent's
and the flow's)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# population gradient descent's study (configs/population.yaml was it until the flow study took the name)
POPULATION_CONFIG = ROOT / "configs" / "population_gd.yaml"
POPULATION_LARGE_D = ROOT / "configs" / "cluster" / "population_large_D.yaml"
FLOW_CONFIG = ROOT / "configs" / "population.yaml"  # the flow study (pretrain.solver: flow)


def run_spec(dtype: str, steps: int = 3000, task: dict | None = None, pretrain: dict | None = None, **more):
    from groupsparse.config.specs import RunSpec

    return RunSpec.from_dict(
        {
            "study_seed": 20250411,
            "task_name": "bench",
            "dtype": dtype,
            "task": task or {},
            "pretrain": {"steps": steps, **(pretrain or {}), **more},
        }
    )


def project_step_fn(torch, spec, seeds):
    """A Trainer of ``spec`` and ``block(steps)``: that many of its steps as a run takes them between
    records (``Steps.step``: draw, gradients, descent)."""
    from groupsparse.training.pretrain import Trainer

    trainer = Trainer(spec, seeds)
    active = torch.ones(len(seeds), dtype=torch.bool)

    def block(steps):
        for _ in range(steps):
            trainer.rule.step(active)

    return trainer, block


def make_reference(torch, spec, seed: int, dtype, fresh_data: bool = True):
    """One seed trained the plain way: the paper's formula as an nn.Module, autograd, i.i.d. batches, SGD."""
    from groupsparse.config.seeding import task_identity, torch_generator
    from groupsparse.data.synthetic import draw_task
    from groupsparse.model.transformer import sine_positions

    nn = torch.nn
    d, D = spec.task.d, spec.task.D

    class PaperTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.W = nn.Parameter(torch.zeros(d + D, d + D, dtype=dtype))
            self.v = nn.Parameter(torch.zeros(d + D, dtype=dtype))
            self.register_buffer("P", sine_positions(D, dtype))

        def forward(self, X):  # X (B, D, d), rows x_j
            Z = torch.cat([X, self.P.expand(X.shape[0], D, D)], dim=2).transpose(1, 2)  # (B, m, D): columns z_j
            S = torch.softmax(Z.transpose(1, 2) @ self.W @ Z, dim=1)  # (B, D, D): softmax over keys i
            return ((self.v @ Z).unsqueeze(1) @ S).sum((1, 2))  # f = v^T Z S 1

    task = draw_task(spec.task, *task_identity(spec, seed))
    model = PaperTransformer()
    opt = torch.optim.SGD(model.parameters(), lr=spec.pretrain.eta)
    gen = torch_generator(*task_identity(spec, seed), "reference")
    j, w = task.j_star, task.v_star.to(dtype)
    B = spec.pretrain.batch

    fixed = None

    def step():
        nonlocal fixed
        if fresh_data or fixed is None:
            X = spec.task.sigma_x * torch.randn(B, D, d, generator=gen, dtype=dtype)
            fixed = X, torch.sign(X[:, j] @ w)
        X, y = fixed
        loss = torch.nn.functional.softplus(-y * model(X)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step


def run_one_seed_at_a_time(refs, steps):
    """The reference's way of training several seeds: one after the other."""
    for ref in refs:
        for _ in range(steps):
            ref()


def kernel_step(torch, trainer, kernel, active, steps: int) -> None:
    """``steps`` training steps of ``trainer`` with its gradients by ``kernel`` (the signature of
    ``fastpath.seed_loss_and_grads``), seed by seed: the trainer's draw and descent around another
    implementation, without touching the modules the trainer's own step calls."""
    W_key, P, sc, anti = "layer0.W", trainer.positions, trainer.scale, trainer.batches.antithetic
    for _ in range(steps):
        drawn = trainer.rule.draw()
        W, v = trainer.parameters()[W_key], trainer.parameters()["v"]
        grads = []
        for s, (X, y) in enumerate(drawn):
            _, gW, gv = kernel(W[s], v[s], X, y, P, sc, anti)
            grads.append(trainer.rule.update.gradient(s, gW, gv))
        trainer.rule.descend(trainer.rule.update.stack(grads), active)


def population_config(large_d: bool = False) -> dict:
    """configs/population_gd.yaml (population gradient descent), with configs/cluster/population_large_D.yaml
    merged over it (``large_d``) as Snakemake merges two --configfile arguments."""
    import yaml

    from groupsparse.study.runs import deep_merge

    base = yaml.safe_load(POPULATION_CONFIG.read_text())
    return deep_merge(base, yaml.safe_load(POPULATION_LARGE_D.read_text())) if large_d else base


def point_runs(cfg: dict, D: int, d: int = 10) -> list:
    """The population-mode runs of ``cfg`` at d and D (the grid's run and its batch check), by batch."""
    from groupsparse.study.runs import expand

    runs = [
        run
        for run in expand(cfg).values()
        if run.spec["task"]["d"] == d
        and run.spec["task"]["D"] == D
        and run.spec.get("pretrain", {}).get("gradient") == "population"
    ]
    return sorted(runs, key=lambda r: r.spec["pretrain"]["batch"])


def spec_of(run, device: str | None = None, **pretrain):
    """The run's RunSpec (on ``device``, ``pretrain`` overrides) for one timed seed."""
    from groupsparse.config.specs import RunSpec

    raw = dict(run.spec) | ({"device": device} if device else {})
    raw["pretrain"] = raw["pretrain"] | pretrain
    return RunSpec.from_dict(raw)


def population_gd_run(D: int, d: int = 10):
    """Population gradient descent's grid run at d and D: configs/population_gd.yaml with
    configs/cluster/population_large_D.yaml merged over it, D added to its grid where missing (at the batch
    its rule gives: 32 from D = 64 on, ``scaling.batch_by_D``), so a D above the study's (256) is priced at
    the step the study would take there."""
    from groupsparse.study.runs import expand

    cfg = population_config(large_d=True)
    scaling = cfg["scaling"]
    if D not in scaling["D_grid"]:
        scaling["D_grid"] = sorted([*scaling["D_grid"], D])
        for entry in scaling.get("batch_by_D") or []:
            if min(entry["D"]) < D:  # the rule runs from its first D on
                entry["D"] = sorted([*entry["D"], D])
    return expand(cfg)[f"scale_d{d}_D{D}"]


def flow_grid_run(D: int, d: int = 10):
    """The flow study's grid run at d and D (configs/population.yaml; D added to its grid where missing)."""
    import yaml

    from groupsparse.study.runs import expand

    cfg = yaml.safe_load(FLOW_CONFIG.read_text())
    scaling = cfg["scaling"]
    scaling["D_grid"] = sorted(set(scaling["D_grid"]) | {D})
    return expand(cfg)[f"scale_d{d}_D{D}"]


def flow_spec(run, **flow):
    """The flow run's RunSpec with ``flow`` overriding its pretrain.flow settings (samples, flow_time...)."""
    from groupsparse.config.specs import RunSpec

    raw = dict(run.spec)
    raw["pretrain"] = dict(raw["pretrain"])
    raw["pretrain"]["flow"] = dict(raw["pretrain"].get("flow") or {}) | flow
    return RunSpec.from_dict(raw)


def steps_as_a_run_takes_them(torch, trainer, n: int) -> None:
    """n steps of ``trainer`` as ``Trainer.run`` takes them between records: population mode on the loops in
    calls of many (``ManySteps.take``), every other run one ``Steps.step`` at a time."""
    import math

    active = torch.ones(1, dtype=torch.bool)
    if trainer.rule.many is None:
        for _ in range(n):
            trainer.rule.step(active)
        return
    done, most = 0, trainer.rule.many.most
    while done < n:
        if trainer.rule.many.take(min(most, n - done), [math.inf]) is None:
            raise RuntimeError("a timed step's loss was not finite")
        done += min(most, n - done)
