"""Whole-graph compiles as Ray tasks (``settings.graph_compiles="cluster"``; the Inductor side is
``wrapper/graph_compiles.py``): each graph's pickled compile input goes to a worker, on a GPU node when the
graph is a GPU one (lowering asks the device), and its pickled output comes back as a future.

At most half the cluster's CPUs hold graph tasks at once (each takes one CPU), so that the kernel
compile jobs those tasks send always find a CPU; a graph waits for a slot here, at most
``graph_timeout_s``. A task whose worker or node dies is run once more elsewhere (Ray's retry); a task
that fails or times out is the caller's to compile in its own process.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import FarmUnavailableError
from ..observe.stats import Stats
from . import raycalls
from .remote import GPU_RESOURCE

log = logging.getLogger("raycompile.graphs")

# run(payload, worker_settings) -> (pickled output, {"node_id", "pid", "seconds", "kernel_jobs"}):
# the facade's task body (raycompile/graph_worker.py), run in a Ray worker
Run = Callable[[bytes, dict[str, Any]], tuple[bytes, dict[str, Any]]]


def _stamped(run: Run, payload: bytes, settings: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    """Runs on a Ray worker: the task body, its result stamped with where and how long it ran."""
    import os

    import ray

    started = time.perf_counter()
    raw, info = run(payload, settings)
    return raw, {**info, "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                 "seconds": time.perf_counter() - started}


class GraphTasks:
    """Create with the session's stats, the task body and the settings the workers' own farm
    sessions run with; ``send`` needs this process connected to Ray (the session's farm up)."""

    def __init__(self, stats: Stats, run: Run, worker_settings: dict[str, Any], timeout_s: float) -> None:
        self.stats = stats
        self.worker_settings = worker_settings
        self.timeout_s = timeout_s
        self._run = run
        self._task: Any = None
        self._slots: threading.BoundedSemaphore | None = None
        self._gpu_nodes: list[str] = []
        self.width = 0  # graphs compiled at once (at the first send)
        self._labelled = False  # the cluster labels its GPU nodes (GPU_RESOURCE)
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self._closed = False

    def _setup(self) -> None:
        import ray

        with self._lock:
            if self._task is not None:
                return
            with raycalls.calls(raycalls.address(), "reading the cluster's resources for graph compiles"):
                offered = ray.cluster_resources()
                nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("GPU", 0) > 0]
            self._gpu_nodes = sorted(n["NodeID"] for n in nodes)
            self._labelled = offered.get(GPU_RESOURCE, 0) >= 1
            self.width = max(1, int(offered.get("CPU", 2)) // 2)
            self._slots = threading.BoundedSemaphore(self.width)
            self._task = ray.remote(num_cpus=1, num_gpus=0, max_retries=1)(_stamped)

    def _options(self, device: str) -> dict[str, Any]:
        """A GPU graph on a GPU node (a labelled one where the cluster labels them), taken in
        turn; a CPU graph anywhere."""
        if device == "cpu" or not self._gpu_nodes:
            return {}
        if self._labelled:
            return {"resources": {GPU_RESOURCE: 0.001}}
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node = self._gpu_nodes[next(self._turn) % len(self._gpu_nodes)]
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=True)}

    def send(self, payload: bytes, device: str) -> concurrent.futures.Future[bytes]:
        """The compile of one pickled graph, started on the cluster. Raises FarmUnavailableError
        when Ray cannot be reached, and TimeoutError when no slot frees within the time-out."""
        if self._closed:
            raise FarmUnavailableError(raycalls.address(), "the raycompile session was closed")
        self._setup()
        assert self._slots is not None
        if not self._slots.acquire(timeout=self.timeout_s):
            raise TimeoutError(f"no graph-compile slot freed within {self.timeout_s:.0f} s")
        out: concurrent.futures.Future[bytes] = concurrent.futures.Future()
        started = time.perf_counter()
        try:
            with raycalls.calls(raycalls.address(), "sending a graph compile"):
                ref = self._task.options(**self._options(device)).remote(self._run, payload, self.worker_settings)
                future = ref.future()
        except BaseException:
            self._slots.release()
            raise

        def done(f: concurrent.futures.Future[Any]) -> None:
            assert self._slots is not None
            self._slots.release()
            if out.done():  # the caller stopped waiting (cancelled it)
                return
            try:
                raw, info = f.result()
            except BaseException as e:  # noqa: BLE001 - handed to the waiting caller, who compiles here
                log.debug("raycompile: a graph compile on the cluster failed after %.1f s: %s",
                            time.perf_counter() - started, str(e).splitlines()[0][:300] if str(e) else type(e).__name__)
                out.set_exception(e)
                return
            self.stats.graph_compiled(str(info.get("node_id", "")), int(info.get("pid", 0)),
                                      float(info.get("seconds", 0.0)), int(info.get("kernel_jobs", 0)))
            out.set_result(raw)

        future.add_done_callback(done)

        def abandoned(f: concurrent.futures.Future[bytes]) -> None:
            if f.cancelled():  # the caller stopped waiting (its time-out): the task is not needed
                import ray

                with contextlib.suppress(*raycalls.failures()):
                    ray.cancel(ref, force=False)

        out.add_done_callback(abandoned)
        return out

    def warm(self) -> int:
        """Ready as many workers as graphs may compile at once (each joins its farm session and
        imports Inductor: seconds a first graph would otherwise wait), spread like graphs; returns
        how many (0 once closed). Raises FarmUnavailableError when Ray cannot be reached."""
        if self._closed:
            return 0
        self._setup()
        device = "cuda" if self._gpu_nodes else "cpu"
        with raycalls.calls(raycalls.address(), "warming the graph-compile workers"):
            for _ in range(self.width):
                self._task.options(**self._options(device)).remote(self._run, b"", self.worker_settings)
        self.stats.add(graph_workers_warmed=self.width)
        return self.width

    def close(self) -> None:
        self._closed = True
