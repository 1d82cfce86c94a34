"""A compile worker's CPU priority: below its driver's, so that a busy node's compiles never delay
the driver's threads, nor the GPU timings taken there and on the node's GPU actors.

Under max-autotune the node's compile workers (Inductor's process pool, as the farm fills it) and
their ``ptxas`` children keep every CPU busy for minutes, while the driver lowers, and it and the
GPU actors time candidates of a few microseconds each. A Triton kernel's timing includes the
time its launching thread waited for a CPU: measured on an H200 with 16 processes spinning, a
128x128x64 GEMM of the GPT-2 step timed 1.47x its quiet time, and 1.00x with the same processes
at ``nice 10`` (``benchmarks/timing_noise.py``). Stock times a decision's choices after their
precompile, on a quieter machine; the farm overlaps the two, so its workers yield the CPU.

``at_priority`` wraps a job sent to a worker: the worker lowers its own priority once, at its
first such job (its children, ``ptxas`` among them, inherit it), then runs the job. A job that runs
in the driver itself (a pool of one thread runs its jobs synchronously) changes nothing there.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_lowered = False  # this process lowered its priority already (a forked child inherits both)


def lower_once(nice: int) -> None:
    """Lower the calling thread's CPU priority by ``nice`` (0-19), once per process; never raises
    (a process may always lower its own priority; where the system refuses, it runs as it was).
    On Linux a nice value is a thread's: a pool worker runs its jobs on its main thread, and the
    processes that thread starts (``ptxas``) inherit it. With the kernel's autogroups it orders
    the processes of one session (the driver's: its pool, an embedded Ray's processes), not those
    of another, such as a ``ray start`` cluster's GPU actors."""
    global _lowered
    if _lowered or nice <= 0:
        return
    _lowered = True
    with contextlib.suppress(OSError):
        os.nice(min(int(nice), 19))


def at_priority(nice: int, driver_pid: int, fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` in a compile worker whose priority is ``nice`` below the driver's (the
    process ``driver_pid``, which this never lowers)."""
    if os.getpid() != driver_pid:
        lower_once(nice)
    return fn(*args)


class AtPriority:
    """A compile pool (Inductor's ``SubprocPool``, or anything with ``submit(fn, *args)``) whose
    jobs run ``at_priority``: what the farm sends this node's compile workers. ``nice`` 0: sent as
    they are."""

    def __init__(self, pool: Any, nice: int, driver_pid: int) -> None:
        self.pool, self.nice, self.driver_pid = pool, nice, driver_pid

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.nice <= 0:
            return self.pool.submit(fn, *args, **kwargs)
        if kwargs:
            fn = functools.partial(fn, **kwargs)
        return self.pool.submit(at_priority, self.nice, self.driver_pid, fn, *args)

    def __getattr__(self, name: str) -> Any:  # the pool's own attributes (shutdown, ...)
        if name == "pool" or name.startswith("__"):  # not set yet (a copy, an unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.pool, name)
