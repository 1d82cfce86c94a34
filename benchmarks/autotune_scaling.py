"""Autotune scaling: a Llama-style model's inference compiled under max-autotune, stock on one GPU
against the farm with its benchmarks on 1, 2, ... GPU actors. Each case runs in a NEW process with
EMPTY Inductor, Triton and raycompile caches, on a NEW Ray cluster whose workers (the GPU actors
included) also start with empty Inductor and Triton caches: no case warms another's.

    python benchmarks/autotune_scaling.py --gpus 1 2 [--nodes 1|2] [--model llama|block] [--layers 4]
        [--steps 50] [--stock-runs 2] [--label h200]

The farm cases run on a Ray cluster made here (``ray.cluster_utils``): ``--nodes M`` Ray nodes on
this machine, the N GPUs split between them (each node sees only its GPUs) and the CPUs too.

Columns:
- compile s: time to the first output of ``torch.compile(model, mode="max-autotune-no-cudagraphs")``
  (the farm's ``raycompile.enable()`` not included; it is reported as "enable s");
- x stock: stock compile s / this case's compile s;
- speedup: the 1-GPU farm run's compile s / this run's; efficiency = speedup / N (1.0: perfect
  scaling of the farm over GPUs);
- benchmarks: autotune candidates timed on the GPU actors (``stats()['benchmarks']``);
- tune s: the driver's wall time waiting on the GPU actors (``stats()['benchmark_wall_seconds']``,
  actor start included); tune eff = the 1-GPU run's tune s / (N x this run's): the scaling of the
  part of the compile that the GPUs do;
- step ms: steady-state wall ms per step (``--steps`` calls back to back, the median of 5 rounds);
  GPU ms: the GPU kernel time of a step (profiler), which the autotune picks decide and the
  host's launch speed does not; vs stock = ratio to stock's (goal <= 1.03). The measuring
  thread is pinned to one CPU core near GPU 0 (the same core in every case), so that the
  scheduler's placement of each new process does not decide its launch speed;
  With ``--stock-runs 2`` stock compiles twice (two new processes): its own run-to-run spread under
  max-autotune (its picks come from timings too) is the "stock again" row, and "stock" is the
  mean of the two runs' step times;
- ATen picks: max-autotune decisions won by an ATen (cuBLAS) choice, of all decisions.
- same-process step: the farm's compiled model against stock Inductor's compiled in the SAME
  process after ``disable()`` (a fresh Inductor cache, Inductor's in-memory autotune cache
  cleared, so stock makes its own picks), rounds of the two alternating, each the median of
  its rounds: both see the same host, so the ratio is the picks' and the output module's, not
  the host's mood (across processes, stock's own step time moved 0.94-1.47 ms on the H200s).
After the table, each farm case's step time again: after 10 s idle, with its GPU actors closed,
and after ``raycompile.disable()`` (same process), and the threads alive in it.
``--profile`` (a diagnosis, not for the table: profiling slows the compile): the compile under
cProfile in the driver and on every GPU actor (``RAYCOMPILE_PROFILE_GPU_WORKERS=1``), the reports
written to benchmarks/results/autotune_scaling_LABEL_profiles.txt.
Prints the table; writes JSON to benchmarks/results/autotune_scaling_LABEL.json and a PNG. Runs
without network (Ray may come from a bundle on PYTHONPATH); needs CUDA (transformers for llama).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gpu_steps import (  # noqa: E402 - next to this script
    MODE,
    QUALITY,
    build,
    gpu_profile,
    picks_counted,
    same_process_vs_stock,
    step_ms,
)


def child(mode: str, model: str, steps: int, layers: int, profile: bool = False) -> None:
    import cProfile
    import io
    import pstats
    import threading

    import torch

    t0 = time.perf_counter()
    if mode == "farm":
        import raycompile

        raycompile.enable(address="auto")
    enable_s = time.perf_counter() - t0
    fn, args = build(model, layers)
    compiled = torch.compile(fn, mode=MODE)
    picks: dict[str, int] = {}
    profiler = cProfile.Profile() if profile else None
    t1 = time.perf_counter()
    with picks_counted(picks):
        out = profiler.runcall(compiled, *args) if profiler else compiled(*args)
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - t1
    profiles: dict[str, str] = {}
    if profiler is not None:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(60)
        profiles["driver (compile)"] = text.getvalue()
    wall = step_ms(compiled, args, steps)
    gpu_ms, kernels, top = gpu_profile(compiled, args)
    apps = gpu_apps()
    stats: dict[str, Any] = {}
    later: dict[str, float] = {}
    threads = sorted(t.name for t in threading.enumerate())
    if mode == "farm":
        import raycompile

        stats = raycompile.stats()
        tuning = getattr(raycompile.session.current(), "autotune", None)
        if profile and tuning is not None:
            profiles.update({f"GPU actor {gpu}": text for gpu, text in tuning.pool.profile_reports().items()})
        time.sleep(10)  # whatever the farm left running has had time to end
        later["idle_10s"] = step_ms(compiled, args, steps)
        if tuning is not None:
            tuning.pool.close()  # the GPU actors gone (one shared this GPU); Ray still connected
            time.sleep(2)
            later["actors_closed"] = step_ms(compiled, args, steps)
        raycompile.disable()
        later["disabled"] = step_ms(compiled, args, steps)
        same = same_process_vs_stock(fn, args, compiled, steps)
    else:
        same = {}
    print("RESULT " + json.dumps({"enable_s": enable_s, "compile_s": compile_s, "step_ms": wall,
                                  "gpu_ms": gpu_ms, "kernels": kernels, "top": top, "later": later,
                                  "gpu_apps": apps, "threads": threads, "profiles": profiles, "same": same,
                                  "checksum": float(out.float().sum()), "stats": stats, "picks": picks}))


def gpu_apps() -> list[str]:
    """The processes holding a CUDA context, with their GPU memory (nvidia-smi; [] without it)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def fresh_caches(prefix: str) -> dict[str, str]:
    """Environment pointing Inductor, Triton and raycompile at new empty directories."""
    work = pathlib.Path(tempfile.mkdtemp(prefix=f"autotune-{prefix}-"))
    return {"TORCHINDUCTOR_CACHE_DIR": str(work / "inductor"), "TRITON_CACHE_DIR": str(work / "triton"),
            "RAYCOMPILE_CACHE_DIR": str(work / "raycompile"), "RAYCOMPILE_SHARED_CACHE": "none"}


def run_child(mode: str, model: str, steps: int, layers: int, env: dict[str, str],
              profile: bool = False) -> dict[str, Any]:
    fresh = fresh_caches(mode)
    if profile:
        env = {**env, "RAYCOMPILE_PROFILE_GPU_WORKERS": "1"}
    proc = subprocess.run([sys.executable, __file__, "--child", mode, "--model", model, "--steps", str(steps),
                           "--layers", str(layers), *(["--profile"] if profile else [])],
                          capture_output=True, text=True, env={**os.environ, **fresh, **env}, timeout=3600,
                          check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{mode} child failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-6000:]}")


def start_cluster(gpus: int, nodes: int) -> Any:
    """A Ray cluster on this machine: ``nodes`` nodes, the first ``gpus`` GPUs and the CPUs split
    between them; each node sees only its own GPUs (CUDA_VISIBLE_DEVICES when it starts), and its
    workers start with empty Inductor and Triton caches of their own."""
    from ray.cluster_utils import Cluster

    cpus = os.cpu_count() or 2
    share = [list(range(gpus))[i::nodes] for i in range(nodes)]
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    cluster = None
    try:
        for i, ids in enumerate(share):
            visible = ",".join(map(str, ids))
            os.environ["CUDA_VISIBLE_DEVICES"] = visible  # Ray reads a new node's GPU ids from here
            args = {"num_cpus": max(1, cpus // nodes), "num_gpus": len(ids),
                    "env_vars": {"CUDA_VISIBLE_DEVICES": visible, **fresh_caches(f"node{i}")}}
            if i == 0:
                cluster = Cluster(initialize_head=True, head_node_args={**args, "include_dashboard": False})
            else:
                cluster.add_node(**args)
        cluster.wait_for_nodes()
    finally:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved
    return cluster


def check_gpus(address: str, gpus: int) -> list[str]:
    """The physical GPU (uuid) each GPU slot of the cluster gets: they must all differ."""
    import ray

    ray.init(address=address, log_to_driver=False)
    try:
        @ray.remote(num_gpus=1, num_cpus=0)
        def which() -> str:
            import torch

            return str(torch.cuda.get_device_properties(0).uuid)

        return sorted(ray.get([which.remote() for _ in range(gpus)], timeout=300))
    finally:
        ray.shutdown()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child")
    p.add_argument("--model", default="llama", choices=["llama", "block"])
    p.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--stock-runs", type=int, default=2, choices=[1, 2])
    p.add_argument("--label", default="local")
    p.add_argument("--profile", action="store_true", help="cProfile the driver's compile and the GPU actors")
    p.add_argument("--out", type=pathlib.Path, default=HERE / "results")
    args = p.parse_args()
    if args.child:
        return child(args.child, args.model, args.steps, args.layers, args.profile)
    import torch

    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    have = torch.cuda.device_count()
    wanted = sorted({1, *args.gpus})  # the 1-GPU farm run is the base of the efficiency
    if max(wanted) > have:
        sys.exit(f"asked for {max(wanted)} GPUs, this machine has {have}")
    # Ray's defaults: the cluster (cluster_utils, this process) and the children (RAY_ADDRESS) run
    # with this environment, so they agree on token authentication whatever it says
    env = {"RAYCOMPILE_SECRET": "autotune-bench"}
    rows = []
    for i in range(args.stock_runs):
        print(f"stock, {MODE}, 1 GPU (run {i + 1}) ...", flush=True)
        rows.append({"case": "stock" if i == 0 else "stock again", "gpus": 1, "nodes": 0,
                     **run_child("stock", args.model, args.steps, args.layers, env, args.profile)})
    for n in wanted:
        nodes = min(args.nodes, n)
        cluster = start_cluster(n, nodes)
        try:
            uuids = check_gpus(cluster.address, n)
            if len(set(uuids)) != n:
                print(f"WARNING: the {n} GPU slots map to {len(set(uuids))} physical GPUs: {uuids}")
            print(f"farm, {n} GPU(s) on {nodes} node(s) ...", flush=True)
            result = run_child("farm", args.model, args.steps, args.layers, {**env, "RAY_ADDRESS": cluster.address},
                               args.profile)
        finally:
            cluster.shutdown()
        rows.append({"case": f"farm {n} GPU", "gpus": n, "nodes": nodes, "physical_gpus": len(set(uuids)), **result})
    stocks = [r for r in rows if r["case"].startswith("stock")]
    stock = {k: statistics.mean(r[k] for r in stocks) for k in ("compile_s", "step_ms", "gpu_ms")}
    base = next(r for r in rows if r["case"] == "farm 1 GPU")
    base_tune = (base.get("stats") or {}).get("benchmark_wall_seconds")
    for r in rows:
        r["x_stock"] = stock["compile_s"] / r["compile_s"]
        r["step_vs_stock"] = r["step_ms"] / stock["step_ms"]
        r["gpu_vs_stock"] = r["gpu_ms"] / stock["gpu_ms"]
        if not r["case"].startswith("stock"):
            r["speedup"] = base["compile_s"] / r["compile_s"]
            r["efficiency"] = r["speedup"] / r["gpus"]
            tune = (r.get("stats") or {}).get("benchmark_wall_seconds")
            if base_tune and tune:
                r["tune_efficiency"] = base_tune / tune / r["gpus"]
    hardware = f"{torch.cuda.get_device_name(0)} x{have}, {os.cpu_count()} CPUs, torch {torch.__version__}"
    print(f"\n{args.model} inference ({args.layers} layers), {MODE}; {hardware}")
    header = ("| case | compile s | enable s | x stock | speedup | efficiency | benchmarks | tune s | tune eff "
              "| ATen picks | step ms | vs stock | GPU ms | vs stock |")
    print(header + "\n|" + "---|" * 14)
    for r in rows:
        s = r.get("stats") or {}
        picks = r.get("picks") or {}
        farm = not r["case"].startswith("stock")
        wall = s.get("benchmark_wall_seconds")
        cells = [r["case"], f"{r['compile_s']:.1f}", f"{r['enable_s']:.1f}" if farm else "", f"{r['x_stock']:.2f}",
                 f"{r['speedup']:.2f}" if farm else "", f"{r['efficiency']:.2f}" if farm else "",
                 str(s.get("benchmarks", "")), f"{wall:.1f}" if wall is not None else "",
                 f"{r['tune_efficiency']:.2f}" if "tune_efficiency" in r else "",
                 f"{picks.get('aten', '?')}/{picks.get('decisions', '?')}", f"{r['step_ms']:.3f}",
                 f"{r['step_vs_stock']:.3f}", f"{r['gpu_ms']:.3f}", f"{r['gpu_vs_stock']:.3f}"]
        print("| " + " | ".join(cells) + " |")
    for r in rows:
        if r.get("later"):
            print(f"{r['case']}: step ms {r['step_ms']:.3f} right after the compile, "
                  + ", ".join(f"{v:.3f} {k}" for k, v in r["later"].items())
                  + f"; {len(r.get('gpu_apps') or [])} processes on the GPUs; threads: {r.get('threads')}")
    for r in rows:
        same = r.get("same") or {}
        if same:
            print(f"{r['case']}, same process, alternating rounds: farm {same['farm_ms']:.3f} ms, stock "
                  f"{same['stock_ms']:.3f} ms per step ({same['ratio']:.3f}x); GPU {same['farm_gpu_ms']:.3f} "
                  f"vs {same['stock_gpu_ms']:.3f} ms ({same['gpu_ratio']:.3f}x)")
    if len(stocks) > 1:
        for k in ("compile_s", "step_ms", "gpu_ms"):
            vals = [r[k] for r in stocks]
            print(f"stock's own run-to-run spread of {k}: {max(vals) / min(vals):.3f}x "
                  f"(stock = the mean of {len(stocks)})")
    for k, name in (("gpu_vs_stock", "GPU time"), ("step_vs_stock", "wall time, across processes")):
        bad = [r["case"] for r in rows if r[k] > QUALITY]
        print(f"steady-state {name} within {QUALITY:.2f}x of stock: {'yes' if not bad else 'NO: ' + ', '.join(bad)}")
    sames = [r for r in rows if r.get("same")]
    if sames:
        bad = [r["case"] for r in sames if r["same"]["ratio"] > QUALITY]
        print(f"steady-state wall time within {QUALITY:.2f}x of stock in the same process: "
              f"{'yes' if not bad else 'NO: ' + ', '.join(bad)}")
    same = len({round(r["checksum"], 1) for r in rows}) == 1
    print(f"outputs' checksums agree: {same} ({[round(r['checksum'], 3) for r in rows]})")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"autotune_scaling_{args.label}.json"
    path.write_text(json.dumps({"model": args.model, "layers": args.layers, "mode": MODE, "hardware": hardware,
                                "stock": stock, "rows": rows}, indent=1))
    if args.profile:
        reports = args.out / f"autotune_scaling_{args.label}_profiles.txt"
        reports.write_text("".join(f"===== {r['case']}: {who} =====\n{text}\n" for r in rows
                                   for who, text in (r.get("profiles") or {}).items()))
        print(f"wrote {reports}")
    sys.path.insert(0, str(HERE))
    from plot import bars_png

    png = bars_png([r["case"] for r in rows], [r["compile_s"] for r in rows], path.with_suffix(".png"),
                   f"{args.model} inference, {MODE} — {hardware}", "compile seconds to first output (lower is better)",
                   line=stock["compile_s"], line_label="stock")
    print(f"wrote {path}" + (f" and {png}" if png else ""))


if __name__ == "__main__":
    main()
