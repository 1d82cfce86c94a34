"""A compile worker's priority (``kernels/priority.py``): lowered once, in the worker only."""

from __future__ import annotations

import concurrent.futures
import copy
import functools
import multiprocessing
import os

import pytest

from raycompile.kernels import priority


def nice_here() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def test_a_job_lowers_its_workers_priority_once_and_never_the_drivers() -> None:
    driver = nice_here()
    if driver + 5 > 19:
        pytest.skip(f"this process runs at nice {driver}: a worker cannot go 5 lower")
    ctx = multiprocessing.get_context("spawn")  # a fresh worker, as Inductor's pool forks from its sidecar
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as workers:
        first = workers.submit(priority.at_priority, 5, os.getpid(), nice_here).result(60)
        again = workers.submit(priority.at_priority, 5, os.getpid(), nice_here).result(60)
        assert first == again == min(driver + 5, 19)  # lowered once, not at each job
    # a job the driver runs itself (a pool of one thread runs it synchronously) changes nothing
    assert priority.at_priority(5, os.getpid(), nice_here) == driver


def test_at_priority_0_sends_the_job_as_it_is() -> None:
    sent = []

    class Pool:
        def submit(self, fn, *args):  # records what the farm hands Inductor's pool
            sent.append((fn, args))

        marker = "the pool's own"

    pool = Pool()
    priority.AtPriority(pool, 0, os.getpid()).submit(abs, -1)
    priority.AtPriority(pool, 7, 123).submit(abs, -1)
    assert sent == [(abs, (-1,)), (priority.at_priority, (7, 123, abs, -1))]
    wrapped = priority.AtPriority(pool, 7, 123)
    assert wrapped.marker == "the pool's own"
    wrapped.submit(int, "7", base=8)  # keyword arguments travel with the job
    fn, args = sent[-1]
    assert fn is priority.at_priority and args[:2] == (7, 123) and args[2]("7") == 7
    assert isinstance(args[2], functools.partial)
    assert copy.copy(wrapped).pool is pool  # no recursion through __getattr__ before ``pool`` is set
