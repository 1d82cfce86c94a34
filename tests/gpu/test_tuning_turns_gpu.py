"""A kernel's first-run tuning taken in turns by two processes of one node, on a real GPU
(``cache/turns.py``, ``compat.tuning``; run on the GPU machine, skipped elsewhere). Two processes
with their own raycompile caches (no single flight between them: each compiles, as two stock ranks
do) and the node's one Inductor cache dir compile four reductions under coordinate descent and
have both loaded their kernels before either runs one (``turns_gpu_driver.py``). Each kernel is
then tuned by one of them; the other takes that pick and times nothing (counted in
``tunings_adopted``), and the two processes' outputs are bitwise equal.

    python -m pytest -s tests/gpu/test_tuning_turns_gpu.py
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.gpu

HERE = pathlib.Path(__file__).parent


def test_two_processes_tune_each_kernel_once_and_agree(tmp_path: pathlib.Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYCOMPILE_")}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), TRITON_CACHE_DIR=str(tmp_path / "triton"),
               RAYCOMPILE_SHARED_CACHE="none")
    procs = [subprocess.Popen([sys.executable, str(HERE / "turns_gpu_driver.py"), str(tmp_path / f"{i}.pt"),
                               str(tmp_path / f"compiled{i}"), str(tmp_path / f"compiled{1 - i}")],
                              env={**env, "RAYCOMPILE_CACHE_DIR": str(tmp_path / f"rc{i}")},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    for p in procs:
        try:
            _, err = p.communicate(timeout=400)
        finally:
            if p.poll() is None:
                p.kill()
        assert p.returncode == 0, err[-6000:]
    a, b = (torch.load(tmp_path / f"{i}.pt", weights_only=False) for i in (0, 1))
    adopted = [a["stats"]["tunings_adopted"], b["stats"]["tunings_adopted"]]
    print(f"\nkernels' picks adopted by each process: {adopted}; waits "
          f"{a['stats']['tunings_adopted_wait_seconds']:.2f} s, {b['stats']['tunings_adopted_wait_seconds']:.2f} s")
    assert sum(adopted) >= 1, adopted  # a reduction's kernel tuned by one process, taken by the other
    for x, y in zip(a["out"], b["out"], strict=True):
        assert torch.equal(x, y)
