"""Counters of what the farm did. They double as the test seam for "compiled once"."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any


class Stats:
    """Thread-safe counters; ``snapshot()`` returns a plain dict (what ``raycompile.stats()`` shows)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.jobs = 0  # tasks sent to Ray
        self.deduped = 0  # requests answered by a job already in flight
        self.fallbacks = 0  # compiles that ran locally because Ray was unreachable or died
        self.failures = 0  # jobs that ended in an error
        self.compile_seconds = 0.0  # summed over jobs, as measured on the workers
        self.nodes: Counter[str] = Counter()  # node id -> jobs run there
        self.workers: Counter[int] = Counter()  # worker pid -> jobs run there

    def add(self, **deltas: float) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def ran(self, node_id: str, pid: int, seconds: float, failed: bool) -> None:
        with self._lock:
            self.compile_seconds += seconds
            self.failures += int(failed)
            if node_id:
                self.nodes[node_id] += 1
            if pid:
                self.workers[pid] += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "jobs": self.jobs,
                "deduped": self.deduped,
                "fallbacks": self.fallbacks,
                "failures": self.failures,
                "compile_seconds": round(self.compile_seconds, 3),
                "nodes": dict(self.nodes),
                "workers": dict(self.workers),
            }
