"""What the farm runs on the cluster's workers (Ray tasks): a compile job, the first-contact probe
of each node, and the warm-up of each worker slot; and what a compile task asks for."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import replace
from typing import Any

from .. import kernels
from ..kernels import Job, Result, Toolchain, Versions

# Custom resources a cluster may offer (cluster.yaml): compile slots a node lends to the farm, and
# GPU nodes for `raycompile precompile` variants. Asked for only when the cluster has them.
COMPILE_RESOURCE = "raycompile_compile"
GPU_RESOURCE = "raycompile_gpu"



def compile_resources(offered: dict[str, float]) -> dict[str, float]:
    """What a compile job asks for beyond one CPU: a compile slot, where the cluster has any."""
    return {COMPILE_RESOURCE: 1} if offered.get(COMPILE_RESOURCE, 0) >= 1 else {}


def _execute(job: Job, toolchain: Toolchain) -> Result:
    """Runs on a Ray worker: the job, stamped with where it ran."""
    import ray

    started = time.time()
    result = kernels.run_job(job, toolchain)
    return replace(result, node_id=ray.get_runtime_context().get_node_id(), pid=os.getpid(), started=started)


def _probe_versions() -> dict[str, Any]:
    """Runs once on each node at ``enable()``: its installed torch and triton, read without
    importing them, so first contact costs a worker's start, not an ``import torch``."""
    import ray

    return {"node_id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname(),
            "versions": Versions.installed()}


def _probe() -> dict[str, Any]:
    """Runs on each node for ``raycompile status``: what toolchain (as imported) and GPUs it has."""
    import torch

    return {**_probe_versions(), "versions": Versions.here(),
            "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}


def _warm(toolchain: Toolchain) -> int:
    """Runs once per worker slot at start-up: pay the imports before the first real job does."""
    toolchain.warm_compile_worker()
    time.sleep(0.1)  # hold the CPU so the next warm task needs another worker
    return os.getpid()
