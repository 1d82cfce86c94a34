"""The backward lowered lazily, and lowered ahead where none ran, on a GPU (run on the GPU
machine; skipped without one): ``tests/integration/backward_driver.py`` with a CUDA model, each
process new with empty local caches and one ``file://`` tier. A CUDA backward runs on autograd's
device thread, and the one lowered ahead at ``disable()`` on the main thread: both entries load
whole in a new process, which traces nothing and computes bitwise the same gradients.

    python -m pytest -s tests/gpu/test_backward_gpu.py
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.gpu

DRIVER = pathlib.Path(__file__).parents[1] / "integration" / "backward_driver.py"


def run(shared: pathlib.Path, where: pathlib.Path, mode: str) -> dict[str, Any]:
    out = where / "out.pt"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(where / "inductor"), "TRITON_CACHE_DIR": str(where / "triton")}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "RAYCOMPILE_COMPILE_JOBS", "RAY_ADDRESS"):
        env.pop(name, None)
    proc = subprocess.run([sys.executable, str(DRIVER), f"file://{shared}", str(where / "raycompile"), str(out), mode,
                           "cuda"], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return torch.load(out, weights_only=False)


def test_cuda_backwards_lowered_lazily_and_ahead_load_whole(tmp_path: pathlib.Path) -> None:
    cold = run(tmp_path / "train", tmp_path / "t1", "train")
    assert not cold["with_forward"] and (cold["graphs_after_forward"], cold["graphs_after_backward"]) == (0, 1), cold
    assert cold["stats"]["dynamo_published"] == 1, cold["stats"]
    forward = run(tmp_path / "forward", tmp_path / "f1", "forward")
    assert forward["stats"]["dynamo_backward_ahead"] == 1 and forward["stats"]["dynamo_published"] == 1, forward
    for shared in ("train", "forward"):
        warm = run(tmp_path / shared, tmp_path / f"{shared}-warm", "train")
        assert warm["torch_traced"] == 0 and warm["stats"]["dynamo_frames_loaded"] == 1, warm["stats"]
        assert torch.equal(warm["out"], cold["out"]) and all(
            torch.equal(warm["grads"][k], cold["grads"][k]) for k in cold["grads"]), shared
