"""Finding Inductor-generated Triton kernel sources on disk (a TORCHINDUCTOR_CACHE_DIR, a debug
dir) and reading their name (``raycompile compile-kernels``). What makes a file an Inductor kernel,
and its kernel's name, is read by the adapter (``compat.triton``)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import KernelSourceError
from .compat.triton import is_inductor_kernel, jit_function_name


@dataclass(frozen=True)
class KernelSource:
    path: str
    name: str
    source: str


def read_kernel(path: str) -> KernelSource:
    """Read one kernel module; raise KernelSourceError if it is not an Inductor Triton kernel."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise KernelSourceError(path, f"cannot read it ({e})") from None
    if not is_inductor_kernel(text):
        raise KernelSourceError(path, "not an Inductor Triton kernel (no @triton_heuristics / "
                                      "triton_meta / @triton.jit)")
    name = jit_function_name(text)
    if name is None:
        raise KernelSourceError(path, "no `@triton.jit def NAME(` in it")
    return KernelSource(path, name, text)


def find_kernels(paths: list[str]) -> list[KernelSource]:
    """Every Inductor Triton kernel module under ``paths``. A file named directly must be one;
    files found by walking a directory that are not kernels (wrappers, C++) are skipped."""
    found: list[KernelSource] = []
    for path in paths:
        if os.path.isdir(path):
            for root, _dirs, files in os.walk(path):
                for name in sorted(files):
                    if not name.endswith(".py"):
                        continue
                    full = os.path.join(root, name)
                    try:
                        found.append(read_kernel(full))
                    except KernelSourceError:
                        continue
        elif os.path.exists(path):
            found.append(read_kernel(path))
        else:
            raise KernelSourceError(path, "no such file or directory")
    return found
