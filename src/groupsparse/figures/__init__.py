"""The study's figures: one style and one :func:`save` (PNG + PDF, written atomically).

:mod:`.runs`: one run's pretraining curves, attention heatmaps, parameters, transfer accuracy;
:mod:`.scaling`: the scaling fits and the ablations; :mod:`.images`: real-image runs.
matplotlib is imported on first use (Agg backend), so importing this package stays cheap.
"""

from __future__ import annotations

from pathlib import Path

from ..io import atomic_path

# The one matplotlib style of every figure.
STYLE = {
    "savefig.dpi": 130,
    "savefig.bbox": "tight",
    "image.cmap": "viridis",
    "legend.fontsize": 8,
}
FORMATS = ("png", "pdf")


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
