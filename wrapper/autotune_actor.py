"""The GPU actor's side of autotuning: Inductor touch points a benchmark job
(kernels/benchmark.py) uses on the actor, apart from the driver's seams in ``wrapper/autotune.py``.
Every Inductor name reached here is listed in ``compat.SEAMS``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from . import compat


def warm(device: Any) -> None:
    """A GPU worker's one-time set-up, done while it starts: the CUDA context on ``device``, the
    Inductor modules the benchmark jobs use (seconds on a fresh process; their names are below
    and in ``compat.SEAMS``), Triton's driver (it builds its launcher utilities on first use)."""
    import importlib

    import torch

    for module in ("torch._inductor.runtime.benchmarking", "torch._inductor.runtime.triton_heuristics",
                   "torch._inductor.autotune_process", "torch._inductor.select_algorithm",
                   "torch._inductor.codecache", "torch._dynamo.testing"):
        importlib.import_module(module)
    torch.empty(1, device=device)
    try:
        import triton

        triton.runtime.driver.active.utils  # noqa: B018 - builds or loads the driver's utilities
    except Exception:  # noqa: BLE001 - the first candidate sets it up, or reports the error
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


def match_compile_env() -> None:
    """Compile and look up Triton kernels here as the farm's compile workers do (Inductor's
    ``_worker_compile_triton`` first points Triton at the ptxas Inductor ships, when it ships one):
    the ptxas is part of Triton's cache key, so a GPU actor that skipped this would miss the
    cubins the farm compiled, compile every candidate again, and time a binary from another ptxas
    than the one the driver runs."""
    try:
        from torch._inductor.runtime.compile_tasks import _set_triton_ptxas_path
    except ImportError:  # an Inductor without it: nothing to match
        return
    _set_triton_ptxas_path()


def load_autotuner(name: str, source: str) -> Any:
    """Load an Inductor Triton kernel module and precompile it here (a Triton cache hit when the
    kernel's cache group was published first)."""
    from torch._inductor.codecache import _load_triton_kernel_from_source

    kernel = _load_triton_kernel_from_source(name, source)
    kernel.precompile()
    return kernel


def launcher_for(kernel: Any, config: dict[str, Any]) -> Any:
    """The launcher of ``kernel`` compiled for ``config`` (a config dict), or None."""
    for launcher in kernel.launchers:
        if compat.config_dict(launcher.config) == config:
            return launcher
    return None


def bench_launcher(kernel: Any, launcher: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> float:
    """Inductor's own timing of one config (``CachingAutotuner.bench``: mutated arguments cloned,
    spilling configs skipped, ``benchmarker``)."""
    return float(kernel.bench(launcher, *args, **kwargs))
