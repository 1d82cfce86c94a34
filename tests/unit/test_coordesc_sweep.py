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


def bowl(cfg: Any) -> float:
    """A stand-in for a GPU's timing (these machines have none): a bowl over the block sizes whose
    bottom is far from the start, so the tuner moves several times, across several sweeps."""
    import math

    x, r = cfg.kwargs["XBLOCK"], cfg.kwargs["R0_BLOCK"]
    return 1.0 + (math.log2(x) - 8) ** 2 + (math.log2(r) - 3) ** 2 + 0.1 * abs(cfg.num_warps - 8)


def test_each_sweep_from_a_new_best_is_compiled_ahead_and_the_pick_is_stocks() -> None:
    """The real tuner, timed by ``bowl``, picks the same config with and without the candidates
    compiled ahead; with them, every config it times was compiled ahead on the prefetch threads
    (none at its turn on the tuning thread, after a move to a new best too), none twice."""
    import concurrent.futures
    import threading

    from raycompile.wrapper.compat import coordesc

    size_hints = {"x": 1 << 16, "r0_": 1024}
    baseline = triton.Config({"XBLOCK": 8, "R0_BLOCK": 64}, num_warps=4, num_stages=1)
    stock_pick = tuner(**size_hints).autotune(bowl, baseline, None)
    assert str(stock_pick) != str(baseline)  # the bowl makes it move

    real = tuner(**size_hints)
    kernel = types.SimpleNamespace(coordesc_tuner=real)
    compiled: list[tuple[str, str]] = []
    lock = threading.Lock()

    def compile_one(cfg: Any) -> str:  # what CachingAutotuner._precompile_config returns: a launcher
        with lock:
            compiled.append((str(cfg), threading.current_thread().name))
        return f"launcher {cfg}"

    counted: list[int] = []
    pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="raycompile-coordesc")
    prefetch = coordesc.CoordescPrefetch(kernel, compile_one, pool, counted.append)

    def timed(cfg: Any) -> float:  # CachingAutotuner's benchmark_one_config: the launcher, then its timing
        assert prefetch.precompile_config(cfg) == f"launcher {cfg}"
        return bowl(cfg)

    with compat.coordesc_prefetched(2, lambda n: None):
        sent = prefetch.ahead_from(baseline)
        coordesc.COORDESC_ACTIVE[id(real)] = prefetch
        try:
            pick = real.autotune(timed, baseline, None)
        finally:
            coordesc.COORDESC_ACTIVE.pop(id(real), None)
            prefetch.close()
            pool.shutdown()
    assert str(pick) == str(stock_pick)
    names = [c for c, _ in compiled]
    assert len(names) == len(set(names)), names  # nothing compiled twice
    here = [c for c, thread in compiled if not thread.startswith("raycompile-coordesc")]
    assert here == [str(baseline)], here  # only the start, timed first, as stock compiles it
    assert sum(counted) == len(compiled) - 1 > sent  # later sweeps were compiled ahead as well


def test_a_candidate_dropped_before_it_began_is_never_compiled_nor_waited_for() -> None:
    """A next-sweep candidate dropped (the tuner moved past it) while a prefetch thread was about to
    take it: the take answers at once (the tuning compiles it itself), it does not wait for a
    compile that will never run, and the job never begins."""
    import time

    from raycompile.wrapper.compat import coordesc

    ran: list[int] = []
    job = coordesc.EarlyCompile(lambda: ran.append(1) or ("hash", 0.1), speculative=True)
    job.drop()
    began = time.monotonic()
    assert job.take() is None
    assert time.monotonic() - began < 1.0
    job.run()
    assert ran == [] and not job.queued
    begun = coordesc.EarlyCompile(lambda: ran.append(2) or ("hash", 0.1))
    begun.run()
    begun.drop()  # begun already: its result stands
    assert begun.take() == ("hash", 0.1) and ran == [2]
