"""Seam family "codegen": the output module (wrapper/codegen.py writes it, wrapper/runtime.py is
what it imports): Inductor's Python wrapper codegen and its registration per device, the lines of
its header, and the futures its kernels are defined as. Checked on torch 2.11.0, 2.13.0 and 2.15.0."""

from __future__ import annotations

import contextlib
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
}

# The lines of the module header the farm's codegen replaces (PythonWrapperCodegen.write_header)
STOCK_IMPORT = "from torch._inductor.async_compile import AsyncCompile"
STOCK_INSTANCE = "async_compile = AsyncCompile()"

_ABSENT = object()


def wrapper_codegen_classes() -> tuple[type, type]:
    """(PythonWrapperCodegen, SubgraphPythonWrapperCodegen): the classes the farm's codegen extends."""
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen

    return PythonWrapperCodegen, SubgraphPythonWrapperCodegen


def replace_line(buffer: Any, old: str, new: str, required: bool = True) -> None:
    """Replace the line reading ``old`` in an Inductor ``IndentedBuffer`` (keeping its indent).

    Raises SeamMissing when no line reads ``old`` and it is ``required``: the header Inductor
    writes has changed."""
    lines = buffer._lines
    for i, line in enumerate(lines):
        if isinstance(line, str) and line.strip() == old:
            lines[i] = line.replace(old, new)
            return
    if required:
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
