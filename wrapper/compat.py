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
import os
from collections.abc import Callable, Iterator
from typing import Any

# name -> (module, attribute path). Checked on 2.11.0 and 2.13.0.
SEAMS: dict[str, tuple[str, str]] = {
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
}


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
    """(command line, target path, source paths, output dir) of a CppBuilder."""
    return (
        builder.get_command_line(),
        builder.get_target_file_path(),
        list(builder._orig_source_paths),
        builder._output_dir,
    )


# --- Async compile hooks ----------------------------------------------------------------------


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
