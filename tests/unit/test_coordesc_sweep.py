"""Coordinate descent's first sweep, found ahead (``compat.coordesc_first_sweep``): the configs
Inductor's own tuner (``CoordescTuner``, real) times first from a starting config, in its order,
without compiling or timing anything, and without touching the tuner's own cache. The compiles of
those configs at once on a GPU are checked in ``tests/gpu/test_coordesc_gpu.py``."""

from __future__ import annotations

import types
from typing import Any

import pytest

from raycompile.wrapper import compat

triton = pytest.importorskip("triton")

META = {"warp_size": 32, "max_threads_per_block": 1024}  # an H100's, so the tuner asks no GPU


def tuner(**size_hints: int) -> Any:
    from torch._inductor.runtime.coordinate_descent_tuner import CoordescTuner

    return CoordescTuner(size_hints=size_hints, name="triton_red_fused_0", inductor_meta=dict(META))


def visited_first(size_hints: dict[str, int], baseline: Any) -> list[str]:
    """What the real tuner times when no candidate beats the start: its first sweep, then nothing."""
    seen: list[str] = []

    def timing(cfg: Any) -> float:
        seen.append(str(cfg))
        return 1.0 if str(cfg) == str(baseline) else 2.0

    tuner(**size_hints).autotune(timing, baseline, None)
    return seen[1:]  # the start is timed first


@pytest.mark.parametrize("size_hints,kwargs", [
    ({"x": 4096, "r0_": 512}, {"XBLOCK": 8, "R0_BLOCK": 64}),  # a reduction
    ({"x": 1 << 20}, {"XBLOCK": 1024}),  # a pointwise kernel
    ({"y": 1024, "x": 512}, {"YBLOCK": 32, "XBLOCK": 64}),  # a 2-D pointwise kernel
])
def test_first_sweep_is_what_the_tuner_times_first(size_hints: dict[str, int], kwargs: dict[str, int]) -> None:
    baseline = triton.Config(kwargs, num_warps=4, num_stages=1)
    real = tuner(**size_hints)
    kernel = types.SimpleNamespace(coordesc_tuner=real)  # what the sweep reads of a CachingAutotuner
    ahead = compat.coordesc_first_sweep(kernel, baseline)
    assert ahead and [str(c) for c in ahead] == visited_first(size_hints, baseline)
    assert real.cached_benchmark_results == {}  # the dry run used a copy's cache


def test_kernels_coordinate_descent_leaves_alone_get_nothing_ahead() -> None:
    baseline = triton.Config({"XBLOCK": 1024}, num_warps=4, num_stages=1)
    template = types.SimpleNamespace(coordesc_tuner=tuner(x=1 << 20), _should_coordesc_tune=False)
    assert compat.coordesc_first_sweep(template, baseline) == []
    assert compat.coordesc_first_sweep(types.SimpleNamespace(), baseline) == []  # no tuner at all
