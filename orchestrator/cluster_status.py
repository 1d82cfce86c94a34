"""`raycompile status`: what a cluster offers the farm — its nodes (host, CPUs, GPUs and their
models, torch/triton), the compile slots and Ray worker processes, the coordinator's keys in
flight, and the cache tiers with their sizes."""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

from ..errors import FarmUnavailableError
from ..settings import Settings
from . import raycalls
from .cache_service import SERVICE_NAME
from .coordinator import COORDINATOR_NAME
from .remote import COMPILE_RESOURCE, _probe, compile_resources

log = logging.getLogger("raycompile.status")

STATUS_FIX = ("`raycompile status` shows a running cluster: start one with `ray start --head` (on this machine it is "
              "then found with no address), or pass the address of one (--address host:6379, or RAY_ADDRESS).")


def collect(settings: Settings) -> dict[str, Any]:
    """Connect to ``settings.address`` ("auto" when unset), gather the status, disconnect.

    Raises FarmUnavailableError when nothing answers there, or when Ray fails while asked."""
    import ray

    from .connect import connect

    settings = dataclasses.replace(settings, address=settings.address or "auto")
    try:
        owns = connect(settings).owns
    except FarmUnavailableError as e:  # the usual advice offers an embedded Ray, which `status` never starts
        raise e.advised(STATUS_FIX) from e
    try:
        with raycalls.calls(raycalls.address(), "reading the cluster's status"):
            return _collect(settings)
    finally:
        if owns:
            ray.shutdown()


def _collect(settings: Settings) -> dict[str, Any]:
    import ray

    nodes = _nodes(settings.connect_timeout_s)
    offered = ray.cluster_resources()
    if not compile_resources(offered):  # no compile slots declared: every CPU takes compile jobs
        for n in nodes:
            n["compile_slots"] = n["cpus"]
    free = ray.available_resources()
    return {
        "address": ray.get_runtime_context().gcs_address,
        "nodes": nodes,
        "farm": {
            "compile_slots": int(min(offered.get("CPU", 0), offered[COMPILE_RESOURCE])
                                 if compile_resources(offered) else offered.get("CPU", 0)),
            "cpus": offered.get("CPU", 0), "cpus_free": free.get("CPU", 0),
            "placement": COMPILE_RESOURCE if compile_resources(offered) else "any node with a CPU",
            "worker_processes": _worker_processes(),
        },
        "coordinator": _actor_call(COORDINATOR_NAME, settings.namespace, "state", settings.connect_timeout_s),
        "cache": _cache(settings, len([n for n in nodes if n["alive"]])),
    }


def _nodes(timeout: float) -> list[dict[str, Any]]:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    listed = ray.nodes()
    probe = ray.remote(_probe)
    refs = {n["NodeID"]: probe.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
        n["NodeID"], soft=False)).remote() for n in listed if n.get("Alive")}
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
    infos: dict[str, dict[str, Any]] = {}
    for node_id, ref in refs.items():
        if ref in ready:
            try:
                infos[node_id] = ray.get(ref)
            except ray.exceptions.RayError as e:  # the probe raised, or its node died: shown without its probe
                log.debug("probe of %s failed: %s", node_id, e)
    out = []
    for n in listed:
        info = infos.get(n["NodeID"], {})
        res = n.get("Resources", {})
        versions = info.get("versions")
        out.append({
            "node_id": n["NodeID"], "hostname": info.get("hostname") or n.get("NodeManagerHostname", "?"),
            "address": n.get("NodeManagerAddress", ""), "alive": bool(n.get("Alive")),
            "head": "node:__internal_head__" in res,
            "cpus": res.get("CPU", 0), "gpus": res.get("GPU", 0), "gpu_models": info.get("gpus", []),
            "compile_slots": res.get(COMPILE_RESOURCE, 0),
            "labels": sorted(k for k in res if k.startswith("raycompile_")),
            "torch": versions.torch if versions else "?", "triton": versions.triton if versions else "?",
        })
    return out


def _worker_processes() -> int | None:
    """Ray worker processes alive now (the state API needs the dashboard; None without it)."""
    import ray

    try:
        from ray.util.state import list_workers

        workers = list_workers(address=ray.get_runtime_context().gcs_address, filters=[("is_alive", "=", True)],
                               limit=10_000, raise_on_missing_output=False)
        return sum(1 for w in workers if getattr(w, "worker_type", "WORKER") == "WORKER")
    except Exception:  # noqa: BLE001 - an optional count: the state API raises RuntimeError (no ray[default]),
        # ConnectionError/ValueError (no dashboard), RayStateApiException, requests' errors ...; any means "unknown"
        log.debug("raycompile: the Ray state API did not list the workers", exc_info=True)
        return None


def _actor_call(name: str, namespace: str, method: str, timeout: float) -> Any:
    """Ask a named actor, if it runs; never starts one."""
    import ray

    try:
        actor = ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None
    try:
        return ray.get(getattr(actor, method).remote(), timeout=timeout)
    except raycalls.failures() as e:  # the actor died, is restarting, or did not answer in time
        return {"error": f"{type(e).__name__}: {e}"}


def _cache(settings: Settings, alive_nodes: int) -> dict[str, Any]:
    from ..cache.store import FileTier
    from ..cache.tiered import shared_tier

    root = os.path.abspath(os.path.expanduser(settings.cache_dir))
    entries = FileTier(root, b"", "local").entries() if os.path.isdir(root) else []
    out: dict[str, Any] = {"local": {"url": root, "entries": len(entries), "bytes": sum(s for _, s, _ in entries)}}
    url = settings.shared_cache
    if url == "auto":
        url = "ray://head" if alive_nodes > 1 else "none"
    shared: dict[str, Any] = {"url": url}
    tier = shared_tier(url, b"") if url.startswith("file://") else None  # counted, never verified
    if isinstance(tier, FileTier):
        path = tier.root
        if os.path.isdir(path):
            entries = tier.entries()
            shared.update(entries=len(entries), bytes=sum(s for _, s, _ in entries))
        else:  # not an empty tier: a typo, or a file system not mounted here
            shared["error"] = (f"{path} does not exist on this machine (sessions create it at their first write; "
                               "a typo, or a file system not mounted here?)")
    elif url == "ray://head":
        usage = _actor_call(SERVICE_NAME, settings.namespace, "usage", settings.connect_timeout_s)
        if usage is None:
            shared["error"] = "the head cache service has not been started yet"
        else:
            shared.update(usage)
    elif url.startswith(("redis://", "rediss://")):
        shared.update(_redis_usage(url))
    out["shared"] = shared
    return out


def _redis_usage(url: str) -> dict[str, Any]:
    import redis

    try:
        client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        keys = list(client.scan_iter(match="raycompile:entry:*", count=1000))
        sizes = [client.memory_usage(k) or 0 for k in keys[:10_000]]
        return {"entries": len(keys), "bytes": sum(sizes)}
    except redis.RedisError as e:
        return {"error": f"unreachable ({e})"}


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def render(status: dict[str, Any]) -> str:
    """The text `raycompile status` prints."""
    nodes = status["nodes"]
    lines = [f"Ray cluster at {status['address']}: {len(nodes)} node{'s' * (len(nodes) != 1)}, "
             f"{sum(n['alive'] for n in nodes)} alive",
             f"  {'node':<14}{'host':<22}{'alive':<7}{'CPUs':>5}{'GPUs':>5}  {'GPU models':<24}"
             f"{'torch / triton':<24}slots"]
    for n in nodes:
        models = ", ".join(f"{c}x {m}" for m, c in _count(n["gpu_models"]).items()) or "-"
        name = n["hostname"] + (" (head)" if n["head"] else "")
        lines.append(f"  {n['node_id'][:12]:<14}{name[:21]:<22}{'yes' if n['alive'] else 'NO':<7}"
                     f"{n['cpus']:>5.0f}{n['gpus']:>5.0f}  {models[:23]:<24}"
                     f"{(n['torch'] + ' / ' + n['triton'])[:23]:<24}{n['compile_slots']:.0f}")
    versions = {(n["torch"], n["triton"]) for n in nodes if n["alive"] and n["torch"] != "?"}
    if len(versions) > 1:
        lines.append("  WARNING: nodes run different torch/triton versions; the farm refuses the odd ones out")
    f = status["farm"]
    procs = f["worker_processes"]
    workers = f"{procs} Ray worker processes" if procs is not None else "worker processes unknown (no dashboard)"
    lines.append(f"farm: {f['compile_slots']} CPUs for compile jobs ({f['cpus_free']:.0f} of {f['cpus']:.0f} "
                 f"CPUs free), placed on {f['placement']}; {workers}")
    c = status["coordinator"]
    if c is None:
        lines.append("coordinator: not started (no driver with a shared cache has run yet)")
    elif "error" in c:
        lines.append(f"coordinator: {c['error']}")
    else:
        flight = c["in_flight"]
        counts = c.get("counts", {})
        lines.append(f"coordinator: {len(flight)} keys in flight ({sum(e['waiters'] for e in flight)} drivers "
                     f"waiting), {counts.get('done', 0)} compiled, {counts.get('answered_done', 0)} answered "
                     f"from the cache, {counts.get('takeovers', 0)} lease takeovers")
        for e in sorted(flight, key=lambda e: -e["age_s"])[:10]:
            lines.append(f"  {e['key'].rsplit('|', 1)[-1][:16]}  owner {e['owner']}  {e['age_s']:.0f} s, "
                         f"lease {e['lease_left_s']:.0f} s left, {e['waiters']} waiting")
    cache = status["cache"]
    loc = cache["local"]
    lines.append(f"cache: local {loc['url']}: {loc['entries']} entries, {_size(loc['bytes'])} (this machine)")
    sh = cache["shared"]
    if sh["url"] == "none":
        lines.append("       shared: none (set RAYCOMPILE_SHARED_CACHE, or run on a multi-node cluster)")
    elif "error" in sh:
        lines.append(f"       shared {sh['url']}: {sh['error']}")
    else:
        lines.append(f"       shared {sh['url']}: {sh['entries']} entries, {_size(sh['bytes'])}")
    return "\n".join(lines)


def _count(items: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out
