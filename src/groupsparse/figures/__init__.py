"""The study's figures: one style and one :func:`save` (PNG + PDF, written atomically).

:mod:`.runs`: one run's pretraining curves, attention heatmaps, parameters, transfer accuracy;
:mod:`.scaling`: the scaling fits and the ablations;
:mod:`.sample_complexity`: the (d, D) grid's joint fits; :mod:`.images`: real-image runs;
:mod:`.headline`: one figure per question of the README, from the committed tables alone;
:mod:`.words`: the words a figure shows for the tables' code names.
matplotlib is imported on first use (Agg backend), so importing this package stays cheap.
"""

from __future__ import annotations

import textwrap
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


# the average width of a character of the default font (DejaVu Sans), in units of its size: enough to
# wrap a title to its panel's width before the layout is known
CHAR_WIDTH = 0.6


NBSP = "\u00a0"  # drawn as a space, never broken at: "d = 10" stays on one line


def fit_text(text: str, width_inches: float, fontsize: float) -> str:
    """``text`` wrapped, line by line, to ``width_inches`` at ``fontsize`` points."""
    chars = max(16, int(width_inches * 72 / (CHAR_WIDTH * fontsize)))
    for sign in ("=", ">=", "<="):
        text = text.replace(f" {sign} ", f"{NBSP}{sign}{NBSP}")
    return "\n".join(textwrap.fill(line, chars) if line else line for line in text.split("\n"))


def panel_title(ax, text: str, fontsize: float = 8) -> None:
    """A panel title wrapped to the panel's width (a long one ran into its neighbours or was cut)."""
    fig = ax.get_figure()
    width = ax.get_position().width * fig.get_figwidth()
    ax.set_title(fit_text(text, width, fontsize), fontsize=fontsize)


def figure_title(fig, text: str, fontsize: float = 11) -> None:
    """A figure title wrapped to the figure's width."""
    fig.suptitle(fit_text(text, 0.95 * fig.get_figwidth(), fontsize), fontsize=fontsize)


def mark_at_floor(ax, xs, *, marker: str, color: str, label: str) -> None:
    """Markers at the bottom edge of the panel (x in data units): values that have no number to draw
    (reached before the first record, diverged, beyond the run), so none is drawn as one."""
    from matplotlib.transforms import blended_transform_factory

    if not len(xs):
        return
    ax.plot(
        list(xs),
        [0.03] * len(xs),
        linestyle="none",
        marker=marker,
        markerfacecolor="none",
        markeredgecolor=color,
        ms=7,
        transform=blended_transform_factory(ax.transData, ax.transAxes),
        clip_on=False,
        label=label,
        zorder=5,
    )


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
