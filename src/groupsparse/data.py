"""Group-sparse classification data (STUDY.md section 1).

Layout: a batch X has shape (n, D, d); X[b, j] is group j ("variable" x_j) of sample b.
The label is y = sign(sum_k <v_k, x_{j_k}>) over the K relevant groups (K = 1 in the paper).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .seeding import torch_generator
from .specs import TaskSpec


@dataclass
class GroupSparseTask:
    spec: TaskSpec
    relevant: torch.Tensor    # (K,) int64: the relevant groups j_1..j_K (j* = relevant[0])
    directions: torch.Tensor  # (K, d) float64 unit vectors v_k (v* = directions[0])

    @property
    def j_star(self) -> int:
        return int(self.relevant[0])

    @property
    def v_star(self) -> torch.Tensor:
        return self.directions[0]

    def sample(self, n: int, gen: torch.Generator, *, antithetic: bool = True,
               dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
        """Draw n samples (X, y). Antithetic: the second half is -X with label -y."""
        if antithetic and n % 2:
            raise ValueError(f"antithetic sampling needs an even sample count, got n={n}")
        spec = self.spec
        m = n // 2 if antithetic else n
        X = _draw_features(spec, m, gen).to(dtype=torch.float64)
        clean = torch.sign(torch.einsum("bkd,kd->b", X[:, self.relevant, :], self.directions))
        clean[clean == 0] = 1.0
        y = clean
        if spec.label_noise > 0:
            flip = torch.rand(m, generator=gen, dtype=torch.float64) < spec.label_noise
            y = torch.where(flip, -clean, clean)
        if antithetic:
            X = torch.cat([X, -X])
            y = torch.cat([y, -y])
        return X.to(dtype=dtype, device=device), y.to(dtype=dtype, device=device)


def _draw_features(spec: TaskSpec, m: int, gen: torch.Generator) -> torch.Tensor:
    shape = (m, spec.D, spec.d)
    if spec.features == "gaussian":
        return spec.sigma_x * torch.randn(shape, generator=gen, dtype=torch.float64)
    if spec.features == "correlated":
        # Equicorrelated coordinates within a group: Cov = sigma^2 ((1-rho) I + rho 11^T).
        rho = spec.feature_rho
        cov = (1 - rho) * torch.eye(spec.d, dtype=torch.float64) + rho * torch.ones(spec.d, spec.d, dtype=torch.float64)
        chol = torch.linalg.cholesky(cov)
        z = torch.randn(shape, generator=gen, dtype=torch.float64)
        return spec.sigma_x * z @ chol.T
    if spec.features == "student_t":
        # t = z / sqrt(chi2_nu / nu), rescaled to variance sigma^2 (var of t_nu is nu/(nu-2)).
        nu = spec.student_dof
        z = torch.randn(shape, generator=gen, dtype=torch.float64)
        chi2 = 2.0 * torch._standard_gamma(torch.full((m, spec.D, 1), nu / 2, dtype=torch.float64), generator=gen)
        return spec.sigma_x * z / torch.sqrt(chi2 / nu) / math.sqrt(nu / (nu - 2))
    raise ValueError(f"task.features: unknown law {spec.features!r}")


def draw_task(spec: TaskSpec, *identity: object, relevant: list[int] | None = None,
              directions: torch.Tensor | None = None) -> GroupSparseTask:
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
