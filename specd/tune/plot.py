"""The crossover chart: wall clock against output length, one series per profile (matplotlib, Agg)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from specd.errors import UsageError
from specd.tune.bench import Result


def plot_wall_vs_output(results: Mapping[str, Sequence[Result]], path: Path, *, title: str = "") -> Path:
    """Scatter every request plus a line through the median wall clock per output length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    if not any(results.values()):
        raise UsageError("nothing to plot: no bench results")
    figure, axes = plt.subplots(figsize=(8, 5))
    try:
        for name, rows in results.items():
            if not rows:
                continue
            xs = np.array([r.output_tokens for r in rows], dtype=float)
            ys = np.array([r.wall_ms / 1000.0 for r in rows], dtype=float)
            lengths = np.unique(xs)
            medians = [float(np.median(ys[xs == x])) for x in lengths]
            (line,) = axes.plot(lengths, medians, marker="o", label=name)
            axes.scatter(xs, ys, s=14, alpha=0.4, color=line.get_color())
        axes.set_xlabel("output tokens")
        axes.set_ylabel("wall clock per request (s)")
        axes.set_title(title or "wall clock vs output length (lower is better)")
        axes.grid(True, alpha=0.3)
        axes.legend()
        try:
            figure.savefig(path, dpi=110, bbox_inches="tight")
        except OSError as exc:
            raise UsageError(f"{path}: cannot write the plot: {exc.strerror or exc}") from exc
    finally:
        plt.close(figure)
    return path
