"""A stopped run ends with one line: interrupted (Ctrl-C) or failed, what finished, how to go on."""

from __future__ import annotations

from groupsparse.io.report import end_line


def test_an_interrupted_run_says_what_finished_and_how_to_resume(tmp_path):
    results = tmp_path / "results" / "s"
    (results / "benchmarks" / "pretrain").mkdir(parents=True)
    for name in ("a", "b"):
        (results / "benchmarks" / "pretrain" / f"{name}.tsv").write_text("s\n1\n")
    log = tmp_path / "snakemake.log"
    log.write_text("...\nTerminating processes on user request, this might take some time.\n")
    line = end_line(results, [str(log)], "snakemake --configfile my.yaml")
    assert line.startswith("interrupted: 2 finished jobs") and "`snakemake --configfile my.yaml` again" in line
    assert "\n" not in line


def test_a_failed_run_points_at_the_error_and_status(tmp_path):
    log = tmp_path / "snakemake.log"
    log.write_text("Error in rule transfer:\n    returned non-zero exit status 4.\n")
    line = end_line(tmp_path / "results" / "s", [str(log)], "snakemake")
    assert line.startswith("failed: 0 finished jobs") and "groupsparse status" in line and "\n" not in line
