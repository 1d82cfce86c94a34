"""Where the farm's max-autotune picks part from stock's: one process, one GPU machine.

    python benchmarks/autotune_diagnose.py [--model llama|block] [--layers 1] [--gpus 1] [--steps 40] [--subproc]

One process with a local Ray (``--gpus`` GPU actors; with 1, the actor shares the driver's GPU, as
in the 1-GPU scaling run) and empty caches for each compile, ``max-autotune-no-cudagraphs``:

1. stock Inductor; every max-autotune decision's timings recorded (select_algorithm feedback);
2. with ``--subproc``: stock with ``autotune_in_subproc`` (Triton choices timed in Inductor's own
   tuning subprocess, ATen here: Inductor's own cross-process mix);
3. the farm (``raycompile.enable()``): the same decisions recorded; for each one, every Triton
   choice is also timed HERE after the actors timed it (actor/here ratio, rank agreement), and
   every config-tuned kernel's configs too; the actors' Triton cache is checked for kernels the
   actors compiled themselves (their cache key missed the farm's cubins).

Then the compiled functions step in this process, interleaved, twice (farm still enabled, then
after ``disable()``): wall ms per step (synchronized, as autotune_scaling measures) and GPU kernel
time per step (profiler), with the top GPU kernels of each. Prints ``RESULT PASS`` when the farm's
step is within 3% of stock's (wall and GPU time, both phases). Needs CUDA; transformers for llama.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_steps import MODE, QUALITY, build, feedback_saver, gpu_profile  # noqa: E402 - the scaling benchmark's models

T0 = time.perf_counter()


def say(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f}s] {msg}", flush=True)


# --- what each compile decided --------------------------------------------------------------------


def label(choice: Any) -> str:
    desc = getattr(choice, "description", "") or ""
    short = re.sub(r"\b(ACC_TYPE|ALLOW_TF32|EVEN_K|USE_FAST_ACCUM|GROUP_M)='?[^,]*'?,? ?", "", desc)
    return f"{getattr(choice, 'name', type(choice).__name__)}[{short.strip(', ')[:60]}]"


def is_extern(choice: Any) -> bool:
    return "Extern" in type(choice).__name__ or "Subgraph" in type(choice).__name__


@contextlib.contextmanager
def decisions_recorded(into: dict[str, dict[str, float]]) -> Iterator[None]:
    """Every max-autotune decision's timings (choice label -> ms), keyed by op and input sizes."""

    def saver(timings: dict[Any, float], name: str, input_nodes: Any, *_: Any) -> None:
        sizes = ",".join("x".join(str(d) for d in n.get_size()) for n in input_nodes)
        into[f"{name}({sizes})"] = {("ATEN " if is_extern(c) else "") + label(c): float(ms)
                                    for c, ms in timings.items()}

    with feedback_saver(saver) as hooked:
        if not hooked:
            say("(no select_algorithm feedback hook: no decisions table)")
        yield


@contextlib.contextmanager
def farm_compared(templates: list[dict[str, Any]], configs: list[dict[str, Any]], compare: int) -> Iterator[None]:
    """While the farm tunes: the actors' raw timings of each decision, and the ``compare`` fastest
    Triton choices on the actors (every config of a kernel) timed here as well (diagnostic only)."""
    from raycompile.wrapper import compat
    from raycompile.wrapper import gpu_autotune as at

    pool_benchmark, tuner_benchmark = at.FarmTuningPool.benchmark, at.ConfigTuner.benchmark_all_configs

    def spying(obj: Any) -> tuple[list[Any], Callable[[], None]]:
        seen: list[Any] = []
        run = obj._run

        def spy(work: Any) -> Any:
            out = run(work)
            seen.extend(out)
            return out

        obj._run = spy
        return seen, lambda: setattr(obj, "_run", run)

    def pool(self: Any, choices: Any) -> Any:
        seen, restore = spying(self)
        try:
            final = pool_benchmark(self, choices)
        finally:
            restore()
        ours = [c for c in choices if compat.autotune.is_gpu_template_choice(c)]
        if seen and len(seen) == len(ours):
            rows = []
            fastest = {id(c) for c, _ in sorted(zip(ours, seen), key=lambda p: p[1].ms)[:compare]}
            for c, t in zip(ours, seen):
                here = float("nan")
                if id(c) in fastest:
                    try:
                        here = compat.autotune.local_template_ms(c)
                    except Exception:
                        here = float("inf")
                rows.append((label(c), t.ms, here, final.get(c, float("nan")), t.seconds, t.gpu))
            sizes = ",".join("x".join(map(str, m.sizes)) for m in ours[0].bmreq.input_tensor_meta)
            templates.append({"rows": rows, "sizes": sizes})
        return final

    def tuner(self: Any, kernel: Any, stock: Any, *args: Any, **kwargs: Any) -> Any:
        seen, restore = spying(self)
        launchers = list(kernel.launchers)
        try:
            final = tuner_benchmark(self, kernel, stock, *args, **kwargs)
        finally:
            restore()
        if seen and len(seen) == len(launchers):
            rows = []
            for launcher, t in zip(launchers, seen):
                try:
                    here = compat.bench_launcher(kernel, launcher, args, kwargs)
                except Exception:
                    here = float("inf")
                rows.append((str(launcher.config), t.ms, here, final.get(launcher, float("nan")), t.seconds))
            configs.append({"kernel": kernel.fn.__name__, "rows": rows})
        return final

    at.FarmTuningPool.benchmark, at.ConfigTuner.benchmark_all_configs = pool, tuner
    try:
        yield
    finally:
        at.FarmTuningPool.benchmark, at.ConfigTuner.benchmark_all_configs = pool_benchmark, tuner_benchmark


def compile_case(name: str, fn: Callable[..., Any], args: tuple[Any, ...], work: str, options: dict[str, Any],
                 extra: contextlib.AbstractContextManager[Any] | None = None) -> dict[str, Any]:
    """``fn`` compiled under MODE (plus ``options``) as a function of its own (a copy of its code
    object named after the case): Dynamo keeps one cache per code object, so the cases never share or
    replace each other's graphs, and no torch._dynamo.reset() (which would make the earlier cases
    recompile, under whatever is enabled then) is needed."""
    import types

    import torch
    from torch._inductor import list_mode_options
    from torch._inductor.graph import GraphLowering
    from torch._inductor.utils import fresh_cache

    own = fn.__name__ + "_" + re.sub(r"\W", "_", name)
    fn = types.FunctionType(fn.__code__.replace(co_name=own), fn.__globals__, own, fn.__defaults__, fn.__closure__)
    decisions: dict[str, dict[str, float]] = {}
    with fresh_cache(dir=work, delete=False), decisions_recorded(decisions), (extra or contextlib.nullcontext()):
        with contextlib.suppress(Exception):  # the choices precompiled by an earlier case: not reused
            from torch._inductor.select_algorithm import get_algorithm_selector_cache

            get_algorithm_selector_cache().cache_clear()
        triton_dir = os.environ["TRITON_CACHE_DIR"]
        compiled = torch.compile(fn, options={**list_mode_options(MODE), **options})
        codes: list[str] = []
        t = time.perf_counter()
        # Inductor's run_and_get_code, less its torch._dynamo.reset() (the earlier cases would recompile)
        with mock.patch.object(GraphLowering, "save_output_code", codes.append):
            out = compiled(*args)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t
    say(f"{name}: compiled in {seconds:.1f} s, {len(decisions)} max-autotune decisions")
    return {"name": name, "fn": compiled, "out": out, "code": "\n".join(codes), "decisions": decisions,
            "compile_s": seconds, "triton_dir": triton_dir}


def code_summary(code: str) -> dict[str, Any]:
    """What the output module runs: ATen GEMM calls, Triton template kernels (with their config)."""
    call = code[code.find("def call("):] if "def call(" in code else code
    extern = re.findall(r"extern_kernels\.(\w+)\(", call)
    templates = {}
    for m in re.finditer(r"(triton_tem_\w+) = async_compile\.triton\('\w+', '''(.*?)'''", code, re.S):
        src = m.group(2)
        cfg = {k: v for k, v in re.findall(r"\b(BLOCK_[MNK]|num_stages|num_warps)\s*[:=][^=\n]*?=?\s*(\d+)", src)}
        templates[m.group(1)] = ",".join(f"{k}={v}" for k, v in sorted(cfg.items()))
    launches = len(re.findall(r"^\s+\w+\.run\(", call, re.M))
    return {"extern": extern, "templates": templates, "triton_launches": launches}


# --- stepping -------------------------------------------------------------------------------------


def graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def step_times(cases: list[dict[str, Any]], args: tuple[Any, ...], steps: int, rounds: int = 5) -> dict[str, float]:
    import torch

    before = graphs()
    times: dict[str, list[float]] = {c["name"]: [] for c in cases}
    for c in cases:  # warm
        for _ in range(3):
            c["fn"](*args)
    torch.cuda.synchronize()
    for _ in range(rounds):
        for c in cases:
            for _ in range(max(1, steps // rounds)):
                torch.cuda.synchronize()
                t = time.perf_counter()
                c["fn"](*args)
                torch.cuda.synchronize()
                times[c["name"]].append((time.perf_counter() - t) * 1e3)
    if graphs() != before:
        print(f"WARNING: {graphs() - before} graph(s) recompiled while stepping: the comparison is not valid")
    return {k: statistics.median(v) for k, v in times.items()}


# --- report ---------------------------------------------------------------------------------------


def spearman(a: list[float], b: list[float]) -> float:
    def ranks(x: list[float]) -> list[float]:
        order = sorted(range(len(x)), key=lambda i: x[i])
        r = [0.0] * len(x)
        for pos, i in enumerate(order):
            r[i] = float(pos)
        return r

    if len(a) < 3:
        return float("nan")
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return num / den if den else float("nan")


def report_decisions(cases: list[dict[str, Any]]) -> None:
    print("\n== max-autotune decisions: each case's fastest (and the best ATen) ==")
    keys = sorted({k for c in cases for k in c["decisions"]})
    for key in keys:
        print(f"  {key}")
        for c in cases:
            d = c["decisions"].get(key)
            if not d:
                print(f"    {c['name']:<12} (not autotuned)")
                continue
            best = min(d, key=d.__getitem__)
            aten = min((ms for lbl, ms in d.items() if lbl.startswith("ATEN")), default=float("nan"))
            triton = sorted((ms, lbl) for lbl, ms in d.items() if not lbl.startswith("ATEN"))
            top = f"{triton[0][1]} {triton[0][0]:.4f}" if triton else "-"
            print(f"    {c['name']:<12} pick {best} {d[best]:.4f} ms | ATen {aten:.4f} | best Triton {top}")


def report_farm(templates: list[dict[str, Any]], configs: list[dict[str, Any]]) -> None:
    inf = float("inf")
    print("\n== farm, max-autotune Triton choices: actor ms vs the same request timed here ==")
    ratios: list[float] = []
    for i, t in enumerate(templates):
        rows = [r for r in t["rows"] if r[1] < inf and r[2] < inf]
        if not rows:
            continue
        rs = [r[1] / r[2] for r in rows]
        ratios += rs
        actor_best = min(rows, key=lambda r: r[1])
        here_sorted = sorted(rows, key=lambda r: r[2])
        rank = here_sorted.index(actor_best) + 1
        print(f"  decision {i} ({t['sizes']}): {len(t['rows'])} choices ({len(rows)} also here); actor/here "
              f"median {statistics.median(rs):.3f} (min {min(rs):.3f}, max {max(rs):.3f}); rank corr "
              f"{spearman([r[1] for r in rows], [r[2] for r in rows]):.2f}; actor's fastest is #{rank} here "
              f"({actor_best[2]:.4f} vs best here {here_sorted[0][2]:.4f}); setup+time per job on actor "
              f"{statistics.mean(r[4] for r in t['rows']):.2f} s")
        for r in here_sorted[:3]:
            print(f"      {r[0]:<70} actor {r[1]:.4f} here {r[2]:.4f} reported {r[3]:.4f} ({r[5]})")
    if ratios:
        print(f"  ALL: actor/here ratio median {statistics.median(ratios):.3f}, "
              f"p10 {sorted(ratios)[len(ratios) // 10]:.3f}, p90 {sorted(ratios)[9 * len(ratios) // 10]:.3f}")
    print("\n== farm, kernel configs: actor ms vs here (real arguments) ==")
    for k in configs:
        rows = [r for r in k["rows"] if r[1] < inf and r[2] < inf]
        if not rows:
            print(f"  {k['kernel']}: no config timed on both")
            continue
        a = min(rows, key=lambda r: r[1])
        h = min(rows, key=lambda r: r[2])
        rep = min(k["rows"], key=lambda r: r[3])
        print(f"  {k['kernel'][:60]:<60} {len(k['rows'])} configs: actor's fastest here {a[2]:.4f}, best here "
              f"{h[2]:.4f}, picked here {rep[2]:.4f}; actor/here median "
              f"{statistics.median(r[1] / r[2] for r in rows):.3f}")


def cpu_profile(fn: Callable[..., Any], args: tuple[Any, ...], n: int = 30, top: int = 12) -> list[str]:
    """The Python functions a step spends its host time in (cProfile over ``n`` steps): where a
    launch-bound step's wall time goes. Lines: calls per step, tottime us per step, function."""
    import cProfile
    import pstats

    import torch

    fn(*args)
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn(*args)
    prof.disable()
    torch.cuda.synchronize()
    st = pstats.Stats(prof)
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:top]  # type: ignore[attr-defined]
    return [f"{nc / n:6.1f} calls {tt / n * 1e6:8.1f} us  {os.path.basename(f)}:{line}({name})"
            for (f, line, name), (_cc, nc, tt, _ct, _callers) in rows]


def actor_compiled(actor_triton: str, farm_triton: str) -> tuple[int, int]:
    """(Triton cache groups on the actors, of those not compiled by the farm's workers)."""
    def groups(d: str) -> set[str]:
        return {g for g in os.listdir(d) if os.path.isdir(os.path.join(d, g))} if os.path.isdir(d) else set()

    actor = groups(actor_triton)
    return len(actor), len(actor - groups(farm_triton))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama", choices=["llama", "block"])
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--gpus", type=int, default=1, help="GPU actors (the first N GPUs; 1: the driver's own)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--subproc", action="store_true", help="also stock with autotune_in_subproc")
    p.add_argument("--compare", type=int, default=8, help="Triton choices per decision also timed here")
    args = p.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    work = tempfile.mkdtemp(prefix="autotune-diagnose-")
    actor_cache = os.path.join(work, "actor-inductor")
    # the Ray workers (compile workers get the driver's dirs per job; GPU actors keep these) start
    # with their own Inductor/Triton cache, as on a GPU node of a real cluster
    saved = {k: os.environ.pop(k, None) for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = actor_cache
    import ray

    ray.init(num_gpus=args.gpus, include_dashboard=False, log_to_driver=False, namespace="raycompile")
    for k, v in saved.items():
        os.environ.pop(k, None)
        if v is not None:
            os.environ[k] = v
    say(f"Ray up with {args.gpus} GPU(s); torch {torch.__version__}; {torch.cuda.get_device_name(0)}; "
        f"model {args.model} x{args.layers}")
    fn, inputs = build(args.model, args.layers)
    cases = [compile_case("stock", fn, inputs, work, {})]
    if args.subproc:
        cases.append(compile_case("stock-subproc", fn, inputs, work, {"autotune_in_subproc": True}))

    import raycompile

    raycompile.enable(cache_dir=os.path.join(work, "raycompile"), shared_cache="none")
    templates: list[dict[str, Any]] = []
    configs: list[dict[str, Any]] = []
    try:
        farm = compile_case("farm", fn, inputs, work, {"trace.enabled": False},  # (a default: only a distinct key)
                            farm_compared(templates, configs, args.compare))
        cases.append(farm)
        stats = raycompile.stats()
        n = max(1, stats["benchmarks"])
        say(f"farm stats: benchmarks {stats['benchmarks']} ({stats['benchmark_seconds'] / n:.2f} s each on the "
            f"actors), confirmed here {stats.get('benchmarks_verified')}, failures {stats['benchmark_failures']}, "
            f"local {stats['benchmarks_local']}, gpus {stats['gpus']}, fallbacks {stats['fallbacks']}")
        total, own = actor_compiled(os.path.join(actor_cache, "triton", "0"), farm["triton_dir"])
        print(f"ACTOR TRITON CACHE: {total} kernel groups, {own} compiled by the actors themselves "
              f"(0: every actor hit the farm's cubins)")
        report_decisions(cases)
        report_farm(templates, configs)
        sys.stdout.flush()
        phase_a = step_times(cases, inputs, args.steps)
        prof_a = {c["name"]: gpu_profile(c["fn"], inputs) for c in cases}
    finally:
        raycompile.disable()
    phase_b = step_times(cases, inputs, args.steps)
    prof_b = {c["name"]: gpu_profile(c["fn"], inputs) for c in cases}
    ray.shutdown()

    print("\n== output modules ==")
    for c in cases:
        s = code_summary(c["code"])
        print(f"  {c['name']:<14} ATen GEMM calls {len([e for e in s['extern'] if 'mm' in e])} "
              f"{sorted(set(s['extern']))}; Triton launches {s['triton_launches']}; templates "
              f"{len(s['templates'])}: {sorted(set(s['templates'].values()))[:6]}")
    ok = True
    print("\n== steady state (same process, interleaved) ==")
    for phase, walls, profs in (("farm enabled", phase_a, prof_a), ("after disable", phase_b, prof_b)):
        base_wall, base_gpu = walls["stock"], profs["stock"][0]
        for c in cases:
            gpu, nk, top = profs[c["name"]]
            rw, rg = walls[c["name"]] / base_wall, gpu / base_gpu
            if c["name"] == "farm":
                ok = ok and rw <= QUALITY and rg <= QUALITY
            print(f"  {phase:<14} {c['name']:<14} wall {walls[c['name']]:.3f} ms ({rw:.3f}x)  GPU {gpu:.3f} ms "
                  f"({rg:.3f}x)  kernels/step {nk:.0f}")
    print("\n== host time per step (cProfile, after disable) ==")
    for c in cases:
        print(f"  {c['name']}:")
        for line in cpu_profile(c["fn"], inputs):
            print(f"    {line}")
    for c in cases:
        print(f"  top GPU kernels, {c['name']}: " + "; ".join(f"{k} {ms:.3f}" for k, ms in prof_b[c["name"]][2]))
    same = all(torch.allclose(c["out"].float(), cases[0]["out"].float(), rtol=5e-2, atol=5e-2) for c in cases)
    print(f"\noutputs close to stock's: {same}")
    print(f"RESULT {'PASS' if ok else 'FAIL'}: farm step within {QUALITY:.2f}x of stock "
          "(wall and GPU time, both phases)")


if __name__ == "__main__":
    main()
