"""Population gradient flow (model/flow.py, training/flow.py; pretrain.solver: flow).

The integrand is the paper model's own gradient projected onto the subspace (against autograd through
``transformer.forward``); the quadrature over x_j* . v* matches a brute-force integral; the numba loops
and the torch implementation agree; the evaluation matches a Monte Carlo of the model's attention on
real samples in the task's own frame; the flow from the zero start is population gradient descent's
limit (an Euler step of the field is a projected step of the paper model); a killed run resumes
bit-identically; the thread count changes no bit.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from groupsparse.config.specs import ModelSpec, RunSpec
from groupsparse.model import flow, population
from groupsparse.model.transformer import embed, forward, logistic_loss, sine_positions
from groupsparse.training.flow import FlowRun, record_times, segment_ends

pytestmark = pytest.mark.usefixtures("one_thread")

LATE = np.array([-0.4, 0.01, 9.1, 6.4, 6.05, -0.42, -0.27, -0.41])  # a late state of the D = 16 flow
MID = np.array([0.3, -0.2, 1.1, 0.7, 0.5, -0.3, 0.2, -0.1])  # every coefficient active


def frame_input(w, across, t):
    """The input X (D, d) in the frame j* = 0, v* = e_1 with x_j* . v* = t."""
    X = torch.cat([torch.as_tensor(w)[None].clone(), torch.as_tensor(across)]).T.contiguous()
    X[0, 0] = t
    return X


def autograd_row(coef, X, scale_kind="none"):
    """The paper model's gradient at the coefficients' (W, v), label +1, projected onto the subspace."""
    D, d = X.shape
    ms = ModelSpec(score_scale=scale_kind)
    P = sine_positions(D, torch.float64)
    e1 = torch.zeros(d, dtype=torch.float64)
    e1[0] = 1.0
    W, v = population.build(torch.as_tensor(coef), e1, 0, P, torch.float64)
    params = {"layer0.W": W[None].requires_grad_(True), "v": v[None].requires_grad_(True)}
    f, _ = forward(params, embed(X[None, None], ms), ms)
    loss = logistic_loss(f, torch.ones(1, 1, dtype=torch.float64))
    gW, gv = torch.autograd.grad(loss.sum(), [params["layer0.W"], params["v"]])
    return population.project(gW[0], gv[0], e1, 0, P).numpy(), float(loss.detach())


@pytest.mark.parametrize("implementation", ["loops", "torch"])
@pytest.mark.parametrize("coef", [MID, LATE])
def test_the_integrand_is_the_projected_gradient_of_the_paper_model(implementation, coef):
    gen = torch.Generator().manual_seed(3)
    sample = flow.draw(4, 7, 3, gen)
    for n in range(3):
        for t in (0.0, 0.37, 2.1):
            row = flow.point_row(coef, sample.w[n], sample.across[n], t, implementation=implementation)
            want, loss = autograd_row(coef, frame_input(sample.w[n], sample.across[n], t))
            # the projection divides by the orbit sizes; the field's row is <G, E_k>, their product
            np.testing.assert_allclose(row[:8], want * flow.orbit_sizes(4, 7), rtol=1e-9, atol=1e-12)
            assert row[8] == pytest.approx(loss, rel=1e-12)


def test_the_integrand_with_scaled_scores():
    gen = torch.Generator().manual_seed(4)
    sample = flow.draw(3, 5, 1, gen)
    scale = 1 / math.sqrt(3 + 5)
    row = flow.point_row(MID, sample.w[0], sample.across[0], 0.8, scale=scale)
    want, _ = autograd_row(MID, frame_input(sample.w[0], sample.across[0], 0.8), "sqrt")
    np.testing.assert_allclose(row[:8], want * flow.orbit_sizes(3, 5), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("coef", [MID, LATE])
def test_the_adapted_quadrature_matches_a_brute_force_integral(coef):
    """The integral over t >= 0 (density 2 phi) by 32 adapted nodes against 400,000 midpoints on [0, 8.5]:
    late in training the logistic weight changes over ~1 / (gamma D) ~ 0.007 in t, which they resolve to
    about 1e-7 (the integrand by the torch implementation, checked against the loops above)."""
    d, D = 10, 16
    sample = flow.draw(d, D, 4, torch.Generator().manual_seed(5))
    rows = flow.Field(sample, d, nodes=32).rows(coef)
    M = 400_000
    h = flow.T_MAX / M
    ts = (torch.arange(M, dtype=torch.float64) + 0.5) * h
    dens = 2 * torch.exp(-ts * ts / 2) / math.sqrt(2 * math.pi) * h
    for n in range(4):
        field = flow._TorchField(sample.part(n, n + 1), coef, 1.0)
        G, loss = field._pieces(field._columns(field.sample), ts[None])
        brute = torch.cat([(G[0] * dens[:, None]).sum(0), (loss[0] * dens).sum()[None]]).numpy()
        np.testing.assert_allclose(rows[n], brute, rtol=1e-6, atol=1e-13)


def test_more_nodes_change_nothing_that_matters():
    d, D = 10, 16
    sample = flow.draw(d, D, 64, torch.Generator().manual_seed(6))
    g32 = flow.Field(sample, d, nodes=32).gradient(LATE)[1]
    g128 = flow.Field(sample, d, nodes=128).gradient(LATE)[1]
    np.testing.assert_allclose(g32, g128, rtol=1e-7)


def test_loops_and_torch_agree():
    d, D = 6, 9
    sample = flow.draw(d, D, 40, torch.Generator().manual_seed(7))
    for coef in (MID, LATE):
        a = flow.Field(sample, d, implementation="loops").rows(coef)
        b = flow.Field(sample, d, implementation="torch").rows(coef)
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)
        ea, eb = flow.evaluate(coef, sample), flow.evaluate(coef, sample, implementation="torch")
        for key in ea:
            assert ea[key] == pytest.approx(eb[key], rel=1e-10, abs=1e-14)


def test_the_evaluation_is_the_models_attention_in_the_tasks_frame():
    """r_own, r_other and the accuracy of ``flow.evaluate`` against the paper model's attention on 20,000
    fresh inputs of a task with its own j* and v* (the subspace's (W, v) built there): within 4 standard
    errors of the Monte Carlo."""
    d, D, j = 4, 6, 3
    gen = torch.Generator().manual_seed(8)
    vs = torch.randn(d, generator=gen, dtype=torch.float64)
    vs = vs / vs.norm()
    P = sine_positions(D, torch.float64)
    W, v = population.build(torch.as_tensor(MID), vs, j, P, torch.float64)
    X = torch.randn(20000, D, d, generator=gen, dtype=torch.float64)
    y = torch.sign(X[:, j] @ vs)
    ms = ModelSpec()
    f, S = forward({"layer0.W": W[None], "v": v[None]}, embed(X[None], ms), ms)
    off = 1 - S[0][:, j, :]  # (N, query): 1 - S[j*, query]
    own, other = off[:, j], torch.cat([off[:, :j], off[:, j + 1 :]], 1).mean(1)
    got = flow.evaluate(MID, flow.draw(d, D, 4096, torch.Generator().manual_seed(9)))
    for value, mc in ((got["r_own"], own), (got["r_other"], other)):
        assert abs(value - float(mc.mean())) < 4 * float(mc.std()) / math.sqrt(len(mc)) + 2e-3
    acc = ((torch.sign(f[0]) * y) > 0).double()
    assert abs(got["accuracy"] - float(acc.mean())) < 4 * float(acc.std()) / math.sqrt(len(acc)) + 2e-3


def test_an_euler_step_of_the_field_is_a_projected_gradient_step():
    """Population GD on the subspace is c <- c - eta M^-1 grad: the field's velocity times eta is that step
    for the same (fixed) inputs, here a sample whose x_j* . v* takes the quadrature's role (one t each)."""
    d, D = 5, 6
    sample = flow.draw(d, D, 8, torch.Generator().manual_seed(10))
    ts = [0.3, 1.2, 0.05, 2.0, 0.7, 0.9, 1.5, 0.01]
    rows = np.array([flow.point_row(MID, sample.w[n], sample.across[n], ts[n]) for n in range(8)])
    grads = np.array([autograd_row(MID, frame_input(sample.w[n], sample.across[n], ts[n]))[0] for n in range(8)])
    np.testing.assert_allclose(-rows[:, :8].mean(0) / flow.orbit_sizes(d, D), -grads.mean(0), rtol=1e-9)


def test_draws_are_nested_and_seeded():
    a = flow.draw(4, 5, 600, torch.Generator().manual_seed(11))
    b = flow.draw(4, 5, 1200, torch.Generator().manual_seed(11))
    assert torch.equal(a.w, b.w[:600]) and torch.equal(a.across, b.across[:600])
    assert not a.w[:, 0].any()


def test_record_grid_and_segments():
    T = 32 * 8**3
    grid, ends = record_times(T, 4), segment_ends(T)
    assert grid[0] == 0 and grid[-1] == T and np.all(np.diff(grid) > 0)
    assert set(ends) <= set(grid)  # a segment ends at a record: crossings are bracketed within one
    for kappa in (0.5, 1, 2, 4, 8, 16, 32):
        assert kappa * 8**3 in set(grid)
    assert grid[1] >= 0.25 and ends[0] == grid[1]


def flow_spec(D=5, steps=256, **flow_settings):
    return RunSpec.from_dict(
        {
            "study_seed": 3,
            "task_name": "f",
            "dtype": "float64",
            "task": {"d": 4, "D": D},
            "pretrain": {
                "steps": steps,
                "eta": 0.5,
                "gradient": "population",
                "solver": "flow",
                "attention_checkpoints": 3,
                "flow": {"samples": 64, "eval_samples": 64, "nodes": 16} | flow_settings,
            },
        }
    )


@pytest.fixture(scope="module")
def whole_flow():
    """Two seeds' uninterrupted flow: what every stopped and resumed flow below must give."""
    return FlowRun(flow_spec(), [0, 1]).run().trajectory


RESUME = pytest.mark.xdist_group("flow_resume")  # one worker computes whole_flow once


@RESUME
def test_a_killed_flow_resumes_bit_identically(tmp_path, whole_flow):
    spec, whole = flow_spec(), whole_flow

    class Killed(Exception):
        pass

    def kill_after(i, segment):
        if i == 1 and segment == 3:
            raise Killed

    state = tmp_path / "state.safetensors"
    with pytest.raises(Killed):
        FlowRun(spec, [0, 1], resume_path=state).run(progress=kill_after)
    assert state.exists()
    res = FlowRun(spec, [0, 1], resume_path=state).run()
    assert res.resumed_from_step > 0 and not state.exists()
    cols = [c for c in whole.columns if c != "cpu_seconds"]
    pd_equal = whole[cols].reset_index(drop=True).equals(res.trajectory[cols].reset_index(drop=True))
    assert pd_equal, "a resumed flow must give the uninterrupted flow's rows"


@RESUME
def test_a_stop_signal_stops_the_flow_within_a_segment_and_it_resumes_bit_identically(tmp_path, whole_flow):
    """SIGINT or SIGTERM (io.progress's stop request) stops the solver at its next step: the segment under way
    is dropped, the state saved at its start stays, and the resumed flow equals the uninterrupted one."""
    import signal

    from groupsparse.io import progress as stopping

    spec, whole = flow_spec(), whole_flow

    def stop_after(i, segment):
        if i == 1 and segment == 4:  # the request arrives while seed 1's fifth segment is to run
            stopping._stop["signal"] = signal.SIGTERM

    state = tmp_path / "state.safetensors"
    try:
        with pytest.raises(KeyboardInterrupt, match="SIGTERM; state saved at flow time"):
            FlowRun(spec, [0, 1], resume_path=state).run(progress=stop_after)
    finally:
        stopping._stop["signal"] = None
    assert state.exists()
    res = FlowRun(spec, [0, 1], resume_path=state).run()
    assert res.resumed_from_step > 0 and not state.exists()
    cols = [c for c in whole.columns if c != "cpu_seconds"]
    assert whole[cols].reset_index(drop=True).equals(res.trajectory[cols].reset_index(drop=True))


@RESUME
def test_a_stopped_seed_resumes_from_its_last_segment_not_from_the_start(tmp_path, whole_flow):
    """The seed under way keeps its finished segments: a run of one seed (the workflow's chunk) stopped in
    its fifth segment resumes at the end of its fourth, does only the rest, and ends bit-identical."""
    import signal

    from groupsparse.io import progress as stopping
    from groupsparse.training.resume import FlowResumeFile

    spec = flow_spec()
    whole = whole_flow[whole_flow["seed"] == 0]  # a seed's flow does not depend on the seeds run beside it

    def stop_after(i, segment):
        if segment == 4:
            stopping._stop["signal"] = signal.SIGINT

    state = tmp_path / "state.safetensors"
    try:
        with pytest.raises(KeyboardInterrupt, match="SIGINT; state saved at flow time"):
            FlowRun(spec, [0], resume_path=state).run(progress=stop_after)
    finally:
        stopping._stop["signal"] = None
    (saved,) = FlowResumeFile(state, spec.science_hash(), [0]).load()
    assert saved is not None, "the seed under way was saved"
    meta, _rows = saved
    assert meta["segment"] == 4 and meta["tau"] > 0
    res = FlowRun(spec, [0], resume_path=state).run()
    assert res.resumed_from_step == int(meta["tau"] / res.trajectory["eta"].iloc[0])
    cols = [c for c in whole.columns if c != "cpu_seconds"]
    assert whole[cols].reset_index(drop=True).equals(res.trajectory[cols].reset_index(drop=True))


def test_threads_change_no_bit():
    import numba

    spec = flow_spec(steps=64)
    one = FlowRun(spec, [0]).run().trajectory
    numba.set_num_threads(2)
    try:
        sample, _ = FlowRun(spec, [0]).samples(0)
        a = flow.Field(sample, 4, nodes=16).rows(MID)
    finally:
        numba.set_num_threads(1)
    b = flow.Field(sample, 4, nodes=16).rows(MID)
    assert np.array_equal(a, b)
    assert one["flow_time"].iloc[-1] == 64 * 0.5


def test_the_flow_records_its_crossings_and_attention():
    res = FlowRun(flow_spec(D=5, steps=512), [0]).run()
    traj = res.trajectory
    assert set(traj["record"]) >= {"start", "grid", "final"}
    assert (traj["algorithm"] == "flow").all() and (traj["status"] == "ok").all()
    for c in (0.02, 0.05, 0.1):
        target = 1 - math.exp(-c * 5)
        crossing = traj[(traj["record"] == "crossing") & (traj["attention_min_on_relevant"] >= target - 1e-6)]
        reached = traj[traj["attention_min_on_relevant"] >= target]
        if len(reached) and reached["flow_time"].min() > 0:
            assert len(crossing), f"the first crossing of 1 - exp(-{c} D) is recorded"
            first_grid = reached[reached["record"] != "crossing"]["flow_time"].min()
            assert crossing["flow_time"].min() <= first_grid
    att = res.attention
    for (_seed, _step), g in att.groupby(["seed", "step"]):
        sums = g.groupby("query")["mass"].sum()
        np.testing.assert_allclose(sums.to_numpy(), 1.0, atol=1e-9)  # each query's attention sums to 1
    assert res.params["layer0.W"].shape == (1, 9, 9)
