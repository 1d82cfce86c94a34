"""Every counter of ``raycompile.stats()``, declared once: its name, the part it counts, what it
means, whether it is seconds, and the Ray metric it feeds. ``raycompile/observe/stats.py`` makes its
counters from this, ``orchestrator/metrics.py`` its metrics, ``cache/usage.py`` the counters a
cache dir keeps across sessions (every one: they add up), and ``python -m raycompile.docs`` the
table in docs/metrics.md (a unit test fails when the page is stale).

The counters that are not numbers (``nodes``, ``gpus``, ``dynamo_functions``, the reasons, the
Ray start's stages) are the session's records, kept by ``Stats`` itself."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Counter:
    """``name``: its ``stats()`` key; ``group``: the part of raycompile it counts; ``help``: what
    it means; ``seconds``: a float of seconds (rounded to ms in ``stats()``), else an int;
    ``metric``: (Ray metric name, fixed tags, description) where it is exported (several counters
    may feed one metric, told apart by their tags; the description is given once)."""

    name: str
    group: str
    help: str
    seconds: bool = False
    metric: tuple[str, dict[str, str], str] | None = field(default=None, compare=False)


COUNTERS: tuple[Counter, ...] = (
    Counter(
        "jobs",
        "compile jobs",
        "tasks sent to Ray",
        metric=("raycompile_jobs_total", {}, "Kernel compile jobs this driver sent to Ray"),
    ),
    Counter(
        "jobs_local",
        "compile jobs",
        "jobs run in this node's Inductor compile workers (compile_jobs, no Ray)",
        metric=("raycompile_jobs_local_total", {}, "Kernel compile jobs run in this node's Inductor workers"),
    ),
    Counter(
        "kernels_from_inductor_dir",
        "compile jobs",
        "C++ kernels Inductor loaded built from its own cache dir (no job ran), written to the tiers from there",
        metric=("raycompile_kernels_from_inductor_dir_total", {},
                "C++ kernels found built in Inductor's cache dir and written to the tiers"),
    ),
    Counter(
        "jobs_in_process",
        "compile jobs",
        "of jobs_local, Triton jobs compiled in this process while the node's compile workers started "
        "(as stock compiles in the driver until its pool answers)",
        metric=("raycompile_jobs_in_process_total", {},
                "Triton compile jobs run in the driver while its compile workers started"),
    ),
    Counter(
        "deduped",
        "compile jobs",
        "requests answered by a job already in flight",
        metric=(
            "raycompile_dedupe_total",
            {"scope": "process"},
            "Compile requests answered by a job already in flight (process) or another driver's (cluster)",
        ),
    ),
    Counter(
        "dedupe_cluster",
        "compile jobs",
        "requests answered by another driver's compile (the coordinator)",
        metric=("raycompile_dedupe_total", {"scope": "cluster"}, ""),
    ),
    Counter(
        "coordinator_unavailable",
        "compile jobs",
        "requests compiled without the coordinator: it did not answer",
        metric=(
            "raycompile_coordinator_unavailable_total",
            {},
            "Compiles made without the cluster-wide dedupe coordinator: it did not answer",
        ),
    ),
    Counter(
        "fallbacks",
        "compile jobs",
        "compiles that ran locally because Ray was unreachable or died",
        metric=("raycompile_fallbacks_total", {}, "Compiles run locally because Ray was unreachable or died"),
    ),
    Counter(
        "retried",
        "compile jobs",
        "jobs sent again: their worker or node died, or they timed out once",
        metric=("raycompile_retries_total", {}, "Jobs sent again: their worker or node died, or they timed out"),
    ),
    Counter(
        "failures",
        "compile jobs",
        "jobs that ended in an error of the kernel (not of Ray)",
        metric=("raycompile_failures_total", {}, "Jobs that ended in an error of the kernel (not of Ray)"),
    ),
    Counter(
        "key_mismatches",
        "compile jobs",
        "kernels an output module names by another key than this node computes (a module made with another "
        "toolchain or settings): this node's key is used",
        metric=(
            "raycompile_key_mismatches_total",
            {},
            "Kernels an output module names by another key than this node computes",
        ),
    ),
    Counter(
        "compile_seconds",
        "compile jobs",
        "summed over jobs, as measured on the workers",
        seconds=True,
        metric=("raycompile_compile_seconds_total", {}, "Seconds compiling, summed over jobs, on the workers"),
    ),
    Counter(
        "configs_spread",
        "compile jobs",
        "configs of max-autotune kernels sent to the node's compile workers beside their kernel's job, so a kernel's "
        "configs compile at once",
    ),
    Counter(
        "local_hits",
        "cache",
        "lookups answered by the local tier (kernels, output modules, compiled frames, graphs)",
        metric=("raycompile_cache_hits_total", {"tier": "local"}, "Cache hits, by tier (local, shared)"),
    ),
    Counter(
        "shared_hits",
        "cache",
        "lookups answered by the shared tier",
        metric=("raycompile_cache_hits_total", {"tier": "shared"}, ""),
    ),
    Counter(
        "misses",
        "cache",
        "lookups that found no entry in any tier (kernels, and the output modules' and graphs' own)",
        metric=("raycompile_cache_misses_total", {}, "Cache lookups that found no entry"),
    ),
    Counter(
        "kernel_misses",
        "cache",
        "kernels no tier had: each compiled once, by a farm job (jobs), a job already in flight (deduped), "
        "this node's workers (jobs_local), another driver (dedupe_cluster) or stock's pool (fallbacks)",
        metric=("raycompile_kernel_misses_total", {}, "Kernels that missed every tier and were compiled"),
    ),
    Counter(
        "isa_libraries_fetched",
        "cache",
        "libraries of Inductor's CPU instruction-set checks taken from the tiers instead of built here",
    ),
    Counter(
        "isa_libraries_published",
        "cache",
        "check libraries this process built, written to the tiers for the next node",
    ),
    Counter(
        "corrupt",
        "cache",
        "entries that failed their sha256 (dropped, repaired by the next write)",
        metric=("raycompile_cache_corrupt_total", {}, "Cache entries that failed their sha256 (dropped)"),
    ),
    Counter(
        "refused",
        "cache",
        "entries with a bad or missing signature: never unpickled",
        metric=("raycompile_cache_refused_total", {}, "Cache entries with a bad or missing signature (not unpickled)"),
    ),
    Counter(
        "evictions",
        "cache",
        "entries evicted from the local tier (its size cap)",
        metric=("raycompile_cache_evictions_total", {}, "Entries evicted from the local tier (its size cap)"),
    ),
    Counter(
        "bytes_read",
        "cache",
        "bytes of cache entries read",
        metric=("raycompile_cache_bytes_read_total", {}, "Bytes of cache entries read"),
    ),
    Counter(
        "bytes_written",
        "cache",
        "bytes of cache entries written",
        metric=("raycompile_cache_bytes_written_total", {}, "Bytes of cache entries written"),
    ),
    Counter(
        "shared_unavailable",
        "cache",
        "lookups that found the shared tier unreachable",
        metric=("raycompile_cache_shared_unavailable_total", {}, "Lookups that found the shared tier down"),
    ),
    Counter(
        "shared_batches",
        "cache",
        "batched shared-tier lookups (one round trip for a module's kernels)",
        metric=(
            "raycompile_cache_shared_batches_total",
            {},
            "Batched shared-tier lookups (an output module's kernels in one round trip)",
        ),
    ),
    Counter(
        "put_errors",
        "cache",
        "cache writes that failed",
        metric=("raycompile_cache_put_errors_total", {}, "Cache writes that failed"),
    ),
    Counter(
        "benchmarks",
        "autotuning on GPU actors",
        "candidates (configs, max-autotune choices) timed on GPU actors",
        metric=("raycompile_benchmarks_total", {}, "Autotuning candidates timed on GPU actors"),
    ),
    Counter(
        "benchmark_seconds",
        "autotuning on GPU actors",
        "summed over those, as measured on the actors",
        seconds=True,
        metric=("raycompile_benchmark_seconds_total", {}, "Seconds timing candidates, on the GPU actors"),
    ),
    Counter(
        "benchmark_wall_seconds",
        "autotuning on GPU actors",
        "the driver's wall time waiting on the actors (their start included)",
        seconds=True,
        metric=("raycompile_benchmark_wall_seconds_total", {}, "Seconds this driver waited on the GPU actors"),
    ),
    Counter(
        "benchmark_failures",
        "autotuning on GPU actors",
        "candidates marked failed (inf): an error, a crashed GPU, a time-out",
        metric=("raycompile_benchmark_failures_total", {}, "Candidates marked failed (an error, a crash, a time-out)"),
    ),
    Counter(
        "gpu_restarts",
        "autotuning on GPU actors",
        "GPU actors that died under a candidate (and were restarted)",
        metric=("raycompile_gpu_restarts_total", {}, "GPU actors restarted after dying under a candidate"),
    ),
    Counter(
        "benchmarks_local",
        "autotuning on GPU actors",
        "kernels autotuned locally instead (indirect indexing, source unknown)",
        metric=("raycompile_benchmarks_local_total", {}, "Kernels autotuned in this process instead"),
    ),
    Counter(
        "autotune_cached",
        "autotuning on GPU actors",
        "kernels whose stored winner was used: nothing benchmarked",
        metric=("raycompile_autotune_cached_total", {}, "Kernels whose stored autotuning winner was used"),
    ),
    Counter(
        "autotune_decisions_shared",
        "autotuning on GPU actors",
        "max-autotune decisions answered from the cache: another process's picks, no candidate compiled or timed",
        metric=("raycompile_autotune_decisions_total", {"how": "shared"},
                "Max-autotune decisions: from the cache (shared), timed here (timed), another's taken (adopted)"),
    ),
    Counter(
        "autotune_decisions_timed",
        "autotuning on GPU actors",
        "max-autotune decisions timed by this process and filed in the cache",
        metric=("raycompile_autotune_decisions_total", {"how": "timed"}, ""),
    ),
    Counter(
        "autotune_decisions_adopted",
        "autotuning on GPU actors",
        "max-autotune decisions timed here while another process filed its own first: its picks taken",
        metric=("raycompile_autotune_decisions_total", {"how": "adopted"}, ""),
    ),
    Counter(
        "benchmarks_verified",
        "autotuning on GPU actors",
        "apparent fastest candidates timed again in the driver (confirm_fastest)",
        metric=("raycompile_benchmarks_verified_total", {}, "Apparent fastest candidates timed again in this process"),
    ),
    Counter(
        "driver_timings",
        "autotuning on GPU actors",
        "GPU timings this process took itself (ATen choices, candidates confirmed here, a kernel's configs, "
        "coordinate descent), each with the GPU actors on its GPU held and raycompile's threads parked",
    ),
    Counter(
        "driver_timings_contended",
        "autotuning on GPU actors",
        "of those, timings during which another thread of this process ran Python (its launches may have "
        "waited for the GIL)",
    ),
    Counter(
        "driver_timings_retaken",
        "autotuning on GPU actors",
        "contended timings taken again once raycompile's threads had parked, the smaller kept (quiet_timings)",
    ),
    Counter(
        "driver_timings_contended_again",
        "autotuning on GPU actors",
        "of those taken again, ones another thread ran Python through again (a thread not raycompile's, or "
        "one mid-task)",
    ),
    Counter(
        "coordesc_prefetched",
        "autotuning on GPU actors",
        "coordinate descent's candidates compiled at once, ahead of their timing",
    ),
    Counter(
        "coordesc_in_workers",
        "autotuning on GPU actors",
        "of those, compiled in this node's compile workers (processes) rather than on this process's threads",
    ),
    Counter(
        "coordesc_at_load",
        "autotuning on GPU actors",
        "coordinate descent's first candidates sent to the compile workers when their kernel's module loaded, "
        "before its first run",
    ),
    Counter(
        "coordesc_speculated",
        "autotuning on GPU actors",
        "coordinate descent's next sweeps queued for the compile workers while the tuner timed the sweep "
        "before (the sweep from each candidate; most are never timed)",
    ),
    Counter(
        "coordesc_speculated_used",
        "autotuning on GPU actors",
        "of those, candidates a tuning found compiled or compiling when it moved to their sweep",
    ),
    Counter(
        "tunings_adopted",
        "autotuning on GPU actors",
        "kernels whose first-run tuning (configs, coordinate descent) another process of this node had the turn "
        "at: its pick taken, nothing timed here",
        metric=("raycompile_tunings_adopted_total", {}, "Kernel tunings taken from another process of the node"),
    ),
    Counter(
        "tunings_reserved",
        "autotuning on GPU actors",
        "kernels whose first-run tuning this process (it runs the compile workers) took the turn at ahead, "
        "when their module loaded: the node's other processes wait for its pick",
    ),
    Counter(
        "tunings_adopted_wait_seconds",
        "autotuning on GPU actors",
        "time spent waiting for another process of this node to finish tuning a kernel",
        seconds=True,
    ),
    Counter("dynamo_hits", "compiled frames", "compiled functions loaded from an entry: no Dynamo, no AOTAutograd"),
    Counter("dynamo_misses", "compiled frames", "compiled functions with no usable entry: traced as stock does"),
    Counter(
        "dynamo_frames_loaded",
        "compiled frames",
        "compiled frame variants installed from entries",
        metric=(
            "raycompile_frames_total",
            {"path": "loaded"},
            "Compiled frames, by the path that served them (loaded from an entry, traced)",
        ),
    ),
    Counter(
        "dynamo_frames_traced",
        "compiled frames",
        "frames Dynamo traced (a miss, or a guard miss after a load)",
        metric=("raycompile_frames_total", {"path": "traced"}, ""),
    ),
    Counter(
        "dynamo_frames_moved",
        "compiled frames",
        "of the frames loaded or served, those made on another CUDA device, moved here",
    ),
    Counter(
        "dynamo_published",
        "compiled frames",
        "entries (generations) written to the tiers",
        metric=("raycompile_frame_entries_published_total", {}, "Dynamo precompile entries written to the tiers"),
    ),
    Counter(
        "dynamo_invalid", "compiled frames", "entries that verified but do not install here (another source, versions)"
    ),
    Counter("dynamo_unkeyed", "compiled frames", "loads with no key (not from torch.compile, or an unkeyable model)"),
    Counter("dynamo_incomplete", "compiled frames", "packages left unwritten at close: a frame lacked its backend"),
    Counter("dynamo_backward_ahead", "compiled frames",
            "backwards lowered before any ran (a forward without one): their frames complete and written"),
    Counter("dynamo_no_backward", "compiled frames",
            "functions whose training frames ran no backward here: noted, the next process lowers it with the forward"),
    Counter("dynamo_full", "compiled frames", "publishes skipped: the function's entry used every generation"),
    Counter(
        "dynamo_unsaveable",
        "compiled frames",
        "frames torch cannot save (cannot name their code): traced on every node",
    ),
    Counter(
        "dynamo_write_failed",
        "compiled frames",
        "writes of entries that failed (the warning says why): the next process traces",
    ),
    Counter(
        "dynamo_frames_served",
        "single flight of compiled frames",
        "frames this process ran as another process of the node compiled them",
    ),
    Counter(
        "dynamo_flight_wait_seconds",
        "single flight of compiled frames",
        "how long its frames waited for that process",
        seconds=True,
    ),
    Counter(
        "dynamo_flight_published",
        "single flight of compiled frames",
        "publishes of this process's frames in flight for the node's processes waiting on them",
    ),
    Counter(
        "dynamo_flight_publish_seconds",
        "single flight of compiled frames",
        "what those publishes took (Dynamo's lock, serializing the frames so far), on its compiling thread and watcher",
        seconds=True,
    ),
    Counter(
        "dynamo_flight_traced",
        "single flight of compiled frames",
        "frames traced here after all: the owner compiled them for other inputs, or could not save them",
    ),
    Counter(
        "dynamo_flight_gave_up",
        "single flight of compiled frames",
        "waits given up (the owner died, finished without it, or stalled)",
    ),
    Counter(
        "graph_flight_owned",
        "single flight of whole graphs",
        "graphs this process compiled for the node's processes waiting on them",
    ),
    Counter(
        "graph_flight_served",
        "single flight of whole graphs",
        "graphs another process of the node compiled, loaded here: no lowering",
    ),
    Counter(
        "graph_flight_gave_up",
        "single flight of whole graphs",
        "waits given up (the owner ended without its entry, died, or stalled)",
    ),
    Counter(
        "graph_flight_wait_seconds",
        "single flight of whole graphs",
        "how long this process's graphs waited for their owners",
        seconds=True,
    ),
    Counter(
        "graphs_sent",
        "whole graphs on the cluster",
        "graphs whose whole Inductor compile ran as a Ray task",
        metric=(
            "raycompile_graphs_total",
            {"path": "cluster"},
            "Graphs compiled, by where (a Ray task; here: refused or failed on the cluster)",
        ),
    ),
    Counter(
        "graphs_backward_deferred",
        "whole graphs on the cluster",
        "of those, backward graphs waited for at their first call",
    ),
    Counter(
        "graphs_backward_early",
        "whole graphs on the cluster",
        "of those, waited for before their call (something asked the graph)",
    ),
    Counter(
        "graphs_forward_here",
        "whole graphs on the cluster",
        'forward and inference graphs compiled here (graph_compiles="backward")',
        metric=("raycompile_graphs_total", {"path": "here"}, ""),
    ),
    Counter(
        "graphs_refused",
        "whole graphs on the cluster",
        "graphs compiled in this process: the out-of-process path cannot carry them",
        metric=("raycompile_graphs_total", {"path": "refused"}, ""),
    ),
    Counter(
        "graphs_failed",
        "whole graphs on the cluster",
        "graphs whose remote compile failed (then compiled in this process)",
        metric=("raycompile_graphs_total", {"path": "failed"}, ""),
    ),
    Counter(
        "graph_compile_seconds",
        "whole graphs on the cluster",
        "summed over the tasks, as measured on the workers",
        seconds=True,
    ),
    Counter(
        "graph_wait_seconds",
        "whole graphs on the cluster",
        "this process waiting for graphs (forward: at once; backward: at its call)",
        seconds=True,
        metric=(
            "raycompile_graph_wait_seconds_total",
            {},
            "Seconds this driver waited for graphs compiled on the cluster",
        ),
    ),
    Counter(
        "ray_wait_seconds",
        "Ray",
        "seconds kernel compiles spent waiting for the session's Ray start (the farm, the shared tier), summed",
        seconds=True,
    ),
    Counter(
        "probe_wait_seconds",
        "Ray",
        "seconds shared-tier lookups spent waiting for the cluster probe's answer (the cluster's secret, "
        "asked by a process that starts no Ray), summed",
        seconds=True,
    ),
    Counter(
        "graph_kernel_jobs", "whole graphs on the cluster", "kernel compile jobs the graph tasks' workers ran or sent"
    ),
    Counter(
        "graph_workers_warmed", "whole graphs on the cluster", "warm-up tasks sent at enable() (each readies a worker)"
    ),
)

BY_NAME: dict[str, Counter] = {c.name: c for c in COUNTERS}


def zero() -> dict[str, int | float]:
    """Every counter at zero (an int, or 0.0 for seconds)."""
    return {c.name: 0.0 if c.seconds else 0 for c in COUNTERS}


def markdown() -> str:
    """The counters as docs/metrics.md's table, by group."""
    lines = ["| counter | part | what it counts | Ray metric |", "|---|---|---|---|"]
    for c in COUNTERS:
        metric = ""
        if c.metric is not None:
            tags = ",".join(f'{k}="{v}"' for k, v in c.metric[1].items())
            metric = f"`{c.metric[0]}{{{tags}}}`" if tags else f"`{c.metric[0]}`"
        unit = " (seconds)" if c.seconds else ""
        lines.append(f"| `{c.name}` | {c.group} | {c.help}{unit} | {metric} |")
    return "\n".join(lines)
