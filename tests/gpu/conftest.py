"""Fixtures of the GPU tests (run on the GPU machine; skipped elsewhere)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A local Ray with every GPU of this machine, one per test module. A Ray left connected by an
    earlier module (a test that failed before its cleanup) is shut down first, not reused."""
    import ray
    import torch

    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_gpus=torch.cuda.device_count(), include_dashboard=False, log_to_driver=False,
             namespace="raycompile")
    yield
    ray.shutdown()
