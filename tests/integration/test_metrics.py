"""The counters as Ray metrics, as an operator's Prometheus sees them: a Ray node with a known
metrics port, raycompile joined to it, a compile through the farm, then the node's /metrics page
(Prometheus text) read until Ray's agent has exported what ``raycompile.stats()`` says."""

from __future__ import annotations

import os
import re
import socket
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from farmrun import compile_fresh
from raystart import free_port

import raycompile
from raycompile.models import examples

EXPORT_WAIT_S = 60  # Ray's reporter and agent export every few seconds (about 10 s end to end here)
SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Series = tuple[str, frozenset[tuple[str, str]]]  # metric name, our tags (Ray's own left out)


@pytest.fixture
def ray_node() -> Iterator[tuple[str, int]]:
    """A one-node Ray (2 CPUs) exporting its metrics on a port of ours: (address, metrics port).
    This process is not connected: raycompile joins it, and disconnects at disable()."""
    import ray
    from ray.cluster_utils import Cluster

    port = free_port()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False,
                                                            "metrics_export_port": port})
    try:
        yield cluster.address, port
    finally:
        ray.shutdown()  # if a failure left this process connected
        cluster.shutdown()


def scrape(port: int) -> dict[Series, float]:
    """This process's raycompile series on the node's /metrics page, keyed by our tags."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    ours = ("pid", "tier", "scope", "node", "host", "gpu", "path")
    found: dict[Series, float] = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m is None or not m["name"].startswith("ray_raycompile_"):
            continue
        labels = dict(LABEL.findall(m["labels"] or ""))
        if labels.get("pid") != str(os.getpid()):
            continue
        key = (m["name"], frozenset((k, v) for k, v in labels.items() if k in ours and k != "pid"))
        found[key] = found.get(key, 0.0) + float(m["value"])
    return found


def expected(stats: dict[str, Any]) -> dict[Series, float]:
    """Every series the README names, with the values of ``stats`` (a counter at 0 is never sent)."""
    plain = {"jobs": "jobs", "jobs_local": "jobs_local", "coordinator_unavailable": "coordinator_unavailable",
             "fallbacks": "fallbacks", "retried": "retries", "failures": "failures",
             "compile_seconds": "compile_seconds", "misses": "cache_misses", "kernel_misses": "kernel_misses",
             "corrupt": "cache_corrupt",
             "refused": "cache_refused", "evictions": "cache_evictions", "bytes_read": "cache_bytes_read",
             "bytes_written": "cache_bytes_written", "shared_unavailable": "cache_shared_unavailable",
             "put_errors": "cache_put_errors", "benchmarks": "benchmarks", "benchmark_seconds": "benchmark_seconds",
             "benchmark_wall_seconds": "benchmark_wall_seconds", "benchmark_failures": "benchmark_failures",
             "gpu_restarts": "gpu_restarts", "benchmarks_local": "benchmarks_local",
             "autotune_cached": "autotune_cached", "benchmarks_verified": "benchmarks_verified"}
    out: dict[Series, float] = {(f"ray_raycompile_{name}_total", frozenset()): stats[key]
                                for key, name in plain.items()}
    out |= {("ray_raycompile_cache_hits_total", frozenset({("tier", tier)})): stats[f"{tier}_hits"]
            for tier in ("local", "shared")}
    out |= {("ray_raycompile_dedupe_total", frozenset({("scope", "process")})): stats["deduped"],
            ("ray_raycompile_dedupe_total", frozenset({("scope", "cluster")})): stats["dedupe_cluster"]}
    host = socket.gethostname()
    out |= {("ray_raycompile_node_jobs_total", frozenset({("node", node), ("host", host)})): count
            for node, count in stats["nodes"].items()}
    out |= {("ray_raycompile_gpu_benchmarks_total", frozenset({("gpu", gpu)})): count
            for gpu, count in stats["gpus"].items()}
    out |= {("ray_raycompile_frames_total", frozenset({("path", path)})): stats[f"dynamo_frames_{path}"]
            for path in ("loaded", "traced")}
    out[("ray_raycompile_frame_entries_published_total", frozenset())] = stats["dynamo_published"]
    return {series: value for series, value in out.items() if value}


def matches(found: dict[Series, float], want: dict[Series, float]) -> bool:
    return found.keys() == want.keys() and all(found[s] == pytest.approx(v, rel=1e-6, abs=1e-3)
                                               for s, v in want.items())


def test_counters_reach_prometheus_with_the_values_of_stats(ray_node: tuple[str, int]) -> None:
    address, port = ray_node
    model, args = examples()["reduction_tail"]
    raycompile.enable(address=address)
    try:
        compile_fresh(model, args)  # cold: every kernel a job on Ray
        compile_fresh(model, args)  # Inductor's caches emptied again: raycompile's local tier answers
    finally:
        raycompile.disable()  # the last push, then ray.shutdown() (this process's connection only)
    stats = raycompile.stats()
    assert stats["jobs"] > 0 and stats["local_hits"] > 0 and stats["misses"] > 0, stats
    want = expected(stats)
    deadline = time.monotonic() + EXPORT_WAIT_S
    found: dict[Series, float] = {}
    while time.monotonic() < deadline:
        try:
            found = scrape(port)
        except OSError:  # the agent's HTTP server still starting
            found = {}
        if matches(found, want):
            break
        time.sleep(2)
    assert matches(found, want), (
        f"after {EXPORT_WAIT_S} s, /metrics has\n{sorted(found.items())}\nexpected\n{sorted(want.items())}")
