"""Autotuning on the cluster's GPUs, the session's part (``AutotuneSession``; the user-facing
``raycompile.autotune`` for one's own Triton kernel is ``raycompile/autotune.py``).

While the farm is enabled and the cluster has GPUs of the driver's model, Inductor's autotune
benchmarks (max-autotune choices, and the configs of every Triton kernel with several) run on GPU
actors, one per GPU of every GPU node, in parallel (``wrapper/gpu_autotune.py``,
``orchestrator/gpu_pool.py``); winners are cached, so a later process benchmarks nothing. Every
max-autotune decision's timings are filed in the cache too (``cache/decisions.py``), on GPU or CPU:
a process, on any node, that meets a decision already made takes its timings, so it picks the same,
and compiles and times no candidate. ``stats()`` counts ``benchmarks``, ``benchmark_seconds`` and
``gpus`` (GPU id -> benchmarks)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .errors import FarmUnavailableError
from .observe.stats import Stats
from .settings import Settings

log = logging.getLogger("raycompile.autotune")


class AutotuneSession:
    """The GPU actors of a raycompile session and, when this process has a GPU (or ``group`` is
    given), the Inductor hooks that send its max-autotune benchmarks to the actors of its GPU
    model and file every Triton kernel's config winner in the cache.

    ``source``: where the session's ``GPUPool`` comes from (``orchestrator.startup.Startup``:
    ``gpu_pool()`` waits for Ray, None without it; ``started_gpu_pool()`` never waits), so nothing
    here waits for Ray until a benchmark needs the actors; default: a pool of its own on the Ray
    this process is connected to. ``measure`` replaces the GPU timing on the actors of
    that pool (tests pass a test double). ``compile_seams=False``: max-autotune's seams wait for
    ``install_compile`` (the first graph compile)."""

    def __init__(self, stats: Stats, cache: Any, settings: Settings, group: str | None = None,
                 measure: Any = None, source: Any = None, submit: Callable[..., Any] | None = None,
                 registry: Any = None, compile_seams: bool = True) -> None:
        from .cache.decisions import DecisionStore
        from .cache.winners import WinnerStore
        from .kernels.benchmark import GPUTiming, local_cpu, local_gpu
        from .wrapper import compat
        from .wrapper.decisions import SharedDecisions
        from .wrapper.gpu_autotune import AutotuneHooks

        self.stats, self.settings = stats, settings
        self._own: Any = None
        if source is None:
            from .orchestrator.gpu_pool import GPUPool

            self._own = GPUPool(stats, measure or GPUTiming(compat.TOOLCHAIN), job_timeout_s=settings.job_timeout_s,
                                profile=settings.profile_gpu_workers)
        self._source = source
        self._prestarted = False
        self.winners = WinnerStore(cache, submit=submit)
        here = local_gpu() if group is None else None
        self.group = group or (here.group if here is not None else None)
        self.hooks: AutotuneHooks | None = None
        if self.group is not None:
            self.hooks = AutotuneHooks(self._runner(wall=True), cache, self.winners, stats,
                                       background=self._runner(wall=False), hold=self._hold,
                                       configs=settings.autotune_configs, registry=registry,
                                       quiet=settings.quiet_timings)
            self.hooks.install(compile_seams)
        # max-autotune's decisions (GPU or CPU) shared through the cache: every process picks the same
        self.decisions = SharedDecisions(DecisionStore(cache, submit=submit), stats, (self.group, local_cpu()))
        self._decisions: contextlib.ExitStack | None = contextlib.ExitStack()
        self._decisions.enter_context(self.decisions.install())

    @property
    def pool(self) -> Any:
        """The GPU pool (waits for the session's Ray). Raises FarmUnavailableError without Ray."""
        pool = self._own if self._own is not None else self._source.gpu_pool()
        if pool is None:
            raise FarmUnavailableError("the session's Ray", "no Ray connection, so no GPU workers")
        return pool

    def _runner(self, wall: bool) -> Callable[[Sequence[Any]], list[Any]]:
        group = self.group
        return lambda work: self.pool.run(work, group, wall)

    def _hold(self) -> contextlib.AbstractContextManager[None]:
        """While this process times a candidate itself: the actors on its GPU take no job (only
        if they exist: holding never starts them, nor waits for Ray)."""
        pool = self._own if self._own is not None else self._source.started_gpu_pool()
        return pool.hold_here() if pool is not None and pool.started else contextlib.nullcontext()

    @classmethod
    def for_session(cls, stats: Stats, cache: Any, settings: Settings, source: Any,
                    submit: Callable[..., Any] | None = None, registry: Any = None,
                    compile_seams: bool = True) -> AutotuneSession | None:
        """A session's autotuning, or None when turned off (``autotune=False``: Inductor benchmarks
        as it always does). Made at the session's first Inductor compile (it asks CUDA for this
        process's GPU); the actors start only when a benchmark goes to them."""
        if not settings.autotune:
            return None
        return cls(stats, cache, settings, source=source, submit=submit, registry=registry,
                   compile_seams=compile_seams)

    def install_compile(self) -> None:
        """Max-autotune's seams, where ``compile_seams=False`` left them out (a process that loaded
        compiled frames now compiles a graph)."""
        if self.hooks is not None:
            self.hooks.install_compile()

    def prestart(self) -> None:
        """Start the GPU actors in the background when this process will send benchmarks to them
        (max-autotune, or ``autotune_configs="actors"``). The Router calls this at each Triton
        kernel it sends to the farm, on Inductor's thread, so it reads the compile's config; it
        never waits."""
        from .wrapper import compat

        if self.hooks is None or self._prestarted:
            return
        if not (compat.max_autotune_on() or self.settings.autotune_configs == "actors"):
            return
        self._prestarted = True
        if self._own is not None:
            self._own.prestart()
            return

        def start() -> None:
            try:
                pool = self.pool
            except FarmUnavailableError:
                return
            pool.prestart()

        threading.Thread(target=start, name="raycompile-gpu-prestart", daemon=True).start()

    def close(self) -> None:
        if self.hooks is not None:
            self.hooks.uninstall()
        decisions, self._decisions = self._decisions, None
        if decisions is not None:
            decisions.close()
        if self._own is not None:
            self._own.close()
