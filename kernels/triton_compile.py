"""Compile an Inductor Triton kernel, on a node with or without a GPU.

On a node without a GPU, Triton cannot pick an active driver, and Inductor's kernel module asks
for one. A compile-only driver stands in: it reports the target recorded in the kernel source
(``DeviceProperties(cc=..., warp_size=...)``) and is never asked to launch anything, so ptxas
builds cubins for the GPUs' arch on a CPU-only box (DESIGN.md, "Compiling Triton on a node
WITHOUT a GPU").
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import re
import time
from collections.abc import Iterator

from ..errors import UnknownArchError
from ..wrapper import compat
from .jobs import Built, Failed, Result, TritonJob

# Compute capabilities Triton's bundled ptxas (CUDA 12.9) builds for.
CUDA_ARCHES = (75, 80, 86, 87, 89, 90, 100, 103, 120)

_DEVICE_PROPS = re.compile(r"DeviceProperties\(type='(\w+)'[^)]*?\bcc=(\d+)[^)]*?warp_size=(\d+)\)")


def parse_arch(arch: str) -> int:
    """'sm_90' / 'sm90' / '90' / 'sm_90a' -> 90; raise UnknownArch for anything else."""
    m = re.fullmatch(r"(?:sm_?)?(\d{2,3})a?", arch.strip().lower())
    if not m or int(m.group(1)) not in CUDA_ARCHES:
        raise UnknownArchError(arch, ", ".join(f"sm_{a}" for a in CUDA_ARCHES))
    return int(m.group(1))


def target_of(source: str) -> tuple[str, int, int]:
    """(device type, compute capability, warp size) recorded in an Inductor kernel source."""
    m = _DEVICE_PROPS.search(source)
    if not m:
        raise ValueError("no DeviceProperties(type=..., cc=..., warp_size=...) in the kernel source")
    return m.group(1), int(m.group(2)), int(m.group(3))


def device_index(source: str) -> int:
    """The CUDA device index recorded in an Inductor kernel source (0 when none is)."""
    m = re.search(r"DeviceProperties\(type='\w+', index=(\d+)", source)
    return int(m.group(1)) if m else 0


def retarget(source: str, arch: int) -> str:
    """The same kernel source with its recorded target changed to compute capability ``arch``."""

    def sub(m: re.Match[str]) -> str:
        text = m.group(0)
        text = re.sub(r"\bcc=\d+", f"cc={arch}", text)
        return re.sub(r"\bmajor=\d+", f"major={arch // 10}", text)

    return _DEVICE_PROPS.sub(sub, source)


def _gpu_present() -> bool:
    import torch

    return torch.cuda.is_available()


@contextlib.contextmanager
def compile_only_driver(device_type: str, arch: int, warp_size: int) -> Iterator[None]:
    """Make Triton compile for (device_type, arch) on a node with no GPU of that kind."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.driver import CudaDriver

    if device_type != "cuda":
        raise UnknownArchError(device_type, "cuda (cross-compiling targets only NVIDIA GPUs)")

    class CompileOnlyCudaDriver(CudaDriver):
        def __init__(self) -> None:  # no CudaUtils: that needs libcuda
            self.target = GPUTarget("cuda", arch, warp_size)

        def get_current_target(self) -> GPUTarget:
            return self.target

        @staticmethod
        def is_active() -> bool:
            return True

        def get_current_device(self) -> int:
            return 0

    runtime_driver = triton.runtime.driver
    previous = runtime_driver._active  # reset_active() would probe for a real GPU driver and fail
    runtime_driver.set_active(CompileOnlyCudaDriver())
    try:
        with compat.gpu_driver_check_disabled():
            yield
    finally:
        runtime_driver._active = previous


def _cache_files(kernel: object) -> dict[str, bytes]:
    """Triton's cache artifacts of every compiled config, named ``triton/GROUP/FILE`` relative to
    the Triton cache dir: the driver writes them into ITS Triton cache dir, where its TritonBundler
    looks for them (the TritonBundler trap in DESIGN.md)."""
    files: dict[str, bytes] = {}
    for group in compat.triton_cache_group_dir(kernel):
        if not os.path.isdir(group):
            continue
        for name in sorted(os.listdir(group)):
            path = os.path.join(group, name)
            if os.path.isfile(path) and not name.startswith("tmp."):
                with open(path, "rb") as f:
                    files[f"triton/{os.path.basename(group)}/{name}"] = f.read()
    return files


def run_triton_job(job: TritonJob) -> Result:
    """Compile every config of the kernel in ``job``; return Built with the pickled autotuner."""
    start = time.perf_counter()
    try:
        device_type, arch, warp_size = target_of(job.source)
        ctx: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if device_type == "cuda" and not _gpu_present():
            ctx = compile_only_driver(device_type, arch, warp_size)
        with ctx:
            kernel, _elapsed_us = compat.worker_compile_triton(
                job.kernel_name, job.source, job.extra_env, job.extra_config
            )
        files = _cache_files(kernel)
        payload = pickle.dumps(kernel)
    except Exception as e:  # the compiler's message travels back as a value
        return Failed(job.key, job.label, f"{type(e).__name__}: {e}", seconds=time.perf_counter() - start)
    return Built(job.key, job.label, time.perf_counter() - start, payload=payload, files=files)


@functools.lru_cache(maxsize=1)
def ptxas_version() -> str:
    """The version line of the ptxas Triton uses (part of the cache key); "none" without one."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas_version

        return str(get_ptxas_version()).strip().splitlines()[-1]
    except Exception:  # no NVIDIA backend in this triton, or no ptxas: not a CUDA build box
        return "none"
