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

from . import session as session_module
from ._version import __version__ as __version__
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
from .graph_worker import compile_graph
from .session import Session
from .settings import Settings

log = logging.getLogger("raycompile")


_atexit_lock = threading.Lock()
_atexit_registered = False


def enable(address: str | None = None, **settings: Any) -> Session:
    """Route torch.compile's kernel compiles through the farm until ``disable()``. Returns at
    once: Ray is joined (or started) in the background, and the first compile that misses the
    cache waits for it; a process whose compiles all hit the cache never waits for Ray.

    ``address``: None joins RAY_ADDRESS or a cluster started on this machine, else starts an
    embedded local Ray; "auto" joins RAY_ADDRESS or the local cluster (an error without one);
    "host:6379" or "ray://host:10001" a remote one. Other keywords are ``Settings`` fields
    (``job_timeout_s``, ``num_cpus``, ``fallback``, ...), each also read from RAYCOMPILE_*.

    Raises SettingsError for a bad setting, and FarmUnavailableError for ``address="auto"`` with
    no cluster on this machine when ``fallback=False``. Everything that needs the network is
    reported later, by ``ready()`` and by the compiles that need the farm: FarmUnavailableError
    when Ray is unreachable and ``fallback=False`` (with fallback, the default, it warns once and
    compiles locally), VersionMismatchError when a node runs another torch or triton.

    Returns the session, also a context manager: ``with raycompile.enable(): ...`` disables it
    at the end of the block.
    """
    global _atexit_registered
    resolved = Settings.resolve(address=address, **settings)
    with _atexit_lock:
        if not _atexit_registered:  # restore stock Inductor before its own atexit hooks run
            atexit.register(disable)
            _atexit_registered = True
    return session_module.start(resolved, compile_graph)


def ready(timeout: float | None = None) -> dict[str, Any]:
    """Wait until the session's farm is up (Ray joined, every node probed) and its Inductor hooks
    installed; return what it runs on: address, embedded, nodes, workers, shared_cache, fallback
    (True: Ray unreachable, compiling locally), seconds (each stage's time since ``enable()``).
    ``timeout``: at most this long (default: twice ``connect_timeout_s``).

    Raises FarmUnavailableError without a session, or when Ray is unreachable and
    ``fallback=False``, and VersionMismatchError when a node runs another torch or triton."""
    session = session_module.current()
    if session is None:
        raise FarmUnavailableError("(no session)", "call raycompile.enable() first")
    return session.ready(timeout)


def disable() -> None:
    """Restore stock Inductor and close the farm (shutting down a Ray this process started)."""
    session_module.stop()


def is_enabled() -> bool:
    return session_module.current() is not None


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
    benchmarks_verified (apparent fastest candidates timed again in this process), ray_start_seconds
    (seconds from ``enable()`` to each stage of the background Ray start: connected, ready),
    ray_wait_seconds (how long kernel compiles waited for that start, summed), probe_wait_seconds
    (how long shared-tier lookups waited for the cluster probe's answer instead) and ray_unavailable
    (why the session compiles without Ray, "" while it has Ray); torch_autograd_hits/misses and
    torch_fxgraph_hits/misses: torch's own cache counters since the session's first compile (what
    Inductor's caches answered, before raycompile's tiers, on a node that compiled before)."""
    session = session_module.last()
    if session is not None:
        return session.snapshot()
    from .observe.stats import Stats

    return Stats().snapshot()


def explain() -> list[str]:
    """Why the current (or last) session's lookups missed: for each kernel compiled and each
    function traced, the part of its key that differs from the nearest entry of the shared tier
    (the local tier's without one): torch, triton or CUDA version, the GPU, an Inductor option,
    the source, the signing secret. One line each. ``raycompile cache explain`` says the same in
    another process, from the misses the last session kept in the cache dir."""
    session = session_module.last()
    return [e.text() for e in session.explain()] if session is not None else []


def report() -> str:
    """A summary of the current (or last) session: jobs, cache hits per tier, dedupes, failures,
    seconds per node and the 10 slowest kernels. Its numbers are ``stats()``'s."""
    session = session_module.last()
    if session is not None:
        return session.report()
    from .observe.report import summary
    from .observe.stats import Stats

    return summary(Stats().snapshot(), [])


__all__ = [
    "AutotuneError", "AutotuneResult", "CompileError", "FarmUnavailableError", "KernelSourceError", "NoGPUError",
    "RaycompileError", "Session", "Settings", "SettingsError", "UnknownArchError", "VersionMismatchError", "autotune",
    "disable", "enable", "enabled", "explain", "is_enabled", "ready", "report", "stats",
]
