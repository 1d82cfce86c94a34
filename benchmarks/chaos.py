"""Chaos benchmark: compile rounds of real models on a multi-node Ray cluster (``cluster_utils``,
one machine) while faults are injected at random; every output is checked bitwise against stock
Inductor, and every entry the shared tier ever held is checked at the end.

    python benchmarks/chaos.py [--rounds 8] [--nodes 3] [--seed 0] [--label cpu2]

Each round compiles one model variant with an empty local cache and empty Inductor caches, after
one fault (chosen at random):
  kill-worker   SIGKILL the worker of a compile job while it runs (the farm re-sends the job)
  remove-node   remove a worker node while a job runs on it (a replacement node joins after)
  corrupt       damage a random entry of the shared tier (truncate, flip a byte, delete a file),
                then warm-start the variant that wrote it (a miss, counted, recompiled, repaired)
  none          a clean round
Cold rounds compile a new variant (distinct shapes, so distinct kernels); corrupt rounds re-use
one. Prints rounds, faults injected, jobs, jobs retried, corrupt entries found, wrong results
(must be 0) and entries lost (must be 0), and the time against stock Inductor's cold compiles of
the same variants, measured in the same run. Exit status 1 if a result is wrong or an entry lost.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import sys
import tempfile
import threading
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))  # the fault injectors the tests use

from faults import WorkerKiller, damage_entry, raylet_pids, sound_entries, wait_for_job  # noqa: E402


def variant(i: int) -> tuple[Any, tuple[Any, ...]]:
    """Variant ``i``: a model whose shapes differ from every other variant's (distinct kernels)."""
    import torch

    from raycompile.models import ReductionTail, TransformerBlock

    torch.manual_seed(i)
    if i % 2 == 0:
        dim = 32 + 16 * (i // 2)
        return TransformerBlock(dim=dim, heads=4, hidden=2 * dim + 8), (torch.randn(2, 8 + i, dim),)
    dim = 40 + 8 * i
    return ReductionTail(dim=dim), (torch.randn(4 + i, dim),)


def compile_cold(model: Any, args: tuple[Any, ...]) -> Any:
    import torch

    from raycompile.wrapper import compat

    torch._dynamo.reset()
    with compat.fresh_cache():
        return torch.compile(model)(*args)


def run(rounds: int, nodes: int, seed: int, work: pathlib.Path) -> dict[str, Any]:
    import ray
    import torch
    from ray.cluster_utils import Cluster

    import raycompile

    os.environ.setdefault("RAYCOMPILE_SECRET", f"chaos-{seed}")
    secret = os.environ["RAYCOMPILE_SECRET"].encode()
    rng = random.Random(seed)
    shared = work / "shared"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False, namespace="raycompile")
    cluster.wait_for_nodes()

    stock: dict[int, Any] = {}
    stock_seconds = 0.0
    keys_of: dict[int, set[str]] = {}
    ever: set[str] = set()
    faults: dict[str, int] = {}
    totals = {"jobs": 0, "retried": 0, "corrupt": 0, "fallbacks": 0, "failures": 0}
    wrong, farm_seconds, log = 0, 0.0, []
    try:
        next_variant = 0
        for r in range(rounds):
            fault = rng.choice(["kill-worker", "remove-node", "corrupt", "none"])
            if fault == "corrupt" and not keys_of:
                fault = "kill-worker"
            if fault == "corrupt":
                v = rng.choice(sorted(keys_of))
                fault_note = _damage_one_of(shared, keys_of[v], rng) or ""
            else:
                v, next_variant = next_variant, next_variant + 1
                fault_note = ""
            model, args = variant(v)
            if v not in stock:
                t = time.perf_counter()
                stock[v] = compile_cold(model, args)
                stock_seconds += time.perf_counter() - t
            before = {k for k in sound_entries(shared, secret)[0]}
            injector = _injector(fault, cluster)
            raycompile.enable(address="auto", shared_cache=f"file://{shared}", cache_dir=str(work / f"local{r}"))
            t = time.perf_counter()
            try:
                with injector:
                    out = compile_cold(model, args)
            finally:
                farm_seconds += time.perf_counter() - t
                raycompile.disable()
            s = raycompile.stats()
            if fault == "remove-node":
                cluster.add_node(num_cpus=1)  # the fleet heals
                cluster.wait_for_nodes()
            ok = torch.equal(out, stock[v])
            wrong += int(not ok)
            after = sound_entries(shared, secret)[0]
            keys_of.setdefault(v, set()).update(after - before)
            ever |= after
            landed = bool(fault_note) if fault == "corrupt" else injector.landed
            faults[fault] = faults.get(fault, 0) + int(landed)
            for k in totals:
                totals[k] += s[k]
            log.append({"round": r, "variant": v, "fault": fault, "landed": landed, "note": fault_note or
                        injector.note, "jobs": s["jobs"], "retried": s["retried"], "corrupt": s["corrupt"],
                        "right": ok})
            print(f"  round {r:>2}  variant {v:>2}  {fault:<12} {'landed' if landed else 'missed':<7} "
                  f"jobs {s['jobs']:>3}  retried {s['retried']:>2}  corrupt {s['corrupt']}  "
                  f"{'right' if ok else 'WRONG'}  {fault_note or injector.note}", flush=True)
        good, bad = sound_entries(shared, secret)
        lost = sorted(ever - good)
    finally:
        ray.shutdown()
        cluster.shutdown()
    return {"rounds": rounds, "nodes": nodes, "seed": seed, "faults": faults, **totals, "wrong_results": wrong,
            "entries_ever": len(ever), "entries_lost": len(lost), "bad_entries_at_end": len(bad),
            "stock_seconds": round(stock_seconds, 2), "farm_seconds": round(farm_seconds, 2), "log": log}


def _damage_one_of(shared: pathlib.Path, keys: set[str], rng: random.Random) -> str | None:
    """Damage one of ``keys``' entries: the variant's warm start must find and repair it."""
    import shutil

    if not keys:
        return None
    key = rng.choice(sorted(keys))
    scratch = pathlib.Path(tempfile.mkdtemp())
    try:  # damage_entry picks among a tier's entries: give it a view of just this one
        (scratch / "entries" / key[:2]).mkdir(parents=True)
        (scratch / "entries" / key[:2] / key).symlink_to(shared / "entries" / key[:2] / key)
        return damage_entry(scratch, rng)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class _Injector:
    """What a round does while its compile runs; ``landed`` says whether the fault happened."""

    def __init__(self, fault: str, cluster: Any) -> None:
        self.fault, self.cluster, self.landed, self.note = fault, cluster, fault in ("corrupt", "none"), ""
        self._thread: threading.Thread | None = None
        self._killer: WorkerKiller | None = None

    def __enter__(self) -> _Injector:
        if self.fault == "kill-worker":
            self._killer = WorkerKiller(raylet_pids(self.cluster), count=1).__enter__()
        elif self.fault == "remove-node":
            self._thread = threading.Thread(target=self._remove, daemon=True)
            self._thread.start()
        return self

    def _remove(self) -> None:
        node = self.cluster.worker_nodes and sorted(self.cluster.worker_nodes, key=id)[0]
        if not node:
            return
        pid = node.all_processes["raylet"][0].process.pid
        if wait_for_job({pid}, timeout=300) is not None:
            self.cluster.remove_node(node, allow_graceful=False)
            self.landed, self.note = True, f"raylet {pid}"

    def __exit__(self, *exc: object) -> None:
        if self._killer is not None:
            self._killer.__exit__()
            self.landed, self.note = bool(self._killer.killed), f"pids {self._killer.killed}"
        if self._thread is not None:
            self._thread.join(timeout=60)


def _injector(fault: str, cluster: Any) -> _Injector:
    return _Injector(fault, cluster)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--nodes", type=int, default=3, help="Ray nodes of 1 CPU each (head included)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--label", default="")
    a = p.parse_args()
    if a.rounds < 1 or a.nodes < 2:
        p.error("need --rounds >= 1 and --nodes >= 2 (a node is removed in some rounds)")
    with tempfile.TemporaryDirectory(prefix="raycompile-chaos-") as work:
        os.environ["RAYCOMPILE_HEAD_CACHE_DIR"] = os.path.join(work, "head")
        r = run(a.rounds, a.nodes, a.seed, pathlib.Path(work))
    ratio = r["farm_seconds"] / r["stock_seconds"] if r["stock_seconds"] else float("nan")
    print()
    print("| rounds | faults injected | jobs | jobs retried | corrupt found | fallbacks | wrong results "
          "| entries lost | farm under faults | stock cold | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    injected = ", ".join(f"{k} {v}" for k, v in sorted(r["faults"].items()))
    print(f"| {r['rounds']} | {injected} | {r['jobs']} | {r['retried']} | {r['corrupt']} | {r['fallbacks']} "
          f"| **{r['wrong_results']}** | **{r['entries_lost']}** of {r['entries_ever']} | {r['farm_seconds']:.1f} s "
          f"| {r['stock_seconds']:.1f} s | {ratio:.2f} |")
    out = HERE / "results" / f"chaos_{a.label or 'run'}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(r, indent=1))
    print(f"wrote {out}")
    return 1 if r["wrong_results"] or r["entries_lost"] or r["bad_entries_at_end"] else 0


if __name__ == "__main__":
    sys.exit(main())
