"""Quiet timings: while this process times a kernel on its GPU, its other threads hold still.

A GPU timing taken in Python (Inductor's ``benchmarker.benchmark_gpu``: max-autotune's ATen
choices, the candidates confirmed here, a kernel's configs at its first run) launches each repeat
from Python between two CUDA events. Every launch lets the GIL go and takes it back; if another
thread of the process runs Python meanwhile, the launch waits for the GIL while the GPU idles
between the events, and that wait is timed. Measured on an H200 (``benchmarks/timing_noise.py
--gil 2``, 2026-11-29): with two threads running Python, every GEMM of the GPT-2 step was timed at
5-10 ms instead of 8-28 us. Stock Inductor times a decision after its precompile, with nothing
else running; the farm's driver times while its own threads (kernel results, candidates' payloads,
the next decisions' background timings) run Python. So:

- ``Quiet.holding()`` wraps each timing this process takes (``wrapper/gpu_autotune.py``): while it
  is held, a background thread of raycompile that reaches ``checkpoint()`` (each task of
  raycompile's thread pools, ``GatedThreadPool``, and the loops of its own threads; and Inductor's
  compile pool's reader after each result it receives, ``subproc_results_parked``) waits there
  until the timing ends (at most ``PARK_S``);
- ``ran_python()`` tells which other threads ran Python during a timing (their innermost frames
  moved): a thread mid-task when the timing began. The timer takes such a timing again, once the
  threads have parked, and keeps the smaller (a wait for the GIL only ever adds time).

Part of the base layer: every layer's threads check in here.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

# The longest a background thread waits at a checkpoint for one timing to end (a timing takes
# milliseconds to a second; this bounds a wait on a timing that never ends).
PARK_S = 5.0


class Quiet:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._holders: dict[int, int] = {}  # thread ident -> depth of its holding()
        self._ended = 0  # timings ended (all holders gone): a parked thread goes on at the next
        self.parked = 0  # checkpoints that waited (tests, debugging)
        self.tasks = 0  # gated tasks begun: one begun and done within a timing moves no frame it leaves

    def holding(self) -> contextlib.AbstractContextManager[None]:
        """A context manager: this thread times something; checkpoints of other threads wait."""
        return _Held(self)

    def held(self) -> bool:
        return bool(self._holders)

    def checkpoint(self, timeout: float = PARK_S) -> None:
        """Where a background thread may hold still: returns at once unless another thread is
        timing, else when that timing ends (or after ``timeout`` s). A thread woken by the end of
        one timing goes on, though the next may have begun before it ran: timings back to back
        (a kernel's configs, coordinate descent's sweeps) would otherwise hold it to the time-out."""
        if not self._holders:  # the common case: no lock taken
            return
        me = threading.get_ident()
        with self._cond:
            if me in self._holders or not self._holders:
                return
            ended = self._ended
            self.parked += 1
            self._cond.wait_for(lambda: self._ended != ended, timeout=timeout)

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        """This thread's timing let go of while inside: a kernel's first run inside a timing (a
        subgraph choice, a multi-kernel's sub-kernels) tunes that kernel, whose compiles and turns
        need the threads a timing parks. Its own timings hold again; the timing around it sees the
        others run, and is taken again."""
        me = threading.get_ident()
        with self._cond:
            depth = self._holders.pop(me, 0)
            if depth:
                self._ended_if_none()
        try:
            yield
        finally:
            if depth:
                with self._cond:
                    self._holders[me] = self._holders.get(me, 0) + depth

    def gated(self, fn: Callable[..., T]) -> Callable[..., T]:
        """``fn`` that first passes a checkpoint (a task submitted to a thread pool)."""

        def run(*args: Any, **kwargs: Any) -> T:
            self.checkpoint()
            self.tasks += 1
            return fn(*args, **kwargs)

        return run

    def _enter(self) -> None:
        me = threading.get_ident()
        with self._cond:
            self._holders[me] = self._holders.get(me, 0) + 1

    def _exit(self) -> None:
        me = threading.get_ident()
        with self._cond:
            depth = self._holders.get(me, 0) - 1
            if depth > 0:
                self._holders[me] = depth
            else:
                self._holders.pop(me, None)
                self._ended_if_none()

    def _ended_if_none(self) -> None:  # with self._cond
        if not self._holders:
            self._ended += 1
            self._cond.notify_all()


class _Held:
    def __init__(self, quiet: Quiet) -> None:
        self._quiet = quiet

    def __enter__(self) -> None:
        self._quiet._enter()

    def __exit__(self, *exc: object) -> None:
        self._quiet._exit()


QUIET = Quiet()


Frames = dict[int, tuple[Any, int]]
TASKS = -1  # the key of frames() under which it keeps QUIET.tasks


def frames() -> Frames:
    """Every other thread's innermost Python frame and its last instruction. The frame objects are
    kept (so none is freed and its address reused): a thread that returned and called again, back
    to the same line, has another frame. A thread pool's idle worker waits in C, in the frame of its
    loop, and comes back to the same frame and instruction after a task: the gated tasks begun
    are kept too (``TASKS``); an ungated pool's task begun and done within is not seen."""
    me = threading.get_ident()
    out: Frames = {ident: (frame, frame.f_lasti) for ident, frame in sys._current_frames().items() if ident != me}
    out[TASKS] = (None, QUIET.tasks)
    return out


def ran_python(before: Frames, after: Frames | None = None) -> list[str]:
    """Names of the threads whose Python moved between ``before`` and ``after`` (now): threads
    that started, or whose innermost frame changed. A thread waiting (a lock, a socket, a
    checkpoint) keeps its frame."""
    after = frames() if after is None else after
    names = {t.ident: t.name for t in threading.enumerate()}
    moved = []
    if before.get(TASKS, (None, 0))[1] != after.get(TASKS, (None, 0))[1]:
        moved.append("a gated task")
    for ident, (frame, lasti) in after.items():
        if ident == TASKS:
            continue
        was = before.get(ident)
        if was is None or was[0] is not frame or was[1] != lasti:
            moved.append(names.get(ident, f"thread {ident}"))
    return sorted(moved)


class GatedThreadPool(concurrent.futures.ThreadPoolExecutor):
    """A thread pool whose every task first passes ``QUIET.checkpoint()``: raycompile's background
    pools start no task while this process times a kernel."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        return super().submit(QUIET.gated(fn), *args, **kwargs)
