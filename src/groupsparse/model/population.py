"""Population gradient descent on its invariant subspace: a measurement device, not a learning algorithm.

From W = 0, v = 0 population gradient descent keeps every symmetry of the data law (docs/STUDY.md
section 3.3): X -> -X (v2 = 0, W's feature/position blocks 0), the rotations and reflections of the
features that fix v* (Wff = alpha v* v*^T + beta (I - v* v*^T), v1 = gamma v*) and the permutations
of the groups that fix j*. P is orthonormal and symmetric (P P = I), so the position block enters
the scores as C = P Wpp P [key i, query j], and gradient descent on Wpp is gradient descent on C,
which stays constant on the five orbits of those permutations on pairs (key, query):

    pos_ss  C[j*, j*]                  pos_sq  C[j*, j], j != j*   (the relevant key, another query)
    pos_qs  C[i, j*], i != j*          pos_dd  C[i, i], i != j*    pos_oo  C[i, j], i != j, both != j*

So population GD from the zero start is a dynamics of eight coefficients (three of the five position
values matter: a constant added to a query's column of scores changes nothing), the same for every
j* and v*. This module maps the coefficients to W, v and projects a gradient orthogonally (in the
Frobenius metric of W and the Euclidean one of v) onto the subspace: c_k -= eta <G, E_k> / |E_k|^2
is W -= eta Proj(G). A batch gradient projected so is an unbiased estimate of the population
gradient without its noise in the other directions. It uses j* and v*, which a learner does not
know: it measures what the theorem's algorithm does; it does not train a model one could deploy.
"""

from __future__ import annotations

import functools

import torch

COEFFICIENTS = ("wff_along", "wff_across", "v1_along", "pos_ss", "pos_sq", "pos_qs", "pos_dd", "pos_oo")
N_COEF = len(COEFFICIENTS)


@functools.lru_cache(maxsize=64)
def orbit_masks(D: int, j_star: int, dtype=torch.float64, device="cpu") -> torch.Tensor:
    """(5, D, D) indicators of the five orbits on [key i, query j], in the order of COEFFICIENTS[3:]
    (cached: a step projects with them; treat as read-only)."""
    eye = torch.eye(D, dtype=torch.bool, device=device)
    star = torch.zeros(D, dtype=torch.bool, device=device)
    star[j_star] = True
    key, query = star[:, None], star[None, :]
    masks = [
        key & query,  # ss
        key & ~query,  # sq: key j*, query j != j*
        ~key & query,  # qs: key i != j*, query j*
        eye & ~key,  # dd
        ~eye & ~key & ~query,  # oo
    ]
    return torch.stack(masks).to(dtype)


def check_shape(d: int, D: int) -> None:
    """The subspace needs a direction across v* (d >= 2) and two distinct non-relevant groups (D >= 3)."""
    if d < 2 or D < 3:
        raise ValueError(f"population mode needs d >= 2 and D >= 3 (every orbit non-empty), got d = {d}, D = {D}")


def build(coef: torch.Tensor, v_star: torch.Tensor, j_star: int, P: torch.Tensor, dtype) -> tuple:
    """W (m, m) and v (m,) in ``dtype`` from one seed's coefficients (N_COEF,), its v* (d,) and j*."""
    d, D = v_star.shape[0], P.shape[0]
    c = coef.to(torch.float64)
    vs = v_star.to(device=coef.device, dtype=torch.float64)
    outer = torch.outer(vs, vs)
    W = torch.zeros(d + D, d + D, dtype=dtype, device=coef.device)
    W[:d, :d] = c[0] * outer + c[1] * (torch.eye(d, dtype=torch.float64, device=coef.device) - outer)
    C = torch.full((D, D), float(c[7]), dtype=torch.float64, device=coef.device)
    C.diagonal().fill_(float(c[6]))
    C[j_star, :] = c[4]
    C[:, j_star] = c[5]
    C[j_star, j_star] = c[3]
    Pd = P.to(device=coef.device, dtype=dtype)
    W[d:, d:] = Pd @ C.to(dtype) @ Pd  # in the run's precision: the kernel's own products are
    v = torch.zeros(d + D, dtype=dtype, device=coef.device)
    v[:d] = (c[2] * vs).to(dtype)
    return W, v


def project(gW: torch.Tensor, gv: torch.Tensor, v_star: torch.Tensor, j_star: int, P: torch.Tensor) -> torch.Tensor:
    """The coefficients (N_COEF,), float64, of the orthogonal projection of one seed's gradient (gW, gv)."""
    d, D = v_star.shape[0], P.shape[0]
    vs = v_star.to(device=gW.device, dtype=torch.float64)
    Gff = gW[:d, :d].to(torch.float64)
    along = vs @ Gff @ vs
    across = (torch.trace(Gff) - along) / (d - 1)  # <G, I - v v^T> / |I - v v^T|^2
    gamma = vs @ gv[:d].to(torch.float64)
    Pd = P.to(device=gW.device, dtype=gW.dtype)
    Gc = (Pd @ gW[d:, d:] @ Pd).to(torch.float64)  # C's coordinates: Wpp -> P Wpp P is an isometry
    s = j_star
    ss, row, col, diag, total = Gc[s, s], Gc[s].sum(), Gc[:, s].sum(), torch.trace(Gc), Gc.sum()
    n = D - 1
    pos = torch.stack(  # orbit means <G, E_k> / |E_k|^2 (orbit_masks' order)
        [ss, (row - ss) / n, (col - ss) / n, (diag - ss) / n, (total - row - col + ss - (diag - ss)) / (n * (n - 1))]
    )
    return torch.cat([torch.stack([along, across, gamma]), pos])


def coefficients(W: torch.Tensor, v: torch.Tensor, v_star: torch.Tensor, j_star: int, P: torch.Tensor):
    """The coefficients of one seed's (W, v) projected onto the subspace (their values where W, v lie on it)."""
    return project(W, v, v_star, j_star, P)
