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

pytestmark = pytest.mark.gpu

BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "max_autotune.py"


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
    caches, stock_caches = farm["torch_caches"], stock["torch_caches"]
    # every graph stock's Inductor compiled or its FX-graph cache served (8 on torch 2.13: 4 forward,
    # 4 backward; 9 on torch 2.11, whose Dynamo traces one more) is sent, served by the FX-graph
    # cache here, or served with its backward by AOTAutograd's cache (torch 2.11: the second block's
    # pair, equal to the first's, whose entry the farm saved with its backward; stock's lazy backward
    # saves it only at the backward, so stock's FX-graph cache serves the two graphs instead)
    served_whole = 2 * caches["torch_autograd_hits"]
    stock_graphs = stock_caches["torch_fxgraph_hits"] + stock_caches["torch_fxgraph_misses"]
    assert s["graphs_sent"] + farm["fx_graph_hits"] + served_whole == stock_graphs, (s, caches, stock_caches)
    assert farm["fx_graph_hits"] + served_whole == stock["fx_graph_hits"] == 2, (caches, stock_caches)
    assert s["graphs_backward_deferred"] >= 1, s  # backward graphs went too
    assert s["graphs_refused"] == s["graphs_failed"] == s["graphs_backward_early"] == 0, s
    assert s["jobs"] == 0 and s["graph_kernel_jobs"] > 0, s  # the workers built the kernels; loaded here
    assert farm["checksum"] == stock["checksum"]
