"""The flow's outer samples: plain draws against a scrambled Sobol' sequence (docs/STUDY.md section 3.1).

At a point of the flow's trajectory, the vector field (the velocity of the eight coefficients) over
``--repeats`` independent outer samples of size N each, drawn plainly and as scrambled Sobol'
sequences: per coefficient, the spread over samples relative to the mean, side by side in one run.
A smaller spread is a smaller error of the sample-average approximation per unit of work (both cost
the same per sample).

    python benchmarks/flow_samplers.py                 # D = 16 and 64, N = 1024, 8 repeats
    python benchmarks/flow_samplers.py --D 16 --N 512 --repeats 4

The points are states of the flow: at D = 16 one mid-run (every coefficient moving); at D = 64 the
coefficients a flow over 512 Sobol' samples reaches at 0.125 D^3 and 0.5 D^3 (printed: the spread is
a property of the field there, whichever sample reached them).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from groupsparse.model import flow
from groupsparse.model.population import COEFFICIENTS

# coefficients to probe the field at; None: those a short flow reaches at that flow time (``reach``)
POINTS = {
    16: {"mid-run": [-0.36, 0.0, 5.0, 3.0, 2.8, -0.3, -0.2, -0.3]},
    64: {"0.125 D^3": None, "0.5 D^3": None},
}


def spread(D: int, N: int, repeats: int, coef, sampler: str, d: int = 10) -> np.ndarray:
    """Relative spread (sd / |mean|) over ``repeats`` samples of the field's velocity per coefficient."""
    V = np.array(
        [
            flow.Field(flow.draw(d, D, N, torch.Generator().manual_seed(1000 + r), sampler), d).velocity(coef)
            for r in range(repeats)
        ]
    )
    return V.std(0, ddof=1) / np.abs(V.mean(0))


def reach(D: int, tau: float, d: int = 10) -> np.ndarray:
    """The coefficients a flow over 512 Sobol' samples reaches at flow time ``tau`` (a point to probe)."""
    from scipy.integrate import solve_ivp

    field = flow.Field(flow.draw(d, D, 512, torch.Generator().manual_seed(77)), d)
    sol = solve_ivp(lambda t, y: field.velocity(y), (0, tau), np.zeros(8), method="BDF", rtol=1e-5, atol=1e-9)
    return sol.y[:, -1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--D", type=int, nargs="+", default=[16, 64])
    p.add_argument("--N", type=int, default=1024, help="outer samples of each repeat (a power of 2)")
    p.add_argument("--repeats", type=int, default=8)
    args = p.parse_args()
    if args.N & (args.N - 1) or args.repeats < 2:
        p.error("--N must be a power of 2 and --repeats at least 2")
    torch.set_num_threads(1)
    names = " ".join(f"{c:>12s}" for c in COEFFICIENTS)
    for D in args.D:
        points = POINTS.get(D) or {"0.125 D^3": None}
        for label, coef in points.items():
            coef = np.array(coef) if coef is not None else reach(D, float(label.split()[0]) * D**3)
            print(f"D = {D}, point {label}: coefficients {np.round(coef, 4).tolist()}")
            print(f"  {'sampler':10s} {names}")
            rel = {}
            for sampler in ("mc", "sobol"):
                rel[sampler] = spread(D, args.N, args.repeats, coef, sampler)
                print(f"  {sampler:10s} " + " ".join(f"{x:12.3f}" for x in rel[sampler]))
            print(f"  {'mc / sobol':10s} " + " ".join(f"{x:12.2f}" for x in rel["mc"] / rel["sobol"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
