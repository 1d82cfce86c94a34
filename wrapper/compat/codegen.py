"""Seam family "codegen": the output module (wrapper/codegen.py writes it, wrapper/runtime.py is
what it imports): Inductor's Python wrapper codegen and its registration per device, the lines of
its header, and the futures its kernels are defined as. Checked on torch 2.11.0, 2.13.0 and 2.15.0."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from ._base import SeamMissing, Seams

CHECKED_ON = ("2.11.0", "2.13.0", "2.15.0")

SEAMS: Seams = {
    "PythonWrapperCodegen": ("torch._inductor.codegen.wrapper", "PythonWrapperCodegen"),
    "PythonWrapperCodegen.create": ("torch._inductor.codegen.wrapper", "PythonWrapperCodegen.create"),
    "PythonWrapperCodegen.write_header": ("torch._inductor.codegen.wrapper", "PythonWrapperCodegen.write_header"),
    "PythonWrapperCodegen.write_kernel_autotune_defs_header": (
        "torch._inductor.codegen.wrapper", "PythonWrapperCodegen.write_kernel_autotune_defs_header"),
    "PythonWrapperCodegen.write_async_compile_wait": (
        "torch._inductor.codegen.wrapper", "PythonWrapperCodegen.write_async_compile_wait"),
    "PythonWrapperCodegen.define_kernel": ("torch._inductor.codegen.wrapper", "PythonWrapperCodegen.define_kernel"),
    # the buffers the farm's codegen writes into (self.imports, .header, .prefix, .kernel_autotune_defs),
    # made in __init__; a subgraph's wrapper reaches its root by get_root_graph where it has one
    "PythonWrapperCodegen buffers (imports, header, prefix, kernel_autotune_defs)": (
        "torch._inductor.codegen.wrapper", "PythonWrapperCodegen.__init__"),
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
    "CodeCacheFuture": ("torch._inductor.codecache", "CodeCacheFuture"),
    "LambdaFuture.future": ("torch._inductor.codecache", "LambdaFuture.__init__"),
    "PyCodeCache.modules": ("torch._inductor.codecache", "PyCodeCache.modules"),
    "config (compile_worker_wait_timeout, read with getattr)": ("torch._inductor", "config"),
    # the header's two imports that bring in Inductor's codegen, scheduler and lowerings, and the
    # light equivalents the farm's codegen writes instead (``LIGHT_LINES``); these three checked on
    # 2.11.0 and 2.13.0 only (stop 59: no 2.15 wheel installable on the dev box then)
    "memory_planning._align (the header's align)": ("torch._inductor.codegen.memory_planning", "_align"),
    "utils._align": ("torch._inductor.utils", "_align"),
    "select_algorithm.extern_kernels": ("torch._inductor.select_algorithm", "extern_kernels"),
}

# The lines of the module header the farm's codegen replaces (PythonWrapperCodegen.write_header)
STOCK_IMPORT = "from torch._inductor.async_compile import AsyncCompile"
STOCK_INSTANCE = "async_compile = AsyncCompile()"

# Two more header lines, written lighter by the farm's codegen: each stock import brings in
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
        if imported is not None and not getattr(getattr(imported, "__spec__", None), "_initializing", False):
            attr = None  # Inductor's namespace is there: its own object, whatever torch.NAME is now
        if attr is not None:
            import torch

            value = getattr(torch, attr)
        else:
            from torch._inductor.select_algorithm import extern_kernels

            value = getattr(extern_kernels, name)
        self.__dict__[name] = value
        return value


_ABSENT = object()


def wrapper_codegen_classes() -> tuple[type, type]:
    """(PythonWrapperCodegen, SubgraphPythonWrapperCodegen): the classes the farm's codegen extends."""
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen

    return PythonWrapperCodegen, SubgraphPythonWrapperCodegen


def replace_line(buffer: Any, old: str, new: str, required: bool = True) -> bool:
    """Replace the line reading ``old`` in an Inductor ``IndentedBuffer`` (keeping its indent);
    whether one was replaced.

    Raises SeamMissing when no line reads ``old`` and it is ``required``: the header Inductor
    writes has changed."""
    lines = buffer._lines
    for i, line in enumerate(lines):
        if isinstance(line, str) and line.strip() == old:
            lines[i] = line.replace(old, new)
            return True
    if required:
        raise SeamMissing(f"the output module header has no line {old!r} (PythonWrapperCodegen.write_header changed)")
    return False


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


def wait_timeout_s() -> float | None:
    """Inductor's limit on one compile future (``compile_worker_wait_timeout``; 0 or absent: none)."""
    from torch._inductor import config

    return getattr(config, "compile_worker_wait_timeout", 0) or None


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


def loaded_output_modules() -> list[Any]:
    """The output modules Inductor has loaded in this process that carry a raycompile manifest."""
    from torch._inductor.codecache import PyCodeCache

    return [m for m in list(PyCodeCache.modules) if hasattr(m, "_raycompile_manifest")]
