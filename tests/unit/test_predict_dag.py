"""The out-of-sample test cannot see what it is tested on: in the DAG of each pre-registered config
(configs/population_gd.yaml, configs/population.yaml: the flow) the `predict` job reads the scaling runs with
D <= fit_D_max (the grid's and the stability variants', not the batch or flow checks') and nothing else, while
the claims job reads the larger-D runs too."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from conftest import REPO, run_snakemake

CONFIG = REPO / "configs" / "population_gd.yaml"
TRAJECTORY = re.compile(r"results/population\w*/pretrain/(\w+)/seeds[\d-]+\.trajectory\.parquet$")


def _command(tmp_path, target: str, program: str, config=CONFIG) -> list[str]:
    res = run_snakemake(
        "-n", "-p", "--cores", "1", "--configfile", str(config), "-d", str(tmp_path), target, timeout=120
    )
    assert res.returncode == 0, res.stderr[-2000:]
    shell = [x.removeprefix("Shell command: ").strip() for x in res.stdout.splitlines()]
    lines = [x for x in shell if x.startswith(f"groupsparse {program} ")]
    assert len(lines) == 1, res.stdout[-3000:]
    return shlex.split(lines[0])


def _runs(argv: list[str]) -> list[str]:
    return [m.group(1) for a in argv if (m := TRAJECTORY.search(a))]


@pytest.mark.parametrize("name", ["population_gd", "population"])
def test_predict_reads_only_the_scaling_runs_up_to_fit_D_max(tmp_path, name):
    path = REPO / "configs" / f"{name}.yaml"
    config = yaml.safe_load(path.read_text())
    fit_D_max = config["scaling"]["analysis"]["fit_D_max"]
    argv = _command(tmp_path, f"results/{name}/tables/predictions.parquet", "predict", path)
    runs = _runs(argv)
    grid = {f"scale_d{d}_D{D}" for d in config["scaling"]["d_grid"] for D in config["scaling"]["D_grid"]}
    stability = config["scaling"].get("stability", {"d": 0, "variants": {}})
    variants = {
        f"stab_{name}_d{stability['d']}_D{D}"
        for name, v in stability["variants"].items()
        for D in v.get("D_grid", config["scaling"]["D_grid"])
    }
    expected = {r for r in grid | variants if int(r.rsplit("_D", 1)[1]) <= fit_D_max}
    assert set(runs) == expected and len(argv[argv.index("--trajectories") + 1 :]) >= len(expected)
    assert max(config["scaling"]["D_grid"]) > fit_D_max  # the config does test beyond the fit
    assert not [r for r in runs if "_batch" in r or "_samples" in r or "_rtol" in r]


def test_the_claims_job_reads_the_aggregated_table_and_the_predictions(tmp_path):
    argv = _command(tmp_path, "results/population_gd/tables/claims.parquet", "scaling")
    assert "--predictions" in argv and argv[argv.index("--predictions") + 1].endswith("predictions.parquet")
    spec = argv[argv.index("--spec") + 1]
    assert re.search(r"specs/analysis\.[0-9a-f]{12}\.json$", spec)
