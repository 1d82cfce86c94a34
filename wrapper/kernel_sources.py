"""Finding Inductor-generated Triton kernel sources on disk (a TORCHINDUCTOR_CACHE_DIR, a debug
dir) and reading their name (``raycompile compile-kernels``). What makes a file an Inductor kernel,
or an output module (``call()`` and the wait on its kernels, which holds kernel sources inline
but is none), and a kernel's name, is read by the adapter (``compat.triton``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import KernelSourceError
from .compat.triton import is_inductor_kernel, is_output_module, jit_function_name


@dataclass(frozen=True)
class KernelSource:
    path: str
    name: str
    source: str


@dataclass
class Scan:
    """What ``scan`` found: the kernels, and the paths it skipped, by why."""

    kernels: list[KernelSource] = field(default_factory=list)
    output_modules: list[str] = field(default_factory=list)  # Inductor output modules: no kernels
    others: list[str] = field(default_factory=list)  # .py files under a directory that are no kernel

    def skipped(self) -> str:
        """What was skipped, for people ("" when nothing was)."""
        parts = []
        if self.output_modules:
            n = len(self.output_modules)
            parts.append(f"{n} Inductor output module{'s' * (n != 1)} (each holds call() and the wait on its "
                         "kernels, which are compiled from their own files)")
        if self.others:
            n = len(self.others)
            parts.append(f"{n} .py file{'s' * (n != 1)} that {'are' if n != 1 else 'is'} no Inductor Triton kernel")
        return f"skipped {' and '.join(parts)}" if parts else ""


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise KernelSourceError(path, f"cannot read it ({e})") from None


def _kernel(path: str, text: str) -> KernelSource:
    if is_output_module(text):
        raise KernelSourceError(path, "an Inductor output module (call() and the wait on its kernels), not a "
                                      "kernel; its kernels are compiled from their own files")
    if not is_inductor_kernel(text):
        raise KernelSourceError(path, "not an Inductor Triton kernel (no @triton_heuristics / "
                                      "triton_meta / @triton.jit)")
    name = jit_function_name(text)
    if name is None:
        raise KernelSourceError(path, "no `@triton.jit def NAME(` in it")
    return KernelSource(path, name, text)


def read_kernel(path: str) -> KernelSource:
    """Read one kernel module; raise KernelSourceError if it is not an Inductor Triton kernel
    (an output module included)."""
    return _kernel(path, _read(path))


def scan(paths: list[str]) -> Scan:
    """Every Inductor Triton kernel module under ``paths``. Output modules are skipped wherever
    they are (named, or found in a directory); other files found by walking a directory (C++,
    anything else) are skipped too; a file named directly that is neither is an error.

    Raises KernelSourceError for a path that does not exist, a file that cannot be read, and a
    file named directly that is no kernel."""
    found = Scan()
    for path in paths:
        if os.path.isdir(path):
            for root, _dirs, files in os.walk(path):
                for name in sorted(files):
                    if name.endswith(".py"):
                        _add(found, os.path.join(root, name), named=False)
        elif os.path.exists(path):
            _add(found, path, named=True)
        else:
            raise KernelSourceError(path, "no such file or directory")
    return found


def _add(found: Scan, path: str, named: bool) -> None:
    try:
        text = _read(path)
    except KernelSourceError:
        if named:
            raise
        found.others.append(path)
        return
    if is_output_module(text):
        found.output_modules.append(path)
        return
    try:
        found.kernels.append(_kernel(path, text))
    except KernelSourceError:
        if named:
            raise
        found.others.append(path)


def find_kernels(paths: list[str]) -> list[KernelSource]:
    """The kernels ``scan(paths)`` finds."""
    return scan(paths).kernels
