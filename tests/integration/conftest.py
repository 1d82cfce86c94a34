from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A real local Ray for the module (2 CPUs, as on CI); raycompile joins it."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="raycompile")
    yield
    ray.shutdown()


@pytest.fixture
def farm_on(local_ray: None) -> Iterator[None]:
    import raycompile

    raycompile.enable()
    raycompile.ready()  # the hooks installed: these tests reach Inductor's pools directly
    yield
    raycompile.disable()
