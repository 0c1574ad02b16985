"""Figures for the docs: cost against size on log-log axes (docs/performance.md) and quantities over
time (docs/reliability.md), written as SVG by matplotlib."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: benches run headless
import matplotlib.pyplot as plt

# text as <text> (small, searchable) and fixed element ids, so the same data gives the same file
plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "toolkit"})


def scaling_chart(
    path: Path,
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
) -> Path:
    """One line per series of ``(size, cost)`` points, both axes logarithmic; returns ``path``."""
    return line_chart(path, series, title=title, xlabel=xlabel, ylabel=ylabel, log=True)


def line_chart(
    path: Path,
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    log: bool = False,
    markers: bool = True,
) -> Path:
    """One line per series of ``(x, y)`` points, on logarithmic axes if ``log``, a marker at each
    point if ``markers``; returns ``path``."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0), layout="constrained")
    for name, points in series.items():
        xs, ys = zip(*sorted(points), strict=True)
        ax.plot(xs, ys, marker="o" if markers else None, label=name)
    if log:
        ax.set(xscale="log", yscale="log")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(True, which="both", alpha=0.3)
    if len(series) > 1:
        ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg", metadata={"Date": None})  # no date: the file changes only with the data
    plt.close(fig)
    return path
