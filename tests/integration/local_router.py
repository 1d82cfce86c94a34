"""What the Router tests that compile on this node share: the session's start as it is on one
machine, the corpus kernel they compile, how they send it, and the test double ``HeldPool``."""

from __future__ import annotations

import functools
import os
import threading
from concurrent.futures import Future
from typing import Any

from raycompile.wrapper import compat
from raycompile.wrapper.compat.triton import jit_function_name
from raycompile.wrapper.hooks import Router

# a reduction (XBLOCK x R0_BLOCK) Inductor generated for an H100 (torch 2.11 corpus)
KERNEL = "c7v64y2hk3bj7jx7bksh5qct3sgwrnaslimos32k3fopact4ovks.py"


class CompilesHere:
    """The session's start as it is on one machine: no Ray, this node's compile workers."""

    farm = None
    dedupe = None

    def wait_farm(self) -> None:
        return None

    def compiles_here(self, farm: Any, wait: bool = False) -> bool:
        return True


class HeldPool:
    """Test double: Inductor's real ``SubprocPool``, whose jobs are held until ``start()`` (its
    workers starting); records what was sent to it."""

    def __init__(self, pool: Any) -> None:
        self.pool, self.started, self.sent = pool, threading.Event(), []

    def start(self) -> None:
        self.started.set()

    def submit(self, fn: Any, *args: Any) -> Future[Any]:
        self.sent.append(getattr(fn, "__name__", repr(fn)))
        out: Future[Any] = Future()

        def forward() -> None:
            self.started.wait(120)
            inner = self.pool.submit(fn, *args)
            inner.add_done_callback(lambda f: out.set_exception(f.exception()) if f.exception()
                                    else out.set_result(f.result()))

        threading.Thread(target=forward, daemon=True).start()
        return out


def submit(router: Router, source: str, env: dict[str, str]) -> Future[Any]:
    from torch._inductor.codecache import _load_triton_kernel_from_source
    from torch._inductor.runtime.compile_tasks import _worker_compile_triton

    name = jit_function_name(source)
    load = functools.partial(_load_triton_kernel_from_source, name, source)
    return router.submit(_worker_compile_triton, load, env, compat.triton_extra_config(source))


def env_here() -> dict[str, str]:
    return {v: os.environ[v] for v in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
