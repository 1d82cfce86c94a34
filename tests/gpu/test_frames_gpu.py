"""GPU checks (run on the GPU machine; skipped without a GPU): the GPT-2-style training step of the
overhead benchmark (transformers config, bf16, 4x512), compiled with the default settings
(compiled frames on) in one process, then started in a NEW process with empty raycompile,
Inductor and Triton caches and the same shared tier, as on a fresh node: the warm process loads
the compiled frames (Dynamo traces nothing), runs no compile job and no benchmark, and its loss is
bitwise the cold process's. With two GPUs the warm process runs on cuda:1 (as torchrun's second
rank, ``set_device(1)``) and loads the frames compiled on cuda:0, moved to its GPU. Each case is a
process of ``benchmarks/overhead.py``, which starts its own Ray head (as an operator's
``ray start --head``)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.gpu

BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "overhead.py"


def _cases(tmp_path: pathlib.Path, *extra: str) -> dict[str, dict]:
    proc = subprocess.run([sys.executable, str(BENCH), "--models", "gpt2", "--cases", "stock-cold", "farm-cold-file",
                           "farm-warm-file", "--label", "gputest", "--out", str(tmp_path), *extra],
                          capture_output=True, text=True, timeout=900, check=False)
    print("\n" + proc.stdout[-2500:])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads((tmp_path / "overhead_gputest.json").read_text())["results"]["gpt2"]


def _loaded_warm(rows: dict[str, dict]) -> dict:
    cold, warm = rows["farm-cold-file"], rows["farm-warm-file"]
    assert cold["frames_traced"] > 0 and cold["frames_published"] >= 1, cold
    assert warm["frames_loaded"] > 0 and warm["frames_traced"] == 0 and warm["graphs_traced"] == 0, (cold, warm)
    assert warm["jobs"] == 0 and (warm["jobs_local"] or 0) == 0 and not warm["benchmarks"], warm
    assert warm["loss"] == cold["loss"] == rows["stock-cold"]["loss"]
    return warm


def test_gpt2_training_step_warm_starts_from_compiled_frames(tmp_path: pathlib.Path) -> None:
    warm = _loaded_warm(_cases(tmp_path))
    assert warm["loss_device"] == "cuda:0"


def test_frames_compiled_on_cuda0_serve_a_process_on_cuda1(tmp_path: pathlib.Path) -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    warm = _loaded_warm(_cases(tmp_path, "--warm-index", "1"))
    assert warm["loss_device"] == "cuda:1"
