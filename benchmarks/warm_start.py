"""Warm-start benchmark: time to first output of a compiled model, each case in a NEW process.

    python benchmarks/warm_start.py [--model block|llama] [--shared file redis ray-head] [--label NAME]

(a) stock Inductor, cold (empty caches); (b) stock Inductor, warm on the same node (FX-graph cache
hit); (c) the farm, warm from the shared tier on a "fresh node": a new process with an EMPTY local
raycompile cache and an EMPTY Inductor/Triton cache dir, joined to a running Ray cluster, after
another process compiled the model through the farm. Goal: (c) <= 1.1 x (b).
Also the per-hit latency of each cache backend. Prints a table; writes JSON and a PNG.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent


def build(model: str):  # noqa: ANN201 - returns (fn, args)
    import torch

    torch.manual_seed(0)
    if model == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=4096, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                          num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=1024)
        m = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16)
        ids = torch.randint(0, cfg.vocab_size, (4, 512), device="cuda")

        def step(ids: torch.Tensor) -> torch.Tensor:
            loss = m(input_ids=ids, labels=ids).loss
            loss.backward()
            return loss

        return step, (ids,)
    from raycompile.models import TransformerBlock

    device = "cuda" if torch.cuda.is_available() else "cpu"
    blocks = torch.nn.Sequential(*[TransformerBlock(dim=128, heads=4, hidden=344) for _ in range(4)]).to(device)
    return blocks, (torch.randn(4, 64, 128, device=device),)


def child(mode: str, model: str) -> None:
    import torch

    t0 = time.perf_counter()
    if mode == "farm":
        import raycompile

        raycompile.enable(address="auto")
    t1 = time.perf_counter()
    fn, args = build(model)
    t2 = time.perf_counter()
    out = torch.compile(fn)(*args)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t3 = time.perf_counter()
    stats = {}
    if mode == "farm":
        import raycompile

        stats = raycompile.stats()
        raycompile.disable()
    print("RESULT " + json.dumps({"enable_s": t1 - t0, "first_output_s": t3 - t2,
                                  "checksum": float(out.float().sum()), "stats": stats}))


def run_child(mode: str, model: str, env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", mode, "--model", model], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=1800, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{mode} child failed:\n{proc.stderr[-4000:]}")


def hit_latency(shared: str, ray_ok: bool) -> float:
    """Median seconds of one get() of a 256 KiB entry from the tier."""
    from raycompile.cache import Entry, FileTier
    from raycompile.cache.tiered import shared_tier

    secret = b"bench"
    if shared == "local":
        tier = FileTier(tempfile.mkdtemp(), secret)
    elif shared == "ray://head":
        if not ray_ok:
            return float("nan")
        from raycompile.orchestrator.cache_service import RayHeadTier

        tier = RayHeadTier(secret, root=tempfile.mkdtemp())
    else:
        tier = shared_tier(shared, secret)
    entry = Entry("ab" * 32, {"payload": os.urandom(256 * 1024)})
    tier.put(entry)
    times = []
    for _ in range(30):
        t = time.perf_counter()
        assert isinstance(tier.get(entry.key), Entry)
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child")
    p.add_argument("--model", default=None)
    p.add_argument("--shared", nargs="+", default=["file", "redis", "ray-head"])
    p.add_argument("--label", default="local")
    p.add_argument("--out", type=pathlib.Path, default=HERE / "results")
    args = p.parse_args()
    import torch

    model = args.model or ("llama" if torch.cuda.is_available() else "block")
    if args.child:
        return child(args.child, model)

    work = pathlib.Path(tempfile.mkdtemp(prefix="warm-start-"))
    secret = {"RAYCOMPILE_SECRET": "warm-start-bench"}
    procs: list[subprocess.Popen] = []
    urls = {}
    if "redis" in args.shared and shutil.which("redis-server"):
        port = free_port()
        procs.append(subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        urls["redis"] = f"redis://127.0.0.1:{port}/0"
    if "file" in args.shared:
        urls["file"] = f"file://{work / 'shared'}"
    sys.path.insert(0, str(HERE))
    import overhead  # its head: one of this run's own, ended by itself

    try:
        ray_proc, ray_env = overhead.start_ray(work)
    except RuntimeError as e:
        print(f"warm_start: {e}; the farm cases are left out", flush=True)
        ray_proc, ray_env = None, {}
    ray_ok = ray_proc is not None
    if ray_ok and "ray-head" in args.shared:
        urls["ray-head"] = "ray://head"
    # the children join it through its current-cluster file (RAY_TMPDIR), as a node's processes do
    base = {**secret, **ray_env, "RAYCOMPILE_HEAD_CACHE_DIR": str(work / "head")}
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    print(f"warm_start: model {model}, GPU {gpu}, {os.cpu_count()} CPUs, torch {torch.__version__}", flush=True)
    rows = []
    try:
        stock = {"TORCHINDUCTOR_CACHE_DIR": str(work / "stock"), "TRITON_CACHE_DIR": str(work / "stock" / "triton")}
        rows.append(("(a) stock, cold", run_child("stock", model, {**base, **stock})))
        rows.append(("(b) stock, warm, same node", run_child("stock", model, {**base, **stock})))
        if ray_ok:
            for name, url in urls.items():
                def fresh(tag: str, url: str = url, name: str = name) -> dict[str, str]:
                    d = work / f"{name}-{tag}"
                    return {**base, "RAYCOMPILE_SHARED_CACHE": url, "RAYCOMPILE_CACHE_DIR": str(d / "rc"),
                            "TORCHINDUCTOR_CACHE_DIR": str(d / "inductor"), "TRITON_CACHE_DIR": str(d / "triton")}
                rows.append((f"farm, cold, {name}", run_child("farm", model, fresh("cold"))))
                rows.append((f"(c) farm, warm from {name}, fresh node", run_child("farm", model, fresh("warm"))))
        latency = {name: hit_latency(url, ray_ok) for name, url in [("local", "local"), *urls.items()]
                   if name != "ray-head"}
    finally:
        if ray_proc is not None:
            overhead.stop_ray(ray_proc)
        for proc in procs:
            proc.terminate()
    b = rows[1][1]["first_output_s"]
    print(f"\n{'case':<42}{'first output s':>15}{'x (b)':>8}{'Ray jobs':>10}{'enable s':>10}")
    for name, r in rows:
        jobs = r["stats"].get("jobs", "")
        print(f"{name:<42}{r['first_output_s']:>15.2f}{r['first_output_s'] / b:>8.2f}{jobs!s:>10}"
              f"{r['enable_s']:>10.2f}")
    print("\nper-hit latency (256 KiB entry, median of 30):  " +
          "  ".join(f"{k} {v * 1e3:.2f} ms" for k, v in latency.items()))
    checks = {round(r["checksum"], 3) for _, r in rows}
    print(f"outputs identical across cases: {len(checks) == 1}")
    result = {"model": model, "gpu": gpu, "cpus": os.cpu_count(), "torch": torch.__version__,
              "rows": [{"case": n, **r} for n, r in rows], "hit_latency_s": latency}
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"warm_start_{args.label}.json"
    out.write_text(json.dumps(result, indent=1))
    sys.path.insert(0, str(HERE))
    from plot import bars_png

    png = bars_png([n for n, _ in rows], [r["first_output_s"] for _, r in rows], out.with_suffix(".png"),
                   f"time to first output, {model}, GPU {gpu}", "seconds (lower is better)", b * 1.1, "1.1 x (b)")
    print(f"wrote {out} and {png}")


if __name__ == "__main__":
    sys.exit(main())
