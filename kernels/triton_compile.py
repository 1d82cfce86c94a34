"""Compile an Inductor Triton kernel job, on a node with or without a GPU. What it calls in
Inductor and Triton (the compile, cross-compiling for the target the source records, Triton's
cache layout) is the toolchain's, passed in (``kernels/toolchain.py``)."""

from __future__ import annotations

import time

from .jobs import Built, Failed, Result, TritonJob
from .toolchain import Toolchain


def run_triton_job(job: TritonJob, toolchain: Toolchain) -> Result:
    """Compile every config of the kernel in ``job``; return Built with the pickled autotuner and
    its Triton cache group, or Failed with the compiler's message."""
    start = time.perf_counter()
    try:
        payload, files = toolchain.compile_triton(job.kernel_name, job.source, job.extra_env, job.extra_config)
    except Exception as e:  # noqa: BLE001 - the compiler's message travels back as a value
        return Failed(job.key, job.label, f"{type(e).__name__}: {e}", seconds=time.perf_counter() - start)
    return Built(job.key, job.label, time.perf_counter() - start, payload=payload, files=files)
