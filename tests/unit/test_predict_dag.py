"""The out-of-sample test cannot see what it is tested on: in the DAG of the pre-registered config
(configs/theorem.yaml) the `predict` job reads the grid runs with D <= fit_D_max and nothing else,
while the claims job reads the larger-D runs too."""

from __future__ import annotations

import re
import shlex

import yaml

from conftest import REPO, run_snakemake

CONFIG = REPO / "configs" / "theorem.yaml"
TRAJECTORY = re.compile(r"results/theorem/pretrain/(\w+)/seeds[\d-]+\.trajectory\.parquet$")


def _command(tmp_path, target: str, program: str) -> list[str]:
    res = run_snakemake(
        "-n", "-p", "--cores", "1", "--configfile", str(CONFIG), "-d", str(tmp_path), target, timeout=120
    )
    assert res.returncode == 0, res.stderr[-2000:]
    shell = [x.removeprefix("Shell command: ").strip() for x in res.stdout.splitlines()]
    lines = [x for x in shell if x.startswith(f"groupsparse {program} ")]
    assert len(lines) == 1, res.stdout[-3000:]
    return shlex.split(lines[0])


def _runs(argv: list[str]) -> list[str]:
    return [m.group(1) for a in argv if (m := TRAJECTORY.search(a))]


def test_predict_reads_only_the_grid_runs_up_to_fit_D_max(tmp_path):
    config = yaml.safe_load(CONFIG.read_text())
    fit_D_max = (config["scaling"].get("analysis") or {}).get("fit_D_max", 16)  # the schema's default
    runs = _runs(_command(tmp_path, "results/theorem/tables/predictions.parquet", "predict"))
    expected = {f"scale_d{d}_D{D}" for d in config["scaling"]["d_grid"] for D in config["scaling"]["D_grid"]}
    expected = {r for r in expected if int(r.rsplit("_D", 1)[1]) <= fit_D_max}
    assert set(runs) == expected and len(runs) == len(expected)
    assert max(config["scaling"]["D_grid"]) > fit_D_max  # the config does test beyond the fit


def test_the_claims_job_reads_the_aggregated_table_and_the_predictions(tmp_path):
    argv = _command(tmp_path, "results/theorem/tables/claims.parquet", "scaling")
    assert "--predictions" in argv and argv[argv.index("--predictions") + 1].endswith("predictions.parquet")
    spec = argv[argv.index("--spec") + 1]
    assert re.search(r"specs/analysis\.[0-9a-f]{12}\.json$", spec)
