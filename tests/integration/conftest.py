from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from local_router import HeldPool
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


@pytest.fixture
def held(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldPool]:
    """Inductor's real compile pool (``SubprocPool``) behind the test double ``HeldPool``, which
    holds its jobs until ``start()``; Inductor's and Triton's caches in ``tmp_path``."""
    from torch._inductor.compile_worker.subproc_pool import SubprocPool

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    pool = SubprocPool(2)
    yield HeldPool(pool)
    pool.shutdown()
