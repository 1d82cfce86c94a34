"""Seam family "cpp": Inductor's C++ kernel builds (the build job Inductor submits, its
``CppBuilder``s, the compiler) and the output module's line that names a C++ kernel. Checked on
torch 2.11.0 and 2.13.0."""

from __future__ import annotations

import functools
import inspect
import linecache
import re
import shlex
import sys
from collections.abc import Callable
from typing import Any

from ._base import Seams

CHECKED_ON = ("2.11.0", "2.13.0", "2.15.0")

SEAMS: Seams = {
    "AsyncCompile.cpp": ("torch._inductor.async_compile", "AsyncCompile.cpp"),
    "AsyncCompile.cpp_pybinding": ("torch._inductor.async_compile", "AsyncCompile.cpp_pybinding"),
    "CppCodeCache.load_async": ("torch._inductor.codecache", "CppCodeCache.load_async"),
    "CppPythonBindingsCodeCache.load_pybinding_async": (
        "torch._inductor.codecache", "CppPythonBindingsCodeCache.load_pybinding_async"),
    "_worker_compile_cpp": ("torch._inductor.codecache", "_worker_compile_cpp"),
    "CppBuilder.get_command_line": ("torch._inductor.cpp_builder", "CppBuilder.get_command_line"),
    "CppBuilder.get_target_file_path": ("torch._inductor.cpp_builder", "CppBuilder.get_target_file_path"),
    "CppBuilder._orig_source_paths": ("torch._inductor.cpp_builder", "CppBuilder.__init__"),
    "CppBuilder._output_dir": ("torch._inductor.cpp_builder", "CppBuilder.__init__"),
    "get_cpp_compiler": ("torch._inductor.cpp_builder", "get_cpp_compiler"),
    # what AsyncCompile.cpp_pybinding returns with a pool; read by built_on_disk
    "LambdaFuture.result_fn": ("torch._inductor.codecache", "LambdaFuture.__init__"),
}


def cpp_job_parts(fn: Callable[..., Any]) -> tuple[str, list[Any]] | None:
    """If ``fn`` is Inductor's C++ build job (a partial of _worker_compile_cpp), return
    (lock_path, builders)."""
    from torch._inductor.codecache import _worker_compile_cpp

    if isinstance(fn, functools.partial) and fn.func is _worker_compile_cpp and len(fn.args) == 2:
        lock_path, builders = fn.args
        return lock_path, list(builders)
    return None


def built_on_disk(loaded: Any) -> Callable[..., Any] | None:
    """The C++ build job of a kernel that ``AsyncCompile.cpp_pybinding`` returned as ``loaded`` (a
    ``LambdaFuture``) without submitting it, because the library was built in Inductor's cache dir
    already (``CppCodeCache.load_async`` submits only where the binary is missing; its ``load_fn``
    keeps the job as ``worker_fn`` beside a ``future`` left None); None where it was submitted,
    loaded synchronously (one compile thread), or the closures are not the ones of the versions
    checked. Read from the closures of ``load_pybinding_async``'s ``future`` (``get_result``) and
    of ``load_async``'s ``load_fn``, on 2.11 and 2.13 alike."""
    try:
        outer = inspect.getclosurevars(getattr(loaded, "result_fn", None)).nonlocals
        inner = inspect.getclosurevars(outer.get("get_result")).nonlocals
    except Exception:  # noqa: BLE001 - not a function, an empty cell: another shape of future
        return None
    if "future" not in inner or inner["future"] is not None:
        return None
    worker = inner.get("worker_fn")
    return worker if cpp_job_parts(worker) is not None else None


def when_loaded_from_disk(loaded: Any, then: Callable[[Callable[..., Any]], object]) -> bool:
    """Where ``loaded`` (``AsyncCompile.cpp_pybinding``'s result) is a kernel Inductor found built
    in its cache dir (``built_on_disk``), call ``then(its build job)`` once, after the library
    loaded here (``LambdaFuture.result_fn`` returned: a truncated file, which Inductor's in-place
    build can leave, fails there and is never handed on). Whether it will."""
    task = built_on_disk(loaded)
    if task is None:
        return False
    original, told = loaded.result_fn, []

    def result_fn() -> Any:
        out = original()
        if not told:
            told.append(True)
            then(task)
        return out

    loaded.result_fn = result_fn
    return True


def builder_parts(builder: Any) -> tuple[str, str, list[str], str]:
    """(command line, target path, source paths, output dir) of a CppBuilder.

    ``_orig_source_paths`` is filled only in fbcode's relative-path mode (2.13.0), so the sources
    are otherwise read off the command line: a node without this one's files must be sent them."""
    command = builder.get_command_line()
    sources = list(builder._orig_source_paths)
    if not sources:
        sources = [t for t in shlex.split(command) if t.endswith((".cpp", ".cc", ".cxx", ".c"))]
    return command, builder.get_target_file_path(), sources, builder._output_dir


def cpp_compiler() -> str:
    from torch._inductor.cpp_builder import get_cpp_compiler

    return get_cpp_compiler()


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
