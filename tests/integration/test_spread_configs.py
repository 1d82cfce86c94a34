"""A max-autotune kernel's configs compiled at once by the node's compile workers
(``wrapper/spread.py``), for real on this CPU box: a reduction kernel Inductor generated for an
H100 (torch 2.11 corpus) as a max-autotune compile makes it (its ``inductor_meta`` says
``max_autotune``, so its heuristics give it several configs when it loads), sent through the
Router to Inductor's own process pool (``SubprocPool``), Triton cross-compiling for sm_90. The
kernel comes back with the binaries its job alone makes, each config was compiled by one worker
only, and a default-mode kernel is sent whole, as before.
"""

from __future__ import annotations

import functools
import os
import pathlib
from typing import Any

import pytest
from local_router import KERNEL, CompilesHere

from raycompile.observe.stats import Stats
from raycompile.wrapper import compat
from raycompile.wrapper.compat.triton import jit_function_name
from raycompile.wrapper.hooks import Router

triton = pytest.importorskip("triton")


def files(triton_dir: pathlib.Path) -> dict[str, int]:
    """Each file of a Triton cache dir and its inode (a put replaces the file: a new inode)."""
    return {str(p.relative_to(triton_dir)): p.stat().st_ino for p in triton_dir.rglob("*") if p.is_file()}


def compile_through_router(pool: Any, source: str, triton_dir: pathlib.Path, spread: bool,
                           worker_nice: int = 0) -> tuple[Any, Stats, str]:
    from torch._inductor.codecache import _load_triton_kernel_from_source
    from torch._inductor.runtime.compile_tasks import _worker_compile_triton

    name = jit_function_name(source)
    assert name
    stats = Stats()
    router = Router(CompilesHere(), stats, lambda: pool, lambda task: task(), spread_configs=spread,
                    worker_nice=worker_nice)
    env = {"TRITON_CACHE_DIR": str(triton_dir), "TORCHINDUCTOR_CACHE_DIR": os.environ["TORCHINDUCTOR_CACHE_DIR"]}
    try:
        load = functools.partial(_load_triton_kernel_from_source, name, source)
        kernel, _ = router.submit(_worker_compile_triton, load, env, compat.triton_extra_config(source)).result(300)
        locks = router.spread._dir or ""
    finally:
        router.close()
    return kernel, stats, locks


@pytest.fixture
def pool(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from torch._inductor.compile_worker.subproc_pool import SubprocPool

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    pool = SubprocPool(3)  # Inductor's own compile workers
    yield pool
    pool.shutdown()


def test_a_max_autotune_kernels_configs_compile_at_once_with_the_binaries_of_its_job(
        corpus: pathlib.Path, tmp_path: pathlib.Path, pool: Any) -> None:
    source = (corpus / KERNEL).read_text().replace("'max_autotune': False", "'max_autotune': True")
    assert compat.spreads(source)
    n = compat.config_count(jit_function_name(source) or "", source)
    assert n >= 4  # max-autotune's reduction configs

    whole, whole_stats, _ = compile_through_router(pool, source, tmp_path / "whole", spread=False)
    kernel, stats, locks = compile_through_router(pool, source, tmp_path / "spread", spread=True)
    assert whole_stats.configs_spread == 0 and stats.configs_spread == n - 1
    assert stats.jobs_local == 1
    # the same binaries, in the same order (the kernel's configs, as its job alone compiles them)
    hashes = [r.kernel.hash for r in kernel.compile_results]
    assert hashes == [r.kernel.hash for r in whole.compile_results] and len(set(hashes)) == n
    assert "_precompile_config" not in kernel.__dict__  # the lock's wrapper stayed in the worker
    # every config compiled once: the configs' jobs that ran after the kernel's found its binaries
    # (Triton writes a binary by replacing its file; nothing was written again) or its done mark
    after_job = files(tmp_path / "spread")
    pool.submit(abs, 0).result(60)  # the pool's queue is FIFO: every config's job has been taken
    for _ in range(3):
        pool.submit(abs, 0).result(60)
    assert files(tmp_path / "spread") == after_job
    assert sorted(os.listdir(tmp_path / "spread")) == sorted(os.listdir(tmp_path / "whole"))  # n groups
    assert locks and not os.path.exists(locks)  # the locks go with the session


def test_a_default_mode_kernel_is_sent_whole(corpus: pathlib.Path, tmp_path: pathlib.Path, pool: Any) -> None:
    source = (corpus / KERNEL).read_text()
    assert "'max_autotune': False" in source and not compat.spreads(source)
    kernel, stats, locks = compile_through_router(pool, source, tmp_path / "t", spread=True)
    assert stats.configs_spread == 0 and stats.jobs_local == 1 and kernel.compile_results and not locks


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
            except OSError:  # gone meanwhile
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def test_the_compile_workers_run_the_farms_jobs_below_the_drivers_priority(
        corpus: pathlib.Path, tmp_path: pathlib.Path, pool: Any) -> None:
    """``worker_nice``: the workers that compiled the kernel and its configs lowered their own
    priority (kernels/priority.py); the driver, and Inductor's sidecar between them, did not; the
    binaries are the ones a worker at the default priority makes."""
    source = (corpus / KERNEL).read_text().replace("'max_autotune': False", "'max_autotune': True")
    driver = os.getpriority(os.PRIO_PROCESS, 0)
    if driver + 10 > 19:
        pytest.skip(f"this process runs at nice {driver}: a worker cannot go 10 lower")
    plain, _, _ = compile_through_router(pool, source, tmp_path / "plain", spread=True)
    workers = children(pool.process.pid)
    assert workers and {os.getpriority(os.PRIO_PROCESS, w) for w in workers} == {driver}

    kernel, stats, _ = compile_through_router(pool, source, tmp_path / "niced", spread=True, worker_nice=10)
    assert stats.jobs_local == 1 and stats.configs_spread >= 3
    niced = {w: os.getpriority(os.PRIO_PROCESS, w) for w in children(pool.process.pid)}
    assert set(niced) == set(workers)  # the same workers, none restarted
    assert min(driver + 10, 19) in niced.values() and set(niced.values()) <= {driver, min(driver + 10, 19)}
    assert os.getpriority(os.PRIO_PROCESS, 0) == driver
    assert os.getpriority(os.PRIO_PROCESS, pool.process.pid) == driver
    assert [r.kernel.hash for r in kernel.compile_results] == [r.kernel.hash for r in plain.compile_results]
