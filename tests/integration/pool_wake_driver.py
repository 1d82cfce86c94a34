"""A new process: enable the farm with ``compile_jobs`` from argv, then probe Inductor's pool
(``AsyncCompile.wakeup()``) as an output module's load does, then as a compile of CUDA inputs
does when it begins, and print whether Inductor's own compile pool (the stock
``AsyncCompile.process_pool``, which the Router replaces) was started after each."""

from __future__ import annotations

import json
import sys
import threading

import torch._inductor.async_compile as async_compile
import torch._inductor.compile_fx  # noqa: F401 - Inductor loaded: enable() installs the hooks at once

import raycompile
from raycompile.session import IO_THREADS

mode, cache_dir = sys.argv[1], sys.argv[2]
AC = async_compile.AsyncCompile
stock = AC.__dict__["process_pool"].__func__  # lru_cache'd: its size says whether the pool exists
before = stock.cache_info().currsize
session = raycompile.enable(compile_jobs=mode, cache_dir=cache_dir, address="" if mode == "local" else None)
routed = AC.__dict__["process_pool"].__func__ is not stock  # the Router is Inductor's pool now
if mode != "local":
    raycompile.ready(120)  # the farm is up: whether jobs go to Ray is known


def settle() -> None:
    """What wakeup started is done: it ran on this thread, or on one of the session's I/O threads.
    Every I/O thread takes one more task here and they all meet; the queue is first in, first out,
    so by then each task handed to them before (the wakeup's) has ended."""
    met = threading.Barrier(IO_THREADS + 1)
    for _ in range(IO_THREADS):
        session.io.submit(met.wait, 120)
    met.wait(120)


# An output module loading (a compiled frame or an FX-graph entry served) probes the pool too, where
# nothing compiles: that starts no pool
AC.wakeup()
settle()
on_load = stock.cache_info().currsize == 1
# A compile begins: what the session's gate on Inductor's backend runs (raycompile/session.py), then
# compile_fx's probe, as it does first for CUDA inputs (Inductor sends its pool the readiness job
# once per process, so the gate warms the pool where the load's probe started nothing)
session._compiling()
AC.wakeup()
settle()
started = stock.cache_info().currsize == 1
alive = False
if started:
    pool = stock()
    process = getattr(pool, "process", None)
    alive = process is not None and process.poll() is None
raycompile.disable()
print("RESULT " + json.dumps({"before": before, "routed": routed, "on_load": on_load, "started": started,
                              "alive": alive,
                              "pool": type(stock()).__name__ if started else None}), flush=True)
