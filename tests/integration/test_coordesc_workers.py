"""Coordinate descent's candidates compiled in the node's compile workers
(``compat.coordesc.in_compile_workers``), for real on this CPU box: a reduction kernel Inductor
generated for an H100 (torch 2.11 corpus), Inductor's own process pool (``SubprocPool``), Triton
cross-compiling for sm_90, and Inductor's real coordinate-descent tuner. Only the GPU's timing is a
stand-in (``bowl``: these machines have no GPU), under which the tuner moves across several
sweeps. Every candidate it times is compiled in a worker process; this process then finds each in
Triton's cache and compiles nothing itself; the pick is the one the tuner makes with every
candidate compiled here, as stock compiles them.

The GPU test (``tests/gpu/test_coordesc_gpu.py``) checks the same through ``raycompile.enable()``.
"""

from __future__ import annotations

import concurrent.futures
import functools
import math
import pathlib
import threading
from typing import Any

import pytest

from raycompile.wrapper import compat
from raycompile.wrapper.compat import coordesc
from raycompile.wrapper.compat.triton import jit_function_name

triton = pytest.importorskip("triton")

KERNEL = "c7v64y2hk3bj7jx7bksh5qct3sgwrnaslimos32k3fopact4ovks.py"  # a reduction, XBLOCK x R0_BLOCK


def bowl(cfg: Any) -> float:
    """The stand-in for a GPU's timing: a bowl over the block sizes whose bottom is far from the
    start, so the tuner moves several times, across several sweeps."""
    x, r = cfg.kwargs["XBLOCK"], cfg.kwargs["R0_BLOCK"]
    return 1.0 + (math.log2(x) - 7) ** 2 + (math.log2(r) - 3) ** 2 + 0.1 * abs(cfg.num_warps - 8)


@pytest.fixture
def inductor_dirs(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """Empty Inductor and Triton cache dirs for this process and the workers it starts."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    return tmp_path


# at-first-run: what test_the_next_sweeps_compile_while_a_sweep_is_timed (CI's run) also covers
@pytest.mark.parametrize("at_load", [pytest.param(False, marks=pytest.mark.extended), True],
                         ids=["at-first-run", "first-sweep-at-load"])
def test_candidates_compile_in_worker_processes_and_load_here(corpus: pathlib.Path, inductor_dirs: pathlib.Path,
                                                              at_load: bool) -> None:
    """``at_load``: the first sweep was sent to the workers when the kernel's module loaded
    (``AtLoad``, as the process that compiled the module does), and the tuning takes those
    compiles instead of sending the candidates again."""
    from torch._inductor.codecache import _load_triton_kernel_from_source
    from torch._inductor.compile_worker.subproc_pool import SubprocPool
    from torch._inductor.runtime.coordinate_descent_tuner import CoordescTuner
    from torch._inductor.runtime.runtime_utils import triton_hash_to_path_key
    from triton.compiler.compiler import ASTSource

    source = (corpus / KERNEL).read_text()
    name = jit_function_name(source)
    assert name
    device, arch, warp = compat.target_of(source)
    meta = {"warp_size": 32, "max_threads_per_block": 1024}  # an H100's, so the tuner asks no GPU
    baseline = triton.Config({"XBLOCK": 8, "R0_BLOCK": 64}, num_warps=4, num_stages=1)

    def tuner() -> Any:
        return CoordescTuner(size_hints={"x": 1024, "r0_": 128}, name=name, inductor_meta=dict(meta))

    stock_pick = tuner().autotune(bowl, baseline, None)
    assert str(stock_pick) != str(baseline)  # the bowl makes it move

    pool = SubprocPool(2)  # Inductor's own compile workers
    sent: list[Any] = []
    real_submit = pool.submit

    def submit(fn: Any, *args: Any) -> Any:  # each compile the workers are sent
        sent.append(args[2])
        return real_submit(fn, *args)

    pool.submit = submit  # type: ignore[method-assign]
    early = coordesc.AtLoad(2, lambda n: None)
    queued = 0
    threads = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="raycompile-coordesc")
    made_here: list[str] = []
    real_make_ir = ASTSource.make_ir

    def make_ir(self: Any, *args: Any, **kwargs: Any) -> Any:  # a compile in this process, not a cache hit
        made_here.append(threading.current_thread().name)
        return real_make_ir(self, *args, **kwargs)

    try:
        # Inductor's ptxas, as the farm's hooks set it in the driver (the workers use it; Triton 3.6's
        # cache key holds the ptxas version)
        with compat.compile_only_driver(device, arch, warp), compat.inductor_ptxas():
            kernel = _load_triton_kernel_from_source(name, source)
            kernel._precompile_config(baseline)  # the start, compiled as the kernel's own configs are
            real = tuner()
            kernel.coordesc_tuner = real
            kernel.configs = [baseline]  # the kernel's one config, where its descent starts
            kernel.inductor_meta = {**kernel.inductor_meta, "coordinate_descent_tuning": True}
            if at_load:
                queued = early.load([kernel], pool)
                assert queued == len(coordesc.coordesc_first_sweep(kernel, baseline)) > 2
                for job in kernel.__dict__[coordesc.AT_LOAD].values():  # the module's first run comes later
                    assert job._done.wait(120)
                assert len(sent) == queued  # each sent to the workers at load, before any tuning
            in_workers: list[int] = []
            ahead = coordesc.in_compile_workers(kernel, kernel._precompile_config, lambda: pool, in_workers.append)
            assert ahead is not None
            counted: list[int] = []
            prefetch = coordesc.CoordescPrefetch(kernel, kernel._precompile_config, threads, counted.append, ahead)
            results: dict[str, Any] = {}

            def timed(cfg: Any) -> float:  # benchmark_one_config: the compile result, then its timing
                results[str(cfg)] = prefetch.precompile_config(cfg)
                return bowl(cfg)

            ASTSource.make_ir = make_ir
            try:
                prefetch.ahead_from(baseline)
                coordesc.COORDESC_ACTIVE[id(real)] = prefetch
                with compat.coordesc_prefetched(2, lambda n: None):  # compare_config sees each new best
                    pick = real.autotune(timed, baseline, None)
            finally:
                ASTSource.make_ir = real_make_ir
                coordesc.COORDESC_ACTIVE.pop(id(real), None)
                prefetch.close()
    finally:
        early.close()
        threads.shutdown()
        pool.shutdown()

    assert str(pick) == str(stock_pick)
    candidates = [cfg for cfg in results if cfg != str(baseline)]
    assert len(candidates) > 4, results  # several sweeps' worth
    # every compile ahead was a worker's (a sweep from each new best is compiled whole, so some are
    # never timed), and every candidate timed was one of them:
    assert sum(in_workers) == sum(counted) >= len(candidates)
    assert len(sent) == len({str(cfg) for cfg in sent}) == sum(counted)  # each sent once: those at load taken
    assert made_here == [], made_here  # and found here in Triton's cache: nothing compiled in this process
    hashes = {r.kernel.hash for r in results.values()}
    assert len(hashes) == len(results)  # a binary per config
    cached = {p.name for p in (inductor_dirs / "triton").iterdir()}
    assert all(triton_hash_to_path_key(h) in cached for h in hashes)  # the workers' builds, in the cache


def test_no_running_pool_leaves_the_candidates_to_threads(corpus: pathlib.Path,
                                                          inductor_dirs: pathlib.Path) -> None:
    """Where this node's compile workers are not running (its jobs go to Ray), nothing is started:
    the prefetch threads compile the candidates, as before."""
    from torch._inductor.codecache import _load_triton_kernel_from_source

    source = (corpus / KERNEL).read_text()
    name = jit_function_name(source)
    with compat.compile_only_driver(*compat.target_of(source)):
        kernel = _load_triton_kernel_from_source(name, source)
    assert coordesc.in_compile_workers(kernel, kernel._precompile_config, lambda: None, lambda n: None) is None
    factory = functools.lru_cache(1)(object)  # as AsyncCompile.process_pool makes its pool
    assert not compat.pool_started(factory)
    factory()
    assert compat.pool_started(factory)


def near(cfg: Any) -> float:
    """A stand-in for a GPU's timing whose bottom is one step from the start (``XBLOCK`` 16): the
    tuner moves once, then times the sweep from its new best."""
    x, r = cfg.kwargs["XBLOCK"], cfg.kwargs["R0_BLOCK"]
    return 1.0 + (math.log2(x) - 4) ** 2 + (math.log2(r) - 6) ** 2 + 0.1 * abs(cfg.num_warps - 4)


def test_the_next_sweeps_compile_while_a_sweep_is_timed(corpus: pathlib.Path, inductor_dirs: pathlib.Path) -> None:
    """While the tuner times a sweep's candidates, the workers compile the sweep from each of them
    (``AtLoad.next_sweeps``): when it moves, the sweep from its new best is compiled already, and
    it waits for none of those compiles. The stand-in timing of the first sweep's candidates lasts
    until the workers are done (a GPU's timings give them that time too); the pick is the tuner's
    own, nothing is compiled in this process, nothing is sent to the workers twice, and what was
    queued but not begun when the tuning ends is dropped."""
    from torch._inductor.codecache import _load_triton_kernel_from_source
    from torch._inductor.compile_worker.subproc_pool import SubprocPool
    from torch._inductor.runtime.coordinate_descent_tuner import CoordescTuner
    from triton.compiler.compiler import ASTSource

    source = (corpus / KERNEL).read_text()
    name = jit_function_name(source)
    device, arch, warp = compat.target_of(source)
    meta = {"warp_size": 32, "max_threads_per_block": 1024}
    baseline = triton.Config({"XBLOCK": 8, "R0_BLOCK": 64}, num_warps=4, num_stages=1)

    def tuner() -> Any:
        return CoordescTuner(size_hints={"x": 1024, "r0_": 128}, name=name, inductor_meta=dict(meta))

    stock_pick = tuner().autotune(near, baseline, None)
    assert stock_pick.kwargs["XBLOCK"] == 16  # it moves once

    pool = SubprocPool(2)
    sent: list[str] = []
    real_submit = pool.submit

    def submit(fn: Any, *args: Any) -> Any:
        sent.append(str(args[2]))
        return real_submit(fn, *args)

    pool.submit = submit  # type: ignore[method-assign]
    speculated: list[int] = []
    used: list[int] = []
    early = coordesc.AtLoad(2, lambda n: None, speculated.append)
    threads = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="raycompile-coordesc")
    made_here: list[str] = []
    real_make_ir = ASTSource.make_ir

    def make_ir(self: Any, *args: Any, **kwargs: Any) -> Any:
        made_here.append(threading.current_thread().name)
        return real_make_ir(self, *args, **kwargs)

    try:
        # Inductor's ptxas, as the farm's hooks set it in the driver (the workers use it; Triton 3.6's
        # cache key holds the ptxas version)
        with compat.compile_only_driver(device, arch, warp), compat.inductor_ptxas():
            kernel = _load_triton_kernel_from_source(name, source)
            kernel._precompile_config(baseline)
            real = tuner()
            kernel.coordesc_tuner = real
            kernel.configs = [baseline]
            kernel.inductor_meta = {**kernel.inductor_meta, "coordinate_descent_tuning": True}
            first = {str(c) for c in coordesc.coordesc_first_sweep(kernel, baseline)}
            ahead = coordesc.in_compile_workers(kernel, kernel._precompile_config, lambda: pool, lambda n: None,
                                                used.append)
            assert ahead is not None
            counted: list[int] = []
            prefetch = coordesc.CoordescPrefetch(kernel, kernel._precompile_config, threads, counted.append, ahead,
                                                 functools.partial(early.next_sweeps, kernel, workers=pool))
            timed_order: list[str] = []

            def workers_done() -> None:  # the GPU's timing of a sweep: long enough for the workers
                jobs = kernel.__dict__[coordesc.AT_LOAD].values()
                while any(job.queued for job in jobs):
                    threading.Event().wait(0.05)
                for job in jobs:
                    job._done.wait(120) if job._state == "begun" else None

            def timed(cfg: Any) -> float:
                prefetch.precompile_config(cfg)
                timed_order.append(str(cfg))
                if str(cfg) in first:
                    workers_done()
                return near(cfg)

            ASTSource.make_ir = make_ir
            try:
                prefetch.ahead_from(baseline)
                coordesc.COORDESC_ACTIVE[id(real)] = prefetch
                with compat.coordesc_prefetched(2, lambda n: None):
                    pick = real.autotune(timed, baseline, None)
            finally:
                ASTSource.make_ir = real_make_ir
                coordesc.COORDESC_ACTIVE.pop(id(real), None)
                prefetch.close()
            left = kernel.__dict__.pop(coordesc.AT_LOAD)
            for job in left.values():  # the tuning's end (coordinate_descent_tuning does this)
                job.drop()
            assert not any(job.queued for job in left.values())
    finally:
        early.close()
        threads.shutdown()
        pool.shutdown()

    assert str(pick) == str(stock_pick)
    later = [cfg for cfg in timed_order if cfg not in first and cfg != str(baseline)]
    assert later, timed_order  # the sweep from the new best was timed
    assert sum(used) >= len(later)  # ... each of its candidates compiled while the first sweep was timed
    assert sum(speculated) > len(first)
    assert len(sent) == len(set(sent))  # nothing sent twice
    assert made_here == [], made_here
