"""Autotune scaling: a Llama-style model's inference compiled under max-autotune, stock on one GPU
against the farm with its benchmarks on 1, 2, ... GPU actors. Each case runs in a NEW process with
EMPTY Inductor, Triton and raycompile caches.

    python benchmarks/autotune_scaling.py --gpus 1 2 [--nodes 1|2] [--model llama|block] [--steps 50] [--label h200]

The farm cases run on a Ray cluster made here (``ray.cluster_utils``): ``--nodes M`` Ray nodes on
this machine, the N GPUs split between them (each node sees only its GPUs) and the CPUs too.

Columns:
- compile s: time to the first output of ``torch.compile(model, mode="max-autotune-no-cudagraphs")``
  (the farm's ``raycompile.enable()`` not included; it is reported as "enable s");
- x stock: stock compile s / this case's compile s;
- speedup: the 1-GPU farm run's compile s / this run's; efficiency = speedup / N (1.0: perfect
  scaling of the farm over GPUs);
- benchmarks: autotune candidates timed on the GPU actors (``stats()['benchmarks']``);
- step ms: the median of ``--steps`` steady-state steps; vs stock = step ms / stock's (goal <= 1.03).
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
MODE = "max-autotune-no-cudagraphs"
QUALITY = 1.03


def build(model: str, layers: int = 4):  # noqa: ANN201 - returns (fn, args); warm_start.build, for inference
    import torch

    torch.manual_seed(0)
    if model == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=4096, hidden_size=1024, intermediate_size=2816, num_hidden_layers=layers,
                          num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=1024)
        m = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
        ids = torch.randint(0, cfg.vocab_size, (4, 512), device="cuda")

        def infer(ids: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                return m(input_ids=ids).logits

        return infer, (ids,)
    from raycompile.models import TransformerBlock

    blocks = torch.nn.Sequential(*[TransformerBlock(dim=512, heads=8, hidden=1376) for _ in range(layers)])
    blocks = blocks.cuda().to(torch.bfloat16).eval()
    x = torch.randn(8, 256, 512, device="cuda", dtype=torch.bfloat16)

    def infer_block(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return blocks(x)

    return infer_block, (x,)


def child(mode: str, model: str, steps: int) -> None:
    import torch

    t0 = time.perf_counter()
    if mode == "farm":
        import raycompile

        raycompile.enable(address="auto")
    enable_s = time.perf_counter() - t0
    fn, args = build(model)
    compiled = torch.compile(fn, mode=MODE)
    t1 = time.perf_counter()
    out = compiled(*args)
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - t1
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        compiled(*args)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    stats: dict[str, Any] = {}
    if mode == "farm":
        import raycompile

        stats = raycompile.stats()
        raycompile.disable()
    print("RESULT " + json.dumps({"enable_s": enable_s, "compile_s": compile_s, "step_ms": statistics.median(times),
                                  "checksum": float(out.float().sum()), "stats": stats}))


def run_child(mode: str, model: str, steps: int, env: dict[str, str]) -> dict[str, Any]:
    work = pathlib.Path(tempfile.mkdtemp(prefix=f"autotune-{mode}-"))
    fresh = {"TORCHINDUCTOR_CACHE_DIR": str(work / "inductor"), "TRITON_CACHE_DIR": str(work / "triton"),
             "RAYCOMPILE_CACHE_DIR": str(work / "raycompile"), "RAYCOMPILE_SHARED_CACHE": "none"}
    proc = subprocess.run([sys.executable, __file__, "--child", mode, "--model", model, "--steps", str(steps)],
                          capture_output=True, text=True, env={**os.environ, **fresh, **env}, timeout=3600,
                          check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{mode} child failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-6000:]}")


def start_cluster(gpus: int, nodes: int) -> Any:
    """A Ray cluster on this machine: ``nodes`` nodes, the first ``gpus`` GPUs and the CPUs split
    between them; each node sees only its own GPUs (CUDA_VISIBLE_DEVICES when it starts)."""
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
                    "env_vars": {"CUDA_VISIBLE_DEVICES": visible}}
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
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--label", default="local")
    p.add_argument("--out", type=pathlib.Path, default=HERE / "results")
    args = p.parse_args()
    if args.child:
        return child(args.child, args.model, args.steps)
    import torch

    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    have = torch.cuda.device_count()
    wanted = sorted({1, *args.gpus})  # the 1-GPU farm run is the base of the efficiency
    if max(wanted) > have:
        sys.exit(f"asked for {max(wanted)} GPUs, this machine has {have}")
    env = {"RAY_AUTH_MODE": "disabled", "RAYCOMPILE_SECRET": "autotune-bench"}
    print(f"stock, {MODE}, 1 GPU ...", flush=True)
    rows = [{"case": "stock", "gpus": 1, "nodes": 0, **run_child("stock", args.model, args.steps, env)}]
    for n in wanted:
        nodes = min(args.nodes, n)
        cluster = start_cluster(n, nodes)
        try:
            uuids = check_gpus(cluster.address, n)
            if len(set(uuids)) != n:
                print(f"WARNING: the {n} GPU slots map to {len(set(uuids))} physical GPUs: {uuids}")
            print(f"farm, {n} GPU(s) on {nodes} node(s) ...", flush=True)
            result = run_child("farm", args.model, args.steps, {**env, "RAY_ADDRESS": cluster.address})
        finally:
            cluster.shutdown()
        rows.append({"case": f"farm {n} GPU", "gpus": n, "nodes": nodes, "physical_gpus": len(set(uuids)), **result})
    stock = rows[0]
    base = next(r for r in rows if r["case"] == "farm 1 GPU")
    for r in rows:
        r["x_stock"] = stock["compile_s"] / r["compile_s"]
        r["step_vs_stock"] = r["step_ms"] / stock["step_ms"]
        if r["case"] != "stock":
            r["speedup"] = base["compile_s"] / r["compile_s"]
            r["efficiency"] = r["speedup"] / r["gpus"]
    hardware = f"{torch.cuda.get_device_name(0)} x{have}, {os.cpu_count()} CPUs, torch {torch.__version__}"
    print(f"\n{args.model} inference, {MODE}; {hardware}")
    header = ("| case | compile s | enable s | x stock | speedup | efficiency | benchmarks | bench s (actors) "
              "| step ms | vs stock |")
    print(header + "\n|" + "---|" * 10)
    for r in rows:
        s = r.get("stats") or {}
        farm = r["case"] != "stock"
        print(f"| {r['case']} | {r['compile_s']:.1f} | {r['enable_s']:.1f} | {r['x_stock']:.2f} | "
              f"{r['speedup']:.2f} | {r['efficiency']:.2f} | " if farm else
              f"| {r['case']} | {r['compile_s']:.1f} | | 1.00 | | | ", end="")
        print(f"{s.get('benchmarks', '')} | {s.get('benchmark_seconds', '')} | {r['step_ms']:.3f} | "
              f"{r['step_vs_stock']:.3f} |")
    bad = [r["case"] for r in rows if r["step_vs_stock"] > QUALITY]
    print(f"steady state within {QUALITY:.2f}x of stock: {'yes' if not bad else 'NO: ' + ', '.join(bad)}")
    same = len({round(r["checksum"], 1) for r in rows}) == 1
    print(f"outputs' checksums agree: {same} ({[round(r['checksum'], 3) for r in rows]})")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"autotune_scaling_{args.label}.json"
    path.write_text(json.dumps({"model": args.model, "mode": MODE, "hardware": hardware, "rows": rows}, indent=1))
    sys.path.insert(0, str(HERE))
    from plot import bars_png

    png = bars_png([r["case"] for r in rows], [r["compile_s"] for r in rows], path.with_suffix(".png"),
                   f"{args.model} inference, {MODE} — {hardware}", "compile seconds to first output (lower is better)",
                   line=stock["compile_s"], line_label="stock")
    print(f"wrote {path}" + (f" and {png}" if png else ""))


if __name__ == "__main__":
    main()
