"""C++ kernels that Inductor's own cache dir already holds reach raycompile's tiers.

Inductor loads a C++ kernel it finds built in its cache dir without calling any pool
(``CppCodeCache.load_async``), so no job runs for it. Until stop 63 such a kernel never reached
raycompile's tiers: a node whose Inductor dir held a stock run's kernels published compiled frames
with 0 jobs, and every process with another Inductor dir that loaded them compiled all their
kernels. Now the Router writes each one found so (``Router.built_already``). Three real processes:
stock fills an Inductor dir; the farm compiles in it (every kernel found built, written to the
tiers from there); the farm in a new Inductor dir compiles nothing and gets stock's numbers
bitwise.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import torch

DRIVER = pathlib.Path(__file__).with_name("inductor_dir_driver.py")


def run(mode: str, inductor_dir: pathlib.Path, out: pathlib.Path) -> dict[str, Any]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor_dir), "RAYCOMPILE_COMPILE_JOBS": "auto"}
    proc = subprocess.run([sys.executable, str(DRIVER), mode, str(out)], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return torch.load(out, weights_only=False)


@pytest.mark.slow  # three processes, each a real compile
def test_cpp_kernels_built_in_inductors_own_dir_are_written_to_the_tiers(tmp_path: pathlib.Path) -> None:
    stock = run("stock", tmp_path / "inductor-a", tmp_path / "stock.pt")
    there = run("farm", tmp_path / "inductor-a", tmp_path / "there.pt")
    s = there["stats"]
    assert s["jobs"] + s["jobs_local"] == 0 and s["kernels_from_inductor_dir"] > 0, s
    elsewhere = run("farm", tmp_path / "inductor-b", tmp_path / "elsewhere.pt")
    s = elsewhere["stats"]
    assert s["jobs"] + s["jobs_local"] == 0 and s["kernel_misses"] == 0, s
    assert s["local_hits"] >= there["stats"]["kernels_from_inductor_dir"] and s["kernels_from_inductor_dir"] == 0, s
    for run_ in (there, elsewhere):
        assert torch.equal(run_["loss"], stock["loss"])
        assert all(torch.equal(a, b) for a, b in zip(run_["grads"], stock["grads"], strict=True))
