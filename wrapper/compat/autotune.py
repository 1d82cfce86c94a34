"""Seam family "autotune": max-autotune's tuning pool and precompile, a kernel's config
benchmark, Inductor's benchmarker, and the touch points a GPU actor uses to time a candidate made
on another node. Each seam that replaces an Inductor entry point is a context manager that
restores it exactly on exit; what the farm does behind them is in ``wrapper/gpu_autotune.py``.
Checked on torch 2.11.0, 2.13.0 and 2.15.0."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ._base import Seams

CHECKED_ON = ("2.11.0", "2.13.0", "2.15.0")

SEAMS: Seams = {
    "autotune_process.get_tuning_process_pool": ("torch._inductor.autotune_process", "get_tuning_process_pool"),
    "autotune_process.benchmark_in_sub_process": ("torch._inductor.autotune_process", "benchmark_in_sub_process"),
    "TritonGPUBenchmarkRequest": ("torch._inductor.autotune_process", "TritonGPUBenchmarkRequest"),
    "TritonBenchmarkRequest.module_path": ("torch._inductor.autotune_process", "TritonBenchmarkRequest.__init__"),
    "BenchmarkRequest.benchmark": ("torch._inductor.autotune_process", "BenchmarkRequest.benchmark"),
    "TensorMeta": ("torch._inductor.autotune_process", "TensorMeta"),
    # cleared before a request is pickled (a loaded module); set as TritonTemplateCaller.benchmark sets it
    "TritonBenchmarkRequest._benchmark_module": ("torch._inductor.autotune_process", "TritonBenchmarkRequest"),
    "TritonTemplateCaller._benchmark_with_cudagraphs": ("torch._inductor.select_algorithm", "TritonTemplateCaller"),
    "config.autotune_in_subproc": ("torch._inductor.config", "autotune_in_subproc"),
    "AlgorithmSelectorCache.benchmark_in_sub_process": (
        "torch._inductor.select_algorithm", "AlgorithmSelectorCache.benchmark_in_sub_process"),
    "AlgorithmSelectorCache.make_precompile_fn": (
        "torch._inductor.select_algorithm", "AlgorithmSelectorCache.make_precompile_fn"),
    "PyCodeCache.write": ("torch._inductor.codecache", "PyCodeCache.write"),
    # every max-autotune decision asks it for its candidates' timings (and, with no benchmark given,
    # whether they are all known: then Inductor compiles none of them)
    "PersistentCache.lookup": ("torch._inductor.codecache", "PersistentCache.lookup"),
    "ChoiceCaller.hash_key": ("torch._inductor.ir", "ChoiceCaller.hash_key"),
    "CachingAutotuner.benchmark_all_configs": (
        "torch._inductor.runtime.triton_heuristics", "CachingAutotuner.benchmark_all_configs"),
    "CachingAutotuner.autotune_to_one_config": (
        "torch._inductor.runtime.triton_heuristics", "CachingAutotuner.autotune_to_one_config"),
    "triton_heuristics.user_autotune": ("torch._inductor.runtime.triton_heuristics", "user_autotune"),
    "benchmarker.benchmark_gpu": ("torch._inductor.runtime.benchmarking", "benchmarker.benchmark_gpu"),
    # the compile pool's reader thread receives each worker's result with it (a module global that
    # SubprocPool._read_thread looks up at each call), then unpickles it and sets its future
    "subproc_pool._recv_msg": ("torch._inductor.compile_worker.subproc_pool", "_recv_msg"),
    "rand_strided": ("torch._dynamo.testing", "rand_strided"),
}

# timed(call) -> call()'s timing, taken as the farm takes this process's own timings (QuietTimer)
Timed = Callable[[Callable[[], Any]], Any]


# --- driver side: the seams ------------------------------------------------------------------
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


# decide(choices, op, inputs, hint, benchmark, stock) -> {choice: ms}; stock(benchmark) is Inductor's lookup
Decide = Callable[[Sequence[Any], str, str, Any, Any, Callable[[Any], dict[Any, float]]], dict[Any, float]]


@contextlib.contextmanager
def decisions_installed(decide: Decide) -> Iterator[None]:
    """Every max-autotune decision's lookup (``PersistentCache.lookup``, which
    ``AlgorithmSelectorCache`` inherits: the candidates' timings, from Inductor's local cache or by
    calling ``benchmark``) goes through ``decide``; restored on exit."""
    import inspect

    from torch._inductor.codecache import PersistentCache

    stock = PersistentCache.__dict__["lookup"]
    signature = inspect.signature(stock)

    def lookup(self: Any, *args: Any, **kwargs: Any) -> dict[Any, float]:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments

        def call_stock(benchmark: Any) -> dict[Any, float]:
            rest = {k: v for k, v in a.items() if k not in ("self", "choices", "op", "inputs", "benchmark")}
            return stock(self, a["choices"], a["op"], a["inputs"], benchmark, **rest)

        return decide(a["choices"], a["op"], a["inputs"], a.get("hint_override"), a["benchmark"], call_stock)

    PersistentCache.lookup = lookup
    try:
        yield
    finally:
        PersistentCache.lookup = stock


def decision_device(inputs: str) -> str | None:
    """The device type ("cuda", "cpu") of a decision's inputs, read from Inductor's inputs key
    (``AlgorithmSelectorCache.key_of``: each input's device type, dtype, sizes, strides, offset), or
    None for another device or a key of a form not known here."""
    for device in ("cuda", "cpu"):
        if f"'{device}'" in inputs:
            return device
    return None


def matmul_precision() -> str:
    import torch

    return torch.get_float32_matmul_precision()


@contextlib.contextmanager
def driver_timing_held(timed: Timed) -> Iterator[None]:
    """Every GPU timing this process takes (``benchmarker.benchmark_gpu``: Inductor's one entry to
    timing a kernel) runs as ``timed(call)``, where ``call()`` is stock's timing (the farm's
    ``QuietTimer``: the GPU actors on this process's GPU idle, raycompile's threads parked, the
    timing taken again if another thread ran Python through it); restored on exit."""
    from torch._inductor.runtime.benchmarking import benchmarker

    had = "benchmark_gpu" in vars(benchmarker)
    saved = vars(benchmarker).get("benchmark_gpu")
    stock = benchmarker.benchmark_gpu

    def held_benchmark_gpu(*args: Any, **kwargs: Any) -> Any:
        return timed(lambda: stock(*args, **kwargs))

    benchmarker.benchmark_gpu = held_benchmark_gpu
    try:
        yield
    finally:
        if had:
            benchmarker.benchmark_gpu = saved
        else:
            del benchmarker.benchmark_gpu


@contextlib.contextmanager
def subproc_results_parked(park: Callable[[], None]) -> Iterator[None]:
    """Inductor's compile pool (``SubprocPool``) takes each worker's result on a thread of its own
    (``_read_thread``: ``_recv_msg``, then the result unpickled and its future set, which wakes the
    thread waiting for it). Each message received passes ``park()`` before that Python runs (the
    farm's quiet timings: ``QUIET.checkpoint``, which returns at once unless this process is timing
    a kernel); every pool's reader while inside (a reader already waiting in stock's ``_recv_msg``
    returns its next message through stock's, and calls this one from then on). Restored on exit."""
    from torch._inductor.compile_worker import subproc_pool

    stock = subproc_pool.__dict__["_recv_msg"]

    def _recv_msg(*args: Any, **kwargs: Any) -> Any:
        received = stock(*args, **kwargs)
        park()
        return received

    subproc_pool._recv_msg = _recv_msg
    try:
        yield
    finally:
        subproc_pool._recv_msg = stock


def stock_tuning_pool() -> Callable[[], Any]:
    """Inductor's own tuning pool factory (captured before ``tuning_pool_installed``)."""
    from torch._inductor import autotune_process

    return autotune_process.__dict__["get_tuning_process_pool"]


# --- driver side: max-autotune choices ---------------------------------------------------------


def is_gpu_template_choice(choice: Any) -> bool:
    """Whether ``choice`` is a max-autotune Triton template choice timed on a GPU."""
    from torch._inductor.autotune_process import TritonGPUBenchmarkRequest

    return isinstance(getattr(choice, "bmreq", None), TritonGPUBenchmarkRequest)


def template_request(choice: Any) -> tuple[str, str, Any]:
    """(kernel name, module path, request state to pickle) of a GPU template choice: its
    ``TritonBenchmarkRequest`` without the loaded module, set to time as Inductor's in-process
    benchmark would (``TritonTemplateCaller.benchmark`` sets ``benchmark_with_cudagraphs``)."""
    bmreq = choice.bmreq
    state = copy.copy(bmreq)
    if hasattr(state, "_benchmark_module"):
        state._benchmark_module = None  # a loaded module: not sent
    state.benchmark_with_cudagraphs = bool(getattr(choice, "_benchmark_with_cudagraphs", False))
    return bmreq.kernel_name, bmreq.module_path, state


def local_template_ms(choice: Any) -> float:
    """A max-autotune Triton choice timed in this process, as ``TritonTemplateCaller.benchmark``
    does (its request's own example tensors, Inductor's benchmarker)."""
    bmreq = choice.bmreq
    bmreq.benchmark_with_cudagraphs = bool(getattr(choice, "_benchmark_with_cudagraphs", False))
    return float(bmreq.benchmark())


def choice_failed(choice: Any) -> bool:
    """Whether a choice's precompile failed (Inductor marks it; it is then ``inf``, never sent)."""
    return bool(getattr(choice, "failed", False))


def choice_label(choice: Any) -> str:
    return str(getattr(choice, "description", choice))


# --- actor side ----------------------------------------------------------------------------------


def warm_gpu_worker(device: Any) -> None:
    """A GPU worker's one-time set-up, done while it starts: the CUDA context on ``device``, the
    Inductor modules the benchmark jobs use (seconds on a fresh process), Triton's driver (it
    builds its launcher utilities on first use)."""
    import torch

    for module in ("torch._inductor.runtime.benchmarking", "torch._inductor.runtime.triton_heuristics",
                   "torch._inductor.autotune_process", "torch._inductor.select_algorithm",
                   "torch._inductor.codecache", "torch._dynamo.testing"):
        importlib.import_module(module)
    torch.empty(1, device=device)
    try:
        import triton

        triton.runtime.driver.active.utils  # noqa: B018 - builds or loads the driver's utilities
    except Exception:  # noqa: BLE001 - best effort: the first candidate sets it up, or reports the error
        pass


def rand_strided(shape: Sequence[int], stride: Sequence[int], dtype: Any, device: Any, offset: int = 0) -> Any:
    """An example tensor as Inductor's compile-time autotune makes one."""
    from torch._dynamo.testing import rand_strided as make

    return make(tuple(shape), tuple(stride), dtype=dtype, device=device, extra_size=offset)


def benchmark_gpu(fn: Callable[[], Any]) -> float:
    """Milliseconds of ``fn`` by Inductor's benchmarker (warm-up, L2 flush, median of repeats)."""
    from torch._inductor.runtime.benchmarking import benchmarker

    return float(benchmarker.benchmark_gpu(fn))


def point_request_here(bmreq: Any, source: str, device: Any) -> None:
    """Make a max-autotune ``TritonBenchmarkRequest`` made on another node loadable here: its
    module written to this node's Inductor cache (content-addressed, as Inductor names it), its
    tensors on this process's GPU."""
    from torch._inductor.codecache import PyCodeCache

    key, path = PyCodeCache.write(source)
    bmreq.module_path, bmreq.module_cache_key = path, key
    bmreq.input_tensor_meta = [dataclasses.replace(m, device=device) for m in bmreq.input_tensor_meta]
    out = bmreq.output_tensor_meta
    bmreq.output_tensor_meta = ([dataclasses.replace(m, device=device) for m in out] if isinstance(out, list)
                                else dataclasses.replace(out, device=device))


def run_request(bmreq: Any) -> float:
    """Time a max-autotune choice exactly as Inductor's tuning subprocess does."""
    return float(bmreq.benchmark())
