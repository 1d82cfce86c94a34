"""GPU check (run on the GPU machine; skipped without a GPU): whole-graph compiles on the cluster
(``graph_compiles="cluster"``) of the GPT-2-style training step with a graph break after each block
(2 layers: 3 forward and 3 backward graphs, and the loss's), default mode: every graph compiled by a
Ray task on the GPU node except those Inductor's FX-graph cache serves here as stock serves them (the
second block's, equal to the first's; none refused: torch's pickler refuses GPT-2's blocks, raycompile
admits PyTorch's own operators), each backward waited for at its call, and the loss equal to stock's in a
new process. Each case is a process of ``benchmarks/max_autotune.py``, which makes its own Ray
cluster."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.gpu

BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "max_autotune.py"


OLD_TORCH = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 13)


# Seen on torch 2.11 on an H100 (2026-11-27, stops 51-52): the farm sends 7 graphs and its FX-graph
# cache serves none, where stock's serves 2 (the second block's forward and backward); the loss is
# bitwise stock's. On torch 2.13 (CPU, the same model) it sends 6 and serves 2, as stock. Which graph
# goes missing on 2.11 is not established (docs/whole-graphs.md, known limits).
@pytest.mark.xfail(OLD_TORCH, reason="torch 2.11 on a GPU: one graph fewer, and no FX-graph cache hit", strict=False)
def test_gpt2_with_graph_breaks_compiles_its_graphs_on_ray_tasks(tmp_path: pathlib.Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--models", "gpt2-breaks", "--cases", "stock", "farm-graphs",
                           "--mode", "default", "--layers", "2", "--batch", "2", "--seq", "256", "--steps", "5",
                           "--label", "gputest", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    print("\n" + proc.stdout[-2500:])
    rows = {r["case"]: r for r in json.loads((tmp_path / "max_autotune_gputest.json").read_text())["rows"]}
    stock, farm = rows["stock"], rows["farm-graphs"]
    s = farm["stats"]
    # 4 forward and 4 backward graphs, each sent or, where it equals one compiled before (the second
    # block's), served by Inductor's FX-graph cache here as stock serves it
    assert s["graphs_sent"] + farm["fx_graph_hits"] == 8 and farm["fx_graph_hits"] == stock["fx_graph_hits"], \
        (s, farm["fx_graph_hits"], stock["fx_graph_hits"])
    assert s["graphs_backward_deferred"] >= 1, s  # backward graphs went too
    assert s["graphs_refused"] == s["graphs_failed"] == s["graphs_backward_early"] == 0, s
    assert s["jobs"] == 0 and s["graph_kernel_jobs"] > 0, s  # the workers built the kernels; loaded here
    assert farm["checksum"] == stock["checksum"]
