"""Seam family "light": a warm process that loads compiled frames imports none of Inductor's
compile modules (``compile_fx``, the graph lowering, the lowerings, the scheduler,
``select_algorithm``, the wrapper codegen, ``debug``: about a second of a warm start on the dev
box). What a loaded entry needs of them is given here without the import, and every other use
gets the real module:

- the output module's header lines that import ``align`` and ``extern_kernels``, written lighter
  by the farm's codegen (``LIGHT_LINES``, ``ExternKernels``);
- a cache hit's test-hook read and a compiled graph's reads of the debug module's switches, while
  those modules are not imported, and a cache hit's hash of Triton's sources where nothing reads
  it (``light_loads``, entered by ``dynamo.frames_stored``);
- the operators stock's import of compile_fx registers (``OPS_REGISTERED_BY_COMPILE_FX``).

Checked on torch 2.11.0 and 2.13.0 (no 2.15 wheel could be installed on the dev box when it was
written)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

from ._base import Seams

CHECKED_ON = ("2.11.0", "2.13.0")

SEAMS: Seams = {
    # the header's two imports that bring in Inductor's codegen, scheduler and lowerings, and the
    # light equivalents the farm's codegen writes instead (``LIGHT_LINES``)
    "memory_planning._align (the header's align)": ("torch._inductor.codegen.memory_planning", "_align"),
    "utils._align": ("torch._inductor.utils", "_align"),
    "select_algorithm.extern_kernels": ("torch._inductor.select_algorithm", "extern_kernels"),
    # what a loaded entry's install and calls read of modules not imported (``light_loads``)
    "codecache.FxGraphCache.cache_hit_post_compile": (
        "torch._inductor.codecache", "FxGraphCache.cache_hit_post_compile"),
    "graph.GraphLowering.save_output_code": ("torch._inductor.graph", "GraphLowering.save_output_code"),
    "debug.RECORD_GRAPH_EXECUTION": ("torch._inductor.debug", "RECORD_GRAPH_EXECUTION"),
    "debug.GRAPH_EXECUTION_ORDER": ("torch._inductor.debug", "GRAPH_EXECUTION_ORDER"),
    "debug.GRAPH_COMPILE_IDS": ("torch._inductor.debug", "GRAPH_COMPILE_IDS"),
    "output_code.CompiledFxGraph.__call__": ("torch._inductor.output_code", "CompiledFxGraph.__call__"),
    "package.CompilePackage.install (wrapped)": ("torch._dynamo.package", "CompilePackage.install"),
    # a cache hit's post-compile hashes Triton's sources for the bundled remote autotune cache's key
    # (``light_loads``: not where that cache is off)
    "autotune_cache.inductor_meta_from_config": (
        "torch._inductor.runtime.autotune_cache", "inductor_meta_from_config"),
    "autotune_cache.has_triton": ("torch._inductor.runtime.autotune_cache", "has_triton"),
    "autotune_cache._AutotuneCacheBundlerImpl._should_use_bundled_autotune_remote_cache": (
        "torch._inductor.runtime.autotune_cache",
        "_AutotuneCacheBundlerImpl._should_use_bundled_autotune_remote_cache"),
    "autotune_cache.AutotuneCacheBundler.begin_compile": (
        "torch._inductor.runtime.autotune_cache", "AutotuneCacheBundler.begin_compile"),
}

# Modules that register operators (``torch.ops.quantized_decomposed.*``, Inductor's prims) which
# stock's ``torch.compile`` registers by importing compile_fx: a function that calls one without
# importing it works in stock, and must with compiled frames too (cheap: about 0.06 s on the dev box)
OPS_REGISTERED_BY_COMPILE_FX = ("torch.ao.quantization.fx._decomposed", "torch._inductor.inductor_prims")


def register_compile_fx_ops() -> None:
    """Import ``OPS_REGISTERED_BY_COMPILE_FX`` (where stock's ``torch.compile`` imports compile_fx)."""
    for module in OPS_REGISTERED_BY_COMPILE_FX:
        importlib.import_module(module)


# Two lines of Inductor's output module header, written lighter by the farm's codegen (next to
# its own runtime's, ``codegen.STOCK_IMPORT``): each stock import brings in
# Inductor's codegen, scheduler and lowerings (1.0 s of a warm process on the dev box), which an
# output module loaded from compiled frames never uses. ``align`` is the same function from the
# module memory_planning takes it from; ``extern_kernels`` is ``ExternKernels`` (below). A header
# without one of these lines keeps its own (``replace_line(..., required=False)``).
LIGHT_LINES = (
    ("from torch._inductor.codegen.memory_planning import _align as align",
     "from torch._inductor.utils import _align as align"),
    ("from torch._inductor.select_algorithm import extern_kernels",
     "from raycompile.wrapper.runtime import extern_kernels"),
)

# Names of Inductor's ``extern_kernels`` bound to one of torch's own functions (``torch.NAME``), as
# its ``ExternKernelChoice``s register them (kernel/mm.py, bmm.py, conv.py, mm_grouped.py);
# ``tests/unit/test_compat.py`` checks each against the registered object.
EXTERN_TORCH_FUNCTIONS = {
    "mm": "mm", "mm_dtype": "mm", "addmm": "addmm", "bmm": "bmm", "bmm_dtype": "bmm", "baddbmm": "baddbmm",
    "convolution": "convolution", "_int_mm": "_int_mm", "_scaled_mm": "_scaled_mm",
    "_grouped_mm": "_grouped_mm", "_scaled_grouped_mm": "_scaled_grouped_mm",
    "_sparse_semi_structured_mm": "_sparse_semi_structured_mm", "_weight_int8pack_mm": "_weight_int8pack_mm",
}


class ExternKernels:
    """What the farm's output modules import as ``extern_kernels``: Inductor's namespace of the
    ATen kernels that max-autotune's choices call (``select_algorithm.extern_kernels``), without
    importing select_algorithm (which imports the lowerings to fill it). A name bound to one of
    torch's own functions resolves to that function; any other name to Inductor's namespace,
    imported then: the same objects, so the module calls what stock's calls."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        attr = EXTERN_TORCH_FUNCTIONS.get(name)
        imported = sys.modules.get("torch._inductor.select_algorithm")
        if imported is not None and not _initializing(imported):
            attr = None  # Inductor's namespace is there: its own object, whatever torch.NAME is now
        if attr is not None:
            import torch

            value = getattr(torch, attr)
        else:
            from torch._inductor.select_algorithm import extern_kernels

            value = getattr(extern_kernels, name)
        self.__dict__[name] = value
        return value


# -- a loaded entry's install and calls -------------------------------------------------------------
#
# Loading an entry's compiled graphs and calling them needs none of Inductor's compile modules (the
# farm's output modules import none: ``LIGHT_LINES``), but torch reaches two of them on the
# way, each for a value that no one can have changed unless they imported that module:
# - a cache hit's post-compile (``FxGraphCache.cache_hit_post_compile``) imports the graph lowering
#   module to read a test hook, ``GraphLowering.save_output_code``, which is None until set;
# - every compiled graph's call (``CompiledFxGraph.__call__``) reads ``torch._inductor.debug``'s
#   graph-execution recording switches, off until set; stock's warm process has that module
#   because it imported compile_fx.
# Importing them brings in the lowerings, scheduler and codegen: about a second of a warm process
# (the dev box) that Inductor would spend before its first output. ``light_loads`` gives those two
# readers their values without the import; any other use of either module gets the real one.

# A cache hit's post-compile also asks ``autotune_cache.inductor_meta_from_config()`` for the meta
# of the bundled remote autotune cache (``AutotuneCacheBundler.begin_compile``), and that hashes
# Triton's sources and its library for ``backend_hash`` (``triton_key``: 0.29 s of a Mixtral-style
# warm start's main thread on an H200, stop 59). ``begin_compile`` reads the hash only where that
# cache is on (never unless configured, outside fbcode); from a session's first install to its end,
# ``light_loads`` hands a cache hit its meta without the hash (None, as where Triton is absent)
# where that cache is off, and computes it as stock where it is on. Every other caller gets stock's
# function.
_NO_TRITON_HASH = threading.local()


def _bundled_autotune_cache_on(meta: dict[str, Any]) -> bool:
    try:
        from torch._inductor.runtime.autotune_cache import _AutotuneCacheBundlerImpl

        return bool(_AutotuneCacheBundlerImpl._should_use_bundled_autotune_remote_cache(meta))
    except Exception:  # noqa: BLE001 - a seam moved, say: the hash is computed, as stock
        return True


@contextlib.contextmanager
def _cache_hit_meta_without_triton_hash() -> Iterator[None]:
    from torch._inductor.runtime import autotune_cache

    stock_meta = autotune_cache.__dict__["inductor_meta_from_config"]
    stock_has_triton = autotune_cache.__dict__["has_triton"]

    def has_triton() -> bool:
        return False if getattr(_NO_TRITON_HASH, "on", False) else stock_has_triton()

    @functools.wraps(stock_meta)
    def inductor_meta_from_config() -> Any:
        if sys._getframe(1).f_code is not _cache_hit_code():
            return stock_meta()
        _NO_TRITON_HASH.on = True
        try:
            meta = stock_meta()
        finally:
            _NO_TRITON_HASH.on = False
        return stock_meta() if _bundled_autotune_cache_on(meta) else meta

    autotune_cache.has_triton = has_triton
    autotune_cache.inductor_meta_from_config = inductor_meta_from_config
    try:
        yield
    finally:
        autotune_cache.inductor_meta_from_config = stock_meta
        autotune_cache.has_triton = stock_has_triton


_GRAPH_MODULE = "torch._inductor.graph"
_DEBUG_MODULE = "torch._inductor.debug"
# debug.py's recording switches as that module sets them
_DEBUG_DEFAULTS = {"RECORD_GRAPH_EXECUTION": False, "GRAPH_EXECUTION_ORDER": None, "GRAPH_COMPILE_IDS": None}
_modules_lock = threading.Lock()


class _SaveOutputCodeUnset:
    """What a cache hit's post-compile gets for ``GraphLowering`` while the graph module is not
    imported: its test hook, unset."""

    save_output_code = None


def _initializing(module: Any) -> bool:
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


class _GraphModuleDeferred(types.ModuleType):
    """``torch._inductor.graph`` in ``sys.modules`` while an entry installs, in a process that has
    not imported it: the cache hit's post-compile reads ``GraphLowering.save_output_code`` as None;
    any other use of it, on any thread (a read, a write, ``from ... import``), imports the real
    module and goes to it."""

    def __getattr__(self, name: str) -> Any:
        if name == "GraphLowering" and sys._getframe(1).f_code is _cache_hit_code():
            return _SaveOutputCodeUnset
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(_real_module(_GRAPH_MODULE, self), name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("__"):
            super().__setattr__(name, value)
        else:
            setattr(_real_module(_GRAPH_MODULE, self), name, value)


class _DebugSwitches:
    """What ``CompiledFxGraph.__call__`` gets for ``torch._inductor.debug`` while that module is
    not imported (or another thread is importing it): its recording switches, read from the module
    where it has set them, else as it sets them. Handed to that method alone."""

    def __getattr__(self, name: str) -> Any:
        real = sys.modules.get(_DEBUG_MODULE)
        if name in _DEBUG_DEFAULTS:
            return getattr(real, name, _DEBUG_DEFAULTS[name]) if real is not None else _DEBUG_DEFAULTS[name]
        return getattr(importlib.import_module(_DEBUG_MODULE), name)


_DEBUG_SWITCHES = _DebugSwitches()


@functools.cache
def _cache_hit_code() -> Any:
    from torch._inductor.codecache import FxGraphCache

    return FxGraphCache.cache_hit_post_compile.__code__


@functools.cache
def _graph_call_code() -> Any:
    from torch._inductor.output_code import CompiledFxGraph

    return CompiledFxGraph.__call__.__code__


def _real_module(name: str, deferred: types.ModuleType) -> Any:
    """The real module ``name``, imported (outside any lock of ours) once ``deferred`` is out of
    ``sys.modules``."""
    with _modules_lock:
        if sys.modules.get(name) is deferred:
            del sys.modules[name]
    return importlib.import_module(name)


@contextlib.contextmanager
def _graph_module_deferred() -> Iterator[None]:
    placed = None
    if _GRAPH_MODULE not in sys.modules:
        stand_in = _GraphModuleDeferred(_GRAPH_MODULE)
        stand_in.__spec__ = importlib.util.find_spec(_GRAPH_MODULE)
        with _modules_lock:
            if _GRAPH_MODULE not in sys.modules:
                placed = sys.modules[_GRAPH_MODULE] = stand_in
    try:
        yield
    finally:
        with _modules_lock:
            if placed is not None and sys.modules.get(_GRAPH_MODULE) is placed:
                del sys.modules[_GRAPH_MODULE]


@contextlib.contextmanager
def light_loads() -> Iterator[None]:
    """While inside: every ``CompilePackage.install`` (an entry's frames and their compiled graphs,
    loaded) runs with ``_GraphModuleDeferred`` standing in for the graph module where it is not
    imported; and the package's ``__getattr__`` answers ``torch._inductor.debug`` for a compiled
    graph's call with ``_DebugSwitches`` until the module is imported (anyone else gets the real
    module, imported then), and ``torch._inductor.graph`` with the real module where a lookup finds
    the stand-in. From the first install to the exit, a cache hit's autotune meta (any cache hit's,
    on any thread) lacks Triton's hash where nothing reads it (``_cache_hit_meta_without_triton_hash``).
    On exit all are taken back; where
    an entry was installed, the real debug module is imported first, since the graphs loaded go on
    reading it after the session."""
    import torch._inductor as inductor
    from torch._dynamo.package import CompilePackage

    stock_install = CompilePackage.__dict__["install"]
    stock_getattr = inductor.__dict__.get("__getattr__")
    loaded = threading.Event()  # an entry installed: its graphs read debug's switches at every call
    exits = contextlib.ExitStack()  # the cache hit's meta, entered at the first install
    exits_lock = threading.Lock()
    closed = False  # set at exit: an install that comes later (a thread that held the wrapper) patches nothing

    @functools.wraps(stock_install)
    def install(self: Any, *args: Any, **kwargs: Any) -> Any:
        with exits_lock:
            if not loaded.is_set() and not closed:
                exits.enter_context(_cache_hit_meta_without_triton_hash())
            loaded.set()
        with _graph_module_deferred():
            return stock_install(self, *args, **kwargs)

    def __getattr__(name: str) -> Any:
        if name == "debug":
            real = sys.modules.get(_DEBUG_MODULE)
            if real is not None and not _initializing(real):
                return real  # imported, the package's attribute not set yet
            if sys._getframe(1).f_code is _graph_call_code():
                return _DEBUG_SWITCHES
            return importlib.import_module(_DEBUG_MODULE)
        deferred = sys.modules.get(_GRAPH_MODULE)
        if name == "graph" and isinstance(deferred, _GraphModuleDeferred):
            return _real_module(_GRAPH_MODULE, deferred)
        if stock_getattr is not None:
            return stock_getattr(name)
        raise AttributeError(f"module 'torch._inductor' has no attribute {name!r}")

    CompilePackage.install = install
    inductor.__getattr__ = __getattr__
    try:
        yield
    finally:
        CompilePackage.install = stock_install
        with exits_lock:
            closed = True
            exits.close()
        if loaded.is_set():
            importlib.import_module(_DEBUG_MODULE)
        if stock_getattr is None:
            inductor.__dict__.pop("__getattr__", None)
        else:
            inductor.__getattr__ = stock_getattr
