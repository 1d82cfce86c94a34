"""Quiet timings (``raycompile/observe/quiet.py``, its ``QuietTimer`` called by the adapter's seam):
while the driver times a kernel, raycompile's threads park at their checkpoints, and a timing that
another thread ran Python through is taken again once they have parked.

This machine has no GPU, so the timing is a stand-in (named so): the wall time of a call that lets
the GIL go as a launch does. The threads, the pools, the checkpoints and the frames read are real."""

from __future__ import annotations

import threading
import time

from raycompile.observe.quiet import QUIET, GatedThreadPool, Quiet, QuietTimer, frames, ran_python
from raycompile.observe.stats import Stats


def test_a_task_submitted_to_a_gated_pool_while_a_timing_is_held_starts_after_it() -> None:
    pool = GatedThreadPool(2, thread_name_prefix="test-gated")
    try:
        parked = QUIET.parked
        with QUIET.holding():
            started = pool.submit(time.monotonic)
            t_held = time.monotonic()
            time.sleep(0.3)
            assert not started.done()
            released = time.monotonic()
        assert started.result(timeout=10) >= released > t_held
        assert QUIET.parked == parked + 1
        assert pool.submit(lambda: 7).result(timeout=10) == 7  # not held: at once
    finally:
        pool.shutdown(wait=True)


def test_the_timing_thread_and_nested_holds_pass_their_own_checkpoints() -> None:
    quiet = Quiet()
    with quiet.holding():
        with quiet.holding():
            quiet.checkpoint(timeout=5)  # its own: returns at once
        assert quiet.held()
    assert not quiet.held() and quiet.parked == 0


def test_a_checkpoint_waits_no_longer_than_its_timeout() -> None:
    quiet = Quiet()
    out: list[float] = []
    with quiet.holding():
        t = threading.Thread(target=lambda: (t0 := time.monotonic(), quiet.checkpoint(timeout=0.2),
                                             out.append(time.monotonic() - t0)))
        t.start()
        t.join(timeout=10)
        assert out and 0.15 < out[0] < 5.0  # still held: it went on after its timeout, nothing hangs


def test_frames_tell_a_thread_that_ran_python_from_one_that_waited() -> None:
    import queue

    q: queue.Queue[int | None] = queue.Queue()
    waiting = threading.Event()

    def loop() -> None:
        while True:
            waiting.set()
            item = q.get()
            if item is None:
                return
            sum(i * i for i in range(2000))

    t = threading.Thread(target=loop, name="test-looper", daemon=True)
    t.start()
    try:
        assert waiting.wait(10)
        time.sleep(0.05)
        before = frames()
        time.sleep(0.05)
        assert "test-looper" not in ran_python(before)  # blocked in get: the same frame
        waiting.clear()
        before = frames()
        q.put(1)
        assert waiting.wait(10)
        time.sleep(0.05)
        assert "test-looper" in ran_python(before)  # back in get, but in another call of it
    finally:
        q.put(None)
        t.join(timeout=10)


def test_a_timing_another_thread_ran_python_through_is_taken_again_with_that_thread_parked() -> None:
    """A raycompile thread works in chunks of Python (as the I/O threads do: one kernel result, one
    payload at a time), passing a checkpoint between chunks. The first timing starts while it is
    mid-chunk; it is taken again once the thread has parked, and the smaller kept."""
    stop = threading.Event()
    chunks = [0]
    in_chunk = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            QUIET.checkpoint()
            in_chunk.set()
            end = time.perf_counter() + 0.002
            while time.perf_counter() < end:  # ~2 ms of Python
                pass
            chunks[0] += 1

    seen: list[tuple[int, int]] = []

    def stand_in_timing() -> float:
        """A stand-in for a GPU timing (no GPU here): 20 ms in which the GIL is let go; it returns
        1.0 the first time and 2.0 after, so the test sees which one was kept."""
        start = chunks[0]
        time.sleep(0.02)
        seen.append((start, chunks[0]))
        return float(len(seen))

    pool = GatedThreadPool(1, thread_name_prefix="raycompile-test-io")
    stats = Stats()
    timer = QuietTimer(None, stats)
    try:
        pool.submit(worker)
        assert in_chunk.wait(10)
        result = timer(stand_in_timing)
    finally:
        stop.set()
        pool.shutdown(wait=True)
    snap = stats.snapshot()
    assert snap["driver_timings"] == 1 and snap["driver_timings_contended"] == 1
    assert snap["driver_timings_retaken"] == 1 and len(seen) == 2
    first_start, first_end = seen[0]
    again_start, again_end = seen[1]
    assert again_start == again_end, "the worker ran during the timing taken again: it did not park"
    assert snap["driver_timings_contended_again"] == 0
    assert result == 2.0  # the quiet second, as it is (not the smaller: one sample, as every other candidate)


def test_a_retake_that_fails_keeps_the_first_and_a_failed_first_is_not_taken_again() -> None:
    calls: list[str] = []

    def contended(value: object) -> object:  # a stand-in for a GPU timing, a gated task begun during it
        calls.append("call")
        QUIET.gated(lambda: None)()  # a gated task run through: the timing is contended
        if len(calls) > 1:
            raise RuntimeError("the candidate failed the second time")
        return value

    stats = Stats()
    assert QuietTimer(None, stats)(lambda: contended(3.0)) == 3.0 and len(calls) == 2
    calls.clear()
    assert QuietTimer(None, stats)(lambda: contended(float("inf"))) == float("inf") and len(calls) == 1
    assert stats.snapshot()["driver_timings_retaken"] == 1


def test_a_thread_parked_at_a_checkpoint_goes_on_when_a_timing_ends_though_the_next_began() -> None:
    quiet = Quiet()
    waited: list[float] = []
    quiet._enter()
    t = threading.Thread(target=lambda: (t0 := time.monotonic(), quiet.checkpoint(timeout=5),
                                         waited.append(time.monotonic() - t0)))
    t.start()
    time.sleep(0.2)
    quiet._exit()
    quiet._enter()  # the next timing, back to back
    t.join(timeout=10)
    quiet._exit()
    assert waited and waited[0] < 2.0  # not held to the time-out by the timing after


def test_released_lets_the_parked_threads_go_and_holds_again_after() -> None:
    pool = GatedThreadPool(1, thread_name_prefix="test-released")
    try:
        with QUIET.holding():
            with QUIET.holding():
                with QUIET.released():  # a kernel's first run inside a timing: it needs the threads
                    assert not QUIET.held()
                    assert pool.submit(lambda: 5).result(timeout=10) == 5
                assert QUIET.held()
                late = pool.submit(time.monotonic)
                time.sleep(0.2)
                assert not late.done()  # held again, both levels
            assert QUIET.held()
            released = time.monotonic()
        assert late.result(timeout=10) >= released and not QUIET.held()
    finally:
        pool.shutdown(wait=True)


def test_a_gated_task_begun_and_done_within_a_timing_is_seen() -> None:
    """A pool's idle worker waits in C, in its loop's frame, and comes back to it after a task:
    its frame does not move; the gated tasks begun are counted instead."""
    before = frames()
    QUIET.gated(lambda: None)()
    assert "a gated task" in ran_python(before)
    assert "a gated task" not in ran_python(frames())


def test_without_quiet_timings_a_contended_timing_is_only_counted() -> None:
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(i for i in range(100))  # calls into Python each time: its frames move

    t = threading.Thread(target=spin, name="test-spinner", daemon=True)
    t.start()
    calls = [0]

    def stand_in_timing() -> float:  # a stand-in for a GPU timing (no GPU here)
        calls[0] += 1
        time.sleep(0.02)
        return 1.0

    stats = Stats()
    try:
        assert QuietTimer(None, stats, quiet=False)(stand_in_timing) == 1.0
    finally:
        stop.set()
        t.join(timeout=10)
    snap = stats.snapshot()
    assert calls[0] == 1 and snap["driver_timings_contended"] == 1 and snap["driver_timings_retaken"] == 0


def test_inductors_compile_pool_sets_no_result_while_a_timing_is_held() -> None:
    """The compile pool's reader thread (Inductor's ``SubprocPool``: not raycompile's) parks after
    it receives a worker's result, before it unpickles it and wakes whoever waits on it
    (``subproc_results_parked``), and goes on when the timing ends."""
    import operator

    from torch._inductor.compile_worker.subproc_pool import SubprocPool

    from raycompile.wrapper.compat.autotune import subproc_results_parked

    pool = SubprocPool(1)  # Inductor's own compile workers
    try:
        assert pool.submit(operator.add, 1, 2).result(timeout=120) == 3  # the worker is up
        with subproc_results_parked(QUIET.checkpoint):
            # the reader was already waiting inside stock's _recv_msg: its next message returns
            # through it, and the reader calls the seam's from then on
            assert pool.submit(operator.add, 0, 1).result(timeout=30) == 1
            parked = QUIET.parked
            with QUIET.holding():
                future = pool.submit(operator.add, 2, 3)
                time.sleep(2.0)  # the worker answered long since; its result waits for the timing to end
                assert not future.done()
                released = time.monotonic()
            assert future.result(timeout=30) == 5 and time.monotonic() >= released
            assert QUIET.parked == parked + 1
            assert pool.submit(operator.add, 3, 4).result(timeout=30) == 7  # no timing: at once
    finally:
        pool.shutdown()
    import torch._inductor.compile_worker.subproc_pool as subproc_pool

    assert subproc_pool._recv_msg.__module__ == subproc_pool.__name__  # stock's again
