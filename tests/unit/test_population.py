"""Population gradient descent on its invariant subspace (model/population.py, pretrain.gradient: population).

The projector is orthogonal and idempotent; the mean of many batch gradients lies on the subspace
(the symmetry the projection rests on) and equals the projected gradient within its standard error;
the gradient is equivariant (another j*, v* gives the same coefficients on the transformed samples);
a run stays on the subspace exactly and records its coefficients; a resumed run is bit-identical.
"""

from __future__ import annotations

import math

import pytest
import torch

from groupsparse.config.errors import ConfigError
from groupsparse.config.specs import RunSpec
from groupsparse.model import dispatch, population
from groupsparse.model.transformer import sine_positions
from groupsparse.training.pretrain import Trainer

pytestmark = pytest.mark.usefixtures("one_thread")


def unit(d: int, gen: torch.Generator) -> torch.Tensor:
    v = torch.randn(d, generator=gen, dtype=torch.float64)
    return v / v.norm()


def random_point(d, D, gen):
    """Coefficients of a point on the subspace, away from the zero start (every direction active)."""
    return torch.tensor([0.8, -0.3, 1.2, 0.9, 0.4, -0.2, 0.3, 0.1], dtype=torch.float64) * (
        1 + 0.1 * torch.randn(8, generator=gen, dtype=torch.float64)
    )


def spec(d=4, D=6, steps=30, batch=64, dtype="float64", **pretrain):
    return RunSpec.from_dict(
        {
            "study_seed": 5,
            "task_name": "pop",
            "dtype": dtype,
            "task": {"d": d, "D": D},
            "pretrain": {
                "steps": steps,
                "batch": batch,
                "eval_size": 64,
                "record_every": 10,
                "gradient": "population",
                **pretrain,
            },
        }
    )


def test_the_projector_is_orthogonal_and_idempotent():
    gen = torch.Generator().manual_seed(1)
    d, D, j = 5, 7, 2
    P = sine_positions(D, torch.float64)
    vs = unit(d, gen)
    G, g = (
        torch.randn(d + D, d + D, generator=gen, dtype=torch.float64),
        torch.randn(d + D, generator=gen, dtype=torch.float64),
    )
    coef = population.project(G, g, vs, j, P)
    W, v = population.build(coef, vs, j, P, torch.float64)
    # idempotent: the projection of the projection is itself
    assert torch.allclose(population.project(W, v, vs, j, P), coef, atol=1e-12)
    # orthogonal: the residual has no component along any point of the subspace
    for k in range(population.N_COEF):
        basis = torch.zeros(population.N_COEF, dtype=torch.float64)
        basis[k] = 1.0
        Ek, ek = population.build(basis, vs, j, P, torch.float64)
        assert abs(float(((G - W) * Ek).sum() + ((g - v) * ek).sum())) < 1e-10
    # and the subspace is what the symmetries fix: cross blocks and v2 zero, Wff isotropic across v*
    assert not W[:d, d:].any() and not W[d:, :d].any() and not v[d:].any()
    u = unit(d, gen)
    u = u - (u @ vs) * vs
    u = u / u.norm()
    assert float(u @ W[:d, :d] @ vs) == pytest.approx(0, abs=1e-12)


@pytest.mark.parametrize("kernel_dtype", ["float64", "float32"])
def test_the_mean_of_many_batch_gradients_lies_on_the_subspace_and_is_the_projected_gradient(kernel_dtype):
    """At a point on the subspace, the average of 400 independent batch gradients (the population gradient
    up to Monte Carlo error) has no component off the subspace beyond its standard error, and its projection
    agrees with the mean projected gradient: the projection removes noise, not signal."""
    d, D = 4, 6
    sp = spec(d, D, dtype=kernel_dtype, batch=256)
    tr = Trainer(sp, [0])
    gen = torch.Generator().manual_seed(3)
    tr.coef[0] = random_point(d, D, gen)
    tr.rule.params = tr.rule.update.build(tr.parameters(), [0])
    task = tr.tasks[0]
    plan = dispatch.Plan(tr.plan.kernel)  # the plain batch gradient of the same kernel
    W, v = tr.parameters()["layer0.W"][0], tr.parameters()["v"][0]
    full, projected = [], []
    for _ in range(400):
        X, y = tr.batches.draw()[0]
        _, gW, gv = dispatch.loss_and_grads(plan, W, v, X, y, tr.positions, tr.scale, True)
        full.append(torch.cat([gW.flatten(), gv]).double())
        projected.append(population.project(gW, gv, task.v_star, task.j_star, tr.positions))
    full, projected = torch.stack(full), torch.stack(projected)
    mean, se = full.mean(0), full.std(0) / math.sqrt(len(full))
    m = d + D
    on = population.build(
        population.project(mean[: m * m].view(m, m), mean[m * m :], task.v_star, task.j_star, tr.positions),
        task.v_star,
        task.j_star,
        tr.positions,
        torch.float64,
    )
    off = mean - torch.cat([on[0].flatten(), on[1]])
    z = off / se.clamp_min(1e-12)
    assert float(z.abs().max()) < 5.0  # 110 entries: a 5 SE deviation would be a real asymmetry
    assert float((z**2).mean()) < 2.0  # and no systematic one (chi-square per entry ~ 1 under the symmetry)
    pm, pse = projected.mean(0), projected.std(0) / math.sqrt(len(projected))
    assert torch.allclose(
        pm,
        population.project(mean[: m * m].view(m, m), mean[m * m :], task.v_star, task.j_star, tr.positions),
        atol=1e-9,
    )
    assert (pse > 0).all()


def test_the_gradient_is_equivariant_in_j_star_and_v_star():
    """Population GD does not depend on j* or v*: the samples mapped by a permutation of the groups (j* to
    j*') and a rotation (v* to v*') give the same projected gradient, to rounding."""
    gen = torch.Generator().manual_seed(7)
    d, D, H = 4, 7, 200
    P = sine_positions(D, torch.float64)
    v1, j1 = unit(d, gen), 1
    v2, j2 = unit(d, gen), 5
    # rotation R with R v1 = v2 (a Householder reflection: orthogonal, maps v1 to v2)
    w = (v1 - v2) / (v1 - v2).norm()
    R = torch.eye(d, dtype=torch.float64) - 2 * torch.outer(w, w)
    perm = list(range(D))
    perm[j1], perm[j2] = perm[j2], perm[j1]  # group j1 goes to place j2
    X = torch.randn(d, D, H, generator=gen, dtype=torch.float64)
    y = torch.sign(torch.einsum("k,kb->b", v1, X[:, j1]))
    X2 = torch.einsum("ik,kjb->ijb", R, X)[:, perm]
    assert torch.equal(torch.sign(torch.einsum("k,kb->b", v2, X2[:, j2])), y) or torch.allclose(
        torch.einsum("k,kb->b", v2, X2[:, j2]), torch.einsum("k,kb->b", v1, X[:, j1])
    )
    coef = random_point(d, D, gen)
    plan = dispatch.Plan("general")
    W1, u1 = population.build(coef, v1, j1, P, torch.float64)
    W2, u2 = population.build(coef, v2, j2, P, torch.float64)
    _, gW1, gv1 = dispatch.loss_and_grads(plan, W1, u1, X, y, P, 1.0, True)
    _, gW2, gv2 = dispatch.loss_and_grads(plan, W2, u2, X2.contiguous(), y, P, 1.0, True)
    c1 = population.project(gW1, gv1, v1, j1, P)
    c2 = population.project(gW2, gv2, v2, j2, P)
    assert torch.allclose(c1, c2, rtol=1e-10, atol=1e-12)
    assert float(c1.abs().max()) > 1e-3


@pytest.mark.parametrize("D", [6, 24])  # the general kernel, and the symmetric one (its loops in float32)
def test_a_run_stays_on_the_subspace_exactly_and_records_its_coefficients(D):
    sp = spec(4, D, steps=25, batch=32, dtype="float32")
    tr = Trainer(sp, [0, 1])
    res = tr.run()
    W, v = res.params["layer0.W"], res.params["v"]
    for s in range(2):
        task = tr.tasks[s]
        built = population.build(tr.coef[s], task.v_star, task.j_star, tr.positions, torch.float32)
        assert torch.equal(W[s], built[0]) and torch.equal(v[s], built[1])  # W, v are the coefficients' point
        assert not W[s, :4, 4:].any() and not W[s, 4:, :4].any() and not v[s, 4:].any()
    last = res.trajectory[res.trajectory["step"] == 25].sort_values("seed")
    assert torch.allclose(torch.tensor(last["pop_v1_along"].to_numpy()), tr.coef[:, 2])
    assert (last["algorithm"] == "population").all() and (last["eta"] == sp.pretrain.eta).all()
    assert (last["attention_min_pooled"] >= last["attention_min_on_relevant"] - 1e-6).all()
    assert res.trajectory["pop_wff_along"].abs().max() > 0


@pytest.mark.parametrize("d, D", [(4, 24), (10, 32)])
def test_the_loops_step_from_the_coefficients_is_the_general_route_to_float32_rounding(d, D):
    """Population mode on the symmetric loops goes from the coefficients to their gradient without W
    (model/population_loops.py): the same step as building W, the loops' gradient of W and its projection,
    to float32 rounding; and both within the loops' float32 accuracy of the float64 general kernel's."""
    sp = spec(d, D, batch=256, dtype="float32")
    tr = Trainer(sp, [0])
    assert tr.plan.from_coefficients
    gen = torch.Generator().manual_seed(11)
    coef = random_point(d, D, gen) * 0.3
    task, P = tr.tasks[0], tr.positions
    X, y = tr.batches.draw()[0]
    step = dispatch.coefficient_steps(tr.plan, [task], D, tr.scale)[0]
    loss, direct = step(coef, X, y)
    W, v = population.build(coef, task.v_star, task.j_star, P, torch.float32)
    loss_w, gW, gv = dispatch.loss_and_grads(dispatch.Plan("symmetric_loops"), W, v, X, y, P, tr.scale, True)
    route = population.project(gW, gv, task.v_star, task.j_star, P)
    P64 = sine_positions(D, torch.float64)
    W64, v64 = population.build(coef, task.v_star, task.j_star, P64, torch.float64)
    X64, y64 = X.double(), y.double()
    loss64, gW64, gv64 = dispatch.loss_and_grads(dispatch.Plan("general"), W64, v64, X64, y64, P64, tr.scale, True)
    exact = population.project(gW64, gv64, task.v_star, task.j_star, P64)
    size = float(exact.abs().max())
    assert size > 1e-3
    assert float((direct - route).abs().max()) <= 3e-6 * size
    assert float((direct - exact).abs().max()) <= 3e-6 * size
    assert float((route - exact).abs().max()) <= 3e-6 * size
    assert abs(float(loss) - float(loss64)) <= 1e-6 and abs(float(loss_w) - float(loss64)) <= 1e-6


def test_a_loops_run_from_the_coefficients_follows_the_general_route_and_float64():
    """60 steps at D = 24 from the coefficients (float32 loops) against the general route (the torch form of
    the symmetric kernel, float32: W built every step, its gradient projected) and a float64 run fed the
    same float32 samples: the coefficients agree to float32 rounding along the way."""
    sp = spec(4, 24, steps=60, batch=64, dtype="float32", eta=0.5)
    direct = Trainer(sp, [0, 1])
    route = Trainer(sp, [0, 1], plan=dispatch.plan(sp, kernel="symmetric"))
    wide = Trainer(spec(4, 24, steps=60, batch=64, dtype="float64", eta=0.5), [0, 1], draw_dtype=torch.float32)
    assert direct.plan.from_coefficients and not route.plan.from_coefficients
    a, b, c = direct.run(), route.run(), wide.run()
    size = float(c.trajectory["pop_wff_along"].abs().max())
    assert size > 1e-2
    for col in population_columns():
        assert float((a.trajectory[col] - c.trajectory[col]).abs().max()) <= 2e-6 * max(size, 1.0), col
        assert float((b.trajectory[col] - c.trajectory[col]).abs().max()) <= 2e-6 * max(size, 1.0), col
    assert (
        float((a.trajectory["attention_min_on_relevant"] - c.trajectory["attention_min_on_relevant"]).abs().max())
        < 1e-5
    )
    for s in range(2):  # W and v, built only when read, are the coefficients' point
        task = direct.tasks[s]
        W, v = population.build(direct.coef[s], task.v_star, task.j_star, direct.positions, torch.float32)
        assert torch.equal(a.params["layer0.W"][s], W) and torch.equal(a.params["v"][s], v)


def population_columns() -> list[str]:
    return [f"pop_{name}" for name in population.COEFFICIENTS]


def test_the_population_loops_vectorise_in_float32_only():
    """As the symmetric loops (test_symmetric.py): every vectorised operation is on float32 lanes; the
    per-sample sums added in float64 are scalar."""
    import re

    from numba import njit

    from groupsparse.model import population_loops, symmetric_loops

    fresh = njit(**dict(symmetric_loops.FMA, cache=False))(population_loops.loss_and_sums.py_func)  # inspectable
    gen = torch.Generator().manual_seed(2)
    d, D, H = 5, 12, 40
    X = torch.randn(d, D, H, generator=gen).numpy()
    y = torch.sign(torch.randn(H, generator=gen)).numpy()
    v = (torch.ones(d) / d**0.5).numpy()
    CT, ppT = torch.randn(D, D, generator=gen).numpy(), torch.empty(D, D).numpy()
    f32 = population_loops.np.float32
    fresh(X, v, CT, f32(0.1), f32(0.2), f32(0.3), y, ppT, torch.empty(3, dtype=torch.float64).numpy())
    ir = next(iter(fresh.overloads.values())).library.get_llvm_str()
    vector_op = r"= (?:fadd|fsub|fmul|fdiv|call)[^\n]*<\d+ x {}>"
    assert len(re.findall(vector_op.format("float"), ir)) > 50
    assert not re.findall(vector_op.format("double"), ir)


def test_seeds_differ_only_by_monte_carlo_error():
    """Two seeds (their own j*, v*, data) follow one population trajectory: at a batch of 1024 their
    coefficients after 40 steps differ by much less than the coefficients themselves."""
    tr = Trainer(spec(4, 6, steps=40, batch=1024), [0, 1])
    assert tr.tasks[0].j_star != tr.tasks[1].j_star or not torch.equal(tr.tasks[0].v_star, tr.tasks[1].v_star)
    tr.run()
    c = tr.coef
    assert float((c[0] - c[1]).abs().max()) < 0.05 * float(c.abs().max())


class Interrupted(RuntimeError):
    pass


def stops_after(*args, **kw) -> Trainer:
    """A trainer killed (as by a job time limit) at its 25th step's draw (one step at a time or within a call
    of many steps)."""
    trainer = Trainer(*args, **kw)
    draw, drawn = trainer.batches.draw, [0]

    def dying_draw():
        drawn[0] += 1
        if drawn[0] == 25:
            raise Interrupted
        return draw()

    trainer.batches.draw = dying_draw
    if trainer.rule.many is not None:
        take = trainer.rule.many.take

        def dying_take(k, bounds):
            drawn[0] += k
            if drawn[0] >= 25:
                raise Interrupted
            return take(k, bounds)

        trainer.rule.many.take = dying_take
    return trainer


def one_by_one(*args) -> Trainer:
    """Population mode on the loops taking every step alone (no ``ManySteps``)."""
    trainer = Trainer(*args)
    trainer.rule.many = None
    return trainer


def test_many_steps_in_one_call_are_the_steps_one_by_one():
    """The steps between recordings in calls of many (population_loops.descend): the same trajectory, the same
    coefficients and W, to the last bit, as one step at a time; calls of at most a few steps, too."""
    sp = spec(4, 24, steps=300, batch=32, dtype="float32", eta=0.5)
    fused, alone = Trainer(sp, [0, 1]), one_by_one(sp, [0, 1])
    assert fused.rule.many is not None
    calls = []
    original = fused.rule.many.take
    fused.rule.many.take = lambda k, b: calls.append(k) or original(k, b)
    a, b = fused.run(), alone.run()
    assert sum(calls) > 200  # most steps (all but the recorded ones, log-spaced early) in calls of many
    assert torch.equal(fused.coef, alone.coef)
    for k in a.params:
        assert torch.equal(a.params[k], b.params[k])
    cols = [c for c in a.trajectory.columns if c != "wall_seconds"]
    assert a.trajectory[cols].equals(b.trajectory[cols])
    few = Trainer(sp, [0, 1])
    few.rule.many.most = 3
    c = few.run()
    assert torch.equal(few.coef, alone.coef) and c.trajectory[cols].equals(b.trajectory[cols])


def test_a_call_of_many_steps_that_meets_a_divergence_leaves_it_to_the_steps_one_by_one():
    """A step size far past the stability edge: the fused call stops at the first loss above the bound and
    changes nothing (generators and coefficients as before); the steps one by one then record the divergence
    at the same step, with the same trajectory."""
    sp = spec(4, 24, steps=300, batch=32, dtype="float32", eta=2.0)
    fused, alone = Trainer(sp, [0, 1]), one_by_one(sp, [0, 1])
    refused = []
    original = fused.rule.many.take
    fused.rule.many.take = lambda k, b: (lambda r: refused.append(r is None) or r)(original(k, b))
    a, b = fused.run(), alone.run()
    assert "diverged" in b.status and a.status == b.status and a.diverged_step == b.diverged_step
    assert any(refused)
    cols = [c for c in a.trajectory.columns if c != "wall_seconds"]
    assert a.trajectory[cols].equals(b.trajectory[cols])
    assert torch.equal(fused.coef, alone.coef)


@pytest.mark.parametrize("task", [{}, {"sigma_x": 2.0}, {"label_noise": 0.1}, {"D": 7}])
def test_many_draws_at_once_are_the_draws_one_by_one(task):
    """sample_inner_steps: the samples and the generator's end state of that many sample_inner calls (one draw
    of every normal where torch's stream allows it; D = 7 with 13 samples a step is 455 values, not a multiple
    of 16, and label noise draws between the steps: the calls one by one)."""
    from groupsparse.data.synthetic import make_task

    ts = RunSpec.from_dict(spec(5, 8).to_dict() | {"task": {"d": 5, "D": 8} | task}).task
    t = make_task(ts, 7, "pop", 0)
    n = 26 if task.get("D") == 7 else 32
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    X, y = t.sample_inner_steps(5, n, g1, antithetic=True, dtype=torch.float32)
    Xs, ys = zip(*(t.sample_inner(n, g2, antithetic=True, dtype=torch.float32) for _ in range(5)))
    assert torch.equal(X, torch.stack(Xs)) and torch.equal(y, torch.stack(ys))
    assert torch.equal(g1.get_state(), g2.get_state())


@pytest.mark.parametrize("optimizer", ["population", "population_loops", "adam"])
def test_a_killed_run_resumes_bit_identically(tmp_path, optimizer):
    """Population mode's coefficients (on the general kernel, and on the loops from the coefficients, whose W
    is built only when read) and Adam's moments are part of the resume state."""
    sp = (
        spec(4, 6, steps=40, batch=32)
        if optimizer == "population"
        else spec(4, 24, steps=40, batch=32, dtype="float32")
        if optimizer == "population_loops"
        else RunSpec.from_dict(
            spec(4, 6, steps=40, batch=32).to_dict()
            | {
                "pretrain": {
                    "steps": 40,
                    "batch": 32,
                    "eval_size": 64,
                    "record_every": 10,
                    "optimizer": "adam",
                    "eta": 0.01,
                }
            }
        )
    )
    whole = Trainer(sp, [0, 1]).run()
    path = tmp_path / "resume.safetensors"
    with pytest.raises(Interrupted):
        stops_after(sp, [0, 1], resume_path=path, resume_every=10).run()
    resumed = Trainer(sp, [0, 1], resume_path=path, resume_every=10).run()
    assert resumed.resumed_from_step == 20
    for k in whole.params:
        assert torch.equal(resumed.params[k], whole.params[k])
    cols = [c for c in whole.trajectory.columns if c != "wall_seconds"]
    assert whole.trajectory[cols].equals(resumed.trajectory[cols])


@pytest.mark.parametrize(
    "change, key",
    [
        ({"task": {"d": 4, "D": 6, "features": "correlated"}}, "task.features"),
        ({"task": {"d": 4, "D": 6, "relevant_groups": 2}}, "task.relevant_groups"),
        ({"model": {"init": "random"}}, "model.init"),
        ({"model": {"positions": "add"}}, "model"),
        ({"task": {"d": 1, "D": 6}}, "task.d"),
    ],
)
def test_settings_that_break_the_symmetry_are_refused_naming_the_key(change, key):
    raw = spec().to_dict()
    raw |= change
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        RunSpec.from_dict(raw)
