"""raycompile: a compile farm for torch.compile on Ray.

    import raycompile
    raycompile.enable()            # embedded local Ray; or address="auto" / "host:6379" / RAY_ADDRESS
    model = torch.compile(model)   # Inductor's kernel compiles now run on the farm
    raycompile.stats()
    raycompile.disable()           # stock Inductor again
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

from .autotune import AutotuneResult, autotune
from .errors import (
    AutotuneError,
    CompileError,
    FarmUnavailableError,
    KernelSourceError,
    NoGPUError,
    RaycompileError,
    SettingsError,
    UnknownArchError,
    VersionMismatchError,
)
from .settings import Settings

__version__ = "0.1.0"
log = logging.getLogger("raycompile")


class _Session:
    """What ``enable`` sets up and ``disable`` tears down."""

    def __init__(self, settings: Settings) -> None:
        from .orchestrator import Farm, Progress, Stats, progress_wanted
        from .wrapper import Hooks, Router, stock_pools

        self.settings = settings
        self.stats = Stats()
        self.farm: Farm | None = None
        from .cache import Cache
        from .cache.tiered import check_shared_url

        check_shared_url(settings.shared_cache)  # a bad setting fails here, with nothing started
        progress = Progress(force_terminal=settings.progress is True) if progress_wanted(settings.progress) else None
        import ray

        # an embedded Ray (no address, none running) has no other drivers to share compiles with
        joins_cluster = settings.address is not None or ray.is_initialized()
        try:
            self.farm = Farm(settings, self.stats, progress)
        except FarmUnavailableError as e:
            if not settings.fallback:
                raise
            log.warning("raycompile: %s\nCompiling locally with stock Inductor; each local compile "
                        "is counted in raycompile.stats()['fallbacks'].", e)
        shared = settings.shared_cache
        if shared == "auto":
            shared = "ray://head" if self.farm is not None and len(self.farm.nodes) > 1 else "none"
        self.shared_cache = shared
        farm = self.farm

        def ray_tier(secret: bytes) -> object:
            from .orchestrator.cache_service import RayHeadTier

            return RayHeadTier(secret, root=settings.head_cache_dir, namespace=settings.namespace,
                               timeout_s=settings.connect_timeout_s)

        self.dedupe: Any = None  # orchestrator.coordinator.ClusterDedupe
        try:
            cache = Cache.from_settings(settings.cache_dir, shared, settings.cache_max_bytes, self.stats,
                                        ray_tier if farm is not None and farm.alive else None)
            if (settings.cluster_dedupe and joins_cluster and shared not in ("", "none")
                    and farm is not None and farm.alive):
                # with a shared tier, drivers that miss on the same key wait for one compile
                from .orchestrator.coordinator import ClusterDedupe

                self.dedupe = ClusterDedupe.start(settings, self.stats, scope=shared)
            process_pool, submit = stock_pools()
            self.hooks = Hooks(Router(self.farm, self.stats, process_pool, submit, cache, self.dedupe))
            self.hooks.install()
            from .autotune import AutotuneSession  # benchmarks on the cluster's GPU actors, if it has GPUs

            self.autotune = AutotuneSession.start(self.stats, cache, settings, farm)
            if self.autotune is not None:
                self.hooks.router.on_triton_job = self.autotune.prestart
        except BaseException:
            self.close()
            raise

    def node_names(self) -> dict[str, str]:
        return {n: info["hostname"] for n, info in self.farm.nodes.items()} if self.farm else {}

    def close(self) -> None:
        self.hooks_uninstall()
        if getattr(self, "autotune", None) is not None:
            self.autotune.close()
        if self.dedupe is not None:
            self.dedupe.close()
        if self.farm is not None:
            self.farm.close()
        if self.settings.trace:
            from .orchestrator.report import write_trace

            write_trace(self.settings.trace, self.stats.job_records(), self.node_names())

    def hooks_uninstall(self) -> None:
        hooks = getattr(self, "hooks", None)
        if hooks is not None:
            hooks.uninstall()


_lock = threading.Lock()
_session: _Session | None = None
_last_stats: dict[str, Any] | None = None
_last_report: str | None = None
_atexit_registered = False


def enable(address: str | None = None, **settings: Any) -> None:
    """Route torch.compile's kernel compiles through the farm until ``disable()``.

    ``address``: None starts an embedded local Ray (or joins RAY_ADDRESS); "auto" joins the local
    cluster; "host:6379" or "ray://host:10001" a remote one. Other keywords are ``Settings``
    fields (``job_timeout_s``, ``num_cpus``, ``fallback``, ...), each also read from RAYCOMPILE_*.

    Raises SettingsError for a bad setting, VersionMismatchError when a node runs another torch or
    triton, and FarmUnavailableError when Ray is unreachable and ``fallback=False``. With fallback
    (the default) an unreachable Ray warns once and compiles locally.
    """
    global _session, _atexit_registered
    resolved = Settings.resolve(address=address, **settings)
    with _lock:
        if not _atexit_registered:  # restore stock Inductor before its own atexit hooks run
            atexit.register(disable)
            _atexit_registered = True
        if _session is not None:
            _close_locked()
        _session = _Session(resolved)


def disable() -> None:
    """Restore stock Inductor and close the farm (shutting down a Ray this process started)."""
    with _lock:
        _close_locked()


def _close_locked() -> None:
    global _session, _last_stats, _last_report
    if _session is not None:
        _last_stats = _session.stats.snapshot()
        _last_report = _report(_session)
        _session.close()
        _session = None


def is_enabled() -> bool:
    return _session is not None


@contextlib.contextmanager
def enabled(address: str | None = None, **settings: Any) -> Iterator[None]:
    """``with raycompile.enabled(): ...`` enables the farm for the block, then disables it."""
    enable(address, **settings)
    try:
        yield
    finally:
        disable()


def stats() -> dict[str, Any]:
    """Counters of the current session (or of the last one, after ``disable``): jobs, deduped,
    dedupe_cluster (answered by another driver's compile), fallbacks, failures, compile_seconds,
    nodes (node id -> jobs), workers, the cache counters, and autotuning on GPU actors: benchmarks,
    benchmark_seconds (on the actors), benchmark_wall_seconds (this process waiting on them), gpus
    (GPU id -> benchmarks), benchmark_failures, benchmarks_local,
    benchmarks_verified (apparent fastest candidates timed again in this process)."""
    session = _session
    if session is not None:
        return session.stats.snapshot()
    if _last_stats is not None:
        return dict(_last_stats)
    from .orchestrator import Stats

    return Stats().snapshot()


def _report(session: _Session) -> str:
    from .orchestrator.report import summary

    return summary(session.stats.snapshot(), session.stats.job_records(), session.node_names())


def report() -> str:
    """A summary of the current (or last) session: jobs, cache hits per tier, dedupes, failures,
    seconds per node and the 10 slowest kernels. Its numbers are ``stats()``'s."""
    session = _session
    if session is not None:
        return _report(session)
    if _last_report is not None:
        return _last_report
    from .orchestrator import Stats
    from .orchestrator.report import summary

    return summary(Stats().snapshot(), [])


__all__ = [
    "AutotuneError", "AutotuneResult", "CompileError", "FarmUnavailableError", "KernelSourceError", "NoGPUError",
    "RaycompileError", "Settings", "SettingsError", "UnknownArchError", "VersionMismatchError", "autotune", "disable",
    "enable", "enabled", "is_enabled", "report", "stats",
]
