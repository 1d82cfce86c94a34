"""A test double that stands in for the GPU TIMING only, on Ray nodes with fake GPUs.

CI machines have no GPU, so the GPU actors of these tests time candidates with ``FakeGPUTiming``
instead of ``kernels.benchmark.GPUTiming``. Everything else is real: the Ray cluster
(``cluster_utils`` nodes offering ``num_gpus``), the actors and their restarts, what travels to
them (payloads are unpickled and checked here), the Inductor seams and the cache of winners.

- The GPU model of a node is its custom resource ``fakegpu_<MODEL>``.
- A candidate's time is a pure function of its config (``fake_ms``), so tests know the winner.
- A config with ``POISON`` raises what an illegal address raises in CUDA; the worker must exit
  (standing in for a GPU whose context is lost), as with a real crash.
"""

from __future__ import annotations

import math
import pickle
import time
from typing import Any

import ray.cloudpickle

from raycompile.kernels.benchmark import BenchJob, GPUDescription, Payload, load_user_kernel

PREFIX = "fakegpu_"


def fake_ms(config: dict[str, Any]) -> float:
    """The double's deterministic time of a config: fastest at XBLOCK 64 with 4 warps."""
    block = config.get("XBLOCK", config.get("BLOCK", 64))
    return 1.0 + abs(math.log2(block) - 6) + 0.1 * abs(config.get("num_warps", 4) - 4)


def template_ms(num_stages: int, num_warps: int) -> float:
    """The double's time of a max-autotune choice: fastest with few stages and 4 warps."""
    return 1.0 + num_stages + 0.1 * abs(num_warps - 4)


class FakeGPUTiming:
    """Stands in for GPU timing (``describe`` + ``__call__(job, payload)``), nothing else."""

    def __init__(self, busy_s: float = 0.05) -> None:
        self.busy_s = busy_s  # how long a "GPU" is busy per candidate

    def describe(self) -> GPUDescription:
        node = ray.get_runtime_context().get_node_id()
        resources = next(n["Resources"] for n in ray.nodes() if n["NodeID"] == node)
        model = next(k.removeprefix(PREFIX) for k in resources if k.startswith(PREFIX))
        return GPUDescription(f"Fake {model}", "sm_90" if model.startswith("A") else "sm_80", "0", f"GPU-fake-{node}")

    def __call__(self, job: BenchJob, payload: Payload) -> float:
        if job.config.get("POISON"):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        time.sleep(self.busy_s)
        if payload.kind == "template":  # the request must arrive whole: bmreq, module source
            bmreq = pickle.loads(payload.bmreq)
            assert bmreq.kernel_name == payload.name and f"def {payload.name}(" in payload.source
            return template_ms(bmreq.num_stages, bmreq.num_warps)
        if payload.kind == "user":  # the kernel must rebuild from its bundle, the grid unpickle
            values = ray.cloudpickle.loads(payload.globals) if payload.globals else {}
            kernel = load_user_kernel(payload.name, payload.source, values)
            assert kernel.__name__ == payload.name
            grid = ray.cloudpickle.loads(payload.grid)
            assert grid(job.config) if callable(grid) else grid
        return fake_ms(job.config)


def register() -> None:
    """Ship this module by value: Ray workers do not have tests/ on their path."""
    import sys

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
