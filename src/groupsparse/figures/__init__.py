"""The study's figures: one style and one :func:`save` (PNG + PDF, written atomically).

:mod:`.runs`: one run's pretraining curves, attention heatmaps, parameters, transfer accuracy;
:mod:`.scaling`: the scaling fits and the ablations;
:mod:`.sample_complexity`: the (d, D) grid's joint fits; :mod:`.images`: real-image runs.
matplotlib is imported on first use (Agg backend), so importing this package stays cheap.
"""

from __future__ import annotations

from pathlib import Path

from ..io.files import atomic_path
from ..io.tables import FIGURE_FORMATS

# The one matplotlib style of every figure.
STYLE = {
    "savefig.dpi": 130,
    "savefig.bbox": "tight",
    "image.cmap": "viridis",
    "legend.fontsize": 8,
}
FORMATS = FIGURE_FORMATS


def pyplot():
    """matplotlib.pyplot on the Agg backend, with :data:`STYLE` applied."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(STYLE)
    return plt


def save(fig, outdir: Path | str, name: str) -> list[Path]:
    """Write ``fig`` as ``outdir/name.png`` and ``.pdf`` and close it."""
    paths = []
    for ext in FORMATS:
        path = Path(outdir) / f"{name}.{ext}"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext)
        paths.append(path)
    pyplot().close(fig)
    return paths


def empty_figure(title: str, why: str):
    """A figure that says why it has no data (so every declared output exists)."""
    fig, ax = pyplot().subplots(figsize=(6, 2.5))
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, f"no data: {why}", ha="center", va="center", wrap=True)
    return fig


def panel_grid(n: int, panel_height: float = 4.6):
    """n panels, at most 3 a row (constrained layout); unused cells switched off."""
    cols = min(n, 3)
    rows = -(-n // cols)
    fig, axes = pyplot().subplots(
        rows, cols, figsize=(5.4 * cols, panel_height * rows), squeeze=False, layout="constrained"
    )
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, list(axes.flat[:n])
