"""Fan-out benchmark: the same corpus of real Triton kernel compiles run serially, on Inductor's
own SubprocPool, and on the farm (Ray), with the same number of workers.

    python benchmarks/fanout.py [--workers N] [--nodes 1 4] [--copies C] [--corpus DIR]

Each copy of the corpus renames its kernels, so every job is a real compile (no Triton cache hit),
and each mode gets a fresh TRITON_CACHE_DIR. All three modes run the same job function
(``raycompile.kernels.run_job``), so the comparison is of executors alone. On a machine without a
GPU the jobs cross-compile for the arch recorded in the sources.

``--nodes 1 4`` runs the farm once per node count: 1 is an embedded local Ray; M > 1 is a Ray
cluster of M nodes on this machine (``ray.cluster_utils``), the workers split evenly between them,
so the jobs cross raylets, object stores and the scheduler's spreading as on a real cluster.

Prints a table, the farm/SubprocPool ratio, and the farm's share of the limit
(sum of job times / workers), for each farm row.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_CORPUS = HERE.parent / "tests" / "fixtures" / "corpus_torch211" / "kernels"


def make_jobs(corpus: pathlib.Path, copies: int) -> list:
    from raycompile.wrapper.job_keys import triton_job
    from raycompile.wrapper.kernel_sources import find_kernels

    jobs = []
    for c in range(copies):
        for k in find_kernels([str(corpus)]):
            name = f"{k.name}_c{c}"
            source = re.sub(rf"\bdef {k.name}\(", f"def {name}(", k.source)
            jobs.append(triton_job(name, source))
    return jobs


def fresh_triton_cache() -> None:
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="fanout-triton-")


def run_serial(jobs: list) -> tuple[float, float]:
    from raycompile.kernels import Built, run_job
    from raycompile.wrapper.compat import TOOLCHAIN

    fresh_triton_cache()
    start = time.perf_counter()
    results = [run_job(j, TOOLCHAIN) for j in jobs]
    assert all(isinstance(r, Built) for r in results), [r for r in results if not isinstance(r, Built)][:1]
    return time.perf_counter() - start, sum(r.seconds for r in results)


def run_subproc(jobs: list, workers: int) -> tuple[float, float]:
    from torch._inductor.compile_worker.subproc_pool import SubprocPool

    from raycompile.kernels import Built, run_job
    from raycompile.wrapper.compat import TOOLCHAIN

    fresh_triton_cache()
    pool = SubprocPool(workers)
    try:
        pool.submit(os.getpid).result(timeout=300)  # start-up is not part of the timing
        start = time.perf_counter()
        results = [f.result(timeout=600) for f in [pool.submit(run_job, j, TOOLCHAIN) for j in jobs]]
        wall = time.perf_counter() - start
    finally:
        pool.shutdown()
    assert all(isinstance(r, Built) for r in results)
    return wall, sum(r.seconds for r in results)


def run_farm(jobs: list, workers: int, nodes: int = 1) -> tuple[float, float]:
    import ray

    from raycompile.kernels import Built
    from raycompile.orchestrator import Farm
    from raycompile.settings import Settings

    fresh_triton_cache()
    cluster = None
    if nodes > 1:
        from ray.cluster_utils import Cluster

        if workers % nodes:
            raise SystemExit(f"--workers {workers} does not split evenly over {nodes} nodes")
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": workers // nodes,
                                                                "include_dashboard": False})
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=workers // nodes)
        cluster.wait_for_nodes()
        settings = Settings.resolve(address=cluster.address)
    else:
        settings = Settings.resolve(num_cpus=workers)
    try:
        from raycompile.wrapper.compat import TOOLCHAIN

        return _timed_farm(ray, Farm(settings, toolchain=TOOLCHAIN), jobs, Built)
    finally:
        if cluster is not None:
            cluster.shutdown()


def _timed_farm(ray: object, farm: object, jobs: list, built: type) -> tuple[float, float]:
    with farm:
        farm.wait_warm(timeout=300)  # worker start-up is not part of the timing, as for SubprocPool
        start = time.perf_counter()
        results = [f.result(timeout=600) for f in [farm.submit(j) for j in jobs]]
        wall = time.perf_counter() - start
        spread = len(farm.stats.nodes)
    assert not ray.is_initialized()
    assert all(isinstance(r, built) for r in results), [r for r in results if not isinstance(r, built)][:1]
    print(f"  ({spread} node(s) ran jobs)", flush=True)
    return wall, sum(r.seconds for r in results)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=os.cpu_count())
    p.add_argument("--nodes", type=int, nargs="+", default=[1],
                   help="farm runs over 1 (embedded Ray) and/or M cluster_utils nodes")
    p.add_argument("--copies", type=int, default=2)
    p.add_argument("--corpus", type=pathlib.Path, default=DEFAULT_CORPUS)
    p.add_argument("--skip-serial", action="store_true", help="estimate serial from the farm's job times")
    p.add_argument("--out", type=pathlib.Path, default=HERE / "results",
                   help="where the JSON of the run and its PNG plot go")
    p.add_argument("--label", default="local", help="names the output files: fanout_LABEL.json/.png")
    args = p.parse_args()
    import torch

    jobs = make_jobs(args.corpus, args.copies)
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none (cross-compiling)"
    print(f"fanout: {len(jobs)} Triton compile jobs, {args.workers} workers, {os.cpu_count()} CPUs, "
          f"GPU {gpu}, torch {torch.__version__}", flush=True)
    rows = []
    if not args.skip_serial:
        rows.append(("serial (1 process)",) + run_serial(jobs))
        print(f"  serial done in {rows[-1][1]:.1f} s", flush=True)
    rows.append((f"Inductor SubprocPool ({args.workers})",) + run_subproc(jobs, args.workers))
    print(f"  SubprocPool done in {rows[-1][1]:.1f} s", flush=True)
    for n in args.nodes:
        name = f"raycompile farm ({args.workers})" if n == 1 else f"raycompile farm ({args.workers}, {n} nodes)"
        rows.append((name,) + run_farm(jobs, args.workers, n))
        print(f"  {name} done in {rows[-1][1]:.1f} s", flush=True)
    print(f"\n{'mode':<36}{'wall s':>10}{'sum of job s':>14}")
    for name, wall, total in rows:
        print(f"{name:<36}{wall:>10.2f}{total:>14.1f}")
    subproc = next(r for r in rows if r[0].startswith("Inductor SubprocPool"))
    farms = [r for r in rows if r[0].startswith("raycompile farm")]
    # the limit: the serial sum of job times spread perfectly over the workers (DESIGN.md)
    serial_sum = rows[0][2] if not args.skip_serial else farms[0][2]
    limit = serial_sum / args.workers
    print()
    for farm in farms:
        print(f"{farm[0]:<36} / SubprocPool = {farm[1] / subproc[1]:.2f} (goal <= 1.0); share of the limit "
              f"(serial job s / workers = {limit:.2f} s) = {limit / farm[1]:.0%} (goal >= 85%)")
    farm = farms[0]
    hardware = f"{os.cpu_count()} CPUs, GPU {gpu}"
    result = {"jobs": len(jobs), "workers": args.workers, "hardware": hardware, "torch": torch.__version__,
              "limit_s": limit, "ratio_farm_subproc": farm[1] / subproc[1], "share_of_limit": limit / farm[1],
              "nodes": args.nodes,
              "rows": [{"mode": n, "wall_s": w, "sum_job_s": t,
                        **({"ratio_subproc": w / subproc[1], "share_of_limit": limit / w} if n.startswith("raycompile")
                           else {})} for n, w, t in rows]}
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"fanout_{args.label}.json"
    out.write_text(json.dumps(result, indent=1))
    from plot import fanout_png

    print(f"wrote {out} and {fanout_png(result, out.with_suffix('.png'))}")


if __name__ == "__main__":
    sys.exit(main())
