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

``QuietTimer`` is the timer itself: ``wrapper/compat/autotune.py``'s ``driver_timing_held`` calls
it for each ``benchmark_gpu``. Part of the base layer: every layer's threads check in here.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import math
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from .stats import Stats

T = TypeVar("T")

log = logging.getLogger("raycompile.autotune")
# each contended timing here, with the threads that ran Python through it (``extra``: contenders,
# again, and ms: the two timings): what a diagnosis of the driver's timings listens to
# (benchmarks/ranks.py)
quiet_log = logging.getLogger("raycompile.autotune.quiet")

# A contended timing taken again that differs from the first by more than this share, itself
# contended, is taken a third time (QuietTimer).
DISAGREE = 0.10
# a context manager factory: while inside, no GPU actor times on this process's GPU (GPUPool.hold_here)
Hold = Callable[[], contextlib.AbstractContextManager[None]]

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


class QuietTimer:
    """Each GPU timing this process takes (``driver_timing_held``'s ``timed``): the GPU actors on
    this GPU hold (``hold``), and, with ``quiet``, raycompile's threads park at their checkpoints
    (``QUIET``). A timing during which another thread ran Python (one mid-task when it began) may
    include waits for the GIL, so it is taken again, the threads now parked (``_again``: stock times
    with nothing else running).

    On the GPT-2 step's max-autotune (H200, 2026-11-29, ``benchmarks/ranks.py``): 177 of 361
    timings here were contended, mostly by threads that woke from a wait (a compile worker's
    result) and ran to their next checkpoint; taken again, the median first/again was 1.003, but
    9 had been inflated 1.5-7.5x (a 4.7 us kernel timed at 35 us). Counted
    (``driver_timings``, ``driver_timings_contended``, ``driver_timings_retaken``,
    ``driver_timings_contended_again``); without ``quiet`` the contended timings are only counted."""

    def __init__(self, hold: Hold | None, stats: Stats | None = None, quiet: bool = True) -> None:
        self.hold, self.stats, self.quiet = hold, stats, quiet

    def __call__(self, call: Callable[[], Any]) -> Any:
        with self.hold() if self.hold is not None else contextlib.nullcontext():
            with QUIET.holding() if self.quiet else contextlib.nullcontext():
                before = frames()
                first = call()
                moved = ran_python(before)
                if not moved:
                    self._count(driver_timings=1)
                    return first
                # a list (return_mode="all") or a failed timing (inf, nan) is kept: nothing to retake
                if not self.quiet or not isinstance(first, float) or not math.isfinite(first):
                    self._count(driver_timings=1, driver_timings_contended=1)
                    quiet_log.debug("raycompile: %s ran Python through a timing here (%s)", ", ".join(moved), first,
                                    extra={"contenders": moved, "again": []})
                    return first
                kept, again, still = self._again(call, first)
                self._count(driver_timings=1, driver_timings_contended=1, driver_timings_retaken=1,
                            driver_timings_contended_again=int(bool(still)))
                quiet_log.debug("raycompile: a timing here was taken again: %s ran Python through it (%.4f ms, "
                                "then %.4f ms%s)", ", ".join(moved), first, again,
                                f"; {', '.join(still)} again" if still else "",
                                extra={"contenders": moved, "again": still, "ms": (first, again)})
                return kept

    @staticmethod
    def _again(call: Callable[[], Any], first: float) -> tuple[float, float, list[str]]:
        """(the timing kept, the second, who ran Python through the second). A quiet second is
        kept as it is: a timing as stock takes it, one sample as every other candidate's (the
        smaller of two would favour the contended). Both contended: the smaller; and where they
        differ by more than DISAGREE, a third, kept alone if it was quiet."""
        try:
            before = frames()
            again = float(call())
            still = ran_python(before)
            if not still:
                return again, again, still
            if math.isfinite(again) and abs(first - again) > DISAGREE * min(first, again):
                before = frames()
                third = float(call())
                if not ran_python(before):
                    return third, again, still
                return min(first, again, third), again, still
            return min(first, again), again, still
        except Exception as e:  # noqa: BLE001 - the first timing stands (stock's own errors come from it)
            log.debug("raycompile: a timing here taken again failed (%s: %s); the first kept", type(e).__name__, e)
            return first, first, ["(failed)"]

    def _count(self, **counts: int) -> None:
        if self.stats is not None:
            self.stats.add(**counts)
