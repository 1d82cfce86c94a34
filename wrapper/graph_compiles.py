"""Whole-graph compiles on the cluster (``settings.graph_compiles="cluster"``): each graph Inductor
compiles after its FX-graph cache missed is pickled (Inductor's out-of-process compile seam,
``compat.graphs_routed``) and compiled by a Ray task (``orchestrator/graph_tasks.py``, the task body
``raycompile/graph_worker.py``) with a farm session of its own, so its kernels come from and go to the
shared cache. A forward or inference graph is waited for at once (Dynamo runs it next); a backward
graph is sent with its forward and waited for at its first call, so the backward graphs of a step
compile while the forward runs and its later graphs are traced. ``graph_compiles="backward"`` sends
only the backward graphs: a forward graph is compiled here, as with the farm alone (Dynamo waits
for it either way, and here it needs no pickling, no round trip, no second load of its kernels).

Counted in ``stats()``: ``graphs_sent``, ``graphs_backward_deferred``, ``graphs_forward_here``
(forward and inference graphs kept here by ``"backward"``), ``graphs_refused`` (with
``graphs_refused_reasons``: what the seam cannot carry, compiled here), ``graphs_failed`` (a task
that failed or timed out: compiled here), ``graph_compile_seconds`` (on the workers),
``graph_wait_seconds`` (this process waiting), ``graph_kernel_jobs``, ``graph_nodes``,
``graph_workers``, ``graph_workers_warmed`` (warm-up tasks sent at ``enable()``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
from collections.abc import Callable

from ..observe.stats import Stats
from . import compat

log = logging.getLogger("raycompile.graphs")

Send = Callable[[bytes, str], "concurrent.futures.Future[bytes]"]


class GraphRoute:
    """Where ``compat.graphs_routed`` sends graphs, and what it counts."""

    def __init__(self, stats: Stats, send: Send, wait_s: float, forward: bool = True) -> None:
        self.stats = stats
        self._send = send
        self.wait_s = wait_s
        self.forward = forward  # False: forward and inference graphs are compiled here

    def kept(self) -> None:
        self.stats.add(graphs_forward_here=1)

    def send(self, payload: bytes, device: str, backward: bool) -> concurrent.futures.Future[bytes]:
        future = self._send(payload, device)
        if backward:
            self.stats.add(graphs_backward_deferred=1)
        return future

    def refused(self, why: str) -> None:
        log.debug("raycompile: a graph compiled in this process: %s", why)
        self.stats.graph_refused(why)

    def arrived(self, backward: bool, waited_s: float, early: bool) -> None:
        self.stats.add(graph_wait_seconds=waited_s, graphs_backward_early=int(early))

    def failed(self, error: BaseException) -> None:
        text = str(error).splitlines()[0][:300] if str(error) else type(error).__name__
        self.stats.add(graphs_failed=1)
        log.warning("raycompile: compiling a graph in this process instead: its compile on the cluster failed "
                    "(%s)", text)


class GraphCompiles:
    """Installs the route (``install``, on the compiling thread, where Inductor is imported);
    ``prepare_thread()`` on every compiling thread; ``close()`` restores stock Inductor."""

    def __init__(self, stats: Stats, send: Send, wait_s: float, forward: bool = True) -> None:
        self.route = GraphRoute(stats, send, wait_s, forward)
        self._stack = contextlib.ExitStack()
        self._prepare: Callable[[], None] | None = None

    def install(self) -> None:
        if self._prepare is None:
            self._prepare = self._stack.enter_context(compat.graphs_routed(self.route))

    def prepare_thread(self) -> None:
        if self._prepare is not None:
            self._prepare()

    def close(self) -> None:
        self._prepare = None
        self._stack.close()
