"""A new process: enable the farm with ``compile_jobs`` from argv, then do what Inductor does when
a compile of CUDA inputs begins (``AsyncCompile.wakeup()``), and print whether Inductor's own
compile pool (the stock ``AsyncCompile.process_pool``, which the Router replaces) was started."""

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
AC.wakeup()  # compile_fx does this first for CUDA inputs
# What wakeup started is done: it ran on this thread, or on one of the session's I/O threads. Every
# I/O thread takes one more task here and they all meet; the queue is first in, first out, so by
# then each task handed to them before (the wakeup's) has ended.
met = threading.Barrier(IO_THREADS + 1)
for _ in range(IO_THREADS):
    session.io.submit(met.wait, 120)
met.wait(120)
started = stock.cache_info().currsize == 1
alive = False
if started:
    pool = stock()
    process = getattr(pool, "process", None)
    alive = process is not None and process.poll() is None
raycompile.disable()
print("RESULT " + json.dumps({"before": before, "routed": routed, "started": started, "alive": alive,
                              "pool": type(stock()).__name__ if started else None}), flush=True)
