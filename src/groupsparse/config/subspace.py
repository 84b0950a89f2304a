"""The invariant subspace's settings: population mode (gradient descent projected onto the subspace the
data law's symmetries fix from the zero start) and its flow (pretrain.solver: flow), and the rules that
refuse a run breaking one of those symmetries. Pure Python (no torch): checked at parse time.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import require
from .schema import schema_defaults

FLOW_DEFAULTS = schema_defaults("flow")  # the schema's $defs/flow (a spec leaves these out)


@dataclass(frozen=True)
class FlowSpec:
    """Population gradient flow's settings (pretrain.solver: flow; the schema's $defs/flow)."""

    samples: int = FLOW_DEFAULTS["samples"]
    sampler: str = FLOW_DEFAULTS["sampler"]
    eval_samples: int = FLOW_DEFAULTS["eval_samples"]
    nodes: int = FLOW_DEFAULTS["nodes"]
    method: str = FLOW_DEFAULTS["method"]
    rtol: float = FLOW_DEFAULTS["rtol"]
    atol: float = FLOW_DEFAULTS["atol"]
    flow_time: float | None = FLOW_DEFAULTS["flow_time"]
    records_per_octave: int = FLOW_DEFAULTS["records_per_octave"]
    targets_c: tuple = tuple(FLOW_DEFAULTS["targets_c"])
    implementation: str = FLOW_DEFAULTS["implementation"]

    def validate(self, where: str = "pretrain.flow") -> None:
        object.__setattr__(self, "targets_c", tuple(float(c) for c in self.targets_c))
        if self.sampler == "sobol":  # a Sobol' sequence is balanced in blocks of powers of 2
            for key in ("samples", "eval_samples"):
                n = getattr(self, key)
                require(n & (n - 1) == 0, f"{where}.{key}", f"must be a power of 2 with sampler: sobol, got {n}")


def check_flow(spec) -> None:  # spec: a config.specs.RunSpec (which imports this module)
    """The flow integrates the subspace's coefficients in float64 over a Gaussian law without label noise
    (the mirror X -> -X and the label sign(x_j* . v*) fold the integral over x_j* . v* onto t >= 0)."""
    require(spec.dtype == "float64", "dtype", "pretrain.solver: flow computes in float64; set dtype: float64")
    require(
        spec.task.label_noise == 0,
        "task.label_noise",
        f"pretrain.solver: flow needs labels without noise, got {spec.task.label_noise}",
    )
    require(
        spec.task.sigma_x == 1.0,
        "task.sigma_x",
        f"pretrain.solver: flow integrates the standard normal law, got sigma_x = {spec.task.sigma_x}",
    )


def check_population(spec) -> None:
    """Population mode projects onto the subspace that the paper's data law and model keep from the zero
    start: every setting that breaks one of those symmetries is refused here, naming it."""
    t, m = spec.task, spec.model
    require(
        t.KNOWN_LAW,
        "task.kind",
        f"pretrain.gradient: population needs a task whose data law is known (synthetic), got {t.kind}",
    )
    require(
        t.features == "gaussian",
        "task.features",
        "pretrain.gradient: population needs gaussian features (rotations fixing v* must keep the law), "
        f"got {t.features}",
    )
    require(
        t.relevant_groups == 1,
        "task.relevant_groups",
        f"pretrain.gradient: population needs one relevant group, got {t.relevant_groups}",
    )
    require(
        m.is_paper_model and m.score_scale in ("none", "sqrt"),
        "model",
        "pretrain.gradient: population needs the paper model (positions: concat, attention: merged, layers: 1)",
    )
    require(m.init == "zero", "model.init", "pretrain.gradient: population starts from the zero start; use init: zero")
    require(
        t.d >= 2 and t.D >= 3,
        "task.d",
        f"pretrain.gradient: population needs d >= 2 and D >= 3 (every orbit of the subspace non-empty), "
        f"got d = {t.d}, D = {t.D}",
    )
