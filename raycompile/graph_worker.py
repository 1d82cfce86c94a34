"""The body of a whole-graph compile task (``settings.graph_compiles="cluster"``), run in a Ray
worker by ``orchestrator/graph_tasks.py``: the worker's own farm session (joined once per worker
process: its kernel compiles go to the farm and the shared cache like any driver's, its
max-autotune candidates are timed in the worker, on its node's GPU, as stock does), then Inductor's
compile of the pickled graph (``compat.compile_graph_here``)."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from typing import Any

from . import session as session_module
from .settings import Settings

log = logging.getLogger("raycompile.graphs")
_lock = threading.Lock()
_settings: dict[str, Any] | None = None
_fresh: Any = None  # this worker's empty Inductor cache dirs (compat.fresh_cache), for its session


def _joined(settings: dict[str, Any]) -> Any:
    """This worker's farm session with ``settings`` (a new one when they changed)."""
    global _settings
    from .wrapper import compat

    with _lock:
        current = session_module.current()
        if current is None or _settings != settings:
            if current is not None:
                session_module.stop()
            # a graph task never sends graphs on (no recursion), never loads compiled frames, and
            # times max-autotune's candidates itself: the GPU actors belong to the driver's session
            # kernel compiles as Ray jobs, one pool for every graph task of the node (Inductor's own
            # pool would be one per worker process, each as wide as the machine)
            jobs = "cluster" if settings.get("compile_jobs") == "auto" else settings.get("compile_jobs")
            current = session_module.start(Settings.resolve(**{
                **settings, "graph_compiles": "local", "dynamo_cache": False, "autotune": False, "progress": False,
                "metrics": False, "compile_jobs": jobs}))
            if _settings is None:  # stock Inductor again before its own atexit hooks run, as enable() does
                atexit.register(session_module.stop)
            _settings = dict(settings)
            # Inductor's on-disk caches empty for this worker (once: its checks of the CPU's
            # vector ISA and the like are kept), as for a precompile variant: a kernel built
            # before this session would load from them and never reach the farm's cache, where
            # the driver looks; what this session builds goes through the farm
            global _fresh
            if _fresh is not None:
                _fresh.__exit__(None, None, None)
            _fresh = compat.fresh_cache()
            _fresh.__enter__()
        current.ready()
        return current


def compile_graph(payload: bytes, settings: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    """Compile one pickled graph here; (pickled output, {"kernel_jobs": jobs this compile sent or
    ran}). An error of the compile itself is raised (the driver compiles the graph itself then).
    An empty payload only readies this worker (its session, Inductor's imports, CUDA): the
    driver warms its graph workers while Dynamo traces the first graph.
    ``graph_profile_dir`` among the driver's settings: each graph's compile runs under cProfile,
    written there on the worker's node (a diagnosis of where a worker's time goes)."""
    where = settings.get("graph_profile_dir")
    if where and payload:  # a diagnosis: each graph's compile under cProfile, one file per graph
        import cProfile

        profiler = cProfile.Profile()
        try:
            return profiler.runcall(_compile_graph, payload, settings)
        finally:
            profiler.dump_stats(os.path.join(where, f"graph-{os.getpid()}-{time.time():.3f}.prof"))
    return _compile_graph(payload, settings)


def _compile_graph(payload: bytes, settings: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    from .wrapper import compat

    session = _joined(settings)
    if not payload:
        compat.graph_worker_warm()
        _warm_compile_workers(session)
        return b"", {"kernel_jobs": 0}
    before = session.stats.snapshot()
    raw = compat.compile_graph_here(payload)
    after = session.stats.snapshot()
    jobs = (after["jobs"] + after["jobs_local"]) - (before["jobs"] + before["jobs_local"])
    return raw, {"kernel_jobs": jobs}


def _warm_compile_workers(session: Any) -> None:
    """Start the Ray workers this worker's kernel compiles go to (``Farm.warm``: one per CPU, each
    importing the toolchain), now, at ``enable()``, rather than at its first graph's first kernel,
    where a backward graph in default mode would wait seconds for them."""
    from .errors import RaycompileError

    startup = getattr(session, "startup", None)
    if startup is None or startup.compiles_here():
        return
    try:
        farm = startup.wait_farm()
        if farm is not None and not startup.compiles_here(farm):
            farm.warm()
    except RaycompileError as e:  # its first graph finds out, and says so
        log.debug("raycompile: compile workers not warmed: %s", e)
