"""Every touch point with Inductor's private API, in one place.

Each entry names what it reaches and the torch versions it was checked on. ``check()`` verifies
that all of them exist in the installed torch; ``tests/unit/test_compat.py`` calls it, so a torch
upgrade that moves a seam fails loudly, naming it, instead of silently falling back.

Checked on: torch 2.13.0 (CPU, CI) and torch 2.11.0 (CUDA, the GPU machine).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import linecache
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

# name -> (module, attribute path). Checked on 2.11.0 and 2.13.0.
SEAMS: dict[str, tuple[str, str]] = {
    # the session's gate (raycompile/session.py) and the backend string. Checked on 2.13.0; 2.11.0: to check
    "_TorchCompileInductorWrapper.__call__": ("torch", "_TorchCompileInductorWrapper.__call__"),
    "_TorchCompileInductorWrapper.__init__": ("torch", "_TorchCompileInductorWrapper.__init__"),
    "AsyncCompile.submit": ("torch._inductor.async_compile", "AsyncCompile.submit"),
    "config.decide_compile_threads": ("torch._inductor.config", "decide_compile_threads"),
    "config.max_autotune": ("torch._inductor.config", "max_autotune"),
    "config.max_autotune_gemm": ("torch._inductor.config", "max_autotune_gemm"),
    "AsyncCompile.process_pool": ("torch._inductor.async_compile", "AsyncCompile.process_pool"),
    "AsyncCompile.cpp": ("torch._inductor.async_compile", "AsyncCompile.cpp"),
    "AsyncCompile.cpp_pybinding": ("torch._inductor.async_compile", "AsyncCompile.cpp_pybinding"),
    "AsyncCompile._ready_future": ("torch._inductor.async_compile", "AsyncCompile._ready_future"),
    "CppCodeCache.load_async": ("torch._inductor.codecache", "CppCodeCache.load_async"),
    "CppPythonBindingsCodeCache.load_pybinding_async": (
        "torch._inductor.codecache",
        "CppPythonBindingsCodeCache.load_pybinding_async",
    ),
    "_worker_compile_cpp": ("torch._inductor.codecache", "_worker_compile_cpp"),
    "_load_triton_kernel_from_source": ("torch._inductor.codecache", "_load_triton_kernel_from_source"),
    "_worker_compile_triton": ("torch._inductor.runtime.compile_tasks", "_worker_compile_triton"),
    "triton_helpers.set_driver_to_gpu": ("torch._inductor.runtime.triton_helpers", "set_driver_to_gpu"),
    "triton_hash_to_path_key": ("torch._inductor.runtime.runtime_utils", "triton_hash_to_path_key"),
    "CppBuilder.get_command_line": ("torch._inductor.cpp_builder", "CppBuilder.get_command_line"),
    "CppBuilder.get_target_file_path": ("torch._inductor.cpp_builder", "CppBuilder.get_target_file_path"),
    "CppBuilder._orig_source_paths": ("torch._inductor.cpp_builder", "CppBuilder.__init__"),
    "CppBuilder._output_dir": ("torch._inductor.cpp_builder", "CppBuilder.__init__"),
    "fresh_cache": ("torch._inductor.utils", "fresh_cache"),
    "triton_cache_dir": ("torch._inductor.runtime.runtime_utils", "triton_cache_dir"),
    "cache_dir": ("torch._inductor.runtime.runtime_utils", "cache_dir"),
    "config.compile_threads": ("torch._inductor.config", "compile_threads"),
    "config.fx_graph_remote_cache": ("torch._inductor.config", "fx_graph_remote_cache"),
    "functorch.config.enable_remote_autograd_cache": ("torch._functorch.config", "enable_remote_autograd_cache"),
    "RemoteCacheBackend": ("torch._inductor.remote_cache", "RemoteCacheBackend"),
    "RemoteFxGraphCache.backend_override_cls": (
        "torch._inductor.remote_cache", "RemoteFxGraphCache.backend_override_cls"),
    "RemoteAOTAutogradCache.backend_override_cls": (
        "torch._inductor.remote_cache", "RemoteAOTAutogradCache.backend_override_cls"),
    # the output module (wrapper/codegen.py, wrapper/runtime.py). Checked on 2.13.0; 2.11.0: to check
    "PythonWrapperCodegen": ("torch._inductor.codegen.wrapper", "PythonWrapperCodegen"),
    "PythonWrapperCodegen.create": ("torch._inductor.codegen.wrapper", "PythonWrapperCodegen.create"),
    "PythonWrapperCodegen.write_header": ("torch._inductor.codegen.wrapper", "PythonWrapperCodegen.write_header"),
    "PythonWrapperCodegen.write_kernel_autotune_defs_header": (
        "torch._inductor.codegen.wrapper", "PythonWrapperCodegen.write_kernel_autotune_defs_header"),
    "PythonWrapperCodegen.write_async_compile_wait": (
        "torch._inductor.codegen.wrapper", "PythonWrapperCodegen.write_async_compile_wait"),
    "PythonWrapperCodegen.define_kernel": ("torch._inductor.codegen.wrapper", "PythonWrapperCodegen.define_kernel"),
    "SubgraphPythonWrapperCodegen": ("torch._inductor.codegen.wrapper", "SubgraphPythonWrapperCodegen"),
    "IndentedBuffer._lines": ("torch._inductor.utils", "IndentedBuffer.__init__"),
    "DelayReplaceLine": ("torch._inductor.utils", "DelayReplaceLine"),
    "init_backend_registration": ("torch._inductor.codegen.common", "init_backend_registration"),
    "register_backend_for_device": ("torch._inductor.codegen.common", "register_backend_for_device"),
    "get_wrapper_codegen_for_device": ("torch._inductor.codegen.common", "get_wrapper_codegen_for_device"),
    "device_codegens": ("torch._inductor.codegen.common", "device_codegens"),
    "custom_backend_passes": ("torch._inductor.codegen.common", "custom_backend_passes"),
    "custom_backend_codegen_configs": ("torch._inductor.codegen.common", "custom_backend_codegen_configs"),
    "AsyncCompile.triton": ("torch._inductor.async_compile", "AsyncCompile.triton"),
    "AsyncCompile.wait": ("torch._inductor.async_compile", "AsyncCompile.wait"),
    "config.use_static_triton_launcher": ("torch._inductor.config", "use_static_triton_launcher"),
    "get_cpp_compiler": ("torch._inductor.cpp_builder", "get_cpp_compiler"),
    "AutotuneCache.read_best": ("torch._inductor.runtime.autotune_cache", "AutotuneCache.read_best"),
    "compiler.config.cache_key_tag": ("torch.compiler.config", "cache_key_tag"),
    "FxGraphHashDetails.cache_key_tag": ("torch._inductor.codecache", "FxGraphHashDetails.__init__"),
    "compiled_fx_graph_hash": ("torch._inductor.codecache", "compiled_fx_graph_hash"),
    "CachingAutotuner": ("torch._inductor.runtime.triton_heuristics", "CachingAutotuner"),
    "CodeCacheFuture": ("torch._inductor.codecache", "CodeCacheFuture"),
    "LambdaFuture.future": ("torch._inductor.codecache", "LambdaFuture.__init__"),
    "PyCodeCache.modules": ("torch._inductor.codecache", "PyCodeCache.modules"),
    # autotuning on GPU actors (wrapper/autotune.py, autotune_seams.py). Checked on 2.13.0 and 2.11.0
    "autotune_process.get_tuning_process_pool": ("torch._inductor.autotune_process", "get_tuning_process_pool"),
    "autotune_process.benchmark_in_sub_process": ("torch._inductor.autotune_process", "benchmark_in_sub_process"),
    "TritonGPUBenchmarkRequest": ("torch._inductor.autotune_process", "TritonGPUBenchmarkRequest"),
    "TritonBenchmarkRequest.module_path": ("torch._inductor.autotune_process", "TritonBenchmarkRequest.__init__"),
    "BenchmarkRequest.benchmark": ("torch._inductor.autotune_process", "BenchmarkRequest.benchmark"),
    "TensorMeta": ("torch._inductor.autotune_process", "TensorMeta"),
    "config.autotune_in_subproc": ("torch._inductor.config", "autotune_in_subproc"),
    "AlgorithmSelectorCache.benchmark_in_sub_process": (
        "torch._inductor.select_algorithm", "AlgorithmSelectorCache.benchmark_in_sub_process"),
    "PyCodeCache.write": ("torch._inductor.codecache", "PyCodeCache.write"),
    "CachingAutotuner.benchmark_all_configs": (
        "torch._inductor.runtime.triton_heuristics", "CachingAutotuner.benchmark_all_configs"),
    "CachingAutotuner.autotune_to_one_config": (
        "torch._inductor.runtime.triton_heuristics", "CachingAutotuner.autotune_to_one_config"),
    "CachingAutotuner.bench": ("torch._inductor.runtime.triton_heuristics", "CachingAutotuner.bench"),
    "CachingAutotuner._reload_kernel": ("torch._inductor.runtime.triton_heuristics", "CachingAutotuner.precompile"),
    "triton_heuristics.user_autotune": ("torch._inductor.runtime.triton_heuristics", "user_autotune"),
    "benchmarker.benchmark_gpu": ("torch._inductor.runtime.benchmarking", "benchmarker.benchmark_gpu"),
    "AlgorithmSelectorCache.make_precompile_fn": (
        "torch._inductor.select_algorithm", "AlgorithmSelectorCache.make_precompile_fn"),
    "rand_strided": ("torch._dynamo.testing", "rand_strided"),
    "_set_triton_ptxas_path": ("torch._inductor.runtime.compile_tasks", "_set_triton_ptxas_path"),
}

# Where Inductor compiles a Triton kernel during codegen, outside the output module's
# ``async_compile``: name -> (module, text its source must contain, the torch version it appeared
# in: an older torch has no such module, and so no such site). Every one of them calls
# ``AsyncCompile.triton`` on a stock ``AsyncCompile()`` when the pool is warm, so it reaches the
# farm through the same seam as the output module (``AsyncCompile.process_pool`` -> Router), and the
# output module's own call then joins the future Inductor saved (``CompiledTritonKernels``).
# ``tests/unit/test_compat.py`` fails, naming the site, when one moves. Checked on 2.13.0 and 2.11.0.
EAGER_COMPILE_SITES: dict[str, tuple[str, str, str]] = {
    # every pointwise/reduction/template kernel, as soon as its source is generated
    "TritonScheduling.define_kernel (warm pool)": (
        "torch._inductor.codegen.triton", "async_compile.triton(subs_name", "2.11"),
    # max-autotune: each Triton template choice, before benchmarking (non-Triton choices: threads)
    "AlgorithmSelectorCache precompile (max-autotune)": (
        "torch._inductor.select_algorithm", "async_compile.triton(", "2.11"),
    # benchmark_fusion / multi-template epilogues: the fused candidate, then precompiled in-process
    # from the Triton cache the farm's result was published to
    "Scheduler.compile_kernel (benchmark fusion)": ("torch._inductor.scheduler", "async_compile.triton(", "2.11"),
    # cpp_wrapper without autotune_at_compile_time: kernels compiled when the model loads
    "triton_lazy_compile (cpp_wrapper)": ("torch._inductor.runtime.triton_lazy_compile", "AsyncCompile()", "2.13"),
}
# Compiles that stay in-process (not routed, by design; listed so nobody looks for them):
# - AsyncCompile.triton's serial branch: only when use_process_pool() is False, i.e. in a daemonic
#   multiprocessing process or with config.triton.proton_profiling (the farm keeps compile_threads >= 2);
# - benchmark_kernel / benchmark_combo_kernel / TritonScheduling.benchmark_fused_nodes without a warm
#   pool: PyCodeCache.load(src) and a first call, on the GPU that benchmarks it;
# - the autotune benchmark subprocess (autotune_process.py) and CachingAutotuner.run's lazy
#   precompile: they load binaries the farm already published to this node's Triton cache.


class SeamMissing(RuntimeError):
    """The installed torch lacks an Inductor internal that raycompile relies on."""


def _resolve(module: str, path: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def check() -> None:
    """Raise SeamMissing naming every touch point the installed torch lacks."""
    import torch

    missing = []
    for name, (module, path) in SEAMS.items():
        try:
            _resolve(module, path)
        except (ImportError, AttributeError) as e:
            missing.append(f"{name} ({module}.{path}: {e})")
    if missing:
        raise SeamMissing(
            f"torch {torch.__version__} lacks Inductor internals raycompile needs: "
            + "; ".join(missing)
            + ". raycompile is checked on torch 2.11 and 2.13; pin one of those."
        )


def check_eager_compile_sites() -> None:
    """Raise SeamMissing naming every EAGER_COMPILE_SITES entry whose code has moved: a compile
    made during codegen that might no longer go through ``AsyncCompile.triton`` (and the farm)."""
    import inspect

    import torch

    here = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    moved = []
    for name, (module, needle, since) in EAGER_COMPILE_SITES.items():
        try:
            source = inspect.getsource(importlib.import_module(module))
        except ModuleNotFoundError as e:
            if here < tuple(int(p) for p in since.split(".")):
                continue  # this torch predates the site
            moved.append(f"{name} ({module}: {e})")
            continue
        except (ImportError, OSError) as e:
            moved.append(f"{name} ({module}: {e})")
            continue
        if needle not in source:
            moved.append(f"{name} ({module} no longer contains {needle!r})")
    if moved:
        raise SeamMissing(
            f"torch {torch.__version__}: Inductor's codegen-time compile sites changed: " + "; ".join(moved)
            + ". Check that each still compiles through AsyncCompile.triton, then update EAGER_COMPILE_SITES."
        )


# --- The session's entry: torch.compile's Inductor backend ------------------------------------


@contextlib.contextmanager
def inductor_entry_gated(before: Callable[[], None]) -> Iterator[None]:
    """Run ``before()`` at the start of every Inductor compile ``torch.compile`` makes (the
    backend object of ``backend="inductor"``, ``torch._TorchCompileInductorWrapper``, called with
    the graph Dynamo traced), so the session installs its Inductor hooks there, not at
    ``enable()``: importing Inductor takes seconds, and stock pays it at the same point. Restored
    on exit. Imports nothing beyond ``torch``."""
    import torch

    cls = torch._TorchCompileInductorWrapper
    stock = cls.__dict__["__call__"]

    @functools.wraps(stock)
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        before()
        return stock(self, *args, **kwargs)

    cls.__call__ = __call__
    try:
        yield
    finally:
        cls.__call__ = stock


def inductor_loaded() -> bool:
    """Whether Inductor is imported in this process already (so installing hooks costs ms)."""
    import sys

    return "torch._inductor.compile_fx" in sys.modules


def inductor_backend(mode: str | None, options: dict[str, Any] | None) -> Callable[..., Any]:
    """What ``torch.compile(backend="inductor", mode=..., options=...)`` compiles with: Inductor
    with that mode's and those options' config patches (raises RuntimeError, as torch.compile
    does, for an unknown option)."""
    import torch

    return torch._TorchCompileInductorWrapper(mode, options, None)


@contextlib.contextmanager
def compile_workers_in_processes() -> Iterator[None]:
    """Inductor's compile jobs go to ``AsyncCompile.process_pool`` (the farm's seam) while inside.

    torch 2.15 can compile in threads instead (``config.compile_worker_mode`` "thread", or "auto"
    on a free-threaded Python: ``AsyncCompile.get_worker_pool`` then hands jobs to its
    ``thread_pool``, past the farm), so the mode is pinned to "process" and restored on exit. A
    no-op on a torch without the setting (2.11, 2.13)."""
    config = inductor_config()
    if not hasattr(config, "compile_worker_mode"):
        yield
        return
    saved = config.compile_worker_mode
    config.compile_worker_mode = "process"
    try:
        yield
    finally:
        config.compile_worker_mode = saved


def max_autotune_on() -> bool:
    """Whether the compile running on this thread asked for max-autotune (its mode's or
    options' config patches are in force while Inductor compiles)."""
    config = inductor_config()
    return bool(config.max_autotune or config.max_autotune_gemm)


def decide_compile_threads() -> int:
    """The compile-thread count Inductor would choose on this machine."""
    return int(inductor_config().decide_compile_threads())


# --- Triton kernels ---------------------------------------------------------------------------


def worker_compile_triton(
    kernel_name: str, source: str, extra_env: dict[str, str], extra_config: dict[str, Any]
) -> tuple[Any, int]:
    """Inductor's own worker job: load the kernel module, precompile every config, return it."""
    from torch._inductor.codecache import _load_triton_kernel_from_source
    from torch._inductor.runtime.compile_tasks import _worker_compile_triton

    load = functools.partial(_load_triton_kernel_from_source, kernel_name, source)
    return _worker_compile_triton(load, extra_env, extra_config)


def triton_job_args(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[str, str, dict, dict] | None:
    """If ``fn(*args)`` is Inductor's Triton compile job, return (name, source, env, config)."""
    from torch._inductor.codecache import _load_triton_kernel_from_source
    from torch._inductor.runtime.compile_tasks import _worker_compile_triton

    if fn is not _worker_compile_triton or len(args) != 3:
        return None
    load_kernel, extra_env, extra_config = args
    if not (
        isinstance(load_kernel, functools.partial)
        and load_kernel.func is _load_triton_kernel_from_source
        and len(load_kernel.args) == 2
    ):
        return None
    name, source = load_kernel.args
    return name, source, dict(extra_env), dict(extra_config)


@contextlib.contextmanager
def gpu_driver_check_disabled() -> Iterator[None]:
    """Make ``triton_helpers.set_driver_to_gpu`` a no-op while cross-compiling on a CPU-only node.

    It raises "Could not find an active GPU backend" without a GPU, although the compile itself
    only needs the target, which the kernel's DeviceProperties carry (see kernels/triton_compile).
    """
    from torch._inductor.runtime import triton_helpers

    original = triton_helpers.set_driver_to_gpu
    triton_helpers.set_driver_to_gpu = lambda: None
    try:
        yield
    finally:
        triton_helpers.set_driver_to_gpu = original


def set_autotuner_device(kernel: Any, index: int) -> None:
    """Point a compiled CachingAutotuner at CUDA device ``index``.

    The cubins do not depend on the device index; the autotuner records it in ``triton_meta``,
    ``device_props`` and each compile result's ``compile_meta`` (it launches under a DeviceGuard
    of ``triton_meta['device']``). Rewriting those lets ranks on cuda:0 and cuda:1 share one
    cache entry (pytorch#170123). Checked on 2.11.0 and 2.13.0.
    """
    if kernel.triton_meta.get("device") == index:
        return
    kernel.triton_meta["device"] = index
    if getattr(kernel, "device_props", None) is not None:
        kernel.device_props = kernel.device_props._replace(index=index)
    for result in getattr(kernel, "compile_results", None) or []:
        meta = getattr(result, "compile_meta", None)
        if isinstance(meta, dict) and "device" in meta:
            meta["device"] = index


def triton_cache_group_dir(kernel: Any) -> list[str]:
    """Directories of Triton's cache holding the artifacts of each compiled config of ``kernel``."""
    from torch._inductor.runtime.runtime_utils import triton_hash_to_path_key

    base = os.environ.get("TRITON_CACHE_DIR")
    if not base:
        return []
    return [
        os.path.join(base, triton_hash_to_path_key(result.kernel.hash))
        for result in getattr(kernel, "compile_results", None) or []
    ]


def driver_triton_cache_dir(device_index: int) -> str:
    """Where this process's Triton writes and Inductor's TritonBundler reads (env first)."""
    from torch._inductor.runtime.runtime_utils import triton_cache_dir

    return os.environ.get("TRITON_CACHE_DIR") or triton_cache_dir(device_index)


def inductor_cache_dir() -> str:
    from torch._inductor.runtime.runtime_utils import cache_dir

    return cache_dir()


# --- C++ kernels ------------------------------------------------------------------------------


def cpp_job_parts(fn: Callable[..., Any]) -> tuple[str, list[Any]] | None:
    """If ``fn`` is Inductor's C++ build job (a partial of _worker_compile_cpp), return
    (lock_path, builders)."""
    from torch._inductor.codecache import _worker_compile_cpp

    if isinstance(fn, functools.partial) and fn.func is _worker_compile_cpp and len(fn.args) == 2:
        lock_path, builders = fn.args
        return lock_path, list(builders)
    return None


def builder_parts(builder: Any) -> tuple[str, str, list[str], str]:
    """(command line, target path, source paths, output dir) of a CppBuilder.

    ``_orig_source_paths`` is filled only in fbcode's relative-path mode (2.13.0), so the sources
    are otherwise read off the command line: a node without this one's files must be sent them."""
    import shlex

    command = builder.get_command_line()
    sources = list(builder._orig_source_paths)
    if not sources:
        sources = [t for t in shlex.split(command) if t.endswith((".cpp", ".cc", ".cxx", ".c"))]
    return command, builder.get_target_file_path(), sources, builder._output_dir


# The output module binds each C++ kernel to its name on one line (PythonWrapperCodegen
# ._format_kernel_definition of CppScheduling.define_kernel's ``async_compile.cpp_pybinding(...)``; the farm's
# codegen keeps that shape): ``cpp_fused_relu_0 = async_compile.cpp_pybinding(['float*'], r'''``.
# The name is nowhere else when the build job is made: the C++ source calls its entry ``kernel``
# and the library is named by a hash of the source. Checked on 2.13.0.
_CPP_DEFINITION = re.compile(r"\s*([A-Za-z_]\w*)\s*=\s*async_compile\.cpp(?:_pybinding)?\(")
# the first line of the Python bindings CppPythonBindingsCodeCache appends to a kernel's source
_CPP_BINDINGS = "// Python bindings to call"


def defining_cpp_kernel(max_depth: int = 40) -> str | None:
    """The name the output module is binding the C++ kernel being built to, read from the
    module-level line this call runs under (the module's file, as a traceback reads it); None when
    no such line is on the stack (a build Inductor starts elsewhere, a module without its source)."""
    frame = sys._getframe(1)
    for _ in range(max_depth):
        if frame is None:
            return None
        if frame.f_code.co_name == "<module>":
            m = _CPP_DEFINITION.match(linecache.getline(frame.f_code.co_filename, frame.f_lineno))
            if m:
                return m.group(1)
        frame = frame.f_back
    return None


def cpp_kernel_lines(source: str) -> int:
    """Lines of a C++ kernel source written for Inductor's Python bindings, without the bindings."""
    return len(source.split(_CPP_BINDINGS, 1)[0].strip().splitlines())


# --- Async compile hooks ----------------------------------------------------------------------


@contextlib.contextmanager
def inductor_ptxas() -> Iterator[str | None]:
    """This process's Triton uses the ptxas Inductor ships (``_set_triton_ptxas_path``: what each
    stock compile worker, and stock's own in-process compile, does first) inside the block;
    yields its path (None: Inductor ships none, or TRITON_PTXAS_PATH was set already).

    The farm's workers compile with that ptxas, and its version is part of Triton's cache key and
    of the farm's (``kernel_key``): a driver left on Triton's bundled ptxas would key kernels by a
    ptxas that did not build them, and miss in Triton's cache every cubin the farm published when
    it loads a kernel itself (a benchmark request). A no-op where torch ships no ptxas (the CPU
    wheel; torch 2.11+cu130 on the H200 machine). Triton caches the version it read, so that
    cache is cleared."""
    from torch._inductor.runtime.compile_tasks import _set_triton_ptxas_path

    before = os.environ.get("TRITON_PTXAS_PATH")
    _set_triton_ptxas_path()
    after = os.environ.get("TRITON_PTXAS_PATH")
    if after == before:
        yield None
        return
    _ptxas_version_changed()
    try:
        yield after
    finally:
        if os.environ.get("TRITON_PTXAS_PATH") == after:
            os.environ.pop("TRITON_PTXAS_PATH", None)
            _ptxas_version_changed()


def _ptxas_version_changed() -> None:
    from ..kernels.triton_compile import ptxas_version

    ptxas_version.cache_clear()
    try:
        from triton.backends.nvidia.compiler import get_ptxas_version
    except ImportError:  # a Triton without the NVIDIA backend: nothing cached
        return
    clear = getattr(get_ptxas_version, "cache_clear", None)
    if clear is not None:
        clear()


def async_compile_class() -> Any:
    from torch._inductor.async_compile import AsyncCompile

    return AsyncCompile


@contextlib.contextmanager
def remote_module_caches(make_backend: Callable[[str], Any]) -> Iterator[None]:
    """Turn on Inductor's remote FX-graph and AOTAutograd caches with ``make_backend(kind)`` as
    their storage (``RemoteCache.backend_override_cls``, Inductor's own hook for a custom backend).
    """
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_cfg
    from torch._inductor import remote_cache as rc

    saved = (rc.RemoteFxGraphCache.__dict__.get("backend_override_cls"),
             rc.RemoteAOTAutogradCache.__dict__.get("backend_override_cls"),
             inductor_cfg.fx_graph_remote_cache, functorch_config.enable_remote_autograd_cache)
    rc.RemoteFxGraphCache.backend_override_cls = lambda: make_backend("fx")
    rc.RemoteAOTAutogradCache.backend_override_cls = lambda: make_backend("aot")
    inductor_cfg.fx_graph_remote_cache = True
    functorch_config.enable_remote_autograd_cache = True
    try:
        yield
    finally:
        for cls, value in ((rc.RemoteFxGraphCache, saved[0]), (rc.RemoteAOTAutogradCache, saved[1])):
            if value is None:
                cls.backend_override_cls = None
            else:
                cls.backend_override_cls = value
        inductor_cfg.fx_graph_remote_cache = saved[2]
        functorch_config.enable_remote_autograd_cache = saved[3]


def remote_cache_backend_base() -> Any:
    from torch._inductor.remote_cache import RemoteCacheBackend

    return RemoteCacheBackend


def inductor_config() -> Any:
    from torch._inductor import config

    return config


def fresh_cache() -> contextlib.AbstractContextManager[Any]:
    """Inductor's context manager that gives a fresh, empty on-disk and in-memory cache."""
    from torch._inductor.utils import fresh_cache as fc

    return fc()


# --- The output module (wrapper/codegen.py, wrapper/runtime.py) ------------------------------
# Checked on 2.13.0; 2.11.0 to check on the GPU machine.

_ABSENT = object()


def wrapper_codegen_classes() -> tuple[type, type]:
    """(PythonWrapperCodegen, SubgraphPythonWrapperCodegen): the classes the farm's codegen extends."""
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen

    return PythonWrapperCodegen, SubgraphPythonWrapperCodegen


def replace_line(buffer: Any, old: str, new: str) -> None:
    """Replace the line reading ``old`` in an Inductor ``IndentedBuffer`` (keeping its indent).

    Raises SeamMissing when no line reads ``old``: the header Inductor writes has changed."""
    lines = buffer._lines
    for i, line in enumerate(lines):
        if isinstance(line, str) and line.strip() == old:
            lines[i] = line.replace(old, new)
            return
    raise SeamMissing(f"the output module header has no line {old!r} (PythonWrapperCodegen.write_header changed)")


def deferred_line(render: Callable[[], str]) -> Any:
    """A line of generated code rendered when the module's text is assembled, after every kernel
    is defined (Inductor's ``DelayReplaceLine``)."""
    from torch._inductor.utils import DelayReplaceLine

    marker = "<raycompile-deferred>"
    return DelayReplaceLine(marker, render, marker)


def wrapper_codegen_for(device: str) -> Any:
    """The wrapper codegen class Inductor uses for ``device`` now (after its lazy registration)."""
    from torch._inductor.codegen import common

    common.init_backend_registration()
    return common.get_wrapper_codegen_for_device(device)


@contextlib.contextmanager
def wrapper_codegen_registered(wrapper_cls: type, devices: tuple[str, ...]) -> Iterator[list[str]]:
    """Register ``wrapper_cls`` as the Python wrapper codegen of each device whose stock one is
    ``PythonWrapperCodegen`` (keeping its scheduling, C++/FX wrappers, custom pass and config);
    yield the devices replaced. On exit every table entry is restored exactly as it was.

    Inductor registers its backends lazily (``init_backend_registration``, skipping devices that
    already have one); it is called first, so ours replaces Inductor's entry instead of
    pre-empting it and leaving nothing to restore."""
    from torch._inductor.codegen import common
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    common.init_backend_registration()
    tables = (common.device_codegens, common.custom_backend_passes, common.custom_backend_codegen_configs)
    saved = {d: [t.get(d, _ABSENT) for t in tables] for d in devices}
    replaced = []
    try:
        for d in devices:
            stock = common.device_codegens.get(d)
            if stock is None or stock.wrapper_codegen is not PythonWrapperCodegen:
                continue  # someone else's wrapper: leave it alone
            common.register_backend_for_device(
                d, stock.scheduling, wrapper_cls, stock.cpp_wrapper_codegen, stock.fx_wrapper_codegen,
                common.custom_backend_passes.get(d), common.custom_backend_codegen_configs.get(d))
            replaced.append(d)
        yield replaced
    finally:
        for d, values in saved.items():
            for table, value in zip(tables, values):
                if value is _ABSENT:
                    table.pop(d, None)
                else:
                    table[d] = value


@contextlib.contextmanager
def cache_key_tag(tag: str) -> Iterator[str]:
    """Add ``tag`` to ``torch.compiler.config.cache_key_tag`` (which enters the FX-graph and
    AOTAutograd keys through ``FxGraphHashDetails.cache_key_tag``, and the autotune keys), so
    modules made by the farm's codegen and stock ones never share an entry; restored on exit."""
    from torch.compiler import config as cconfig

    saved = cconfig.cache_key_tag
    cconfig.cache_key_tag = f"{saved}+{tag}" if saved else tag
    try:
        yield cconfig.cache_key_tag
    finally:
        cconfig.cache_key_tag = saved


def fx_graph_key(gm: Any, example_inputs: list[Any]) -> str:
    """Inductor's FX-graph cache key of ``gm`` (no compile kwargs): a test seam for the tag."""
    from torch._inductor.codecache import compiled_fx_graph_hash

    return compiled_fx_graph_hash(gm, example_inputs, {}, [])[0]


def triton_extra_config(source: str) -> dict[str, Any]:
    """The ``extra_config`` that ``AsyncCompile.triton`` sends with ``source``'s compile job, so
    a key made at codegen equals the Router's key for the job (async_compile.py, 2.13.0)."""
    from torch._inductor import config

    extra: dict[str, Any] = {"use_static_triton_launcher": config.use_static_triton_launcher}
    table = getattr(config, "autotune_lookup_table", None)
    if table and "@triton.jit\n" in source:
        from torch._inductor.async_compile import size_hints_regex
        from torch._inductor.runtime.triton_heuristics import generate_lookup_hash_from_source_code

        m = size_hints_regex.search(source)
        fn_hash = generate_lookup_hash_from_source_code(m.group(1) if m else str(None),
                                                        source.split("@triton.jit\n")[1])
        if fn_hash in table:
            extra["autotune_lookup_table"] = {fn_hash: table[fn_hash]}
    return extra


def cpp_compiler() -> str:
    from torch._inductor.cpp_builder import get_cpp_compiler

    return get_cpp_compiler()


def wait_timeout_s() -> float | None:
    """Inductor's limit on one compile future (``compile_worker_wait_timeout``; 0 or absent: none)."""
    return getattr(inductor_config(), "compile_worker_wait_timeout", 0) or None


def is_future(obj: Any) -> bool:
    """Whether ``obj`` is a compile in flight: a ``Future`` or one of Inductor's ``CodeCacheFuture``s."""
    from concurrent.futures import Future

    from torch._inductor.codecache import CodeCacheFuture

    return isinstance(obj, (Future, CodeCacheFuture))


def future_done(obj: Any) -> bool:
    """Whether a compile future has its result (a ``LambdaFuture`` wraps the pool's future)."""
    inner = getattr(obj, "future", obj)
    done = getattr(inner, "done", None)
    return bool(done()) if callable(done) else True


def is_caching_autotuner(obj: Any) -> bool:
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    return isinstance(obj, CachingAutotuner)


def _config_matches(cfg: Any, winner: Any) -> bool:
    return (all(winner.get(k) == v for k, v in cfg.kwargs.items())
            and winner.get("num_warps") == cfg.num_warps and winner.get("num_stages") == cfg.num_stages)


def config_dict(cfg: Any) -> dict[str, Any]:
    """A Triton ``Config`` as the dict Inductor's ``.best_config`` files hold (kwargs, warps, stages)."""
    return {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}


def inductor_best_config(kernel: Any) -> dict[str, Any] | None:
    """The winner Inductor's autotune cache knows for ``kernel`` (its ``.best_config``, or the
    remote autotune cache), read through the kernel's own ``AutotuneCache``; None if none."""
    cache = getattr(getattr(kernel, "save_cache_hook", None), "__self__", None)
    configs = [r.config for r in getattr(kernel, "compile_results", None) or []] or list(kernel.configs or [])
    if cache is None or not hasattr(cache, "read_best") or not configs:
        return None
    best = cache.read_best(kernel.inductor_meta, configs)
    return config_dict(best) if best is not None else None


def restrict_autotuner(kernel: Any, winner: Any) -> bool:
    """Leave ``kernel`` (a precompiled CachingAutotuner) with only the launcher of ``winner``, as
    ``autotune_to_one_config`` would after benchmarking, so its first run benchmarks nothing.
    False (and ``kernel`` untouched) when it has one launcher or none matches ``winner``."""
    launchers = list(getattr(kernel, "launchers", None) or [])
    match = [launcher for launcher in launchers if _config_matches(launcher.config, winner)]
    if len(launchers) <= 1 or len(match) != 1:
        return False
    (best,) = match
    release = getattr(kernel, "_release_static_launchers_except", None)
    if release is not None:
        release(best)
    kernel.launchers = [best]
    results = [r for r in kernel.compile_results if _config_matches(r.config, winner)]
    if results:
        kernel.compile_results = results[:1]
    if winner.get("found_by_coordesc"):
        best.config.found_by_coordesc = True
    return True


def loaded_output_modules() -> list[Any]:
    """The output modules Inductor has loaded in this process that carry a raycompile manifest."""
    from torch._inductor.codecache import PyCodeCache

    return [m for m in list(PyCodeCache.modules) if hasattr(m, "_raycompile_manifest")]
