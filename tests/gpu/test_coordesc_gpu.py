"""Coordinate descent's candidates compiled at once (``compat.coordesc_prefetched``), for real (run
on the GPU machine; skipped without a GPU): a pointwise kernel and a reduction tuned by Inductor's
coordinate descent at their first run, the farm enabled. Its candidates were compiled ahead
(counted); the pointwise result is bitwise stock's (every config of a pointwise kernel computes the
same values), the reduction's equal to eager's within rounding.

    python -m pytest -s tests/gpu/test_coordesc_gpu.py
"""

from __future__ import annotations

import pathlib

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


def test_coordinate_descent_candidates_are_compiled_ahead(local_ray: None, tmp_path: pathlib.Path) -> None:
    torch.manual_seed(0)
    x, y = torch.randn(4096, 2048, device="cuda"), torch.randn(4096, 2048, device="cuda")
    r = torch.randn(8192, 1024, device="cuda", dtype=torch.bfloat16)
    # the farm first, as a user enables it before compiling (the compile workers then start with
    # its set-up); stock's compile after it, with the farm off
    # its kernels compiled in this node's compile workers (Inductor's pool), where the candidates
    # then compile too: a node whose kernel jobs go to Ray compiles them on threads instead
    with raycompile.enabled(cache_dir=str(tmp_path / "rc"), shared_cache="none", compile_jobs="local"):
        farm = compiled_out(pointwise, x, y)
        farm_r = compiled_out(reduction, r)
        s = raycompile.stats()
        report = raycompile.report()
    stock = compiled_out(pointwise, x, y)
    print(f"\ncoordinate-descent candidates compiled ahead: {s['coordesc_prefetched']}, "
          f"in the compile workers {s['coordesc_in_workers']}")
    assert s["coordesc_prefetched"] >= 2, s  # at least the pointwise kernel's neighbours
    # this node's kernels compiled in Inductor's workers, which then compiled the candidates too
    assert s["coordesc_in_workers"] == s["coordesc_prefetched"], s
    assert torch.equal(farm, stock)
    torch.testing.assert_close(farm_r, reduction(r))
    assert "coordinate-descent candidates compiled ahead" in report
