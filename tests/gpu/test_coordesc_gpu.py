"""Coordinate descent's candidates compiled at once (``compat.coordesc_prefetched``), for real (run
on the GPU machine; skipped without a GPU): a pointwise kernel and a reduction tuned by Inductor's
coordinate descent at their first run, the farm enabled. Its candidates were compiled ahead
(counted); the pointwise result is bitwise stock's (every config of a pointwise kernel computes the
same values), the reduction's equal to eager's within rounding.

The check runs in a new process (this file run as a script), with a Ray of its own: in a process
where stock compiled first (an earlier test of the suite, or a notebook), Inductor's compile workers
were started before the farm's set-up and build binaries under another Triton cache key than this
process loads; the farm then compiles the candidates on its own threads (an INFO line says so), and
counting them "in the compile workers" would fail for a reason that is not this test's.

    python -m pytest -s tests/gpu/test_coordesc_gpu.py
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import torch

import raycompile
from raycompile.wrapper import compat

pytestmark = pytest.mark.gpu

OPTIONS = {"coordinate_descent_tuning": True}  # what max-autotune turns on, without its templates


def pointwise(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.sin() * y + (x * 0.5).cos()


def reduction(x: torch.Tensor) -> torch.Tensor:
    return (x.float() * x.float()).sum(dim=-1).sqrt()


def compiled_out(fn, *args):  # noqa: ANN001, ANN201 - a function and its tensors
    torch._dynamo.reset()
    with compat.fresh_cache():
        out = torch.compile(fn, options=OPTIONS)(*args)
        torch.cuda.synchronize()
    return out


def check(tmp: pathlib.Path) -> dict:
    """The farm's compile and stock's, in this (new) process: what the test asserts on."""
    import ray

    ray.init(num_gpus=torch.cuda.device_count(), include_dashboard=False, log_to_driver=False,
             namespace="raycompile")
    torch.manual_seed(0)
    x, y = torch.randn(4096, 2048, device="cuda"), torch.randn(4096, 2048, device="cuda")
    r = torch.randn(8192, 1024, device="cuda", dtype=torch.bfloat16)
    # the farm first, as a user enables it before compiling (the compile workers then start with
    # its set-up); stock's compile after it, with the farm off
    # its kernels compiled in this node's compile workers (Inductor's pool), where the candidates
    # then compile too: a node whose kernel jobs go to Ray compiles them on threads instead
    with raycompile.enabled(cache_dir=str(tmp / "rc"), shared_cache="none", compile_jobs="local"):
        farm = compiled_out(pointwise, x, y)
        farm_r = compiled_out(reduction, r)
        s = raycompile.stats()
        report = raycompile.report()
    stock = compiled_out(pointwise, x, y)
    ray.shutdown()
    return {"prefetched": s["coordesc_prefetched"], "in_workers": s["coordesc_in_workers"],
            "bitwise": bool(torch.equal(farm, stock)),
            "reduction_close": bool(torch.allclose(farm_r.float(), reduction(r).float(), rtol=1.3e-6, atol=1e-5)),
            "reported": "coordinate-descent candidates compiled ahead" in report}


def test_coordinate_descent_candidates_are_compiled_ahead(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, __file__, str(tmp_path), str(out)], capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    got = json.loads(out.read_text())
    print(f"\ncoordinate-descent candidates compiled ahead: {got['prefetched']}, "
          f"in the compile workers {got['in_workers']}")
    assert got["prefetched"] >= 2, got  # at least the pointwise kernel's neighbours
    # this node's kernels compiled in Inductor's workers, which then compiled the candidates too
    assert got["in_workers"] == got["prefetched"], got
    assert got["bitwise"] and got["reduction_close"] and got["reported"], got


if __name__ == "__main__":
    where, result = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    result.write_text(json.dumps(check(where)))
