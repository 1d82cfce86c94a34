"""`raycompile precompile --spec`: each variant a Ray task that enables the farm, compiles and runs
the variant once. On a GPU node when the cluster has GPUs (on the ``raycompile_gpu`` nodes where
it labels them), else on a CPU, with at most half the CPUs taken by variants so that the compile
jobs they send always find a CPU."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..settings import Settings
from . import raycalls
from .connect import connect
from .remote import GPU_RESOURCE

log = logging.getLogger("raycompile.precompile_job")


def placement(offered: dict[str, float]) -> tuple[dict[str, Any], int]:
    """The task options of one variant, and how many may run at once."""
    if offered.get("GPU", 0) >= 1:
        resources = {GPU_RESOURCE: 1} if offered.get(GPU_RESOURCE, 0) >= 1 else {}
        return {"num_gpus": 1, "num_cpus": 1, "resources": resources}, 1 << 30
    return {"num_cpus": 1, "num_gpus": 0}, max(1, int(offered.get("CPU", 1)) // 2)


def run_variants(variants: Sequence[Any], settings: Settings, run_variant: Callable[..., Any],
                 failed: Callable[..., Any], paths: Sequence[str] = (), timeout_s: float = 3600.0) -> list[Any]:
    """Run ``run_variant(variant, paths)`` for every variant on the cluster (``connect``); results
    in the order given. A variant that dies with its worker or outlives ``timeout_s`` is
    ``failed(name, status, seconds, error=...)`` (``raycompile.precompile_job.VariantResult``), not an
    error. The variant code is the facade's (raycompile/precompile_job.py), passed in.

    Raises FarmUnavailableError when Ray cannot be reached, or fails under the run."""
    import ray

    owns = connect(settings).owns
    try:
        with raycalls.calls(raycalls.address(), "running the variants"):
            return _run(variants, run_variant, failed, paths, timeout_s)
    finally:
        if owns:
            ray.shutdown()


def _run(variants: Sequence[Any], run_variant: Callable[..., Any], failed: Callable[..., Any],
         paths: Sequence[str], timeout_s: float) -> list[Any]:
    import ray

    options, limit = placement(ray.cluster_resources())
    task = ray.remote(run_variant).options(max_retries=0, **options)
    deadline = time.monotonic() + timeout_s
    results: dict[int, Any] = {}
    running: dict[Any, int] = {}
    todo = list(range(len(variants)))
    while todo or running:
        while todo and len(running) < limit:
            i = todo.pop(0)
            running[task.remote(variants[i], list(paths))] = i
        ready, _ = ray.wait(list(running), num_returns=1, timeout=max(0.0, min(5.0, deadline - time.monotonic())))
        for ref in ready:
            i = running.pop(ref)
            try:
                results[i] = ray.get(ref)
            except ray.exceptions.RayError as e:  # the worker or node died, or the variant raised
                results[i] = failed(variants[i].name, "failed", error=f"{type(e).__name__}: {e}")
        if time.monotonic() > deadline:
            for ref, i in running.items():
                with contextlib.suppress(*raycalls.failures()):  # already finished, or its node is gone
                    ray.cancel(ref, force=True)
                results[i] = failed(variants[i].name, "timeout", timeout_s,
                                    error=f"not done within {timeout_s:.0f} s (--timeout)")
            for i in todo:
                results[i] = failed(variants[i].name, "timeout", error="never started (--timeout)")
            break
    return [results[i] for i in range(len(variants))]
