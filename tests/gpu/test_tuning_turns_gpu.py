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
from turns_gpu_driver import SHAPES

pytestmark = pytest.mark.gpu

HERE = pathlib.Path(__file__).parent


def test_two_processes_tune_each_kernel_once_and_agree(tmp_path: pathlib.Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYCOMPILE_")}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), TRITON_CACHE_DIR=str(tmp_path / "triton"),
               RAYCOMPILE_SHARED_CACHE="none")
    logs = [open(tmp_path / f"{i}.log", "w") for i in (0, 1)]  # noqa: SIM115 - closed below
    # output to files, not pipes: a full pipe would stop one process before its compile ended,
    # and the other would wait for it at its own compile's end
    procs = [subprocess.Popen([sys.executable, str(HERE / "turns_gpu_driver.py"), str(tmp_path / f"{i}.pt"),
                               str(tmp_path / f"compiled{i}"), str(tmp_path / f"compiled{1 - i}")],
                              env={**env, "RAYCOMPILE_CACHE_DIR": str(tmp_path / f"rc{i}")},
                              stdout=logs[i], stderr=subprocess.STDOUT) for i in (0, 1)]
    try:
        for p in procs:
            p.wait(timeout=400)
    finally:
        for p, log in zip(procs, logs, strict=True):
            if p.poll() is None:
                p.kill()
            log.close()
    for i, p in enumerate(procs):
        assert p.returncode == 0, (tmp_path / f"{i}.log").read_text()[-6000:]
    a, b = (torch.load(tmp_path / f"{i}.pt", weights_only=False) for i in (0, 1))
    adopted = [a["stats"]["tunings_adopted"], b["stats"]["tunings_adopted"]]
    print(f"\nkernels' picks adopted by each process: {adopted}; waits "
          f"{a['stats']['tunings_adopted_wait_seconds']:.2f} s, {b['stats']['tunings_adopted_wait_seconds']:.2f} s")
    # each reduction's kernel (one config each: coordinate descent alone tunes it) was tuned by one
    # process and taken by the other, which timed nothing
    assert sum(adopted) >= len(SHAPES), adopted
    for x, y in zip(a["out"], b["out"], strict=True):
        assert torch.equal(x, y)
