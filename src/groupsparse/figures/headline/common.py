"""What the headline figures share: a committed study (its config and CSV tables) and the axes,
interval bars and titles every question's figure draws the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ...io.files import InputError
from .. import fit_text


@dataclass
class Study:
    """A committed study: its name, its config and the tables a headline figure reads."""

    name: str
    folder: Path
    config: dict = field(default_factory=dict)

    def table(self, name: str) -> pd.DataFrame | None:
        path = self.folder / "tables" / f"{name}.csv"
        return pd.read_csv(path) if path.is_file() else None

    @property
    def analysis(self) -> dict:
        return (self.config.get("scaling") or {}).get("analysis") or {}


def read_study(folder: Path | str) -> Study:
    """A study folder (``docs/population``) with its tables under ``tables/``."""
    import yaml

    folder = Path(folder)
    if not (folder / "tables").is_dir():
        raise InputError(f"{folder}: no tables folder (a committed study has {folder}/tables/*.csv)")
    path = folder / "tables" / "config.yaml"
    config = (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}
    return Study(folder.name, folder, config)


def log_D_axis(ax, Ds) -> None:
    """A log D axis labelled at the D the data has."""
    Ds = sorted({int(D) for D in Ds})
    ax.set_xscale("log")
    ax.set_xticks(Ds, [str(D) for D in Ds], fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("D (number of groups)")


def log_y(ax) -> None:
    """A log y axis labelled at 1, 2, 5 x 10^k in plain numbers (a panel may span less than a decade)."""
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


def errorbar(ax, x, value, low, high, **kwargs):
    """Values with their intervals (an end without a number: no bar on that side)."""
    low = np.where(np.isfinite(low), value - low, 0)
    high = np.where(np.isfinite(high), high - value, 0)
    return ax.errorbar(x, value, yerr=[np.clip(low, 0, None), np.clip(high, 0, None)], capsize=2, **kwargs)


def question_title(fig, question: str, subtitle: str) -> None:
    """The question, and below it what the figure shows, wrapped to the figure's width."""
    width = 0.97 * fig.get_figwidth()
    fig.suptitle(fit_text(question + "\n" + subtitle, width, 11), fontsize=11, x=0.01, ha="left")


def first_wins(frames: list[pd.DataFrame], keys: list[str]) -> pd.DataFrame:
    """The rows of ``frames`` together, a key's first row kept (the studies in precedence order)."""
    frames = [f for f in frames if f is not None and len(f)]
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True).drop_duplicates(keys, keep="first").reset_index(drop=True)
