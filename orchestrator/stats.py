"""Counters of what the farm did, and a record of each job. The counters double as the test seam
for "compiled once"; the records feed the summary and the trace."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..kernels import Failed, Result

MISSES_KEPT = 2000  # misses kept per session for raycompile.explain()


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
        self.jobs = 0  # tasks sent to Ray
        self.jobs_local = 0  # jobs run in this node's Inductor compile workers (compile_jobs, no Ray)
        self.deduped = 0  # requests answered by a job already in flight
        self.dedupe_cluster = 0  # requests answered by another driver's compile (the coordinator)
        self.coordinator_unavailable = 0  # requests compiled without the coordinator: it did not answer
        self.fallbacks = 0  # compiles that ran locally because Ray was unreachable or died
        self.retried = 0  # jobs sent again: their worker or node died, or they timed out once
        self.failures = 0  # jobs that ended in an error of the kernel (not of Ray)
        # kernels an output module names by another key than this node computes (a module made with
        # another toolchain or settings): this node's key is used
        self.key_mismatches = 0
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
        self.shared_batches = 0  # batched shared-tier lookups (one round trip for a module's kernels)
        self.put_errors = 0
        # autotuning on GPU actors (orchestrator/gpu_pool.py, wrapper/autotune.py)
        self.benchmarks = 0  # candidates (configs, max-autotune choices) timed on GPU actors
        self.benchmark_seconds = 0.0  # summed over those, as measured on the actors
        self.benchmark_wall_seconds = 0.0  # the driver's wall time waiting on the actors (their start included)
        self.benchmark_failures = 0  # candidates marked failed (inf): an error, a crashed GPU, a time-out
        self.gpu_restarts = 0  # GPU actors that died under a candidate (and were restarted)
        self.benchmarks_local = 0  # kernels autotuned locally instead (indirect indexing, source unknown)
        self.autotune_cached = 0  # kernels whose stored winner was used: nothing benchmarked
        self.benchmarks_verified = 0  # apparent fastest candidates timed again in the driver (confirm_fastest)
        self.coordesc_prefetched = 0  # coordinate descent's candidates compiled at once, ahead of their timing
        self.gpus: Counter[str] = Counter()  # GPU id (node/index) -> candidates timed there
        # Dynamo precompile entries (settings.dynamo_cache; wrapper/frames.py): which path served
        # each compiled frame
        self.dynamo_hits = 0  # compiled functions loaded from an entry: no Dynamo, no AOTAutograd
        self.dynamo_misses = 0  # compiled functions with no usable entry: traced as stock does
        self.dynamo_frames_loaded = 0  # compiled frame variants installed from entries
        self.dynamo_frames_traced = 0  # frames Dynamo traced (a miss, or a guard miss after a load)
        self.dynamo_frames_moved = 0  # of the frames loaded or served, those made on another CUDA device, moved here
        self.dynamo_published = 0  # entries (generations) written to the tiers
        self.dynamo_invalid = 0  # entries that verified but do not install here (another source, versions)
        self.dynamo_unkeyed = 0  # loads with no key (not from torch.compile, or an unkeyable model)
        self.dynamo_incomplete = 0  # packages left unwritten at close: a frame lacked its backend
        self.dynamo_full = 0  # publishes skipped: the function's entry used every generation
        self.dynamo_unsaveable = 0  # frames torch cannot save (cannot name their code): traced on every node
        self.dynamo_write_failed = 0  # writes of entries that failed (the warning says why): the next process traces
        # single flight (wrapper/flights.py): frames served from another process's compile
        self.dynamo_frames_served = 0  # frames this process ran as another process of the node compiled them
        self.dynamo_flight_wait_seconds = 0.0  # how long its frames waited for that process
        self.dynamo_flight_traced = 0  # frames the owner compiled for other inputs: traced here
        self.dynamo_flight_gave_up = 0  # waits given up (the owner died, finished without it, or stalled)
        # single flight of whole graphs (wrapper/module_cache.py): AOTAutograd-cache misses of a node's processes
        self.graph_flight_owned = 0  # graphs this process compiled for the node's processes waiting on them
        self.graph_flight_served = 0  # graphs another process of the node compiled, loaded here: no lowering
        self.graph_flight_gave_up = 0  # waits given up (the owner ended without its entry, died, or stalled)
        self.graph_flight_wait_seconds = 0.0  # how long this process's graphs waited for their owners
        self.dynamo_functions: dict[str, dict[str, Any]] = {}  # function -> its path and frame counts
        self.dynamo_unsaveable_reasons: Counter[str] = Counter()  # why frames were not saved (torch's words)
        self.missed_keys: list[tuple[str, str]] = []  # (label, key) of lookups that missed: raycompile.explain()
        # whole-graph compiles on the cluster (settings.graph_compiles; wrapper/graphs.py)
        self.graphs_sent = 0  # graphs whose whole Inductor compile ran as a Ray task
        self.graphs_backward_deferred = 0  # of those, backward graphs waited for at their first call
        self.graphs_backward_early = 0  # of those, waited for before their call (something asked the graph)
        self.graphs_forward_here = 0  # forward and inference graphs compiled here (graph_compiles="backward")
        self.graphs_refused = 0  # graphs compiled in this process: the out-of-process path cannot carry them
        self.graphs_failed = 0  # graphs whose remote compile failed (then compiled in this process)
        self.graph_compile_seconds = 0.0  # summed over the tasks, as measured on the workers
        self.graph_wait_seconds = 0.0  # this process waiting for graphs (forward: at once; backward: at its call)
        # the session's Ray start: seconds from enable() to each stage (connected, ready), and the
        # seconds kernel compiles spent waiting for it (the farm, the shared tier), summed over them
        self.ray_start_seconds: dict[str, float] = {}
        self.ray_wait_seconds = 0.0
        # why the session compiles without Ray ("" while it has Ray): Ray unreachable, or failed
        self.ray_unavailable = ""
        self.graph_kernel_jobs = 0  # kernel compile jobs the graph tasks' workers ran or sent
        self.graph_workers_warmed = 0  # warm-up tasks sent at enable() (each readies a worker)
        self.graph_nodes: Counter[str] = Counter()  # node id -> graphs compiled there
        self.graph_workers: Counter[int] = Counter()  # worker pid -> graphs compiled there
        self.graphs_refused_reasons: Counter[str] = Counter()

    def add(self, **deltas: float) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def set(self, **values: Any) -> None:
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
            return {
                "jobs": self.jobs,
                "jobs_local": self.jobs_local,
                "deduped": self.deduped,
                "dedupe_cluster": self.dedupe_cluster,
                "coordinator_unavailable": self.coordinator_unavailable,
                "fallbacks": self.fallbacks,
                "retried": self.retried,
                "failures": self.failures,
                "key_mismatches": self.key_mismatches,
                "compile_seconds": round(self.compile_seconds, 3),
                "nodes": dict(self.nodes),
                "workers": dict(self.workers),
                **{k: getattr(self, k) for k in (
                    "local_hits", "shared_hits", "misses", "corrupt", "refused", "evictions",
                    "bytes_read", "bytes_written", "shared_unavailable", "shared_batches", "put_errors")},
                "benchmarks": self.benchmarks,
                "benchmark_seconds": round(self.benchmark_seconds, 3),
                "benchmark_wall_seconds": round(self.benchmark_wall_seconds, 3),
                "benchmark_failures": self.benchmark_failures,
                "gpu_restarts": self.gpu_restarts,
                "benchmarks_local": self.benchmarks_local,
                "autotune_cached": self.autotune_cached,
                "benchmarks_verified": self.benchmarks_verified,
                "coordesc_prefetched": self.coordesc_prefetched,
                "gpus": dict(self.gpus),
                **{k: getattr(self, k) for k in DYNAMO_COUNTERS},
                "dynamo_flight_wait_seconds": round(self.dynamo_flight_wait_seconds, 3),
                "graph_flight_owned": self.graph_flight_owned, "graph_flight_served": self.graph_flight_served,
                "graph_flight_gave_up": self.graph_flight_gave_up,
                "graph_flight_wait_seconds": round(self.graph_flight_wait_seconds, 3),
                "dynamo_functions": {k: dict(v) for k, v in self.dynamo_functions.items()},
                "dynamo_unsaveable_reasons": dict(self.dynamo_unsaveable_reasons),
                **{k: getattr(self, k) for k in GRAPH_COUNTERS},
                "graph_compile_seconds": round(self.graph_compile_seconds, 3),
                "graph_wait_seconds": round(self.graph_wait_seconds, 3),
                "graph_nodes": dict(self.graph_nodes),
                "graph_workers": dict(self.graph_workers),
                "graphs_refused_reasons": dict(self.graphs_refused_reasons),
                "ray_start_seconds": {k: round(v, 3) for k, v in self.ray_start_seconds.items()},
                "ray_wait_seconds": round(self.ray_wait_seconds, 3),
                "ray_unavailable": self.ray_unavailable,
            }


GRAPH_COUNTERS = ("graphs_sent", "graphs_backward_deferred", "graphs_backward_early", "graphs_forward_here",
                  "graphs_refused", "graphs_failed", "graph_kernel_jobs", "graph_workers_warmed")
DYNAMO_COUNTERS = ("dynamo_hits", "dynamo_misses", "dynamo_frames_loaded", "dynamo_frames_traced",
                   "dynamo_published", "dynamo_invalid", "dynamo_unkeyed", "dynamo_incomplete", "dynamo_full",
                   "dynamo_unsaveable", "dynamo_write_failed", "dynamo_frames_served", "dynamo_flight_traced",
                   "dynamo_flight_gave_up", "dynamo_frames_moved")
