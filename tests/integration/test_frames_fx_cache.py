"""Inductor's FX-graph cache with compiled frames on (the default). Compiled frames need
``bundled_autograd_cache``, and torch skips the FX-graph cache whenever that is on, so a graph
equal to one compiled before was lowered again where stock loads it (a model with a graph break
in each of its equal blocks: 1.26x stock's cold compile on a GPT-2-style step of 8 blocks on the
dev box). ``compat.frames_stored`` now runs each graph's compile with the FX-graph cache as stock
has it (``fx_cache_kept``). Real ``torch.compile``, real Inductor (CPU), one driver process each:

- cold: stock's step, then the farm's in the same process: the farm's second block is served from
  the FX-graph cache as often as stock's (forward and backward), with bitwise the same output and
  gradients, and the frames' entry is still written;
- warm: a new process with empty cache dirs of its own loads that entry (no secret set: both sign
  with this user's key) and traces nothing, with bitwise the same output and gradients.
"""

from __future__ import annotations

import os
import pathlib

import procs
import torch

DRIVER = pathlib.Path(__file__).with_name("fx_cache_driver.py")


def run(shared: pathlib.Path, where: pathlib.Path, mode: str) -> dict:
    out = where / "out.pt"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(where / "inductor"), "TRITON_CACHE_DIR": str(where / "triton")}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "RAYCOMPILE_COMPILE_JOBS", "RAY_ADDRESS"):
        env.pop(name, None)
    return procs.start(DRIVER, [f"file://{shared}", str(where / "raycompile"), str(out), mode], env, out,
                       timeout=300)()


def same(a: dict, b: dict) -> bool:
    return (torch.equal(a["out"], b["out"]) and a["grads"].keys() == b["grads"].keys()
            and all(torch.equal(a["grads"][k], b["grads"][k]) for k in a["grads"]))


def test_equal_graphs_are_served_from_the_fx_graph_cache_with_compiled_frames_on(tmp_path: pathlib.Path) -> None:
    shared = tmp_path / "shared"
    cold = run(shared, tmp_path / "cold", "cold")
    stock, farm, s = cold["stock"], cold["farm"], cold["stats"]
    assert stock["hits"] >= 2, stock["hits"]  # the second block's forward and backward
    assert farm["hits"] == stock["hits"], (farm["hits"], stock["hits"])  # 0 before fx_cache_kept
    assert same(farm, stock)
    assert s["dynamo_frames_traced"] > 0 and s["dynamo_unsaveable"] == 0, s

    warm = run(shared, tmp_path / "warm", "warm")
    w = warm["stats"]
    # no secret set: both processes sign and check with this user's key (not under their cache dirs)
    assert w["refused"] == 0 and w["dynamo_hits"] >= 1, w
    assert w["dynamo_frames_traced"] == 0 and w["dynamo_frames_loaded"] == s["dynamo_frames_traced"], w
    assert same(warm["farm"], stock)
