from __future__ import annotations

from collections.abc import Iterator

import pytest
from raystart import ray_cluster


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A real local Ray for the module: one node with 2 CPUs (as on CI) and ports of its own
    (raystart.py); raycompile joins it."""
    with ray_cluster(head_cpus=2):
        yield


@pytest.fixture
def farm_on(local_ray: None) -> Iterator[None]:
    import raycompile

    raycompile.enable()
    raycompile.ready()  # the hooks installed: these tests reach Inductor's pools directly
    yield
    raycompile.disable()
