"""The Inductor seams of autotuning on the farm's GPU actors (driver side): each one a context
manager that replaces one Inductor entry point and restores it exactly on exit. What the farm
does behind them (``FarmTuningPool``, ``ConfigTuner``) is in ``autotune.py``; every Inductor name
reached here is listed in ``compat.SEAMS``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

# a context manager factory: while inside, no actor times on this process's GPU (GPUPool.hold_here)
Hold = Callable[[], contextlib.AbstractContextManager[None]]


@contextlib.contextmanager
def tuning_pool_installed(pool: Any) -> Iterator[None]:
    """Max-autotune's Triton template benchmarks go to ``pool`` (``config.autotune_in_subproc``
    on, ``autotune_process.get_tuning_process_pool`` answering ``pool``); restored on exit."""
    from torch._inductor import autotune_process, config

    saved = (autotune_process.__dict__["get_tuning_process_pool"], config.autotune_in_subproc)
    stock = saved[0]
    autotune_process.get_tuning_process_pool = lambda: pool
    config.autotune_in_subproc = True
    try:
        yield
    finally:
        autotune_process.get_tuning_process_pool = stock
        config.autotune_in_subproc = saved[1]


@contextlib.contextmanager
def config_benchmarks_installed(tuner: Any) -> Iterator[None]:
    """``CachingAutotuner.benchmark_all_configs`` goes through ``tuner``; restored on exit."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    stock = CachingAutotuner.__dict__["benchmark_all_configs"]

    def benchmark_all_configs(self: Any, *args: Any, **kwargs: Any) -> dict[Any, float]:
        return tuner.benchmark_all_configs(self, stock, *args, **kwargs)

    CachingAutotuner.benchmark_all_configs = benchmark_all_configs
    try:
        yield
    finally:
        CachingAutotuner.benchmark_all_configs = stock


class SharedPrecompile:
    """Inductor's precompile wait for one decision, safe to call from two threads (the background
    prefetch and the benchmark Inductor runs later): the first call runs it, the others wait for
    it and get its result. Other attributes (``precompile_key``) are the wrapped one's."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn, self._lock = fn, threading.Lock()
        self._done, self._result = False, None

    def __call__(self) -> Any:
        with self._lock:
            if not self._done:
                self._result, self._done = self._fn(), True
            return self._result

    def __getattr__(self, name: str) -> Any:
        if name in ("_fn", "_lock", "_done", "_result"):  # not set yet (copy, unpickling)
            raise AttributeError(name)
        return getattr(self._fn, name)


@contextlib.contextmanager
def prefetch_installed(pool: Any) -> Iterator[None]:
    """Each max-autotune decision's Triton choices start on the actors as soon as Inductor made its
    precompile function (``AlgorithmSelectorCache.make_precompile_fn``; Inductor returns a no-op
    one when every timing is in its cache, and the same one for a decision made again); restored
    on exit."""
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    stock = AlgorithmSelectorCache.__dict__["make_precompile_fn"]
    shared: dict[int, tuple[Any, SharedPrecompile]] = {}
    lock = threading.Lock()

    def make_precompile_fn(self: Any, choices: Any, *args: Any, **kwargs: Any) -> Any:
        fn = stock(self, choices, *args, **kwargs)
        if getattr(fn, "__name__", "") == "no_op":  # every timing is known: nothing will be benchmarked
            return fn
        with lock:
            known = shared.get(id(fn))
            if known is not None and known[0] is fn:
                return known[1]
            wrapped = SharedPrecompile(fn)
            shared[id(fn)] = (fn, wrapped)
        pool.prefetch(list(choices), wrapped)
        return wrapped

    AlgorithmSelectorCache.make_precompile_fn = make_precompile_fn
    try:
        yield
    finally:
        AlgorithmSelectorCache.make_precompile_fn = stock
        pool.forget()


@contextlib.contextmanager
def driver_timing_held(hold: Hold) -> Iterator[None]:
    """Every GPU timing this process takes (``benchmarker.benchmark_gpu``: Inductor's one entry to
    timing a kernel) runs inside ``hold()``, which keeps the GPU actors on this process's GPU idle
    meanwhile; restored on exit."""
    from torch._inductor.runtime.benchmarking import benchmarker

    had = "benchmark_gpu" in vars(benchmarker)
    saved = vars(benchmarker).get("benchmark_gpu")
    stock = benchmarker.benchmark_gpu

    def held_benchmark_gpu(*args: Any, **kwargs: Any) -> Any:
        with hold():
            return stock(*args, **kwargs)

    benchmarker.benchmark_gpu = held_benchmark_gpu
    try:
        yield
    finally:
        if had:
            benchmarker.benchmark_gpu = saved
        else:
            del benchmarker.benchmark_gpu


def stock_tuning_pool() -> Callable[[], Any]:
    """Inductor's own tuning pool factory (captured before ``tuning_pool_installed``)."""
    from torch._inductor import autotune_process

    return autotune_process.__dict__["get_tuning_process_pool"]
