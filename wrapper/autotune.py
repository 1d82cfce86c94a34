"""Autotuning on the farm's GPU actors: the Inductor side.

Two seams while the farm has GPUs of the driver's model (``AutotuneHooks``):
- max-autotune (``select_algorithm``): with ``config.autotune_in_subproc``, ATen choices are
  timed in this process and Triton template choices go to
  ``autotune_process.get_tuning_process_pool().benchmark(choices)``. That pool is replaced by
  ``FarmTuningPool``, which sends each choice's ``bmreq`` (with its module source and Triton
  cache group) to the GPU actors;
- a Triton kernel with several configs (``CachingAutotuner.benchmark_all_configs``, called by
  ``autotune_to_one_config`` at the first run, or at compile time with
  ``config.triton.autotune_at_compile_time``): its configs are timed on the GPU actors in parallel
  and the timings handed back to Inductor, which keeps the fastest launcher as it always does. The
  winner is stored (``cache/winners.py``); a process that loads the kernel later gets it stitched
  in (``wrapper/runtime.py``'s ``winners``) and benchmarks nothing.

Also the actor-side touch points the benchmark jobs (kernels/benchmark.py) use. Every Inductor
name reached here is listed in ``compat.SEAMS`` (checked on torch 2.13.0; 2.11.0 on the GPU
machine: ``tests/unit/test_compat.py``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import logging
import os
import pickle
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from . import compat

log = logging.getLogger("raycompile.autotune")

INF = float("inf")

# jobs -> timings, in order: the orchestrator's GPU pool, bound to one GPU group
Runner = Callable[[Sequence[tuple[Any, Any]]], list[Any]]


# --- actor side ---------------------------------------------------------------------------------


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


# --- driver side: what is sent -------------------------------------------------------------------


def module_source(path: str) -> str:
    with open(path) as f:
        return f.read()


def triton_source_key(name: str, source: str) -> str:
    """The farm's cache key of the Triton kernel module ``source``: the Router's key for its
    compile job (``wrapper/hooks.py``), the key the output module names the kernel by
    (``wrapper/codegen.py``), and so the key its autotune winner is filed under."""
    from ..kernels import TritonJob, Versions
    from .hooks import cache_key

    return cache_key(TritonJob(name, source, Versions.here(), {}, compat.triton_extra_config(source)))


def triton_files(cache: Any, name: str, source: str) -> dict[str, bytes]:
    """The Triton cache group the farm compiled for ``source`` (from the local tier; not counted as
    a lookup), or {} when it has none (the GPU node then compiles the kernel itself)."""
    local = getattr(cache, "local", None)
    if local is None:
        return {}
    from ..cache import Entry

    entry = local.get(triton_source_key(name, source))
    if not isinstance(entry, Entry):
        return {}
    return {n: d for n, d in entry.blobs.items() if n.startswith("triton/")}


def is_gpu_template_choice(choice: Any) -> bool:
    from torch._inductor.autotune_process import TritonGPUBenchmarkRequest

    return isinstance(getattr(choice, "bmreq", None), TritonGPUBenchmarkRequest)


def template_payload(choice: Any, cache: Any) -> tuple[Any, dict[str, Any]]:
    """(Payload, label) of a max-autotune Triton template choice."""
    from ..kernels.benchmark import Payload

    bmreq = choice.bmreq
    source = module_source(bmreq.module_path)
    state = copy.copy(bmreq)
    if hasattr(state, "_benchmark_module"):
        state._benchmark_module = None  # a loaded module: not sent
    # time it as Inductor's in-process benchmark would (TritonTemplateCaller.benchmark sets this)
    state.benchmark_with_cudagraphs = bool(getattr(choice, "_benchmark_with_cudagraphs", False))
    payload = Payload.make("template", bmreq.kernel_name, source, bmreq=pickle.dumps(state),
                           files=triton_files(cache, bmreq.kernel_name, source))
    return payload, {}


def autotuner_source(kernel: Any) -> tuple[str, str] | None:
    """(kernel name, module source) of a loaded ``CachingAutotuner``, or None when unknown.

    ``AsyncCompile.triton`` hands the parent's precompile a ``reload_kernel`` closure over
    ``functools.partial(_load_triton_kernel_from_source, name, source)`` (kept as
    ``_reload_kernel``); a kernel compiled in-process was loaded from a file under Inductor's
    cache whose name is the hash of its source (``filename``)."""
    from torch._inductor.codecache import _load_triton_kernel_from_source

    reload = getattr(kernel, "_reload_kernel", None)
    for cell in getattr(reload, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if (isinstance(value, functools.partial) and value.func is _load_triton_kernel_from_source
                and len(value.args) == 2):
            return value.args[0], value.args[1]
    filename = getattr(kernel, "filename", None)
    name = (getattr(kernel, "inductor_meta", None) or {}).get("kernel_name")
    if filename and name and os.path.isfile(filename):
        return name, module_source(filename)
    return None


# --- driver side: the seams ----------------------------------------------------------------------


class FarmTuningPool:
    """Stands in for Inductor's ``TuningProcessPool``: ``benchmark(choices)`` times each GPU
    Triton template choice on the GPU actors; any other choice (CUTLASS) goes to the stock pool.
    A choice that failed or crashed its GPU is ``inf``, as in ``TuningProcessPool.target``."""

    def __init__(self, run: Runner, cache: Any, stock: Callable[[], Any]) -> None:
        self._run, self._cache, self._stock = run, cache, stock

    def benchmark(self, choices: Sequence[Any]) -> dict[Any, float]:
        from ..kernels import Versions
        from ..kernels.benchmark import BenchJob

        ours = [c for c in choices if is_gpu_template_choice(c)]
        rest = [c for c in choices if not is_gpu_template_choice(c)]
        timings: dict[Any, float] = {}
        if ours:
            versions = Versions.here()
            work = []
            for c in ours:
                payload, config = template_payload(c, self._cache)
                work.append((BenchJob(payload.kernel_id, payload.name, 0, config, versions), payload))
            try:
                results = [t.ms for t in self._run(work)]
            except Exception as e:  # no GPU of this model in the cluster, or Ray is gone: time them here
                _warn_local(e)
                rest = [*ours, *rest]
            else:
                timings.update(zip(ours, results))
        if rest:
            timings.update(self._stock().benchmark(rest))
        return {c: timings[c] for c in choices}

    def shutdown(self) -> None:
        """Inductor's atexit hook calls this; the GPU actors belong to the raycompile session."""


class ConfigTuner:
    """Times an Inductor Triton kernel's configs on the GPU actors (``benchmark_all_configs``)."""

    def __init__(self, run: Runner, cache: Any, winners: Any, stats: Any) -> None:
        self._run, self._cache, self._winners, self._stats = run, cache, winners, stats

    def key_of(self, kernel: Any) -> tuple[str, str, str] | None:
        found = autotuner_source(kernel)
        if found is None:
            return None
        name, source = found
        return name, source, triton_source_key(name, source)

    def benchmark_all_configs(self, kernel: Any, stock: Callable[..., dict[Any, float]], *args: Any,
                              **kwargs: Any) -> dict[Any, float]:
        from ..kernels import Versions
        from ..kernels.benchmark import BenchJob, Payload, describe_args, has_indirect_indexing

        launchers = list(kernel.launchers)
        if kernel.device_props.type != "cuda" or len(launchers) < 2:
            return stock(kernel, *args, **kwargs)
        found = self.key_of(kernel)
        if found is None:
            log.debug("raycompile: %s: source unknown; autotuning locally", kernel.fn.__name__)
            self._stats.add(benchmarks_local=1)
            return stock(kernel, *args, **kwargs)
        name, source, key = found
        configs = [compat.config_dict(launcher.config) for launcher in launchers]
        known = self._winners.get(key)
        if known is not None and known in configs:
            self._stats.add(autotune_cached=1)
            return {launcher: (0.0 if cfg == known else INF) for launcher, cfg in zip(launchers, configs)}
        if has_indirect_indexing(source):
            self._stats.add(benchmarks_local=1)
            return stock(kernel, *args, **kwargs)
        payload = Payload.make("inductor", name, source, files=triton_files(self._cache, name, source),
                               args=describe_args(args), kwargs=dict(zip(kwargs, describe_args(list(kwargs.values())))))
        versions = Versions.here()
        work = [(BenchJob(payload.kernel_id, name, i, cfg, versions), payload) for i, cfg in enumerate(configs)]
        try:
            results = self._run(work)
        except Exception as e:  # no GPU of this model in the cluster, or Ray is gone
            _warn_local(e)
            self._stats.add(benchmarks_local=1)
            return stock(kernel, *args, **kwargs)
        if all(t.ms == INF for t in results):  # every config failed there: let Inductor time them here
            log.warning("raycompile: %s: no config could be timed on the GPU actors (%s); autotuning locally",
                        name, results[0].error if results else "no result")
            self._stats.add(benchmarks_local=1)
            return stock(kernel, *args, **kwargs)
        timings = {launcher: t.ms for launcher, t in zip(launchers, results)}
        best = min(range(len(results)), key=lambda i: results[i].ms)
        self._winners.put(key, configs[best], {"kernel": name, "ms": results[best].ms})
        return timings


_warned: set[str] = set()


def _warn_local(error: Exception) -> None:
    text = f"{type(error).__name__}: {error}"
    if text not in _warned:
        _warned.add(text)
        log.warning("raycompile: the GPU workers cannot take benchmarks (%s); benchmarking on this GPU", text)


@contextlib.contextmanager
def tuning_pool_installed(pool: FarmTuningPool) -> Iterator[None]:
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
def config_benchmarks_installed(tuner: ConfigTuner) -> Iterator[None]:
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


def stock_tuning_pool() -> Callable[[], Any]:
    """Inductor's own tuning pool factory (captured before ``tuning_pool_installed``)."""
    from torch._inductor import autotune_process

    return autotune_process.__dict__["get_tuning_process_pool"]


class AutotuneHooks:
    """Installs both seams for one GPU group and registers the winner store with the output
    module's runtime; ``uninstall`` restores stock Inductor exactly."""

    def __init__(self, run: Runner, cache: Any, winners: Any, stats: Any) -> None:
        self.pool = FarmTuningPool(run, cache, stock_tuning_pool())
        self.tuner = ConfigTuner(run, cache, winners, stats)
        self.winners = winners
        self._stack: contextlib.ExitStack | None = None
        self._lock = threading.Lock()

    def install(self) -> None:
        with self._lock:
            if self._stack is not None:
                return
            stack = contextlib.ExitStack()
            stack.enter_context(tuning_pool_installed(self.pool))
            stack.enter_context(config_benchmarks_installed(self.tuner))
            try:
                from .runtime import winners as runtime_winners

                stack.callback(runtime_winners.add(self.winners.get))
            except ImportError:  # the output module's runtime is not there: winners still apply at run time
                pass
            self._stack = stack

    def uninstall(self) -> None:
        with self._lock:
            stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()

