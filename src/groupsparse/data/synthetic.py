"""Group-sparse classification data (docs/STUDY.md section 1).

Layout: a batch X has shape (n, D, d); X[b, j] is group j ("variable" x_j) of sample b.
The label is y = sign(sum_k <v_k, x_{j_k}>) over the K relevant groups (K = 1 in the paper).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from ..config.seeding import torch_generator, transfer_identity
from ..config.specs import TaskSpec


@dataclass
class GroupSparseTask:
    spec: TaskSpec
    relevant: torch.Tensor  # (K,) int64: the relevant groups j_1..j_K (j* = relevant[0])
    directions: torch.Tensor  # (K, d) float64 unit vectors v_k (v* = directions[0])
    draws_on_device = True  # sample from a generator of the run's device (see Trainer)

    @property
    def j_star(self) -> int:
        return int(self.relevant[0])

    @property
    def v_star(self) -> torch.Tensor:
        return self.directions[0]

    def with_relevant(self, relevant: torch.Tensor) -> GroupSparseTask:
        """The same law with other relevant groups (the negative control moves j*)."""
        return GroupSparseTask(dataclasses.replace(self.spec, j_star=int(relevant[0])), relevant, self.directions)

    def sample(
        self,
        n: int,
        gen: torch.Generator,
        *,
        antithetic: bool = True,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        split: str = "train",
        draw_dtype: torch.dtype | None = None,
    ):
        """Draw n samples (X (n, D, d), y (n,)). Antithetic: the second half is -X with label -y.

        The values are those of :meth:`sample_inner` (same generator, same draws), laid out by
        sample. ``draw_dtype`` (default ``dtype``) is the precision the normals are drawn in;
        tests set it to feed float64 arithmetic the samples of a float32 run.
        ``split`` ("train" | "test") is ignored here: a synthetic task draws both from the same law;
        it exists so that every task class (real-image tasks keep held-out images) shares one interface.
        """
        Xi, y = self.sample_inner(n, gen, antithetic=antithetic, dtype=draw_dtype or dtype)
        m = Xi.shape[-1]
        X = Xi.permute(2, 1, 0)
        if not antithetic:
            return X.to(dtype=dtype, device=device).contiguous(), y.to(dtype=dtype, device=device)
        # cast once, then mirror: -round(x) == round(-x), so this equals casting cat([X, -X])
        out = torch.empty((n, self.spec.D, self.spec.d), dtype=dtype, device=Xi.device)
        out[:m].copy_(X)
        torch.neg(out[:m], out=out[m:])
        return out.to(device=device), torch.cat([y, -y]).to(dtype=dtype, device=device)

    def sample_inner(
        self, n: int, gen: torch.Generator, *, antithetic: bool = True, dtype: torch.dtype = torch.float32
    ):
        """The draw behind :meth:`sample`, in the fast path's layout, on the generator's device.

        Returns X (d, D, m), contiguous, X[k, j, b] = coordinate k of group j of sample b, and the
        labels y (m,), with m = n // 2 when ``antithetic`` (the first half only: the batch is
        [X, -X] with labels [y, -y]), else m = n. Normals are drawn in ``dtype`` (float32 runs
        draw float32 normals, float64 runs float64 normals) by ``standard_normal``.
        """
        if antithetic and n % 2:
            raise ValueError(f"antithetic sampling needs an even sample count, got n={n}")
        spec = self.spec
        m = n // 2 if antithetic else n
        rel = self.relevant.to(gen.device)
        if dtype == torch.float64:
            # float64: drawn sample by sample, then laid out, so a float64 run (the scaling grid, the
            # ablations) draws the very samples its recorded tables were made from
            Xs = _draw_features(spec, m, gen, dtype, inner=False)
            clean = torch.sign(torch.einsum("bkd,kd->b", Xs[:, rel, :], self.directions.to(Xs.device)))
            X = Xs.permute(2, 1, 0).contiguous()
        else:
            X = _draw_features(spec, m, gen, dtype, inner=True)
            clean = self._clean_labels(X)
        clean[clean == 0] = 1.0
        y = clean
        if spec.label_noise > 0:
            flip = torch.rand(m, generator=gen, dtype=dtype, device=X.device) < spec.label_noise
            y = torch.where(flip, -clean, clean)
        return X, y

    def _clean_labels(self, X: torch.Tensor) -> torch.Tensor:
        """sign(sum over relevant groups of v_k . x_k) of X (d, D, m) in the draw's layout (0 where it is 0)."""
        v = self.directions.to(dtype=X.dtype, device=X.device)
        score = v[0] @ X[:, self.j_star, :]  # (m,): X[:, j, :] is a (d, m) view, no gather
        for k in range(1, len(self.relevant)):
            score += v[k] @ X[:, int(self.relevant[k]), :]
        return torch.sign(score)

    def sample_inner_steps(
        self, steps: int, n: int, gen: torch.Generator, *, antithetic: bool = True, dtype: torch.dtype = torch.float32
    ):
        """``steps`` consecutive draws of :meth:`sample_inner` stacked: X (steps, d, D, m), y (steps, m).

        The samples are those of the calls one after another, and the generator ends where they leave it.
        Where that is the same stream, one draw of all the normals (float32 Gaussian features on a CPU, no
        label noise, a multiple of 16 values a step: torch's CPU kernel turns each 16 uniforms into 16
        normals in order, so one long draw is the short ones end to end; ``tests/unit/test_population.py``
        checks it); otherwise the calls one by one.
        """
        spec, m = self.spec, n // 2 if antithetic else n
        one_draw = (
            dtype == torch.float32
            and gen.device.type == "cpu"
            and spec.features == "gaussian"
            and spec.label_noise == 0
            and (spec.d * spec.D * m) % 16 == 0
            and not (antithetic and n % 2)
        )
        if not one_draw:
            Xs, ys = zip(*(self.sample_inner(n, gen, antithetic=antithetic, dtype=dtype) for _ in range(steps)))
            return torch.stack(Xs), torch.stack(ys)
        X = torch.randn((steps, spec.d, spec.D, m), generator=gen, dtype=dtype)
        if spec.sigma_x != 1:
            X.mul_(spec.sigma_x)
        y = torch.stack([self._clean_labels(X[t]) for t in range(steps)])
        y[y == 0] = 1.0
        return X, y


def standard_normal(shape: tuple[int, ...], gen: torch.Generator, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``torch.randn(shape, generator=gen, dtype=dtype)`` on the generator's device.

    float32 (and any draw off the CPU): torch's own kernel, which on a CPU with AVX2 turns
    float32 uniforms into normals with vectorised Box-Muller, about 2.4 ns a value here
    (numpy's PCG64 + ziggurat float32 path measured 3x slower; benchmarks/bench.py
    compares them). float64 on a CPU: about twice as fast as torch's kernel, as follows.

    torch's CPU kernel fills the tensor with uniforms u, then turns each block of 16 into
    normals by Box-Muller (radius from u[0:8], angle from u[8:16]) with scalar libm calls,
    redrawing 16 uniforms for the last block when the size is not a multiple of 16. This
    does the same with torch's vectorised log/sqrt/cos/sin: the generator makes the same
    draws and ends in the same state, and the normals agree to the last bit or within one
    unit in the last place (about 1% of them differ, tests/unit/test_fastpath.py checks the
    bound). Below 16 values torch's own path is used.
    """
    if dtype != torch.float64 or gen.device.type != "cpu":
        return torch.randn(shape, generator=gen, dtype=dtype, device=gen.device)
    n = math.prod(shape)
    if n < 16:
        return torch.randn(shape, generator=gen, dtype=torch.float64)
    out = torch.rand(n, generator=gen, dtype=torch.float64)
    whole = n - n % 16
    _box_muller_blocks(out[:whole])
    if whole < n:
        tail = torch.rand(16, generator=gen, dtype=torch.float64)
        _box_muller_blocks(tail)
        out[n - 16 :] = tail
    return out.view(shape)


_BM_CHUNK = 4096  # blocks per pass: 32768 values per op, torch's grain size, so no op is split across threads


def _box_muller_blocks(u: torch.Tensor) -> None:
    """In place: uniforms in blocks of 16 -> normals, as torch's ``normal_fill_16``.

    Passes of at most 32768 values: torch computes a vectorised op's last few values with
    scalar code (rounding differently), and an op split across threads has such a remainder
    at every split, so larger passes would make the bits depend on the thread count.
    """
    all_blocks = u.view(-1, 2, 8)
    for start in range(0, all_blocks.shape[0], _BM_CHUNK):
        blocks = all_blocks[start : start + _BM_CHUNK]
        radius = torch.log(1 - blocks[:, 0]).mul_(-2).sqrt_()
        theta = blocks[:, 1] * (2 * math.pi)
        torch.mul(radius, torch.cos(theta), out=blocks[:, 0])
        torch.mul(radius, torch.sin(theta), out=blocks[:, 1])


def _draw_features(
    spec: TaskSpec, m: int, gen: torch.Generator, dtype: torch.dtype = torch.float64, inner: bool = True
) -> torch.Tensor:
    """m samples' features drawn in ``dtype`` on gen's device: (d, D, m) [coordinate, group, sample]
    with ``inner``, else (m, D, d) [sample, group, coordinate] (the order float64 draws keep)."""
    d, D = spec.d, spec.D
    shape = (d, D, m) if inner else (m, D, d)
    new = {"dtype": dtype, "device": gen.device}
    if spec.features == "gaussian":
        X = standard_normal(shape, gen, dtype)
        return X if spec.sigma_x == 1 else X.mul_(spec.sigma_x)  # in place: no extra pass when sigma = 1
    if spec.features == "correlated":
        # Equicorrelated coordinates within a group: Cov = sigma^2 ((1-rho) I + rho 11^T).
        rho = spec.feature_rho
        cov = (1 - rho) * torch.eye(d, dtype=torch.float64) + rho * torch.ones(d, d, dtype=torch.float64)
        chol = torch.linalg.cholesky(cov).to(**new)
        z = standard_normal(shape, gen, dtype)
        return (spec.sigma_x * chol @ z.view(d, -1)).view(shape) if inner else spec.sigma_x * z @ chol.T
    if spec.features == "student_t":
        # t = z / sqrt(chi2_nu / nu), rescaled to variance sigma^2 (var of t_nu is nu/(nu-2)).
        nu = spec.student_dof
        z = standard_normal(shape, gen, dtype)
        chi2 = 2.0 * torch._standard_gamma(torch.full((1, D, m) if inner else (m, D, 1), nu / 2, **new), generator=gen)
        return spec.sigma_x * z / torch.sqrt(chi2 / nu) / math.sqrt(nu / (nu - 2))
    raise ValueError(f"task.features: unknown law {spec.features!r}")


def draw_task(
    spec: TaskSpec, *identity: object, relevant: list[int] | None = None, directions: torch.Tensor | None = None
) -> GroupSparseTask:
    """The task (j*, v*) of one repetition, drawn from the hashed ``identity`` unless given.

    j* uniform in 0..D-1 (or ``spec.j_star``), the other relevant groups uniform among
    the rest, each v_k uniform on the unit sphere.
    """
    gen = torch_generator(*identity, "task")
    perm = torch.randperm(spec.D, generator=gen)
    if relevant is None:
        if spec.j_star is not None:
            rest = [int(j) for j in perm if int(j) != spec.j_star]
            relevant = [spec.j_star] + rest[: spec.relevant_groups - 1]
        else:
            relevant = [int(j) for j in perm[: spec.relevant_groups]]
    if directions is None:
        directions = torch.randn(len(relevant), spec.d, generator=gen, dtype=torch.float64)
        directions = directions / directions.norm(dim=1, keepdim=True)
    return GroupSparseTask(spec, torch.tensor(relevant, dtype=torch.int64), directions.to(torch.float64))


def direction_at_angle(v: torch.Tensor, angle_deg: float, gen: torch.Generator) -> torch.Tensor:
    """A unit vector at ``angle_deg`` degrees from unit vector v, otherwise uniformly random."""
    w = torch.randn(v.shape, generator=gen, dtype=torch.float64)
    w = w - (w @ v) * v
    if w.norm() < 1e-12:  # d = 1: the only unit vectors are +-v
        return v if math.cos(math.radians(angle_deg)) >= 0 else -v
    w = w / w.norm()
    a = math.radians(angle_deg)
    return math.cos(a) * v + math.sin(a) * w


def downstream_task(run_spec, seed: int, transfer, base: GroupSparseTask) -> GroupSparseTask:
    """The transfer task of repetition ``seed``: the relevant groups of ``base``, new directions v~*
    (fresh unit vectors, or at ``transfer.angle_deg`` to v*), optionally another sigma_x."""
    gen = torch_generator(*transfer_identity(run_spec, seed, "transfer"), "direction")
    if transfer.angle_deg is None:
        directions = torch.randn(base.directions.shape, generator=gen, dtype=torch.float64)
        directions = directions / directions.norm(dim=1, keepdim=True)
    else:
        directions = torch.stack([direction_at_angle(v, transfer.angle_deg, gen) for v in base.directions])
    task_spec = run_spec.task
    if transfer.sigma_x is not None:
        task_spec = dataclasses.replace(task_spec, sigma_x=transfer.sigma_x)
    return GroupSparseTask(task_spec, base.relevant.clone(), directions)


def make_task(spec, *identity: object, **kwargs):
    """The task of one repetition, made by its kind (data.kinds: ``draw_task`` for a synthetic one).

    Every kind's task shares the interface (spec, relevant, j_star, sample, with_relevant); an
    image task has no direction v* and samples with ``split="train"|"test"``.
    """
    from .kinds import make_task as by_kind

    return by_kind(spec, *identity, **kwargs)
