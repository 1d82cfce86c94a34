"""Triton jobs compiled in the driver while the node's compile workers start (``Router._in_process_now``),
as stock compiles in the driver until its pool answers: a reduction kernel Inductor generated for
an H100 (torch 2.11 corpus), cross-compiled for sm_90 by real Triton on this CPU box, sent through
the Router while Inductor's own process pool (``SubprocPool``) is held from starting. The test
double is ``HeldPool``: it holds every job until the test lets the pool start, as a pool whose
workers still import torch would."""

from __future__ import annotations

import pathlib
import time
from concurrent.futures import FIRST_COMPLETED, wait

import pytest
from local_router import KERNEL, CompilesHere, HeldPool, env_here, submit

from raycompile.observe.stats import Stats
from raycompile.wrapper import compat
from raycompile.wrapper.hooks import Router

triton = pytest.importorskip("triton")


def test_a_job_compiles_in_the_driver_while_the_workers_start_then_in_the_workers(
        corpus: pathlib.Path, held: HeldPool, tmp_path: pathlib.Path) -> None:
    source = (corpus / KERNEL).read_text()
    stats = Stats()
    router = Router(CompilesHere(), stats, lambda: held, lambda task: task())
    try:
        kernel, _ = submit(router, source, env_here()).result(60)  # the pool is held: only here
        assert stats.jobs_in_process == 1 and stats.jobs_local == 1
        assert held.sent == ["getpid"]  # the pool was asked only whether it answers
        hashes = [r.kernel.hash for r in kernel.compile_results]
        assert hashes and any(p.suffix == ".cubin" for p in (tmp_path / "triton").rglob("*"))  # compiled here

        # a job with another env than this process's is the workers' (it waits for them)
        other = submit(router, source, {**env_here(), "TRITON_CACHE_DIR": str(tmp_path / "other")})
        time.sleep(1.0)
        assert not other.done() and stats.jobs_in_process == 1
        held.start()
        again, _ = other.result(300)
        assert [r.kernel.hash for r in again.compile_results] == hashes  # the same binaries as the workers'
        assert held.sent == ["getpid", "run_job"]

        # the workers answered: the next job is theirs
        router._pool_ready.result(60)
        submit(router, source.replace("def triton_", "def triton_x_", 1), env_here()).result(300)
        assert stats.jobs_in_process == 1 and stats.jobs_local == 3
        assert held.sent[-1] == "run_job"
    finally:
        held.start()
        router.close()


def test_one_job_at_a_time_compiles_in_the_driver(corpus: pathlib.Path, held: HeldPool) -> None:
    source = (corpus / KERNEL).read_text()
    stats = Stats()
    router = Router(CompilesHere(), stats, lambda: held, lambda task: task())
    try:
        jobs = [submit(router, source, env_here()),
                submit(router, source.replace("def triton_", "def triton_y_", 1), env_here())]
        done, waiting = wait(jobs, timeout=60, return_when=FIRST_COMPLETED)
        assert len(done) == 1 and len(waiting) == 1
        other = waiting.pop()
        time.sleep(1.0)
        assert not other.done() and stats.jobs_in_process == 1  # it waits for the workers
        held.start()
        other.result(300)
        assert stats.jobs_in_process == 1 and stats.jobs_local == 2
    finally:
        held.start()
        router.close()


def test_a_max_autotune_kernel_waits_for_the_workers(corpus: pathlib.Path, held: HeldPool) -> None:
    """Its several configs are compiled at once by the workers (``wrapper/spread.py``), seconds
    sooner than one driver thread would compile them one after another."""
    source = (corpus / KERNEL).read_text().replace("'max_autotune': False", "'max_autotune': True")
    assert compat.spreads(source)
    stats = Stats()
    router = Router(CompilesHere(), stats, lambda: held, lambda task: task())
    try:
        job = submit(router, source, env_here())
        time.sleep(1.0)
        assert not job.done() and stats.jobs_in_process == 0
        held.start()
        job.result(300)
        assert stats.jobs_in_process == 0 and stats.jobs_local == 1 and stats.configs_spread >= 1
    finally:
        held.start()
        router.close()


def test_the_workers_are_started_once_when_threads_ask_for_them_at_once() -> None:
    """Inductor's pool factory is an ``lru_cache``, which runs its function for each thread that
    calls it before the first call returned: the Router's warm-up (an I/O thread) and a job asking
    at once would each start a pool, one of them lost with its processes. A slow factory stands in
    for the pool's start (it computes torch's source hash first); the Router must call it once."""
    import functools
    import threading

    started: list[object] = []

    @functools.lru_cache(1)
    def factory() -> object:
        time.sleep(0.5)
        started.append(object())
        return started[-1]

    router = Router(CompilesHere(), Stats(), factory, lambda task: task())
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(router._pool())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(started) == 1 and len(got) == 4 and all(g is started[0] for g in got), (started, got)


def test_a_kernel_compiled_here_leaves_the_kernel_inductor_reloads_whole(
        corpus: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job compiled in the driver (``Toolchain.compile_triton_here``) pickles the kernel of
    Inductor's own module cache, which Inductor's reload of that kernel in this process returns
    (coordinate descent's first run reloads it). The pickle empties its Triton function; left so,
    coordinate descent's first compile of a config failed on an H200 (the function's hash lock was
    None). Real Triton cross-compiling for sm_90 on this CPU box."""
    import pickle
    import re
    import threading

    from torch._inductor.codecache import _load_triton_kernel_from_source

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    source = (corpus / KERNEL).read_text()
    name = re.search(r"^def (\w+)\(", source, re.M).group(1)  # type: ignore[union-attr]
    payload, files = compat.TOOLCHAIN.compile_triton_here(name, source)
    sent = pickle.loads(payload)
    assert sent.fn.fn is None and files  # pickled as a worker's job returns it, with its cache group
    reloaded = _load_triton_kernel_from_source(name, source)  # what Inductor's reload in this process returns
    assert reloaded.fn.fn is not None and reloaded.fn.__globals__ is not None
    assert isinstance(reloaded.fn._hash_lock, type(threading.RLock()))
    assert reloaded.fn.cache_key  # what triton.compile asks of it for each config coordinate descent compiles



@pytest.mark.parametrize("config_locks", [False, True], ids=["job", "job-with-config-locks"])
def test_a_worker_that_compiled_a_kernel_compiles_its_candidates(
        corpus: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, config_locks: bool) -> None:
    """A compile worker runs a kernel's job (``Toolchain.compile_triton``: Inductor's own worker job,
    which empties the kernel of the worker's module cache for its pickle), then a coordinate-descent
    candidate of the same kernel (``compile_config_for_target``), as a worker of the farm does. The
    candidate loads the kernel from that module cache; left empty, its compile failed (a review,
    stop 57). This process plays the worker. Real Triton cross-compiling for sm_90 on this CPU box."""
    import pickle
    import re

    from torch._inductor.codecache import _load_triton_kernel_from_source

    from raycompile.wrapper.compat.triton import compile_config_for_target

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    source = (corpus / KERNEL).read_text()
    name = re.search(r"^def (\w+)\(", source, re.M).group(1)  # type: ignore[union-attr]
    locks = tmp_path / "locks"
    locks.mkdir()
    payload, files = compat.TOOLCHAIN.compile_triton(name, source, {}, {}, str(locks) if config_locks else "",
                                                     "k1" if config_locks else "")
    sent = pickle.loads(payload)
    assert sent.fn.fn is None and files  # pickled as Inductor's worker job returns it
    assert "_precompile_config" not in sent.__dict__ and "prepare_for_pickle" not in sent.__dict__
    kernel = _load_triton_kernel_from_source(name, source)  # what the candidate's compile loads here
    first = kernel.compile_results[0].config
    candidate = triton.Config(dict(first.kwargs), num_warps=first.num_warps * 2, num_stages=first.num_stages)
    binary, seconds = compile_config_for_target(name, source, candidate, {}, {})
    assert binary and seconds > 0
    assert kernel.fn.fn is not None and "prepare_for_pickle" not in kernel.__dict__


def test_two_jobs_of_one_kernel_on_threads_leave_it_whole(
        corpus: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two compiles of one kernel's source at once in one process (threads): the second would
    load the kernel the first has emptied for its pickle, save those empty values, and put them
    back last (a review, stop 58). They take turns. The jobs' pickles are slowed, so that without
    the turns the second starts while the kernel is empty and finishes last. Real Triton, sm_90."""
    import re
    import threading

    from torch._inductor.codecache import _load_triton_kernel_from_source

    from raycompile.wrapper.compat import triton as compat_triton

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    source = (corpus / KERNEL).read_text()
    name = re.search(r"^def (\w+)\(", source, re.M).group(1)  # type: ignore[union-attr]
    stock_blobs = compat_triton.cache_group_blobs
    first_pickling = threading.Event()
    calls: list[int] = []

    def slow_blobs(kernel: object) -> dict[str, bytes]:
        calls.append(1)
        if len(calls) == 1:
            first_pickling.set()
            time.sleep(1.0)  # the first job holds the kernel emptied here ...
        else:
            time.sleep(2.0)  # ... and the second puts back what it saved after the first
        return stock_blobs(kernel)

    monkeypatch.setattr(compat_triton, "cache_group_blobs", slow_blobs)
    errors: list[BaseException] = []

    def job(wait: bool) -> None:
        if wait:
            first_pickling.wait(60)
        try:
            compat_triton.compile_pickled(name, source, {}, {})
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=job, args=(False,)), threading.Thread(target=job, args=(True,))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(calls) == 2, (errors, calls)
    kernel = _load_triton_kernel_from_source(name, source)
    assert kernel.fn.fn is not None and isinstance(kernel.fn._hash_lock, type(threading.RLock()))
