"""The analysis settings: the config's `scaling.analysis` and `ablations.analysis` sections, whole.

Every value comes from the spec file the workflow writes (the schema fills the defaults; it is
their one home), so nothing here has a default of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

from ..config.schema import schema_defaults
from ..io.files import InputError


@dataclass(frozen=True)
class Settings:
    thresholds: tuple[float, ...]  # mean-attention thresholds of the descriptive rates
    loss_target: float | None
    accuracy_targets: tuple[float, ...]
    verdict_target: float  # the one target the README's transfer answer quotes for every method
    methods: tuple[str, ...]
    downstream: tuple[str, ...] | None  # None: every downstream (incl. negative_control)
    near_one: float  # "near 1" for final attention and cos(v1, v*)
    n_boot: int
    target_c: tuple[float, ...]  # the theorem's targets 1 - exp(-c D)
    target_c_post_hoc: bool  # the c values were chosen after seeing data
    kappas: tuple[float, ...]  # concentration measured at flow time tau = eta x steps = kappa D^3
    fit_D_max: int  # the out-of-sample test fits on D <= this
    predict_D: tuple[int, ...]
    external_predictions: tuple[str, ...]  # other studies' committed predictions tables, judged here too
    reference_by_D: tuple[str, ...]  # population GD's committed by-D tables: the flow's check where both ran
    gap_growth_tolerance: float  # the flow's mechanism claims: an exponent or rate difference within +-this
    laws: tuple[str, ...]
    law_criterion: str  # the out-of-sample test's criterion, one for every law
    lack_of_fit_alpha: float  # a law failing lack of fit at this level cannot pass out of sample
    population_min: str  # pooled | per_query: population-mode runs' min over queries
    batch_tolerance: float  # the batch check's tolerance on the log scale
    min_power: float
    power_simulations: int
    n_star_form: str
    machine_spread: float
    pipeline_power_simulations: int  # studies drawn per transfer verdict by .pipeline_power (0: none)
    pipeline_power_boot: int  # bootstrap resamples inside each simulated study
    test_size: int  # transfer.test_size: the binomial noise of the simulated accuracies
    baseline: str  # ablations.analysis
    ablation_sizes: tuple[int, ...] | None  # None: smallest, middle and largest n of the grid
    study_seed: int

    @classmethod
    def from_spec(cls, spec: dict, where: str = "analysis spec") -> Settings:
        """From ``{"scaling": <scaling.analysis>, "ablations": <ablations.analysis>, "study_seed": int,
        "test_size": <transfer.test_size>}``."""
        try:
            a, b = spec["scaling"], spec["ablations"]
            values = {
                "thresholds": tuple(float(x) for x in a["thresholds"]),
                "loss_target": None if a["loss_target"] is None else float(a["loss_target"]),
                "accuracy_targets": tuple(float(x) for x in a["accuracy_targets"]),
                "verdict_target": float(a["verdict_target"]),
                "methods": tuple(a["methods"]),
                "downstream": tuple(a["downstream"]),
                "near_one": float(a["near_one"]),
                "n_boot": int(a["n_boot"]),
                "target_c": tuple(float(x) for x in a["target_c"]),
                "target_c_post_hoc": bool(a["target_c_post_hoc"]),
                "kappas": tuple(float(x) for x in a["kappas"]),
                "fit_D_max": int(a["fit_D_max"]),
                "predict_D": tuple(int(x) for x in a["predict_D"]),
                "external_predictions": tuple(str(x) for x in a.get("external_predictions", ())),
                "reference_by_D": tuple(str(x) for x in a.get("reference_by_D", ())),
                "gap_growth_tolerance": float(a.get("gap_growth_tolerance", 0.05)),
                "laws": tuple(a["laws"]),
                "law_criterion": str(a["law_criterion"]),
                "lack_of_fit_alpha": float(a["lack_of_fit_alpha"]),
                "population_min": str(a["population_min"]),
                "batch_tolerance": float(a["batch_tolerance"]),
                "min_power": float(a["min_power"]),
                "power_simulations": int(a["power_simulations"]),
                "n_star_form": str(a["n_star_form"]),
                "machine_spread": float(a["machine_spread"]),
                "pipeline_power_simulations": int(a["pipeline_power_simulations"]),
                "pipeline_power_boot": int(a["pipeline_power_boot"]),
                "test_size": int(spec["test_size"]),
                "baseline": str(b["baseline"]),
                "ablation_sizes": None if b["sizes"] is None else tuple(int(n) for n in b["sizes"]),
                "study_seed": int(spec["study_seed"]),
            }
        except KeyError as exc:
            missing = exc.args[0]
            raise InputError(f"{where}: missing key {missing!r} (write it from the schema-filled config)") from None
        return cls(**values)

    @staticmethod
    def spec(config: dict) -> dict:
        """The spec of a schema-filled config: what the workflow writes and :meth:`from_spec` reads."""
        return {
            "scaling": (config.get("scaling") or {}).get("analysis") or {},
            "ablations": (config.get("ablations") or {}).get("analysis") or {},
            "study_seed": config["study_seed"],
            # transfer.test_size is not filled into configs (x-filled: false): its reader takes the schema's
            "test_size": (config.get("transfer") or {}).get("test_size", schema_defaults("transfer")["test_size"]),
        }

    @classmethod
    def read(cls, path: str | Path) -> Settings:
        try:
            spec = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"{path}: cannot read the analysis spec ({exc})") from None
        return cls.from_spec(spec, str(path))

    def replace(self, **changes) -> Settings:
        return type(self)(**({f.name: getattr(self, f.name) for f in fields(self)} | changes))
