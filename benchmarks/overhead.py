"""What turning raycompile on costs, and what a warm node gets, against stock PyTorch in the same run.

    python benchmarks/overhead.py [--models gpt2 gpt2-breaks mixtral llama bert] [--cases ...] [--rounds N]
        [--bytecode-cache]
        [--sample PY_SPY] [--warm-index N] [--label NAME]

A training step (forward, loss, backward) of models built from transformers configs (random
weights; bf16 on a GPU, fp32 small on a CPU; ``gpt2-breaks``: 8 GPT-2 blocks, a graph break after
each, so Inductor's FX-graph cache serves the later blocks' graphs). Each case is a NEW process;
the parent times it from its start (``Popen``) to its first output, and the child reports its
imports (torch, transformers), the model's build, ``raycompile.enable()`` and the first call apart:

- stock cold: empty Inductor/Triton caches; it also saves a Mega-Cache
  (``torch.compiler.save_cache_artifacts``);
- stock warm: the same node again (FX-graph cache hit);
- Mega-Cache, fresh node: empty caches, ``load_cache_artifacts`` of that Mega-Cache, then the call;
- farm cold (default settings, joining the running Ray cluster; shared tier ``file://`` or
  ``ray://head``): compiled frames and kernels go to the tiers;
- farm warm, fresh node: empty local raycompile, Inductor and Triton caches, the same shared tier
  (the warm node loads the compiled frames: no Dynamo, AOTAutograd or lowering);
- kernels cold / kernels warm, fresh node: the same two with ``RAYCOMPILE_DYNAMO_CACHE=0`` (only
  the kernels are shared, as before compiled frames were on by default).

"compile s" is what compiling costs a case, with the imports and the model's build counted apart:
``enable()`` (frames cases: it imports Dynamo, which stock imports in ``torch.compile``), the
Mega-Cache load, ``torch.compile`` and the first call. ``--profile`` writes a cProfile of that part of
the warm frames case (``overhead_<label>_<model>_frames_profile.txt``, and its ``.pstats``). ``--bytecode-cache``: every
process reads and writes Python's byte-code cache in one writable dir (``PYTHONPYCACHEPREFIX``), as
on an installed machine; where site-packages hold no ``.pyc`` and cannot take them (the GPU
machine), every import otherwise compiles its source again, in every case. The cache is filled once
before the first case (not timed), so no case pays for it alone. On CPU, one small compile before
the cases (not timed) builds the precompiled header Inductor's C++ kernels include: it lives in
``default_cache_dir()``, shared by every case whatever ``TORCHINDUCTOR_CACHE_DIR`` says, so the
first case on a machine without it would pay for it alone (stop 62).

``--rounds N``: every case N times, each round on a new cluster with empty caches, stock's and the
farm's cold cases in alternating order; a table of medians gives each case's median ratio to
stock's case of the same round. ``--sample PY_SPY``: the first round's cases run under py-spy
(every thread, waits included); ``benchmarks/timeline.py`` prints where each main thread spent its
time and what it waited on. ``--warm-index N`` (a machine with several GPUs): the farm's warm
cases run on ``cuda:N`` (``torch.cuda.set_device``, as a rank of torchrun sets its GPU), loading
frames the cold case compiled on ``cuda:0``; the table's "on" column names each loss's device.

A Ray cluster is started first (``ray start --head``), as on a node of a cluster; raycompile
joins it with no address (its current-cluster file) and no secret (the cluster holds one).
``--no-cluster``: none is started, as on a single GPU box where a user only calls ``enable()``
(the farm's cases start an embedded Ray of their own only for what needs one).
Prints a table with the ratios to stock, writes JSON and a PNG under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
# what every case imports, run once before the cases to fill the byte-code cache (--bytecode-cache)
PREFILL = ("import torch, transformers, ray, raycompile, torch._dynamo, torch._inductor.compile_fx, "
           "torch._inductor.runtime.triton_heuristics, torch._inductor.codegen.triton; "
           "from transformers import GPT2LMHeadModel, MixtralForCausalLM, BertForMaskedLM")
# on CPU, one small compile before the cases (not timed): Inductor keeps the precompiled header its
# C++ kernels include in default_cache_dir() (/tmp/torchinductor_$USER), which TORCHINDUCTOR_CACHE_DIR
# does not move, so without it the first case alone pays for building it (9.5 s on the 2-CPU box)
HEADER_PREFILL = "import torch; f = torch.compile(lambda x: (x * 2 + 1).sum()); f(torch.randn(64, 64))"
COMPILE_MODULES = ("torch._inductor.compile_fx", "torch._inductor.graph", "torch._inductor.lowering",
                   "torch._inductor.scheduler", "torch._inductor.select_algorithm", "torch._inductor.codegen.wrapper",
                   "torch._inductor.debug")
CASES = ("stock-cold", "stock-warm", "megacache", "farm-cold-file", "farm-warm-file", "farm-cold-head",
         "farm-warm-head", "kernels-cold-file", "kernels-warm-file")


# -- the child: one case, one process ---------------------------------------------------------------


def build(model: str, device: str, layers: int | None = None) -> tuple[Any, tuple[Any, ...]]:
    """(step, args): a training step of ``model`` built from its transformers config (``layers``:
    the Llama's, instead of 16 on a GPU and 2 on CPU)."""
    import torch

    torch.manual_seed(0)
    gpu = device == "cuda"
    dtype = torch.bfloat16 if gpu else torch.float32
    batch, seq = (4, 512) if gpu else (2, 64)
    if model in ("gpt2", "gpt2-breaks"):
        from transformers import GPT2Config, GPT2LMHeadModel

        # gpt2-breaks: 8 blocks, each ending in a graph break (a forward hook, as a logging or
        # checking hook makes one), so its blocks' graphs equal each other's
        cfg = GPT2Config(n_layer=4 if model == "gpt2" else 8, n_embd=768 if gpu else 128, n_head=12 if gpu else 4,
                         vocab_size=8192, n_positions=1024)
        m = GPT2LMHeadModel(cfg)
        if model == "gpt2-breaks":
            for block in m.transformer.h:
                block.register_forward_hook(lambda *_: torch._dynamo.graph_break())
    elif model == "mixtral":
        from transformers import MixtralConfig, MixtralForCausalLM

        cfg = MixtralConfig(hidden_size=512 if gpu else 128, intermediate_size=1024 if gpu else 256,
                            num_hidden_layers=2, num_attention_heads=8 if gpu else 4,
                            num_key_value_heads=4 if gpu else 2,
                            num_local_experts=8, num_experts_per_tok=2, vocab_size=8192,
                            max_position_embeddings=1024)
        m = MixtralForCausalLM(cfg)
    elif model == "llama":  # 1B-class (Llama 3.2 1B's shape; a 32k vocabulary)
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(hidden_size=2048 if gpu else 128, intermediate_size=8192 if gpu else 256,
                          num_hidden_layers=layers or (16 if gpu else 2), num_attention_heads=32 if gpu else 4,
                          num_key_value_heads=8 if gpu else 2, vocab_size=32000, max_position_embeddings=2048)
        m = LlamaForCausalLM(cfg)
    elif model == "bert":
        from transformers import BertConfig, BertForMaskedLM

        cfg = BertConfig(num_hidden_layers=4, hidden_size=768 if gpu else 128, num_attention_heads=12 if gpu else 4,
                         intermediate_size=3072 if gpu else 512, vocab_size=8192)
        m = BertForMaskedLM(cfg)
    else:
        raise SystemExit(f"unknown model {model!r}: gpt2, gpt2-breaks, mixtral, llama or bert")
    m = m.to(device=device, dtype=dtype).train()
    ids = torch.randint(0, 8192, (batch, seq), device=device)

    def step(ids: torch.Tensor) -> torch.Tensor:
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss

    return step, (ids,)


def fx_graph_hits() -> int:
    """Graphs Inductor's FX-graph cache served in this process (torch's own counter, through the
    adapter; read after the timed part, so a stock case imports raycompile only then)."""
    from raycompile.wrapper import compat

    return compat.precompile.torch_cache_counters()["torch_fxgraph_hits"]


def _graphs_traced() -> int:
    """Graphs Dynamo traced in this process (its own counter)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def child(case: str, model: str, device: str, megacache: str) -> None:
    t0 = time.perf_counter()
    import torch
    import transformers  # noqa: F401 - counted with the imports

    t_import = time.perf_counter() - t0
    if os.environ.get("OVERHEAD_LOG"):  # a diagnosis: raycompile's debug log, appended to this file
        import logging

        logging.basicConfig(filename=os.environ["OVERHEAD_LOG"],
                            format=f"{case} %(relativeCreated)7.0fms %(threadName)s %(name)s: %(message)s")
        logging.getLogger("raycompile").setLevel(logging.DEBUG)
    if os.environ.get("OVERHEAD_CUDA_INDEX"):  # --warm-index: this rank's GPU, as torchrun's scripts set it
        torch.cuda.set_device(int(os.environ["OVERHEAD_CUDA_INDEX"]))
    farm = case.startswith(("farm", "kernels"))
    profile_to = os.environ.get("OVERHEAD_PROFILE")
    profiler = None
    if profile_to:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    t1 = time.perf_counter()
    if farm:
        import raycompile

        raycompile.enable()
    t_enable = time.perf_counter() - t1
    t_load = 0.0
    if case == "megacache":
        t = time.perf_counter()
        torch.compiler.load_cache_artifacts(pathlib.Path(megacache).read_bytes())
        t_load = time.perf_counter() - t
    if profiler is not None:
        profiler.disable()
    t2 = time.perf_counter()
    step, args = build(model, device)
    t_build = time.perf_counter() - t2
    if profiler is not None:
        profiler.enable()
    t3 = time.perf_counter()
    compiled = torch.compile(step)
    t_compile = time.perf_counter() - t3
    loss = compiled(*args)
    if device == "cuda":
        torch.cuda.synchronize()
    first_output = time.time()
    t_call = time.perf_counter() - t3
    if profiler is not None:
        import pstats

        profiler.disable()
        profiler.dump_stats(profile_to.removesuffix(".txt") + ".pstats")  # for pstats' callers/callees
        with open(profile_to, "w") as f:
            pstats.Stats(profiler, stream=f).sort_stats("cumulative").print_stats(150)
            f.write("\n\nby own time:\n")
            pstats.Stats(profiler, stream=f).sort_stats("tottime").print_stats(60)
    # Inductor's compile modules the process had imported by its first output (a warm load needs none)
    compile_modules = sorted(m for m in COMPILE_MODULES if m in sys.modules)
    stats: dict[str, Any] = {}
    report = ""
    if farm:
        import raycompile

        raycompile.disable()  # writes the compiled frames not written yet
        stats = raycompile.stats()
        report = raycompile.report()
    if case == "stock-cold":
        saved = torch.compiler.save_cache_artifacts()
        if saved is not None:
            pathlib.Path(megacache).write_bytes(saved[0])
    print("RESULT " + json.dumps({
        "imports_s": t_import, "enable_s": t_enable, "load_s": t_load, "build_s": t_build, "call_s": t_call,
        "torch_compile_s": t_compile,
        "first_output_epoch": first_output, "loss": float(loss.float()), "loss_device": str(loss.device),
        "jobs": stats.get("jobs"), "jobs_local": stats.get("jobs_local"),
        "jobs_in_process": stats.get("jobs_in_process"), "benchmarks": stats.get("benchmarks"),
        "tuned_here": stats.get("benchmarks_local"), "winners_cached": stats.get("autotune_cached"),
        "local_hits": stats.get("local_hits"),
        "fallbacks": stats.get("fallbacks"), "refused": stats.get("refused"), "shared_hits": stats.get("shared_hits"),
        "frames_loaded": stats.get("dynamo_frames_loaded"), "frames_traced": stats.get("dynamo_frames_traced"),
        "frames_published": stats.get("dynamo_published"), "frames_unsaveable": stats.get("dynamo_unsaveable"),
        "frames_stats": {k: v for k, v in stats.items() if k.startswith("dynamo_")},
        "ray_begun": (stats.get("ray_start_seconds") or {}).get("begun"),
        "graphs_traced": _graphs_traced(), "fx_graph_hits": fx_graph_hits(), "compile_modules": compile_modules,
        "stats": stats, "report": report,
    }), flush=True)


# -- the parent ----------------------------------------------------------------------------------


def run_case(case: str, model: str, device: str, env: dict[str, str], megacache: str, timeout: float,
             sample: tuple[str, str] | None = None) -> dict:
    """One case in a new process. ``sample``: (py-spy binary, output prefix): the case runs under
    ``py-spy record --threads --idle`` (every thread's stacks, waits included, in the order sampled:
    speedscope JSON; ``benchmarks/timeline.py`` reads it)."""
    if case.startswith("kernels"):
        env = {**env, "RAYCOMPILE_DYNAMO_CACHE": "0"}
    cmd = [sys.executable, __file__, "--child", case, "--models", model, "--device", device, "--megacache", megacache]
    if sample:
        from timeline import sampled  # next to this script

        cmd = sampled(sample[0], f"{sample[1]}_{model}_{case}.json", cmd)
    started = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=timeout, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
            result["start_to_output_s"] = result.pop("first_output_epoch") - started
            return result
    raise RuntimeError(f"{model} {case} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def start_ray(work: pathlib.Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """A head node on this machine, as `ray start --head` gives an operator, in a Ray temp dir of
    this run's own (so its current-cluster file is this run's, and no other Ray is touched);
    returns the blocking `ray start` process (SIGTERM ends the cluster) and the env to join it."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="ro", dir="/tmp")  # short: Ray's socket paths have a length limit
    # Ray's defaults: with a token on this machine the head wants it, and the drivers, joining
    # through the current-cluster file (no address), find it as ray.init() does
    env = {"RAY_TMPDIR": tmp, "RAYCOMPILE_HEAD_CACHE_DIR": str(work / "head")}
    # the `ray` command, wherever ray is installed; --block: Ray ends its processes when this one ends
    proc = subprocess.Popen([sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
                             f"--port={port}", "--disable-usage-stats", "--include-dashboard=false"],
                            env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = pathlib.Path(tmp, "ray", "ray_current_cluster")
    deadline = time.monotonic() + 300
    while not marker.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("ray start --head did not come up")
        time.sleep(0.2)
    settle()
    return proc, env


def prefill_header(work: pathlib.Path, models: list[str] | None = None, device: str = "cpu") -> None:
    """What the first case alone would pay, paid once before the cases, untimed: on CPU the
    precompiled C++ header every case's kernels include (HEADER_PREFILL); on both, the libraries a
    process reads from disk to build ``models`` and run an eager step on ``device`` (transformers,
    CUDA's, cuBLAS's), and Ray's, which the farm's cases import. The case that ran first on a fresh
    GPU machine built its model 1-5 s slower than the next (ranks.py: the farm, always first, until
    stop 63)."""
    if device == "cpu":
        subprocess.run([sys.executable, "-c", HEADER_PREFILL], check=False, timeout=600, capture_output=True,
                       env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(work / "header-prefill")})
    warm = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import ray, raycompile; from overhead import build\n"
            f"for m in {list(models or [])!r}:\n    step, args = build(m, {device!r}); step(*args)")
    subprocess.run([sys.executable, "-c", warm], check=False, timeout=600, capture_output=True)


def busy_cpu_s() -> float:
    """The machine's busy CPU time so far (all CPUs, /proc/stat), in seconds."""
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


def settle(limit_s: float = 15.0, quiet_cpu_s: float = 0.15) -> float:
    """Wait until the machine is quiet (less than ``quiet_cpu_s`` of busy CPU in one second), at
    most ``limit_s``; returns the seconds waited. A `ray start` head goes on starting after its
    current-cluster file appears (the raylet's prestarted workers import Ray): the case or job
    that came first was charged that start (its CPU, and on a small machine its wall time), which a
    cluster that is up before a job does not cost it (until stop 62)."""
    began = time.monotonic()
    while time.monotonic() - began < limit_s:
        before = busy_cpu_s()
        time.sleep(1.0)
        if busy_cpu_s() - before < quiet_cpu_s:
            break
    return time.monotonic() - began


def stop_ray(proc: subprocess.Popen[bytes]) -> None:
    """End the head this run started (never the ray CLI's stop command: it ends every Ray on the machine)."""
    import signal

    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def fresh(work: pathlib.Path, tag: str) -> dict[str, str]:
    """Empty Inductor, Triton and raycompile caches: a node that never compiled this model."""
    d = work / tag
    return {"TORCHINDUCTOR_CACHE_DIR": str(d / "inductor"), "TRITON_CACHE_DIR": str(d / "triton"),
            "RAYCOMPILE_CACHE_DIR": str(d / "raycompile")}


def run_model(model: str, device: str, cases: list[str], work: pathlib.Path, ray_env: dict[str, str],
              timeout: float, profile: str | None = None, sample: tuple[str, str] | None = None,
              farm_first: bool = False, warm_index: int | None = None) -> dict[str, dict]:
    """Each case in ``cases``: the cold ones first (stock's, then the farm's; ``farm_first``: the
    farm's first, as every other round does, so neither always runs first on a new cluster), then
    the warm ones, in CASES order."""
    megacache = str(work / f"{model}.megacache")
    stock = fresh(work, f"{model}-stock")
    envs = {
        "stock-cold": stock, "stock-warm": stock, "megacache": fresh(work, f"{model}-mega"),
        "farm-cold-file": {**fresh(work, f"{model}-farm-file-a"), **ray_env,
                           "RAYCOMPILE_SHARED_CACHE": f"file://{work / model / 'shared'}"},
        "farm-warm-file": {**fresh(work, f"{model}-farm-file-b"), **ray_env,
                           "RAYCOMPILE_SHARED_CACHE": f"file://{work / model / 'shared'}"},
        "farm-cold-head": {**fresh(work, f"{model}-farm-head-a"), **ray_env, "RAYCOMPILE_SHARED_CACHE": "ray://head"},
        "farm-warm-head": {**fresh(work, f"{model}-farm-head-b"), **ray_env, "RAYCOMPILE_SHARED_CACHE": "ray://head"},
        "kernels-cold-file": {**fresh(work, f"{model}-kernels-a"), **ray_env,
                              "RAYCOMPILE_SHARED_CACHE": f"file://{work / model / 'shared-kernels'}"},
        "kernels-warm-file": {**fresh(work, f"{model}-kernels-b"), **ray_env,
                              "RAYCOMPILE_SHARED_CACHE": f"file://{work / model / 'shared-kernels'}"},
    }
    if warm_index is not None:  # the farm's warm cases on another GPU than the cold ones compiled on
        for case in ("farm-warm-file", "farm-warm-head"):
            envs[case]["OVERHEAD_CUDA_INDEX"] = str(warm_index)
    if profile:
        envs["farm-warm-file"]["OVERHEAD_PROFILE"] = f"{profile}_{model}_frames_profile.txt"
    out = {}
    cold = [c for c in CASES if "cold" in c]  # every cold case before the warm ones that read them
    if farm_first:
        cold = cold[1:] + cold[:1]
    order = cold + [c for c in CASES if c not in cold]
    for case in order:
        if case in cases:
            out[case] = run_case(case, model, device, envs[case], megacache, timeout, sample)
            r = out[case]
            print(f"  {model:<8}{case:<16} start->output {r['start_to_output_s']:7.2f} s  "
                  f"(imports {r['imports_s']:.2f}, "
                  f"enable {r['enable_s']:.2f}, load {r['load_s']:.2f}, build {r['build_s']:.2f}, "
                  f"first call {r['call_s']:.2f}, of which torch.compile {r['torch_compile_s']:.2f})  jobs {_jobs(r)}  "
                  f"fallbacks {r['fallbacks']}  shared hits {r['shared_hits']}  frames loaded {r['frames_loaded']} "
                  f"traced {r['frames_traced']}  graphs traced {r['graphs_traced']}  FX-graph cache hits "
                  f"{r.get('fx_graph_hits')}  Inductor compile modules {len(r.get('compile_modules') or [])}  "
                  f"Ray begun "
                  f"{r['ray_begun']}  loss {r['loss']:.6f}", flush=True)
    return out


def _jobs(r: dict) -> str:
    """Compile jobs: on Ray, plus those run in this node's Inductor workers (compile_jobs=auto)."""
    if r.get("jobs") is None:
        return ""
    return str(r["jobs"] + (r.get("jobs_local") or 0))


def compile_s(r: dict) -> float:
    """What compiling cost the case, imports and the model's build apart."""
    return r["enable_s"] + r["load_s"] + r["call_s"]


def table(results: dict[str, dict[str, dict]]) -> str:
    lines = [f"{'model':<9}{'case':<17}{'enable s':>9}{'first call s':>13}{'start->output s':>16}"
             f"{'x stock':>9}{'compile s':>10}{'x stock':>9}{'x mega':>8}{'jobs':>6}{'frames l/t':>11}{'loss':>12}"
             f"{'on':>8}"]
    for model, rows in results.items():
        for case, r in rows.items():
            base = rows.get("stock-cold" if "cold" in case else "stock-warm")
            ratio = r["start_to_output_s"] / base["start_to_output_s"] if base else float("nan")
            cratio = compile_s(r) / compile_s(base) if base else float("nan")
            mega = rows.get("megacache")
            mratio = compile_s(r) / compile_s(mega) if mega and "cold" not in case else float("nan")
            frames = "" if r.get("frames_loaded") is None else f"{r['frames_loaded']}/{r['frames_traced']}"
            lines.append(f"{model:<9}{case:<17}{r['enable_s'] + r['load_s']:>9.2f}{r['call_s']:>13.2f}"
                         f"{r['start_to_output_s']:>16.2f}{ratio:>9.2f}{compile_s(r):>10.2f}{cratio:>9.2f}"
                         f"{mratio:>8.2f}{_jobs(r):>6}{frames:>11}{r['loss']:>12.6f}{r.get('loss_device', ''):>8}")
    return "\n".join(lines)


def medians(rounds: list[dict[str, dict[str, dict]]]) -> dict[str, dict[str, dict]]:
    """Per model and case: the median over the rounds of start->output and compile s, and of their
    ratios to stock's case of the same round (cold to stock cold, warm to stock warm)."""
    import statistics

    out: dict[str, dict[str, dict]] = {}
    for model in rounds[0]:
        for case in rounds[0][model]:
            runs = [r[model][case] for r in rounds if case in r.get(model, {})]
            bases = [r[model].get("stock-cold" if "cold" in case else "stock-warm") for r in rounds
                     if case in r.get(model, {})]
            ratio = [x["start_to_output_s"] / b["start_to_output_s"] for x, b in zip(runs, bases) if b]
            cratio = [compile_s(x) / compile_s(b) for x, b in zip(runs, bases) if b]
            out.setdefault(model, {})[case] = {
                "start_to_output_s": statistics.median(x["start_to_output_s"] for x in runs),
                "compile_s": statistics.median(compile_s(x) for x in runs),
                "x_stock": statistics.median(ratio) if ratio else None,
                "compile_x_stock": statistics.median(cratio) if cratio else None,
                "compile_s_each": [round(compile_s(x), 2) for x in runs],
                "compile_x_stock_each": [round(c, 3) for c in cratio],
            }
    return out


def median_table(med: dict[str, dict[str, dict]], n: int) -> str:
    lines = [f"medians over {n} rounds",
             f"{'model':<9}{'case':<17}{'start->output s':>16}{'x stock':>9}{'compile s':>10}{'x stock':>9}"
             f"   compile x stock, each round"]
    for model, rows in med.items():
        for case, m in rows.items():
            x = "" if m["x_stock"] is None else f"{m['x_stock']:.3f}"
            c = "" if m["compile_x_stock"] is None else f"{m['compile_x_stock']:.3f}"
            lines.append(f"{model:<9}{case:<17}{m['start_to_output_s']:>16.2f}{x:>9}{m['compile_s']:>10.2f}{c:>9}"
                         f"   {' '.join(str(v) for v in m['compile_x_stock_each'])}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child")
    p.add_argument("--megacache", default="")
    p.add_argument("--models", nargs="+", default=["gpt2", "mixtral"])
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when there is one)")
    p.add_argument("--timeout", type=float, default=900, help="seconds one case may take")
    p.add_argument("--label", default="local")
    p.add_argument("--profile", action="store_true", help="cProfile the warm frames case's compile")
    p.add_argument("--out", type=pathlib.Path, default=HERE / "results")
    p.add_argument("--bytecode-cache", action="store_true", help="one writable byte-code cache for every process")
    p.add_argument("--warm-index", type=int, default=None, metavar="N",
                   help="run the farm's warm cases on cuda:N (frames compiled on cuda:0, loaded on another GPU)")
    p.add_argument("--no-cluster", action="store_true",
                   help="start no Ray cluster: the farm's cases run as enable() alone does on one machine")
    p.add_argument("--rounds", type=int, default=1,
                   help="run every case this many times (each round a new cluster and empty caches); the "
                        "table of medians gives each case's median ratio to stock over the rounds")
    p.add_argument("--sample", default="", metavar="PY_SPY",
                   help="a py-spy binary: the first round's cases run under `py-spy record --threads --idle` "
                        "(overhead_LABEL_sampled_MODEL_CASE.json; `python benchmarks/timeline.py FILE` prints "
                        "where the main thread spent its time and what it waited on)")
    args = p.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.child:
        child(args.child, args.models[0], device, args.megacache)
        return 0
    work = pathlib.Path(tempfile.mkdtemp(prefix="overhead-"))
    if args.bytecode_cache:  # inherited by Ray and by every case
        os.environ["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        # filled before the first case (not timed), else that case alone pays for compiling the sources
        subprocess.run([sys.executable, "-c", PREFILL], check=False, timeout=600, capture_output=True)
    prefill_header(work, args.models, device)
    where = torch.cuda.get_device_name() if device == "cuda" else f"CPU ({os.cpu_count()} cores)"
    print(f"overhead: {where}, torch {torch.__version__}, models {' '.join(args.models)}, "
          f"{args.rounds} round(s)", flush=True)
    rounds: list[dict[str, dict[str, dict]]] = []
    doc: dict[str, Any] = {"device": where, "torch": torch.__version__, "cpus": os.cpu_count(),
                           "bytecode_cache": args.bytecode_cache, "results": {}, "rounds": rounds}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"overhead_{args.label}.json"
    sample = (args.sample, str(args.out / f"overhead_{args.label}_sampled")) if args.sample else None
    for n in range(args.rounds):
        # each round a cluster of its own and empty caches: its cold cases are cold again
        here = work / f"round{n}" if args.rounds > 1 else work
        here.mkdir(parents=True, exist_ok=True)
        ray_proc, ray_env = (None, {}) if args.no_cluster else start_ray(here)
        results: dict[str, dict[str, dict]] = {}
        rounds.append(results)
        try:
            for model in args.models:
                if args.rounds > 1:
                    print(f"round {n + 1}/{args.rounds}", flush=True)
                results[model] = run_model(model, device, args.cases, here, ray_env, args.timeout,
                                           profile=str(args.out / f"overhead_{args.label}") if args.profile else None,
                                           sample=sample if n == 0 else None, farm_first=n % 2 == 1,
                                           warm_index=args.warm_index)
                doc["results"] = rounds[0]  # written after each model: a time-out keeps what finished
                path.write_text(json.dumps(doc, indent=1))
            # printed before the cluster is stopped (its stop can take a minute: a time-out around
            # this script then still leaves the table)
            print()
            print(table(results))
            same = {m: len({r["loss"] for r in rows.values()}) == 1 for m, rows in results.items()}
            print(f"\nthe same loss (bitwise) in every case: {same}", flush=True)
            if n == args.rounds - 1 and args.rounds > 1:  # before the cluster's stop, which can take a minute
                doc["medians"] = medians(rounds)
                path.write_text(json.dumps(doc, indent=1))
                print("\n" + median_table(doc["medians"], args.rounds), flush=True)
        finally:
            if ray_proc is not None:
                stop_ray(ray_proc)
    results = rounds[0]
    try:
        sys.path.insert(0, str(HERE))
        from plot import grouped_bars_png

        png = grouped_bars_png(results, path.with_suffix(".png"), f"process start to first output, {where}")
        print(f"wrote {path} and {png}")
    except ImportError:
        print(f"wrote {path} (no plot: pip install matplotlib)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
