"""One figure per question of the README, each read without the text, made from the committed tables
alone (``docs/<study>/tables/*.csv`` and the study's ``config.yaml``; ``results/`` is empty in a fresh
checkout): :func:`write_all` writes ``docs/figures/question1.png`` ... ``question4.png``.

1. Population gradient descent against the theorem's rate: r = 1 - min attention on j* at flow time
   kappa D^3 against D, with the laws fitted on the small D before the large D ran and their
   predictions, and the constant kappa_c(D) = tau_c / D^3 of the bound for each target c.
2. Ordinary training over D: min attention on j* at the last step of each practitioners' variant.
3. Transfer: samples n* to the target accuracy against d and D per method, beside n* ~ d + D and dD.
4. Real images: attention on the labelled slot after pretraining, and transfer accuracy against n.

Each question's function takes the study folders it reads, so a new study's tables (D up to 256, more
variants, another image set) give the same figure; nothing is read from a claim's text.
"""

from __future__ import annotations

from pathlib import Path

from ...io.files import atomic_path
from .. import pyplot
from .common import Study, read_study
from .selection import kappa_c_levels, question1_figure, question1_levels, question2_figure, question2_levels
from .transfer import question3_figure, question3_levels, question4_figure

__all__ = [
    "SOURCES",
    "Study",
    "figures",
    "kappa_c_levels",
    "question1_figure",
    "question1_levels",
    "question2_figure",
    "question2_levels",
    "question3_figure",
    "question3_levels",
    "question4_figure",
    "read_study",
    "redraw_committed",
    "write_all",
]

# the committed study folders each question reads (docs/<folder>/tables), in order of precedence: a
# level two folders both hold (the same run, as a slice reruns its parent's levels) is read from the first
SOURCES = {
    "question1": ("population",),
    "question2": ("practitioners_small_D", "practitioners_D16", "practitioners_D24", "practitioners_D24_stable"),
    "question3": ("results",),
    "question4": ("results",),
}

# --- all four ---------------------------------------------------------------------------------------

QUESTIONS = {
    # three of the flow study's eight kappas, a factor 4 apart (display only: the tables hold every kappa)
    "question1": lambda studies: question1_figure(studies, kappas=(0.25, 1.0, 4.0)),
    "question2": lambda studies: question2_figure(studies),
    "question3": lambda studies: question3_figure(studies[0]),
    "question4": lambda studies: question4_figure(studies[0]),
}


def png_metadata() -> dict:
    """A PNG's text: the matplotlib that drew it (another version draws other bytes), no date."""
    import matplotlib

    return {"Software": f"matplotlib {matplotlib.__version__}"}


def figures(docs_dir: Path | str = "docs", sources: dict | None = None) -> dict:
    """Each question's figure (matplotlib) from the study folders under ``docs_dir`` (``sources``
    overrides :data:`SOURCES`, per question a list of folders, relative to ``docs_dir`` or absolute);
    a question whose folders are all missing is left out."""
    docs_dir = Path(docs_dir)
    made = {}
    for question, folders in (SOURCES | (sources or {})).items():
        studies = [read_study(docs_dir / f) for f in folders if (docs_dir / f / "tables").is_dir()]
        if studies:
            made[question] = QUESTIONS[question](studies)
    return made


def write_all(
    docs_dir: Path | str = "docs", out_dir: Path | str | None = None, sources: dict | None = None
) -> list[Path]:
    """Write ``question1.png`` ... ``question4.png`` (``out_dir``, default ``<docs_dir>/figures``) from the
    committed tables; returns the paths written."""
    plt = pyplot()
    out = Path(out_dir) if out_dir is not None else Path(docs_dir) / "figures"
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for question, fig in figures(docs_dir, sources).items():
        path = out / f"{question}.png"
        with atomic_path(path) as tmp:
            # a fixed resolution and no date: the same tables give the same bytes with the same matplotlib
            fig.savefig(tmp, format="png", dpi=110, metadata=png_metadata())
        plt.close(fig)
        paths.append(path)
    return paths


# --- the committed study pages' figures that their tables determine ---------------------------------


def redraw_committed(docs_dir: Path | str = "docs") -> list[Path]:
    """Redraw in place the committed figures a study's committed tables determine: its out-of-sample
    figure (theorem_by_D.csv, predictions.csv, config.yaml) and each task's transfer accuracy
    (summary.csv). Only figures already committed are rewritten (a page links to them); the others
    need the study's trajectories, in results/ after a run, and its snapshot."""
    import shutil
    import tempfile

    from .. import runs
    from ..theorem import levels_from_table, out_of_sample_figure

    plt = pyplot()
    written = []
    for folder in sorted(p for p in Path(docs_dir).iterdir() if (p / "tables").is_dir()):
        study = read_study(folder)
        target = folder / "scaling_out_of_sample.png"
        by_D, predictions = study.table("theorem_by_D"), study.table("predictions")
        if target.is_file() and by_D is not None and predictions is not None:
            kappas = [float(k) for k in study.analysis.get("kappas", [])]
            fig = out_of_sample_figure(levels_from_table(by_D, kappas), predictions, study.config)
            with atomic_path(target) as tmp:
                fig.savefig(tmp, format="png", metadata=png_metadata())
            plt.close(fig)
            written.append(target)
        summary = study.table("summary")
        if summary is None:
            continue
        specs, config = runs.run_specs(folder / "tables")
        for run in sorted(set(summary["run"])):
            target = folder / f"{run}_transfer_accuracy.png"
            if not target.is_file():
                continue
            with tempfile.TemporaryDirectory() as tmp:
                title = runs.describe(specs.get(run), run, config)
                made = runs.transfer_accuracy(summary[summary["run"] == run], title, Path(tmp))
                png = next(p for p in made if p.suffix == ".png")
                shutil.copyfile(png, target)
            written.append(target)
    return written
