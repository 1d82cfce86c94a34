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
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# The longest a background thread waits at a checkpoint for one timing to end (a timing takes
# milliseconds to a second; this bounds a wait on a timing that never ends).
PARK_S = 5.0


class Quiet:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._holders: dict[int, int] = {}  # thread ident -> depth of its holding()
        self.parked = 0  # checkpoints that waited (tests, debugging)

    def holding(self) -> _Held:
        """A context manager: this thread times something; checkpoints of other threads wait."""
        return _Held(self)

    def held(self) -> bool:
        return bool(self._holders)

    def checkpoint(self, timeout: float = PARK_S) -> None:
        """Where a background thread may hold still: returns at once unless another thread is
        timing, else when that timing ends (or after ``timeout`` s)."""
        if not self._holders:  # the common case: no lock taken
            return
        me = threading.get_ident()
        with self._cond:
            if me in self._holders or not self._holders:
                return
            self.parked += 1
            self._cond.wait_for(lambda: not self._holders, timeout=timeout)

    def gated(self, fn: Callable[..., T]) -> Callable[..., T]:
        """``fn`` that first passes a checkpoint (a task submitted to a thread pool)."""

        def run(*args: Any, **kwargs: Any) -> T:
            self.checkpoint()
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
                if not self._holders:
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


def frames() -> Frames:
    """Every other thread's innermost Python frame and its last instruction. The frame objects are
    kept (so none is freed and its address reused): a thread that returned and called again, back
    to the same line, has another frame."""
    me = threading.get_ident()
    return {ident: (frame, frame.f_lasti) for ident, frame in sys._current_frames().items() if ident != me}


def ran_python(before: Frames, after: Frames | None = None) -> list[str]:
    """Names of the threads whose Python moved between ``before`` and ``after`` (now): threads
    that started, or whose innermost frame changed. A thread waiting (a lock, a socket, a
    checkpoint) keeps its frame."""
    after = frames() if after is None else after
    names = {t.ident: t.name for t in threading.enumerate()}
    moved = []
    for ident, (frame, lasti) in after.items():
        was = before.get(ident)
        if was is None or was[0] is not frame or was[1] != lasti:
            moved.append(names.get(ident, f"thread {ident}"))
    return sorted(moved)


class GatedThreadPool(concurrent.futures.ThreadPoolExecutor):
    """A thread pool whose every task first passes ``QUIET.checkpoint()``: raycompile's background
    pools start no task while this process times a kernel."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        return super().submit(QUIET.gated(fn), *args, **kwargs)
