"""The session's counters as Ray metrics (``ray.util.metrics``), for the Prometheus that scrapes
Ray's nodes and the Grafana on top of it.

A daemon thread pushes what ``Stats.snapshot()`` gained since its last push, every
``EXPORT_INTERVAL_S``, and once more at ``close()`` (the session closes it before Ray: a driver's
``ray.shutdown()`` sends what was recorded, so the last push is not lost). Nothing happens until
this process is connected to Ray: no ``import ray``, no metric made; a session whose compiles all
hit the cache may never connect, and then exports nothing. Errors are logged, never raised: the
metrics are a view, and must not fail a compile.

Ray exports a metric of this process as ``ray_<name>`` on its node's metrics port, with its own
tags (``NodeAddress``, ``WorkerId``, ``SessionName``) beside ours; every metric here is a counter
named ``*_total``: Ray exports it under that name with OpenTelemetry (``RAY_enable_open_telemetry``,
on by default in Ray 2.60) and with OpenCensus alike, where a name without the suffix would get a
gauge twin under OpenCensus.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from .. import counters
from ..observe.stats import Stats

log = logging.getLogger("raycompile.metrics")

EXPORT_INTERVAL_S = 5.0  # Ray's own reporter sends to the node's agent every few seconds too
CLOSE_WAIT_S = 10.0  # close(): the last push, bounded

# stats key -> (metric, fixed tags, description), as raycompile/counters.py declares them; several
# keys may feed one metric, told apart by tags
COUNTERS: dict[str, tuple[str, dict[str, str], str]] = {
    c.name: c.metric for c in counters.COUNTERS if c.metric is not None}
# stats key holding {name: count} -> (metric, tag keys, description): one series per name
BREAKDOWNS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "nodes": ("raycompile_node_jobs_total", ("node", "host"), "Compile jobs run, by the node that ran them"),
    "gpus": ("raycompile_gpu_benchmarks_total", ("gpu",), "Candidates timed, by GPU (node/index)"),
}


class MetricsExporter:
    """Pushes ``stats`` to Ray's metrics while ``connected()`` says this process is connected to
    Ray; ``node_names()`` (node id -> hostname) labels the per-node series. ``close()`` pushes a
    last time and stops (bounded). Never raises."""

    def __init__(self, stats: Stats, connected: Callable[[], bool],
                 node_names: Callable[[], dict[str, str]] = dict, interval_s: float = EXPORT_INTERVAL_S) -> None:
        self._stats, self._connected, self._node_names = stats, connected, node_names
        self._interval_s = interval_s
        self._metrics: dict[str, Any] | None = None  # metric name -> ray.util.metrics.Counter
        self._sent: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}  # series -> value pushed
        self._hosts: dict[str, str] = {}  # node id -> hostname, fixed once known (one series per node)
        self._off = False  # Ray cannot take metrics from this process (a Ray Client driver)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raycompile-metrics", daemon=True)
        self._thread.start()

    @classmethod
    def for_startup(cls, stats: Stats, startup: Any) -> MetricsExporter:
        """An exporter for a session's ``orchestrator.startup.Startup``: it exports once the
        start has joined Ray (never making it join)."""
        return cls(stats, lambda: startup.joined is not None, startup.node_names)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.push()
        self.push()

    def push(self) -> None:
        """Record what the counters gained since the last push (nothing before Ray is up)."""
        try:
            if self._off or not self._connected():
                return
            import ray

            if not ray.is_initialized():
                return
            if self._metrics is None:
                self._metrics = self._make()
                if self._metrics is None:
                    return
            self._record(self._stats.snapshot())
        except Exception:  # noqa: BLE001 - a view of the counters; the compile path must not see it
            log.debug("raycompile: exporting metrics failed", exc_info=True)

    def _make(self) -> dict[str, Any] | None:
        from ray.util import client
        from ray.util.metrics import Counter

        if client.ray.is_connected():  # a Ray Client driver has no core worker to record into
            log.info("raycompile: no Ray metrics from a Ray Client (ray://) driver")
            self._off = True
            return None
        pid = {"pid": str(os.getpid())}
        metrics: dict[str, Any] = {}
        for name, tags, description in COUNTERS.values():
            if name not in metrics:  # a metric's first entry in COUNTERS describes it
                metrics[name] = Counter(name, description, ("pid", *tags)).set_default_tags(pid)
        for name, keys, description in BREAKDOWNS.values():
            metrics[name] = Counter(name, description, ("pid", *keys)).set_default_tags(pid)
        return metrics

    def _record(self, snapshot: dict[str, Any]) -> None:
        assert self._metrics is not None
        for key, (name, tags, _) in COUNTERS.items():
            self._inc(name, tags, snapshot.get(key))
        nodes = snapshot.get("nodes") or {}
        if any(node not in self._hosts for node in nodes):
            names = self._node_names()
            self._hosts.update({node: names.get(node, "unknown") for node in nodes if node not in self._hosts})
        for node, count in nodes.items():
            self._inc(BREAKDOWNS["nodes"][0], {"node": node, "host": self._hosts[node]}, count)
        for gpu, count in (snapshot.get("gpus") or {}).items():
            self._inc(BREAKDOWNS["gpus"][0], {"gpu": str(gpu)}, count)

    def _inc(self, name: str, tags: dict[str, str], value: Any) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return
        series = (name, tuple(sorted(tags.items())))
        delta = value - self._sent.get(series, 0)
        if delta > 0:  # counters only grow; Ray refuses an increment <= 0
            assert self._metrics is not None
            self._metrics[name].inc(delta, tags=tags)
            self._sent[series] = value

    def close(self) -> None:
        """Push a last time and stop the thread (waiting at most ``CLOSE_WAIT_S``)."""
        self._stop.set()
        self._thread.join(CLOSE_WAIT_S)
        if self._thread.is_alive():
            log.debug("raycompile: the metrics thread did not finish within %.0f s", CLOSE_WAIT_S)
