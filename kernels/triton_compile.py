"""Compile an Inductor Triton kernel job, on a node with or without a GPU. What it calls in
Inductor and Triton (the compile, cross-compiling for the target the source records, Triton's
cache layout) is the toolchain's, passed in (``kernels/toolchain.py``)."""

from __future__ import annotations

import time

from .jobs import Built, Failed, Result, TritonJob, Versions
from .toolchain import Toolchain


def run_triton_job(job: TritonJob, toolchain: Toolchain, here: bool = False) -> Result:
    """Compile every config of the kernel in ``job``; return Built with the pickled autotuner and
    its Triton cache group, or Failed with the compiler's message. ``here``: in the driver that
    made the job (``Toolchain.compile_triton_here``), not in a worker."""
    start = time.perf_counter()
    try:
        if here:
            payload, files = toolchain.compile_triton_here(job.kernel_name, job.source)
        else:
            payload, files = toolchain.compile_triton(job.kernel_name, job.source, job.extra_env, job.extra_config,
                                                      job.config_locks, job.key)
    except Exception as e:  # noqa: BLE001 - the compiler's message travels back as a value
        return Failed(job.key, job.label, f"{type(e).__name__}: {e}", seconds=time.perf_counter() - start)
    return Built(job.key, job.label, time.perf_counter() - start, payload=payload, files=files)


def run_triton_config(job: TritonJob, index: int, toolchain: Toolchain) -> float:
    """Compile config ``index`` of ``job``'s kernel into this node's Triton cache while ``job``
    itself runs in another worker (its ``config_locks`` set), which then finds it there: the
    seconds it took, 0.0 where the job had finished first. Never raises: a config that does not
    compile fails the job itself, as in stock."""
    if not job.config_locks or job.versions != Versions.here():
        return 0.0
    try:
        return toolchain.compile_triton_config(job.kernel_name, job.source, index, job.extra_env, job.extra_config,
                                               job.config_locks, job.key)
    except Exception:  # noqa: BLE001 - the job compiles this config itself and reports what it raises
        return 0.0
