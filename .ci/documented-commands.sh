#!/usr/bin/env bash
# Every command README.md and docs/usage.md show, run in an environment built by exactly the
# README's first quick-start install line (no test extras), on small studies: any error fails.
# In a copy of the working tree (tracked files and untracked ones git does not ignore), so a local
# run checks uncommitted changes too and writes nothing here:   bash .ci/documented-commands.sh
# (KEEP=1 keeps the copy and prints where it is.)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/groupsparse-commands.XXXXXX")"
if [ "${KEEP:-0}" = 1 ]; then echo "the copy: $work"; else trap 'rm -rf "$work"' EXIT; fi
(cd "$repo" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$work"
cd "$work"

run() { echo "+ [${SECONDS}s] $*" >&2; "$@"; }  # the seconds since the start: where CI's time goes

# The README's first quick-start command up to its `&& snakemake`: the install line, verbatim.
first="$(awk '/^```bash$/ { getline; print; exit }' README.md)"
install="${first%% && snakemake*}"
if [ "$install" = "$first" ] || [ -z "$install" ]; then
  echo "documented-commands: README.md's first bash block is not '<install> && snakemake ...': $first" >&2
  exit 1
fi
echo "+ $install" >&2
eval "$install"
python -m compileall -q src  # PYTHONDONTWRITEBYTECODE=1 here: the copy's modules compiled once (see .ci/run)
if python -c "import pytest" 2>/dev/null; then
  echo "documented-commands: pytest is installed: this is not the first install line's environment" >&2
  exit 1
fi

# The studies: the tiny one (the quick start's command, on configs/tiny.yaml), its resume, review,
# status, report, table and snapshot commands.
run snakemake --cores all --configfile configs/tiny.yaml
run snakemake --cores all --rerun-incomplete --configfile configs/tiny.yaml
run groupsparse review results/tiny
run groupsparse review results/tiny --all > /dev/null
run groupsparse review results/tiny --csv > /dev/null
run groupsparse review docs/results
run groupsparse plot --headline --outdir headline  # the four question figures from the committed tables
for q in 1 2 3 4; do test -s headline/question$q.png; done
run groupsparse status results/tiny --all
run snakemake --report results/tiny/report.html --configfile configs/tiny.yaml
test -s results/tiny/report.html
run groupsparse summary results/tiny/tables/summary.parquet --where run=base --where n=128
run groupsparse snapshot --results results/tiny --docs snapshot/results --out snapshot/results.md --wall-seconds 60 \
  --allow-dirty  # this copy is no git checkout: its numbers come from no commit
test -s snapshot/results.md && test -s snapshot/results/tables/summary.csv
cp README.md README.before && cp docs/findings.md findings.before
run groupsparse snapshot --findings-only
cmp README.md README.before  # the committed tables regenerate the README's answers byte for byte
cmp docs/findings.md findings.before  # and the findings

# The theorem test's hand-run form: a small scaling study's fixed predictions (rule predict) checked
# against a pretraining run made outside its DAG with `groupsparse pretrain`, at a predicted D.
python3 - <<'EOF'
import yaml

cfg = yaml.safe_load(open("configs/tiny.yaml"))
cfg["study_name"] = "tiny_theorem"
cfg["transfer"] = {"enabled": False}
small = {"seeds": 2, "seeds_per_job": 2, "steps": 6, "batch": 32, "eval_size": 64, "record_every": 3}
cfg["scaling"] = {
    "enabled": True, "task": {"d": 3}, "d_grid": [3], "D_grid": [3, 4, 5], "steps_per_D3": 0.2,
    "pretrain": small, "transfer": {"enabled": False},
    "analysis": {"fit_D_max": 5, "predict_D": [7], "kappas": [0.2], "target_c": [0.1], "n_boot": 100},
}
yaml.safe_dump(cfg, open("tiny_theorem.yaml", "w"))
EOF
run snakemake --cores all --configfile tiny_theorem.yaml
specs=(results/tiny_theorem/specs/scale_d3_D5.pretrain.*.json)
analysis=(results/tiny_theorem/specs/analysis.*.json)
python3 - "${specs[0]}" <<'EOF'
import json, sys

spec = json.load(open(sys.argv[1]))
spec["task"]["D"], spec["run_name"] = 7, "by_hand_d3_D7"
spec["pretrain"]["steps"] = 70  # past 0.2 D^3 = 68.6, the predicted step
json.dump(spec, open("by_hand.json", "w"))
EOF
run groupsparse pretrain --spec @by_hand.json --seeds 0-1 --checkpoint by_hand.safetensors \
  --trajectory by_hand.trajectory.parquet --attention by_hand.attention.parquet
run groupsparse check-predictions --predictions results/tiny_theorem/tables/predictions.parquet \
  --spec "${analysis[0]}" --trajectories by_hand.trajectory.parquet

# Transverse stability of population GD, on a tiny problem (the measured table: docs/STUDY.md section 3.6).
run groupsparse transverse --d 3 --D 4 --samples 64 --iters 6 --hessian-samples 256 --max-steps 40 \
  --out transverse_by_D.csv --hessian-out zero_start_hessian.csv
test -s transverse_by_D.csv && test -s zero_start_hessian.csv
# One trajectory of population gradient descent by hand (docs/usage.md), short.
run groupsparse population --d 10 --D 16 --eta 0.5 --steps 40 --batch 64 --seed 0 --out traj.csv
run groupsparse population --d 10 --D 16 --eta 0.5 --eta-D-limit 6 --steps 40 --batch 64 --seed 0 --out traj.csv
# ... and of its gradient flow (the flow study's solver), to a short flow time on a small sample.
run groupsparse population --solver flow --d 10 --D 8 --eta-D-limit 6 --flow-time 64 --samples 256 --seed 0 \
  --out flow.csv

# The other shipped studies: estimated. Their dry runs (which parse and check each whole config) are the quick tests'
# (tests/workflow/test_report.py plans config.yaml and every configs/*.yaml, 3-4 s each); here one dry run checks
# that this environment (the first install line's) plans a study at all.
run snakemake -n > /dev/null
for config in configs/theorem.yaml configs/population.yaml configs/population_gd.yaml configs/practitioners.yaml configs/cifar10.yaml configs/paper.yaml configs/scaling.yaml configs/tiny.yaml; do
  run groupsparse estimate --no-calibration --configfile "$config" > /dev/null
done
# The default study's estimate as written, calibrated here (a few seconds): its job count and last line are the
# run's own start line's.
run groupsparse estimate --configfile config.yaml
# The overlays (a cluster's extension, a slice 2 cores afford), merged over their base config as the README's
# commands merge them.
for pair in "configs/population_gd.yaml configs/cluster/population_large_D.yaml" \
  "configs/practitioners.yaml configs/cluster/practitioners_D32.yaml" \
  "configs/population_gd.yaml configs/slices/population_D64.yaml" \
  "configs/population_gd.yaml configs/slices/population_gd_large_D_predictions.yaml" \
  "configs/population.yaml configs/slices/population_fit_levels.yaml" \
  "configs/population.yaml configs/slices/population_to_D80.yaml" \
  "configs/population.yaml configs/slices/population_to_D96.yaml" \
  "configs/population.yaml configs/slices/population_to_D128.yaml" \
  "configs/population.yaml configs/slices/population_to_D192.yaml" \
  "configs/population.yaml configs/slices/population_to_D256.yaml" \
  "configs/practitioners.yaml configs/slices/practitioners_small_D.yaml" \
  "configs/practitioners.yaml configs/slices/practitioners_D16.yaml" \
  "configs/practitioners.yaml configs/slices/practitioners_D24_stable.yaml" \
  "configs/practitioners.yaml configs/slices/practitioners_D24.yaml"; do
  # shellcheck disable=SC2086  # two file names, split on purpose
  run snakemake -n --cores all --configfile $pair > /dev/null
  # shellcheck disable=SC2086
  run groupsparse estimate --no-calibration --configfile $pair > /dev/null
done
for overlay in configs/cluster/*.yaml configs/slices/*.yaml; do  # an overlay added without a line above fails here
  case " population_large_D practitioners_D32 population_D64 population_gd_large_D_predictions population_fit_levels population_to_D80 population_to_D96 population_to_D128 population_to_D192 population_to_D256 practitioners_small_D practitioners_D16 practitioners_D24_stable practitioners_D24 " in *" $(basename "$overlay" .yaml) "*) ;; *)
    echo "documented-commands: $overlay is planned by no line of this script" >&2; exit 1 ;;
  esac
done
for config in configs/*.yaml; do  # a config added without a line above fails here
  case " theorem population population_gd practitioners cifar10 paper scaling tiny " in *" $(basename "$config" .yaml) "*) ;; *)
    echo "documented-commands: $config is estimated by no line of this script" >&2; exit 1 ;;
  esac
done

# Not run here, and why:
# - `snakemake --cores all` on config.yaml, configs/theorem.yaml, population*.yaml, practitioners*.yaml, paper.yaml,
#   cifar10.yaml: hours of
#   CPU (the README's times); estimated above, planned (-n) by the quick tests.
# - `snakemake --workflow-profile workflow/profiles/slurm ...` and `pip install -e ".[slurm]"`: need
#   the slurm extra and a cluster; .ci/run's real-Slurm test runs that profile.
# - `python -m pytest`: needs the test extras; .ci/run runs it.
echo "documented-commands: every command ran"
