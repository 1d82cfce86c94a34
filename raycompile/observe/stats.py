"""Counters of what the farm did, and a record of each job. The counters double as the test seam
for "compiled once"; the records feed the summary and the trace."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol

from .. import counters

MISSES_KEPT = 2000  # misses kept per session for raycompile.explain()


class Outcome(Protocol):
    """What the counters read of a finished job (``kernels.Built`` or ``kernels.Failed``: this module
    sits below them, where every layer may import it)."""

    label: str
    seconds: float
    node_id: str
    pid: int
    started: float

    @property
    def failed(self) -> bool: ...


@dataclass(frozen=True)
class JobRecord:
    label: str
    node_id: str
    pid: int
    started: float  # epoch seconds on the worker; 0 when the job never ran (infrastructure)
    seconds: float
    outcome: str  # "compiled" | "failed" | "timeout" | "version" | "infrastructure" | BENCHMARKED | BENCHMARK_FAILED

    @property
    def is_benchmark(self) -> bool:
        return self.outcome in (BENCHMARKED, BENCHMARK_FAILED)


BENCHMARKED, BENCHMARK_FAILED = "benchmarked", "benchmark failed"  # a candidate timed on a GPU actor


class Stats:
    """Thread-safe counters; ``snapshot()`` returns a plain dict (what ``raycompile.stats()`` shows)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # every counter of raycompile/counters.py, at zero: self.jobs, self.local_hits, ...
        for name, value in counters.zero().items():
            setattr(self, name, value)
        # the records, by key
        self.nodes: Counter[str] = Counter()  # node id -> jobs run there
        self.workers: Counter[int] = Counter()  # worker pid -> jobs run there
        self.records: list[JobRecord] = []
        self.gpus: Counter[str] = Counter()  # GPU id (node/index) -> candidates timed there
        self.dynamo_functions: dict[str, dict[str, Any]] = {}  # function -> its path and frame counts
        self.dynamo_unsaveable_reasons: Counter[str] = Counter()  # why frames were not saved (torch's words)
        self.missed_keys: list[tuple[str, str]] = []  # (label, key) of lookups that missed: raycompile.explain()
        self.graph_nodes: Counter[str] = Counter()  # node id -> graphs compiled there
        self.graph_workers: Counter[int] = Counter()  # worker pid -> graphs compiled there
        self.graphs_refused_reasons: Counter[str] = Counter()
        # the session's Ray start: seconds from enable() to each stage (connected, ready)
        self.ray_start_seconds: dict[str, float] = {}
        # why the session compiles without Ray ("" while it has Ray): Ray unreachable, or failed
        self.ray_unavailable = ""

    def add(self, **deltas: float) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def set(self, **values: Any) -> None:
        with self._lock:
            for name, value in values.items():
                setattr(self, name, value)

    def ran(self, result: Outcome) -> None:
        """Count a finished job."""
        failed = result.failed
        kind = str(getattr(result, "kind", "compile"))
        outcome = ("failed" if kind == "compile" else kind) if failed else "compiled"
        with self._lock:
            self.compile_seconds += result.seconds
            self.failures += int(failed and kind != "infrastructure")
            if result.node_id:
                self.nodes[result.node_id] += 1
            if result.pid:
                self.workers[result.pid] += 1
            self.records.append(JobRecord(result.label, result.node_id, result.pid, result.started,
                                          result.seconds, outcome))

    def benchmarked(self, gpu: str, seconds: float, failed: bool, label: str = "", node_id: str = "", pid: int = 0,
                    started: float = 0.0) -> None:
        """Count one candidate timed on GPU actor ``gpu`` (and record it for the trace)."""
        with self._lock:
            self.benchmarks += 1
            self.benchmark_seconds += seconds
            self.benchmark_failures += int(failed)
            self.gpus[gpu] += 1
            if label:
                self.records.append(JobRecord(label, node_id, pid, started, seconds,
                                              BENCHMARK_FAILED if failed else BENCHMARKED))

    def frames(self, function: str, **deltas: int) -> None:
        """Count compiled frames of ``function`` by the path that served them ("loaded" from an
        entry, "traced" by Dynamo; "generation": the entry generation loaded or last written)."""
        with self._lock:
            row = self.dynamo_functions.setdefault(function, {"loaded": 0, "traced": 0, "generation": None})
            for name, value in deltas.items():
                row[name] = value if name in ("generation", "role", "flight") else row.get(name, 0) + value

    def flight(self, function: str, role: str, where: str = "node") -> None:
        """Who compiled ``function`` among the processes that compiled it at once: this one
        ("owner"), or another one ("waiter": this one's frames were served from its compile);
        ``where``: among this node's processes ("node") or every node's ("cluster": the claims
        were in the shared tier)."""
        self.frames(function, role=role, flight=where)

    def missed(self, label: str, key: str) -> None:
        """A lookup that missed every tier (a kernel compiled, a function traced): kept, the first
        ``MISSES_KEPT``, for ``raycompile.explain()``."""
        with self._lock:
            if len(self.missed_keys) < MISSES_KEPT:
                self.missed_keys.append((label, key))

    def unsaveable(self, why: str) -> None:
        """Count a compiled frame torch cannot save, by its reason (the first 20 reasons kept)."""
        with self._lock:
            self.dynamo_unsaveable += 1
            if why in self.dynamo_unsaveable_reasons or len(self.dynamo_unsaveable_reasons) < 20:
                self.dynamo_unsaveable_reasons[why[:300]] += 1

    def graph_compiled(self, node_id: str, pid: int, seconds: float, kernel_jobs: int) -> None:
        """Count a graph compiled by a Ray task on ``node_id``, in worker ``pid``."""
        with self._lock:
            self.graphs_sent += 1
            self.graph_compile_seconds += seconds
            self.graph_kernel_jobs += kernel_jobs
            self.graph_nodes[node_id] += 1
            self.graph_workers[pid] += 1

    def graph_refused(self, why: str) -> None:
        """Count a graph kept in this process, by its reason (the first 20 reasons kept)."""
        with self._lock:
            self.graphs_refused += 1
            if why in self.graphs_refused_reasons or len(self.graphs_refused_reasons) < 20:
                self.graphs_refused_reasons[why[:300]] += 1

    def job_records(self) -> list[JobRecord]:
        with self._lock:
            return list(self.records)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            snap: dict[str, Any] = {c.name: round(getattr(self, c.name), 3) if c.seconds else getattr(self, c.name)
                                    for c in counters.COUNTERS}
            snap.update({
                "nodes": dict(self.nodes),
                "workers": dict(self.workers),
                "gpus": dict(self.gpus),
                "dynamo_functions": {k: dict(v) for k, v in self.dynamo_functions.items()},
                "dynamo_unsaveable_reasons": dict(self.dynamo_unsaveable_reasons),
                "graph_nodes": dict(self.graph_nodes),
                "graph_workers": dict(self.graph_workers),
                "graphs_refused_reasons": dict(self.graphs_refused_reasons),
                "ray_start_seconds": {k: round(v, 3) for k, v in self.ray_start_seconds.items()},
                "ray_unavailable": self.ray_unavailable,
            })
            return snap
