"""The orchestrator's edge, with real Ray: a call on a Ray that went away (or an address where
nothing answers) raises raycompile's own exception, never one of ``ray.exceptions``, and never
starts a new local Ray behind the caller's back; and the farm hands results over on threads of
its own, so a slow consumer of one job's result does not hold up another job's."""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
import ray
from gpu_double import FakeGPUTiming
from raystart import free_port
from waiting import wait_until

from raycompile.cache import Entry
from raycompile.cache.store import Miss, TierUnavailable
from raycompile.errors import FarmUnavailableError
from raycompile.kernels import Built, CppJob, CppStep, Failed, Versions
from raycompile.kernels.benchmark import BenchJob, Payload
from raycompile.observe.stats import Stats
from raycompile.orchestrator import Farm
from raycompile.orchestrator.cache_service import RayHeadTier
from raycompile.orchestrator.coordinator import ClusterDedupe
from raycompile.orchestrator.gpu_pool import GPUPool
from raycompile.settings import Settings
from raycompile.wrapper import compat


def cpp_job(tmp_path: pathlib.Path, name: str, shell: str) -> CppJob:
    """A C++-build job whose one step runs ``shell`` and writes ``name``.so: quick, and real."""
    out = tmp_path / f"{name}.so"
    return CppJob(f"{name}.so", (CppStep(["sh", "-c", f"{shell}; echo > {out}"], str(out), str(tmp_path / name)),),
                  {}, Versions.here(), str(tmp_path / f"{name}.lock"), key=name)


def bench_work() -> list[tuple[BenchJob, Payload]]:
    payload = Payload.make("inductor", "triton_poi_fused_0", "def triton_poi_fused_0(): pass\n")
    return [(BenchJob(payload.kernel_id, payload.name, 0, {"XBLOCK": 64, "num_warps": 4}, Versions.here()), payload)]


@pytest.fixture
def ray_gone(local_ray: None) -> Iterator[str]:
    """This process's Ray connection shut down (what ``ray.shutdown()`` elsewhere, or a session
    closed under a pool still in use, leaves); the module's cluster keeps running and is joined
    again afterwards. Yields the cluster's address."""
    address = ray.get_runtime_context().gcs_address
    ray.shutdown()
    try:
        yield address
    finally:
        if not ray.is_initialized():
            ray.init(address=address, log_to_driver=False, namespace="raycompile")


def test_calls_on_a_ray_that_went_away_raise_farm_unavailable_and_start_no_new_ray(
        local_ray: None, tmp_path: pathlib.Path, request: pytest.FixtureRequest) -> None:
    settings = Settings.resolve(connect_timeout_s=30)
    stats = Stats()
    farm = Farm(settings, stats, toolchain=compat.TOOLCHAIN)  # joins the module's cluster; never warmed
    pool = GPUPool(stats, FakeGPUTiming())  # made, its actors not started (they start lazily)
    tier = RayHeadTier(b"secret", root=str(tmp_path / "head"), timeout_s=30)
    dedupe = ClusterDedupe.start(settings, stats, scope="test")
    absent = tier.get("absent-key")
    assert dedupe is not None and isinstance(absent, Miss) and absent.reason == "absent"  # both up on the cluster
    request.getfixturevalue("ray_gone")  # now this process's Ray goes away under them

    with pytest.raises(FarmUnavailableError, match="no longer connected") as info:
        pool.run(bench_work(), "Fake A (sm_90)")
    assert not isinstance(info.value, ray.exceptions.RayError)
    with pytest.raises(FarmUnavailableError, match="no longer connected"):
        pool.groups()
    with pytest.raises(FarmUnavailableError, match="no longer connected"):
        GPUPool.cluster_gpus()
    assert not pool.started  # a later call starts the actors, once Ray is back
    pool.close()  # never raises

    result = farm.submit(cpp_job(tmp_path, "after", "true")).result(timeout=30)
    assert isinstance(result, Failed) and result.kind == "infrastructure", result  # compiled locally by the caller
    assert not farm.alive and farm.workers() == 0
    with pytest.raises(FarmUnavailableError):
        farm.wait_warm(timeout=5)

    lookup = tier.get("some-key")
    assert isinstance(lookup, Miss) and lookup.reason == "unavailable"
    with pytest.raises(TierUnavailable):
        tier.put(Entry("some-key", {"a": b"b"}))
    with pytest.raises(TierUnavailable):
        tier.usage()

    compiled: list[str] = []
    done: Future[None] = Future()
    done.set_result(None)
    dedupe.run("k", lambda: (compiled.append("k"), done)[1], lambda: False)
    assert compiled == ["k"] and stats.coordinator_unavailable >= 1  # compiled here, counted
    dedupe.close()
    farm.close()

    # none of it started a new local Ray (Ray's get/wait/put/kill/.remote() would, unguarded)
    assert not ray.is_initialized()
    # nor does a farm for an address where nothing answers: it fails with the project's error, from
    # the connect check (not from Ray's minutes of retries)
    with pytest.raises(FarmUnavailableError, match="nothing answers there"):
        Farm(Settings.resolve(address=f"127.0.0.1:{free_port()}", connect_timeout_s=5), toolchain=compat.TOOLCHAIN)
    assert not ray.is_initialized()


def test_a_slow_result_consumer_does_not_hold_up_another_jobs_result(local_ray: None, tmp_path: pathlib.Path) -> None:
    """A done-callback that blocks (a consumer writing a large result somewhere, say) runs on one
    of the farm's result threads: another job's future still resolves meanwhile."""
    entered, release = threading.Event(), threading.Event()
    threads: list[str] = []

    def slow(f: Future[Any]) -> None:
        threads.append(threading.current_thread().name)
        entered.set()
        if threading.current_thread() is not threading.main_thread():  # never block the test itself
            release.wait(120)

    with Farm(Settings.resolve(), toolchain=compat.TOOLCHAIN) as farm:
        try:
            first = farm.submit(cpp_job(tmp_path, "first", "sleep 1"))  # still running when the callback is added
            first.add_done_callback(slow)
            assert entered.wait(120), "the first job never finished"
            assert threads[0].startswith("raycompile-results"), threads  # not the caller's, not the dispatcher
            second = farm.submit(cpp_job(tmp_path, "second", "true"))
            result = second.result(timeout=90)  # the first job's consumer is still blocked
            assert isinstance(result, Built), result
            assert not release.is_set()  # resolved while the first job's consumer was still blocked
        finally:
            release.set()
        assert isinstance(first.result(timeout=10), Built)
        assert farm.stats.jobs == 2 and farm.stats.retried == 0


def test_a_job_in_flight_at_close_fails_as_infrastructure(local_ray: None, tmp_path: pathlib.Path) -> None:
    farm = Farm(Settings.resolve(), toolchain=compat.TOOLCHAIN)
    running = tmp_path / "running"
    future = farm.submit(cpp_job(tmp_path, "hung", f"touch {running}; sleep 15"))
    wait_until(running.exists, 120, "the job running on a worker")
    farm.close()
    result = future.result(timeout=60)  # resolved by close, not by the job (it would end Built)
    assert isinstance(result, Failed) and result.kind == "infrastructure" and "closed" in result.message
