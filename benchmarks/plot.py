"""Plots for the benchmarks: a PNG next to each table (matplotlib, from the `bench` extra).

    python benchmarks/plot.py benchmarks/results/fanout_h200.json   # re-draw a saved run
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: pip install -e '.[bench]' for the plot)")
        return None
    return plt


def bars_png(labels: list[str], values: list[float], path: pathlib.Path, title: str, xlabel: str,
             line: float | None = None, line_label: str = "") -> pathlib.Path | None:
    """Horizontal bars, one per case, with an optional goal line."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * len(labels)))
    bars = ax.barh(labels, values, color="#4c72b0")
    ax.bar_label(bars, fmt="%.2f", padding=3)
    if line is not None:
        ax.axvline(line, color="k", linestyle="--", linewidth=1)
        ax.text(line, -0.6, f" {line_label}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=9)
    ax.set_xlim(0, max(values) * 1.2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def fanout_png(result: dict[str, Any], path: pathlib.Path) -> pathlib.Path | None:
    """Bars of wall time per mode, with the limit (serial job time / workers) as a line."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: pip install -e '.[bench]' for the plot)")
        return None
    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = [r["mode"] for r in rows]
    walls = [r["wall_s"] for r in rows]
    colors = ["#999999" if n.startswith("serial") else "#4c72b0" if n.startswith("Inductor") else "#dd8452"
              for n in names]
    bars = ax.barh(names, walls, color=colors)
    ax.bar_label(bars, fmt="%.2f s", padding=3)
    ax.axvline(result["limit_s"], color="k", linestyle="--", linewidth=1)
    ax.text(result["limit_s"], len(rows) - 0.5, " limit", va="center")
    ax.invert_yaxis()
    ax.set_xlabel("wall seconds (lower is better)")
    ax.set_title(f"{result['jobs']} Triton compile jobs, {result['workers']} workers — {result['hardware']}",
                 fontsize=9)
    ax.set_xlim(0, max(walls) * 1.25)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        src = pathlib.Path(arg)
        print(fanout_png(json.loads(src.read_text()), src.with_suffix(".png")))


def grouped_bars_png(results: dict[str, dict[str, dict[str, Any]]], path: pathlib.Path,
                     title: str) -> pathlib.Path | None:
    """benchmarks/overhead.py: per model, one bar per case (process start to first output)."""
    plt = _pyplot()
    if plt is None:
        return None
    models = list(results)
    cases = [c for c in dict.fromkeys(c for rows in results.values() for c in rows)]
    fig, ax = plt.subplots(figsize=(9, 0.6 + 0.35 * len(models) * len(cases)))
    labels, values, colors = [], [], []
    palette = {"stock": "#8c8c8c", "megacache": "#dd8452", "farm": "#4c72b0", "frames": "#55a868"}
    for model in models:
        for case in cases:
            if case in results[model]:
                labels.append(f"{model}: {case}")
                values.append(results[model][case]["start_to_output_s"])
                colors.append(next(v for k, v in palette.items() if case.startswith(k)))
    bars = ax.barh(labels, values, color=colors)
    ax.bar_label(bars, fmt="%.1f", padding=3)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from process start to first output (lower is better)")
    ax.set_title(title, fontsize=9)
    ax.set_xlim(0, max(values) * 1.2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
