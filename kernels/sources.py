"""Finding Inductor-generated Triton kernel sources on disk (a TORCHINDUCTOR_CACHE_DIR, a debug
dir) and reading their name and target."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..errors import KernelSourceError

_KERNEL_DEF = re.compile(r"^@triton\.jit\s*\ndef (\w+)\(", re.MULTILINE)


@dataclass(frozen=True)
class KernelSource:
    path: str
    name: str
    source: str


def is_inductor_kernel(text: str) -> bool:
    return "@triton.jit" in text and "triton_meta=" in text and "@triton_heuristics." in text


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
    m = _KERNEL_DEF.search(text)
    if not m:
        raise KernelSourceError(path, "no `@triton.jit def NAME(` in it")
    return KernelSource(path, m.group(1), text)


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
