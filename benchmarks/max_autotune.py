"""Max-autotune, stock against the farm: time to the first output and the steady-state step.

    python benchmarks/max_autotune.py [--models gpt2 llama gpt2-breaks] [--cases stock farm farm-graphs farm-backward]
        [--gpus 1 2] [--mode max-autotune-no-cudagraphs|max-autotune] [--layers 4] [--batch 4] [--seq 512]
        [--exhaustive] [--stock-timeout 560] [--steps 20] [--same-process] [--profile] [--sample PY_SPY]
        [--label NAME]

Models: ``gpt2`` a GPT-2-style training step (transformers config, hidden 768, bf16: forward, loss,
backward); ``gpt2-breaks`` the same with a graph break after each block (a step of several graphs:
2 x (layers + 1)); ``llama`` the Llama-style inference model of autotune_scaling.py.
Cases, each a NEW process with EMPTY Inductor, Triton and raycompile caches:
- ``stock``: ``torch.compile(step, mode=MODE)``; where it does not reach its first output within
  ``--stock-timeout`` seconds, the row says so and its compile s is that lower bound;
- ``farm``: ``raycompile.enable()`` with default settings (kernel compiles and max-autotune's
  candidates on the cluster: GPU actors time them);
- ``farm-graphs``: the same with ``graph_compiles="cluster"``: each graph's whole Inductor compile a
  Ray task, the backward graphs compiled while the forward runs;
- ``farm-backward``: ``graph_compiles="backward"``: only the backward graphs are Ray tasks (compiled
  while the forward runs), the forward graphs compile in this process with the farm.
Each farm case runs on a new Ray cluster made here for it (``ray.cluster_utils``) with ``--gpus N``
GPUs, whose workers also start with empty caches; each row records the machine's load average
before its case (``load_before``).

Columns: compile s (process start of the compile to the first output, ``enable()`` counted apart),
x stock (stock's compile s / this one's; ">=" where stock hit its time-out), step ms (steady state,
``--steps`` calls between two synchronizes, median of 5 rounds, pinned core) and vs stock, GPU ms
(profiler kernel time per step), jobs (kernel compiles), bench (candidates timed on GPU actors),
graphs (sent to Ray tasks). ``--same-process``: the farm's compiled step against stock's compiled in
the same process, alternating rounds (costs a stock compile in that process; the GPT-2 step is then
one frame: its loss is named, so transformers does not warn, where Dynamo breaks the graph; see
``build``). ``--profile``: where the
driver's first call spends its time (cProfile, cumulative seconds of Dynamo, AOTAutograd, lowering,
scheduling and codegen, max-autotune's own timings, waits on the farm), written to
``benchmarks/results/max_autotune_LABEL_profile.txt`` and summarized in the table's notes.
Writes JSON and a PNG under benchmarks/results/. Needs CUDA and transformers.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from autotune_scaling import check_gpus, fresh_caches, start_cluster  # noqa: E402 - next to this script
from gpu_steps import gpu_profile, step_ms  # noqa: E402
from timeline import sampled  # noqa: E402

# cumulative-time buckets of the driver's profile: name -> substrings of "file:function"
BUCKETS = {
    "dynamo": ("convert_frame.py:_compile",),
    "aot_autograd": ("aot_autograd.py:aot_module_simplified",),
    "inductor_compile": ("compile_fx.py:_compile_fx_inner",),
    "lowering": ("graph.py:run",),
    "scheduling": ("scheduler.py:__init__",),
    "codegen": ("graph.py:codegen",),
    "module_load": ("graph.py:compile_to_module",),
    "autotune_select": ("select_algorithm.py:__call__",),
    "autotune_timings": ("select_algorithm.py:benchmark_choices", "select_algorithm.py:benchmark_example_value"),
    "wait_kernels": ("async_compile.py:wait",),
    "wait_graphs": ("compat/graphs.py:_result",),
}


def build(model: str, layers: int, batch: int, seq: int, one_frame: bool = False):  # noqa: ANN201 - (step, args)
    """``one_frame``: the GPT-2 model is given its loss by name (``loss_type="ForCausalLM"``, the loss
    transformers falls back to anyway), so its loss function does not call ``logger.warning_once``,
    where Dynamo breaks the graph: the step is one frame (and the backward). ``--same-process``
    needs that: frames of transformers' code that a graph break makes Dynamo compile on their own
    are shared with stock's twin, whose run would reuse them."""
    import torch

    torch.manual_seed(0)
    if model == "llama":
        from gpu_steps import build as llama

        return llama("llama", layers)
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=layers, n_embd=768, n_head=12, vocab_size=8192, n_positions=1024)
    m = GPT2LMHeadModel(cfg).cuda().to(torch.bfloat16).train()
    if one_frame:
        m.loss_type = "ForCausalLM"
    if model == "gpt2-breaks":
        for block in m.transformer.h:
            block.register_forward_hook(lambda *_: torch._dynamo.graph_break())
    elif model != "gpt2":
        raise SystemExit(f"unknown model {model!r}: gpt2, gpt2-breaks or llama")
    ids = torch.randint(0, 8192, (batch, seq), device="cuda")

    def step(ids: torch.Tensor) -> torch.Tensor:
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss

    return step, (ids,)


def breakdown(profiler: Any) -> dict[str, float]:
    import pstats

    stats = pstats.Stats(profiler).stats  # (file, line, func) -> (cc, nc, tt, ct, callers)
    out: dict[str, float] = {}
    for name, needles in BUCKETS.items():
        total = 0.0
        for (path, _, func), (_, _, _, ct, callers) in stats.items():
            where = f"{path}:{func}"
            if any(where.endswith(n) or n in where for n in needles):
                # count a recursive function once: only calls from outside itself
                if not any(f"{c[0]}:{c[2]}" == where for c in callers):
                    total += ct
        out[name] = round(total, 2)
    return out


def child(case: str, model: str, mode: str, layers: int, batch: int, seq: int, steps: int, same: bool,
          profile: str) -> None:
    import faulthandler

    import torch

    if os.environ.get("RAYCOMPILE_BENCH_STACKS_AFTER_S"):
        faulthandler.dump_traceback_later(float(os.environ["RAYCOMPILE_BENCH_STACKS_AFTER_S"]), exit=False)

    t0 = time.perf_counter()
    if case != "stock":
        import raycompile

        graphs = {"farm-graphs": "cluster", "farm-backward": "backward"}.get(case, "local")
        raycompile.enable(address="auto", graph_compiles=graphs)
    enable_s = time.perf_counter() - t0
    fn, args = build(model, layers, batch, seq, one_frame=same)
    compiled = torch.compile(fn, mode=mode)
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
    print(f"COMPILE_START {time.time()}", flush=True)  # a time-out's lower bound counts from here
    t1 = time.perf_counter()
    out = profiler.runcall(compiled, *args) if profiler else compiled(*args)
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - t1
    parts: dict[str, float] = {}
    if profiler is not None:
        import pstats

        parts = breakdown(profiler)
        with open(profile, "a") as f:
            f.write(f"===== {model} {case} =====\n{json.dumps(parts)}\n")
            pstats.Stats(profiler, stream=f).sort_stats("cumulative").print_stats(50)
    checksum = float(out.float().sum())
    wall = step_ms(compiled, args, steps)
    gpu_ms = gpu_profile(compiled, args)[0]
    stats: dict[str, Any] = {}
    same_process: dict[str, Any] = {}
    if case != "stock":
        import raycompile

        stats = raycompile.stats()
        if same:
            from gpu_steps import same_process_vs_stock

            raycompile.disable()
            same_process = same_process_vs_stock(fn, args, compiled, steps, mode=mode)
    from overhead import fx_graph_hits  # next to this script

    from raycompile.wrapper import compat

    print("RESULT " + json.dumps({"enable_s": enable_s, "compile_s": compile_s, "step_ms": wall, "gpu_ms": gpu_ms,
                                  "checksum": checksum, "stats": stats, "same": same_process, "profile": parts,
                                  "fx_graph_hits": fx_graph_hits(),
                                  # torch's FX-graph and AOTAutograd cache counters, hits and misses
                                  "torch_caches": compat.precompile.torch_cache_counters()}),
          flush=True)


def run_child(case: str, a: argparse.Namespace, model: str, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """One case in a new process; a case past ``timeout`` is a row that says so, and its threads'
    stacks (dumped by the child just before) go to ``max_autotune_LABEL_MODEL_CASE_stacks.txt``."""
    fresh = fresh_caches(case)
    cmd = [sys.executable, __file__, "--child", case, "--models", model, "--mode", a.mode, "--layers", str(a.layers),
           "--batch", str(a.batch), "--seq", str(a.seq), "--steps", str(a.steps),
           *(["--same-process"] if a.same_process and case != "stock" else []),
           *(["--profile-to", str(a.profile_to)] if a.profile else [])]
    if a.sample:  # every thread's stacks, waits included (benchmarks/timeline.py reads them)
        cmd = sampled(a.sample, str(a.out / f"max_autotune_{a.label}_sampled_{model}_{case}.json"), cmd)
    started = time.perf_counter()
    started_epoch = time.time()
    # the child dumps every thread's stack shortly before the time-out (faulthandler), to say where it was
    stacks = {"RAYCOMPILE_BENCH_STACKS_AFTER_S": str(max(1.0, timeout - 10.0))}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **fresh, **env, **stacks},
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        where = a.out / f"max_autotune_{a.label}_{model}_{case}_stacks.txt"
        where.write_text(err[-200_000:])
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        # the lower bound is the compile's own time: from its start (imports and the model's build excluded)
        begun = [float(x.split()[1]) for x in out.splitlines() if x.startswith("COMPILE_START ")]
        bound = started_epoch + timeout - begun[0] if begun else timeout
        print(f"{model} {case}: no result within {timeout:.0f} s ({bound:.0f} s of compile); its stacks: {where}",
              flush=True)
        return {"timed_out": True, "compile_s": bound, "wall_s": time.perf_counter() - started}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{model} {case} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-6000:]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child")
    p.add_argument("--models", nargs="+", default=["gpt2", "llama"])
    p.add_argument("--cases", nargs="+", default=["stock", "farm", "farm-graphs"])
    p.add_argument("--gpus", type=int, nargs="+", default=[1])
    p.add_argument("--mode", default="max-autotune-no-cudagraphs")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--exhaustive", action="store_true", help="max_autotune_gemm_search_space=EXHAUSTIVE")
    p.add_argument("--stock-timeout", type=float, default=560.0)
    p.add_argument("--farm-timeout", type=float, default=900.0)
    p.add_argument("--same-process", action="store_true")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--profile-to", type=pathlib.Path)
    p.add_argument("--sample", default="", metavar="PY_SPY",
                   help="a py-spy binary: each case runs under `py-spy record --threads --idle` "
                        "(max_autotune_LABEL_sampled_MODEL_CASE.json; `python benchmarks/timeline.py FILE`)")
    p.add_argument("--label", default="local")
    p.add_argument("--out", type=pathlib.Path, default=HERE / "results")
    a = p.parse_args()
    if a.child:
        return child(a.child, a.models[0], a.mode, a.layers, a.batch, a.seq, a.steps, a.same_process,
                     str(a.profile_to) if a.profile_to else "")
    import torch

    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    a.out.mkdir(parents=True, exist_ok=True)
    if a.profile:
        a.profile_to = a.out / f"max_autotune_{a.label}_profile.txt"
        a.profile_to.write_text("")
    # Ray's defaults: the cluster (cluster_utils, this process) and the children (RAY_ADDRESS) run
    # with this environment, so they agree on token authentication whatever it says
    env = {"RAYCOMPILE_SECRET": "max-autotune-bench"}
    if a.exhaustive:
        env["TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_SEARCH_SPACE"] = "EXHAUSTIVE"
    hardware = f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}, {os.cpu_count()} CPUs, " \
               f"torch {torch.__version__}"
    rows: list[dict[str, Any]] = []
    for model in a.models:
        if "stock" in a.cases:
            print(f"{model}: stock ...", flush=True)
            rows.append({"model": model, "case": "stock", "gpus": 1, "load_before": os.getloadavg()[0],
                         **run_child("stock", a, model, env, a.stock_timeout)})
        for n in a.gpus:
            farm_cases = [c for c in a.cases if c != "stock"]
            if not farm_cases:
                continue
            for case in farm_cases:
                # a new cluster for each case: nothing one case's workers left (warm processes, actors)
                # serves or slows the next
                cluster = start_cluster(n, 1)
                try:
                    check_gpus(cluster.address, n)
                    print(f"{model}: {case}, {n} GPU(s) ...", flush=True)
                    rows.append({"model": model, "case": case, "gpus": n, "load_before": os.getloadavg()[0],
                                 **run_child(case, a, model, {**env, "RAY_ADDRESS": cluster.address},
                                             a.farm_timeout)})
                finally:
                    cluster.shutdown()
    table(rows, a, hardware)
    path = a.out / f"max_autotune_{a.label}.json"
    path.write_text(json.dumps({"mode": a.mode, "layers": a.layers, "batch": a.batch, "seq": a.seq,
                                "exhaustive": a.exhaustive, "hardware": hardware, "rows": rows}, indent=1))
    from plot import bars_png

    labels = [f"{r['model']} {r['case']} {r['gpus']}G" for r in rows]
    png = bars_png(labels, [r["compile_s"] for r in rows], path.with_suffix(".png"),
                   f"{a.mode}, first output — {hardware}", "seconds to first output (lower is better)")
    print(f"wrote {path}" + (f" and {png}" if png else ""))


def _jobs(s: dict[str, Any]) -> str:
    """Kernel compile jobs: on Ray, in this node's Inductor workers, and those the graph tasks'
    workers ran or sent."""
    if s.get("jobs") is None:
        return ""
    return str(s["jobs"] + s.get("jobs_local", 0) + s.get("graph_kernel_jobs", 0))


def table(rows: list[dict[str, Any]], a: argparse.Namespace, hardware: str) -> None:
    space = " (EXHAUSTIVE)" if a.exhaustive else ""
    print(f"\n{a.mode}{space}; {a.layers} layers, batch {a.batch}x{a.seq}; {hardware}")
    print("| model | case | GPUs | compile s | x stock | step ms | vs stock | GPU ms | jobs | bench | graphs | "
          "checksum |\n|" + "---|" * 12)
    for r in rows:
        stock = next((s for s in rows if s["model"] == r["model"] and s["case"] == "stock"), None)
        s = r.get("stats") or {}
        cells = [r["model"], r["case"], str(r["gpus"])]
        if r.get("timed_out"):
            cells += [f">= {r['compile_s']:.0f} (time-out)", "", "", "", "", "", "", "", ""]
        else:
            ratio = ""
            if stock is not None and r is not stock:
                ratio = (">= " if stock.get("timed_out") else "") + f"{stock['compile_s'] / r['compile_s']:.2f}"
            vs = ""
            if stock is not None and not stock.get("timed_out") and r is not stock:
                vs = f"{r['step_ms'] / stock['step_ms']:.3f}"
            cells += [f"{r['compile_s']:.1f}", ratio, f"{r['step_ms']:.2f}", vs, f"{r['gpu_ms']:.2f}",
                      _jobs(s), str(s.get("benchmarks", "")),
                      str(s.get("graphs_sent", "")), f"{r['checksum']:.4f}"]
        print("| " + " | ".join(cells) + " |")
    for r in rows:
        if r.get("same"):
            same = r["same"]
            print(f"{r['model']} {r['case']} {r['gpus']} GPU, same process, alternating rounds: farm "
                  f"{same['farm_ms']:.3f} ms, stock {same['stock_ms']:.3f} ms ({same['ratio']:.3f}x); GPU "
                  f"{same['gpu_ratio']:.3f}x; stock compiled {same.get('stock_graphs', '?')} graphs in "
                  f"{same['stock_compile_s']:.1f} s"
                  + ("" if same.get("valid", True) else
                     " -- NOT VALID: stock compiled no graph of its own (it ran the farm's frames)"))
        if r.get("profile"):
            print(f"{r['model']} {r['case']} {r['gpus']} GPU, driver's first call (cumulative s): {r['profile']}")
        s = r.get("stats") or {}
        if s.get("graphs_sent") or s.get("graphs_refused") or s.get("graphs_failed"):
            print(f"{r['model']} {r['case']} {r['gpus']} GPU graphs: sent {s.get('graphs_sent')}, backward deferred "
                  f"{s.get('graphs_backward_deferred')} (early {s.get('graphs_backward_early')}), refused "
                  f"{s.get('graphs_refused')} {s.get('graphs_refused_reasons') or ''}, "
                  f"failed {s.get('graphs_failed')}, "
                  f"compile s on workers {s.get('graph_compile_seconds')}, waited {s.get('graph_wait_seconds')}, "
                  f"kernel jobs {s.get('graph_kernel_jobs')}")


if __name__ == "__main__":
    main()
