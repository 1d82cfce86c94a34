"""The body of a whole-graph compile task (``settings.graph_compiles="cluster"``), run in a Ray
worker by ``orchestrator/graph_tasks.py``: the worker's own farm session (joined once per worker
process: its kernel compiles go to the farm and the shared cache like any driver's, its
max-autotune candidates are timed in the worker, on its node's GPU, as stock does), then Inductor's
compile of the pickled graph (``compat.compile_graph_here``)."""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_settings: dict[str, Any] | None = None


def _joined(settings: dict[str, Any]) -> Any:
    """This worker's farm session with ``settings`` (a new one when they changed)."""
    global _settings
    import raycompile
    from raycompile import session as session_module

    with _lock:
        current = session_module.current()
        if current is None or _settings != settings:
            if current is not None:
                raycompile.disable()
            # a graph task never sends graphs on (no recursion), never loads compiled frames, and
            # times max-autotune's candidates itself: the GPU actors belong to the driver's session
            raycompile.enable(**{**settings, "graph_compiles": "local", "dynamo_cache": False, "autotune": False,
                                 "progress": False, "metrics": False})
            _settings = dict(settings)
            current = session_module.current()
        current.ready()
        return current


def compile_graph(payload: bytes, settings: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    """Compile one pickled graph here; (pickled output, {"kernel_jobs": jobs this compile sent or
    ran}). An error of the compile itself is raised (the driver compiles the graph itself then).
    An empty payload only readies this worker (its session, Inductor's imports, CUDA): the
    driver warms its graph workers so while Dynamo traces the first graph."""
    from .wrapper import compat

    session = _joined(settings)
    if not payload:
        compat.graph_worker_warm()
        return b"", {"kernel_jobs": 0}
    before = session.stats.snapshot()
    # Inductor's own on-disk caches empty, as for a precompile variant: a kernel this worker built
    # before would load from them and never reach the farm's cache, where the driver looks
    with compat.fresh_cache():
        raw = compat.compile_graph_here(payload)
    after = session.stats.snapshot()
    jobs = (after["jobs"] + after["jobs_local"]) - (before["jobs"] + before["jobs_local"])
    return raw, {"kernel_jobs": jobs}
