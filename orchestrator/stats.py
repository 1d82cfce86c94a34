"""Counters of what the farm did, and a record of each job. The counters double as the test seam
for "compiled once"; the records feed the summary and the trace."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..kernels import Failed, Result


@dataclass(frozen=True)
class JobRecord:
    label: str
    node_id: str
    pid: int
    started: float  # epoch seconds on the worker; 0 when the job never ran (infrastructure)
    seconds: float
    outcome: str  # "compiled" | "failed" | "timeout" | "version" | "infrastructure"


class Stats:
    """Thread-safe counters; ``snapshot()`` returns a plain dict (what ``raycompile.stats()`` shows)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.jobs = 0  # tasks sent to Ray
        self.deduped = 0  # requests answered by a job already in flight
        self.fallbacks = 0  # compiles that ran locally because Ray was unreachable or died
        self.failures = 0  # jobs that ended in an error of the kernel (not of Ray)
        self.compile_seconds = 0.0  # summed over jobs, as measured on the workers
        self.nodes: Counter[str] = Counter()  # node id -> jobs run there
        self.workers: Counter[int] = Counter()  # worker pid -> jobs run there
        self.records: list[JobRecord] = []
        # cache
        self.local_hits = 0
        self.shared_hits = 0
        self.misses = 0
        self.corrupt = 0  # entries that failed their sha256 (dropped, repaired by the next write)
        self.refused = 0  # entries with a bad or missing signature: never unpickled
        self.evictions = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.shared_unavailable = 0  # lookups that found the shared tier unreachable
        self.put_errors = 0

    def add(self, **deltas: float) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def set(self, **values: float) -> None:
        with self._lock:
            for name, value in values.items():
                setattr(self, name, value)

    def ran(self, result: Result) -> None:
        """Count a finished job."""
        failed = isinstance(result, Failed)
        outcome = ("failed" if result.kind == "compile" else result.kind) if failed else "compiled"
        with self._lock:
            self.compile_seconds += result.seconds
            self.failures += int(failed and result.kind != "infrastructure")
            if result.node_id:
                self.nodes[result.node_id] += 1
            if result.pid:
                self.workers[result.pid] += 1
            self.records.append(JobRecord(result.label, result.node_id, result.pid, result.started,
                                          result.seconds, outcome))

    def job_records(self) -> list[JobRecord]:
        with self._lock:
            return list(self.records)

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
                **{k: getattr(self, k) for k in (
                    "local_hits", "shared_hits", "misses", "corrupt", "refused", "evictions",
                    "bytes_read", "bytes_written", "shared_unavailable", "put_errors")},
            }
