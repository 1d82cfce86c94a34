"""What the operator reads at the end: a summary of the session, and a Chrome/Perfetto trace."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from .stats import JobRecord


def summary(stats: Mapping[str, Any], records: list[JobRecord], node_names: Mapping[str, str] | None = None) -> str:
    """Jobs, cache hits per tier, dedupes, failures, seconds per node, the 10 slowest kernels, and
    autotuning on GPU actors when there was any."""
    names = node_names or {}
    records = [r for r in records if not r.is_benchmark]  # compile jobs; benchmarks have their lines
    per_node: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if r.node_id:
            per_node[r.node_id].append(r.seconds)
    lines = [
        "raycompile summary",
        f"  jobs {stats['jobs']}"
        + (f" (+{stats['jobs_local']} in this node's Inductor workers)" if stats.get("jobs_local") else "")
        + f"   deduped {stats['deduped']}   retried {stats.get('retried', 0)}   "
        f"fallbacks {stats['fallbacks']}   failures {stats['failures']}   "
        f"compile seconds (summed over jobs) {stats['compile_seconds']:.1f}",
        f"  cache hits: local {stats.get('local_hits', 0)}   shared {stats.get('shared_hits', 0)}"
        + (f"   (compiled by another driver: {stats['dedupe_cluster']})" if stats.get("dedupe_cluster") else ""),
    ]
    if per_node:
        lines.append(f"  {'node':<14}{'host':<18}{'jobs':>6}{'seconds':>10}")
        for node, secs in sorted(per_node.items()):
            lines.append(f"  {node[:12]:<14}{names.get(node, '?')[:17]:<18}{len(secs):>6}{sum(secs):>10.1f}")
    slow = sorted(records, key=lambda r: r.seconds, reverse=True)[:10]
    if slow:
        lines.append("  slowest kernels:")
        for r in slow:
            lines.append(f"    {r.seconds:>7.2f} s  {r.outcome:<10} {r.label[:90]}")
    lines.extend(served_lines(stats))
    lines.extend(kernel_lines(stats))
    lines.extend(ray_lines(stats))
    lines.extend(autotune_lines(stats))
    lines.extend(frames_lines(stats))
    lines.extend(flight_lines(stats))
    lines.extend(graphs_lines(stats))
    return "\n".join(lines)


def served_lines(stats: Mapping[str, Any]) -> list[str]:
    """What served this session's compiles: compiled functions loaded whole, graphs from torch's
    own caches (this node's dir, or raycompile's tiers behind it), kernels from raycompile's tiers,
    kernels compiled by jobs."""
    graphs = stats.get("torch_autograd_hits", 0) + stats.get("torch_fxgraph_hits", 0)
    lowered = stats.get("torch_autograd_misses", 0)
    if not any((stats.get("dynamo_hits"), graphs, lowered, stats.get("local_hits"), stats.get("shared_hits"),
                stats.get("jobs"), stats.get("jobs_local"))):
        return []
    return [f"  served by: compiled functions loaded whole {stats.get('dynamo_hits', 0)}; graphs from torch's "
            f"AOTAutograd/FX-graph caches {stats.get('torch_autograd_hits', 0)}/{stats.get('torch_fxgraph_hits', 0)} "
            f"(its own dir first, then raycompile's tiers), lowered here {lowered}; hits in raycompile's "
            f"tiers {stats.get('local_hits', 0) + stats.get('shared_hits', 0)}; kernels compiled by jobs "
            f"{stats.get('jobs', 0) + stats.get('jobs_local', 0)}"]


def kernel_lines(stats: Mapping[str, Any]) -> list[str]:
    """Where the kernels that missed every tier were compiled: the parts add up to the misses (a job
    that failed in Ray and was then compiled by stock's pool counts in both), [] without misses;
    and the C++ kernels Inductor loaded built from its own dir, which no lookup missed."""
    missed = stats.get("kernel_misses", 0)
    found = stats.get("kernels_from_inductor_dir", 0)
    built = [f"  C++ kernels Inductor found built in its own cache dir (no job), written to the tiers: {found}"
             ] if found else []
    if not missed:
        return built
    parts = (("farm jobs", "jobs"), ("joined a job in flight", "deduped"), ("this node's workers", "jobs_local"),
             ("another driver's compile", "dedupe_cluster"), ("stock's pool", "fallbacks"))
    inline = stats.get("jobs_in_process", 0)
    started = f" ({inline} in this process while they started)" if inline else ""
    return [f"  kernels no tier had {missed}: " + ", ".join(f"{label} {stats.get(name, 0)}"
                                                          + (started if name == "jobs_local" else "")
                                                          for label, name in parts)] + built


def ray_lines(stats: Mapping[str, Any]) -> list[str]:
    """When the session's Ray side came up, and how long kernel compiles waited for it; or why it
    compiled without Ray."""
    start = stats.get("ray_start_seconds") or {}
    waited = stats.get("ray_wait_seconds", 0.0)
    lines = []
    if start or waited:
        stages = ", ".join(f"{stage} {s:.1f} s" for stage, s in start.items()) or "not up"
        lines.append(f"  Ray after enable(): {stages}; kernel compiles waited {waited:.1f} s for it (summed)")
    if stats.get("probe_wait_seconds"):
        lines.append(f"  shared-tier lookups waited {stats['probe_wait_seconds']:.1f} s for the cluster probe's "
                     "answer (its secret; with a file:// or redis:// tier, RAYCOMPILE_SECRET skips the probe)")
    if stats.get("ray_unavailable"):
        lines.append(f"  without Ray: {stats['fallbacks']} compiles ran locally with stock Inductor, because: "
                     f"{stats['ray_unavailable'].splitlines()[0][:400]}")
    return lines


def graphs_lines(stats: Mapping[str, Any]) -> list[str]:
    """Where whole graphs were compiled (settings.graph_compiles), [] if unused."""
    sent, here = stats.get("graphs_sent", 0), stats.get("graphs_forward_here", 0)
    refused, failed = stats.get("graphs_refused", 0), stats.get("graphs_failed", 0)
    if not (sent or here or refused or failed):
        return []
    lines = [f"  whole graphs: {sent} compiled on the cluster ({stats.get('graphs_backward_deferred', 0)} backward, "
             f"waited for at their call), {here} forward compiled here; refused {refused}, failed {failed}; "
             f"{stats.get('graph_compile_seconds', 0.0):.1f} s on the workers, this process waited "
             f"{stats.get('graph_wait_seconds', 0.0):.1f} s"]
    for why, n in sorted((stats.get("graphs_refused_reasons") or {}).items(), key=lambda kv: -kv[1])[:5]:
        lines.append(f"    refused {n:>3}: {why[:100]}")
    return lines


def frames_lines(stats: Mapping[str, Any]) -> list[str]:
    """Which path served each compiled function's frames (settings.dynamo_cache), [] if unused."""
    functions = stats.get("dynamo_functions") or {}
    if not functions and not stats.get("dynamo_unkeyed"):
        return []
    lines = [f"  compiled frames: {stats.get('dynamo_frames_loaded', 0)} loaded from entries "
             f"(no Dynamo, no AOTAutograd; {stats.get('dynamo_frames_moved', 0)} made on another GPU, moved "
             f"to this one), {stats.get('dynamo_frames_traced', 0)} traced; entries "
             f"published {stats.get('dynamo_published', 0)}, failed to write {stats.get('dynamo_write_failed', 0)}, "
             f"invalid here {stats.get('dynamo_invalid', 0)}, "
             f"unkeyed {stats.get('dynamo_unkeyed', 0)}"]
    for name, row in sorted(functions.items()):
        gen = f"   generation {row['generation']}" if row.get("generation") is not None else ""
        role = f"   {row['role']} ({row.get('flight', 'node')})" if row.get("role") else ""
        lines.append(f"    {name[:70]:<72}loaded {row['loaded']:>3}   traced {row['traced']:>3}{gen}{role}")
    return lines


def flight_lines(stats: Mapping[str, Any]) -> list[str]:
    """Single flight: what this process waited for another process's compile of ([] if nothing)."""
    frames = (stats.get("dynamo_frames_served", 0), stats.get("dynamo_flight_traced", 0),
              stats.get("dynamo_flight_gave_up", 0))
    graphs = (stats.get("graph_flight_owned", 0), stats.get("graph_flight_served", 0),
              stats.get("graph_flight_gave_up", 0))
    published = stats.get("dynamo_flight_published", 0)
    if not any(frames) and not any(graphs) and not published:
        return []
    return [f"  single flight: frames published for waiting processes {published} times "
            f"({stats.get('dynamo_flight_publish_seconds', 0.0):.1f} s); "
            f"frames served from another process's compile {frames[0]} (waited "
            f"{stats.get('dynamo_flight_wait_seconds', 0.0):.1f} s), traced here after all {frames[1]}, waits given "
            f"up {frames[2]}; whole graphs lowered here for others {graphs[0]}, loaded from another process's "
            f"compile {graphs[1]} (waited {stats.get('graph_flight_wait_seconds', 0.0):.1f} s), waits given up "
            f"{graphs[2]}"]


def autotune_lines(stats: Mapping[str, Any]) -> list[str]:
    """Candidates timed on GPU actors, where, how long, and what the driver did itself ([] if none)."""
    gpus = stats.get("gpus") or {}
    local, cached = stats.get("benchmarks_local", 0), stats.get("autotune_cached", 0)
    decided = [stats.get(f"autotune_decisions_{how}", 0) for how in ("shared", "timed", "adopted")]
    turns = stats.get("tunings_adopted", 0)
    if not (stats.get("benchmarks") or local or cached or stats.get("coordesc_prefetched") or any(decided)
            or turns):
        return []
    lines = [
        f"  autotune: {stats.get('benchmarks', 0)} candidates on {len(gpus)} GPU(s), "
        f"{stats.get('benchmark_seconds', 0.0):.1f} s on the actors, the compile waited "
        f"{stats.get('benchmark_wall_seconds', 0.0):.1f} s; {stats.get('benchmarks_verified', 0)} timed again here",
        f"    failed {stats.get('benchmark_failures', 0)}   GPU restarts {stats.get('gpu_restarts', 0)}   "
        f"kernels tuned locally {local}   winners from the cache {cached}   "
        f"coordinate-descent candidates compiled ahead {stats.get('coordesc_prefetched', 0)} "
        f"({stats.get('coordesc_in_workers', 0)} in the compile workers; "
        f"{stats.get('coordesc_speculated_used', 0)} of {stats.get('coordesc_speculated', 0)} queued from "
        f"the sweep before, while it was timed)",
    ]
    if any(decided):
        lines.append(f"    max-autotune decisions: {decided[0]} taken from the cache (another process's picks, "
                     f"nothing compiled or timed), {decided[1]} timed here and filed, {decided[2]} timed here while "
                     "another process filed its picks first (theirs taken)")
    if turns:
        lines.append(f"    kernels whose first-run tuning another process of this node did: {turns} (its picks taken, "
                     f"waited {stats.get('tunings_adopted_wait_seconds', 0.0):.1f} s)")
    if gpus:
        lines.append("    " + "   ".join(f"{gpu}: {n}" for gpu, n in sorted(gpus.items())))
    return lines


def chrome_trace(records: list[JobRecord], node_names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One process track per node, one thread track per worker, one complete slice per job."""
    names = node_names or {}
    nodes = sorted({r.node_id or "local" for r in records})
    pid_of = {n: i + 1 for i, n in enumerate(nodes)}
    events: list[dict[str, Any]] = []
    for node in nodes:
        label = f"node {node[:12]}" + (f" ({names[node]})" if node in names else "")
        events.append({"name": "process_name", "ph": "M", "pid": pid_of[node], "args": {"name": label}})
    gpu_tracks = {(r.node_id or "local", r.pid) for r in records if r.is_benchmark}
    for node, pid in sorted({(r.node_id or "local", r.pid) for r in records}):
        gpu = (node, pid) in gpu_tracks
        events.append({"name": "thread_name", "ph": "M", "pid": pid_of[node], "tid": pid,
                       "args": {"name": f"{'GPU worker' if gpu else 'worker'} {pid}"}})
    t0 = min((r.started for r in records if r.started), default=0.0)
    for r in records:
        events.append({
            "name": r.label, "cat": r.outcome, "ph": "X", "pid": pid_of[r.node_id or "local"], "tid": r.pid,
            "ts": round(((r.started or t0) - t0) * 1e6, 1), "dur": round(r.seconds * 1e6, 1),
            "args": {"outcome": r.outcome, "node": r.node_id, "worker": r.pid},
        })
    return {"traceEvents": events, "displayTimeUnit": "ms"}
