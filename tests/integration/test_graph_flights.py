"""One compile per job for whole graphs (issue 31), where compiled frames are not saved: three
ranks of one node (processes with Inductor caches of their own, sharing the node's raycompile
cache dir, compiling in Inductor's own workers) compile the same two-graph training step at
once. Every rank traces (Dynamo's own counter: two graphs each), each graph is lowered by one
rank (Inductor's own FX-graph cache misses, summed over the ranks, are one rank's), the others
wait for its AOTAutograd entry and load it, and every rank's loss and gradients are bitwise those
of stock Inductor."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.slow  # four compiling subprocesses

DRIVER = pathlib.Path(__file__).with_name("graph_flight_driver.py")


def start(node_cache: pathlib.Path, where: pathlib.Path, stock: bool = False) -> subprocess.Popen[str]:
    where.mkdir(parents=True)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(where / "inductor"), "TRITON_CACHE_DIR": str(where / "triton")}
    for name in ("RAYCOMPILE_SECRET", "RAY_ADDRESS", "RAYCOMPILE_SHARED_CACHE"):
        env.pop(name, None)
    return subprocess.Popen([sys.executable, str(DRIVER), str(node_cache), str(where / "out.pt")]
                            + (["stock"] if stock else []), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], where: pathlib.Path) -> dict[str, Any]:
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:] + err[-6000:]
    return torch.load(where / "out.pt", weights_only=False)


def test_three_ranks_of_one_node_lower_each_graph_once(tmp_path: pathlib.Path) -> None:
    node = tmp_path / "node-cache"
    ranks = [start(node, tmp_path / f"rank{i}") for i in range(3)]
    results = [finish(p, tmp_path / f"rank{i}") for i, p in enumerate(ranks)]
    stock = finish(start(tmp_path / "unused", tmp_path / "stock", stock=True), tmp_path / "stock")

    stats = [r["stats"] for r in results]
    assert all(r["graphs_traced"] == 2 for r in results), results  # frames off: every rank traces
    assert sum(s["graph_flight_owned"] for s in stats) == 2, stats  # each graph claimed once
    assert all(s["graph_flight_gave_up"] == 0 and s["jobs"] == 0 for s in stats), stats
    one_rank = max(r["lowered"] for r in results)
    assert one_rank > 0 and sum(r["lowered"] for r in results) == one_rank, [r["lowered"] for r in results]
    for r in results:  # a rank that lowered nothing loaded both graphs: waited for, or found written
        s = r["stats"]
        assert r["lowered"] or (s["graph_flight_owned"] == 0 and r["aot_hits"] == 2), (r["lowered"], r["aot_hits"], s)
        for name, value in stock["result"].items():
            assert torch.equal(r["result"][name], value), name
    assert sum(s["graph_flight_served"] for s in stats) >= 1, stats  # at least one rank waited and was served
    owner = next(r for r in results if r["stats"]["graph_flight_owned"])  # report() says who compiled for whom
    assert f"whole graphs lowered here for others {owner['stats']['graph_flight_owned']}," in owner["report"], \
        owner["report"]
