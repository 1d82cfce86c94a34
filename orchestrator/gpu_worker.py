"""The GPU actor's side: ``GPUWorker`` times candidates on the one GPU Ray gave its process
(``GPUPool``, orchestrator/gpu_pool.py, makes it an actor with ``num_gpus=1``)."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from ..kernels import Versions
from ..kernels.benchmark import INF, BenchJob, GPUDescription, Payload, Timing, is_sticky

log = logging.getLogger("raycompile.gpu_pool")

# What times a candidate on an actor: ``describe()`` names the GPU, ``__call__(job, payload)``
# returns milliseconds. ``GPUTiming`` (kernels/benchmark.py) in production; tests pass a test double
# that stands in for the GPU timing only.
Measure = Any


class GPUWorker:
    """Times candidates on the one GPU Ray gave this process. A plain class; ``GPUPool`` makes it
    an actor with ``num_gpus=1``."""

    def __init__(self, measure: Measure, profile: bool = False) -> None:
        self.measure = measure
        self.versions = Versions.here()
        self._profile: Any = None
        if profile:
            import cProfile

            self._profile = cProfile.Profile()

    def info(self) -> dict[str, Any]:
        import ray

        gpu: GPUDescription = self.measure.describe()
        warm = getattr(self.measure, "warm", None)
        if warm is not None:  # the one-time set-up, while the actor starts
            warm()
        node_id = ray.get_runtime_context().get_node_id()
        ids = ray.get_gpu_ids()
        index = str(ids[0]) if ids else gpu.index
        return {"gpu": f"{node_id[:12]}/{index}", "node_id": node_id, "group": gpu.group, "model": gpu.model,
                "arch": gpu.arch, "uuid": gpu.uuid, "pid": os.getpid()}

    def bench(self, job: BenchJob, payload: Payload, gpu: str, node_id: str) -> Timing:
        start, began = time.perf_counter(), time.time()

        def done(ms: float, error: str = "") -> Timing:
            return Timing(job.index, ms, error, time.perf_counter() - start, gpu, node_id, os.getpid(), began)

        if job.versions != self.versions:
            v = self.versions
            return done(INF, f"this GPU worker runs torch {v.torch} / triton {v.triton}, the driver runs "
                             f"torch {job.versions.torch} / triton {job.versions.triton}")
        try:
            if self._profile is not None:
                return done(float(self._profile.runcall(self.measure, job, payload)))
            return done(float(self.measure(job, payload)))
        except Exception as e:  # noqa: BLE001 - the candidate's own code failed (any error): its timing says so
            if is_sticky(e):  # the CUDA context is gone for good: exit; Ray starts a fresh process
                log.error("raycompile: %s crashed GPU %s (%s); restarting this GPU worker", job.name, gpu, e)
                os._exit(1)
            return done(INF, f"{type(e).__name__}: {e}")

    def profile_report(self, top: int = 30) -> str:
        """The cProfile report of this actor's jobs so far, by cumulative time ("" unless profiled)."""
        if self._profile is None:
            return ""
        import io
        import pstats

        out = io.StringIO()
        pstats.Stats(self._profile, stream=out).sort_stats("cumulative").print_stats(top)
        return out.getvalue()
